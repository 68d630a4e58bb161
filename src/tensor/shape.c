/* Shape operations: reshape and its relatives, permutations, broadcasting, joining,
 * splitting, padding and tiling. Reshapes, permutations, expansions and splits are
 * views where the backend can make them; the rest copy through concat and
 * update_slice. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

fl_tensor *fl_reshape(const fl_tensor *t, int ndim, const int64_t *shape)
{
    if (fl_null_args("fl_reshape", 1, t))
        return NULL;
    char a[FL_DESC_SIZE], b[FL_DESC_SIZE];
    if (ndim < 0 || ndim > FL_MAX_DIMS || (ndim > 0 && !shape))
        return fl_error(FL_ERR_SHAPE, "fl_reshape", "invalid target of %d dimensions", ndim);
    int64_t resolved[FL_MAX_DIMS], known = 1;
    int infer = -1;
    for (int i = 0; i < ndim; i++) {
        resolved[i] = shape[i];
        if (shape[i] == -1 && infer < 0)
            infer = i;
        else if (shape[i] < 0)
            return fl_error(FL_ERR_SHAPE, "fl_reshape", "cannot reshape %s to %s", fl_describe(t, a),
                             fl_describe_shape(ndim, shape, b));
        else if (!fl_size_mul(known, shape[i], &known))
            return fl_error(FL_ERR_SHAPE, "fl_reshape", "cannot reshape %s to %s: too many elements",
                            fl_describe(t, a), fl_describe_shape(ndim, shape, b));
    }
    if (infer >= 0) {
        if (known == 0 || t->numel % known != 0)
            return fl_error(FL_ERR_SHAPE, "fl_reshape", "cannot reshape %s to %s", fl_describe(t, a),
                             fl_describe_shape(ndim, shape, b));
        resolved[infer] = t->numel / known;
        known *= resolved[infer];
    }
    if (known != t->numel)
        return fl_error(FL_ERR_SHAPE, "fl_reshape", "cannot reshape %s (%lld elements) to %s", fl_describe(t, a),
                         (long long)t->numel, fl_describe_shape(ndim, shape, b));
    return fl_out(fl__reshape(t, ndim, resolved));
}

fl_tensor *fl_flatten(const fl_tensor *t, int start_axis, int end_axis)
{
    if (fl_null_args("fl_flatten", 1, t))
        return NULL;
    if (t->ndim == 0) { /* as torch.flatten: a 0-d tensor becomes one of shape [1] */
        int start, end;
        if (!fl_normalize_axis("fl_flatten", start_axis, 1, &start) || !fl_normalize_axis("fl_flatten", end_axis, 1, &end))
            return NULL;
        return fl_out(fl__reshape(t, 1, (const int64_t[]){1}));
    }
    int start, end;
    if (!fl_normalize_axis("fl_flatten", start_axis, t->ndim, &start) || !fl_normalize_axis("fl_flatten", end_axis, t->ndim, &end))
        return NULL;
    if (start > end)
        return fl_error(FL_ERR_AXIS, "fl_flatten", "start axis %d comes after end axis %d", start_axis, end_axis);
    int64_t shape[FL_MAX_DIMS];
    int ndim = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (i <= start || i > end)
            shape[ndim++] = t->shape[i];
        else
            shape[ndim - 1] *= t->shape[i];
    }
    return fl_out(fl__reshape(t, ndim, shape));
}

/* ---- permutations ---- */

static fl_tensor *permute(const char *fn, const fl_tensor *t, const int *axes)
{
    bool identity = true;
    for (int i = 0; i < t->ndim; i++)
        identity = identity && axes[i] == i;
    if (identity)
        return fl_retain(t);
    FL_ENTRY_TYPE(permute) primitive =
        fl__primitive(fn, t->backend, FL_PRIMITIVE(permute), "permute");
    if (!primitive)
        return NULL;
    int64_t shape[FL_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++)
        shape[i] = t->shape[axes[i]];
    fl_tensor *out = fl__new(t->backend, t->dtype, t->ndim, shape);
    if (!out)
        return NULL;
    fl__begin("permute");
    return fl__finish(fn, out, primitive(t->backend, out, t, axes), 1, &t);
}

fl_tensor *fl_permute(const fl_tensor *t, const int *axes)
{
    if (fl_null_args("fl_permute", 1, t))
        return NULL;
    if (t->ndim > 0 && !axes)
        return fl_error(FL_ERR_NULL, "fl_permute", "axes is NULL");
    int resolved[FL_MAX_DIMS];
    unsigned seen = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (!fl_normalize_axis("fl_permute", axes[i], t->ndim, &resolved[i]))
            return NULL;
        if (seen & (1u << resolved[i])) {
            char buf[FL_DESC_SIZE];
            return fl_error(FL_ERR_AXIS, "fl_permute", "axis %d is listed twice; the axes must be a permutation of the %d axes of %s",
                             axes[i], t->ndim, fl_describe(t, buf));
        }
        seen |= 1u << resolved[i];
    }
    return fl_out(permute("fl_permute", t, resolved));
}

fl_tensor *fl_transpose(const fl_tensor *t, int axis0, int axis1)
{
    if (fl_null_args("fl_transpose", 1, t))
        return NULL;
    int a, b;
    if (!fl_normalize_axis("fl_transpose", axis0, t->ndim, &a) || !fl_normalize_axis("fl_transpose", axis1, t->ndim, &b))
        return NULL;
    int axes[FL_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++)
        axes[i] = i == a ? b : i == b ? a : i;
    return fl_out(permute("fl_transpose", t, axes));
}

/* ---- broadcasting ---- */

/* Checks that t broadcasts to shape, resolving -1 entries (which keep t's size)
 * when keep_allowed; reports failures as fn. */
static bool broadcast_target(const char *fn, const fl_tensor *t, int ndim, const int64_t *shape, bool keep_allowed,
                             int64_t *resolved)
{
    char a[FL_DESC_SIZE], b[FL_DESC_SIZE];
    if (ndim < 0 || ndim > FL_MAX_DIMS || (ndim > 0 && !shape)) {
        fl_error(FL_ERR_SHAPE, fn, "invalid target of %d dimensions", ndim);
        return false;
    }
    int lead = ndim - t->ndim;
    if (lead < 0) {
        fl_error(FL_ERR_SHAPE, fn, "cannot broadcast %s to %s: the target has fewer dimensions", fl_describe(t, a),
                  fl_describe_shape(ndim, shape, b));
        return false;
    }
    for (int i = 0; i < ndim; i++) {
        int64_t have = i < lead ? 1 : t->shape[i - lead];
        int64_t want = shape[i];
        if (want == -1 && keep_allowed && i >= lead)
            want = have;
        if (want < 0 || (have != want && have != 1)) {
            fl_error(FL_ERR_SHAPE, fn, "cannot broadcast %s to %s", fl_describe(t, a),
                      fl_describe_shape(ndim, shape, b));
            return false;
        }
        resolved[i] = want;
    }
    return true;
}

fl_tensor *fl_expand(const fl_tensor *t, int ndim, const int64_t *shape)
{
    int64_t resolved[FL_MAX_DIMS];
    if (fl_null_args("fl_expand", 1, t) || !broadcast_target("fl_expand", t, ndim, shape, true, resolved))
        return NULL;
    return fl_out(fl__expand(t, ndim, resolved));
}

fl_tensor *fl_broadcast_to(const fl_tensor *t, int ndim, const int64_t *shape)
{
    int64_t resolved[FL_MAX_DIMS];
    if (fl_null_args("fl_broadcast_to", 1, t) || !broadcast_target("fl_broadcast_to", t, ndim, shape, false, resolved))
        return NULL;
    return fl_out(fl__expand(t, ndim, resolved));
}

/* ---- size-1 axes: reshapes, and so views ---- */

fl_tensor *fl_squeeze(const fl_tensor *t, int axis)
{
    int a;
    if (fl_null_args("fl_squeeze", 1, t) || !fl_normalize_axis("fl_squeeze", axis, t->ndim, &a))
        return NULL;
    char buf[FL_DESC_SIZE];
    if (t->shape[a] != 1) /* NumPy's rule; torch.squeeze would return t unchanged */
        return fl_error(FL_ERR_SHAPE, "fl_squeeze", "axis %d of %s has size %lld, not 1", axis, fl_describe(t, buf),
                        (long long)t->shape[a]);
    int64_t shape[FL_MAX_DIMS];
    int ndim = 0;
    for (int i = 0; i < t->ndim; i++)
        if (i != a)
            shape[ndim++] = t->shape[i];
    return fl_out(fl__reshape(t, ndim, shape));
}

fl_tensor *fl_squeeze_all(const fl_tensor *t)
{
    if (fl_null_args("fl_squeeze_all", 1, t))
        return NULL;
    int64_t shape[FL_MAX_DIMS];
    int ndim = 0;
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] != 1)
            shape[ndim++] = t->shape[i];
    return fl_out(fl__reshape(t, ndim, shape));
}

/* t with a size-1 axis inserted at axis (of the result); owned by the caller. */
static fl_tensor *unsqueeze(const char *fn, const fl_tensor *t, int axis)
{
    int a;
    char buf[FL_DESC_SIZE];
    if (t->ndim == FL_MAX_DIMS)
        return fl_error(FL_ERR_SHAPE, fn, "%s already has the most dimensions Flare allows (%d)", fl_describe(t, buf),
                        FL_MAX_DIMS);
    if (!fl_normalize_axis(fn, axis, t->ndim + 1, &a))
        return NULL;
    int64_t shape[FL_MAX_DIMS];
    for (int i = 0, k = 0; i <= t->ndim; i++)
        shape[i] = i == a ? 1 : t->shape[k++];
    return fl__reshape(t, t->ndim + 1, shape);
}

fl_tensor *fl_unsqueeze(const fl_tensor *t, int axis)
{
    if (fl_null_args("fl_unsqueeze", 1, t))
        return NULL;
    return fl_out(unsqueeze("fl_unsqueeze", t, axis));
}

/* ---- joining and splitting ---- */

/* concat's checks and dispatch; owned result. The inputs are promoted to a common
 * dtype, as torch.cat does. */
static fl_tensor *concat(const char *fn, fl_tensor *const *tensors, int count, int axis)
{
    if (count < 1 || !tensors)
        return fl_error(FL_ERR_VALUE, fn, "needs at least one tensor, got %d", count);
    for (int i = 0; i < count; i++)
        if (fl_null_args(fn, 1, tensors[i]))
            return NULL;
    const fl_tensor *first = tensors[0];
    char a[FL_DESC_SIZE], b[FL_DESC_SIZE];
    if (first->ndim == 0)
        return fl_error(FL_ERR_SHAPE, fn, "cannot join 0-d tensors (%s); unsqueeze them first", fl_describe(first, a));
    int ax;
    if (!fl_normalize_axis(fn, axis, first->ndim, &ax))
        return NULL;
    int64_t shape[FL_MAX_DIMS];
    memcpy(shape, first->shape, sizeof shape);
    shape[ax] = 0;
    fl_dtype dtype = first->dtype;
    for (int i = 0; i < count; i++) {
        const fl_tensor *t = tensors[i];
        if (fl_mixed_backends(fn, 2, first, t))
            return NULL;
        bool fits = t->ndim == first->ndim;
        for (int d = 0; fits && d < t->ndim; d++)
            fits = d == ax || t->shape[d] == first->shape[d];
        if (!fits)
            return fl_error(FL_ERR_SHAPE, fn, "tensor %d %s does not match tensor 0 %s outside axis %d", i,
                             fl_describe(t, b), fl_describe(first, a), axis);
        if (!fl_size_add(shape[ax], t->shape[ax], &shape[ax]))
            return fl_error(FL_ERR_SHAPE, fn, "joining %d tensors along axis %d gives too many elements", count,
                            axis);
        dtype = fl_promote_types(dtype, t->dtype);
    }
    FL_ENTRY_TYPE(concat) primitive =
        fl__primitive(fn, first->backend, FL_PRIMITIVE(concat), "concat");
    if (!primitive)
        return NULL;
    fl_tensor **inputs = calloc((size_t)count, sizeof *inputs);
    if (!inputs)
        return fl_error(FL_ERR_MEMORY, fn, "no memory for a list of %d inputs", count);
    bool ok = true;
    for (int i = 0; i < count && ok; i++)
        ok = (inputs[i] = fl__cast(tensors[i], dtype)) != NULL;
    fl_tensor *out = ok ? fl__new(first->backend, dtype, first->ndim, shape) : NULL;
    if (out) {
        fl__begin("concat");
        out = fl__finish(fn, out, primitive(first->backend, out, (const fl_tensor *const *)inputs, count, ax),
                         count < 3 ? count : 3, (const fl_tensor *const *)inputs);
    }
    for (int i = 0; i < count && out && inputs[i]->bounded; i++) { /* its values are theirs */
        out->low = i == 0 || inputs[i]->low < out->low ? inputs[i]->low : out->low;
        out->high = i == 0 || inputs[i]->high > out->high ? inputs[i]->high : out->high;
        out->bounded = i == count - 1;
    }
    for (int i = 0; i < count; i++)
        fl_release(inputs[i]);
    free(inputs);
    return out;
}

fl_tensor *fl_concat(fl_tensor *const *tensors, int count, int axis)
{
    return fl_out(concat("fl_concat", tensors, count, axis));
}

fl_tensor *fl_stack(fl_tensor *const *tensors, int count, int axis)
{
    if (count < 1 || !tensors)
        return fl_error(FL_ERR_VALUE, "fl_stack", "needs at least one tensor, got %d", count);
    for (int i = 0; i < count; i++)
        if (fl_null_args("fl_stack", 1, tensors[i]))
            return NULL;
    char a[FL_DESC_SIZE], b[FL_DESC_SIZE];
    for (int i = 1; i < count; i++)
        if (!fl_same_shape(tensors[i], tensors[0]))
            return fl_error(FL_ERR_SHAPE, "fl_stack", "tensor %d %s and tensor 0 %s differ in shape", i,
                             fl_describe(tensors[i], b), fl_describe(tensors[0], a));
    fl_tensor **expanded = calloc((size_t)count, sizeof *expanded);
    if (!expanded)
        return fl_error(FL_ERR_MEMORY, "fl_stack", "no memory for a list of %d inputs", count);
    bool ok = true;
    for (int i = 0; i < count && ok; i++)
        ok = (expanded[i] = unsqueeze("fl_stack", tensors[i], axis)) != NULL;
    fl_tensor *out = ok ? concat("fl_stack", expanded, count, axis) : NULL;
    for (int i = 0; i < count; i++)
        fl_release(expanded[i]);
    free(expanded);
    return fl_out(out);
}

fl_status fl_split(const fl_tensor *t, const int64_t *sizes, int count, int axis, fl_tensor **out)
{
    if (!out) {
        fl_error(FL_ERR_NULL, "fl_split", "out is NULL");
        return FL_ERR_NULL;
    }
    for (int i = 0; i < count; i++)
        out[i] = NULL;
    int ax;
    if (fl_null_args("fl_split", 1, t) || !fl_normalize_axis("fl_split", axis, t->ndim, &ax))
        return fl_last_status();
    if (count < 1 || !sizes) {
        fl_error(FL_ERR_VALUE, "fl_split", "needs at least one size, got %d", count);
        return FL_ERR_VALUE;
    }
    char buf[FL_DESC_SIZE];
    int64_t total = 0;
    for (int i = 0; i < count; i++) {
        if (sizes[i] < 0) {
            fl_error(FL_ERR_VALUE, "fl_split", "size %d is negative (%lld)", i, (long long)sizes[i]);
            return FL_ERR_VALUE;
        }
        total += sizes[i];
    }
    if (total != t->shape[ax]) {
        fl_error(FL_ERR_SHAPE, "fl_split", "sizes add up to %lld but axis %d of %s has %lld", (long long)total, axis,
                  fl_describe(t, buf), (long long)t->shape[ax]);
        return FL_ERR_SHAPE;
    }
    fl_index_item index[FL_MAX_DIMS];
    for (int i = 0; i < ax; i++)
        index[i] = FL_SPAN;
    int64_t start = 0;
    for (int i = 0; i < count; i++) {
        index[ax] = FL_RANGE(start, start + sizes[i]);
        start += sizes[i];
        if (!(out[i] = fl_index(t, index, ax + 1))) {
            for (int k = 0; k < i; k++) {
                fl_release(fl_keep(out[k]));
                out[k] = NULL;
            }
            return fl_last_status();
        }
    }
    return FL_OK;
}

/* ---- padding and tiling ---- */

/* t padded along one axis only (a slice's gradient, a sequence's end): t between two
 * runs of value, each a broadcast of one element, joined in one concat, which writes
 * the result once; filling it and then writing t into it writes it twice. */
static fl_tensor *pad_one_axis(const fl_tensor *t, int axis, int64_t before, int64_t after, double value)
{
    int64_t shape[FL_MAX_DIMS], ones[FL_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) {
        shape[i] = t->shape[i];
        ones[i] = 1;
    }
    fl_tensor *one = fl__full(t->backend, value, t->dtype, t->ndim, ones), *self = fl_retain(t);
    fl_scope scope = fl_scope_begin();
    fl_tensor *pieces[3];
    int count = 0;
    if (before > 0) {
        shape[axis] = before;
        pieces[count++] = one ? fl_expand(one, t->ndim, shape) : NULL;
    }
    pieces[count++] = self;
    if (after > 0) {
        shape[axis] = after;
        pieces[count++] = one ? fl_expand(one, t->ndim, shape) : NULL;
    }
    fl_tensor *padded = fl_scope_return(scope, fl_concat(pieces, count, axis));
    fl_release(one);
    fl_release(self);
    return padded;
}

fl_tensor *fl_pad(const fl_tensor *t, const int64_t *before, const int64_t *after, double value)
{
    if (fl_null_args("fl_pad", 1, t))
        return NULL;
    if (t->ndim > 0 && (!before || !after))
        return fl_error(FL_ERR_NULL, "fl_pad", "before or after is NULL");
    char buf[FL_DESC_SIZE];
    int64_t shape[FL_MAX_DIMS];
    fl_index_item region[FL_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) {
        if (before[i] < 0 || after[i] < 0) /* as numpy.pad; torch's negative pads crop */
            return fl_error(FL_ERR_VALUE, "fl_pad", "padding of axis %d of %s is negative (%lld before, %lld after)", i,
                             fl_describe(t, buf), (long long)before[i], (long long)after[i]);
        if (!fl_size_add(before[i], t->shape[i], &shape[i]) || !fl_size_add(shape[i], after[i], &shape[i]))
            return fl_error(FL_ERR_SHAPE, "fl_pad", "padding axis %d of %s by %lld and %lld gives too many elements",
                            i, fl_describe(t, buf), (long long)before[i], (long long)after[i]);
        region[i] = FL_RANGE(before[i], before[i] + t->shape[i]);
    }
    if (!fl_check_size("fl_pad", t->dtype, t->ndim, shape))
        return NULL;
    int padded_axes = 0, axis = 0;
    for (int i = 0; i < t->ndim; i++)
        if (before[i] || after[i])
            padded_axes++, axis = i;
    if (padded_axes == 0) /* tensors do not change: t itself is its padding by nothing */
        return fl_out(fl_retain(t));
    if (padded_axes == 1)
        return pad_one_axis(t, axis, before[axis], after[axis], value);
    fl_tensor *filled = fl__full(t->backend, value, t->dtype, t->ndim, shape);
    fl_scope scope = fl_scope_begin();
    fl_tensor *padded = filled ? fl_index_assign(filled, region, t->ndim, t) : NULL;
    padded = fl_scope_return(scope, padded);
    fl_release(filled);
    return padded;
}

/* numpy.tile. Each repeated axis costs one copy: t viewed as [outer, 1, rest] is
 * expanded to [outer, repeats, rest] and read back with that axis multiplied. */
fl_tensor *fl_tile(const fl_tensor *t, int count, const int64_t *repeats)
{
    if (fl_null_args("fl_tile", 1, t))
        return NULL;
    if (count < 0 || count > FL_MAX_DIMS || (count > 0 && !repeats))
        return fl_error(FL_ERR_VALUE, "fl_tile", "invalid list of %d repeats", count);
    for (int i = 0; i < count; i++)
        if (repeats[i] < 0)
            return fl_error(FL_ERR_VALUE, "fl_tile", "repeat %d is negative (%lld)", i, (long long)repeats[i]);
    /* The shorter of shape and repeats is padded with leading ones. */
    int ndim = count > t->ndim ? count : t->ndim;
    int64_t shape[FL_MAX_DIMS], reps[FL_MAX_DIMS];
    for (int i = 0; i < ndim; i++) {
        shape[i] = i < ndim - t->ndim ? 1 : t->shape[i - (ndim - t->ndim)];
        reps[i] = i < ndim - count ? 1 : repeats[i - (ndim - count)];
    }
    int64_t tiled[FL_MAX_DIMS];
    for (int i = 0; i < ndim; i++)
        if (!fl_size_mul(shape[i], reps[i], &tiled[i]))
            return fl_error(FL_ERR_SHAPE, "fl_tile", "repeating axis %d of size %lld %lld times gives too many elements",
                            i, (long long)shape[i], (long long)reps[i]);
    if (!fl_check_size("fl_tile", t->dtype, ndim, tiled))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_tensor *result = fl_reshape(t, ndim, shape);
    for (int i = 0; i < ndim && result; i++) {
        if (reps[i] == 1)
            continue;
        int64_t outer = 1, rest = 1;
        for (int k = 0; k < i; k++)
            outer *= shape[k];
        for (int k = i; k < ndim; k++)
            rest *= shape[k];
        fl_tensor *grouped = fl_reshape(result, FL_SHAPE(outer, 1, rest));
        fl_tensor *repeated = fl_expand(grouped, FL_SHAPE(outer, reps[i], rest));
        shape[i] *= reps[i];
        result = fl_reshape(repeated, ndim, shape);
    }
    return fl_scope_return(scope, result);
}
