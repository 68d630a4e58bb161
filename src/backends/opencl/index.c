/*
 * The OpenCL backend's copying primitives: concat, update_slice, where, gather,
 * scatter_add and index_select.
 *
 * Copies move elements by size (an unsigned integer of 1, 2, 4 or 8 bytes), so every
 * dtype, f16 and bf16 included, takes the same kernels; only scatter_add computes.
 * Inputs are read through their strides (transposed, sliced, expanded views, no
 * copies); outputs are fresh dense tensors. A kernel's work item i is the i-th
 * element, in row-major order, of the shape it walks, and finds its coordinates by
 * division, as the generated elementwise kernels do. Index tensors hold i64 values
 * the tensor layer has checked to be in range.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opencl.h"

/* The helpers every kernel here starts with: the offset of element i of shape
 * through strides (shape and strides unpacked from long8 into arrays, which a loop
 * can index). */
#define INDEX_PRELUDE                                                                        \
    "static long kg_offset(long i, int ndim, const long *shape, const long *strides)\n"     \
    "{\n"                                                                                  \
    "    long offset = 0;\n"                                                               \
    "    for (int d = ndim - 1; d >= 0; d--) { offset += i % shape[d] * strides[d]; i /= shape[d]; }\n" \
    "    return offset;\n"                                                                 \
    "}\n"                                                                                  \
    "#define UNPACK(v, name) long name[8]; vstore8(v, 0, name)\n"

static const char copy_kernels[] =
    INDEX_PRELUDE
    /* y (strides ys) = x (strides xs), both of shape */
    "__kernel void copy_strided(long n, int ndim, long8 shape_v, __global const T *x, long xo, long8 xs_v,\n"
    "                           __global T *y, long yo, long8 ys_v)\n"
    "{\n"
    "    long i = get_global_id(0);\n"
    "    if (i >= n) return;\n"
    "    UNPACK(shape_v, shape); UNPACK(xs_v, xs); UNPACK(ys_v, ys);\n"
    "    y[yo + kg_offset(i, ndim, shape, ys)] = x[xo + kg_offset(i, ndim, shape, xs)];\n"
    "}\n"
    /* y = c ? a : b, dense y, every operand of y's shape */
    "__kernel void choose(long n, int ndim, long8 shape_v, __global const uchar *c, long co, long8 cs_v,\n"
    "                     __global const T *a, long ao, long8 as_v, __global const T *b, long bo, long8 bs_v,\n"
    "                     __global T *y, long yo)\n"
    "{\n"
    "    long i = get_global_id(0);\n"
    "    if (i >= n) return;\n"
    "    UNPACK(shape_v, shape); UNPACK(cs_v, cs); UNPACK(as_v, as); UNPACK(bs_v, bs);\n"
    "    y[yo + i] = c[co + kg_offset(i, ndim, shape, cs)] ? a[ao + kg_offset(i, ndim, shape, as)]\n"
    "                                                      : b[bo + kg_offset(i, ndim, shape, bs)];\n"
    "}\n"
    /* Dense y of shape takes a's element at y's coordinates, but along axis at the
     * index's value; the index is read at y's coordinates through its strides (a
     * gather), or through a stride along axis only (index_select's 1-D index). */
    "__kernel void take(long n, int ndim, int axis, long8 shape_v, __global const T *a, long ao, long8 as_v,\n"
    "                   __global const long *index, long io, long8 is_v, __global T *y, long yo)\n"
    "{\n"
    "    long i = get_global_id(0);\n"
    "    if (i >= n) return;\n"
    "    UNPACK(shape_v, shape); UNPACK(as_v, as); UNPACK(is_v, is);\n"
    "    long rest = i, pa = 0, pi = 0;\n"
    "    for (int d = ndim - 1; d >= 0; d--) {\n"
    "        long c = rest % shape[d];\n"
    "        rest /= shape[d];\n"
    "        pi += c * is[d];\n"
    "        if (d != axis) pa += c * as[d];\n"
    "    }\n"
    "    y[yo + i] = a[ao + pa + index[io + pi] * as[axis]];\n"
    "}\n";

/* scatter_add, after the reduction's definitions (T, COMBINE): a work item per line
 * along axis of the index's shape, which walks it in order. Targets that collide
 * differ only along axis, so no two work items write one element, and the sums are
 * in the order the cpu backend takes. */
static const char scatter_kernel[] =
    INDEX_PRELUDE
    "__kernel void scatter_add(long lines, int ndim, int axis, long8 shape_v, __global const long *index, long io,\n"
    "                          long8 is_v, __global const T *src, long so, long8 ss_v, __global T *y, long yo,\n"
    "                          long8 ys_v)\n"
    "{\n"
    "    long g = get_global_id(0);\n"
    "    if (g >= lines) return;\n"
    "    UNPACK(shape_v, shape); UNPACK(is_v, is); UNPACK(ss_v, ss); UNPACK(ys_v, ys);\n"
    "    long k = shape[axis];\n"
    "    shape[axis] = 1;\n"
    "    long pi = io + kg_offset(g, ndim, shape, is), ps = so + kg_offset(g, ndim, shape, ss);\n"
    "    long py = yo + kg_offset(g, ndim, shape, ys);\n"
    "    for (long j = 0; j < k; j++) {\n"
    "        long p = py + index[pi + j * is[axis]] * ys[axis];\n"
    "        T v = src[ps + j * ss[axis]];\n"
    "        T a = y[p];\n"
    "        y[p] = COMBINE(a, v);\n"
    "    }\n"
    "}\n";

/* The dtype whose kernel type (kg_type) is the unsigned-or-signed integer of an
 * element of dtype: what copies move. */
static fl_dtype bits_of(fl_dtype dtype)
{
    switch (ocl_element_size(dtype)) {
    case 1: return FL_U8;
    case 2: return FL_F16; /* ushort */
    case 4: return FL_I32;
    default: return FL_I64;
    }
}

static cl_kernel copy_kernel(const char *name, fl_dtype dtype)
{
    return ocl_kernel_for(copy_kernels, name, bits_of(dtype));
}

static cl_long8 pack(int ndim, const int64_t *values)
{
    cl_long8 v = {{0}};
    for (int d = 0; d < ndim; d++)
        v.s[d] = values[d];
    return v;
}

/* t's strides as a kernel takes them (size-1 axes as 0: they never move). */
static cl_long8 strides_of(const fl_tensor *t)
{
    cl_long8 v = {{0}};
    for (int d = 0; d < t->ndim; d++)
        v.s[d] = t->shape[d] == 1 ? 0 : ocl_impl(t)->strides[d];
    return v;
}

/* Copies the elements of x (a value) into out's buffer from element offset yo (from
 * out's start) through strides ys, x's shape. */
static int copy_into(const char *operation, cl_kernel kernel, const fl_tensor *x, fl_tensor *out, int64_t yo,
                     const int64_t *ys)
{
    cl_long n = x->numel, xo = ocl_element_offset(x), at = ocl_element_offset(out) + yo;
    cl_int ndim = x->ndim;
    cl_long8 shape = pack(x->ndim, x->shape), xs = strides_of(x), ysv = pack(x->ndim, ys);
    ocl_arg args[] = {OCL_VALUE(n),  OCL_VALUE(ndim), OCL_VALUE(shape), OCL_MEM(ocl_impl(x)->buffer), OCL_VALUE(xo),
                      OCL_VALUE(xs), OCL_MEM(ocl_impl(out)->buffer), OCL_VALUE(at), OCL_VALUE(ysv)};
    return ocl_launch(operation, kernel, (size_t)n, 9, args);
}

/* out (fresh, dense) = t's values. */
static int copy_dense(const char *operation, cl_kernel kernel, const fl_tensor *t, fl_tensor *out)
{
    int64_t dense[FL_MAX_DIMS];
    ocl_dense_strides(out->ndim, out->shape, dense);
    return copy_into(operation, kernel, t, out, 0, dense);
}

/* 0, or an error where an operand's dtype is not want (the kernels move elements by
 * size, so a mismatch would read garbage rather than fail). */
static int check_dtypes(const char *operation, fl_dtype want, int count, const fl_tensor *const *operands)
{
    for (int i = 0; i < count; i++)
        if (operands[i]->dtype != want)
            return fl_backend_error(FL_ERR_DTYPE, "%s takes %s operands here, not %s", operation,
                                    fl_dtype_name(want), fl_dtype_name(operands[i]->dtype));
    return 0;
}

/* ---- concat, update_slice ---- */

static int ocl_concat(const fl_backend *self, fl_tensor *out, const fl_tensor *const *inputs, int count, int axis)
{
    (void)self;
    int rc = check_dtypes("concat", out->dtype, count, inputs);
    if (rc)
        return rc;
    cl_kernel kernel = copy_kernel("copy_strided", out->dtype);
    if (!kernel)
        return FL_ERR_BACKEND;
    if ((rc = ocl_alloc(out)))
        return rc;
    int64_t strides[FL_MAX_DIMS], position = 0;
    ocl_dense_strides(out->ndim, out->shape, strides);
    for (int i = 0; i < count && !rc; i++) {
        if (!ocl_value(inputs[i]))
            return FL_ERR_BACKEND;
        rc = copy_into("concat", kernel, inputs[i], out, position * strides[axis], strides);
        position += inputs[i]->shape[axis];
    }
    return rc;
}

static int ocl_update_slice(const fl_backend *self, fl_tensor *out, const fl_tensor *base, const fl_tensor *src,
                            const int64_t *start, const int64_t *step)
{
    (void)self;
    int rc = check_dtypes("update_slice", out->dtype, 2, (const fl_tensor *[]){base, src});
    if (rc)
        return rc;
    cl_kernel kernel = copy_kernel("copy_strided", out->dtype);
    if (!kernel)
        return FL_ERR_BACKEND;
    if ((rc = ocl_alloc(out)) || out->numel == 0)
        return rc;
    if (!ocl_value(base) || !ocl_value(src))
        return FL_ERR_BACKEND;
    if ((rc = copy_dense("update_slice", kernel, base, out)) || src->numel == 0)
        return rc;
    int64_t dense[FL_MAX_DIMS], region[FL_MAX_DIMS], offset = 0;
    ocl_dense_strides(out->ndim, out->shape, dense);
    for (int i = 0; i < out->ndim; i++) {
        offset += start[i] * dense[i];
        region[i] = dense[i] * step[i];
    }
    return copy_into("update_slice", kernel, src, out, offset, region);
}

/* ---- where ---- */

static int ocl_where(const fl_backend *self, fl_tensor *out, const fl_tensor *cond, const fl_tensor *a,
                     const fl_tensor *b)
{
    (void)self;
    int rc = check_dtypes("where", FL_BOOL, 1, &cond);
    if (rc || (rc = check_dtypes("where", out->dtype, 2, (const fl_tensor *[]){a, b})))
        return rc;
    cl_kernel kernel = copy_kernel("choose", out->dtype);
    if (!kernel)
        return FL_ERR_BACKEND;
    if ((rc = ocl_alloc(out)) || out->numel == 0)
        return rc;
    if (!ocl_value(cond) || !ocl_value(a) || !ocl_value(b))
        return FL_ERR_BACKEND;
    cl_long n = out->numel, co = ocl_element_offset(cond), ao = ocl_element_offset(a), bo = ocl_element_offset(b);
    cl_long yo = ocl_element_offset(out);
    cl_int ndim = out->ndim;
    cl_long8 shape = pack(out->ndim, out->shape), cs = strides_of(cond), as = strides_of(a), bs = strides_of(b);
    ocl_arg args[] = {OCL_VALUE(n),  OCL_VALUE(ndim), OCL_VALUE(shape), OCL_MEM(ocl_impl(cond)->buffer),
                      OCL_VALUE(co), OCL_VALUE(cs),   OCL_MEM(ocl_impl(a)->buffer), OCL_VALUE(ao),
                      OCL_VALUE(as), OCL_MEM(ocl_impl(b)->buffer), OCL_VALUE(bo), OCL_VALUE(bs),
                      OCL_MEM(ocl_impl(out)->buffer), OCL_VALUE(yo)};
    return ocl_launch("where", kernel, (size_t)n, 14, args);
}

/* ---- gather, index_select ---- */

/* out = a's elements at out's coordinates, along axis at index's values, the index
 * read through index_strides over out's shape. */
static int take(const char *operation, fl_tensor *out, const fl_tensor *a, int axis, const fl_tensor *index,
                const cl_long8 *index_strides)
{
    cl_kernel kernel = copy_kernel("take", out->dtype);
    if (!kernel)
        return FL_ERR_BACKEND;
    cl_long n = out->numel, ao = ocl_element_offset(a), io = ocl_element_offset(index), yo = ocl_element_offset(out);
    cl_int ndim = out->ndim, ax = axis;
    cl_long8 shape = pack(out->ndim, out->shape), as = pack(a->ndim, ocl_impl(a)->strides);
    ocl_arg args[] = {OCL_VALUE(n),  OCL_VALUE(ndim), OCL_VALUE(ax), OCL_VALUE(shape), OCL_MEM(ocl_impl(a)->buffer),
                      OCL_VALUE(ao), OCL_VALUE(as), OCL_MEM(ocl_impl(index)->buffer), OCL_VALUE(io),
                      OCL_VALUE(*index_strides), OCL_MEM(ocl_impl(out)->buffer), OCL_VALUE(yo)};
    return ocl_launch(operation, kernel, (size_t)n, 12, args);
}

static int ocl_gather(const fl_backend *self, fl_tensor *out, const fl_tensor *a, int axis, const fl_tensor *index)
{
    (void)self;
    int rc = check_dtypes("gather", out->dtype, 1, &a);
    if (rc || (rc = check_dtypes("gather", FL_I64, 1, &index)) || (rc = ocl_alloc(out)) || out->numel == 0)
        return rc;
    if (!ocl_value(a) || !ocl_value(index))
        return FL_ERR_BACKEND;
    cl_long8 strides = strides_of(index);
    return take("gather", out, a, axis, index, &strides);
}

static int ocl_index_select(const fl_backend *self, fl_tensor *out, const fl_tensor *a, int axis,
                            const fl_tensor *index)
{
    (void)self;
    int rc = check_dtypes("index_select", out->dtype, 1, &a);
    if (rc || (rc = check_dtypes("index_select", FL_I64, 1, &index)) || (rc = ocl_alloc(out)) || out->numel == 0)
        return rc;
    if (!ocl_value(a) || !ocl_value(index))
        return FL_ERR_BACKEND;
    cl_long8 strides = {{0}}; /* a 1-D index (or a 0-d one) along axis */
    strides.s[axis] = index->ndim == 1 && index->shape[0] != 1 ? ocl_impl(index)->strides[0] : 0;
    return take("index_select", out, a, axis, index, &strides);
}

/* ---- scatter_add ---- */

/* The prelude, the definitions of the reduction that accumulates dtype (a sum; on bool
 * a logical or, which is its max), then the kernel. */
static bool write_scatter(char *source, size_t size, const void *arg)
{
    fl_dtype dtype = *(const fl_dtype *)arg;
    size_t used = (size_t)snprintf(source, size, "%s\n", kg_opencl.prelude);
    if (used >= size || !kg_reduction_defines(dtype == FL_BOOL ? LAZY_MAX : LAZY_SUM, dtype, source + used, size - used)) {
        fl_backend_error(FL_ERR_DTYPE, "scatter_add has no %s kernel", fl_dtype_name(dtype));
        return false;
    }
    used += strlen(source + used);
    int n = snprintf(source + used, size - used, "%s", scatter_kernel);
    if (n < 0 || (size_t)n >= size - used) {
        fl_backend_error(FL_ERR_BACKEND, "scatter_add's source is longer than %zu bytes", size);
        return false;
    }
    return true;
}

/* out = base, then out[index[p] along axis, p elsewhere] += src[p] for every p of
 * index's shape; bool adds as a logical or (the cpu backend's rule), which is its max. */
static int ocl_scatter_add(const fl_backend *self, fl_tensor *out, const fl_tensor *base, int axis,
                           const fl_tensor *index, const fl_tensor *src)
{
    (void)self;
    int rc = check_dtypes("scatter_add", out->dtype, 2, (const fl_tensor *[]){base, src});
    if (rc || (rc = check_dtypes("scatter_add", FL_I64, 1, &index)))
        return rc;
    fl_dtype key = out->dtype; /* the text depends on the dtype only */
    cl_kernel scatter = ocl_kernel_keyed(&key, sizeof key, "scatter_add", write_scatter, &key);
    cl_kernel copy = scatter ? copy_kernel("copy_strided", out->dtype) : NULL;
    if (!copy)
        return FL_ERR_BACKEND;
    if ((rc = ocl_alloc(out)) || out->numel == 0)
        return rc;
    if (!ocl_value(base) || !ocl_value(index) || !ocl_value(src))
        return FL_ERR_BACKEND;
    if ((rc = copy_dense("scatter_add", copy, base, out)) || index->numel == 0)
        return rc;
    int64_t dense[FL_MAX_DIMS];
    ocl_dense_strides(out->ndim, out->shape, dense);
    cl_long lines = index->numel / index->shape[axis];
    cl_long io = ocl_element_offset(index), so = ocl_element_offset(src), yo = ocl_element_offset(out);
    cl_int ndim = index->ndim, ax = axis;
    cl_long8 shape = pack(index->ndim, index->shape), is = strides_of(index), ss = strides_of(src);
    cl_long8 ys = pack(out->ndim, dense);
    ocl_arg args[] = {OCL_VALUE(lines), OCL_VALUE(ndim), OCL_VALUE(ax), OCL_VALUE(shape),
                      OCL_MEM(ocl_impl(index)->buffer), OCL_VALUE(io), OCL_VALUE(is),
                      OCL_MEM(ocl_impl(src)->buffer), OCL_VALUE(so), OCL_VALUE(ss),
                      OCL_MEM(ocl_impl(out)->buffer), OCL_VALUE(yo), OCL_VALUE(ys)};
    return ocl_launch("scatter_add", scatter, (size_t)lines, 13, args);
}

void ocl_register_index(fl_backend *b)
{
    b->concat = ocl_concat;
    b->update_slice = ocl_update_slice;
    b->where = ocl_where;
    b->gather = ocl_gather;
    b->scatter_add = ocl_scatter_add;
    b->index_select = ocl_index_select;
}
