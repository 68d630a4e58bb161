/* Gradients of the reductions. */
#include <string.h>

#include "internal.h"

/* The input's shape and the reduced axes (as a mask), enough to spread a gradient back. */
typedef struct reduce_context {
    int ndim;
    int64_t shape[FL_MAX_DIMS];
    unsigned axes;
} reduce_context;

static bool reduce_context_of(const char *fn, const fl_tensor *x, const int *axes, int count, reduce_context *c)
{
    c->ndim = x->ndim;
    memcpy(c->shape, x->shape, sizeof c->shape);
    return fl__axes_mask(fn, axes, count, x->ndim, &c->axes);
}

/* dy, reduced with or without keepdims, reshaped to keep the reduced axes. */
static fl_tensor *with_kept_axes(const fl_tensor *dy, const reduce_context *c)
{
    int64_t kept[FL_MAX_DIMS];
    for (int i = 0; i < c->ndim; i++)
        kept[i] = c->axes & (1u << i) ? 1 : c->shape[i];
    return fl_reshape(dy, c->ndim, kept);
}

static void sum_grad(fl_grad *g)
{
    const reduce_context *c = g->context;
    g->input_grads[0] = fl_expand(with_kept_axes(g->output_grad, c), c->ndim, c->shape);
}

fl_variable *fl_v_sum(fl_variable *x, const int *axes, int count, bool keepdims)
{
    if (fl__null_args("fl_v_sum", 1, x))
        return NULL;
    reduce_context c;
    if (!reduce_context_of("fl_v_sum", x->value, axes, count, &c))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_variable *y = fl_v_record(fl_sum(x->value, axes, count, keepdims), FL_VARS(x), sum_grad, FL_SAVE_NOTHING,
                                 &c, sizeof c);
    return fl_v_scope_return(scope, y);
}
