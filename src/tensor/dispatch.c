/* Argument checks, broadcasting, and the call of one backend primitive. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

bool fl_normalize_axis(const char *fn, int axis, int ndim, int *out)
{
    int a = axis < 0 ? axis + ndim : axis;
    if (a < 0 || a >= ndim) {
        fl_error(FL_ERR_AXIS, fn, "axis %d is out of range for a tensor of %d dimensions", axis, ndim);
        return false;
    }
    *out = a;
    return true;
}

bool fl_axes_mask(const char *fn, const int *axes, int count, int ndim, unsigned *mask)
{
    if (!axes || count == 0) {
        *mask = ndim ? (1u << ndim) - 1 : 0;
        return true;
    }
    unsigned m = 0;
    for (int i = 0; i < count; i++) {
        int a;
        if (!fl_normalize_axis(fn, axes[i], ndim, &a))
            return false;
        if (m & (1u << a)) {
            fl_error(FL_ERR_AXIS, fn, "axis %d is listed twice", axes[i]);
            return false;
        }
        m |= 1u << a;
    }
    *mask = m;
    return true;
}

bool fl__broadcast_shapes(int andim, const int64_t *ashape, int bndim, const int64_t *bshape, int *ndim,
                          int64_t *out)
{
    int n = andim > bndim ? andim : bndim;
    for (int i = 0; i < n; i++) {
        int64_t da = i < n - andim ? 1 : ashape[i - (n - andim)];
        int64_t db = i < n - bndim ? 1 : bshape[i - (n - bndim)];
        if (da != db && da != 1 && db != 1)
            return false;
        out[i] = da == 1 ? db : da;
    }
    *ndim = n;
    return true;
}

bool fl_same_shape(const fl_tensor *a, const fl_tensor *b)
{
    return a && b && a->ndim == b->ndim && memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof a->shape[0]) == 0;
}

bool fl__same_backend(const fl_tensor *a, const fl_tensor *b)
{
    return a->backend == b->backend;
}

bool fl_mixed_backends(const char *fn, int count, ...)
{
    va_list ap;
    va_start(ap, count);
    const fl_tensor *first = NULL, *other = NULL;
    for (int i = 0; i < count && !other; i++) {
        const fl_tensor *t = va_arg(ap, const fl_tensor *);
        if (t && !first)
            first = t;
        else if (t && !fl__same_backend(t, first))
            other = t;
    }
    va_end(ap);
    if (other)
        fl_error(FL_ERR_VALUE, fn, "operands on different backends (%s and %s); move one with fl_to_backend",
                 first->backend->name, other->backend->name);
    return other != NULL;
}

void *fl__primitive(const char *fn, const fl_backend *backend, size_t offset, const char *entry_name)
{
    /* Atomic: registering a replacement rewrites entries while other threads call. */
    void *entry = __atomic_load_n((void *const *)((const char *)backend + offset), __ATOMIC_ACQUIRE);
    if (!entry)
        return fl_error(FL_ERR_UNSUPPORTED, fn, "backend '%s' does not implement the primitive '%s'",
                        backend->name, entry_name);
    return entry;
}

void fl__begin(const char *operation)
{
    fl_memory_set_operation(operation);
    fl__profile_begin(operation);
}

void fl__end(void)
{
    fl_memory_set_operation(NULL); /* later frees belong to no operation */
    fl__profile_end();
}

bool fl__declined(int rc)
{
    if (rc != FL_ERR_UNSUPPORTED)
        return false;
    fl__take_backend_error(NULL, 0);
    fl__end();
    return true;
}

fl_tensor *fl__finish(const char *fn, fl_tensor *out, int rc, int ninputs, const fl_tensor *const *inputs)
{
    fl__end();
    if (rc == 0)
        return out;
    char message[512], described[4 * FL_DESC_SIZE] = "", buf[FL_DESC_SIZE];
    fl_status status = fl__take_backend_error(message, sizeof message);
    if (status == FL_OK)
        status = (fl_status)rc;
    size_t n = 0;
    for (int i = 0; i < ninputs && i < 3; i++)
        n += (size_t)snprintf(described + n, sizeof described - n, "%s%s", i ? ", " : "",
                              fl_describe(inputs[i], buf));
    fl_error(status, fn, "%s (backend %s; inputs %s; output %s)", message[0] ? message : fl_status_name(status),
              out->backend->name, described, fl_describe(out, buf));
    fl_release(out);
    return NULL;
}

fl_tensor *fl__cast(const fl_tensor *t, fl_dtype dtype)
{
    if (t->dtype == dtype)
        return fl_retain(t);
    fl_unary_fn cast = fl__primitive("fl_cast", t->backend, FL_PRIMITIVE(cast), "cast");
    if (!cast)
        return NULL;
    fl_tensor *out = fl__new(t->backend, dtype, t->ndim, t->shape);
    if (!out)
        return NULL;
    fl__begin("cast");
    out = fl__finish("fl_cast", out, cast(t->backend, out, t), 1, &t);
    if (fl_dtype_is_integer(dtype) && t->bounded && fl__scalar_fits((double)t->low, dtype) &&
        fl__scalar_fits((double)t->high, dtype)) /* the values survive the cast unchanged */
        fl__bound_like(out, t);
    return out;
}

void fl__bound_like(fl_tensor *out, const fl_tensor *t)
{
    if (out && t->bounded) {
        out->bounded = true;
        out->low = t->low;
        out->high = t->high;
    }
}

void fl__bound_from_host(fl_tensor *out, const void *data)
{
    int64_t low = INT64_MAX, high = INT64_MIN;
    for (int64_t i = 0; i < out->numel; i++) {
        int64_t v = out->dtype == FL_I64   ? ((const int64_t *)data)[i]
                    : out->dtype == FL_I32 ? ((const int32_t *)data)[i]
                                           : ((const uint8_t *)data)[i];
        low = v < low ? v : low;
        high = v > high ? v : high;
    }
    out->bounded = true;
    out->low = low;
    out->high = high;
}

fl_tensor *fl__reshape(const fl_tensor *t, int ndim, const int64_t *shape)
{
    if (t->ndim == ndim && memcmp(t->shape, shape, (size_t)ndim * sizeof *shape) == 0)
        return fl_retain(t);
    fl_unary_fn reshape = fl__primitive("fl_reshape", t->backend, FL_PRIMITIVE(reshape), "reshape");
    if (!reshape)
        return NULL;
    fl_tensor *out = fl__new(t->backend, t->dtype, ndim, shape);
    if (!out)
        return NULL;
    fl__begin("reshape");
    out = fl__finish("fl_reshape", out, reshape(t->backend, out, t), 1, &t);
    fl__bound_like(out, t);
    return out;
}

fl_tensor *fl__expand(const fl_tensor *t, int ndim, const int64_t *shape)
{
    if (t->ndim == ndim && memcmp(t->shape, shape, (size_t)ndim * sizeof *shape) == 0)
        return fl_retain(t);
    char a[FL_DESC_SIZE], b[FL_DESC_SIZE];
    if (t->ndim > ndim)
        return fl_error(FL_ERR_SHAPE, "fl_expand", "cannot broadcast %s to %s", fl_describe(t, a),
                         fl_describe_shape(ndim, shape, b));
    int64_t padded[FL_MAX_DIMS];
    int lead = ndim - t->ndim;
    for (int i = 0; i < ndim; i++) {
        padded[i] = i < lead ? 1 : t->shape[i - lead];
        if (padded[i] != shape[i] && padded[i] != 1)
            return fl_error(FL_ERR_SHAPE, "fl_expand", "cannot broadcast %s to %s", fl_describe(t, a),
                             fl_describe_shape(ndim, shape, b));
    }
    fl_tensor *base = fl__reshape(t, ndim, padded);
    if (!base)
        return NULL;
    if (memcmp(padded, shape, (size_t)ndim * sizeof *shape) == 0)
        return base;
    fl_unary_fn expand = fl__primitive("fl_expand", t->backend, FL_PRIMITIVE(expand), "expand");
    fl_tensor *out = expand ? fl__new(t->backend, t->dtype, ndim, shape) : NULL;
    if (!out) {
        fl_release(base);
        return NULL;
    }
    fl__begin("expand");
    out = fl__finish("fl_expand", out, expand(t->backend, out, base), 1, (const fl_tensor *const *)&base);
    fl_release(base);
    return out;
}

bool fl__scalar_fits(double value, fl_dtype dtype)
{
    switch (dtype) {
    case FL_U8: return value > -1.0 && value < 0x1p8;
    case FL_I32: return value > -0x1p31 - 1.0 && value < 0x1p31;
    case FL_I64: return value >= -0x1p63 && value < 0x1p63;
    default: return true;
    }
}

fl_tensor *fl__full(const fl_backend *backend, double value, fl_dtype dtype, int ndim, const int64_t *shape)
{
    __typeof__(backend->full) full = fl__primitive("fl_full", backend, FL_PRIMITIVE(full), "full");
    fl_tensor *out = full ? fl__new(backend, dtype, ndim, shape) : NULL;
    if (!out)
        return NULL;
    fl__begin("full");
    out = fl__finish("fl_full", out, full(backend, out, value), 0, NULL);
    if (out && fl_dtype_is_integer(dtype)) { /* a fill's value is its bounds */
        out->bounded = true;
        out->low = out->high = (int64_t)value;
    }
    return out;
}

bool fl_known_bounds(const fl_tensor *t, int64_t *low, int64_t *high)
{
    if (!t || !t->bounded)
        return false;
    *low = t->low;
    *high = t->high;
    return true;
}

bool fl_view_strides(const fl_tensor *a, const int64_t *a_strides, int ndim, const int64_t *shape, int64_t *strides)
{
    int64_t old_shape[FL_MAX_DIMS], old_step[FL_MAX_DIMS];
    int old_ndim = 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != 1) {
            old_shape[old_ndim] = a->shape[i];
            old_step[old_ndim++] = a_strides[i];
        }
    if (a->numel == 0) {
        for (int64_t i = ndim - 1, s = 1; i >= 0; s *= shape[i--])
            strides[i] = s;
        return true;
    }
    int oi = 0, ni = 0;
    while (oi < old_ndim && ni < ndim) {
        int oj = oi + 1, nj = ni + 1;
        int64_t old_size = old_shape[oi], new_size = shape[ni];
        while (old_size != new_size) {
            if (new_size < old_size)
                new_size *= shape[nj++];
            else
                old_size *= old_shape[oj++];
        }
        for (int k = oi; k < oj - 1; k++)
            if (old_step[k] != old_shape[k + 1] * old_step[k + 1])
                return false;
        strides[nj - 1] = old_step[oj - 1];
        for (int k = nj - 1; k > ni; k--)
            strides[k - 1] = strides[k] * shape[k];
        oi = oj;
        ni = nj;
    }
    for (; ni < ndim; ni++) /* trailing size-1 axes */
        strides[ni] = 1;
    return true;
}
