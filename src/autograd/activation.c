/* Gradients of the activation functions. */
#include "internal.h"

/* Saved: y = max(x, 0). The gradient at 0 is 0, as in PyTorch. */
static void relu_grad(fl_grad *g)
{
    const fl_tensor *y = g->saved[0];
    fl_tensor *zero = fl_scalar(0, fl_dtype_of(y));
    g->input_grads[0] = fl_where(fl_gt(y, zero), g->output_grad, zero);
}

fl_variable *fl_v_relu(fl_variable *x)
{
    if (fl__null_args("fl_v_relu", 1, x))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_tensor *y = fl_maximum_scalar(x->value, 0);
    return fl_v_scope_return(scope, fl_v_record(y, FL_VARS(x), relu_grad, FL_SAVE(y), NULL, 0));
}
