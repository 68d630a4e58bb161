/* Gradients of the activation functions. */
#include <math.h>
#include <string.h>

#include "internal.h"

/* Saved: y = max(x, 0). PyTorch's threshold_backward: where y <= 0 (so y is 0) the
 * gradient is y, that 0; elsewhere, NaN included, it is dy. Selecting y rather than a
 * broadcast 0 keeps every operand of the where dense: its fast path. */
static void relu_grad(fl_grad *g)
{
    const fl_tensor *y = g->saved[0];
    g->input_grads[0] = fl_where(fl_le(y, fl_scalar(0, fl_dtype_of(y))), y, g->output_grad);
}

fl_variable *fl_v_relu(fl_variable *x)
{
    if (fl__null_args("fl_v_relu", 1, x))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_tensor *y = fl_maximum_scalar(x->value, 0);
    return fl_v_scope_return(scope, fl_v_record(y, FL_VARS(x), relu_grad, FL_SAVE(y), NULL, 0));
}

/* Saved: x. */
static void leaky_relu_grad(fl_grad *g)
{
    const double *slope = g->context;
    const fl_tensor *x = g->saved[0];
    fl_tensor *dy = g->output_grad;
    g->input_grads[0] = fl_where(fl_gt(x, fl_scalar(0, fl_dtype_of(x))), dy, fl_mul_scalar(dy, *slope));
}

fl_variable *fl_v_leaky_relu(fl_variable *x, double negative_slope)
{
    if (fl__null_args("fl_v_leaky_relu", 1, x))
        return NULL;
    fl_scope scope = fl_scope_begin();
    const fl_tensor *v = x->value;
    fl_tensor *y = fl_where(fl_gt(v, fl_scalar(0, fl_dtype_of(v))), v, fl_mul_scalar(v, negative_slope));
    return fl_v_scope_return(scope, fl_v_record(y, FL_VARS(x), leaky_relu_grad, FL_SAVE(v), &negative_slope,
                                                 sizeof negative_slope));
}

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
static fl_tensor *gelu(const fl_tensor *x, const fl_tensor *dy, bool approximate)
{
    int (*fused)(fl_tensor *, const fl_tensor *, const fl_tensor *, bool) = x->backend->gelu;
    bool fits = fused && (x->dtype == FL_F32 || x->dtype == FL_F64) &&
                (!dy || (dy->backend == x->backend && dy->dtype == x->dtype && dy->ndim == x->ndim &&
                         memcmp(dy->shape, x->shape, (size_t)x->ndim * sizeof *x->shape) == 0));
    if (!fits)
        return dy ? gelu_grad_composed(x, dy, approximate) : gelu_composed(x, approximate);
    const char *fn = dy ? "fl_v_gelu (backward)" : "fl_v_gelu";
    fl__begin("gelu");
    fl_tensor *y = fl__new(x->backend, x->dtype, x->ndim, x->shape);
    const fl_tensor *inputs[2] = {x, dy};
    return y ? fl__out(fl__finish(fn, y, fused(y, x, dy, approximate), dy ? 2 : 1, inputs)) : NULL;
}

/* Saved: x. */
static void gelu_grad(fl_grad *g)
{
    bool approximate = *(const bool *)g->context;
    g->input_grads[0] = gelu(g->saved[0], g->output_grad, approximate);
}

fl_variable *fl_v_gelu(fl_variable *x, bool approximate)
{
    if (fl__null_args("fl_v_gelu", 1, x))
        return NULL;
    fl_scope scope = fl_scope_begin();
    const fl_tensor *v = x->value;
    fl_tensor *y = gelu(v, NULL, approximate);
    fl_variable *result = fl_v_record(y, FL_VARS(x), gelu_grad, FL_SAVE(v), &approximate, sizeof approximate);
    return fl_v_scope_return(scope, result);
}

/* Saved: y = softmax(x). dx = y (dy - sum(dy y)) over the axis. */
static void softmax_grad(fl_grad *g)
{
    int axis = *(const int *)g->context;
    const fl_tensor *y = g->saved[0], *dy = g->output_grad;
    fl_tensor *dot = fl_sum(fl_mul(dy, y), &axis, 1, true);
    g->input_grads[0] = fl_mul(y, fl_sub(dy, dot));
}

fl_variable *fl_v_softmax(fl_variable *x, int axis)
{
    if (fl__null_args("fl_v_softmax", 1, x))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_tensor *y = fl_softmax(x->value, axis);
    return fl_v_scope_return(scope, fl_v_record(y, FL_VARS(x), softmax_grad, FL_SAVE(y), &axis, sizeof axis));
}

/* Saved: y = log_softmax(x). dx = dy - softmax(x) sum(dy) over the axis. */
static void log_softmax_grad(fl_grad *g)
{
    int axis = *(const int *)g->context;
    const fl_tensor *y = g->saved[0], *dy = g->output_grad;
    fl_tensor *total = fl_sum(dy, &axis, 1, true);
    g->input_grads[0] = fl_sub(dy, fl_mul(fl_exp(y), total));
}

fl_variable *fl_v_log_softmax(fl_variable *x, int axis)
{
    if (fl__null_args("fl_v_log_softmax", 1, x))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_tensor *y = fl_log_softmax(x->value, axis);
    return fl_v_scope_return(scope, fl_v_record(y, FL_VARS(x), log_softmax_grad, FL_SAVE(y), &axis, sizeof axis));
}
