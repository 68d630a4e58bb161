/*
 * The OpenCL backend's matrix products, convolutions and pooling (f32 and f64).
 *
 * Products run on CLBlast, enqueued on the backend's queue under its launch lock and
 * never waited for. An operand whose last two axes are row-major or column-major (a
 * transposed view) goes to CLBlast as it is, with a transpose flag; any other layout
 * is copied dense on the device first. Batch axes keep their strides, zero included,
 * so broadcast batches are never copied: neighbouring axes merge where they step as
 * one, the innermost becomes a strided-batched call, and the rest are looped over on
 * the host, one call each.
 *
 * Convolutions are im2col and GEMM, per group, for a chunk of images at a time (the
 * column matrix of a whole batch can be far larger than the batch). The columns of
 * the chunk's images sit side by side, [C * R * S][images * P * Q], so each group is
 * one product with the images in its columns, and all groups are one strided-batched
 * call. The input gradient is the transposed product and col2im, a gather (each input
 * element sums the column entries it fed), so it needs no atomics.
 *
 * Pooling runs one work item per output element forward and per input element
 * backward (a gather over the windows that hold it, in the cpu backend's order). Max
 * pooling's backward pass first finds each window's argmax, by the cpu backend's
 * rule: the first maximum in row order, or the last NaN.
 */
#include "opencl.h"

#include <clblast_c.h>
#include <limits.h>

/* 0 if the device computes operation in dtype, else an fl_status. */
static int check_dtype(const char *operation, fl_dtype dtype)
{
    if (dtype != FL_F32 && dtype != FL_F64)
        return fl_backend_error(FL_ERR_DTYPE, "%s has no %s kernel on opencl", operation, fl_dtype_name(dtype));
    ocl_device *dev = ocl_device_get();
    if (!dev)
        return FL_ERR_BACKEND;
    if (dtype == FL_F64 && !dev->fp64)
        return fl_backend_error(FL_ERR_DTYPE, "%s: %s has no f64 (cl_khr_fp64)", operation, dev->name);
    return 0;
}


static int64_t buffer_offset(const ocl_buffer *b, fl_dtype dtype)
{
    return (int64_t)(b->offset / ocl_element_size(dtype));
}

/* ---- CLBlast ---- */

static const char *clblast_status_name(CLBlastStatusCode s)
{
    switch (s) {
#define NAME(e) \
    case e:     \
        return #e;
        NAME(CLBlastNotImplemented) NAME(CLBlastInvalidMatrixA) NAME(CLBlastInvalidMatrixB) NAME(CLBlastInvalidMatrixC)
        NAME(CLBlastInvalidVectorX) NAME(CLBlastInvalidVectorY) NAME(CLBlastInvalidDimension)
        NAME(CLBlastInvalidLeadDimA) NAME(CLBlastInvalidLeadDimB) NAME(CLBlastInvalidLeadDimC)
        NAME(CLBlastInvalidIncrementX) NAME(CLBlastInvalidIncrementY) NAME(CLBlastInsufficientMemoryA)
        NAME(CLBlastInsufficientMemoryB) NAME(CLBlastInsufficientMemoryC) NAME(CLBlastInsufficientMemoryX)
        NAME(CLBlastInsufficientMemoryY) NAME(CLBlastInsufficientMemoryTemp) NAME(CLBlastInvalidBatchCount)
        NAME(CLBlastInvalidOverrideKernel) NAME(CLBlastMissingOverrideParameter) NAME(CLBlastInvalidLocalMemUsage)
        NAME(CLBlastNoHalfPrecision) NAME(CLBlastNoDoublePrecision) NAME(CLBlastInvalidVectorScalar)
        NAME(CLBlastInsufficientMemoryScalar) NAME(CLBlastDatabaseError) NAME(CLBlastUnknownError)
        NAME(CLBlastUnexpectedError)
#undef NAME
    default:
        /* the rest are OpenCL's own codes */
        return ocl_error_name((cl_int)s);
    }
}

static int clblast_check(CLBlastStatusCode s, const char *operation)
{
    if (s == CLBlastSuccess)
        return 0;
    bool memory = s == CLBlastTempBufferAllocFailure || s == CLBlastOpenCLOutOfResources ||
                  s == CLBlastOpenCLOutOfHostMemory;
    ocl_device *dev = ocl_device_get();
    return fl_backend_error(memory ? FL_ERR_MEMORY : FL_ERR_BACKEND, "CLBlast GEMM for %s failed on %s: %s (%d)",
                            operation, dev ? dev->name : "no device", clblast_status_name(s), (int)s);
}

/* One matrix of a product as CLBlast reads it: row-major at offset (elements) in mem,
 * or its transpose; batch item i at offset + i * stride. */
typedef struct gemm_matrix {
    cl_mem mem;
    int64_t offset, ld, stride;
    bool transposed;
} gemm_matrix;

/* C[m x n] = A[m x k] B[k x n] (+ C if accumulate), for batch matrices. */
typedef struct gemm_call {
    int64_t m, n, k, batch;
    gemm_matrix a, b, c;
    bool accumulate;
} gemm_call;

/* Whether the last element a matrix's batch reaches is within a 32-bit int (CLBlast's
 * kernels index with int). */
static bool fits_int(const gemm_matrix *x, int64_t rows, int64_t cols, int64_t batch)
{
    if (x->transposed) {
        int64_t t = rows;
        rows = cols;
        cols = t;
    }
    int64_t last = x->offset + x->stride * (batch - 1) + x->ld * (rows - 1) + cols;
    return last <= INT_MAX && x->ld <= INT_MAX && x->stride <= INT_MAX;
}

/* One CLBlast call: a plain GEMM when batch is 1, else strided-batched. */
static CLBlastStatusCode clblast_gemm(ocl_device *dev, fl_dtype dtype, const gemm_call *g)
{
    CLBlastLayout row_major = CLBlastLayoutRowMajor;
    CLBlastTranspose ta = g->a.transposed ? CLBlastTransposeYes : CLBlastTransposeNo;
    CLBlastTranspose tb = g->b.transposed ? CLBlastTransposeYes : CLBlastTransposeNo;
    size_t m = (size_t)g->m, n = (size_t)g->n, k = (size_t)g->k, batch = (size_t)g->batch;
    size_t ao = (size_t)g->a.offset, bo = (size_t)g->b.offset, co = (size_t)g->c.offset;
    size_t lda = (size_t)g->a.ld, ldb = (size_t)g->b.ld, ldc = (size_t)g->c.ld;
    size_t sa = (size_t)g->a.stride, sb = (size_t)g->b.stride, sc = (size_t)g->c.stride;
    if (dtype == FL_F32) {
        float beta = g->accumulate ? 1.0f : 0.0f;
        return batch == 1 ? CLBlastSgemm(row_major, ta, tb, m, n, k, 1.0f, g->a.mem, ao, lda, g->b.mem, bo, ldb, beta,
                                         g->c.mem, co, ldc, &dev->queue, NULL)
                          : CLBlastSgemmStridedBatched(row_major, ta, tb, m, n, k, 1.0f, g->a.mem, ao, lda, sa,
                                                       g->b.mem, bo, ldb, sb, beta, g->c.mem, co, ldc, sc, batch,
                                                       &dev->queue, NULL);
    }
    double beta = g->accumulate ? 1.0 : 0.0;
    return batch == 1 ? CLBlastDgemm(row_major, ta, tb, m, n, k, 1.0, g->a.mem, ao, lda, g->b.mem, bo, ldb, beta,
                                     g->c.mem, co, ldc, &dev->queue, NULL)
                      : CLBlastDgemmStridedBatched(row_major, ta, tb, m, n, k, 1.0, g->a.mem, ao, lda, sa, g->b.mem,
                                                   bo, ldb, sb, beta, g->c.mem, co, ldc, sc, batch, &dev->queue, NULL);
}

/* The alignment, in bytes, of a sub-buffer's origin on the device. */
static size_t sub_buffer_alignment(ocl_device *dev)
{
    static cl_uint bits;
    cl_uint known = __atomic_load_n(&bits, __ATOMIC_RELAXED);
    if (!known) {
        if (clGetDeviceInfo(dev->id, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof known, &known, NULL) != CL_SUCCESS ||
            known < 8)
            known = 4096;
        __atomic_store_n(&bits, known, __ATOMIC_RELAXED);
    }
    return known / 8;
}

/* CLBlast 1.5's strided-batched GEMM, on its large-matrix path, reads a matrix that
 * needs no padding or transposing where it is, but then ignores its offset and batch
 * stride and assumes 0 and a packed batch (its plain GEMM checks the offset). A matrix
 * of a batch is read right when it has padding (ld beyond its row: CLBlast copies
 * it), or when it is packed and starts at offset 0 of the cl_mem CLBlast is given:
 * a sub-buffer (*sub) starting at its first element, where the device's alignment
 * allows one. */
static bool batch_reads_right(const gemm_matrix *x, int64_t rows, int64_t cols, int64_t batch, size_t element,
                              size_t alignment, gemm_matrix *as_given, cl_mem *sub)
{
    int64_t stored_rows = x->transposed ? cols : rows, row = x->transposed ? rows : cols;
    *as_given = *x;
    *sub = NULL;
    if (x->ld > row || x->offset == 0)
        return x->ld > row || x->stride == rows * cols;
    if (x->stride != rows * cols || ((size_t)x->offset * element) % alignment != 0)
        return false;
    cl_buffer_region region = {(size_t)x->offset * element,
                               (size_t)(x->stride * (batch - 1) + x->ld * (stored_rows - 1) + row) * element};
    cl_int err;
    *sub = clCreateSubBuffer(x->mem, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &region, &err);
    if (err != CL_SUCCESS)
        return false;
    as_given->mem = *sub;
    as_given->offset = 0;
    return true;
}

static int gemm(const char *operation, fl_dtype dtype, const gemm_call *g)
{
    ocl_device *dev = ocl_device_get();
    if (!dev)
        return FL_ERR_BACKEND;
    if (!fits_int(&g->a, g->m, g->k, g->batch) || !fits_int(&g->b, g->k, g->n, g->batch) ||
        !fits_int(&g->c, g->m, g->n, g->batch))
        return fl_backend_error(FL_ERR_UNSUPPORTED,
                                "%s: a product of [%lld x %lld] and [%lld x %lld] reaches past 2^31 elements of its "
                                "device buffer, which CLBlast cannot index",
                                operation, (long long)g->m, (long long)g->k, (long long)g->k, (long long)g->n);
    gemm_call call = *g;
    cl_mem subs[3] = {NULL, NULL, NULL};
    bool batched = g->batch > 1;
    if (batched) {
        size_t element = ocl_element_size(dtype), alignment = sub_buffer_alignment(dev);
        batched = batch_reads_right(&g->a, g->m, g->k, g->batch, element, alignment, &call.a, &subs[0]) &&
                  batch_reads_right(&g->b, g->k, g->n, g->batch, element, alignment, &call.b, &subs[1]) &&
                  batch_reads_right(&g->c, g->m, g->n, g->batch, element, alignment, &call.c, &subs[2]);
    }
    CLBlastStatusCode s = CLBlastSuccess;
    /* The queue is the backend's: CLBlast's kernels run in order with everything else,
     * and no event is asked for, so nothing waits. */
    ocl_lock_queue();
    if (batched || g->batch == 1) {
        s = clblast_gemm(dev, dtype, &call);
    } else { /* one plain GEMM per item */
        for (int64_t i = 0; i < g->batch && s == CLBlastSuccess; i++) {
            gemm_call item = *g;
            item.batch = 1;
            item.a.offset += i * g->a.stride;
            item.b.offset += i * g->b.stride;
            item.c.offset += i * g->c.stride;
            s = clblast_gemm(dev, dtype, &item);
        }
    }
    ocl_unlock_queue();
    /* CLBlast picks its kernels and their work-group sizes from the call's shape */
    if (s == CLBlastSuccess) {
        int64_t signature[7] = {dtype, g->a.transposed, g->b.transposed, g->m, g->n, g->k, batched};
        ocl_first_run_done(ocl_hash(OCL_HASH_SEED, signature, sizeof signature));
    }
    /* OpenCL keeps a released sub-buffer until the commands using it are done. */
    for (int i = 0; i < 3; i++)
        if (subs[i])
            clReleaseMemObject(subs[i]);
    return clblast_check(s, operation);
}

/* ---- matmul ---- */

/* Whether a rows x cols matrix with these strides is row-major (ld = row stride) or
 * column-major (transposed; ld = column stride) with a valid leading dimension. */
static bool blas_layout(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride, bool *transposed,
                        int64_t *ld)
{
    int64_t min_rows = rows > 1 ? rows : 1, min_cols = cols > 1 ? cols : 1;
    if ((col_stride == 1 || cols == 1) && (rows == 1 || row_stride >= min_cols)) {
        *transposed = false;
        *ld = rows == 1 ? min_cols : row_stride;
        return true;
    }
    if ((row_stride == 1 || rows == 1) && (cols == 1 || col_stride >= min_rows)) {
        *transposed = true;
        *ld = cols == 1 ? min_rows : col_stride;
        return true;
    }
    return false;
}

/* A matmul operand: the tensor read (t itself or a dense copy, a reference held) and
 * its layout. */
typedef struct mm_operand {
    fl_tensor *held;
    gemm_matrix matrix;
    int64_t batch_strides[FL_MAX_DIMS];
} mm_operand;

static int mm_prepare(mm_operand *op, const fl_tensor *t)
{
    int n = t->ndim;
    const ocl_tensor *o = ocl_value(t);
    if (!o)
        return FL_ERR_BACKEND;
    /* CLBlast's batch strides are unsigned: a reversed batch axis is copied. */
    bool reversed = false;
    for (int i = 0; i < n - 2; i++)
        reversed = reversed || (t->shape[i] > 1 && o->strides[i] < 0);
    gemm_matrix *m = &op->matrix;
    bool usable = !reversed && blas_layout(t->shape[n - 2], t->shape[n - 1], o->strides[n - 2], o->strides[n - 1],
                                           &m->transposed, &m->ld);
    op->held = usable ? fl_retain(t) : ocl_contiguous(t);
    if (!op->held)
        return FL_ERR_BACKEND;
    o = ocl_impl(op->held);
    if (!usable && !blas_layout(t->shape[n - 2], t->shape[n - 1], o->strides[n - 2], o->strides[n - 1],
                                &m->transposed, &m->ld))
        return fl_backend_error(FL_ERR_BACKEND, "matmul: a dense copy of an operand has no BLAS layout");
    m->mem = o->buffer->mem;
    m->offset = ocl_element_offset(op->held);
    m->stride = 0;
    for (int i = 0; i < n - 2; i++)
        op->batch_strides[i] = t->shape[i] > 1 ? o->strides[i] : 0;
    return 0;
}

/* The batch axes of a product, with axes of size 1 dropped and neighbours merged
 * where all three operands step through them as one axis. */
typedef struct mm_batch {
    int naxes;
    int64_t size[FL_MAX_DIMS], stride[3][FL_MAX_DIMS]; /* a, b, c */
} mm_batch;

static void mm_batch_axes(mm_batch *batch, const fl_tensor *out, const mm_operand *a, const mm_operand *b)
{
    int nbatch = out->ndim - 2;
    int64_t c_stride = out->shape[out->ndim - 2] * out->shape[out->ndim - 1];
    int64_t c_strides[FL_MAX_DIMS];
    for (int i = nbatch - 1; i >= 0; i--) {
        c_strides[i] = c_stride;
        c_stride *= out->shape[i];
    }
    batch->naxes = 0;
    for (int i = 0; i < nbatch; i++) {
        int64_t size = out->shape[i], s[3] = {a->batch_strides[i], b->batch_strides[i], c_strides[i]};
        if (size == 1)
            continue;
        int last = batch->naxes - 1;
        bool merge = last >= 0;
        for (int k = 0; k < 3 && merge; k++)
            merge = batch->stride[k][last] == s[k] * size;
        if (merge) {
            batch->size[last] *= size;
            for (int k = 0; k < 3; k++)
                batch->stride[k][last] = s[k];
            continue;
        }
        batch->size[batch->naxes] = size;
        for (int k = 0; k < 3; k++)
            batch->stride[k][batch->naxes] = s[k];
        batch->naxes++;
    }
}

/* Enqueues out = a b for prepared operands, one CLBlast call per item of the batch
 * axes other than the strided one. */
static int mm_run(fl_tensor *out, const mm_operand *a, const mm_operand *b, int64_t K)
{
    int n = out->ndim;
    int64_t M = out->shape[n - 2], N = out->shape[n - 1];
    mm_batch batch = {0};
    mm_batch_axes(&batch, out, a, b);
    /* The innermost merged axis is the strided batch: there the output's matrices are
     * packed, which CLBlast's batched product needs (see batch_reads_right). */
    int strided = batch.naxes - 1;
    gemm_call g = {.m = M, .n = N, .k = K, .batch = strided < 0 ? 1 : batch.size[strided]};
    g.a = a->matrix;
    g.b = b->matrix;
    g.c = (gemm_matrix){ocl_impl(out)->buffer->mem, ocl_element_offset(out), N, 0, false};
    if (strided >= 0) {
        g.a.stride = batch.stride[0][strided];
        g.b.stride = batch.stride[1][strided];
        g.c.stride = batch.stride[2][strided];
    }
    int64_t calls = out->numel / (M * N) / g.batch;
    int rc = 0;
    for (int64_t call = 0; call < calls && !rc; call++) {
        gemm_call at = g;
        int64_t rest = call;
        for (int i = batch.naxes - 1; i >= 0; i--) {
            if (i == strided)
                continue;
            int64_t index = rest % batch.size[i];
            rest /= batch.size[i];
            at.a.offset += index * batch.stride[0][i];
            at.b.offset += index * batch.stride[1][i];
            at.c.offset += index * batch.stride[2][i];
        }
        rc = gemm("matmul", out->dtype, &at);
    }
    return rc;
}

static int ocl_matmul(const fl_backend *self, fl_tensor *out, const fl_tensor *a, const fl_tensor *b)
{
    (void)self;
    int rc = check_dtype("matmul", out->dtype);
    if (rc)
        return rc;
    if ((rc = ocl_alloc(out)) || out->numel == 0)
        return rc;
    int64_t K = a->shape[a->ndim - 1];
    if (K == 0)
        return ocl_fill_value(out, 0);
    mm_operand ma = {0}, mb = {0};
    rc = mm_prepare(&ma, a);
    if (!rc)
        rc = mm_prepare(&mb, b);
    if (!rc)
        rc = mm_run(out, &ma, &mb, K);
    if (ma.held)
        fl_release(ma.held);
    if (mb.held)
        fl_release(mb.held);
    return rc;
}

/* ---- convolution ---- */

static const char conv_source[] =
    /* col[((c * R + r) * S + s)][n * P * Q + p * Q + q] = x[n][c][p * sh - ph + r * dh][q * sw - pw + s * dw],
     * zero outside x; the work item's index is the column entry's. */
    "__kernel void im2col(long total, __global const T *x, long xo, long C, long H, long W, long R, long S,\n"
    "                     long P, long Q, long images, long sh, long sw, long ph, long pw, long dh, long dw,\n"
    "                     __global T *col, long co)\n"
    "{\n"
    "    long i = get_global_id(0);\n"
    "    if (i >= total) return;\n"
    "    long q = i % Q, t = i / Q, p = t % P; t /= P;\n"
    "    long n = t % images; t /= images;\n"
    "    long s = t % S; t /= S;\n"
    "    long r = t % R, c = t / R;\n"
    "    long h = p * sh - ph + r * dh, w = q * sw - pw + s * dw;\n"
    "    col[co + i] = h >= 0 && h < H && w >= 0 && w < W ? x[xo + ((n * C + c) * H + h) * W + w] : (T)0;\n"
    "}\n"
    /* The adjoint: each x element sums the column entries taken from it, in (r, s)
     * order as the cpu backend adds them. */
    "__kernel void col2im(long total, __global const T *col, long co, long C, long H, long W, long R, long S,\n"
    "                     long P, long Q, long images, long sh, long sw, long ph, long pw, long dh, long dw,\n"
    "                     __global T *x, long xo)\n"
    "{\n"
    "    long i = get_global_id(0);\n"
    "    if (i >= total) return;\n"
    "    long w = i % W, t = i / W, h = t % H; t /= H;\n"
    "    long c = t % C, n = t / C;\n"
    "    long columns = images * P * Q;\n"
    "    T sum = 0;\n"
    "    for (long r = 0; r < R; r++) {\n"
    "        long hp = h + ph - r * dh;\n"
    "        if (hp < 0 || hp % sh != 0 || hp / sh >= P) continue;\n"
    "        long p = hp / sh;\n"
    "        for (long s = 0; s < S; s++) {\n"
    "            long wq = w + pw - s * dw;\n"
    "            if (wq < 0 || wq % sw != 0 || wq / sw >= Q) continue;\n"
    "            sum += col[co + ((c * R + r) * S + s) * columns + (n * P + p) * Q + wq / sw];\n"
    "        }\n"
    "    }\n"
    "    x[xo + i] = sum;\n"
    "}\n"
    /* dst[b][a][e] = src[a][b][e] for src [A][B][E]: images and channels trade places. */
    "__kernel void swap01(long total, __global const T *src, long so, long A, long B, long E,\n"
    "                     __global T *dst, long dst_offset)\n"
    "{\n"
    "    long i = get_global_id(0);\n"
    "    if (i >= total) return;\n"
    "    long e = i % E, t = i / E, a = t % A, b = t / A;\n"
    "    dst[dst_offset + i] = src[so + (a * B + b) * E + e];\n"
    "}\n";


typedef enum conv_pass { CONV_FORWARD, CONV_BACKWARD_INPUT, CONV_BACKWARD_WEIGHT } conv_pass;
static const char *const conv_names[3] = {"conv2d", "conv2d_backward_input", "conv2d_backward_weight"};

/* The sizes of one convolution: x [N, C, H, W], w [K, C / G, R, S], y [N, K, P, Q];
 * each group convolves Cg channels to Kg. */
typedef struct conv_geometry {
    int64_t N, C, H, W, K, R, S, P, Q, G, Cg, Kg;
    int64_t rows; /* of a group's column matrix: Cg * R * S */
    int64_t cols; /* per image: P * Q */
    fl_conv2d_desc d;
} conv_geometry;

/* A chunk's column matrix is kept under this many bytes, or to one image. */
#define COLUMN_BYTES ((int64_t)128 << 20)

/* A convolution under way. x, w and y are dense values in the roles of the forward
 * pass (in the backward ones, dx or dw is the output and dy is y). */
typedef struct conv_run {
    conv_pass pass;
    fl_dtype dtype;
    conv_geometry g;
    const fl_tensor *x, *w, *y;
    ocl_buffer *col;      /* a chunk's columns, [C * R * S][images * P * Q] */
    ocl_buffer *channels; /* a chunk's y as [K][images * P * Q], for chunks of several images */
    cl_kernel im2col, col2im, swap01;
} conv_run;

/* im2col (x to the columns) or col2im (the columns to x) for images [n0, n0 + images). */
static int conv_columns(const conv_run *r, bool to_x, int64_t n0, int64_t images)
{
    const conv_geometry *g = &r->g;
    const fl_conv2d_desc *d = &g->d;
    cl_long total = to_x ? images * g->C * g->H * g->W : g->C * g->R * g->S * images * g->cols;
    cl_long xo = ocl_element_offset(r->x) + n0 * g->C * g->H * g->W, co = buffer_offset(r->col, r->dtype);
    cl_long v[14] = {g->C, g->H, g->W, g->R, g->S, g->P, g->Q, images, d->stride[0], d->stride[1],
                     d->padding[0], d->padding[1], d->dilation[0], d->dilation[1]};
    const ocl_buffer *xb = ocl_impl(r->x)->buffer;
    ocl_arg args[19];
    int nargs = 0;
    args[nargs++] = OCL_VALUE(total);
    args[nargs++] = to_x ? OCL_MEM(r->col) : OCL_MEM(xb);
    args[nargs++] = to_x ? OCL_VALUE(co) : OCL_VALUE(xo);
    for (int i = 0; i < 14; i++)
        args[nargs++] = OCL_VALUE(v[i]);
    args[nargs++] = to_x ? OCL_MEM(xb) : OCL_MEM(r->col);
    args[nargs++] = to_x ? OCL_VALUE(xo) : OCL_VALUE(co);
    return ocl_launch(conv_names[r->pass], to_x ? r->col2im : r->im2col, (size_t)total, nargs, args);
}

/* Moves a chunk's y between its own layout [images][K][P * Q] and the channels
 * buffer's [K][images][P * Q]. */
static int conv_swap(const conv_run *r, bool to_y, int64_t n0, int64_t images)
{
    const conv_geometry *g = &r->g;
    const ocl_buffer *yb = ocl_impl(r->y)->buffer;
    cl_long total = images * g->K * g->cols, E = g->cols;
    cl_long y_offset = ocl_element_offset(r->y) + n0 * g->K * g->cols, ch_offset = buffer_offset(r->channels, r->dtype);
    cl_long A = to_y ? g->K : images, B = to_y ? images : g->K;
    ocl_arg args[] = {OCL_VALUE(total),
                      to_y ? OCL_MEM(r->channels) : OCL_MEM(yb),
                      to_y ? OCL_VALUE(ch_offset) : OCL_VALUE(y_offset),
                      OCL_VALUE(A),
                      OCL_VALUE(B),
                      OCL_VALUE(E),
                      to_y ? OCL_MEM(yb) : OCL_MEM(r->channels),
                      to_y ? OCL_VALUE(y_offset) : OCL_VALUE(ch_offset)};
    return ocl_launch(conv_names[r->pass], r->swap01, (size_t)total, 8, args);
}

/* One pass over images [n0, n0 + images). Each group's products are one batch item. */
static int conv_chunk(const conv_run *r, int64_t n0, int64_t images)
{
    const conv_geometry *g = &r->g;
    const char *operation = conv_names[r->pass];
    int64_t columns = images * g->cols;
    gemm_matrix col = {r->col->mem, buffer_offset(r->col, r->dtype), columns, g->rows * columns, false};
    gemm_matrix w = {ocl_impl(r->w)->buffer->mem, ocl_element_offset(r->w), g->rows, g->Kg * g->rows, false};
    /* One image's y already has the channels' layout. */
    gemm_matrix channels = images == 1
                               ? (gemm_matrix){ocl_impl(r->y)->buffer->mem, ocl_element_offset(r->y) + n0 * g->K * g->cols,
                                               columns, g->Kg * columns, false}
                               : (gemm_matrix){r->channels->mem, buffer_offset(r->channels, r->dtype), columns,
                                               g->Kg * columns, false};
    gemm_call call;
    int rc = 0;
    switch (r->pass) {
    case CONV_FORWARD: /* y_g = w_g col_g */
        call = (gemm_call){g->Kg, columns, g->rows, g->G, w, col, channels, false};
        rc = conv_columns(r, false, n0, images);
        if (!rc)
            rc = gemm(operation, r->dtype, &call);
        if (!rc && images > 1)
            rc = conv_swap(r, true, n0, images);
        break;
    case CONV_BACKWARD_INPUT: /* col_g = w_g^T dy_g, then back into dx */
        w.transposed = true;
        call = (gemm_call){g->rows, columns, g->Kg, g->G, w, channels, col, false};
        if (images > 1)
            rc = conv_swap(r, false, n0, images);
        if (!rc)
            rc = gemm(operation, r->dtype, &call);
        if (!rc)
            rc = conv_columns(r, true, n0, images);
        break;
    case CONV_BACKWARD_WEIGHT: /* dw_g += dy_g col_g^T, summed over the chunks */
        col.transposed = true;
        call = (gemm_call){g->Kg, g->rows, columns, g->G, channels, col, w, n0 > 0};
        rc = conv_columns(r, false, n0, images);
        if (!rc && images > 1)
            rc = conv_swap(r, false, n0, images);
        if (!rc)
            rc = gemm(operation, r->dtype, &call);
        break;
    }
    return rc;
}

static int convolve(conv_pass pass, fl_tensor *out, const fl_tensor *in0, const fl_tensor *in1,
                    const fl_conv2d_desc *d)
{
    const char *operation = conv_names[pass];
    int rc = check_dtype(operation, out->dtype);
    if (rc)
        return rc;
    if ((rc = ocl_alloc(out)) || out->numel == 0)
        return rc;
    if (in0->numel == 0 || in1->numel == 0) /* no channels, or nothing to propagate */
        return ocl_fill_value(out, 0);
    fl_tensor *a = ocl_contiguous(in0), *b = a ? ocl_contiguous(in1) : NULL;
    if (!b) {
        if (a)
            fl_release(a);
        return FL_ERR_BACKEND;
    }
    conv_run r = {.pass = pass, .dtype = out->dtype};
    if (pass == CONV_FORWARD)
        r.x = a, r.w = b, r.y = out;
    else if (pass == CONV_BACKWARD_INPUT)
        r.y = a, r.w = b, r.x = out;
    else
        r.x = a, r.y = b, r.w = out;
    conv_geometry *g = &r.g;
    *g = (conv_geometry){.N = r.x->shape[0], .C = r.x->shape[1], .H = r.x->shape[2], .W = r.x->shape[3],
                         .K = r.w->shape[0], .R = r.w->shape[2], .S = r.w->shape[3], .P = r.y->shape[2],
                         .Q = r.y->shape[3], .G = d->groups, .d = *d};
    g->Cg = g->C / g->G;
    g->Kg = g->K / g->G;
    g->rows = g->Cg * g->R * g->S;
    g->cols = g->P * g->Q;
    size_t element = ocl_element_size(r.dtype);
    int64_t per_image = g->C * g->R * g->S * g->cols * (int64_t)element;
    int64_t chunk = COLUMN_BYTES / per_image;
    chunk = chunk < 1 ? 1 : chunk > g->N ? g->N : chunk;
    r.col = ocl_buffer_new((size_t)(per_image * chunk));
    if (!r.col)
        rc = FL_ERR_MEMORY;
    if (!rc && chunk > 1 && !(r.channels = ocl_buffer_new((size_t)(g->K * chunk * g->cols) * element)))
        rc = FL_ERR_MEMORY;
    if (!rc) {
        r.im2col = ocl_kernel_for(conv_source, "im2col", r.dtype);
        r.col2im = r.im2col ? ocl_kernel_for(conv_source, "col2im", r.dtype) : NULL;
        r.swap01 = r.col2im ? ocl_kernel_for(conv_source, "swap01", r.dtype) : NULL;
        if (!r.swap01)
            rc = FL_ERR_BACKEND;
    }
    for (int64_t n0 = 0; n0 < g->N && !rc; n0 += chunk)
        rc = conv_chunk(&r, n0, g->N - n0 < chunk ? g->N - n0 : chunk);
    /* Released while their commands may still run: the queue is in order, so whatever
     * reuses the memory runs after them. */
    ocl_buffer_release(r.col);
    ocl_buffer_release(r.channels);
    fl_release(a);
    fl_release(b);
    return rc;
}

static int ocl_conv2d(const fl_backend *self, fl_tensor *y, const fl_tensor *x, const fl_tensor *w,
                      const fl_conv2d_desc *d)
{
    (void)self;
    return convolve(CONV_FORWARD, y, x, w, d);
}

static int ocl_conv2d_backward_input(const fl_backend *self, fl_tensor *dx, const fl_tensor *dy, const fl_tensor *w,
                                     const fl_conv2d_desc *d)
{
    (void)self;
    return convolve(CONV_BACKWARD_INPUT, dx, dy, w, d);
}

static int ocl_conv2d_backward_weight(const fl_backend *self, fl_tensor *dw, const fl_tensor *x, const fl_tensor *dy,
                                      const fl_conv2d_desc *d)
{
    (void)self;
    return convolve(CONV_BACKWARD_WEIGHT, dw, x, dy, d);
}

/* ---- pooling ---- */

static const char pool_source[] =
    "#define POOL_PARAMS long H, long W, long P, long Q, long kh, long kw, long sh, long sw, long ph, long pw, \\\n"
    "                    int include_pad\n"
    "#define POOL_ARGS H, W, P, Q, kh, kw, sh, sw, ph, pw, include_pad\n"
    /* The window of output (p, q) clipped to the input, rows [h0, h1) and columns
     * [w0, w1), and what average pooling divides by: the window clipped to the padded
     * input when padding counts, else its part inside the input. */
    "typedef struct window { long h0, h1, w0, w1, divisor; } window;\n"
    "window window_at(POOL_PARAMS, long p, long q)\n"
    "{\n"
    "    long h0 = p * sh - ph, w0 = q * sw - pw, h1 = h0 + kh, w1 = w0 + kw;\n"
    "    long padded = (min(h1, H + ph) - h0) * (min(w1, W + pw) - w0);\n"
    "    window v = {max(h0, 0L), min(h1, H), max(w0, 0L), min(w1, W), 0};\n"
    "    v.divisor = include_pad ? padded : (v.h1 - v.h0) * (v.w1 - v.w0);\n"
    "    return v;\n"
    "}\n"
    /* The argmax of a window that is not empty: the first maximum in row order, or the
     * last NaN, as PyTorch (and the cpu backend) pick it. */
    "long window_argmax(__global const T *x, long W, window v)\n"
    "{\n"
    "    long best = v.h0 * W + v.w0;\n"
    "    T m = -INFINITY;\n"
    "    for (long h = v.h0; h < v.h1; h++)\n"
    "        for (long w = v.w0; w < v.w1; w++) {\n"
    "            T value = x[h * W + w];\n"
    "            if (value > m || isnan(value)) {\n"
    "                m = value;\n"
    "                best = h * W + w;\n"
    "            }\n"
    "        }\n"
    "    return best;\n"
    "}\n"
    "__kernel void pool(long total, __global const T *x, long xo, __global T *y, long yo, POOL_PARAMS, int is_max)\n"
    "{\n"
    "    long i = get_global_id(0);\n"
    "    if (i >= total) return;\n"
    "    long q = i % Q, t = i / Q, p = t % P, plane = t / P;\n"
    "    __global const T *xp = x + xo + plane * H * W;\n"
    "    window v = window_at(POOL_ARGS, p, q);\n"
    "    bool empty = v.h0 >= v.h1 || v.w0 >= v.w1;\n"
    "    if (is_max) {\n"
    "        y[yo + i] = empty ? (T)(-INFINITY) : xp[window_argmax(xp, W, v)];\n"
    "        return;\n"
    "    }\n"
    "    T sum = 0;\n"
    "    for (long h = v.h0; h < v.h1; h++)\n"
    "        for (long w = v.w0; w < v.w1; w++)\n"
    "            sum += xp[h * W + w];\n"
    "    y[yo + i] = v.divisor > 0 ? sum / (T)v.divisor : (T)0;\n"
    "}\n"
    /* Each window's argmax in its plane, -1 for an empty window. */
    "__kernel void pool_argmax(long total, __global const T *x, long xo, __global int *argmax, long ao, POOL_PARAMS)\n"
    "{\n"
    "    long i = get_global_id(0);\n"
    "    if (i >= total) return;\n"
    "    long q = i % Q, t = i / Q, p = t % P, plane = t / P;\n"
    "    window v = window_at(POOL_ARGS, p, q);\n"
    "    bool empty = v.h0 >= v.h1 || v.w0 >= v.w1;\n"
    "    argmax[ao + i] = empty ? -1 : (int)window_argmax(x + xo + plane * H * W, W, v);\n"
    "}\n"
    /* The windows holding input row h: those from first to last. */
    "long first_window(long h, long k, long s, long pad)\n"
    "{\n"
    "    long reach = h + pad - k + 1;\n"
    "    return reach <= 0 ? 0 : (reach + s - 1) / s;\n"
    "}\n"
    "long last_window(long h, long s, long pad, long count) { return min((h + pad) / s, count - 1); }\n"
    /* dx sums the gradients of the windows holding it, in the cpu backend's order. */
    "__kernel void pool_backward_max(long total, __global const T *dy, long dyo, __global const int *argmax, long ao,\n"
    "                                __global T *dx, long dxo, POOL_PARAMS)\n"
    "{\n"
    "    long i = get_global_id(0);\n"
    "    if (i >= total) return;\n"
    "    long w = i % W, t = i / W, h = t % H, plane = t / H;\n"
    "    int at = (int)(h * W + w);\n"
    "    T sum = 0;\n"
    "    for (long p = first_window(h, kh, sh, ph); p <= last_window(h, sh, ph, P); p++)\n"
    "        for (long q = first_window(w, kw, sw, pw); q <= last_window(w, sw, pw, Q); q++) {\n"
    "            long j = (plane * P + p) * Q + q;\n"
    "            if (argmax[ao + j] == at)\n"
    "                sum += dy[dyo + j];\n"
    "        }\n"
    "    dx[dxo + i] = sum;\n"
    "}\n"
    "__kernel void pool_backward_avg(long total, __global const T *dy, long dyo, __global T *dx, long dxo,\n"
    "                                POOL_PARAMS)\n"
    "{\n"
    "    long i = get_global_id(0);\n"
    "    if (i >= total) return;\n"
    "    long w = i % W, t = i / W, h = t % H, plane = t / H;\n"
    "    T sum = 0;\n"
    "    for (long p = first_window(h, kh, sh, ph); p <= last_window(h, sh, ph, P); p++)\n"
    "        for (long q = first_window(w, kw, sw, pw); q <= last_window(w, sw, pw, Q); q++) {\n"
    "            window v = window_at(POOL_ARGS, p, q);\n"
    "            sum += dy[dyo + (plane * P + p) * Q + q] / (T)v.divisor;\n"
    "        }\n"
    "    dx[dxo + i] = sum;\n"
    "}\n";

/* The POOL_PARAMS of the kernels, for an input x_shape pooled to y_shape. */
typedef struct pool_params {
    cl_long sizes[10]; /* H, W, P, Q, kernel, stride, padding */
    cl_int include_pad;
} pool_params;

static pool_params pool_params_of(const int64_t *x_shape, const int64_t *y_shape, const fl_pool2d_desc *d)
{
    return (pool_params){{x_shape[2], x_shape[3], y_shape[2], y_shape[3], d->kernel[0], d->kernel[1], d->stride[0],
                          d->stride[1], d->padding[0], d->padding[1]},
                         d->count_include_pad};
}

static int push_pool_params(ocl_arg *args, int nargs, const pool_params *pp)
{
    for (int i = 0; i < 10; i++)
        args[nargs++] = OCL_VALUE(pp->sizes[i]);
    args[nargs++] = OCL_VALUE(pp->include_pad);
    return nargs;
}

static int ocl_pool2d(const fl_backend *self, fl_tensor *y, const fl_tensor *x, const fl_pool2d_desc *d)
{
    (void)self;
    int rc = check_dtype("pool2d", y->dtype);
    if (rc)
        return rc;
    if ((rc = ocl_alloc(y)) || y->numel == 0)
        return rc;
    cl_kernel k = ocl_kernel_for(pool_source, "pool", y->dtype);
    fl_tensor *dense = k ? ocl_contiguous(x) : NULL;
    if (!dense)
        return FL_ERR_BACKEND;
    pool_params pp = pool_params_of(x->shape, y->shape, d);
    cl_long total = y->numel, xo = ocl_element_offset(dense), yo = ocl_element_offset(y);
    cl_int is_max = d->kind == FL_POOL_MAX;
    ocl_arg args[18];
    int nargs = 0;
    args[nargs++] = OCL_VALUE(total);
    args[nargs++] = OCL_MEM(ocl_impl(dense)->buffer);
    args[nargs++] = OCL_VALUE(xo);
    args[nargs++] = OCL_MEM(ocl_impl(y)->buffer);
    args[nargs++] = OCL_VALUE(yo);
    nargs = push_pool_params(args, nargs, &pp);
    args[nargs++] = OCL_VALUE(is_max);
    rc = ocl_launch("pool2d", k, (size_t)total, nargs, args);
    fl_release(dense);
    return rc;
}

/* Max pooling's gradient: each window's argmax first, then the gather. */
static int pool_backward_max(fl_tensor *dx, const fl_tensor *dy, const fl_tensor *x, const pool_params *pp)
{
    if (x->shape[2] * x->shape[3] > INT_MAX)
        return fl_backend_error(FL_ERR_UNSUPPORTED, "pool2d_backward on opencl takes planes of at most 2^31 elements");
    cl_kernel argmax = ocl_kernel_for(pool_source, "pool_argmax", dx->dtype);
    cl_kernel gather = argmax ? ocl_kernel_for(pool_source, "pool_backward_max", dx->dtype) : NULL;
    if (!gather)
        return FL_ERR_BACKEND;
    ocl_buffer *indices = ocl_buffer_new((size_t)dy->numel * sizeof(cl_int));
    if (!indices)
        return FL_ERR_MEMORY;
    cl_long windows = dy->numel, total = dx->numel, ao = (cl_long)(indices->offset / sizeof(cl_int));
    cl_long xo = ocl_element_offset(x), dyo = ocl_element_offset(dy), dxo = ocl_element_offset(dx);
    ocl_arg args[18];
    int nargs = 0;
    args[nargs++] = OCL_VALUE(windows);
    args[nargs++] = OCL_MEM(ocl_impl(x)->buffer);
    args[nargs++] = OCL_VALUE(xo);
    args[nargs++] = OCL_MEM(indices);
    args[nargs++] = OCL_VALUE(ao);
    nargs = push_pool_params(args, nargs, pp);
    int rc = ocl_launch("pool2d_backward", argmax, (size_t)windows, nargs, args);
    if (!rc) {
        nargs = 0;
        args[nargs++] = OCL_VALUE(total);
        args[nargs++] = OCL_MEM(ocl_impl(dy)->buffer);
        args[nargs++] = OCL_VALUE(dyo);
        args[nargs++] = OCL_MEM(indices);
        args[nargs++] = OCL_VALUE(ao);
        args[nargs++] = OCL_MEM(ocl_impl(dx)->buffer);
        args[nargs++] = OCL_VALUE(dxo);
        nargs = push_pool_params(args, nargs, pp);
        rc = ocl_launch("pool2d_backward", gather, (size_t)total, nargs, args);
    }
    ocl_buffer_release(indices); /* the queue is in order: a later user runs after the gather */
    return rc;
}

static int pool_backward_avg(fl_tensor *dx, const fl_tensor *dy, const pool_params *pp)
{
    cl_kernel k = ocl_kernel_for(pool_source, "pool_backward_avg", dx->dtype);
    if (!k)
        return FL_ERR_BACKEND;
    cl_long total = dx->numel, dyo = ocl_element_offset(dy), dxo = ocl_element_offset(dx);
    ocl_arg args[16];
    int nargs = 0;
    args[nargs++] = OCL_VALUE(total);
    args[nargs++] = OCL_MEM(ocl_impl(dy)->buffer);
    args[nargs++] = OCL_VALUE(dyo);
    args[nargs++] = OCL_MEM(ocl_impl(dx)->buffer);
    args[nargs++] = OCL_VALUE(dxo);
    nargs = push_pool_params(args, nargs, pp);
    return ocl_launch("pool2d_backward", k, (size_t)total, nargs, args);
}

static int ocl_pool2d_backward(const fl_backend *self, fl_tensor *dx, const fl_tensor *dy, const fl_tensor *x,
                               const fl_pool2d_desc *d)
{
    (void)self;
    int rc = check_dtype("pool2d_backward", dx->dtype);
    if (rc)
        return rc;
    if ((rc = ocl_alloc(dx)) || dx->numel == 0)
        return rc;
    if (dy->numel == 0)
        return ocl_fill_value(dx, 0);
    fl_tensor *dense_dy = ocl_contiguous(dy), *dense_x = dense_dy ? ocl_contiguous(x) : NULL;
    if (!dense_x) {
        if (dense_dy)
            fl_release(dense_dy);
        return FL_ERR_BACKEND;
    }
    pool_params pp = pool_params_of(x->shape, dy->shape, d);
    rc = d->kind == FL_POOL_MAX ? pool_backward_max(dx, dense_dy, dense_x, &pp) : pool_backward_avg(dx, dense_dy, &pp);
    fl_release(dense_dy);
    fl_release(dense_x);
    return rc;
}

void ocl_register_linalg(fl_backend *b)
{
    b->matmul = ocl_matmul;
    b->conv2d = ocl_conv2d;
    b->conv2d_backward_input = ocl_conv2d_backward_input;
    b->conv2d_backward_weight = ocl_conv2d_backward_weight;
    b->pool2d = ocl_pool2d;
    b->pool2d_backward = ocl_pool2d_backward;
}
