/* Gradients of the arithmetic of the tensor API: add, sub, mul, div. The engine sums
 * broadcast gradients down to each input's shape, so these are written for equal shapes. */
#include "internal.h"

static void add_grad(fl_grad *g)
{
    g->input_grads[0] = g->output_grad;
    g->input_grads[1] = g->output_grad;
}

fl_variable *fl_v_add(fl_variable *a, fl_variable *b)
{
    if (fl__null_args("fl_v_add", 2, a, b))
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
    if (fl__null_args("fl_v_sub", 2, a, b))
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
    if (fl__null_args("fl_v_mul", 2, a, b))
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
    if (fl__null_args("fl_v_div", 2, a, b))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_tensor *y = fl_div(a->value, b->value);
    return fl_v_scope_return(scope, fl_v_record(y, FL_VARS(a, b), div_grad, FL_SAVE(b->value, y), NULL, 0));
}
