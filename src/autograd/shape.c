/* Gradients of the shape operations and of basic indexing. Each gradient is the
 * inverse movement of the output's gradient: views where the forward was a view,
 * a zero-filled tensor with a region assigned where the forward selected a region. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* A shape, enough to give a gradient back the input's layout. */
typedef struct shape_context {
    int ndim;
    int64_t shape[FL_MAX_DIMS];
} shape_context;

static shape_context shape_of(const fl_tensor *t)
{
    shape_context c = {.ndim = t->ndim};
    memcpy(c.shape, t->shape, sizeof c.shape);
    return c;
}

/* reshape, flatten, squeeze and unsqueeze only relabel the elements. */
static void reshape_grad(fl_grad *g)
{
    const shape_context *c = g->context;
    g->input_grads[0] = fl_reshape(g->output_grad, c->ndim, c->shape);
}

static fl_variable *record_reshape(fl_scope scope, fl_variable *x, const fl_tensor *y)
{
    shape_context c = shape_of(x->value);
    return fl_v_scope_return(scope, fl_v_record(y, FL_VARS(x), reshape_grad, FL_SAVE_NOTHING, &c, sizeof c));
}

fl_variable *fl_v_reshape(fl_variable *x, int ndim, const int64_t *shape)
{
    if (fl_null_args("fl_v_reshape", 1, x))
        return NULL;
    fl_scope scope = fl_scope_begin();
    return record_reshape(scope, x, fl_reshape(x->value, ndim, shape));
}

fl_variable *fl_v_flatten(fl_variable *x, int start_axis, int end_axis)
{
    if (fl_null_args("fl_v_flatten", 1, x))
        return NULL;
    fl_scope scope = fl_scope_begin();
    return record_reshape(scope, x, fl_flatten(x->value, start_axis, end_axis));
}

fl_variable *fl_v_squeeze(fl_variable *x, int axis)
{
    if (fl_null_args("fl_v_squeeze", 1, x))
        return NULL;
    fl_scope scope = fl_scope_begin();
    return record_reshape(scope, x, fl_squeeze(x->value, axis));
}

fl_variable *fl_v_unsqueeze(fl_variable *x, int axis)
{
    if (fl_null_args("fl_v_unsqueeze", 1, x))
        return NULL;
    fl_scope scope = fl_scope_begin();
    return record_reshape(scope, x, fl_unsqueeze(x->value, axis));
}

/* ---- permutations ---- */

typedef struct permute_context {
    int inverse[FL_MAX_DIMS];
} permute_context;

static void permute_grad(fl_grad *g)
{
    const permute_context *c = g->context;
    g->input_grads[0] = fl_permute(g->output_grad, c->inverse);
}

fl_variable *fl_v_permute(fl_variable *x, const int *axes)
{
    if (fl_null_args("fl_v_permute", 1, x))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_tensor *y = fl_permute(x->value, axes);
    permute_context c = {{0}};
    if (y) /* fl_permute checked that axes is a permutation */
        for (int i = 0; i < x->value->ndim; i++)
            c.inverse[axes[i] < 0 ? axes[i] + x->value->ndim : axes[i]] = i;
    return fl_v_scope_return(scope, fl_v_record(y, FL_VARS(x), permute_grad, FL_SAVE_NOTHING, &c, sizeof c));
}

typedef struct transpose_context {
    int axis0, axis1;
} transpose_context;

static void transpose_grad(fl_grad *g)
{
    const transpose_context *c = g->context;
    g->input_grads[0] = fl_transpose(g->output_grad, c->axis0, c->axis1);
}

fl_variable *fl_v_transpose(fl_variable *x, int axis0, int axis1)
{
    if (fl_null_args("fl_v_transpose", 1, x))
        return NULL;
    fl_scope scope = fl_scope_begin();
    transpose_context c = {axis0, axis1};
    fl_variable *y = fl_v_record(fl_transpose(x->value, axis0, axis1), FL_VARS(x), transpose_grad, FL_SAVE_NOTHING,
                                 &c, sizeof c);
    return fl_v_scope_return(scope, y);
}

/* ---- broadcasting ---- */

/* The engine sums a gradient down to its input's shape, which is all expand needs. */
static void expand_grad(fl_grad *g) { g->input_grads[0] = g->output_grad; }

fl_variable *fl_v_expand(fl_variable *x, int ndim, const int64_t *shape)
{
    if (fl_null_args("fl_v_expand", 1, x))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_variable *y = fl_v_record(fl_expand(x->value, ndim, shape), FL_VARS(x), expand_grad, FL_SAVE_NOTHING, NULL, 0);
    return fl_v_scope_return(scope, y);
}

/* ---- joining and splitting ---- */

/* The axis and each input's extent along it; the variable-length tail is sized by count. */
typedef struct join_context {
    int axis, count;
    int64_t sizes[];
} join_context;

static void concat_grad(fl_grad *g)
{
    const join_context *c = g->context;
    fl_tensor **pieces = calloc((size_t)c->count, sizeof *pieces);
    if (!pieces) {
        fl_error(FL_ERR_MEMORY, "fl_v_concat", "no memory for %d gradients", c->count);
        return;
    }
    if (fl_split(g->output_grad, c->sizes, c->count, c->axis, pieces) == FL_OK)
        for (int i = 0; i < c->count; i++)
            if (g->needs_grad[i])
                g->input_grads[i] = pieces[i];
    free(pieces);
}

static void stack_grad(fl_grad *g)
{
    const join_context *c = g->context;
    fl_index_item index[FL_MAX_DIMS];
    for (int d = 0; d < c->axis; d++)
        index[d] = FL_SPAN;
    for (int i = 0; i < c->count; i++) {
        if (!g->needs_grad[i])
            continue;
        index[c->axis] = FL_AT(i);
        g->input_grads[i] = fl_index(g->output_grad, index, c->axis + 1);
    }
}

/* concat and stack: one node over all the inputs. */
static fl_variable *join(const char *fn, fl_variable *const *xs, int count, int axis, bool stack)
{
    if (count < 1 || !xs)
        return fl_error(FL_ERR_VALUE, fn, "needs at least one variable, got %d", count);
    for (int i = 0; i < count; i++)
        if (fl_null_args(fn, 1, xs[i]))
            return NULL;
    fl_tensor **values = calloc((size_t)count, sizeof *values);
    join_context *c = malloc(sizeof *c + (size_t)count * sizeof *c->sizes);
    if (!values || !c) {
        free(values), free(c);
        return fl_error(FL_ERR_MEMORY, fn, "no memory for a list of %d inputs", count);
    }
    for (int i = 0; i < count; i++)
        values[i] = xs[i]->value;
    fl_scope scope = fl_scope_begin();
    fl_tensor *y = stack ? fl_stack(values, count, axis) : fl_concat(values, count, axis);
    fl_variable *result = NULL;
    /* The forward checked the axis (stack's ranges over one more axis than its inputs). */
    if (y && fl_normalize_axis(fn, axis, y->ndim, &c->axis)) {
        c->count = count;
        for (int i = 0; i < count; i++)
            c->sizes[i] = stack ? 1 : values[i]->shape[c->axis];
        size_t size = sizeof *c + (size_t)count * sizeof *c->sizes;
        result = fl_v_record(y, xs, count, stack ? stack_grad : concat_grad, FL_SAVE_NOTHING, c, size);
    }
    free(values);
    free(c);
    return fl_v_scope_return(scope, result);
}

fl_variable *fl_v_concat(fl_variable *const *xs, int count, int axis)
{
    return join("fl_v_concat", xs, count, axis, false);
}

fl_variable *fl_v_stack(fl_variable *const *xs, int count, int axis)
{
    return join("fl_v_stack", xs, count, axis, true);
}

/* One piece of a split: its gradient is padded with zeros back to the whole axis. */
typedef struct piece_context {
    int ndim, axis;
    int64_t before, after;
} piece_context;

static void piece_grad(fl_grad *g)
{
    const piece_context *c = g->context;
    int64_t before[FL_MAX_DIMS] = {0}, after[FL_MAX_DIMS] = {0};
    before[c->axis] = c->before;
    after[c->axis] = c->after;
    g->input_grads[0] = fl_pad(g->output_grad, before, after, 0);
}

fl_status fl_v_split(fl_variable *x, const int64_t *sizes, int count, int axis, fl_variable **out)
{
    if (!out)
        return fl_error(FL_ERR_NULL, "fl_v_split", "out is NULL"), FL_ERR_NULL;
    for (int i = 0; i < count; i++)
        out[i] = NULL;
    if (fl_null_args("fl_v_split", 1, x))
        return fl_last_status();
    if (count < 1)
        return fl_error(FL_ERR_VALUE, "fl_v_split", "needs at least one size, got %d", count), FL_ERR_VALUE;
    fl_tensor **pieces = calloc((size_t)count, sizeof *pieces);
    if (!pieces)
        return fl_error(FL_ERR_MEMORY, "fl_v_split", "no memory for %d pieces", count), FL_ERR_MEMORY;
    fl_scope scope = fl_scope_begin();
    fl_status status = fl_split(x->value, sizes, count, axis, pieces);
    piece_context c = {.ndim = x->value->ndim};
    if (status == FL_OK && !fl_normalize_axis("fl_v_split", axis, x->value->ndim, &c.axis))
        status = fl_last_status();
    if (status == FL_OK) {
        int64_t start = 0, total = x->value->shape[c.axis];
        for (int i = 0; i < count && status == FL_OK; i++) {
            c.before = start;
            c.after = total - start - sizes[i];
            start += sizes[i];
            out[i] = fl_v_keep(fl_v_record(pieces[i], FL_VARS(x), piece_grad, FL_SAVE_NOTHING, &c, sizeof c));
            status = out[i] ? FL_OK : fl_last_status();
        }
    }
    free(pieces);
    fl_scope_end(scope);
    for (int i = 0; i < count; i++) {
        if (status != FL_OK) {
            fl_v_release(out[i]);
            out[i] = NULL;
        } else {
            out[i] = fl__v_out(out[i]);
        }
    }
    return status;
}

/* ---- basic indexing ---- */

/* A valid index has at most one entry per axis plus one per new axis of the result. */
#define MAX_INDEX_ITEMS (2 * FL_MAX_DIMS)

typedef struct index_context {
    shape_context input;
    int count;
    fl_index_item items[MAX_INDEX_ITEMS];
} index_context;

/* Whether the index is x[..., a:b, ...], a range with a step of 1 within one axis and
 * every other axis whole (a sequence's first steps, some of the features); then the
 * padding of the output's gradient that gives x's: fl_pad pads one axis in a single
 * write, where writing the gradient into a tensor of zeros writes x's size twice. */
static bool single_range(const index_context *c, const fl_tensor *dy, int64_t *before, int64_t *after)
{
    int axis = -1, ndim = c->input.ndim;
    if (c->count > ndim || fl_ndim(dy) != ndim)
        return false;
    for (int i = 0; i < c->count; i++) {
        fl_index_item item = c->items[i];
        if (item.kind == FL_INDEX_SPAN)
            continue;
        if (item.kind != FL_INDEX_RANGE || item.step != 1 || axis >= 0 || item.start < 0 ||
            item.start > c->input.shape[i])
            return false;
        axis = i;
    }
    for (int i = 0; i < ndim; i++)
        before[i] = after[i] = 0;
    if (axis < 0)
        return false;
    before[axis] = c->items[axis].start;
    after[axis] = c->input.shape[axis] - before[axis] - fl_dim(dy, axis);
    return after[axis] >= 0;
}

/* The selected region is distinct elements of x (steps never revisit one), so its
 * gradient is the output's gradient written into zeros at the same index. */
static void index_grad(fl_grad *g)
{
    const index_context *c = g->context;
    int64_t before[FL_MAX_DIMS], after[FL_MAX_DIMS];
    if (single_range(c, g->output_grad, before, after)) {
        g->input_grads[0] = fl_pad(g->output_grad, before, after, 0);
        return;
    }
    fl_tensor *zeros = fl_new_full(g->output_grad, 0, fl_dtype_of(g->output_grad), c->input.ndim, c->input.shape);
    g->input_grads[0] = fl_index_assign(zeros, c->items, c->count, g->output_grad);
}

fl_variable *fl_v_index(fl_variable *x, const fl_index_item *index, int count)
{
    if (fl_null_args("fl_v_index", 1, x))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_tensor *y = fl_index(x->value, index, count);
    index_context c = {.input = shape_of(x->value), .count = count};
    if (y && count > MAX_INDEX_ITEMS) /* unreachable: fl_index rejects such an index */
        y = fl_error(FL_ERR_VALUE, "fl_v_index", "an index of %d entries is too long", count);
    if (y && count > 0)
        memcpy(c.items, index, (size_t)count * sizeof *index);
    return fl_v_scope_return(scope, fl_v_record(y, FL_VARS(x), index_grad, FL_SAVE_NOTHING, &c, sizeof c));
}

/* ---- padding and tiling ---- */

typedef struct pad_context {
    shape_context input;
    int64_t before[FL_MAX_DIMS];
} pad_context;

static void pad_grad(fl_grad *g)
{
    const pad_context *c = g->context;
    fl_index_item region[FL_MAX_DIMS];
    for (int i = 0; i < c->input.ndim; i++)
        region[i] = FL_RANGE(c->before[i], c->before[i] + c->input.shape[i]);
    g->input_grads[0] = fl_index(g->output_grad, region, c->input.ndim);
}

fl_variable *fl_v_pad(fl_variable *x, const int64_t *before, const int64_t *after, double value)
{
    if (fl_null_args("fl_v_pad", 1, x))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_tensor *y = fl_pad(x->value, before, after, value);
    pad_context c = {.input = shape_of(x->value)};
    if (y && x->value->ndim > 0)
        memcpy(c.before, before, (size_t)x->value->ndim * sizeof *before);
    return fl_v_scope_return(scope, fl_v_record(y, FL_VARS(x), pad_grad, FL_SAVE_NOTHING, &c, sizeof c));
}

typedef struct tile_context {
    shape_context input;
    int ndim; /* of the result: the longer of the input's shape and the repeats */
    int64_t reps[FL_MAX_DIMS];
} tile_context;

/* Each tiled axis holds reps copies of the input's extent; summing the copies one axis
 * at a time keeps every step at three dimensions, however many axes are tiled. */
static void tile_grad(fl_grad *g)
{
    const tile_context *c = g->context;
    fl_tensor *dy = g->output_grad;
    if (dy->numel == 0) { /* a repeat of zero: x was not used */
        g->input_grads[0] = fl_new_full(dy, 0, dy->dtype, c->input.ndim, c->input.shape);
        return;
    }
    int64_t shape[FL_MAX_DIMS];
    memcpy(shape, dy->shape, sizeof shape);
    for (int i = 0; i < c->ndim && dy; i++) {
        if (c->reps[i] == 1)
            continue;
        int64_t outer = 1, inner = 1;
        for (int k = 0; k < i; k++)
            outer *= shape[k];
        shape[i] /= c->reps[i];
        for (int k = i; k < c->ndim; k++)
            inner *= shape[k];
        dy = fl_sum(fl_reshape(dy, FL_SHAPE(outer, c->reps[i], inner)), FL_AXES(1), false);
        dy = fl_reshape(dy, c->ndim, shape);
    }
    g->input_grads[0] = fl_reshape(dy, c->input.ndim, c->input.shape);
}

fl_variable *fl_v_tile(fl_variable *x, int count, const int64_t *repeats)
{
    if (fl_null_args("fl_v_tile", 1, x))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_tensor *y = fl_tile(x->value, count, repeats);
    tile_context c = {.input = shape_of(x->value)};
    if (y) {
        c.ndim = y->ndim;
        for (int i = 0; i < c.ndim; i++)
            c.reps[i] = i < c.ndim - count ? 1 : repeats[i - (c.ndim - count)];
    }
    return fl_v_scope_return(scope, fl_v_record(y, FL_VARS(x), tile_grad, FL_SAVE_NOTHING, &c, sizeof c));
}

typedef struct triangle_context {
    int64_t diagonal;
    bool lower;
} triangle_context;

/* The masked elements did not reach the output: their gradient is zero. */
static void triangle_grad(fl_grad *g)
{
    const triangle_context *c = g->context;
    g->input_grads[0] = c->lower ? fl_tril(g->output_grad, c->diagonal) : fl_triu(g->output_grad, c->diagonal);
}

static fl_variable *triangle(const char *fn, fl_variable *x, int64_t diagonal, bool lower)
{
    if (fl_null_args(fn, 1, x))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_tensor *y = lower ? fl_tril(x->value, diagonal) : fl_triu(x->value, diagonal);
    triangle_context c = {.diagonal = diagonal, .lower = lower};
    return fl_v_scope_return(scope, fl_v_record(y, FL_VARS(x), triangle_grad, FL_SAVE_NOTHING, &c, sizeof c));
}

fl_variable *fl_v_tril(fl_variable *x, int64_t diagonal) { return triangle("fl_v_tril", x, diagonal, true); }
fl_variable *fl_v_triu(fl_variable *x, int64_t diagonal) { return triangle("fl_v_triu", x, diagonal, false); }
