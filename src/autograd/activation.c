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
    g->input_grads[0] = fl_where(fl_le(y, fl_new_scalar(y, 0, fl_dtype_of(y))), y, g->output_grad);
}

fl_variable *fl_v_relu(fl_variable *x)
{
    if (fl_null_args("fl_v_relu", 1, x))
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
    g->input_grads[0] = fl_where(fl_gt(x, fl_new_scalar(x, 0, fl_dtype_of(x))), dy, fl_mul_scalar(dy, *slope));
}

fl_variable *fl_v_leaky_relu(fl_variable *x, double negative_slope)
{
    if (fl_null_args("fl_v_leaky_relu", 1, x))
        return NULL;
    fl_scope scope = fl_scope_begin();
    const fl_tensor *v = x->value;
    fl_tensor *y = fl_where(fl_gt(v, fl_new_scalar(v, 0, fl_dtype_of(v))), v, fl_mul_scalar(v, negative_slope));
    return fl_v_scope_return(scope, fl_v_record(y, FL_VARS(x), leaky_relu_grad, FL_SAVE(v), &negative_slope,
                                                 sizeof negative_slope));
}

/* Saved: x. */
static void gelu_grad(fl_grad *g)
{
    bool approximate = *(const bool *)g->context;
    g->input_grads[0] = fl_gelu_backward(g->saved[0], g->output_grad, approximate);
}

fl_variable *fl_v_gelu(fl_variable *x, bool approximate)
{
    if (fl_null_args("fl_v_gelu", 1, x))
        return NULL;
    fl_scope scope = fl_scope_begin();
    const fl_tensor *v = x->value;
    fl_tensor *y = fl_gelu(v, approximate);
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
    if (fl_null_args("fl_v_softmax", 1, x))
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
    if (fl_null_args("fl_v_log_softmax", 1, x))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_tensor *y = fl_log_softmax(x->value, axis);
    return fl_v_scope_return(scope, fl_v_record(y, FL_VARS(x), log_softmax_grad, FL_SAVE(y), &axis, sizeof axis));
}
