/*
 * The reductions (sum, prod, max, min), arg-extrema and cumsum of the OpenCL
 * backend. Their kernels come from the generator (kernelgen.h), whose list of
 * reductions (KG_REDUCTIONS) gives every identity and combination, so an operation
 * reduces, scans and picks its extreme the same way here as in fused kernels.
 *
 * Every operation reads its input as lines: [outer, k, inner] through strides, k
 * the reduced axes. A view whose axes merge into that shape is read in place;
 * anything else is first copied by a generated copy: with the reduced axes last, or
 * in its own order for cumsum, whose output follows the input's.
 * Then one of two kernels runs:
 *  - a work item per output walking its line in order, when there are many outputs
 *    or the lines are short (the columns of a matrix, the rows of a tall one);
 *  - a work-group per output, its lanes striding over the line and combining in
 *    local memory, when a few outputs reduce long lines.
 * Neither depends on the thread count, so results are the same under any setting.
 */
#include <stdlib.h>
#include <string.h>

#include "opencl.h"

/* Outputs enough to occupy a device with a work item each, and lines too short to
 * share between a work-group's lanes: below both, a work-group per output. */
#define MANY_OUTPUTS 1024
#define SHORT_LINE 64

typedef struct lines {
    int64_t outer, k, inner;
    int64_t so, sk, si; /* element strides of the three axes */
} lines;

static bool group_per_output(const lines *v) { return v->outer * v->inner < MANY_OUTPUTS && v->k >= SHORT_LINE; }

/* t's axes without the size-1 ones, neighbours of the same kind (reduced or kept)
 * merged where their strides allow, read as lines. False if they are not of the form
 * [kept][reduced][kept] (each part optional). */
static bool merge_lines(int ndim, const int64_t *shape, const int64_t *strides, unsigned mask, lines *v)
{
    int n = 0;
    int64_t s[FL_MAX_DIMS], st[FL_MAX_DIMS];
    bool red[FL_MAX_DIMS];
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 1)
            continue;
        bool reduced = mask >> i & 1;
        if (n > 0 && red[n - 1] == reduced && st[n - 1] == strides[i] * shape[i]) {
            s[n - 1] *= shape[i];
            st[n - 1] = strides[i];
            continue;
        }
        s[n] = shape[i];
        st[n] = strides[i];
        red[n] = reduced;
        n++;
    }
    *v = (lines){1, 1, 1, 0, 0, 0};
    int i = 0;
    if (i < n && !red[i]) {
        v->outer = s[i];
        v->so = st[i++];
    }
    if (i < n && red[i]) {
        v->k = s[i];
        v->sk = st[i++];
    }
    if (i < n && !red[i]) {
        v->inner = s[i];
        v->si = st[i++];
    }
    return i == n;
}

/* The lines of a along the axes of mask: a itself (*source, a new reference) where
 * its layout allows, else a dense copy: of a, in order, if keep_order (one axis:
 * what a scan writes follows a's order), else with the reduced axes last. Returns 0
 * or an fl_status; the caller releases *source. */
static int lines_of(const fl_tensor *a, unsigned mask, bool keep_order, fl_tensor **source, lines *v)
{
    *source = NULL;
    ocl_tensor *o = ocl_value(a);
    if (!o)
        return FL_ERR_BACKEND;
    int64_t strides[FL_MAX_DIMS];
    for (int i = 0; i < a->ndim; i++)
        strides[i] = a->shape[i] == 1 ? 0 : o->strides[i];
    if (merge_lines(a->ndim, a->shape, strides, mask, v)) {
        *source = fl_retain(a);
        return 0;
    }
    if (keep_order) {
        fl_tensor *dense = ocl_contiguous(a);
        if (!dense)
            return FL_ERR_BACKEND;
        ocl_dense_strides(a->ndim, a->shape, strides);
        merge_lines(a->ndim, a->shape, strides, mask, v);
        *source = dense;
        return 0;
    }
    /* Kept axes first, in order, then the reduced ones: a permuted view, copied. */
    int64_t shape[FL_MAX_DIMS], permuted[FL_MAX_DIMS];
    int n = 0;
    for (unsigned pass = 0; pass < 2; pass++)
        for (int i = 0; i < a->ndim; i++)
            if ((mask >> i & 1) == pass) {
                shape[n] = a->shape[i];
                permuted[n++] = o->strides[i];
            }
    fl_tensor *view = fl_tensor_alloc(a->backend, a->dtype, a->ndim, shape);
    if (!view)
        return FL_ERR_MEMORY;
    int rc = ocl_view(view, a, o->offset, permuted);
    fl_tensor *dense = rc ? NULL : ocl_contiguous(view);
    fl_release(view);
    if (!dense)
        return rc ? rc : FL_ERR_BACKEND;
    int64_t outputs = 1, extent = 1;
    for (int i = 0; i < a->ndim; i++)
        *(mask >> i & 1 ? &extent : &outputs) *= a->shape[i];
    *v = (lines){outputs, extent, 1, extent, 1, 0};
    *source = dense;
    return 0;
}

/* Replaces *x by a dense copy of its lines v, [outer * inner, k]; 0 or an fl_status. */
static int dense_lines(fl_tensor **x, lines *v)
{
    const fl_tensor *t = *x;
    int64_t shape[3] = {v->outer, v->inner, v->k}, strides[3] = {v->so, v->si, v->sk};
    fl_tensor *view = fl_tensor_alloc(t->backend, t->dtype, 3, shape);
    if (!view)
        return FL_ERR_MEMORY;
    int rc = ocl_view(view, t, ocl_impl(t)->offset, strides);
    fl_tensor *dense = rc ? NULL : ocl_contiguous(view);
    fl_release(view);
    if (!dense)
        return rc ? rc : FL_ERR_BACKEND;
    fl_release(*x);
    *x = dense;
    *v = (lines){v->outer * v->inner, v->k, 1, v->k, 1, 0};
    return 0;
}

/* Launches kernel, one of the generator's strided ones (kernelgen.h), on the lines v
 * of x into out: a work item per output or line, or a work-group of local (groups). */
static int launch_lines(const char *operation, cl_kernel kernel, const lines *v, const fl_tensor *x, fl_tensor *out,
                        bool groups, int local)
{
    cl_long outer = v->outer, k = v->k, inner = v->inner, so = v->so, sk = v->sk, si = v->si;
    cl_long xo = ocl_element_offset(x), yo = ocl_element_offset(out);
    ocl_arg args[] = {OCL_VALUE(outer), OCL_VALUE(k),  OCL_VALUE(inner), OCL_MEM(ocl_impl(x)->buffer), OCL_VALUE(xo),
                      OCL_VALUE(so),    OCL_VALUE(sk), OCL_VALUE(si),    OCL_MEM(ocl_impl(out)->buffer), OCL_VALUE(yo)};
    if (!groups)
        return ocl_launch(operation, kernel, (size_t)(outer * inner), 10, args);
    size_t global = (size_t)(outer * inner) * (size_t)local, size = (size_t)local;
    return ocl_launch_nd(operation, kernel, 1, &global, &size, 10, args);
}

/* What a reduction kernel's text is made from: the generator, the operation, the
 * dtype and the work-group size. */
typedef enum { GEN_ROWS, GEN_COLUMNS, GEN_ARG, GEN_SCAN } generator;
typedef struct reduction_source {
    generator gen;
    int op;
    fl_dtype dtype;
    int local;
} reduction_source;
_Static_assert(sizeof(reduction_source) == 4 * sizeof(int), "a key has no padding");

typedef struct reduction_writer {
    const reduction_source *key;
    const char *operation; /* for the message */
} reduction_writer;

static bool write_reduction(char *source, size_t size, const void *arg)
{
    const reduction_writer *w = arg;
    const reduction_source *r = w->key;
    bool made = r->gen == GEN_ROWS      ? kg_reduce_rows(&kg_opencl, r->op, r->dtype, r->local, source, size)
                : r->gen == GEN_COLUMNS ? kg_reduce_columns(&kg_opencl, r->op, r->dtype, source, size)
                : r->gen == GEN_ARG     ? kg_arg_reduce(&kg_opencl, r->op, r->dtype, r->local, source, size)
                                        : kg_scan(&kg_opencl, r->op, r->dtype, r->local, source, size);
    if (!made)
        fl_backend_error(FL_ERR_DTYPE, "%s has no %s kernel", w->operation, fl_dtype_name(r->dtype));
    return made;
}

/* The kernels named names[0 .. count) of generator gen's program. Returns 0 or an
 * fl_status. */
static int kernels_of(const char *operation, generator gen, int op, fl_dtype dtype, int local, int count,
                      const char *const *names, cl_kernel *kernels)
{
    reduction_source key = {gen, op, dtype, local};
    reduction_writer writer = {&key, operation};
    for (int i = 0; i < count; i++)
        if (!(kernels[i] = ocl_kernel_keyed(&key, sizeof key, names[i], write_reduction, &writer)))
            return FL_ERR_BACKEND;
    return 0;
}

/* ---- sum, prod, max, min ---- */

/* The kernel of reduction op: the group kernel (dense rows) or the item one. */
static int reduce_kernel(const char *name, int op, fl_dtype dtype, bool groups, int local, cl_kernel *kernel)
{
    return kernels_of(name, groups ? GEN_ROWS : GEN_COLUMNS, op, dtype, groups ? local : 0, 1,
                      (const char *[]){groups ? "reduce" : "reduce_columns"}, kernel);
}

/* Long rows are cut into chunks, each a work-group, so that a few rows still occupy
 * the device; a second pass reduces the chunks' results. The count depends on the
 * sizes only, so the result is the same on every run. */
#define CHUNK_MIN 8192
#define CHUNKS_MAX 256

static int launch_rows(const char *name, cl_kernel kernel, int local, const fl_tensor *x, cl_long xo, int64_t rows,
                       int64_t k, int64_t chunks, const fl_tensor *y, cl_long yo)
{
    cl_long nrows = rows, nk = k, nchunks = chunks;
    ocl_arg args[] = {OCL_VALUE(nrows), OCL_VALUE(nk), OCL_VALUE(nchunks), OCL_MEM(ocl_impl(x)->buffer),
                      OCL_VALUE(xo), OCL_MEM(ocl_impl(y)->buffer), OCL_VALUE(yo)};
    size_t global = (size_t)(rows * chunks) * (size_t)local, size = (size_t)local;
    return ocl_launch_nd(name, kernel, 1, &global, &size, 7, args);
}

/* out[r] = op over the dense rows [rows, k] of x. */
static int reduce_rows(const char *name, cl_kernel kernel, int local, const fl_tensor *x, int64_t rows, int64_t k,
                       fl_tensor *out)
{
    int64_t chunks = rows >= 64 ? 1 : k / CHUNK_MIN;
    chunks = chunks < 1 ? 1 : chunks > CHUNKS_MAX ? CHUNKS_MAX : chunks;
    if (chunks == 1)
        return launch_rows(name, kernel, local, x, ocl_element_offset(x), rows, k, 1, out, ocl_element_offset(out));
    int64_t shape[1] = {rows * chunks};
    fl_tensor *partial = fl_tensor_alloc(out->backend, out->dtype, 1, shape);
    if (!partial)
        return fl_backend_error(FL_ERR_MEMORY, "out of host memory");
    int rc = ocl_alloc(partial);
    if (!rc)
        rc = launch_rows(name, kernel, local, x, ocl_element_offset(x), rows, k, chunks, partial, ocl_element_offset(partial));
    if (!rc)
        rc = launch_rows(name, kernel, local, partial, ocl_element_offset(partial), rows, chunks, 1, out,
                         ocl_element_offset(out));
    fl_release(partial);
    return rc;
}

static int reduce(const char *name, int op, fl_tensor *out, const fl_tensor *a, unsigned mask)
{
    char defines[512];
    if (!kg_reduction_defines(op, a->dtype, defines, sizeof defines))
        return fl_backend_error(FL_ERR_DTYPE, "%s has no %s kernel", name, fl_dtype_name(a->dtype));
    if (out->dtype != a->dtype)
        return fl_backend_error(FL_ERR_DTYPE, "%s gives %s, not %s", name, fl_dtype_name(a->dtype),
                                fl_dtype_name(out->dtype));
    int rc = ocl_alloc(out);
    if (rc || out->numel == 0)
        return rc;
    if (!ocl_value(a))
        return FL_ERR_BACKEND;
    bool reduces = false; /* along an axis longer than one: else out has a's shape and values */
    for (int i = 0; i < a->ndim; i++)
        reduces = reduces || ((mask >> i & 1) && a->shape[i] != 1);
    if (!reduces) {
        kg_program p = {.ndim = a->ndim, .compute = FL_F32, .nleaves = 1, .nslots = 1, .noutputs = 1};
        p.leaves[0] = (kg_leaf){a->dtype, true};
        p.slots[0] = (kg_slot){KG_LEAF, {0, -1}, a->dtype};
        return ocl_run_program(name, &p, &a, NULL, &out);
    }
    int local = ocl_group_size();
    cl_kernel kernel;
    if (a->numel == 0) { /* an empty reduced axis: every output is the identity */
        lines none = {out->numel, 0, 1, 0, 0, 0};
        rc = reduce_kernel(name, op, a->dtype, false, local, &kernel);
        return rc ? rc : launch_lines(name, kernel, &none, a, out, false, local);
    }
    fl_tensor *x;
    lines v;
    if ((rc = lines_of(a, mask, false, &x, &v)))
        return rc;
    bool groups = group_per_output(&v);
    if ((rc = reduce_kernel(name, op, a->dtype, groups, local, &kernel))) {
        /* no kernel */
    } else if (!groups) {
        rc = launch_lines(name, kernel, &v, x, out, false, local);
    } else if (!(v.inner == 1 && v.sk == 1 && (v.outer == 1 || v.so == v.k)) && (rc = dense_lines(&x, &v))) {
        /* the group kernel reads dense rows; the copy failed */
    } else {
        rc = reduce_rows(name, kernel, local, x, v.outer, v.k, out);
    }
    fl_release(x);
    return rc;
}

#define REDUCE_ENTRY(name, op)                                                                 \
    static int ocl_##name(const fl_backend *self, fl_tensor *out, const fl_tensor *a, unsigned axes) \
    {                                                                                          \
        (void)self;                                                                            \
        return reduce(#name, op, out, a, axes);                                                \
    }

REDUCE_ENTRY(sum, LAZY_SUM)
REDUCE_ENTRY(prod, LAZY_PROD)
REDUCE_ENTRY(max, LAZY_MAX)
REDUCE_ENTRY(min, LAZY_MIN)

/* ---- argmax, argmin: the first extreme, a NaN counting as more extreme than any number ---- */

static int arg_extremum(const char *name, int op, fl_tensor *out, const fl_tensor *a, int axis)
{
    if (out->dtype != FL_I64)
        return fl_backend_error(FL_ERR_DTYPE, "%s gives i64, not %s", name, fl_dtype_name(out->dtype));
    int64_t length = a->ndim ? a->shape[axis] : 1;
    if (length == 0 && out->numel > 0)
        return fl_backend_error(FL_ERR_SHAPE, "%s of an empty axis", name);
    int local = ocl_group_size();
    cl_kernel kernels[2];
    int rc = kernels_of(name, GEN_ARG, op, a->dtype, local, 2, (const char *[]){"arg_rows", "arg_columns"}, kernels);
    if (rc || (rc = ocl_alloc(out)) || out->numel == 0)
        return rc;
    fl_tensor *x;
    lines v;
    if ((rc = lines_of(a, a->ndim ? 1u << axis : 0, false, &x, &v)))
        return rc;
    bool groups = group_per_output(&v);
    rc = launch_lines(name, kernels[groups ? 0 : 1], &v, x, out, groups, local);
    fl_release(x);
    return rc;
}

static int ocl_argmax(const fl_backend *self, fl_tensor *out, const fl_tensor *a, int axis)
{
    (void)self;
    return arg_extremum("argmax", LAZY_MAX, out, a, axis);
}

static int ocl_argmin(const fl_backend *self, fl_tensor *out, const fl_tensor *a, int axis)
{
    (void)self;
    return arg_extremum("argmin", LAZY_MIN, out, a, axis);
}

/* ---- cumsum: the generator's scan with the sum's combination ---- */

static int ocl_cumsum(const fl_backend *self, fl_tensor *out, const fl_tensor *a, int axis)
{
    (void)self;
    if (out->dtype != a->dtype)
        return fl_backend_error(FL_ERR_DTYPE, "cumsum gives %s, not %s", fl_dtype_name(a->dtype),
                                fl_dtype_name(out->dtype));
    int local = ocl_group_size();
    cl_kernel kernels[2];
    int rc = kernels_of("cumsum", GEN_SCAN, LAZY_SUM, a->dtype, local, 2, (const char *[]){"scan_groups", "scan_lines"},
                        kernels);
    if (rc || (rc = ocl_alloc(out)) || out->numel == 0)
        return rc;
    fl_tensor *x;
    lines v;
    if ((rc = lines_of(a, a->ndim ? 1u << axis : 0, true, &x, &v)))
        return rc;
    bool groups = group_per_output(&v);
    rc = launch_lines("cumsum", kernels[groups ? 0 : 1], &v, x, out, groups, local);
    fl_release(x);
    return rc;
}

void ocl_register_reduce(fl_backend *b)
{
    b->sum = ocl_sum;
    b->prod = ocl_prod;
    b->max = ocl_max;
    b->min = ocl_min;
    b->argmax = ocl_argmax;
    b->argmin = ocl_argmin;
    b->cumsum = ocl_cumsum;
    b->sort = ocl_sort;
}
