/*
 * The CPU backend's fused batch normalization, forward and backward.
 *
 * The composition in src/nn/norm.c (mean, var, sub, rsqrt, mul, add; and for the
 * gradient mean, sub, mul, sum) makes about ten passes over a tensor of x's size and
 * as many full-size temporaries. Here a channel is one task: x [N, C, S] holds it as
 * N runs of S contiguous values, which for the images of a convolution network fit in
 * L2, so the second and third passes over a channel read from cache.
 *
 * Forward (training): the mean, then the variance around it (two passes, not the sum
 * of squares, which cancels catastrophically when the mean is large against the
 * spread), then y = x scale + shift with scale = weight / sqrt(var + eps) and shift =
 * bias - mean scale. Backward: the sums of dy and dy (x - mean), then dx in one pass.
 * Sums accumulate in double per run of S and across runs, so the result does not
 * depend on the thread count: a channel is never split.
 */
#include <math.h>
#include <stdint.h>

#include "cpu.h"

/* Independent float accumulators: the inner loops vectorize without reassociating one
 * running value (as in softmax.c). */
#define LANES 16

/* The geometry of x [N, C, S...]: n runs of s values per channel, c channels. */
typedef struct bn_shape {
    int64_t n, c, s;
} bn_shape;

static bn_shape shape_of(const fl_tensor *x)
{
    bn_shape g = {x->shape[0], x->shape[1], 1};
    for (int i = 2; i < x->ndim; i++)
        g.s *= x->shape[i];
    return g;
}

static double run_sum_f32(const float *restrict x, int64_t s)
{
    float acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= s; i += LANES)
        for (int k = 0; k < LANES; k++)
            acc[k] += x[i + k];
    double total = 0;
    for (; i < s; i++)
        total += x[i];
    for (int k = 0; k < LANES; k++)
        total += acc[k];
    return total;
}

static double run_squares_f32(const float *restrict x, int64_t s, float mean)
{
    float acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= s; i += LANES)
        for (int k = 0; k < LANES; k++) {
            float d = x[i + k] - mean;
            acc[k] += d * d;
        }
    double total = 0;
    for (; i < s; i++)
        total += (double)(x[i] - mean) * (x[i] - mean);
    for (int k = 0; k < LANES; k++)
        total += acc[k];
    return total;
}

/* sum dy and sum dy (x - mean) over a run. */
static void run_grad_sums_f32(const float *restrict dy, const float *restrict x, int64_t s, float mean,
                              double *sum_dy, double *sum_dy_x)
{
    float a[LANES] = {0}, b[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= s; i += LANES)
        for (int k = 0; k < LANES; k++) {
            a[k] += dy[i + k];
            b[k] += dy[i + k] * (x[i + k] - mean);
        }
    double ta = 0, tb = 0;
    for (; i < s; i++) {
        ta += dy[i];
        tb += (double)dy[i] * (x[i] - mean);
    }
    for (int k = 0; k < LANES; k++) {
        ta += a[k];
        tb += b[k];
    }
    *sum_dy += ta;
    *sum_dy_x += tb;
}

/* Element c of a [C] vector of x's dtype as a double; a NULL vector reads as `absent`. */
static double param(const void *v, fl_dtype dtype, int64_t c, double absent)
{
    if (!v)
        return absent;
    return dtype == FL_F32 ? ((const float *)v)[c] : ((const double *)v)[c];
}

static void store(fl_tensor *t, int64_t c, double value)
{
    if (!t)
        return;
    if (t->dtype == FL_F32)
        ((float *)cpu_data(t))[c] = (float)value;
    else
        ((double *)cpu_data(t))[c] = value;
}

/* Dense pointers to count tensors (NULL ones stay NULL), copies in scratch[i] where a
 * tensor is a strided view; false if a copy cannot be allocated (nothing is left held). */
static bool dense_all(int count, const fl_tensor *const *t, const void **data, void **scratch)
{
    for (int i = 0; i < count; i++) {
        scratch[i] = NULL;
        data[i] = t[i] ? cpu_dense(t[i], &scratch[i]) : NULL;
        if (t[i] && !data[i]) {
            for (int j = 0; j < i; j++)
                cpu_scratch_free(scratch[j]);
            return false;
        }
    }
    return true;
}

/* Allocates each of the outputs that is not NULL. */
static int alloc_all(int count, fl_tensor *const *outs)
{
    for (int i = 0; i < count; i++) {
        int rc = outs[i] ? cpu_alloc(outs[i]) : 0;
        if (rc)
            return rc;
    }
    return 0;
}

static void free_all(int count, void **scratch)
{
    for (int i = 0; i < count; i++)
        cpu_scratch_free(scratch[i]);
}

/* ---- one channel, f32 and f64 ---- */

static void forward_channel_f32(const float *x, float *y, bn_shape g, int64_t c, bool training, double *mean,
                                double *var, double eps, double weight, double bias)
{
    int64_t count = g.n * g.s;
    if (training) {
        double sum = 0;
        for (int64_t n = 0; n < g.n; n++)
            sum += run_sum_f32(x + (n * g.c + c) * g.s, g.s);
        *mean = sum / (double)count;
        double squares = 0;
        for (int64_t n = 0; n < g.n; n++)
            squares += run_squares_f32(x + (n * g.c + c) * g.s, g.s, (float)*mean);
        *var = squares / (double)count;
    }
    double invstd = 1 / sqrt(*var + eps);
    float scale = (float)(invstd * weight), shift = (float)(bias - *mean * invstd * weight);
    for (int64_t n = 0; n < g.n; n++) {
        const float *restrict xr = x + (n * g.c + c) * g.s;
        float *restrict yr = y + (n * g.c + c) * g.s;
        for (int64_t i = 0; i < g.s; i++)
            yr[i] = xr[i] * scale + shift;
    }
}

static void forward_channel_f64(const double *x, double *y, bn_shape g, int64_t c, bool training, double *mean,
                                double *var, double eps, double weight, double bias)
{
    int64_t count = g.n * g.s;
    if (training) {
        double sum = 0, squares = 0;
        for (int64_t n = 0; n < g.n; n++)
            for (int64_t i = 0; i < g.s; i++)
                sum += x[(n * g.c + c) * g.s + i];
        *mean = sum / (double)count;
        for (int64_t n = 0; n < g.n; n++)
            for (int64_t i = 0; i < g.s; i++) {
                double d = x[(n * g.c + c) * g.s + i] - *mean;
                squares += d * d;
            }
        *var = squares / (double)count;
    }
    double scale = weight / sqrt(*var + eps), shift = bias - *mean * scale;
    for (int64_t n = 0; n < g.n; n++)
        for (int64_t i = 0; i < g.s; i++)
            y[(n * g.c + c) * g.s + i] = x[(n * g.c + c) * g.s + i] * scale + shift;
}

/* dx = weight invstd (dy - sum_dy / M - (x - mean) invstd^2 sum_dy_x / M) in training,
 * weight invstd dy otherwise; the sums come back for dweight and dbias. */
static void backward_channel_f32(const float *dy, const float *x, float *dx, bn_shape g, int64_t c, bool training,
                                 double mean, double invstd, double weight, double *sum_dy, double *sum_dy_x)
{
    *sum_dy = *sum_dy_x = 0;
    for (int64_t n = 0; n < g.n; n++)
        run_grad_sums_f32(dy + (n * g.c + c) * g.s, x + (n * g.c + c) * g.s, g.s, (float)mean, sum_dy, sum_dy_x);
    if (!dx)
        return;
    double count = (double)(g.n * g.s), scale = weight * invstd;
    float a = (float)scale, k = 0, b = 0; /* dx = a dy - k x + b */
    if (training) {
        double mean_dy = *sum_dy / count, proj = *sum_dy_x / count * invstd * invstd;
        k = (float)(scale * proj);
        b = (float)(scale * (proj * mean - mean_dy));
    }
    for (int64_t n = 0; n < g.n; n++) {
        const float *restrict dyr = dy + (n * g.c + c) * g.s, *restrict xr = x + (n * g.c + c) * g.s;
        float *restrict dxr = dx + (n * g.c + c) * g.s;
        for (int64_t i = 0; i < g.s; i++)
            dxr[i] = a * dyr[i] - k * xr[i] + b;
    }
}

static void backward_channel_f64(const double *dy, const double *x, double *dx, bn_shape g, int64_t c,
                                 bool training, double mean, double invstd, double weight, double *sum_dy,
                                 double *sum_dy_x)
{
    *sum_dy = *sum_dy_x = 0;
    for (int64_t n = 0; n < g.n; n++)
        for (int64_t i = 0; i < g.s; i++) {
            int64_t j = (n * g.c + c) * g.s + i;
            *sum_dy += dy[j];
            *sum_dy_x += dy[j] * (x[j] - mean);
        }
    if (!dx)
        return;
    double count = (double)(g.n * g.s), scale = weight * invstd;
    double mean_dy = training ? *sum_dy / count : 0, proj = training ? *sum_dy_x / count * invstd * invstd : 0;
    for (int64_t n = 0; n < g.n; n++)
        for (int64_t i = 0; i < g.s; i++) {
            int64_t j = (n * g.c + c) * g.s + i;
            dx[j] = scale * (dy[j] - mean_dy - (x[j] - mean) * proj);
        }
}

/* ---- the entries ---- */

static bool parallel_over_channels(const fl_tensor *x)
{
    return x->numel >= CPU_PARALLEL_GRAIN && x->shape[1] > 1;
}

static int cpu_batch_norm(const fl_backend *self, fl_tensor *y, fl_tensor *save_mean, fl_tensor *save_var, const fl_tensor *x,
                          const fl_tensor *weight, const fl_tensor *bias, const fl_tensor *running_mean,
                          const fl_tensor *running_var, double eps)
{
    if (x->dtype != FL_F32 && x->dtype != FL_F64)
        return fl_backend_error(FL_ERR_DTYPE, "batch_norm takes f32 or f64, not %s", fl_dtype_name(x->dtype));
    bool training = !running_mean;
    fl_tensor *outs[3] = {y, training ? save_mean : NULL, training ? save_var : NULL};
    int rc = alloc_all(3, outs);
    if (rc)
        return rc;
    enum { X, WEIGHT, BIAS, RUNNING_MEAN, RUNNING_VAR, INPUTS };
    const fl_tensor *inputs[INPUTS] = {x, weight, bias, running_mean, running_var};
    const void *d[INPUTS];
    void *scratch[INPUTS];
    if (!dense_all(INPUTS, inputs, d, scratch))
        return fl_backend_error(FL_ERR_MEMORY, "cannot allocate a dense copy of %lld elements", (long long)x->numel);
    bn_shape g = shape_of(x);
    fl_dtype dtype = x->dtype;
    void *yd = cpu_data(y);
    bool parallel = parallel_over_channels(x);
    int threads = parallel ? cpu_threads() : 1;
#pragma omp parallel for schedule(static) if (parallel) num_threads(threads)
    for (int64_t c = 0; c < g.c; c++) {
        double mean = param(d[RUNNING_MEAN], dtype, c, 0), var = param(d[RUNNING_VAR], dtype, c, 1);
        double w = param(d[WEIGHT], dtype, c, 1), b = param(d[BIAS], dtype, c, 0);
        if (dtype == FL_F32)
            forward_channel_f32(d[X], yd, g, c, training, &mean, &var, eps, w, b);
        else
            forward_channel_f64(d[X], yd, g, c, training, &mean, &var, eps, w, b);
        if (training) {
            store(save_mean, c, mean);
            store(save_var, c, var);
        }
    }
    free_all(INPUTS, scratch);
    return 0;
}

static int cpu_batch_norm_backward(const fl_backend *self, fl_tensor *dx, fl_tensor *dweight, fl_tensor *dbias, const fl_tensor *dy,
                                   const fl_tensor *x, const fl_tensor *mean, const fl_tensor *invstd,
                                   const fl_tensor *weight, bool training)
{
    if (x->dtype != FL_F32 && x->dtype != FL_F64)
        return fl_backend_error(FL_ERR_DTYPE, "batch_norm_backward takes f32 or f64, not %s",
                                fl_dtype_name(x->dtype));
    fl_tensor *outs[3] = {dx, dweight, dbias};
    int rc = alloc_all(3, outs);
    if (rc)
        return rc;
    enum { DY, X, MEAN, INVSTD, WEIGHT, INPUTS };
    const fl_tensor *inputs[INPUTS] = {dy, x, mean, invstd, weight};
    const void *d[INPUTS];
    void *scratch[INPUTS];
    if (!dense_all(INPUTS, inputs, d, scratch))
        return fl_backend_error(FL_ERR_MEMORY, "cannot allocate a dense copy of %lld elements", (long long)x->numel);
    bn_shape g = shape_of(x);
    fl_dtype dtype = x->dtype;
    void *dxd = dx ? cpu_data(dx) : NULL;
    bool parallel = parallel_over_channels(x);
    int threads = parallel ? cpu_threads() : 1;
#pragma omp parallel for schedule(static) if (parallel) num_threads(threads)
    for (int64_t c = 0; c < g.c; c++) {
        double m = param(d[MEAN], dtype, c, 0), s = param(d[INVSTD], dtype, c, 1), w = param(d[WEIGHT], dtype, c, 1);
        double sum_dy, sum_dy_x;
        if (dtype == FL_F32)
            backward_channel_f32(d[DY], d[X], dxd, g, c, training, m, s, w, &sum_dy, &sum_dy_x);
        else
            backward_channel_f64(d[DY], d[X], dxd, g, c, training, m, s, w, &sum_dy, &sum_dy_x);
        store(dweight, c, sum_dy_x * s);
        store(dbias, c, sum_dy);
    }
    free_all(INPUTS, scratch);
    return 0;
}

void cpu_register_batch_norm(fl_backend *b)
{
    b->batch_norm = cpu_batch_norm;
    b->batch_norm_backward = cpu_batch_norm_backward;
}
