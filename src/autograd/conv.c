/* Gradients of convolution and pooling, through the tensor API's backward functions
 * (a backend computes them with its own kernels). */
#include <string.h>

#include "internal.h"

/* The parameters (defaults for NULL, which the tensor API accepts) and both operands'
 * shapes, which the backward functions need. */
typedef struct conv_context {
    fl_conv_params params;
    int64_t x_shape[4], w_shape[4];
    int spatial; /* 1 for conv1d, 2 for conv2d */
} conv_context;

/* Saved: x, weight. */
static void conv_grad(fl_grad *g)
{
    const conv_context *c = g->context;
    const fl_tensor *x = g->saved[0], *w = g->saved[1], *dy = g->output_grad;
    if (g->needs_grad[0])
        g->input_grads[0] = c->spatial == 2 ? fl_conv2d_backward_input(dy, w, c->x_shape, &c->params)
                                            : fl_conv1d_backward_input(dy, w, c->x_shape, &c->params);
    if (g->needs_grad[1])
        g->input_grads[1] = c->spatial == 2 ? fl_conv2d_backward_weight(x, dy, c->w_shape, &c->params)
                                            : fl_conv1d_backward_weight(x, dy, c->w_shape, &c->params);
}

static fl_variable *convolve(const char *fn, fl_variable *x, fl_variable *weight, const fl_conv_params *params,
                             int spatial)
{
    if (fl_null_args(fn, 2, x, weight))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_tensor *y = spatial == 2 ? fl_conv2d(x->value, weight->value, params)
                                : fl_conv1d(x->value, weight->value, params);
    conv_context c = {.spatial = spatial};
    if (params)
        c.params = *params;
    if (y) { /* the forward checked the ranks */
        memcpy(c.x_shape, x->value->shape, (size_t)x->value->ndim * sizeof *c.x_shape);
        memcpy(c.w_shape, weight->value->shape, (size_t)weight->value->ndim * sizeof *c.w_shape);
    }
    fl_variable *v = fl_v_record(y, FL_VARS(x, weight), conv_grad, FL_SAVE(x->value, weight->value), &c, sizeof c);
    return fl_v_scope_return(scope, v);
}

fl_variable *fl_v_conv2d(fl_variable *x, fl_variable *weight, const fl_conv_params *params)
{
    return convolve("fl_v_conv2d", x, weight, params, 2);
}

fl_variable *fl_v_conv1d(fl_variable *x, fl_variable *weight, const fl_conv_params *params)
{
    return convolve("fl_v_conv1d", x, weight, params, 1);
}

/* Saved: x (max pooling finds each window's first maximum again). */
static void pool_grad(fl_grad *g)
{
    g->input_grads[0] = fl_pool2d_backward(g->output_grad, g->saved[0], g->context);
}

fl_variable *fl_v_pool2d(fl_variable *x, const fl_pool_params *params)
{
    if (fl_null_args("fl_v_pool2d", 1, x))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_tensor *y = fl_pool2d(x->value, params); /* it rejects NULL params */
    fl_pool_params c = {0};
    if (y)
        c = *params;
    fl_variable *v = fl_v_record(y, FL_VARS(x), pool_grad, FL_SAVE(x->value), &c, sizeof c);
    return fl_v_scope_return(scope, v);
}
