/* Indexing: NumPy's basic indexing (views through the slice primitive) and its
 * functional assignment, where, and the index-tensor operations of PyTorch (gather,
 * scatter_add, index_select, one_hot). Index values are checked here, so backends
 * never see one out of range. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ---- basic indexing ---- */

/* What a numpy-like index selects: a strided region of t (one entry per axis of t;
 * an AT axis is a region of size 1) and the shape of the result, which drops the AT
 * axes and inserts the NEWAXIS ones. */
typedef struct selection {
    int64_t start[FL_MAX_DIMS], step[FL_MAX_DIMS], region[FL_MAX_DIMS];
    bool whole; /* the region is all of t */
    int ndim;
    int64_t shape[FL_MAX_DIMS];
} selection;

/* Python's slice.indices(): bounds clamp into the axis, negative ones count from the
 * end, and with a negative step the range runs down to (excluding) stop. */
static void resolve_range(int64_t start, int64_t stop, int64_t step, int64_t size, int64_t *first, int64_t *count)
{
    int64_t low = step > 0 ? 0 : -1, high = step > 0 ? size : size - 1;
    if (start < 0)
        start = start + size < low ? low : start + size;
    else if (start > high)
        start = high;
    if (stop == FL_END)
        stop = step > 0 ? size : -1;
    else if (stop < 0)
        stop = stop + size < low ? low : stop + size;
    else if (stop > high)
        stop = high;
    /* In unsigned arithmetic: a step of INT64_MAX or INT64_MIN takes one element. */
    uint64_t stride = step > 0 ? (uint64_t)step : -(uint64_t)step;
    int64_t distance = step > 0 ? stop - start : start - stop;
    *count = distance > 0 ? (int64_t)((uint64_t)(distance - 1) / stride + 1) : 0;
    *first = *count > 0 ? start : 0; /* an empty region points at nothing */
}

static bool select_index(const char *fn, const fl_tensor *t, const fl_index_item *index, int count, selection *s)
{
    char buf[FL_DESC_SIZE];
    if (count < 0 || (count > 0 && !index)) {
        fl_error(FL_ERR_VALUE, fn, "invalid index of %d entries", count);
        return false;
    }
    int consumed = 0;
    for (int i = 0; i < count; i++)
        consumed += index[i].kind != FL_INDEX_NEW;
    if (consumed > t->ndim) {
        fl_error(FL_ERR_INDEX, fn, "too many indices: %d for the %d axes of %s", consumed, t->ndim,
                  fl_describe(t, buf));
        return false;
    }
    s->whole = true;
    s->ndim = 0;
    int axis = 0;
    for (int i = 0; i < count || axis < t->ndim; i++) {
        fl_index_item item = i < count ? index[i] : FL_SPAN;
        if ((unsigned)item.kind > FL_INDEX_NEW) {
            fl_error(FL_ERR_VALUE, fn, "entry %d of the index has an unknown kind (%d)", i, (int)item.kind);
            return false;
        }
        if (item.kind != FL_INDEX_AT && s->ndim == FL_MAX_DIMS) {
            fl_error(FL_ERR_SHAPE, fn, "the result would have more than %d dimensions", FL_MAX_DIMS);
            return false;
        }
        int64_t size = item.kind == FL_INDEX_NEW ? 1 : t->shape[axis];
        switch (item.kind) {
        case FL_INDEX_NEW:
            s->shape[s->ndim++] = 1;
            continue;
        case FL_INDEX_SPAN:
            s->start[axis] = 0;
            s->step[axis] = 1;
            s->region[axis] = size;
            s->shape[s->ndim++] = size;
            break;
        case FL_INDEX_RANGE:
            if (item.step == 0) {
                fl_error(FL_ERR_VALUE, fn, "the step of the range on axis %d is zero", axis);
                return false;
            }
            resolve_range(item.start, item.stop, item.step, size, &s->start[axis], &s->region[axis]);
            s->step[axis] = s->region[axis] > 1 ? item.step : 1; /* the backend multiplies strides by it */
            s->shape[s->ndim++] = s->region[axis];
            break;
        case FL_INDEX_AT: {
            int64_t at = item.start < 0 ? item.start + size : item.start;
            if (at < 0 || at >= size) {
                fl_error(FL_ERR_INDEX, fn, "index %lld is out of range for axis %d of size %lld (%s)",
                          (long long)item.start, axis, (long long)size, fl_describe(t, buf));
                return false;
            }
            s->start[axis] = at;
            s->step[axis] = 1;
            s->region[axis] = 1;
            s->whole = s->whole && size == 1;
            axis++;
            continue;
        }
        }
        s->whole = s->whole && s->start[axis] == 0 && s->region[axis] == size && (s->step[axis] == 1 || size <= 1);
        axis++;
    }
    return true;
}

/* The region of t that s selects, as t's backend views it; owned. */
static fl_tensor *region_of(const char *fn, const fl_tensor *t, const selection *s)
{
    if (s->whole)
        return fl_retain(t);
    FL_ENTRY_TYPE(slice) slice =
        fl__primitive(fn, t->backend, FL_PRIMITIVE(slice), "slice");
    if (!slice)
        return NULL;
    fl_tensor *out = fl__new(t->backend, t->dtype, t->ndim, s->region);
    if (!out)
        return NULL;
    fl__begin("slice");
    out = fl__finish(fn, out, slice(t->backend, out, t, s->start, s->step), 1, &t);
    fl__bound_like(out, t);
    return out;
}

fl_tensor *fl_index(const fl_tensor *t, const fl_index_item *index, int count)
{
    selection s;
    if (fl_null_args("fl_index", 1, t) || !select_index("fl_index", t, index, count, &s))
        return NULL;
    fl_tensor *region = region_of("fl_index", t, &s);
    fl_tensor *out = region ? fl__reshape(region, s.ndim, s.shape) : NULL;
    fl_release(region);
    return fl_out(out);
}

fl_tensor *fl_index_assign(const fl_tensor *t, const fl_index_item *index, int count, const fl_tensor *value)
{
    const char *fn = "fl_index_assign";
    selection s;
    if (fl_null_args(fn, 2, t, value) || !select_index(fn, t, index, count, &s))
        return NULL;
    if (fl_mixed_backends(fn, 2, t, value))
        return NULL;
    /* The value broadcasts to the indexed shape; leading size-1 axes beyond it are
     * dropped first, as NumPy does. */
    int lead = 0;
    while (value->ndim - lead > s.ndim && value->shape[lead] == 1)
        lead++;
    bool fits = value->ndim - lead <= s.ndim;
    for (int i = lead; fits && i < value->ndim; i++) {
        int64_t want = s.shape[s.ndim - (value->ndim - i)];
        fits = value->shape[i] == want || value->shape[i] == 1;
    }
    char a[FL_DESC_SIZE], b[FL_DESC_SIZE], c[FL_DESC_SIZE];
    if (!fits)
        return fl_error(FL_ERR_SHAPE, fn, "cannot assign %s to the region %s of %s", fl_describe(value, a),
                         fl_describe_shape(s.ndim, s.shape, b), fl_describe(t, c));
    FL_ENTRY_TYPE(update_slice) update_slice =
        fl__primitive(fn, t->backend, FL_PRIMITIVE(update_slice), "update_slice");
    if (!update_slice)
        return NULL;
    fl_tensor *stripped = fl__reshape(value, value->ndim - lead, value->shape + lead);
    fl_tensor *cast = stripped ? fl__cast(stripped, t->dtype) : NULL;
    fl_tensor *expanded = cast ? fl__expand(cast, s.ndim, s.shape) : NULL;
    fl_tensor *source = expanded ? fl__reshape(expanded, t->ndim, s.region) : NULL;
    fl_tensor *out = source ? fl__new(t->backend, t->dtype, t->ndim, t->shape) : NULL;
    if (out) {
        const fl_tensor *inputs[2] = {t, source};
        fl__begin("update_slice");
        out = fl__finish(fn, out, update_slice(t->backend, out, t, source, s.start, s.step), 2, inputs);
    }
    fl_release(stripped);
    fl_release(cast);
    fl_release(expanded);
    fl_release(source);
    return fl_out(out);
}

/* ---- where ---- */

fl_tensor *fl_where(const fl_tensor *cond, const fl_tensor *a, const fl_tensor *b)
{
    const char *fn = "fl_where";
    if (fl_null_args(fn, 3, cond, a, b))
        return NULL;
    char dc[FL_DESC_SIZE], da[FL_DESC_SIZE], db[FL_DESC_SIZE];
    if (fl_mixed_backends(fn, 3, cond, a, b))
        return NULL;
    if (fl_dtype_is_float(cond->dtype)) /* as torch.where: 0.5 is neither true nor false */
        return fl_error(FL_ERR_DTYPE, fn, "the condition %s must be bool or an integer, not a float",
                        fl_describe(cond, dc));
    int pair_ndim, ndim;
    int64_t pair[FL_MAX_DIMS], shape[FL_MAX_DIMS];
    if (!fl__broadcast_shapes(cond->ndim, cond->shape, a->ndim, a->shape, &pair_ndim, pair) ||
        !fl__broadcast_shapes(pair_ndim, pair, b->ndim, b->shape, &ndim, shape))
        return fl_error(FL_ERR_SHAPE, fn, "shapes %s, %s and %s do not broadcast", fl_describe(cond, dc),
                         fl_describe(a, da), fl_describe(b, db));
    FL_ENTRY_TYPE(where) primitive =
        fl__primitive(fn, cond->backend, FL_PRIMITIVE(where), "where");
    if (!primitive)
        return NULL;
    /* A selection moves values without computing on them, so f16 and bf16 pass as they are. */
    fl_dtype dtype = fl_promote_types(a->dtype, b->dtype);
    fl_tensor *operands[3] = {fl__cast(cond, FL_BOOL), NULL, NULL}, *expanded[3] = {NULL, NULL, NULL};
    operands[1] = operands[0] ? fl__cast(a, dtype) : NULL;
    operands[2] = operands[1] ? fl__cast(b, dtype) : NULL;
    for (int i = 0; i < 3 && operands[2]; i++)
        if (!(expanded[i] = fl__expand(operands[i], ndim, shape)))
            break;
    fl_tensor *out = expanded[2] ? fl__new(cond->backend, dtype, ndim, shape) : NULL;
    if (out) {
        fl__begin("where");
        out = fl__finish(fn, out, primitive(cond->backend, out, expanded[0], expanded[1], expanded[2]), 3,
                         (const fl_tensor *const *)expanded);
    }
    if (out && operands[1]->bounded && operands[2]->bounded) { /* each value is one of theirs */
        out->bounded = true;
        out->low = operands[1]->low < operands[2]->low ? operands[1]->low : operands[2]->low;
        out->high = operands[1]->high > operands[2]->high ? operands[1]->high : operands[2]->high;
    }
    for (int i = 0; i < 3; i++) {
        fl_release(operands[i]);
        fl_release(expanded[i]);
    }
    return fl_out(out);
}

/* ---- index tensors ---- */

fl_tensor *fl__checked_index(const char *fn, const fl_tensor *index, const fl_tensor *t, int axis, int64_t size)
{
    char di[FL_DESC_SIZE], dt[FL_DESC_SIZE];
    if (!fl_dtype_is_integer(index->dtype))
        return fl_error(FL_ERR_DTYPE, fn, "the index must be an integer tensor, got %s", fl_describe(index, di));
    fl_tensor *wide = fl__cast(index, FL_I64);
    if (!wide || wide->numel == 0)
        return wide;
    if (index->bounded && index->low >= 0 && index->high < size) /* known good: no read */
        return wide;
    int64_t *values = malloc((size_t)wide->numel * sizeof *values);
    if (!values) {
        fl_release(wide);
        return fl_error(FL_ERR_MEMORY, fn, "no memory to check %lld indices", (long long)wide->numel);
    }
    fl_status status = fl_to_host(wide, values, (size_t)wide->numel * sizeof *values);
    int64_t bad = -1;
    for (int64_t i = 0; status == FL_OK && i < wide->numel; i++)
        if (values[i] < 0 || values[i] >= size) {
            bad = values[i];
            status = FL_ERR_INDEX;
        }
    free(values);
    if (status == FL_OK)
        return wide;
    fl_release(wide);
    if (status != FL_ERR_INDEX)
        return NULL; /* fl_to_host recorded why */
    if (axis < 0)
        return fl_error(FL_ERR_INDEX, fn, "index %lld is %s (%lld classes; index %s)", (long long)bad,
                         bad < 0 ? "negative" : "out of range", (long long)size, fl_describe(index, di));
    return fl_error(FL_ERR_INDEX, fn, "index %lld is out of range for axis %d of size %lld (input %s, index %s)",
                     (long long)bad, axis, (long long)size, fl_describe(t, dt), fl_describe(index, di));
}

/* torch's shape rules for gather and scatter_add: index has as many axes as bound and
 * is no longer than bound along each (but along axis, when skip_axis). */
static bool index_fits(const char *fn, const fl_tensor *index, const fl_tensor *bound, const char *bound_name,
                       int axis, bool skip_axis)
{
    char di[FL_DESC_SIZE], db[FL_DESC_SIZE];
    if (index->ndim != bound->ndim) {
        fl_error(FL_ERR_SHAPE, fn, "index %s must have as many axes as %s %s", fl_describe(index, di), bound_name,
                  fl_describe(bound, db));
        return false;
    }
    for (int d = 0; d < index->ndim; d++)
        if (!(skip_axis && d == axis) && index->shape[d] > bound->shape[d]) {
            fl_error(FL_ERR_SHAPE, fn, "index %s is larger than %s %s along axis %d", fl_describe(index, di),
                      bound_name, fl_describe(bound, db), d);
            return false;
        }
    return true;
}

fl_tensor *fl_gather(const fl_tensor *t, int axis, const fl_tensor *index)
{
    const char *fn = "fl_gather";
    int ax;
    if (fl_null_args(fn, 2, t, index) || !fl_normalize_axis(fn, axis, t->ndim, &ax))
        return NULL;
    if (fl_mixed_backends(fn, 2, t, index))
        return NULL;
    if (!index_fits(fn, index, t, "the input", ax, true))
        return NULL;
    FL_ENTRY_TYPE(gather) primitive =
        fl__primitive(fn, t->backend, FL_PRIMITIVE(gather), "gather");
    fl_tensor *wide = primitive ? fl__checked_index(fn, index, t, axis, t->shape[ax]) : NULL;
    fl_tensor *out = wide ? fl__new(t->backend, t->dtype, index->ndim, index->shape) : NULL;
    if (out) {
        const fl_tensor *inputs[2] = {t, wide};
        fl__begin("gather");
        out = fl__finish(fn, out, primitive(t->backend, out, t, ax, wide), 2, inputs);
        fl__bound_like(out, t); /* its values are some of t's */
    }
    fl_release(wide);
    return fl_out(out);
}

/* src is cast to t's dtype (torch requires them equal); f16 and bf16 add in f32, and
 * bool adds as a logical or. */
fl_tensor *fl_scatter_add(const fl_tensor *t, int axis, const fl_tensor *index, const fl_tensor *src)
{
    const char *fn = "fl_scatter_add";
    int ax;
    if (fl_null_args(fn, 3, t, index, src) || !fl_normalize_axis(fn, axis, t->ndim, &ax))
        return NULL;
    if (fl_mixed_backends(fn, 3, t, index, src))
        return NULL;
    if (!index_fits(fn, index, t, "the input", ax, true) || !index_fits(fn, index, src, "the source", ax, false))
        return NULL;
    FL_ENTRY_TYPE(scatter_add) primitive =
        fl__primitive(fn, t->backend, FL_PRIMITIVE(scatter_add), "scatter_add");
    if (!primitive)
        return NULL;
    fl_dtype compute = fl__compute_dtype(t->dtype);
    fl_scope scope = fl_scope_begin();
    fl_tensor *out = NULL, *wide = fl__checked_index(fn, index, t, axis, t->shape[ax]);
    /* Only the part of src that index covers is added. */
    fl_index_item covered[FL_MAX_DIMS];
    for (int d = 0; d < index->ndim; d++)
        covered[d] = FL_RANGE(0, index->shape[d]);
    fl_tensor *base = wide ? fl_cast(t, compute) : NULL;
    fl_tensor *values = base ? fl_cast(fl_index(src, covered, index->ndim), compute) : NULL;
    if (values)
        out = fl__new(t->backend, compute, t->ndim, t->shape);
    if (out) {
        const fl_tensor *inputs[3] = {base, wide, values};
        fl__begin("scatter_add");
        out = fl_out(fl__finish(fn, out, primitive(t->backend, out, base, ax, wide, values), 3, inputs));
    }
    fl_release(wide);
    return fl_scope_return(scope, fl_cast(out, t->dtype));
}

fl_tensor *fl_index_select(const fl_tensor *t, int axis, const fl_tensor *index)
{
    const char *fn = "fl_index_select";
    int ax;
    if (fl_null_args(fn, 2, t, index) || !fl_normalize_axis(fn, axis, t->ndim, &ax))
        return NULL;
    char di[FL_DESC_SIZE];
    if (fl_mixed_backends(fn, 2, t, index))
        return NULL;
    if (index->ndim > 1)
        return fl_error(FL_ERR_SHAPE, fn, "the index must be 1-D, got %s", fl_describe(index, di));
    FL_ENTRY_TYPE(index_select) primitive =
        fl__primitive(fn, t->backend, FL_PRIMITIVE(index_select), "index_select");
    fl_tensor *wide = primitive ? fl__checked_index(fn, index, t, axis, t->shape[ax]) : NULL;
    int64_t shape[FL_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    shape[ax] = index->numel;
    fl_tensor *out = wide ? fl__new(t->backend, t->dtype, t->ndim, shape) : NULL;
    if (out) {
        const fl_tensor *inputs[2] = {t, wide};
        fl__begin("index_select");
        out = fl__finish(fn, out, primitive(t->backend, out, t, ax, wide), 2, inputs);
        fl__bound_like(out, t); /* its values are some of t's */
    }
    fl_release(wide);
    return fl_out(out);
}

/* Composed: index[..., None] == arange(num_classes). */
fl_tensor *fl_one_hot(const fl_tensor *index, int64_t num_classes, fl_dtype dtype)
{
    const char *fn = "fl_one_hot";
    if (fl_null_args(fn, 1, index))
        return NULL;
    char di[FL_DESC_SIZE];
    if ((unsigned)dtype >= FL_DTYPE_COUNT)
        return fl_error(FL_ERR_DTYPE, fn, "invalid dtype %d", (int)dtype);
    if (num_classes < 0)
        return fl_error(FL_ERR_VALUE, fn, "num_classes must not be negative, got %lld", (long long)num_classes);
    if (index->ndim == FL_MAX_DIMS)
        return fl_error(FL_ERR_SHAPE, fn, "%s has no room for the class axis (at most %d dimensions)",
                         fl_describe(index, di), FL_MAX_DIMS);
    fl_tensor *wide = fl__checked_index(fn, index, NULL, -1, num_classes);
    if (!wide)
        return NULL;
    int64_t shape[FL_MAX_DIMS];
    memcpy(shape, index->shape, sizeof shape);
    shape[index->ndim] = num_classes;
    if (index->numel == 0 || num_classes == 0) {
        fl_release(wide);
        return fl_out(fl__full(index->backend, 0, dtype, index->ndim + 1, shape));
    }
    fl_scope scope = fl_scope_begin();
    fl_tensor *classes = fl_to_backend(fl_arange(0, (double)num_classes, 1, FL_I64), index->backend->name);
    fl_tensor *hot = fl_cast(fl_eq(fl_unsqueeze(wide, -1), classes), dtype);
    fl_release(wide);
    return fl_scope_return(scope, hot);
}
