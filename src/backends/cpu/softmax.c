/*
 * The CPU backend's fused softmax and log-softmax over the last axis, and the
 * gradient of cross-entropy from a log-softmax (backend.h, cross_entropy_backward).
 *
 * The composition in src/tensor/composite.c (max, subtract, exp, sum, divide) makes
 * five passes over the tensor and four full-size temporaries. Here each row is done
 * while it is in L1: its maximum, then exp(x - max) stored and summed, then one
 * scaling. Memory sees one read of the input and one write of the output.
 *
 * The semantics are the composition's, except that probabilities below FLT_MIN are
 * flushed to zero (exp_nonpositive): a row holding NaN gives NaN throughout (NaN
 * never wins the maximum, but exp(NaN - max) poisons the sum), a row of -inf gives
 * NaN (-inf - -inf), and +inf gives NaN too, as in PyTorch. The result does not
 * depend on the thread count: a row is never split.
 */
#include <math.h>
#include <stdint.h>

#include "cpu.h"
#include "vecmath.h"

/* Independent accumulators: the loops below then vectorize without reassociating one
 * running value, and several chains hide the latency of the maxima and adds. The
 * maximum's are 32 floats, two AVX-512 registers (with 16, GCC stops vectorizing it
 * below AVX-512). The sums' are two registers of the widest vectors the kernels are
 * built for: below AVX-512, 32 floats are four registers, which beside the
 * exponential's constants and temporaries do not fit in the 16 there, and GCC kept
 * them on the stack, each add waiting on the store before it. */
#define MAX_LANES 32
#if defined(__AVX512F__)
#define SUM_LANES 32
#else
#define SUM_LANES 16
#endif

static float row_max_f32(const float *restrict x, int64_t n)
{
    float acc[MAX_LANES];
    for (int k = 0; k < MAX_LANES; k++)
        acc[k] = -INFINITY;
    int64_t i = 0;
    for (; i + MAX_LANES <= n; i += MAX_LANES)
        for (int k = 0; k < MAX_LANES; k++)
            acc[k] = x[i + k] > acc[k] ? x[i + k] : acc[k];
    float m = -INFINITY;
    for (int k = 0; k < MAX_LANES; k++)
        m = acc[k] > m ? acc[k] : m;
    for (; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

/* e^x for x <= 0 (or nan), the only arguments softmax has once the row's maximum is
 * subtracted: vm_expf's reduction and polynomial without its overflow handling, and
 * with 2^n applied in one step because n >= -126. Arguments below -87 flush to zero
 * where vm_expf gives under 1.65e-38 (the smallest normal floats, and the subnormals
 * below them; FLT_MIN is e^-87.34): probabilities no sum or product of a softmax can
 * tell from zero. A third fewer instructions, and softmax is bound by them. */
static inline float exp_nonpositive(float x)
{
    int32_t n;
    float p = vm_exp_parts(vm_select(x < -87.0f, -87.0f, x), &n); /* false for nan, which passes through */
    return vm_select(x < -87.0f, 0.0f, p * vm_pow2i(n));
}

/* y = exp(x - m); returns the sum of y. */
static float row_exp_store_f32(const float *restrict x, float *restrict y, int64_t n, float m)
{
    float acc[SUM_LANES] = {0};
    int64_t i = 0;
    for (; i + SUM_LANES <= n; i += SUM_LANES)
        for (int k = 0; k < SUM_LANES; k++) {
            y[i + k] = exp_nonpositive(x[i + k] - m);
            acc[k] += y[i + k];
        }
    float s = 0;
    for (; i < n; i++) {
        y[i] = exp_nonpositive(x[i] - m);
        s += y[i];
    }
    for (int k = 0; k < SUM_LANES; k++)
        s += acc[k];
    return s;
}

/* The sum of exp(x - m), storing nothing. */
static float row_exp_sum_f32(const float *restrict x, int64_t n, float m)
{
    float acc[SUM_LANES] = {0};
    int64_t i = 0;
    for (; i + SUM_LANES <= n; i += SUM_LANES)
        for (int k = 0; k < SUM_LANES; k++)
            acc[k] += exp_nonpositive(x[i + k] - m);
    float s = 0;
    for (; i < n; i++)
        s += exp_nonpositive(x[i] - m);
    for (int k = 0; k < SUM_LANES; k++)
        s += acc[k];
    return s;
}

static void row_f32(const float *restrict x, float *restrict y, int64_t n, bool logarithm)
{
    float m = row_max_f32(x, n);
    if (logarithm) {
        /* (x - m) - log s, not x - (m + log s): m + log s rounds away small
         * differences when m is large. */
        float log_sum = vm_logf(row_exp_sum_f32(x, n, m));
        for (int64_t i = 0; i < n; i++)
            y[i] = (x[i] - m) - log_sum;
    } else {
        float scale = 1.0f / row_exp_store_f32(x, y, n, m);
        for (int64_t i = 0; i < n; i++)
            y[i] *= scale;
    }
}

/* f64 keeps libm's exp and log: the rare case, and no vectorized double exp here. */
static void row_f64(const double *x, double *y, int64_t n, bool logarithm)
{
    double m = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        m = x[i] > m ? x[i] : m;
    double s = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = exp(x[i] - m);
        if (!logarithm)
            y[i] = e;
        s += e;
    }
    if (logarithm) {
        double log_sum = log(s);
        for (int64_t i = 0; i < n; i++)
            y[i] = (x[i] - m) - log_sum;
    } else {
        for (int64_t i = 0; i < n; i++)
            y[i] /= s;
    }
}

static int cpu_softmax(const fl_backend *self, fl_tensor *out, const fl_tensor *a, bool logarithm)
{
    if (a->dtype != FL_F32 && a->dtype != FL_F64)
        return fl_backend_error(FL_ERR_DTYPE, "softmax takes f32 or f64, not %s", fl_dtype_name(a->dtype));
    int rc = cpu_alloc(out);
    if (rc)
        return rc;
    if (a->numel == 0)
        return 0;
    void *scratch = NULL;
    const void *x = cpu_dense(a, &scratch);
    if (!x)
        return fl_backend_error(FL_ERR_MEMORY, "cannot allocate a dense copy of %lld elements", (long long)a->numel);
    int64_t n = a->shape[a->ndim - 1], rows = a->numel / n;
    void *y = cpu_data(out);
    bool parallel = a->numel >= CPU_PARALLEL_GRAIN && rows > 1;
    int threads = parallel ? cpu_threads() : 1;
    if (a->dtype == FL_F32) {
#pragma omp parallel for schedule(static) if (parallel) num_threads(threads)
        for (int64_t r = 0; r < rows; r++)
            row_f32((const float *)x + r * n, (float *)y + r * n, n, logarithm);
    } else {
#pragma omp parallel for schedule(static) if (parallel) num_threads(threads)
        for (int64_t r = 0; r < rows; r++)
            row_f64((const double *)x + r * n, (double *)y + r * n, n, logarithm);
    }
    cpu_scratch_free(scratch);
    return 0;
}

/* ---- the gradient of cross-entropy ----
 *
 * Each row of dlogits is written once: (exp(log_probs) + shift) scale, then the
 * target's term added to its one entry. The operations are the composition's, in its
 * order (exp, add_scalar, mul, then scatter_add's sum), with its scalars rounded to
 * the dtype as fl_add_scalar and fl_mul_scalar round them, so the values agree with
 * it to rounding. */

typedef struct cross_entropy_terms {
    double shift;     /* -smoothing / C; 0 adds nothing (and is skipped, as composed) */
    double at_target; /* -(1 - smoothing) */
} cross_entropy_terms;

static void cross_entropy_row_f32(float *restrict d, const float *restrict lp, int64_t n, float scale,
                                  const cross_entropy_terms *k, int64_t target)
{
    float shift = (float)k->shift;
    if (k->shift != 0)
        for (int64_t i = 0; i < n; i++)
            d[i] = (vm_expf(lp[i]) + shift) * scale;
    else
        for (int64_t i = 0; i < n; i++)
            d[i] = vm_expf(lp[i]) * scale;
    float term = scale * (float)k->at_target;
    d[target] = d[target] + term;
}

static void cross_entropy_row_f64(double *restrict d, const double *restrict lp, int64_t n, double scale,
                                  const cross_entropy_terms *k, int64_t target)
{
    if (k->shift != 0)
        for (int64_t i = 0; i < n; i++)
            d[i] = (exp(lp[i]) + k->shift) * scale;
    else
        for (int64_t i = 0; i < n; i++)
            d[i] = exp(lp[i]) * scale;
    double term = scale * k->at_target;
    d[target] = d[target] + term;
}

static int cpu_cross_entropy_backward(const fl_backend *self, fl_tensor *dlogits, const fl_tensor *log_probs,
                                      const fl_tensor *index, const fl_tensor *scale, double smoothing)
{
    if (log_probs->dtype != FL_F32 && log_probs->dtype != FL_F64)
        return fl_backend_error(FL_ERR_UNSUPPORTED, "cross_entropy_backward has f32 and f64 kernels, not %s",
                                fl_dtype_name(log_probs->dtype));
    int64_t n = log_probs->ndim == 2 ? log_probs->shape[1] : 0, rows = log_probs->ndim == 2 ? log_probs->shape[0] : 0;
    if (log_probs->ndim != 2 || n == 0 || index->dtype != FL_I64 || scale->dtype != log_probs->dtype ||
        index->numel != rows || scale->numel != rows)
        return fl_backend_error(FL_ERR_SHAPE, "cross_entropy_backward needs log_probs [N, C] with C > 0, index [N, 1] "
                                              "of i64 and scale [N, 1] of log_probs's dtype");
    int rc = cpu_alloc(dlogits);
    if (rc || rows == 0)
        return rc;
    const fl_tensor *in[3] = {log_probs, index, scale};
    const void *data[3];
    void *scratch[3];
    if ((rc = cpu_dense_all(3, in, data, scratch)))
        return rc;
    const int64_t *targets = data[1];
    cross_entropy_terms terms = {-smoothing / (double)n, -(1 - smoothing)};
    bool parallel = log_probs->numel >= CPU_PARALLEL_GRAIN && rows > 1;
    int threads = parallel ? cpu_threads() : 1;
#pragma omp parallel for schedule(static) if (parallel) num_threads(threads)
    for (int64_t r = 0; r < rows; r++) {
        if (log_probs->dtype == FL_F32)
            cross_entropy_row_f32((float *)cpu_data(dlogits) + r * n, (const float *)data[0] + r * n, n,
                                  ((const float *)data[2])[r], &terms, targets[r]);
        else
            cross_entropy_row_f64((double *)cpu_data(dlogits) + r * n, (const double *)data[0] + r * n, n,
                                  ((const double *)data[2])[r], &terms, targets[r]);
    }
    cpu_scratch_free_all(3, scratch);
    return 0;
}

void cpu_register_softmax(fl_backend *b)
{
    b->softmax = cpu_softmax;
    b->cross_entropy_backward = cpu_cross_entropy_backward;
}
