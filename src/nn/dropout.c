/* Dropout: a mask of kept elements, scaled by 1 / (1 - p), from the counter-based
 * generator. */
#include <stdlib.h>

#include "internal.h"

/* Saved: the scaled mask. */
static void dropout_grad(fl_grad *g) { g->input_grads[0] = fl_mul(g->output_grad, g->saved[0]); }

fl_variable *fl_f_dropout(fl_variable *x, double p, bool training)
{
    if (fl_null_args("fl_f_dropout", 1, x))
        return NULL;
    if (!(p >= 0 && p <= 1))
        return fl_error(FL_ERR_VALUE, "fl_f_dropout", "the probability %g is not in [0, 1]", p);
    if (!training || p == 0)
        return fl__nn_identity(x);
    const fl_tensor *xv = fl_v_value(x);
    fl_scope scope = fl_scope_begin();
    /* drawn on the default backend: the same mask on any backend */
    fl_tensor *u = fl_to_backend(fl_rand(fl_dtype_of(xv), fl_ndim(xv), fl_shape(xv)), fl_backend_name(xv));
    /* p = 1 drops everything (PyTorch's zeros), without dividing by zero. */
    fl_tensor *mask = p < 1 ? fl_mul_scalar(fl_cast(fl_ge(u, fl_new_scalar(xv, p, fl_dtype_of(xv))), fl_dtype_of(xv)),
                                            1 / (1 - p))
                            : fl_zeros_like(xv);
    fl_variable *y = fl_v_record(fl_mul(xv, mask), FL_VARS(x), dropout_grad, FL_SAVE(mask), NULL, 0);
    return fl_v_scope_return(scope, y);
}

static fl_variable *dropout_forward(fl_module *m, fl_variable *x)
{
    return fl_f_dropout(x, *(const double *)fl_module_state(m), fl_module_is_training(m));
}

static const fl_module_type dropout_type = {.name = "Dropout", .forward = dropout_forward};

fl_module *fl_nn_dropout(double p)
{
    if (!(p >= 0 && p <= 1))
        return fl_error(FL_ERR_VALUE, "fl_nn_dropout", "the probability %g is not in [0, 1]", p);
    double *state = malloc(sizeof *state);
    if (!state)
        return fl_error(FL_ERR_MEMORY, "fl_nn_dropout", "out of memory");
    *state = p;
    return fl_module_new(&dropout_type, state);
}
