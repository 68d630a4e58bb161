/* Matrix products, convolutions and pooling against PyTorch (tests/fixtures/gen_linalg.py),
 * the f32 paths (oneDNN) against the f64 ones (OpenBLAS, im2col), and their errors. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu.h" /* cpu_conv_set_algorithm */
#include "backends/cpu/onednn.h" /* cpu_plan_cache */
#include "support.h"
#include "tensor/internal.h" /* fl_out, to hand the views below to the test's scope */

static fl_tensor *ref(const char *name) { return fixture("linalg.bin", name); }

#define CONV(sh, sw, ph, pw, dh, dw, g) (&(fl_conv_params){{sh, sw}, {ph, pw}, {dh, dw}, g})

/* Views the backend makes without copying, built straight from its table (the tensor
 * layer's permute and slice belong to other files). */
static fl_tensor *permuted_view(const fl_tensor *t, const int *axes)
{
    int64_t shape[FL_MAX_DIMS];
    for (int i = 0; i < fl_ndim(t); i++)
        shape[i] = fl_shape(t)[axes[i]];
    fl_tensor *out = fl_tensor_alloc(t->backend, fl_dtype_of(t), fl_ndim(t), shape);
    assert_int_equal(t->backend->permute(t->backend, out, t, axes), 0);
    return fl_out(out);
}

static fl_tensor *strided_view(const fl_tensor *t, const int64_t *shape, const int64_t *start, const int64_t *step)
{
    fl_tensor *out = fl_tensor_alloc(t->backend, fl_dtype_of(t), fl_ndim(t), shape);
    assert_int_equal(t->backend->slice(t->backend, out, t, start, step), 0);
    return fl_out(out);
}

/* ---- matmul ---- */

static void matmul_matches_pytorch(void **state)
{
    for (fl_dtype d = FL_F32; d <= FL_F64; d++) {
        double tol = d == FL_F32 ? 1e-5 : 1e-12;
        fl_tensor *a = fl_cast(ref("mm_a"), d), *b = fl_cast(ref("mm_b"), d);
        fl_tensor *v4 = fl_cast(ref("mm_v4"), d), *v3 = fl_cast(ref("mm_v3"), d);
        fl_tensor *ba = fl_cast(ref("bmm_a"), d), *bb = fl_cast(ref("bmm_b"), d);
        fl_tensor *ab = fl_matmul(a, b);
        assert_dtype(ab, d);
        assert_close(ab, ref("mm_ab"), tol, tol);
        assert_close(fl_matmul(a, v4), ref("mm_a_v4"), tol, tol);
        assert_close(fl_matmul(v3, a), ref("mm_v3_a"), tol, tol);
        fl_tensor *dot = fl_matmul(v4, v4);
        assert_int_equal(fl_ndim(dot), 0);
        /* The fixture writer stores 0-d arrays as 1-d ones. */
        assert_close(fl_reshape(dot, FL_SHAPE(1)), ref("mm_v4_v4"), tol, tol);
        assert_close(fl_matmul(ba, bb), ref("bmm_ab"), tol, tol);
        assert_close(fl_matmul(ba, b), ref("bmm_a_b2"), tol, tol);
        assert_close(fl_matmul(v4, bb), ref("bmm_v4_b"), tol, tol);
        assert_close(fl_matmul(ba, v4), ref("bmm_a_v4"), tol, tol);
        fl_tensor *broadcast = fl_matmul(fl_cast(ref("bcast_a"), d), fl_cast(ref("bcast_b"), d));
        assert_shape(broadcast, 2, 3, 3, 2);
        assert_close(broadcast, ref("bcast_ab"), tol, tol);
    }
    assert_no_error();
}

static void matmul_takes_transposed_and_strided_operands(void **state)
{
    for (fl_dtype d = FL_F32; d <= FL_F64; d++) {
        double tol = d == FL_F32 ? 1e-5 : 1e-12;
        /* a^T stored densely, viewed back as a: a transposed operand for BLAS. */
        fl_tensor *a = fl_cast(ref("mm_a"), d), *b = fl_cast(ref("mm_b"), d);
        fl_tensor *at = fl_copy(permuted_view(a, (int[]){1, 0}));
        fl_tensor *bt = fl_copy(permuted_view(b, (int[]){1, 0}));
        fl_tensor *a_view = permuted_view(at, (int[]){1, 0}), *b_view = permuted_view(bt, (int[]){1, 0});
        assert_close(fl_matmul(a_view, b), ref("mm_ab"), tol, tol);
        assert_close(fl_matmul(a, b_view), ref("mm_ab"), tol, tol);
        assert_close(fl_matmul(a_view, b_view), ref("mm_ab"), tol, tol);
        /* Batched and transposed. */
        fl_tensor *ba = fl_cast(ref("bmm_a"), d);
        fl_tensor *bat = fl_copy(permuted_view(ba, (int[]){0, 2, 1}));
        fl_tensor *ba_view = permuted_view(bat, (int[]){0, 2, 1});
        assert_close(fl_matmul(ba_view, fl_cast(ref("bmm_b"), d)), ref("bmm_ab"), tol, tol);
        /* Every other column of a wider matrix: no BLAS layout, so a dense copy. */
        double values[12], interleaved[24] = {0};
        fl_to_host(fl_cast(a, FL_F64), values, sizeof values);
        for (int i = 0; i < 12; i++)
            interleaved[2 * i] = values[i];
        fl_tensor *wide = fl_cast(fl_from_data(interleaved, FL_F64, FL_SHAPE(3, 8)), d);
        fl_tensor *strided = strided_view(wide, (int64_t[]){3, 4}, (int64_t[]){0, 0}, (int64_t[]){1, 2});
        assert_close(fl_matmul(strided, b), ref("mm_ab"), tol, tol);
    }
    assert_no_error();
}

/* The naive product of random matrices, against the BLAS paths: small batches run one
 * matrix per thread, large f64 products split their rows over threads. */
static void matmul_larger_shapes_match_a_naive_product(void **state)
{
    static const int64_t cases[][4] = {{8, 16, 16, 16}, {1, 130, 70, 90}, {3, 65, 64, 66}, {2, 1, 300, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t B = cases[c][0], M = cases[c][1], K = cases[c][2], N = cases[c][3];
        fl_manual_seed(7 + c);
        fl_tensor *a = fl_randn(FL_F64, FL_SHAPE(B, M, K)), *b = fl_randn(FL_F64, FL_SHAPE(B, K, N));
        double *av = malloc(B * M * K * sizeof(double)), *bv = malloc(B * K * N * sizeof(double));
        double *expected = calloc(B * M * N, sizeof(double));
        fl_to_host(a, av, B * M * K * sizeof(double));
        fl_to_host(b, bv, B * K * N * sizeof(double));
        for (int64_t i = 0; i < B; i++)
            for (int64_t m = 0; m < M; m++)
                for (int64_t k = 0; k < K; k++)
                    for (int64_t n = 0; n < N; n++)
                        expected[(i * M + m) * N + n] += av[(i * M + m) * K + k] * bv[(i * K + k) * N + n];
        support_assert_values(fl_matmul(a, b), expected, B * M * N, 1e-12, 1e-12, __FILE__, __LINE__);
        fl_tensor *f32 = fl_matmul(fl_cast(a, FL_F32), fl_cast(b, FL_F32));
        assert_dtype(f32, FL_F32);
        support_assert_values(f32, expected, B * M * N, 1e-4, 1e-4, __FILE__, __LINE__);
        free(av);
        free(bv);
        free(expected);
    }
    assert_no_error();
}

/* x W^T as a linear layer takes it (W [N, K] row-major, viewed transposed), in f32
 * against f64: the shapes that go to oneDNN's matmul primitive (16 rows or more,
 * fewer than 256 or at most 512 columns, 64^3 multiply-adds or more) and their
 * neighbours that stay with sgemm, a batch of x over one W, and an x whose rows are
 * further apart than K. {B, M, K, N}. */
static void matmul_with_a_transposed_weight_matches_f64(void **state)
{
    static const int64_t cases[][4] = {{1, 15, 128, 160}, {1, 16, 128, 160}, {1, 16, 64, 48},   {1, 100, 600, 40},
                                       {3, 40, 96, 130},  {1, 255, 70, 600}, {1, 256, 70, 600}, {1, 300, 512, 24},
                                       {1, 300, 20, 513}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t B = cases[c][0], M = cases[c][1], K = cases[c][2], N = cases[c][3];
        fl_manual_seed(11 + c);
        fl_tensor *x = fl_randn(FL_F64, FL_SHAPE(B, M, K)), *w = fl_randn(FL_F64, FL_SHAPE(N, K));
        fl_tensor *expected = fl_matmul(x, fl_transpose(w, 0, 1));
        fl_tensor *y = fl_matmul(fl_cast(x, FL_F32), fl_transpose(fl_cast(w, FL_F32), 0, 1));
        assert_dtype(y, FL_F32);
        assert_close(y, expected, 1e-4, 1e-4);
    }
    /* Rows K + 7 apart: the first K columns of a wider x. */
    fl_manual_seed(5);
    fl_tensor *wide = fl_randn(FL_F32, FL_SHAPE(40, 71)), *w = fl_randn(FL_F32, FL_SHAPE(24, 64));
    fl_tensor *x = strided_view(wide, (int64_t[]){40, 64}, (int64_t[]){0, 0}, (int64_t[]){1, 1});
    assert_close(fl_matmul(x, fl_transpose(w, 0, 1)),
                 fl_matmul(fl_cast(x, FL_F64), fl_transpose(fl_cast(w, FL_F64), 0, 1)), 1e-4, 1e-4);
    assert_no_error();
}

/* dY^T X as a linear layer's weight gradient takes it (dY [K, M] row-major, viewed
 * transposed), in f32 against f64: the shapes that go to oneDNN's matmul primitive (512
 * rows or more, at most 512 columns, 64^3 multiply-adds or more) and their neighbours
 * that stay with sgemm, a batch, and a dY whose rows are further apart than M. Below
 * AVX-512 (the x86-64 rows of the suite hold oneDNN there) the same shapes go to
 * OpenBLAS, split by rows, odd counts included. The f64 products, which the cpu
 * backend splits by rows the same way on several threads, are taken on one thread, so
 * that a fault in the split cannot agree with itself. {B, M, K, N}. */
static void matmul_with_a_transposed_left_operand_matches_f64(void **state)
{
    static const int64_t cases[][4] = {{1, 511, 40, 64},  {1, 512, 40, 64}, {1, 1024, 70, 256},
                                       {1, 600, 30, 513}, {1, 600, 30, 512}, {3, 520, 24, 40}};
    int threads = fl_num_threads();
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t B = cases[c][0], M = cases[c][1], K = cases[c][2], N = cases[c][3];
        fl_manual_seed(23 + c);
        fl_tensor *dy = fl_randn(FL_F64, FL_SHAPE(B, K, M)), *x = fl_randn(FL_F64, FL_SHAPE(B, K, N));
        fl_set_num_threads(1);
        fl_tensor *expected = fl_matmul(fl_transpose(dy, 1, 2), x);
        fl_set_num_threads(threads);
        fl_tensor *y = fl_matmul(fl_transpose(fl_cast(dy, FL_F32), 1, 2), fl_cast(x, FL_F32));
        assert_dtype(y, FL_F32);
        assert_close(y, expected, 1e-4, 1e-4);
    }
    /* Rows M + 7 apart: the first M columns of a wider dY. */
    fl_manual_seed(6);
    fl_tensor *wide = fl_randn(FL_F32, FL_SHAPE(40, 519)), *x = fl_randn(FL_F32, FL_SHAPE(40, 64));
    fl_tensor *dy = strided_view(wide, (int64_t[]){40, 512}, (int64_t[]){0, 0}, (int64_t[]){1, 1});
    fl_tensor *y = fl_matmul(fl_transpose(dy, 0, 1), x);
    fl_set_num_threads(1);
    fl_tensor *expected = fl_matmul(fl_transpose(fl_cast(dy, FL_F64), 0, 1), fl_cast(x, FL_F64));
    fl_set_num_threads(threads);
    assert_close(y, expected, 1e-4, 1e-4);
    assert_no_error();
}

/* dY W as a layer's input gradient takes it, in f32 against f64: B of 256 columns
 * 256 apart, which below AVX-512 (the x86-64 rows of the suite) sgemm reads from a
 * padded copy of B, its neighbours of 255 and 257 columns and one under 64^3
 * multiply-adds, which read B in place, a batch (one copy per matrix) and a B that is
 * the first 256 columns of a wider one (rows further apart, read in place).
 * {B, M, K, N}. */
static void matmul_with_a_256_column_right_operand_matches_f64(void **state)
{
    static const int64_t cases[][4] = {{1, 700, 130, 256}, {1, 5, 300, 256}, {1, 3, 300, 256},
                                       {1, 70, 100, 255},  {1, 70, 100, 257}, {2, 33, 40, 256}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t B = cases[c][0], M = cases[c][1], K = cases[c][2], N = cases[c][3];
        fl_manual_seed(31 + c);
        fl_tensor *dy = fl_randn(FL_F64, FL_SHAPE(B, M, K)), *w = fl_randn(FL_F64, FL_SHAPE(B, K, N));
        fl_tensor *y = fl_matmul(fl_cast(dy, FL_F32), fl_cast(w, FL_F32));
        assert_dtype(y, FL_F32);
        assert_close(y, fl_matmul(dy, w), 1e-4, 1e-4);
    }
    fl_manual_seed(7);
    fl_tensor *wide = fl_randn(FL_F32, FL_SHAPE(300, 263)), *dy = fl_randn(FL_F32, FL_SHAPE(40, 300));
    fl_tensor *w = strided_view(wide, (int64_t[]){300, 256}, (int64_t[]){0, 0}, (int64_t[]){1, 1});
    assert_close(fl_matmul(dy, w), fl_matmul(fl_cast(dy, FL_F64), fl_cast(w, FL_F64)), 1e-4, 1e-4);
    assert_no_error();
}

/* The plan cache on plans that count their builds and destructions: least recently
 * used out, never a plan in use, and a plan built when every slot is busy is dropped
 * when its call ends. */
static int plans_built, plans_destroyed[64];

static void *build_counted(const void *key)
{
    int *plan = malloc(sizeof *plan);
    *plan = *(const int *)key;
    plans_built++;
    return plan;
}

static void destroy_counted(void *plan)
{
    plans_destroyed[*(int *)plan]++;
    free(plan);
}

static void plan_cache_evicts_the_least_recently_used_plan_not_in_use(void **state)
{
    static cpu_plan_cache cache = CPU_PLAN_CACHE(int, destroy_counted);
    int key = 0;
    int *held = cpu_plan_acquire(&cache, &key, build_counted);
    for (key = 1; key <= 40; key++)
        cpu_plan_release(&cache, cpu_plan_acquire(&cache, &key, build_counted));
    /* 0 is in use; 1 .. 9 made way for 32 .. 40. */
    assert_int_equal(plans_built, 41);
    for (key = 0; key <= 40; key++)
        assert_int_equal(plans_destroyed[key], key >= 1 && key <= 9);
    int *again = cpu_plan_acquire(&cache, &(int){40}, build_counted);
    assert_int_equal(*again, 40);
    assert_int_equal(plans_built, 41);
    cpu_plan_release(&cache, again);
    /* Every slot busy: a new plan is built for one call and dropped after it. */
    int *busy[31];
    for (key = 10; key <= 40; key++)
        busy[key - 10] = cpu_plan_acquire(&cache, &key, build_counted);
    key = 41;
    int *passing = cpu_plan_acquire(&cache, &key, build_counted);
    assert_int_equal(*passing, 41);
    assert_int_equal(plans_destroyed[41], 0);
    cpu_plan_release(&cache, passing);
    assert_int_equal(plans_destroyed[41], 1);
    for (int i = 0; i < 31; i++)
        cpu_plan_release(&cache, busy[i]);
    cpu_plan_release(&cache, held);
    assert_int_equal(plans_destroyed[0], 0);
    assert_int_equal(plans_built, 42);
}

/* Products on the matmul primitive from several threads at once, over more shapes
 * than its plan cache holds (32): plans are built, shared, evicted and dropped while
 * other threads run them. Each thread checks its products against f64 (OpenBLAS). */
static fl_tensor *shared_x, *shared_w; /* f64 [56, 64] and [48, 64], made before the threads */

static void *products_in_a_loop(void *seed)
{
    intptr_t id = (intptr_t)seed;
    for (int k = 0; k < 60; k++) {
        fl_scope scope = fl_scope_begin();
        int64_t rows = 16 + (k * 7 + id * 13) % 40, cols = 8 + (k * 5 + id) % 40;
        fl_tensor *x = fl_index(shared_x, FL_INDEX(FL_RANGE(0, rows))), *w = fl_index(shared_w, FL_INDEX(FL_RANGE(0, cols)));
        fl_tensor *expected = fl_matmul(x, fl_transpose(w, 0, 1));
        fl_tensor *y = fl_matmul(fl_cast(x, FL_F32), fl_transpose(fl_cast(w, FL_F32), 0, 1));
        fl_tensor *error = y && expected ? fl_max(fl_abs(fl_sub(fl_cast(y, FL_F64), expected)), FL_ALL_AXES, false) : NULL;
        bool ok = error && fl_item(error) < 1e-4;
        fl_scope_end(scope);
        if (!ok)
            return (void *)1;
    }
    return NULL;
}

static void matmul_primitives_are_safe_from_several_threads(void **state)
{
    fl_manual_seed(3);
    shared_x = fl_randn(FL_F64, FL_SHAPE(56, 64));
    shared_w = fl_randn(FL_F64, FL_SHAPE(48, 64));
    pthread_t threads[4];
    for (intptr_t i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, products_in_a_loop, (void *)i), 0);
    for (int i = 0; i < 4; i++) {
        void *failed;
        pthread_join(threads[i], &failed);
        assert_null(failed);
    }
    assert_no_error();
}

static void matmul_dtypes_and_empty_operands(void **state)
{
    /* Integers are exact and keep their dtype; mixed operands promote. */
    fl_tensor *ia = T_I32(FL_SHAPE(2, 3), 1, 2, 3, 4, 5, 6), *ib = T_I32(FL_SHAPE(3, 2), 7, 8, 9, 10, 11, 12);
    fl_tensor *ip = fl_matmul(ia, ib);
    assert_dtype(ip, FL_I32);
    assert_values(ip, 0, 0, 58, 64, 139, 154);
    fl_tensor *mixed = fl_matmul(ia, T_F64(FL_SHAPE(3), 1, 0.5, 0.25));
    assert_dtype(mixed, FL_F64);
    assert_values(mixed, 0, 0, 2.75, 8);
    /* Half precision computes in f32 and returns its own dtype. */
    fl_tensor *h = fl_matmul(fl_cast(ref("mm_a"), FL_F16), fl_cast(ref("mm_b"), FL_F16));
    assert_dtype(h, FL_F16);
    assert_close(h, ref("mm_ab"), 1e-2, 1e-2);
    assert_dtype(fl_matmul(fl_cast(ref("mm_a"), FL_BF16), fl_cast(ref("mm_b"), FL_BF16)), FL_BF16);
    /* An empty inner dimension sums nothing; empty outer ones give empty results. */
    fl_tensor *zero_k = fl_matmul(fl_ones(FL_F32, FL_SHAPE(3, 0)), fl_ones(FL_F32, FL_SHAPE(0, 2)));
    assert_shape(zero_k, 3, 2);
    assert_values(zero_k, 0, 0, 0, 0, 0, 0, 0, 0);
    assert_shape(fl_matmul(fl_ones(FL_F64, FL_SHAPE(2, 0, 4)), fl_ones(FL_F64, FL_SHAPE(4, 5))), 2, 0, 5);
    assert_shape(fl_matmul(fl_ones(FL_F32, FL_SHAPE(0, 2, 4)), fl_ones(FL_F32, FL_SHAPE(4, 5))), 0, 2, 5);
    assert_no_error();
}

static void matmul_errors(void **state)
{
    fl_tensor *a = fl_zeros(FL_F32, FL_SHAPE(2, 3)), *b = fl_zeros(FL_F32, FL_SHAPE(4, 5));
    assert_fails(fl_matmul(a, b), FL_ERR_SHAPE, "fl_matmul: inner dimensions do not match: f32[2, 3] @ f32[4, 5]");
    assert_fails(fl_matmul(fl_zeros(FL_F32, FL_SHAPE(2, 2, 3)), fl_zeros(FL_F64, FL_SHAPE(3, 3, 4))), FL_ERR_SHAPE,
                 "batch dimensions of f64[2, 2, 3] and f64[3, 3, 4] do not broadcast");
    assert_fails(fl_matmul(fl_scalar(1, FL_F32), a), FL_ERR_SHAPE, "at least one dimension");
    assert_fails(fl_matmul(fl_zeros(FL_BOOL, FL_SHAPE(2, 2)), fl_zeros(FL_BOOL, FL_SHAPE(2, 2))), FL_ERR_DTYPE,
                 "bool");
    assert_fails(fl_matmul(NULL, a), FL_ERR_NULL, "fl_matmul");
}

/* ---- linear ---- */

/* x [B, M, K] (B 0: [M, K]; B -1: [M, K] transposed from [K, M]) and weight [N, K]
 * (transposed from [K, N] where weight_transposed). */
static void linear_operands(fl_dtype dtype, const int64_t *c, bool weight_transposed, fl_tensor **x, fl_tensor **w)
{
    int64_t B = c[0], M = c[1], K = c[2], N = c[3];
    *x = B > 0 ? fl_randn(dtype, FL_SHAPE(B, M, K))
         : B < 0 ? fl_transpose(fl_randn(dtype, FL_SHAPE(K, M)), 0, 1) : fl_randn(dtype, FL_SHAPE(M, K));
    *w = weight_transposed ? fl_transpose(fl_randn(dtype, FL_SHAPE(K, N)), 0, 1) : fl_randn(dtype, FL_SHAPE(N, K));
}

/* fl_linear against the composition x W^T + b, which runs where the backend's linear
 * entry is NULL, in f32 and f64: the shapes of each path of the cpu kernel (oneDNN's
 * primitive with its bias, from 16 rows and 64^3 multiply-adds; below either, a gemm
 * after the rows are set to the bias, threaded or not; f64 rows split between
 * threads), x with batch axes and x and the weight as transposed views. {B, M, K, N}. */
static void linear_matches_the_composition(void **state)
{
    static const int64_t cases[][4] = {{0, 5, 7, 3},      {0, 300, 64, 600}, {0, 700, 40, 2000}, {0, 8, 512, 2048},
                                       {2, 30, 40, 50},   {-1, 300, 64, 600}, {-1, 64, 256, 512}, {0, 1, 33, 17},
                                       {-1, 8, 512, 2048}};
    fl_backend composing = support_derive(fl_default_backend()->name);
    composing.linear = NULL;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int f64 = 0; f64 < 2; f64++)
            for (int weight_transposed = 0; weight_transposed < 2; weight_transposed++) {
                fl_dtype dtype = f64 ? FL_F64 : FL_F32;
                fl_manual_seed(31 + c);
                fl_tensor *x, *w, *b = fl_randn(dtype, FL_SHAPE(cases[c][3]));
                linear_operands(dtype, cases[c], weight_transposed, &x, &w);
                fl_tensor *y = fl_linear(x, w, b);
                fl_backend original = support_override(&composing);
                fl_tensor *composed = fl_linear(x, w, b);
                support_override(&original);
                assert_dtype(y, dtype);
                assert_int_equal(fl_ndim(y), fl_ndim(x));
                assert_int_equal(fl_shape(y)[fl_ndim(y) - 1], cases[c][3]);
                assert_close(y, composed, f64 ? 1e-12 : 1e-5, f64 ? 1e-12 : 1e-4);
            }
    assert_no_error();
}

static void linear_edges_and_errors(void **state)
{
    /* No inputs: every row is the bias. */
    fl_tensor *b = T_F32(FL_SHAPE(2), 1.5f, -2);
    assert_values(fl_linear(fl_zeros(FL_F32, FL_SHAPE(2, 0)), fl_zeros(FL_F32, FL_SHAPE(2, 0)), b), 0, 0, 1.5, -2,
                  1.5, -2);
    assert_shape(fl_linear(fl_zeros(FL_F32, FL_SHAPE(0, 3)), fl_zeros(FL_F32, FL_SHAPE(2, 3)), b), 0, 2);
    /* Mixed dtypes promote, as the composition's product and sum do. */
    fl_tensor *y = fl_linear(T_F32(FL_SHAPE(1, 2), 1, 2), T_F64(FL_SHAPE(2, 2), 1, 0, 0, 1), b);
    assert_dtype(y, FL_F64);
    assert_values(y, 0, 0, 2.5, 0);
    fl_tensor *x = fl_zeros(FL_F32, FL_SHAPE(2, 3));
    assert_fails(fl_linear(x, fl_zeros(FL_F32, FL_SHAPE(4, 5)), NULL), FL_ERR_SHAPE,
                 "fl_linear: x f32[2, 3], weight f32[4, 5] and bias none do not make x [*, in] weight [out, in]^T + "
                 "bias [out]");
    assert_fails(fl_linear(x, fl_zeros(FL_F32, FL_SHAPE(4, 3)), b), FL_ERR_SHAPE, "bias f32[2]");
    assert_fails(fl_linear(fl_scalar(1, FL_F32), fl_zeros(FL_F32, FL_SHAPE(1, 1)), NULL), FL_ERR_SHAPE, "x f32[]");
    assert_fails(fl_linear(NULL, x, NULL), FL_ERR_NULL, "fl_linear");
}

/* ---- convolution ---- */

typedef struct conv_case {
    const char *name;
    fl_conv_params params;
} conv_case;

static const conv_case conv2d_cases[] = {
    {"conv_plain", {{2, 1}, {1, 0}, {1, 2}, 1}},
    {"conv_groups", {{1, 1}, {1, 1}, {1, 1}, 2}},
    {"conv_depthwise", {{2, 2}, {1, 1}, {2, 2}, 4}},
};
static const conv_case conv1d_cases[] = {
    {"conv1d", {{0, 2}, {0, 1}, {0, 1}, 1}},
    {"conv1d_groups", {{0, 1}, {0, 1}, {0, 3}, 2}},
};

static fl_tensor *case_tensor(const char *name, const char *part, fl_dtype d)
{
    char key[64];
    snprintf(key, sizeof key, "%s_%s", name, part);
    return fl_cast(ref(key), d);
}

static void check_conv(const conv_case *c, int dims, fl_dtype d)
{
    double tol = d == FL_F64 ? 1e-12 : d == FL_F32 ? 1e-4 : 5e-2;
    fl_tensor *x = case_tensor(c->name, "x", d), *w = case_tensor(c->name, "w", d);
    fl_tensor *dy = case_tensor(c->name, "dy", d);
    fl_tensor *y = dims == 2 ? fl_conv2d(x, w, &c->params) : fl_conv1d(x, w, &c->params);
    fl_tensor *dx = dims == 2 ? fl_conv2d_backward_input(dy, w, fl_shape(x), &c->params)
                              : fl_conv1d_backward_input(dy, w, fl_shape(x), &c->params);
    fl_tensor *dw = dims == 2 ? fl_conv2d_backward_weight(x, dy, fl_shape(w), &c->params)
                              : fl_conv1d_backward_weight(x, dy, fl_shape(w), &c->params);
    assert_dtype(y, d);
    assert_dtype(dx, d);
    assert_dtype(dw, d);
    assert_close(y, case_tensor(c->name, "y", FL_F64), tol, tol);
    assert_close(dx, case_tensor(c->name, "dx", FL_F64), tol, tol);
    assert_close(dw, case_tensor(c->name, "dw", FL_F64), tol, tol);
}

static void conv_matches_pytorch(void **state)
{
    for (fl_dtype d = FL_F16; d <= FL_F64; d++) {
        if (d == FL_BF16)
            continue;
        for (size_t i = 0; i < sizeof conv2d_cases / sizeof conv2d_cases[0]; i++)
            check_conv(&conv2d_cases[i], 2, d);
        for (size_t i = 0; i < sizeof conv1d_cases / sizeof conv1d_cases[0]; i++)
            check_conv(&conv1d_cases[i], 1, d);
    }
    assert_no_error();
}

/* oneDNN (f32, blocked layouts) against im2col and dgemm (f64) on shapes where the
 * blocked kernels apply, twice so that the second call reuses the cached plans. */
static void conv_f32_agrees_with_f64(void **state)
{
    fl_manual_seed(3);
    const fl_conv_params *params[] = {CONV(1, 1, 1, 1, 1, 1, 1), CONV(2, 2, 0, 1, 1, 1, 2), CONV(1, 1, 2, 2, 2, 2, 32)};
    const int64_t weights[][4] = {{32, 16, 3, 3}, {32, 8, 1, 3}, {32, 1, 3, 3}};
    for (int i = 0; i < 3; i++) {
        int64_t channels = i == 2 ? 32 : 16;
        fl_tensor *x = fl_randn(FL_F64, FL_SHAPE(3, channels, 11, 10));
        fl_tensor *w = fl_randn(FL_F64, 4, weights[i]);
        fl_tensor *y = fl_conv2d(x, w, params[i]);
        fl_tensor *dy = fl_randn(FL_F64, fl_ndim(y), fl_shape(y));
        fl_tensor *dx = fl_conv2d_backward_input(dy, w, fl_shape(x), params[i]);
        fl_tensor *dw = fl_conv2d_backward_weight(x, dy, fl_shape(w), params[i]);
        for (int repeat = 0; repeat < 2; repeat++) {
            fl_tensor *x32 = fl_cast(x, FL_F32), *w32 = fl_cast(w, FL_F32), *dy32 = fl_cast(dy, FL_F32);
            assert_close(fl_conv2d(x32, w32, params[i]), y, 1e-3, 1e-3);
            assert_close(fl_conv2d_backward_input(dy32, w32, fl_shape(x), params[i]), dx, 1e-3, 1e-3);
            assert_close(fl_conv2d_backward_weight(x32, dy32, fl_shape(w), params[i]), dw, 1e-3, 1e-3);
        }
    }
    assert_no_error();
}

/* The largest difference between a and b relative to the largest magnitude in b. */
static double relative_error(const fl_tensor *a, const fl_tensor *b)
{
    return fl_item(fl_max(fl_abs(fl_sub(fl_cast(a, FL_F64), b)), FL_ALL_AXES, false)) / fl_item(fl_max(fl_abs(b), FL_ALL_AXES, false));
}

/* The cpu backend runs f32 3x3 convolutions with Winograd's algorithm where oneDNN has a
 * kernel (conv.c); it must agree with the exact f64 result as closely as direct
 * convolution does, to the rounding of f32 sums of this length, in all three passes. */
static void winograd_and_direct_convolutions_agree_with_f64(void **state)
{
    fl_manual_seed(5);
    const fl_conv_params *same = CONV(1, 1, 1, 1, 1, 1, 1);
    fl_tensor *x = fl_randn(FL_F64, FL_SHAPE(4, 32, 14, 14)), *w = fl_randn(FL_F64, FL_SHAPE(32, 32, 3, 3));
    fl_tensor *dy = fl_randn(FL_F64, FL_SHAPE(4, 32, 14, 14));
    fl_tensor *exact[3] = {fl_conv2d(x, w, same), fl_conv2d_backward_input(dy, w, fl_shape(x), same),
                           fl_conv2d_backward_weight(x, dy, fl_shape(w), same)};
    fl_tensor *x32 = fl_cast(x, FL_F32), *w32 = fl_cast(w, FL_F32), *dy32 = fl_cast(dy, FL_F32);
    fl_tensor *results[2][3];
    cpu_conv_algorithm preferred = cpu_conv_get_algorithm();
    for (int a = 0; a < 2; a++) {
        cpu_conv_set_algorithm(a == 0 ? CPU_CONV_DIRECT : CPU_CONV_WINOGRAD);
        fl_tensor **r = results[a];
        r[0] = fl_conv2d(x32, w32, same);
        r[1] = fl_conv2d_backward_input(dy32, w32, fl_shape(x), same);
        r[2] = fl_conv2d_backward_weight(x32, dy32, fl_shape(w), same);
        for (int pass = 0; pass < 3; pass++) /* measured: direct 0.4-1.0e-6, Winograd 1.1-1.4e-6 */
            assert_true(relative_error(r[pass], exact[pass]) < 5e-6);
    }
    cpu_conv_set_algorithm(preferred);
    /* Different roundings show the switch took effect. oneDNN's Winograd kernels need
     * AVX-512; elsewhere, and on backends with convolutions of their own, both runs
     * are the same. */
    const char *backend = fl_backend_name(x32);
    if (__builtin_cpu_supports("avx512f") && (strcmp(backend, "cpu") == 0 || strcmp(backend, "lazy") == 0))
        for (int pass = 0; pass < 3; pass++)
            assert_false(fl_item(fl_all(fl_eq(results[0][pass], results[1][pass]), FL_ALL_AXES, false)));
    assert_no_error();
}

static void conv_errors(void **state)
{
    fl_tensor *x = fl_zeros(FL_F32, FL_SHAPE(1, 4, 5, 5)), *w = fl_zeros(FL_F32, FL_SHAPE(6, 3, 3, 3));
    assert_fails(fl_conv2d(x, w, NULL), FL_ERR_SHAPE,
                 "fl_conv2d: weight f32[6, 3, 3, 3] with groups=1 expects an input with 3 channels, got f32[1, 4, 5, 5]");
    assert_fails(fl_conv2d(x, fl_zeros(FL_F32, FL_SHAPE(6, 1, 3, 3)), CONV(1, 1, 0, 0, 1, 1, 4)), FL_ERR_SHAPE,
                 "6 output channels, not divisible by groups=4");
    assert_fails(fl_conv2d(x, fl_zeros(FL_F32, FL_SHAPE(2, 4, 6, 3)), NULL), FL_ERR_SHAPE,
                 "larger than the padded input f32[1, 4, 5, 5]");
    assert_fails(fl_conv2d(x, fl_zeros(FL_F32, FL_SHAPE(2, 4, 3, 3)), CONV(1, 1, 0, 0, 3, 1, 1)), FL_ERR_SHAPE,
                 "dilated extent 7");
    assert_fails(fl_conv2d(x, fl_zeros(FL_F32, FL_SHAPE(2, 4, 3, 3)), CONV(-1, 1, 0, 0, 1, 1, 1)), FL_ERR_VALUE,
                 "must not be negative");
    assert_fails(fl_conv2d(x, fl_zeros(FL_F32, FL_SHAPE(2, 4, 3, 3)), CONV(1, 1, 0, 0, 1, 1, -2)), FL_ERR_VALUE,
                 "groups must be positive");
    assert_fails(fl_conv2d(fl_zeros(FL_I32, FL_SHAPE(1, 4, 5, 5)), fl_zeros(FL_I32, FL_SHAPE(2, 4, 3, 3)), NULL),
                 FL_ERR_DTYPE, "floating-point operands of one dtype, got i32[1, 4, 5, 5]");
    assert_fails(fl_conv2d(x, fl_zeros(FL_F64, FL_SHAPE(2, 4, 3, 3)), NULL), FL_ERR_DTYPE, "f64[2, 4, 3, 3]");
    assert_fails(fl_conv2d(fl_zeros(FL_F32, FL_SHAPE(4, 5, 5)), w, NULL), FL_ERR_SHAPE,
                 "x must have 4 dimensions, got f32[4, 5, 5]");
    fl_tensor *w4 = fl_zeros(FL_F32, FL_SHAPE(2, 4, 3, 3));
    assert_fails(fl_conv2d_backward_input(fl_zeros(FL_F32, FL_SHAPE(1, 2, 4, 3)), w4, fl_shape(x), NULL), FL_ERR_SHAPE,
                 "dy is f32[1, 2, 4, 3]; the convolution's output shape is [1, 2, 3, 3]");
    assert_fails(fl_conv2d_backward_input(fl_zeros(FL_F32, FL_SHAPE(1, 2, 3, 3)), w4, NULL, NULL), FL_ERR_NULL,
                 "x_shape is NULL");
    assert_fails(fl_conv2d_backward_weight(x, fl_zeros(FL_F32, FL_SHAPE(1, 2, 3, 3)), (int64_t[]){2, -4, 3, 3}, NULL),
                 FL_ERR_SHAPE, "weight_shape [2, -4, 3, 3] has a negative size");
    assert_fails(fl_conv2d_backward_weight(x, fl_zeros(FL_F32, FL_SHAPE(1, 3, 3, 3)), fl_shape(w4), NULL),
                 FL_ERR_SHAPE, "fl_conv2d_backward_weight: dy is f32[1, 3, 3, 3]");
    /* The 1-D forms describe the caller's 3-D tensors. */
    assert_fails(fl_conv1d(fl_zeros(FL_F32, FL_SHAPE(1, 4, 5)), fl_zeros(FL_F32, FL_SHAPE(2, 3, 3)), NULL),
                 FL_ERR_SHAPE, "fl_conv1d: weight f32[2, 3, 3] with groups=1 expects an input with 3 channels, got f32[1, 4, 5]");
    assert_fails(fl_conv1d(fl_zeros(FL_F32, FL_SHAPE(1, 4, 5)), fl_zeros(FL_F32, FL_SHAPE(2, 4, 7)), NULL),
                 FL_ERR_SHAPE, "larger than the padded input");
    assert_fails(fl_conv1d_backward_weight(fl_zeros(FL_F32, FL_SHAPE(1, 4, 5)), fl_zeros(FL_F32, FL_SHAPE(1, 2, 9)),
                                           (int64_t[]){2, 4, 3}, NULL),
                 FL_ERR_SHAPE, "dy is f32[1, 2, 9]; the convolution's output shape is [1, 2, 3]");
    assert_fails(fl_conv2d(NULL, w, NULL), FL_ERR_NULL, "fl_conv2d");
}

static void conv_empty_channels_give_zeros(void **state)
{
    fl_tensor *y = fl_conv2d(fl_ones(FL_F32, FL_SHAPE(2, 0, 4, 4)), fl_ones(FL_F32, FL_SHAPE(3, 0, 3, 3)), NULL);
    assert_shape(y, 2, 3, 2, 2);
    assert_values(y, 0, 0, [0 ... 23] = 0);
    assert_shape(fl_conv2d(fl_ones(FL_F64, FL_SHAPE(0, 2, 4, 4)), fl_ones(FL_F64, FL_SHAPE(3, 2, 3, 3)), NULL), 0, 3,
                 2, 2);
    assert_no_error();
}

/* ---- pooling ---- */

typedef struct pool_case {
    const char *name;
    fl_pool_params params;
} pool_case;

static const pool_case pool_cases[] = {
    {"max_pad_ceil", {FL_POOL_MAX, {3, 2}, {2, 2}, {1, 1}, true, false}},
    {"max_ties", {FL_POOL_MAX, {3, 3}, {1, 1}, {1, 1}, false, false}},
    {"max_2x2", {FL_POOL_MAX, {2, 2}, {0, 0}, {0, 0}, false, false}},
    {"max_2x2_odd", {FL_POOL_MAX, {2, 2}, {2, 2}, {0, 0}, false, false}},
    {"max_2x2_ceil", {FL_POOL_MAX, {2, 2}, {2, 2}, {0, 0}, true, false}},
    {"avg_include_pad", {FL_POOL_AVG, {3, 3}, {2, 2}, {1, 1}, true, true}},
    {"avg_exclude_pad", {FL_POOL_AVG, {3, 3}, {2, 2}, {1, 1}, true, false}},
    {"avg_rect", {FL_POOL_AVG, {2, 4}, {1, 3}, {1, 2}, false, true}},
};

static void pool_matches_pytorch(void **state)
{
    for (fl_dtype d = FL_F16; d <= FL_F64; d++) {
        if (d == FL_BF16)
            continue;
        double tol = d == FL_F64 ? 1e-12 : d == FL_F32 ? 1e-5 : 1e-2;
        for (size_t i = 0; i < sizeof pool_cases / sizeof pool_cases[0]; i++) {
            const pool_case *c = &pool_cases[i];
            fl_tensor *x = case_tensor(c->name, "x", d), *dy = case_tensor(c->name, "dy", d);
            fl_tensor *y = fl_pool2d(x, &c->params), *dx = fl_pool2d_backward(dy, x, &c->params);
            assert_dtype(y, d);
            assert_close(y, case_tensor(c->name, "y", FL_F64), tol, tol);
            /* f16 inputs may round differently in the max ties, so only f32/f64 routes are exact there. */
            assert_close(dx, case_tensor(c->name, "dx", FL_F64), tol, d == FL_F16 ? 5e-2 : tol);
        }
    }
    assert_no_error();
}

static void max_pool_picks_the_first_maximum_and_propagates_nan(void **state)
{
    fl_pool_params p = {FL_POOL_MAX, {2, 2}, {1, 1}, {0, 0}, false, false};
    fl_tensor *x = T_F32(FL_SHAPE(1, 1, 2, 3), 5, 5, 1, 5, 5, 1);
    assert_values(fl_pool2d(x, &p), 0, 0, 5, 5);
    /* Window 0 takes x[0][0], window 1 x[0][1]. */
    assert_values(fl_pool2d_backward(T_F32(FL_SHAPE(1, 1, 1, 2), 1, 10), x, &p), 0, 0, 1, 10, 0, 0, 0, 0);
    fl_tensor *with_nan = T_F64(FL_SHAPE(1, 1, 2, 2), 1, NAN, 3, 2);
    fl_pool_params two = {FL_POOL_MAX, {2, 2}, {2, 2}, {0, 0}, false, false};
    assert_values(fl_pool2d(with_nan, &two), 0, 0, NAN);
    assert_values(fl_pool2d_backward(T_F64(FL_SHAPE(1, 1, 1, 1), 7), with_nan, &two), 0, 0, 0, 7, 0, 0);
    fl_tensor *with_nan32 = fl_cast(with_nan, FL_F32); /* the 2x2 fast path */
    assert_values(fl_pool2d(with_nan32, &two), 0, 0, NAN);
    assert_no_error();
}

/* A large input runs on both threads and through the 2x2 fast path. */
static void max_pool_fast_path_matches_generic(void **state)
{
    fl_manual_seed(11);
    fl_tensor *x = fl_randn(FL_F32, FL_SHAPE(4, 8, 32, 34));
    fl_pool_params fast = {FL_POOL_MAX, {2, 2}, {2, 2}, {0, 0}, false, false};
    fl_pool_params generic = fast;
    generic.ceil_mode = true; /* same windows on even sizes, but not the fast path's test */
    fl_tensor *y = fl_pool2d(x, &fast);
    assert_shape(y, 4, 8, 16, 17);
    assert_close(y, fl_pool2d(fl_cast(x, FL_F64), &generic), 0, 0);
    assert_no_error();
}

/* The 2x2 backward fast path (vectorized across a row, with a partial last block of
 * 17 windows) against the generic kernel, on values from {0, 1, 2, NaN}: most windows
 * hold ties, some a NaN or two, and each one's gradient must land on the same element. */
static void max_pool_backward_fast_path_matches_generic(void **state)
{
    enum { N = 3, C = 5, H = 12, W = 34 };
    static float values[N * C * H * W];
    uint32_t lcg = 7;
    for (int i = 0; i < N * C * H * W; i++) {
        lcg = lcg * 1664525u + 1013904223u;
        int pick = (int)(lcg >> 28) % 13;
        values[i] = pick == 12 ? NAN : (float)(pick % 3);
    }
    fl_tensor *x = fl_from_data(values, FL_F32, FL_SHAPE(N, C, H, W));
    fl_pool_params fast = {FL_POOL_MAX, {2, 2}, {2, 2}, {0, 0}, false, false};
    fl_pool_params generic = fast;
    generic.ceil_mode = true;
    fl_manual_seed(12);
    fl_tensor *dy = fl_randn(FL_F32, FL_SHAPE(N, C, H / 2, W / 2));
    fl_tensor *dx = fl_pool2d_backward(dy, x, &fast);
    assert_shape(dx, N, C, H, W);
    assert_close(dx, fl_pool2d_backward(fl_cast(dy, FL_F64), fl_cast(x, FL_F64), &generic), 0, 0);
    assert_no_error();
}

static void pool_errors(void **state)
{
    fl_tensor *x = fl_zeros(FL_F32, FL_SHAPE(1, 2, 4, 4));
    fl_pool_params p = {FL_POOL_MAX, {5, 5}, {1, 1}, {0, 0}, false, false};
    assert_fails(fl_pool2d(x, &p), FL_ERR_SHAPE, "fl_pool2d: kernel {5, 5} is larger than the padded input f32[1, 2, 4, 4]");
    p = (fl_pool_params){FL_POOL_AVG, {3, 3}, {1, 1}, {2, 0}, false, true};
    assert_fails(fl_pool2d(x, &p), FL_ERR_VALUE, "padding {2, 0} must be at most half of the kernel {3, 3}");
    p = (fl_pool_params){FL_POOL_MAX, {0, 2}, {0, 0}, {0, 0}, false, false};
    assert_fails(fl_pool2d(x, &p), FL_ERR_VALUE, "must be positive");
    p = (fl_pool_params){FL_POOL_MAX, {2, 2}, {-1, 1}, {0, 0}, false, false};
    assert_fails(fl_pool2d(x, &p), FL_ERR_VALUE, "not negative");
    p = (fl_pool_params){(fl_pool_kind)7, {2, 2}, {0, 0}, {0, 0}, false, false};
    assert_fails(fl_pool2d(x, &p), FL_ERR_VALUE, "unknown pooling kind 7");
    p = (fl_pool_params){FL_POOL_MAX, {2, 2}, {0, 0}, {0, 0}, false, false};
    assert_fails(fl_pool2d(fl_zeros(FL_I64, FL_SHAPE(1, 2, 4, 4)), &p), FL_ERR_DTYPE, "floating-point input, got i64");
    assert_fails(fl_pool2d(fl_zeros(FL_F32, FL_SHAPE(2, 4, 4)), &p), FL_ERR_SHAPE, "x must have 4 dimensions");
    assert_fails(fl_pool2d(x, NULL), FL_ERR_NULL, "params is NULL");
    assert_fails(fl_pool2d_backward(fl_zeros(FL_F32, FL_SHAPE(1, 2, 3, 2)), x, &p), FL_ERR_SHAPE,
                 "dy is f32[1, 2, 3, 2]; pooling f32[1, 2, 4, 4] gives [1, 2, 2, 2]");
    assert_fails(fl_pool2d_backward(fl_zeros(FL_F64, FL_SHAPE(1, 2, 2, 2)), x, &p), FL_ERR_DTYPE, "one dtype");
    assert_fails(fl_pool2d(NULL, &p), FL_ERR_NULL, "fl_pool2d");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        scoped_test(matmul_matches_pytorch),
        scoped_test(matmul_takes_transposed_and_strided_operands),
        scoped_test(matmul_larger_shapes_match_a_naive_product),
        scoped_test(matmul_with_a_transposed_weight_matches_f64),
        scoped_test(matmul_with_a_transposed_left_operand_matches_f64),
        scoped_test(matmul_with_a_256_column_right_operand_matches_f64),
        scoped_test(matmul_primitives_are_safe_from_several_threads),
        scoped_test(plan_cache_evicts_the_least_recently_used_plan_not_in_use),
        scoped_test(matmul_dtypes_and_empty_operands),
        scoped_test(matmul_errors),
        scoped_test(linear_matches_the_composition),
        scoped_test(linear_edges_and_errors),
        scoped_test(conv_matches_pytorch),
        scoped_test(conv_f32_agrees_with_f64),
        scoped_test(winograd_and_direct_convolutions_agree_with_f64),
        scoped_test(conv_errors),
        scoped_test(conv_empty_channels_give_zeros),
        scoped_test(pool_matches_pytorch),
        scoped_test(max_pool_picks_the_first_maximum_and_propagates_nan),
        scoped_test(max_pool_fast_path_matches_generic),
        scoped_test(max_pool_backward_fast_path_matches_generic),
        scoped_test(pool_errors),
    };
    return cmocka_run_group_tests_name("linalg", tests, NULL, NULL);
}
