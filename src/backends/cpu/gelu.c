/*
 * The CPU backend's fused GELU and GELU gradient, exact (erf) and tanh-approximate,
 * with the formulas of gelu.h.
 *
 * The compositions in src/autograd/activation.c take five passes over memory forward
 * and eleven backward, each a full-size temporary and a fork and join of the threads;
 * here each element is read once (twice with its gradient) and written once.
 */
#include "cpu.h"
#include "gelu.h"
#include "vecmath.h"

/* One loop per form and direction, with no branch inside, so that each vectorizes
 * (vecmath's functions are branch-free for that reason). */
#define GELU_LOOP(type, expr)                                                                      \
    do {                                                                                         \
        const type *restrict x = xv;                                                             \
        const type *restrict g = dyv;                                                            \
        type *restrict y = yv;                                                                   \
        (void)g;                                                                                 \
        _Pragma("omp parallel for simd num_threads(threads) if(threads > 1) schedule(static)")   \
        for (int64_t i = 0; i < n; i++) {                                                        \
            type v = x[i];                                                                       \
            y[i] = (expr);                                                                       \
        }                                                                                        \
    } while (0)

#define GELU_FORMS(type, erf_fn, exp_fn, tanh_fn)                                        \
    do {                                                                               \
        if (approximate && dy)                                                         \
            GELU_LOOP(type, g[i] * GELU_TANH_SLOPE(type, v, GELU_TANH_TERM(type, v, tanh_fn))); \
        else if (approximate)                                                          \
            GELU_LOOP(type, GELU_TANH_VALUE(type, v, GELU_TANH_TERM(type, v, tanh_fn))); \
        else if (dy)                                                                   \
            GELU_LOOP(type, g[i] * GELU_SLOPE(type, v, erf_fn, exp_fn));              \
        else                                                                           \
            GELU_LOOP(type, GELU_VALUE(type, v, erf_fn));                              \
    } while (0)

static int cpu_gelu(const fl_backend *self, fl_tensor *out, const fl_tensor *a, const fl_tensor *dy, bool approximate)
{
    if (a->dtype != FL_F32 && a->dtype != FL_F64)
        return fl_backend_error(FL_ERR_DTYPE, "gelu takes f32 or f64, not %s", fl_dtype_name(a->dtype));
    if (dy && (dy->dtype != a->dtype || dy->numel != a->numel))
        return fl_backend_error(FL_ERR_SHAPE, "the gelu gradient needs dy of x's dtype and size");
    int rc = cpu_alloc(out);
    if (rc || a->numel == 0)
        return rc;
    void *x_scratch = NULL, *dy_scratch = NULL;
    const void *xv = cpu_dense(a, &x_scratch), *dyv = dy ? cpu_dense(dy, &dy_scratch) : NULL;
    if (!xv || (dy && !dyv)) {
        cpu_scratch_free(x_scratch);
        cpu_scratch_free(dy_scratch);
        return fl_backend_error(FL_ERR_MEMORY, "cannot allocate a dense copy of %lld elements", (long long)a->numel);
    }
    void *yv = cpu_data(out);
    int64_t n = a->numel;
    int threads = n >= CPU_PARALLEL_GRAIN ? cpu_threads() : 1;
    if (a->dtype == FL_F32)
        GELU_FORMS(float, vm_erff, vm_expf, vm_tanhf);
    else
        GELU_FORMS(double, erf, exp, tanh);
    cpu_scratch_free(x_scratch);
    cpu_scratch_free(dy_scratch);
    return 0;
}

void cpu_register_gelu(fl_backend *b) { b->gelu = cpu_gelu; }
