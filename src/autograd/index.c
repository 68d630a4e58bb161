/* Gradients of the index-tensor operations: each gathered element's gradient is added
 * back where it came from, with fl_scatter_add (indices that repeat accumulate). */
#include <string.h>

#include "internal.h"

typedef struct gather_context {
    int axis;
    int ndim;
    int64_t shape[FL_MAX_DIMS];
} gather_context;

static fl_tensor *zeros_of(const gather_context *c, const fl_tensor *like)
{
    return fl_new_full(like, 0, fl_dtype_of(like), c->ndim, c->shape);
}

/* Saved: index. */
static void gather_grad(fl_grad *g)
{
    const gather_context *c = g->context;
    g->input_grads[0] = fl_scatter_add(zeros_of(c, g->output_grad), c->axis, g->saved[0], g->output_grad);
}

/* Saved: index, as the 1-D list of positions. Viewed as [1, .., n, .., 1] and
 * expanded (not copied) to the gradient's shape, it scatters whole slices. */
static void index_select_grad(fl_grad *g)
{
    const gather_context *c = g->context;
    const fl_tensor *dy = g->output_grad;
    int64_t along[FL_MAX_DIMS];
    for (int i = 0; i < c->ndim; i++)
        along[i] = i == c->axis ? -1 : 1;
    fl_tensor *index = fl_expand(fl_reshape(g->saved[0], c->ndim, along), dy->ndim, dy->shape);
    g->input_grads[0] = fl_scatter_add(zeros_of(c, dy), c->axis, index, dy);
}

static fl_variable *gather_or_select(const char *fn, fl_variable *x, int axis, const fl_tensor *index, bool slices)
{
    if (fl_null_args(fn, 2, x, index))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_tensor *y = slices ? fl_index_select(x->value, axis, index) : fl_gather(x->value, axis, index);
    gather_context c = {.ndim = x->value->ndim};
    memcpy(c.shape, x->value->shape, sizeof c.shape);
    if (y) /* the forward checked the axis */
        fl_normalize_axis(fn, axis, c.ndim, &c.axis);
    fl_variable *v = fl_v_record(y, FL_VARS(x), slices ? index_select_grad : gather_grad, FL_SAVE(index), &c,
                                 sizeof c);
    return fl_v_scope_return(scope, v);
}

fl_variable *fl_v_gather(fl_variable *x, int axis, const fl_tensor *index)
{
    return gather_or_select("fl_v_gather", x, axis, index, false);
}

fl_variable *fl_v_index_select(fl_variable *x, int axis, const fl_tensor *index)
{
    return gather_or_select("fl_v_index_select", x, axis, index, true);
}
