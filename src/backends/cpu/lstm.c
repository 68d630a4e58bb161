/*
 * The CPU backend's fused LSTM cell and its gradient (backend.h, lstm_cell).
 *
 * Composed of primitives, a step of an LSTM is about ten calls forward and as many
 * backward over [N, 4H] and [N, H] tensors, which at a language model's sizes
 * ([20, 1024]) cost more in calls, forks and temporaries than in arithmetic; here each
 * row is read once and its outputs written once. The activations are the elementwise
 * kernels' own (vm_sigmoidf and vm_tanhf for f32, libm's for f64) and the products
 * are taken in the composition's order, so the results agree with it to rounding.
 */
#include <math.h>

#include "cpu.h"
#include "vecmath.h"

#define SIGMOID_F64(x) (1.0 / (1.0 + exp(-(x))))

/* Row r of pre [N, 4H] and c_prev [N, H] to gates, c and h. */
#define CELL_ROWS(type, sigmoid, tanh_fn)                                                            \
    do {                                                                                             \
        const type *restrict p_ = prev, *restrict cp_ = cprevv;                                      \
        type *restrict a_ = gatesv, *restrict c_ = cv, *restrict h_ = hv;                            \
        _Pragma("omp parallel for num_threads(threads) if(threads > 1) schedule(static)")            \
        for (int64_t r = 0; r < rows; r++) {                                                         \
            const type *restrict p = p_ + r * 4 * hs;                                                \
            const type *restrict cp = cp_ + r * hs;                                                  \
            type *restrict a = a_ + r * 4 * hs, *restrict c = c_ + r * hs, *restrict h = h_ + r * hs; \
            _Pragma("omp simd")                                                                      \
            for (int64_t j = 0; j < hs; j++) {                                                       \
                type i = sigmoid(p[j]), f = sigmoid(p[hs + j]), g = tanh_fn(p[2 * hs + j]),          \
                     o = sigmoid(p[3 * hs + j]);                                                     \
                type cell = f * cp[j] + i * g;                                               \
                a[j] = i;                                                                            \
                a[hs + j] = f;                                                                       \
                a[2 * hs + j] = g;                                                                   \
                a[3 * hs + j] = o;                                                                   \
                c[j] = cell;                                                                         \
                h[j] = o * tanh_fn(cell);                                                            \
            }                                                                                        \
        }                                                                                            \
    } while (0)

/* Row r of the gradient: dc' = dc + dh o (1 - tanh(c)^2), then each gate's. */
#define CELL_GRAD_ROWS(type, tanh_fn)                                                                \
    do {                                                                                             \
        const type *restrict dh_ = dhv, *restrict dc_ = dcv, *restrict a_ = gatesv;                  \
        const type *restrict cp_ = cprevv, *restrict c_ = cv;                                        \
        type *restrict d_ = dprev, *restrict dcp_ = dcprevv;                                         \
        _Pragma("omp parallel for num_threads(threads) if(threads > 1) schedule(static)")            \
        for (int64_t r = 0; r < rows; r++) {                                                         \
            const type *restrict dh = dh_ + r * hs, *restrict dc = dc_ + r * hs;                     \
            const type *restrict a = a_ + r * 4 * hs, *restrict cp = cp_ + r * hs;                   \
            const type *restrict c = c_ + r * hs;                                                    \
            type *restrict d = d_ + r * 4 * hs, *restrict dcp = dcp_ + r * hs;                       \
            _Pragma("omp simd")                                                                      \
            for (int64_t j = 0; j < hs; j++) {                                                       \
                type i = a[j], f = a[hs + j], g = a[2 * hs + j], o = a[3 * hs + j];                  \
                type t = tanh_fn(c[j]);                                                              \
                type total = dc[j] + (dh[j] * o) * (1 - t * t);                                      \
                d[j] = (total * g) * (i - i * i);                                                    \
                d[hs + j] = (total * cp[j]) * (f - f * f);                                           \
                d[2 * hs + j] = (total * i) * (1 - g * g);                                           \
                d[3 * hs + j] = (dh[j] * t) * (o - o * o);                                           \
                dcp[j] = total * f;                                                                  \
            }                                                                                        \
        }                                                                                            \
    } while (0)

/* Dense views of count inputs (scratch copies where one is strided), or an error;
 * the scratch is freed by release_dense. */
static int dense_inputs(int count, const fl_tensor *const *in, const void **data, void **scratch)
{
    for (int k = 0; k < count; k++) {
        scratch[k] = NULL;
        data[k] = cpu_dense(in[k], &scratch[k]);
        if (!data[k]) {
            for (int j = 0; j <= k; j++)
                cpu_scratch_free(scratch[j]);
            return fl_backend_error(FL_ERR_MEMORY, "cannot allocate a dense copy of %lld elements",
                                    (long long)in[k]->numel);
        }
    }
    return 0;
}

static void release_dense(int count, void **scratch)
{
    for (int k = 0; k < count; k++)
        cpu_scratch_free(scratch[k]);
}

static int check_dtypes(const char *what, int count, const fl_tensor *const *in)
{
    if (in[0]->dtype != FL_F32 && in[0]->dtype != FL_F64)
        return fl_backend_error(FL_ERR_DTYPE, "%s takes f32 or f64, not %s", what, fl_dtype_name(in[0]->dtype));
    for (int k = 1; k < count; k++)
        if (in[k]->dtype != in[0]->dtype)
            return fl_backend_error(FL_ERR_DTYPE, "%s needs inputs of one dtype", what);
    return 0;
}

static int threads_for(int64_t elements) { return elements >= CPU_PARALLEL_GRAIN ? cpu_threads() : 1; }

static int cpu_lstm_cell(const fl_backend *self, fl_tensor *gates, fl_tensor *c_out, fl_tensor *h_out,
                         const fl_tensor *pre, const fl_tensor *c_prev)
{
    const fl_tensor *in[2] = {pre, c_prev};
    int rc = check_dtypes("lstm_cell", 2, in);
    if (rc)
        return rc;
    if (pre->ndim != 2 || c_prev->ndim != 2 || pre->shape[1] != 4 * c_prev->shape[1] ||
        pre->shape[0] != c_prev->shape[0])
        return fl_backend_error(FL_ERR_SHAPE, "lstm_cell needs pre [N, 4H] and c_prev [N, H]");
    if ((rc = cpu_alloc(gates)) || (rc = cpu_alloc(c_out)) || (rc = cpu_alloc(h_out)) || pre->numel == 0)
        return rc;
    const void *data[2];
    void *scratch[2];
    if ((rc = dense_inputs(2, in, data, scratch)))
        return rc;
    const void *prev = data[0], *cprevv = data[1];
    void *gatesv = cpu_data(gates), *cv = cpu_data(c_out), *hv = cpu_data(h_out);
    int64_t rows = pre->shape[0], hs = c_prev->shape[1];
    int threads = threads_for(pre->numel);
    if (pre->dtype == FL_F32)
        CELL_ROWS(float, vm_sigmoidf, vm_tanhf);
    else
        CELL_ROWS(double, SIGMOID_F64, tanh);
    release_dense(2, scratch);
    return 0;
}

static int cpu_lstm_cell_backward(const fl_backend *self, fl_tensor *dpre, fl_tensor *dc_prev, const fl_tensor *dh_in,
                                  const fl_tensor *dc_in, const fl_tensor *gates, const fl_tensor *c_prev,
                                  const fl_tensor *c_in)
{
    const fl_tensor *in[5] = {gates, dh_in, dc_in, c_prev, c_in};
    int rc = check_dtypes("lstm_cell_backward", 5, in);
    if (rc)
        return rc;
    int64_t rows = gates->ndim == 2 ? gates->shape[0] : -1, hs = gates->ndim == 2 ? gates->shape[1] / 4 : -1;
    for (int k = 1; k < 5; k++)
        if (in[k]->ndim != 2 || in[k]->shape[0] != rows || in[k]->shape[1] != hs || gates->shape[1] != 4 * hs)
            return fl_backend_error(FL_ERR_SHAPE, "lstm_cell_backward needs gates [N, 4H] and the rest [N, H]");
    if ((rc = cpu_alloc(dpre)) || (rc = cpu_alloc(dc_prev)) || gates->numel == 0)
        return rc;
    const void *data[5];
    void *scratch[5];
    if ((rc = dense_inputs(5, in, data, scratch)))
        return rc;
    const void *gatesv = data[0], *dhv = data[1], *dcv = data[2], *cprevv = data[3], *cv = data[4];
    void *dprev = cpu_data(dpre), *dcprevv = cpu_data(dc_prev);
    int threads = threads_for(gates->numel);
    if (gates->dtype == FL_F32)
        CELL_GRAD_ROWS(float, vm_tanhf);
    else
        CELL_GRAD_ROWS(double, tanh);
    release_dense(5, scratch);
    return 0;
}

void cpu_register_lstm(fl_backend *b)
{
    b->lstm_cell = cpu_lstm_cell;
    b->lstm_cell_backward = cpu_lstm_cell_backward;
}
