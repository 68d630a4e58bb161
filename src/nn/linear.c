/* Linear: y = x W^T + b, one node whose forward is fl_linear (the product and its
 * bias in one pass where the backend fuses them). */
#include "internal.h"

typedef struct linear_context {
    bool bias;
} linear_context;

/* Saved: x, weight. With x and dy flattened to matrices, dx = dy W, dW = dy^T x and
 * db = the column sums of dy. */
static void linear_grad(fl_grad *g)
{
    const fl_tensor *x = g->saved[0], *w = g->saved[1], *dy = g->output_grad;
    int64_t in = fl_shape(w)[1], out = fl_shape(w)[0];
    if (g->needs_grad[0])
        g->input_grads[0] = fl_matmul(dy, w);
    const fl_tensor *dy2 = fl_reshape(dy, FL_SHAPE(-1, out));
    if (g->needs_grad[1])
        g->input_grads[1] = fl_matmul(fl_transpose(dy2, 0, 1), fl_reshape(x, FL_SHAPE(-1, in)));
    if (((const linear_context *)g->context)->bias && g->needs_grad[2])
        g->input_grads[2] = fl_sum(dy2, FL_AXES(0), false);
}

fl_variable *fl_f_linear(fl_variable *x, fl_variable *weight, fl_variable *bias)
{
    const char *fn = "fl_f_linear";
    if (fl_null_args(fn, 2, x, weight))
        return NULL;
    const fl_tensor *xv = fl_v_value(x), *w = fl_v_value(weight), *b = bias ? fl_v_value(bias) : NULL;
    fl_scope scope = fl_scope_begin();
    fl_tensor *y = fl_linear(xv, w, b); /* checks the shapes; fl_v_record passes its failure on */
    linear_context c = {bias != NULL};
    fl_variable *inputs[3] = {x, weight, bias};
    fl_variable *result = fl_v_record(y, inputs, bias ? 3 : 2, linear_grad, FL_SAVE(xv, w), &c, sizeof c);
    return fl_v_scope_return(scope, result);
}

static fl_variable *linear_forward(fl_module *m, fl_variable *x)
{
    fl_variable *weight = fl_module_parameter(m, "weight");
    int64_t in = fl_shape(fl_v_value(weight))[1];
    char what[64];
    snprintf(what, sizeof what, "an input of shape [*, %lld]", (long long)in);
    if (!fl__nn_check_input(m, x, 1, FL_MAX_DIMS, fl_ndim(fl_v_value(x)) - 1, in, what))
        return NULL;
    return fl_f_linear(x, weight, fl_module_parameter(m, "bias"));
}

static const fl_module_type linear_type = {.name = "Linear", .forward = linear_forward};

fl_module *fl_nn_linear(int64_t in_features, int64_t out_features, bool bias)
{
    if (in_features < 0 || out_features < 0)
        return fl_error(FL_ERR_VALUE, "fl_nn_linear", "negative features (%lld in, %lld out)",
                        (long long)in_features, (long long)out_features);
    fl_module *m = fl_module_new(&linear_type, NULL);
    bool ok = fl__nn_parameter(m, "weight", FL_SHAPE(out_features, in_features)) &&
              (!bias || fl__nn_parameter(m, "bias", FL_SHAPE(out_features))) && fl__nn_reset_affine(m) == FL_OK;
    if (!ok)
        fl_module_release(m), m = NULL;
    return m;
}
