/*
 * GELU and its gradient: composed of primitives, which defines them, or the
 * backend's optional fused kernel where it has one for the dtype (one pass instead
 * of five or eleven).
 */
#include <math.h>
#include <string.h>

#include "internal.h"

/* The constants of the tanh approximation, 0.5 x (1 + tanh(k (x + a x^3))). */
#define GELU_K 0.7978845608028654 /* sqrt(2 / pi) */
#define GELU_A 0.044715

/* tanh(k (x + a x^3)) of the approximation. */
static fl_tensor *gelu_tanh_term(const fl_tensor *x)
{
    fl_tensor *inner = fl_mul(x, fl_add_scalar(fl_mul_scalar(fl_square(x), GELU_A), 1));
    return fl_tanh(fl_mul_scalar(inner, GELU_K));
}

/* GELU(x) composed of primitives: the definition the fused kernel is tested against. */
static fl_tensor *gelu_composed(const fl_tensor *x, bool approximate)
{
    fl_tensor *erf_or_tanh = approximate ? gelu_tanh_term(x) : fl_erf(fl_mul_scalar(x, M_SQRT1_2));
    return fl_mul(fl_mul_scalar(x, 0.5), fl_add_scalar(erf_or_tanh, 1));
}

/* dy GELU'(x) composed, recomputing the terms rather than keeping them, as PyTorch
 * does. Exact: Phi(x) + x phi(x). Approximate, with t the tanh term:
 * 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 a x^2). */
static fl_tensor *gelu_grad_composed(const fl_tensor *x, const fl_tensor *dy, bool approximate)
{
    fl_tensor *slope;
    if (approximate) {
        fl_tensor *t = gelu_tanh_term(x);
        fl_tensor *dinner = fl_mul_scalar(fl_add_scalar(fl_mul_scalar(fl_square(x), 3 * GELU_A), 1), GELU_K);
        fl_tensor *dt = fl_mul(fl_add_scalar(fl_neg(fl_square(t)), 1), dinner);
        slope = fl_mul_scalar(fl_add(fl_add_scalar(t, 1), fl_mul(x, dt)), 0.5);
    } else {
        fl_tensor *cdf = fl_mul_scalar(fl_add_scalar(fl_erf(fl_mul_scalar(x, M_SQRT1_2)), 1), 0.5);
        fl_tensor *pdf = fl_mul_scalar(fl_exp(fl_mul_scalar(fl_square(x), -0.5)), 0.3989422804014327);
        slope = fl_add(cdf, fl_mul(x, pdf));
    }
    return fl_mul(dy, slope);
}

/* GELU(x), or dy GELU'(x) when dy is given: the backend's fused kernel where it has
 * one for this dtype (one pass instead of five or eleven), else the composition. */
static fl_tensor *gelu(const char *fn, const fl_tensor *x, const fl_tensor *dy, bool approximate)
{
    FL_ENTRY_TYPE(gelu) fused = x->backend->gelu;
    bool fits = fused && (x->dtype == FL_F32 || x->dtype == FL_F64) &&
                (!dy || (fl__same_backend(dy, x) && dy->dtype == x->dtype && dy->ndim == x->ndim &&
                         memcmp(dy->shape, x->shape, (size_t)x->ndim * sizeof *x->shape) == 0));
    if (!fits) {
        fl_scope scope = fl_scope_begin();
        return fl_scope_return(scope, dy ? gelu_grad_composed(x, dy, approximate) : gelu_composed(x, approximate));
    }
    fl__begin("gelu");
    fl_tensor *y = fl__new(x->backend, x->dtype, x->ndim, x->shape);
    const fl_tensor *inputs[2] = {x, dy};
    return y ? fl_out(fl__finish(fn, y, fused(x->backend, y, x, dy, approximate), dy ? 2 : 1, inputs)) : NULL;
}

static bool valid(const char *fn, const fl_tensor *x, const fl_tensor *dy)
{
    char a[FL_DESC_SIZE], b[FL_DESC_SIZE];
    if (!fl_dtype_is_float(x->dtype)) {
        fl_error(FL_ERR_DTYPE, fn, "GELU takes a float tensor, got %s", fl_describe(x, a));
        return false;
    }
    if (dy && (dy->dtype != x->dtype || !fl_same_shape(x, dy))) {
        fl_error(FL_ERR_SHAPE, fn, "the gradient %s does not match the input %s", fl_describe(dy, b),
                  fl_describe(x, a));
        return false;
    }
    return true;
}

fl_tensor *fl_gelu(const fl_tensor *x, bool approximate)
{
    if (fl_null_args("fl_gelu", 1, x) || !valid("fl_gelu", x, NULL))
        return NULL;
    return gelu("fl_gelu", x, NULL, approximate);
}

fl_tensor *fl_gelu_backward(const fl_tensor *x, const fl_tensor *dy, bool approximate)
{
    if (fl_null_args("fl_gelu_backward", 2, x, dy) || fl_mixed_backends("fl_gelu_backward", 2, x, dy) ||
        !valid("fl_gelu_backward", x, dy))
        return NULL;
    return gelu("fl_gelu_backward", x, dy, approximate);
}
