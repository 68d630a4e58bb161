/* Gradients of the arithmetic of the tensor API: binary operations, operations with a
 * scalar, where and cast. The engine sums broadcast gradients down to each input's
 * shape, so these are written for equal shapes. */
#include "internal.h"

static void add_grad(fl_grad *g)
{
    g->input_grads[0] = g->output_grad;
    g->input_grads[1] = g->output_grad;
}

fl_variable *fl_v_add(fl_variable *a, fl_variable *b)
{
    if (fl_null_args("fl_v_add", 2, a, b))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_variable *y = fl_v_record(fl_add(a->value, b->value), FL_VARS(a, b), add_grad, FL_SAVE_NOTHING, NULL, 0);
    return fl_v_scope_return(scope, y);
}

static void sub_grad(fl_grad *g)
{
    g->input_grads[0] = g->output_grad;
    if (g->needs_grad[1])
        g->input_grads[1] = fl_neg(g->output_grad);
}

fl_variable *fl_v_sub(fl_variable *a, fl_variable *b)
{
    if (fl_null_args("fl_v_sub", 2, a, b))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_variable *y = fl_v_record(fl_sub(a->value, b->value), FL_VARS(a, b), sub_grad, FL_SAVE_NOTHING, NULL, 0);
    return fl_v_scope_return(scope, y);
}

/* Saved: a, b. */
static void mul_grad(fl_grad *g)
{
    if (g->needs_grad[0])
        g->input_grads[0] = fl_mul(g->output_grad, g->saved[1]);
    if (g->needs_grad[1])
        g->input_grads[1] = fl_mul(g->output_grad, g->saved[0]);
}

fl_variable *fl_v_mul(fl_variable *a, fl_variable *b)
{
    if (fl_null_args("fl_v_mul", 2, a, b))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_variable *y = fl_v_record(fl_mul(a->value, b->value), FL_VARS(a, b), mul_grad, FL_SAVE(a->value, b->value),
                                 NULL, 0);
    return fl_v_scope_return(scope, y);
}

/* Saved: b, y = a / b. d/da = 1/b; d/db = -y/b. */
static void div_grad(fl_grad *g)
{
    fl_tensor *da = fl_div(g->output_grad, g->saved[0]);
    g->input_grads[0] = da;
    if (g->needs_grad[1])
        g->input_grads[1] = fl_neg(fl_mul(da, g->saved[1]));
}

fl_variable *fl_v_div(fl_variable *a, fl_variable *b)
{
    if (fl_null_args("fl_v_div", 2, a, b))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_tensor *y = fl_div(a->value, b->value);
    return fl_v_scope_return(scope, fl_v_record(y, FL_VARS(a, b), div_grad, FL_SAVE(b->value, y), NULL, 0));
}

/* Saved: a, b, y = a^b. d/da = b a^(b-1), taken as 0 where b = 0 (not 0 * inf at
 * a = 0); d/db = y log(a), taken as 0 where a = 0 (y is 0 there for b > 0). Both as
 * in PyTorch. */
static void pow_grad(fl_grad *g)
{
    const fl_tensor *a = g->saved[0], *b = g->saved[1], *y = g->saved[2], *dy = g->output_grad;
    fl_tensor *zero = fl_new_scalar(y, 0, fl_dtype_of(y));
    if (g->needs_grad[0]) {
        fl_tensor *slope = fl_mul(b, fl_pow(a, fl_sub_scalar(b, 1)));
        g->input_grads[0] = fl_mul(dy, fl_where(fl_eq(b, zero), zero, slope));
    }
    if (g->needs_grad[1]) {
        fl_tensor *slope = fl_mul(y, fl_log(a));
        g->input_grads[1] = fl_mul(dy, fl_where(fl_eq(a, zero), zero, slope));
    }
}

fl_variable *fl_v_pow(fl_variable *a, fl_variable *b)
{
    if (fl_null_args("fl_v_pow", 2, a, b))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_tensor *y = fl_pow(a->value, b->value);
    fl_variable *v = fl_v_record(y, FL_VARS(a, b), pow_grad, FL_SAVE(a->value, b->value, y), NULL, 0);
    return fl_v_scope_return(scope, v);
}

/* Saved: a, b. The larger (smaller) operand takes the gradient; ties split it evenly,
 * as in PyTorch. */
static void extremum_grad(fl_grad *g, bool largest)
{
    const fl_tensor *a = g->saved[0], *b = g->saved[1], *dy = g->output_grad;
    fl_dtype dtype = fl_dtype_of(dy);
    fl_tensor *wins = fl_cast(largest ? fl_gt(a, b) : fl_lt(a, b), dtype);
    fl_tensor *share = fl_add(wins, fl_mul_scalar(fl_cast(fl_eq(a, b), dtype), 0.5)); /* a's share */
    fl_tensor *da = fl_mul(dy, share);
    if (g->needs_grad[0])
        g->input_grads[0] = da;
    if (g->needs_grad[1])
        g->input_grads[1] = fl_sub(dy, da);
}

static void maximum_grad(fl_grad *g) { extremum_grad(g, true); }
static void minimum_grad(fl_grad *g) { extremum_grad(g, false); }

fl_variable *fl_v_maximum(fl_variable *a, fl_variable *b)
{
    if (fl_null_args("fl_v_maximum", 2, a, b))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_variable *y = fl_v_record(fl_maximum(a->value, b->value), FL_VARS(a, b), maximum_grad,
                                 FL_SAVE(a->value, b->value), NULL, 0);
    return fl_v_scope_return(scope, y);
}

fl_variable *fl_v_minimum(fl_variable *a, fl_variable *b)
{
    if (fl_null_args("fl_v_minimum", 2, a, b))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_variable *y = fl_v_record(fl_minimum(a->value, b->value), FL_VARS(a, b), minimum_grad,
                                 FL_SAVE(a->value, b->value), NULL, 0);
    return fl_v_scope_return(scope, y);
}

/* ---- with a scalar ---- */

static void add_scalar_grad(fl_grad *g) { g->input_grads[0] = g->output_grad; }

fl_variable *fl_v_add_scalar(fl_variable *x, double value)
{
    if (fl_null_args("fl_v_add_scalar", 1, x))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_variable *y = fl_v_record(fl_add_scalar(x->value, value), FL_VARS(x), add_scalar_grad, FL_SAVE_NOTHING,
                                 NULL, 0);
    return fl_v_scope_return(scope, y);
}

static void mul_scalar_grad(fl_grad *g)
{
    g->input_grads[0] = fl_mul_scalar(g->output_grad, *(const double *)g->context);
}

fl_variable *fl_v_mul_scalar(fl_variable *x, double value)
{
    if (fl_null_args("fl_v_mul_scalar", 1, x))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_variable *y = fl_v_record(fl_mul_scalar(x->value, value), FL_VARS(x), mul_scalar_grad, FL_SAVE_NOTHING,
                                 &value, sizeof value);
    return fl_v_scope_return(scope, y);
}

/* Saved: x. value x^(value-1); a zero exponent has a zero gradient (not 0 * inf at 0). */
static void pow_scalar_grad(fl_grad *g)
{
    double value = *(const double *)g->context;
    const fl_tensor *x = g->saved[0];
    if (value == 0)
        g->input_grads[0] = fl_zeros_like(g->output_grad);
    else
        g->input_grads[0] = fl_mul(g->output_grad, fl_mul_scalar(fl_pow_scalar(x, value - 1), value));
}

fl_variable *fl_v_pow_scalar(fl_variable *x, double value)
{
    if (fl_null_args("fl_v_pow_scalar", 1, x))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_variable *y = fl_v_record(fl_pow_scalar(x->value, value), FL_VARS(x), pow_scalar_grad, FL_SAVE(x->value),
                                 &value, sizeof value);
    return fl_v_scope_return(scope, y);
}

/* ---- selection and conversion ---- */

/* Saved: cond. Each operand gets the gradient where it was chosen. */
static void where_grad(fl_grad *g)
{
    const fl_tensor *cond = g->saved[0], *dy = g->output_grad;
    fl_tensor *zero = fl_new_scalar(dy, 0, fl_dtype_of(dy));
    if (g->needs_grad[0])
        g->input_grads[0] = fl_where(cond, dy, zero);
    if (g->needs_grad[1])
        g->input_grads[1] = fl_where(cond, zero, dy);
}

fl_variable *fl_v_where(const fl_tensor *cond, fl_variable *a, fl_variable *b)
{
    if (fl_null_args("fl_v_where", 3, cond, a, b))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_variable *y = fl_v_record(fl_where(cond, a->value, b->value), FL_VARS(a, b), where_grad, FL_SAVE(cond),
                                 NULL, 0);
    return fl_v_scope_return(scope, y);
}

/* The engine converts a gradient to its input's dtype, so it passes through. */
static void cast_grad(fl_grad *g) { g->input_grads[0] = g->output_grad; }

/* A cast to a non-float dtype is a constant, as in PyTorch: integers have no gradient. */
fl_variable *fl_v_cast(fl_variable *x, fl_dtype dtype)
{
    if (fl_null_args("fl_v_cast", 1, x))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_tensor *y = fl_cast(x->value, dtype);
    fl_variable *v = y && !fl_dtype_is_float(dtype)
                         ? fl_v_new(y, false)
                         : fl_v_record(y, FL_VARS(x), cast_grad, FL_SAVE_NOTHING, NULL, 0);
    return fl_v_scope_return(scope, v);
}
