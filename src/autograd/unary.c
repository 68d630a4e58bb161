/* Gradients of the elementwise functions of one tensor: dx = dy * f'(x), with f'
 * written from whichever of x and y = f(x) gives it most cheaply. */
#include <math.h>

#include "internal.h"

/* A function of one variable whose gradient function saves `saved` (x or y). */
static fl_variable *unary(const char *fn, fl_variable *x, fl_tensor *(*forward)(const fl_tensor *), fl_grad_fn grad,
                          bool save_output)
{
    if (fl_null_args(fn, 1, x))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_tensor *y = forward(x->value);
    const fl_tensor *saved = save_output ? y : x->value;
    return fl_v_scope_return(scope, fl_v_record(y, FL_VARS(x), grad, FL_SAVE(saved), NULL, 0));
}

#define SAVES_X false
#define SAVES_Y true

static void neg_grad(fl_grad *g) { g->input_grads[0] = fl_neg(g->output_grad); }

fl_variable *fl_v_neg(fl_variable *x)
{
    if (fl_null_args("fl_v_neg", 1, x))
        return NULL;
    fl_scope scope = fl_scope_begin();
    return fl_v_scope_return(scope, fl_v_record(fl_neg(x->value), FL_VARS(x), neg_grad, FL_SAVE_NOTHING, NULL, 0));
}

/* sign(x): 0 at 0, as in PyTorch. */
static void abs_grad(fl_grad *g) { g->input_grads[0] = fl_mul(g->output_grad, fl_sign(g->saved[0])); }
fl_variable *fl_v_abs(fl_variable *x) { return unary("fl_v_abs", x, fl_abs, abs_grad, SAVES_X); }

static void exp_grad(fl_grad *g) { g->input_grads[0] = fl_mul(g->output_grad, g->saved[0]); }
fl_variable *fl_v_exp(fl_variable *x) { return unary("fl_v_exp", x, fl_exp, exp_grad, SAVES_Y); }

static void log_grad(fl_grad *g) { g->input_grads[0] = fl_div(g->output_grad, g->saved[0]); }
fl_variable *fl_v_log(fl_variable *x) { return unary("fl_v_log", x, fl_log, log_grad, SAVES_X); }

static void log1p_grad(fl_grad *g) { g->input_grads[0] = fl_div(g->output_grad, fl_add_scalar(g->saved[0], 1)); }
fl_variable *fl_v_log1p(fl_variable *x) { return unary("fl_v_log1p", x, fl_log1p, log1p_grad, SAVES_X); }

/* 1 / (2 sqrt(x)) */
static void sqrt_grad(fl_grad *g) { g->input_grads[0] = fl_div(g->output_grad, fl_mul_scalar(g->saved[0], 2)); }
fl_variable *fl_v_sqrt(fl_variable *x) { return unary("fl_v_sqrt", x, fl_sqrt, sqrt_grad, SAVES_Y); }

/* -x^(-3/2) / 2 = -y^3 / 2 */
static void rsqrt_grad(fl_grad *g)
{
    const fl_tensor *y = g->saved[0];
    g->input_grads[0] = fl_mul(g->output_grad, fl_mul_scalar(fl_mul(fl_square(y), y), -0.5));
}
fl_variable *fl_v_rsqrt(fl_variable *x) { return unary("fl_v_rsqrt", x, fl_rsqrt, rsqrt_grad, SAVES_Y); }

static void sin_grad(fl_grad *g) { g->input_grads[0] = fl_mul(g->output_grad, fl_cos(g->saved[0])); }
fl_variable *fl_v_sin(fl_variable *x) { return unary("fl_v_sin", x, fl_sin, sin_grad, SAVES_X); }

static void cos_grad(fl_grad *g) { g->input_grads[0] = fl_mul(g->output_grad, fl_neg(fl_sin(g->saved[0]))); }
fl_variable *fl_v_cos(fl_variable *x) { return unary("fl_v_cos", x, fl_cos, cos_grad, SAVES_X); }

/* 1 - y^2 */
static void tanh_grad(fl_grad *g)
{
    fl_tensor *slope = fl_add_scalar(fl_neg(fl_square(g->saved[0])), 1);
    g->input_grads[0] = fl_mul(g->output_grad, slope);
}
fl_variable *fl_v_tanh(fl_variable *x) { return unary("fl_v_tanh", x, fl_tanh, tanh_grad, SAVES_Y); }

/* y (1 - y) */
static void sigmoid_grad(fl_grad *g)
{
    const fl_tensor *y = g->saved[0];
    fl_tensor *slope = fl_mul(y, fl_add_scalar(fl_neg(y), 1));
    g->input_grads[0] = fl_mul(g->output_grad, slope);
}
fl_variable *fl_v_sigmoid(fl_variable *x) { return unary("fl_v_sigmoid", x, fl_sigmoid, sigmoid_grad, SAVES_Y); }

/* 2 / sqrt(pi) exp(-x^2) */
static void erf_grad(fl_grad *g)
{
    fl_tensor *slope = fl_mul_scalar(fl_exp(fl_neg(fl_square(g->saved[0]))), M_2_SQRTPI);
    g->input_grads[0] = fl_mul(g->output_grad, slope);
}
fl_variable *fl_v_erf(fl_variable *x) { return unary("fl_v_erf", x, fl_erf, erf_grad, SAVES_X); }

static void square_grad(fl_grad *g) { g->input_grads[0] = fl_mul(g->output_grad, fl_mul_scalar(g->saved[0], 2)); }
fl_variable *fl_v_square(fl_variable *x) { return unary("fl_v_square", x, fl_square, square_grad, SAVES_X); }

/* -1 / x^2 = -y^2 */
static void reciprocal_grad(fl_grad *g) { g->input_grads[0] = fl_mul(g->output_grad, fl_neg(fl_square(g->saved[0]))); }
fl_variable *fl_v_reciprocal(fl_variable *x)
{
    return unary("fl_v_reciprocal", x, fl_reciprocal, reciprocal_grad, SAVES_Y);
}

/* Saved: x. The gradient passes where low <= x <= high, bounds included, as in PyTorch. */
typedef struct clamp_context {
    double low, high;
} clamp_context;

static void clamp_grad(fl_grad *g)
{
    const clamp_context *c = g->context;
    const fl_tensor *x = g->saved[0];
    fl_dtype dtype = fl_dtype_of(x);
    fl_tensor *inside =
        fl_logical_and(fl_ge(x, fl_new_scalar(x, c->low, dtype)), fl_le(x, fl_new_scalar(x, c->high, dtype)));
    g->input_grads[0] = fl_where(inside, g->output_grad, fl_new_scalar(x, 0, fl_dtype_of(g->output_grad)));
}

fl_variable *fl_v_clamp(fl_variable *x, double low, double high)
{
    if (fl_null_args("fl_v_clamp", 1, x))
        return NULL;
    fl_scope scope = fl_scope_begin();
    clamp_context c = {low, high};
    fl_variable *y = fl_v_record(fl_clamp(x->value, low, high), FL_VARS(x), clamp_grad, FL_SAVE(x->value), &c,
                                 sizeof c);
    return fl_v_scope_return(scope, y);
}
