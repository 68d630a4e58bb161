/*
 * Reductions: sums and extrema over axes, the statistics composed from them,
 * arg-extrema, cumulative sums, sorting and top-k.
 *
 * Dtype rules follow NumPy and PyTorch: sums and products of bool and integers are
 * i64; means, variances and log-sum-exps of integers are f32; any and all are bool
 * for every dtype; f16 and bf16 compute in f32 and return their own dtype.
 * Reducing an empty axis gives the identity (sum 0, prod 1, any false, all true,
 * logsumexp -inf, mean nan) and is an error where there is none (max, min, argmax).
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "internal.h"

/* The axes of one reduction and the shapes of its result. */
typedef struct reduction {
    unsigned mask;
    int64_t extent; /* how many elements reduce into each output */
    int64_t kept_shape[FL_MAX_DIMS]; /* reduced axes as size 1 (t's ndim) */
    int dropped_ndim;
    int64_t dropped_shape[FL_MAX_DIMS]; /* reduced axes removed */
} reduction;

static bool plan_mask(const fl_tensor *t, unsigned mask, reduction *r)
{
    r->mask = mask;
    r->extent = 1;
    r->dropped_ndim = 0;
    for (int i = 0; i < t->ndim; i++) {
        bool reduced = mask >> i & 1;
        r->kept_shape[i] = reduced ? 1 : t->shape[i];
        if (reduced)
            r->extent *= t->shape[i];
        else
            r->dropped_shape[r->dropped_ndim++] = t->shape[i];
    }
    return true;
}

static bool plan(const char *fn, const fl_tensor *t, const int *axes, int count, reduction *r)
{
    unsigned mask;
    if (count < 0 || (count > 0 && !axes)) {
        fl_error(FL_ERR_AXIS, fn, "invalid list of %d axes", count);
        return false;
    }
    return fl_axes_mask(fn, axes, count, t->ndim, &mask) && plan_mask(t, mask, r);
}

static bool require_nonempty(const char *fn, const fl_tensor *t, const reduction *r)
{
    if (r->extent > 0)
        return true;
    char buf[FL_DESC_SIZE];
    fl_error(FL_ERR_SHAPE, fn, "cannot reduce %s over an empty axis: the operation has no identity",
              fl_describe(t, buf));
    return false;
}

/* The reduce primitive at offset applied to t as it is; reduced axes kept (owned). */
static fl_tensor *reduce_kept(const char *fn, size_t offset, const char *entry, const fl_tensor *t,
                              const reduction *r)
{
    fl_reduce_fn primitive = fl__primitive(fn, t->backend, offset, entry);
    if (!primitive)
        return NULL;
    fl_tensor *out = fl__new(t->backend, t->dtype, t->ndim, r->kept_shape);
    if (!out)
        return NULL;
    fl__begin(entry);
    return fl__finish(fn, out, primitive(t->backend, out, t, r->mask), 1, &t);
}

/* Drops the reduced axes unless keepdims, then casts to dtype; consumes kept. */
static fl_tensor *shape_result(fl_tensor *kept, const reduction *r, bool keepdims, fl_dtype dtype)
{
    if (!kept)
        return NULL;
    fl_tensor *shaped = keepdims ? kept : fl__reshape(kept, r->dropped_ndim, r->dropped_shape);
    if (!keepdims)
        fl_release(kept);
    fl_tensor *result = shaped ? fl__cast(shaped, dtype) : NULL;
    fl_release(shaped);
    return result;
}

/* Casts t to compute, reduces with the primitive, and shapes and casts the result (owned). */
static fl_tensor *reduce_owned(const char *fn, size_t offset, const char *entry, const fl_tensor *t,
                               const reduction *r, bool keepdims, fl_dtype compute, fl_dtype result)
{
    fl_tensor *input = fl__cast(t, compute);
    fl_tensor *kept = input ? reduce_kept(fn, offset, entry, input, r) : NULL;
    fl_release(input);
    return shape_result(kept, r, keepdims, result);
}

static fl_tensor *reduce_as(const char *fn, size_t offset, const char *entry, const fl_tensor *t,
                            const reduction *r, bool keepdims, fl_dtype compute, fl_dtype result)
{
    return fl_out(reduce_owned(fn, offset, entry, t, r, keepdims, compute, result));
}

/* ---- sum, prod, max, min ---- */

static fl_dtype accumulating_dtype(fl_dtype d) { return fl_dtype_is_float(d) ? d : FL_I64; }

static fl_tensor *accumulate(const char *fn, size_t offset, const char *entry, const fl_tensor *t, const int *axes,
                             int count, bool keepdims)
{
    reduction r;
    if (fl_null_args(fn, 1, t) || !plan(fn, t, axes, count, &r))
        return NULL;
    fl_dtype result = accumulating_dtype(t->dtype);
    return reduce_as(fn, offset, entry, t, &r, keepdims, fl__compute_dtype(result), result);
}

fl_tensor *fl_sum(const fl_tensor *t, const int *axes, int count, bool keepdims)
{
    return accumulate("fl_sum", FL_PRIMITIVE(sum), "sum", t, axes, count, keepdims);
}

fl_tensor *fl_prod(const fl_tensor *t, const int *axes, int count, bool keepdims)
{
    return accumulate("fl_prod", FL_PRIMITIVE(prod), "prod", t, axes, count, keepdims);
}

static fl_tensor *extremum(const char *fn, size_t offset, const char *entry, const fl_tensor *t, const int *axes,
                           int count, bool keepdims)
{
    reduction r;
    if (fl_null_args(fn, 1, t) || !plan(fn, t, axes, count, &r) || !require_nonempty(fn, t, &r))
        return NULL;
    return reduce_as(fn, offset, entry, t, &r, keepdims, fl__compute_dtype(t->dtype), t->dtype);
}

fl_tensor *fl_max(const fl_tensor *t, const int *axes, int count, bool keepdims)
{
    return extremum("fl_max", FL_PRIMITIVE(max), "max", t, axes, count, keepdims);
}

fl_tensor *fl_min(const fl_tensor *t, const int *axes, int count, bool keepdims)
{
    return extremum("fl_min", FL_PRIMITIVE(min), "min", t, axes, count, keepdims);
}

/* ---- any, all: max and min of bool ---- */

static fl_tensor *logical(const char *fn, size_t offset, const char *entry, bool empty_value, const fl_tensor *t,
                          const int *axes, int count, bool keepdims)
{
    reduction r;
    if (fl_null_args(fn, 1, t) || !plan(fn, t, axes, count, &r))
        return NULL;
    if (r.extent == 0)
        return fl_out(fl__full(t->backend, empty_value, FL_BOOL, keepdims ? t->ndim : r.dropped_ndim,
                               keepdims ? r.kept_shape : r.dropped_shape));
    return reduce_as(fn, offset, entry, t, &r, keepdims, FL_BOOL, FL_BOOL);
}

fl_tensor *fl_any(const fl_tensor *t, const int *axes, int count, bool keepdims)
{
    return logical("fl_any", FL_PRIMITIVE(max), "max", false, t, axes, count, keepdims);
}

fl_tensor *fl_all(const fl_tensor *t, const int *axes, int count, bool keepdims)
{
    return logical("fl_all", FL_PRIMITIVE(min), "min", true, t, axes, count, keepdims);
}

/* ---- statistics, composed ---- */

/* The dtype statistics compute in (f32 for integers and 16-bit floats) and the one
 * they return. */
static fl_dtype float_result(fl_dtype d) { return fl_dtype_is_float(d) ? d : FL_DEFAULT_FLOAT; }

fl_tensor *fl_mean(const fl_tensor *t, const int *axes, int count, bool keepdims)
{
    reduction r;
    if (fl_null_args("fl_mean", 1, t) || !plan("fl_mean", t, axes, count, &r))
        return NULL;
    fl_dtype result = float_result(t->dtype);
    fl_scope scope = fl_scope_begin();
    fl_tensor *sum = fl_sum(fl_cast(t, fl__compute_dtype(result)), axes, count, keepdims);
    /* An empty reduction divides 0 by 0: NaN, as in NumPy and PyTorch. */
    fl_tensor *mean = fl_div_scalar(sum, (double)r.extent);
    return fl_scope_return(scope, fl_cast(mean, result));
}

fl_tensor *fl_var(const fl_tensor *t, const int *axes, int count, int correction, bool keepdims)
{
    reduction r;
    if (fl_null_args("fl_var", 1, t) || !plan("fl_var", t, axes, count, &r))
        return NULL;
    fl_dtype result = float_result(t->dtype);
    fl_scope scope = fl_scope_begin();
    fl_tensor *x = fl_cast(t, fl__compute_dtype(result));
    fl_tensor *deviation = fl_sub(x, fl_mean(x, axes, count, true));
    fl_tensor *squares = fl_sum(fl_mul(deviation, deviation), axes, count, keepdims);
    /* As torch.var: too few elements for the correction divide by zero (inf or nan). */
    double divisor = r.extent > correction ? (double)(r.extent - correction) : 0;
    return fl_scope_return(scope, fl_cast(fl_div_scalar(squares, divisor), result));
}

fl_tensor *fl_std(const fl_tensor *t, const int *axes, int count, int correction, bool keepdims)
{
    if (fl_null_args("fl_std", 1, t))
        return NULL;
    fl_dtype result = float_result(t->dtype);
    fl_scope scope = fl_scope_begin();
    fl_tensor *var = fl_var(fl_cast(t, fl__compute_dtype(result)), axes, count, correction, keepdims);
    return fl_scope_return(scope, fl_cast(fl_sqrt(var), result));
}

fl_tensor *fl_logsumexp(const fl_tensor *t, const int *axes, int count, bool keepdims)
{
    reduction r;
    if (fl_null_args("fl_logsumexp", 1, t) || !plan("fl_logsumexp", t, axes, count, &r))
        return NULL;
    fl_dtype result = float_result(t->dtype), compute = fl__compute_dtype(result);
    if (r.extent == 0) /* the log of an empty sum */
        return fl_out(fl__full(t->backend, -INFINITY, result, keepdims ? t->ndim : r.dropped_ndim,
                               keepdims ? r.kept_shape : r.dropped_shape));
    fl_scope scope = fl_scope_begin();
    fl_tensor *x = fl_cast(t, compute);
    /* Shifting by the maximum keeps exp from overflowing. An infinite maximum is
     * clamped to the largest finite number, so that rows of -inf give -inf (not
     * inf - inf = nan) and rows holding +inf give +inf. */
    double largest = compute == FL_F64 ? DBL_MAX : FLT_MAX;
    fl_tensor *shift = fl_clamp(fl_max(x, axes, count, true), -largest, largest);
    fl_tensor *sum = fl_sum(fl_exp(fl_sub(x, shift)), axes, count, true);
    fl_tensor *kept = fl_add(fl_log(sum), shift);
    fl_tensor *shaped = keepdims ? kept : fl_reshape(kept, r.dropped_ndim, r.dropped_shape);
    return fl_scope_return(scope, fl_cast(shaped, result));
}

/* ---- one axis: arg-extrema, values with indices, cumsum ---- */

static bool one_axis(const char *fn, const fl_tensor *t, int axis, int *a, reduction *r)
{
    return fl_normalize_axis(fn, axis, t->ndim, a) && plan_mask(t, 1u << *a, r);
}

/* The index primitive (argmax or argmin) along axis; reduced axis kept (owned). */
static fl_tensor *arg_kept(const char *fn, size_t offset, const char *entry, const fl_tensor *t, int axis,
                           const reduction *r)
{
    int (*primitive) FL_BACKEND_SIGNATURE((fl_tensor *, const fl_tensor *, int)) = fl__primitive(fn, t->backend, offset, entry);
    if (!primitive)
        return NULL;
    fl_tensor *input = fl__cast(t, fl__compute_dtype(t->dtype));
    fl_tensor *out = input ? fl__new(t->backend, FL_I64, t->ndim, r->kept_shape) : NULL;
    if (out) {
        fl__begin(entry);
        out = fl__finish(fn, out, primitive(t->backend, out, input, axis), 1, (const fl_tensor *const *)&input);
    }
    fl_release(input);
    return out;
}

static fl_tensor *arg_extremum(const char *fn, size_t offset, const char *entry, const fl_tensor *t, int axis,
                               bool keepdims)
{
    int a;
    reduction r;
    if (fl_null_args(fn, 1, t) || !one_axis(fn, t, axis, &a, &r) || !require_nonempty(fn, t, &r))
        return NULL;
    return fl_out(shape_result(arg_kept(fn, offset, entry, t, a, &r), &r, keepdims, FL_I64));
}

fl_tensor *fl_argmax(const fl_tensor *t, int axis, bool keepdims)
{
    return arg_extremum("fl_argmax", FL_PRIMITIVE(argmax), "argmax", t, axis, keepdims);
}

fl_tensor *fl_argmin(const fl_tensor *t, int axis, bool keepdims)
{
    return arg_extremum("fl_argmin", FL_PRIMITIVE(argmin), "argmin", t, axis, keepdims);
}

/* Hands owned results to the caller's pointers (and scope), releasing unwanted ones. */
static fl_status hand_over(fl_tensor *values, fl_tensor *indices, fl_tensor **values_out, fl_tensor **indices_out)
{
    if (values_out)
        *values_out = fl_out(values);
    else
        fl_release(values);
    if (indices_out)
        *indices_out = fl_out(indices);
    else
        fl_release(indices);
    return FL_OK;
}

static fl_status extremum_along(const char *fn, bool minimum, const fl_tensor *t, int axis, bool keepdims,
                                fl_tensor **values, fl_tensor **indices)
{
    if (values)
        *values = NULL;
    if (indices)
        *indices = NULL;
    int a;
    reduction r;
    if (fl_null_args(fn, 1, t) || !one_axis(fn, t, axis, &a, &r) || !require_nonempty(fn, t, &r))
        return fl_last_status();
    fl_tensor *v = NULL, *i = NULL;
    if (values)
        v = reduce_owned(fn, minimum ? FL_PRIMITIVE(min) : FL_PRIMITIVE(max), minimum ? "min" : "max", t, &r,
                         keepdims, fl__compute_dtype(t->dtype), t->dtype);
    if (indices && (v || !values))
        i = shape_result(arg_kept(fn, minimum ? FL_PRIMITIVE(argmin) : FL_PRIMITIVE(argmax),
                                  minimum ? "argmin" : "argmax", t, a, &r),
                         &r, keepdims, FL_I64);
    if ((values && !v) || (indices && !i)) {
        fl_release(v);
        fl_release(i);
        return fl_last_status();
    }
    return hand_over(v, i, values, indices);
}

fl_status fl_max_along(const fl_tensor *t, int axis, bool keepdims, fl_tensor **values, fl_tensor **indices)
{
    return extremum_along("fl_max_along", false, t, axis, keepdims, values, indices);
}

fl_status fl_min_along(const fl_tensor *t, int axis, bool keepdims, fl_tensor **values, fl_tensor **indices)
{
    return extremum_along("fl_min_along", true, t, axis, keepdims, values, indices);
}

fl_tensor *fl_cumsum(const fl_tensor *t, int axis)
{
    int a;
    if (fl_null_args("fl_cumsum", 1, t) || !fl_normalize_axis("fl_cumsum", axis, t->ndim, &a))
        return NULL;
    FL_ENTRY_TYPE(cumsum) primitive =
        fl__primitive("fl_cumsum", t->backend, FL_PRIMITIVE(cumsum), "cumsum");
    if (!primitive)
        return NULL;
    fl_dtype result = accumulating_dtype(t->dtype);
    fl_tensor *input = fl__cast(t, fl__compute_dtype(result));
    fl_tensor *out = input ? fl__new(t->backend, input->dtype, t->ndim, t->shape) : NULL;
    if (out) {
        fl__begin("cumsum");
        out = fl__finish("fl_cumsum", out, primitive(t->backend, out, input, a), 1, (const fl_tensor *const *)&input);
    }
    fl_release(input);
    fl_tensor *cast = out ? fl__cast(out, result) : NULL;
    fl_release(out);
    return fl_out(cast);
}

/* ---- sort and top-k ---- */

/* Sorts t along axis a (already normalized) into owned values and indices. */
static fl_status sort_owned(const char *fn, const fl_tensor *t, int a, bool descending, fl_tensor **values,
                            fl_tensor **indices)
{
    *values = *indices = NULL;
    FL_ENTRY_TYPE(sort) primitive =
        fl__primitive(fn, t->backend, FL_PRIMITIVE(sort), "sort");
    if (!primitive)
        return fl_last_status();
    fl_tensor *input = fl__cast(t, fl__compute_dtype(t->dtype));
    fl_tensor *v = input ? fl__new(t->backend, input->dtype, t->ndim, t->shape) : NULL;
    fl_tensor *i = v ? fl__new(t->backend, FL_I64, t->ndim, t->shape) : NULL;
    if (input && !i) {
        fl_release(v);
        fl_release(input);
        return fl_last_status();
    }
    if (!input)
        return fl_last_status();
    fl__begin("sort");
    int rc = primitive(t->backend, v, i, input, a, descending);
    if (rc)
        fl_release(i); /* fl__finish releases v and records the error */
    v = fl__finish(fn, v, rc, 1, (const fl_tensor *const *)&input);
    fl_release(input);
    if (!v)
        return fl_last_status();
    *values = fl__cast(v, t->dtype);
    fl_release(v);
    if (!*values) {
        fl_release(i);
        return fl_last_status();
    }
    *indices = i;
    return FL_OK;
}

fl_status fl_sort(const fl_tensor *t, int axis, bool descending, fl_tensor **values, fl_tensor **indices)
{
    if (values)
        *values = NULL;
    if (indices)
        *indices = NULL;
    int a;
    if (fl_null_args("fl_sort", 1, t) || !fl_normalize_axis("fl_sort", axis, t->ndim, &a))
        return fl_last_status();
    fl_tensor *v, *i;
    fl_status status = sort_owned("fl_sort", t, a, descending, &v, &i);
    return status ? status : hand_over(v, i, values, indices);
}

/* The first k entries of t along axis a: a view where the backend can make one (owned). */
static fl_tensor *leading(const char *fn, const fl_tensor *t, int a, int64_t k)
{
    if (k == t->shape[a])
        return fl_retain(t);
    FL_ENTRY_TYPE(slice) slice =
        fl__primitive(fn, t->backend, FL_PRIMITIVE(slice), "slice");
    if (!slice)
        return NULL;
    int64_t shape[FL_MAX_DIMS], start[FL_MAX_DIMS] = {0}, step[FL_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) {
        shape[i] = i == a ? k : t->shape[i];
        step[i] = 1;
    }
    fl_tensor *out = fl__new(t->backend, t->dtype, t->ndim, shape);
    if (!out)
        return NULL;
    fl__begin("slice");
    return fl__finish(fn, out, slice(t->backend, out, t, start, step), 1, &t);
}

fl_status fl_topk(const fl_tensor *t, int64_t k, int axis, bool largest, fl_tensor **values, fl_tensor **indices)
{
    if (values)
        *values = NULL;
    if (indices)
        *indices = NULL;
    int a;
    if (fl_null_args("fl_topk", 1, t) || !fl_normalize_axis("fl_topk", axis, t->ndim, &a))
        return fl_last_status();
    if (k < 0 || k > t->shape[a]) {
        char buf[FL_DESC_SIZE];
        fl_error(FL_ERR_VALUE, "fl_topk", "k = %lld is out of range for axis %d of %s (size %lld)", (long long)k,
                  axis, fl_describe(t, buf), (long long)t->shape[a]);
        return FL_ERR_VALUE;
    }
    /* A stable sort: among equal values the first occurrences are taken, in order. */
    fl_tensor *sorted, *order;
    fl_status status = sort_owned("fl_topk", t, a, largest, &sorted, &order);
    if (status)
        return status;
    fl_tensor *v = leading("fl_topk", sorted, a, k);
    fl_tensor *i = v ? leading("fl_topk", order, a, k) : NULL;
    fl_release(sorted);
    fl_release(order);
    if (!i) {
        fl_release(v);
        return fl_last_status();
    }
    return hand_over(v, i, values, indices);
}
