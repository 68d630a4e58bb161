/*
 * The CPU backend's matrix product: f32 through oneDNN's sgemm, f64 through
 * OpenBLAS's dgemm, and the registration of the whole linear-algebra family.
 *
 * oneDNN's sgemm runs on the OpenMP pool that every other kernel uses and reaches the
 * machine's peak; OpenBLAS (Debian's pthreads build) would bring a second pool whose
 * threads spin against OpenMP's, so it is kept to one thread and f64 products are
 * split across OpenMP threads here instead.
 *
 * An operand whose last two axes are row-major or column-major (a transposed view)
 * goes to BLAS as it is, with a transpose flag and its leading dimension; any other
 * layout is copied dense first. Batch axes may have any strides, zero included, so
 * broadcast batches are never materialized.
 *
 * Two cases go to oneDNN's matmul primitive instead, each of at least SMALL_GEMM
 * multiply-adds, where its kernels (brgemm) are faster than sgemm's
 * (docs/BENCHMARKS.md, "Products with a transposed weight" and "Weight gradients", has
 * the cases and their command):
 *  - x W^T, a linear layer's forward, with 16 rows or more and either fewer than 256
 *    rows or at most 512 columns. sgemm takes a transposed B much more slowly there
 *    than an untransposed one; the primitive runs it at the untransposed speed. With
 *    fewer rows (one token at a time) sgemm is the faster.
 *  - dY^T X, a linear layer's weight gradient, with 512 rows or more and at most 512
 *    columns. With fewer rows, or more columns, sgemm is as fast or faster.
 *
 * Below AVX-512, dY^T X goes to OpenBLAS instead (transposed_a_to_openblas), and
 * sgemm reads a B of 256 columns 256 apart from a padded copy (pad_b).
 *
 * A linear layer's product with its bias (the linear entry) goes to the primitive,
 * which adds the bias as it writes C, from 16 rows and SMALL_GEMM multiply-adds up
 * (use_primitive); smaller ones set the rows of C to the bias and run a gemm that adds
 * to them.
 */
#include <cblas.h>
#include <dnnl.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "flare/memory.h"
#include "onednn.h"

/* Below this many multiply-adds per matrix a batch runs one matrix per thread:
 * a threaded gemm cannot amortize its start on so little work. */
#define SMALL_GEMM (64 * 64 * 64)

/* Whether a batch of matrices runs one matrix per thread (each gemm on its calling
 * thread) rather than one threaded gemm after another. Attention's products are
 * dozens of small matrices a step: one parallel region over the batch instead of one
 * inside every gemm saves a fork and a join per matrix, which on a loaded machine
 * each cost a wait for the other thread's turn. A batch that divides evenly among the
 * threads, or a large one (at most one matrix of imbalance in eight), loses nothing to
 * the split. */
static bool split_batch(int64_t batch, int64_t macs_per_matrix, int threads, fl_dtype dtype)
{
    if (batch < 2)
        return false;
    if (threads == 1 || dtype == FL_F64 || macs_per_matrix < SMALL_GEMM)
        return true;
    return batch % threads == 0 || batch >= 8 * (int64_t)threads;
}

/* One operand as BLAS sees it: each matrix at base + offset(batch item). */
typedef struct gemm_operand {
    const char *base;
    int64_t batch_strides[FL_MAX_DIMS]; /* in elements */
    bool transposed;
    int64_t ld;
    void *scratch; /* a dense copy, when the layout needed one */
} gemm_operand;

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

static int prepare_operand(gemm_operand *op, const fl_tensor *t)
{
    int n = t->ndim;
    const int64_t *strides = cpu_impl(t)->strides;
    int64_t dense[FL_MAX_DIMS];
    op->scratch = NULL;
    op->base = cpu_data(t);
    if (!blas_layout(t->shape[n - 2], t->shape[n - 1], strides[n - 2], strides[n - 1], &op->transposed, &op->ld)) {
        op->base = cpu_dense(t, &op->scratch);
        if (!op->base)
            return fl_backend_error(FL_ERR_MEMORY, "no memory for a dense copy of a matmul operand");
        cpu_dense_strides(n, t->shape, dense);
        strides = dense;
        blas_layout(t->shape[n - 2], t->shape[n - 1], strides[n - 2], strides[n - 1], &op->transposed, &op->ld);
    }
    memcpy(op->batch_strides, strides, (size_t)(n - 2) * sizeof *strides);
    return 0;
}

/* The element offset of batch item `item` for an operand with these batch strides. */
static int64_t batch_offset(const fl_tensor *out, const int64_t *batch_strides, int64_t item)
{
    int64_t offset = 0;
    for (int i = out->ndim - 3; i >= 0; i--) {
        offset += (item % out->shape[i]) * batch_strides[i];
        item /= out->shape[i];
    }
    return offset;
}

/* ---- x W^T and dY^T X through oneDNN's matmul primitive ---- */

/* Whether C[M x N] = op(A) op(B) (+ a bias on every row) goes to the primitive. A
 * product under SMALL_GEMM stays with sgemm, which is not slow there: the primitive's
 * cost per call (the plan's lookup, a stream and three memory objects) would be most
 * of it. Without a bias, A B^T (A row-major, B column-major) and A^T B (A
 * column-major, B row-major) go where sgemm takes them slowly. With a bias, every
 * product of 16 rows or more goes: the primitive adds the bias as it writes C, where
 * sgemm needs C set to the bias first (beta 1), a pass over C; with fewer rows C is
 * small, still in cache when sgemm adds to it. */
static bool use_primitive(const gemm_operand *a, const gemm_operand *b, int64_t M, int64_t N, int64_t K, bool bias)
{
    if (M * N * K < SMALL_GEMM)
        return false;
    if (bias)
        return M >= 16;
    if (a->transposed == b->transposed)
        return false;
    return b->transposed ? M >= 16 && (M < 256 || N <= 512) : M >= 512 && N <= 512;
}

typedef struct product_key {
    int64_t M, N, K, lda, ldb;
    int threads; /* oneDNN fixes a kernel's partitioning when it builds it */
    bool a_transposed, b_transposed, bias;
} product_key;

typedef struct product_plan {
    dnnl_primitive_t primitive;
    dnnl_memory_desc_t a, b, c, bias, scratchpad;
    size_t scratchpad_bytes;
} product_plan;

static void destroy_product_plan(void *plan)
{
    product_plan *p = plan;
    if (p)
        dnnl_primitive_destroy(p->primitive);
    free(p);
}

static void *build_product_plan(const void *key)
{
    const product_key *k = key;
    dnnl_engine_t engine = cpu_onednn_engine();
    if (!engine)
        return NULL;
    product_plan *p = calloc(1, sizeof *p);
    if (!p) {
        fl_backend_error(FL_ERR_MEMORY, "no memory for a matmul plan");
        return NULL;
    }
    dnnl_dims_t a_dims = {k->M, k->K}, b_dims = {k->K, k->N}, c_dims = {k->M, k->N}, bias_dims = {1, k->N};
    dnnl_dims_t a_strides = {k->a_transposed ? 1 : k->lda, k->a_transposed ? k->lda : 1},
                b_strides = {k->b_transposed ? 1 : k->ldb, k->b_transposed ? k->ldb : 1}, c_strides = {k->N, 1};
    dnnl_matmul_desc_t desc;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st = dnnl_memory_desc_init_by_strides(&p->a, 2, a_dims, dnnl_f32, a_strides);
    if (st == dnnl_success)
        st = dnnl_memory_desc_init_by_strides(&p->b, 2, b_dims, dnnl_f32, b_strides);
    if (st == dnnl_success)
        st = dnnl_memory_desc_init_by_strides(&p->c, 2, c_dims, dnnl_f32, c_strides);
    if (st == dnnl_success && k->bias)
        st = dnnl_memory_desc_init_by_tag(&p->bias, 2, bias_dims, dnnl_f32, dnnl_ab);
    if (st == dnnl_success)
        st = dnnl_matmul_desc_init(&desc, &p->a, &p->b, k->bias ? &p->bias : NULL, &p->c);
    if (st == dnnl_success)
        st = cpu_onednn_user_scratchpad(&attr);
    if (st == dnnl_success)
        st = dnnl_primitive_desc_create(&pd, &desc, attr, engine, NULL);
    if (st == dnnl_success)
        st = dnnl_primitive_create(&p->primitive, pd);
    if (st == dnnl_success) {
        p->scratchpad = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        p->scratchpad_bytes = dnnl_memory_desc_get_size(&p->scratchpad);
    }
    dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_attr_destroy(attr);
    if (st == dnnl_success)
        return p;
    destroy_product_plan(p);
    cpu_onednn_error(st, "building a matmul primitive");
    return NULL;
}

static cpu_plan_cache product_plans = CPU_PLAN_CACHE(product_key, destroy_product_plan);

/* C = op(A) op(B) (+ bias [N] on every row, where not NULL) through a cached
 * primitive; 0 or an fl_backend_error. */
static int primitive_product(const gemm_operand *a, const float *A, const gemm_operand *b, const float *B, float *C,
                             int64_t M, int64_t N, int64_t K, const float *bias)
{
    product_key key;
    memset(&key, 0, sizeof key); /* compared bytewise, padding included: set field by field */
    key.M = M;
    key.N = N;
    key.K = K;
    key.lda = a->ld;
    key.ldb = b->ld;
    key.threads = cpu_threads();
    key.a_transposed = a->transposed;
    key.b_transposed = b->transposed;
    key.bias = bias != NULL;
    product_plan *p = cpu_plan_acquire(&product_plans, &key, build_product_plan);
    if (!p)
        return FL_ERR_BACKEND;
    dnnl_engine_t engine = cpu_onednn_engine();
    fl_memory_manager *owner = NULL;
    void *scratch = p->scratchpad_bytes ? fl_memory_alloc(p->scratchpad_bytes, &owner) : NULL;
    /* oneDNN's memory objects take non-const handles; the primitive only reads A, B
     * and the bias. The scratchpad, where there is one, comes last. */
    void *handles[5] = {(void *)(uintptr_t)A, (void *)(uintptr_t)B, C, (void *)(uintptr_t)bias, scratch};
    const dnnl_memory_desc_t *descs[5] = {&p->a, &p->b, &p->c, &p->bias, &p->scratchpad};
    int roles[5] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_BIAS, DNNL_ARG_SCRATCHPAD};
    int count = bias ? 4 : 3;
    if (p->scratchpad_bytes) {
        handles[count] = scratch;
        descs[count] = &p->scratchpad;
        roles[count] = DNNL_ARG_SCRATCHPAD;
        count++;
    }
    dnnl_memory_t memory[5] = {0};
    dnnl_exec_arg_t args[5];
    dnnl_stream_t stream = NULL;
    dnnl_status_t st = p->scratchpad_bytes && !scratch ? dnnl_out_of_memory
                                                       : dnnl_stream_create(&stream, engine, dnnl_stream_default_flags);
    for (int i = 0; i < count && st == dnnl_success; i++) {
        st = dnnl_memory_create(&memory[i], descs[i], engine, handles[i]);
        args[i] = (dnnl_exec_arg_t){roles[i], memory[i]};
    }
    if (st == dnnl_success)
        st = dnnl_primitive_execute(p->primitive, stream, count, args);
    if (st == dnnl_success)
        st = dnnl_stream_wait(stream);
    for (int i = 0; i < count; i++)
        dnnl_memory_destroy(memory[i]);
    dnnl_stream_destroy(stream);
    if (scratch)
        fl_memory_free(owner, scratch, p->scratchpad_bytes);
    cpu_plan_release(&product_plans, p);
    return st == dnnl_success ? 0 : cpu_onednn_error(st, "running a matmul primitive");
}

/* C[M x N] = A[M x K] B[K x N] + beta C through OpenBLAS on the calling thread. */
static bool blas_gemm(fl_dtype dtype, const gemm_operand *a, const gemm_operand *b, int64_t a_offset,
                      int64_t b_offset, void *c, int64_t M, int64_t N, int64_t K, double beta)
{
    enum CBLAS_TRANSPOSE ta = a->transposed ? CblasTrans : CblasNoTrans, tb = b->transposed ? CblasTrans : CblasNoTrans;
    if (dtype == FL_F32)
        cblas_sgemm(CblasRowMajor, ta, tb, (blasint)M, (blasint)N, (blasint)K, 1.0f,
                    (const float *)a->base + a_offset, (blasint)a->ld, (const float *)b->base + b_offset,
                    (blasint)b->ld, (float)beta, c, (blasint)N);
    else
        cblas_dgemm(CblasRowMajor, ta, tb, (blasint)M, (blasint)N, (blasint)K, 1.0,
                    (const double *)a->base + a_offset, (blasint)a->ld, (const double *)b->base + b_offset,
                    (blasint)b->ld, beta, c, (blasint)N);
    return true;
}

/* C[M x N] = A[M x K] B[K x N] + beta C for one matrix; false if the library
 * refused. */
static bool gemm(fl_dtype dtype, const gemm_operand *a, const gemm_operand *b, int64_t a_offset, int64_t b_offset,
                 void *c, int64_t M, int64_t N, int64_t K, double beta)
{
    if (dtype == FL_F32) {
        const float *A = (const float *)a->base + a_offset, *B = (const float *)b->base + b_offset;
        return dnnl_sgemm(a->transposed ? 'T' : 'N', b->transposed ? 'T' : 'N', M, N, K, 1.0f, A, a->ld, B, b->ld,
                          (float)beta, c, N) == dnnl_success;
    }
    return blas_gemm(dtype, a, b, a_offset, b_offset, c, M, N, K, beta);
}

/* Sets each of the rows of C [rows, N] to the bias [N]. */
static void fill_rows(size_t element, char *c, const char *bias, int64_t rows, int64_t N)
{
    for (int64_t r = 0; r < rows; r++)
        memcpy(c + (size_t)(r * N) * element, bias, (size_t)N * element);
}

/* A product through OpenBLAS on several threads: OpenBLAS runs on one, so the rows of
 * C are split here, each thread setting its rows to the bias first where there is
 * one. Row i of A starts at i * ld, or at i when A is transposed. */
static void blas_split_rows(fl_dtype dtype, const gemm_operand *a, const gemm_operand *b, int64_t a_offset,
                            int64_t b_offset, char *c, int64_t M, int64_t N, int64_t K, const char *bias,
                            int threads)
{
    size_t element = cpu_element_size(dtype);
#pragma omp parallel num_threads(threads)
    {
        int t = omp_get_thread_num(), n = omp_get_num_threads();
        int64_t first = M * t / n, last = M * (t + 1) / n;
        int64_t row_step = a->transposed ? 1 : a->ld;
        char *rows = c + (size_t)(first * N) * element;
        if (last > first && bias)
            fill_rows(element, rows, bias, last - first, N);
        if (last > first)
            blas_gemm(dtype, a, b, a_offset + first * row_step, b_offset, rows, last - first, N, K, bias ? 1 : 0);
    }
}

/* Whether an f32 A^T B goes to OpenBLAS rather than oneDNN. oneDNN's kernels below
 * AVX-512 (sgemm, and the matmul primitive, which runs the same gemm there) take a
 * transposed A at half speed or less when its leading dimension is a multiple of 1024
 * elements, a weight gradient over 1024 or 2048 outputs, while OpenBLAS, its rows
 * split over the threads, runs every A^T B at least as fast there (docs/BENCHMARKS.md,
 * "Weight gradients"). With AVX-512, oneDNN is the faster and keeps them. */
static bool transposed_a_to_openblas(const gemm_operand *a, const gemm_operand *b, int64_t M, int64_t N, int64_t K)
{
    return a->transposed && !b->transposed && M * N * K >= SMALL_GEMM && !cpu_onednn_has_avx512();
}

/* Whether an f32 A B goes to sgemm with B copied, its rows PADDED_LD floats apart.
 * oneDNN's kernels below AVX-512 take an untransposed B of 256 columns 256 floats
 * apart (1 KiB, so that its rows share cache sets) more slowly than the same B with
 * its rows 272 apart, copy included: a layer's input gradient, dY W, where the layer
 * has 256 inputs. Narrower and wider B, and AVX-512, gain nothing from the copy
 * (docs/BENCHMARKS.md, "Input gradients", has the cases and their command). */
#define PADDED_LD 272
static bool pad_b(const gemm_operand *b, int64_t M, int64_t N, int64_t K)
{
    return !b->transposed && N == 256 && b->ld == 256 && M * N * K >= SMALL_GEMM && !cpu_onednn_has_avx512();
}

/* B [K x N] copied into padded [K x PADDED_LD] rows by the team; NULL if out of memory. */
static float *padded_copy(const float *b, int64_t K, int64_t N, int64_t ld, int threads)
{
    float *copy = cpu_scratch_alloc((size_t)(K * PADDED_LD) * sizeof *copy);
    if (!copy)
        return NULL;
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
    for (int64_t k = 0; k < K; k++)
        memcpy(copy + k * PADDED_LD, b + k * ld, (size_t)N * sizeof *copy);
    return copy;
}

/* C[M x N] = op(A) op(B) (+ bias [N] on every row, where not NULL) for one matrix, on
 * the library path its shape and dtype take; 0 or an fl_backend_error. */
static int product(fl_dtype dtype, const gemm_operand *a, const gemm_operand *b, int64_t a_offset, int64_t b_offset,
                   void *c, int64_t M, int64_t N, int64_t K, const void *bias, int threads)
{
    bool ok = true;
    if ((dtype == FL_F64 && threads > 1 && M * N * K >= SMALL_GEMM) ||
        (dtype == FL_F32 && !bias && transposed_a_to_openblas(a, b, M, N, K))) {
        blas_split_rows(dtype, a, b, a_offset, b_offset, (char *)c, M, N, K, (const char *)bias, threads);
    } else if (dtype == FL_F32 && use_primitive(a, b, M, N, K, bias != NULL)) {
        return primitive_product(a, (const float *)a->base + a_offset, b, (const float *)b->base + b_offset, c, M, N,
                                 K, bias);
    } else if (dtype == FL_F32 && !bias && pad_b(b, M, N, K)) {
        float *padded = padded_copy((const float *)b->base + b_offset, K, N, b->ld, threads);
        if (!padded)
            return fl_backend_error(FL_ERR_MEMORY, "no memory for a padded copy of matmul's [%lld, %lld] operand",
                                    (long long)K, (long long)N);
        ok = dnnl_sgemm(a->transposed ? 'T' : 'N', 'N', M, N, K, 1.0f, (const float *)a->base + a_offset, a->ld,
                        padded, PADDED_LD, 0.0f, c, N) == dnnl_success;
        cpu_scratch_free(padded);
    } else {
        if (bias)
            fill_rows(cpu_element_size(dtype), c, bias, M, N);
        ok = gemm(dtype, a, b, a_offset, b_offset, c, M, N, K, bias ? 1 : 0);
    }
    return ok ? 0 : fl_backend_error(FL_ERR_BACKEND, "oneDNN sgemm failed");
}

static int cpu_matmul(const fl_backend *self, fl_tensor *out, const fl_tensor *a, const fl_tensor *b)
{
    int rc = cpu_alloc(out);
    if (rc || out->numel == 0)
        return rc;
    int n = out->ndim;
    int64_t M = out->shape[n - 2], N = out->shape[n - 1], K = a->shape[n - 1];
    size_t element = cpu_element_size(out->dtype);
    if (out->dtype != FL_F32 && out->dtype != FL_F64)
        return fl_backend_error(FL_ERR_DTYPE, "matmul has no %s kernel", fl_dtype_name(out->dtype));
    if (K == 0) {
        memset(cpu_data(out), 0, (size_t)out->numel * element);
        return 0;
    }
    gemm_operand ga, gb;
    if ((rc = prepare_operand(&ga, a)))
        return rc;
    if ((rc = prepare_operand(&gb, b))) {
        cpu_scratch_free(ga.scratch);
        return rc;
    }
    int64_t batch = out->numel / (M * N);
    char *c = cpu_data(out);
    int threads = cpu_threads();
    bool failed = false;
    if (split_batch(batch, M * N * K, threads, out->dtype)) {
        /* Inside the parallel loop oneDNN's gemm runs on its calling thread. */
        int team = M * N * K * batch < SMALL_GEMM ? 1 : threads;
#pragma omp parallel for num_threads(team) if (team > 1) schedule(static) reduction(|| : failed)
        for (int64_t i = 0; i < batch; i++)
            failed = failed || !gemm(out->dtype, &ga, &gb, batch_offset(out, ga.batch_strides, i),
                                     batch_offset(out, gb.batch_strides, i), c + i * M * N * element, M, N, K, 0);
    } else {
        for (int64_t i = 0; i < batch && !rc; i++)
            rc = product(out->dtype, &ga, &gb, batch_offset(out, ga.batch_strides, i),
                         batch_offset(out, gb.batch_strides, i), c + i * M * N * element, M, N, K, NULL, threads);
    }
    cpu_scratch_free(ga.scratch);
    cpu_scratch_free(gb.scratch);
    return rc ? rc : failed ? fl_backend_error(FL_ERR_BACKEND, "oneDNN sgemm failed") : 0;
}

static int cpu_linear(const fl_backend *self, fl_tensor *out, const fl_tensor *x, const fl_tensor *weight,
                      const fl_tensor *bias)
{
    if ((x->dtype != FL_F32 && x->dtype != FL_F64) || weight->dtype != x->dtype || bias->dtype != x->dtype)
        return fl_backend_error(FL_ERR_DTYPE, "linear takes f32 or f64 operands of one dtype");
    if (x->ndim != 2 || weight->ndim != 2 || bias->ndim != 1 || x->shape[1] != weight->shape[1] ||
        bias->shape[0] != weight->shape[0])
        return fl_backend_error(FL_ERR_SHAPE, "linear needs x [M, K], weight [N, K] and bias [N]");
    int rc = cpu_alloc(out);
    if (rc || out->numel == 0)
        return rc;
    int64_t M = x->shape[0], N = weight->shape[0], K = x->shape[1];
    void *bias_scratch;
    const void *b = cpu_dense(bias, &bias_scratch);
    if (!b)
        return fl_backend_error(FL_ERR_MEMORY, "no memory for a dense copy of linear's bias");
    gemm_operand ga, gw;
    if (K == 0) {
        fill_rows(cpu_element_size(out->dtype), cpu_data(out), b, M, N);
    } else if (!(rc = prepare_operand(&ga, x))) {
        if (!(rc = prepare_operand(&gw, weight))) {
            gw.transposed = !gw.transposed; /* weight [N, K] read as weight^T [K, N] */
            rc = product(out->dtype, &ga, &gw, 0, 0, cpu_data(out), M, N, K, b, cpu_threads());
            cpu_scratch_free(gw.scratch);
        }
        cpu_scratch_free(ga.scratch);
    }
    cpu_scratch_free(bias_scratch);
    return rc;
}

void cpu_register_linalg(fl_backend *b)
{
    openblas_set_num_threads(1);
    b->matmul = cpu_matmul;
    b->linear = cpu_linear;
    cpu_register_conv(b);
}
