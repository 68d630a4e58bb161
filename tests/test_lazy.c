/* The lazy backend: deferred graphs give the cpu backend's values (broadcast and
 * strided operands, constants, fused trailing reductions), nodes held from outside
 * are written by the same pass, graphs stay bounded in a loop that never reads, and
 * the traffic counters see the fusion, and reshapes and conversions to f32 keep a
 * graph pending. Tensors are moved to "lazy" explicitly, so
 * this runs the same in both rows of the backend matrix. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/cpu/cpu.h"
#include "backends/lazy/lazy.h"
#include "flare/autograd.h"
#include "flare/config.h"
#include "support.h"

static fl_tensor *on(const char *backend, const fl_tensor *t) { return fl_to_backend(t, backend); }

static bool pending(const fl_tensor *t) { return lazy_impl(t)->op > LAZY_CONSTANT; }

/* An expression with every fused operation, a broadcast row, a scalar and a
 * transposed (strided) operand. */
static fl_tensor *expression(const fl_tensor *x, const fl_tensor *row, const fl_tensor *xt)
{
    fl_tensor *y = fl_add(fl_mul(x, row), fl_transpose(xt, 0, 1));
    y = fl_add(fl_erf(y), fl_tanh(fl_sigmoid(y)));
    y = fl_sub(fl_exp(fl_neg(fl_abs(y))), fl_log1p(fl_sqrt(fl_abs(y))));
    y = fl_add(y, fl_mul(fl_sin(y), fl_cos(y)));
    y = fl_maximum(fl_minimum(y, fl_rsqrt(fl_add_scalar(fl_abs(y), 1))), fl_floor(y));
    y = fl_add(y, fl_div(fl_ceil(fl_mul_scalar(y, 3)), fl_pow_scalar(fl_add_scalar(fl_abs(y), 1), 1.5)));
    return fl_add(y, fl_mul(fl_round(y), fl_sign(fl_log(fl_add_scalar(fl_abs(y), 0.5)))));
}

static void fused_values_match_the_cpu_backend(void **state)
{
    enum { R = 300, C = 257 }; /* odd sizes: tiles end mid-row; large enough for two threads */
    int64_t shape[] = {R, C};
    fl_manual_seed(3);
    fl_tensor *x = fl_to_backend(fl_randn(FL_F32, 2, shape), "cpu");
    fl_tensor *row = fl_to_backend(fl_randn(FL_F32, 1, (const int64_t[]){C}), "cpu");
    fl_tensor *xt = fl_to_backend(fl_randn(FL_F32, 2, (const int64_t[]){C, R}), "cpu");
    fl_tensor *expected = expression(x, row, xt);
    fl_tensor *got = expression(on("lazy", x), on("lazy", row), on("lazy", xt));
    assert_string_equal(fl_backend_name(got), "lazy");
    assert_true(pending(got));
    assert_close(got, expected, 1e-6, 1e-6);
    assert_false(pending(got)); /* read, so materialized */

    /* Trailing reductions fused with the graph, and one over a leading axis (not fusable). */
    const int last[] = {-1}, first[] = {0};
    fl_tensor *e_cpu = fl_mul(fl_add(x, row), x), *e_lazy = fl_mul(fl_add(on("lazy", x), on("lazy", row)), on("lazy", x));
    assert_close(fl_sum(e_lazy, last, 1, true), fl_sum(e_cpu, last, 1, true), 1e-5, 1e-4);
    assert_true(pending(e_lazy)); /* a fused reduction reads a graph without materializing it */
    assert_close(fl_sum(e_lazy, FL_ALL_AXES, false), fl_sum(e_cpu, FL_ALL_AXES, false), 1e-5, 1e-2);
    assert_false(pending(e_lazy)); /* but a second one keeps the values it computes */
    assert_close(fl_max(e_lazy, last, 1, false), fl_max(e_cpu, last, 1, false), 0, 0);
    assert_close(fl_min(e_lazy, last, 1, false), fl_min(e_cpu, last, 1, false), 0, 0);
    assert_close(fl_prod(fl_add_scalar(fl_mul_scalar(e_lazy, 1e-3), 1), last, 1, false),
                 fl_prod(fl_add_scalar(fl_mul_scalar(e_cpu, 1e-3), 1), last, 1, false), 1e-5, 0);
    assert_close(fl_sum(e_lazy, first, 1, false), fl_sum(e_cpu, first, 1, false), 1e-5, 1e-4);
    /* NaN propagates through fused max, as on cpu. */
    fl_tensor *nan_row = on("lazy", T_F32(FL_SHAPE(1, 3), 1, NAN, 2));
    assert_values(fl_max(fl_add_scalar(nan_row, 1), last, 1, false), 0, 0, NAN);
    /* Constants cost nothing until read, and keep their value through views. */
    fl_tensor *zeros = fl_zeros_like(on("lazy", x));
    assert_values(fl_sum(fl_add_scalar(fl_reshape(zeros, FL_SHAPE(R * C)), 2), FL_ALL_AXES, false), 0, 0, 2.0 * R * C);
}

static void held_nodes_are_written_by_the_same_pass(void **state)
{
    fl_tensor *g = on("lazy", T_F32(FL_SHAPE(4), 1, 2, 3, 4)), *v = on("lazy", T_F32(FL_SHAPE(4), 1, 1, 1, 1));
    fl_tensor *m = fl_add(v, g); /* of two inputs, held by the scope, used below */
    /* of one input of bools: cheaper to compute again than to write and read back */
    fl_tensor *c = fl_mul_scalar(fl_cast(on("lazy", T_BOOL(FL_SHAPE(4), 1, 0, 1, 1)), FL_F32), 3);
    fl_scope scope = fl_scope_begin(); /* the other intermediates are let go */
    fl_tensor *p = fl_keep(fl_sub(fl_add(g, c), fl_div(m, fl_add_scalar(m, 1))));
    fl_scope_end(scope);
    fl_lazy_traffic_reset();
    assert_int_equal(fl_eval(p), FL_OK);
    assert_int_equal(fl_lazy_traffic_get().fused_written, 2 * 4 * 4); /* p and m */
    assert_false(pending(p));
    assert_false(pending(m));
    assert_true(pending(c));
    assert_values(m, 0, 1e-6, 2, 3, 4, 5);
    assert_values(p, 0, 1e-6, 4 - 2.0 / 3, 2 - 3.0 / 4, 6 - 4.0 / 5, 7 - 5.0 / 6);
    assert_values(c, 0, 0, 3, 0, 3, 3);
    fl_release(p);
}

static void graphs_stay_bounded_in_a_loop_that_never_reads(void **state)
{
    fl_tensor *x = fl_retain(on("lazy", T_F32(FL_SHAPE(3), 1, 2, 3)));
    for (int i = 0; i < 10000; i++) {
        fl_scope scope = fl_scope_begin();
        fl_tensor *next = fl_keep(fl_add_scalar(fl_mul_scalar(x, 0.5), 1));
        fl_scope_end(scope);
        assert_true(lazy_impl(next)->nodes <= LAZY_MAX_NODES);
        fl_release(x);
        x = next;
    }
    assert_values(x, 0, 1e-6, 2, 2, 2); /* the fixed point of x / 2 + 1 */
    fl_release(x);
    /* Reshapes count too: a graph that alternates them with operations stays within a
     * program's slots. */
    fl_tensor *m = fl_retain(on("lazy", T_F32(FL_SHAPE(2, 2), 1, 2, 3, 4)));
    for (int i = 0; i < 1000; i++) {
        fl_scope scope = fl_scope_begin();
        fl_tensor *next = fl_keep(fl_reshape(fl_add_scalar(fl_reshape(m, FL_SHAPE(4)), 1), FL_SHAPE(2, 2)));
        fl_scope_end(scope);
        fl_release(m);
        m = next;
        assert_true(lazy_impl(m)->nodes <= LAZY_MAX_NODES);
    }
    assert_values(m, 0, 0, 1001, 1002, 1003, 1004);
    fl_release(m);
}

static void traffic_counts_fused_and_unfused_bytes(void **state)
{
    enum { N = 1000 };
    fl_tensor *x = on("lazy", fl_ones(FL_F32, FL_SHAPE(N)));
    assert_int_equal(fl_eval(x), FL_OK);
    /* Built in a scope that has ended, only the result is held: one read, one write. */
    fl_scope scope = fl_scope_begin();
    fl_tensor *y = fl_keep(fl_exp(fl_add_scalar(fl_mul_scalar(x, 2), 1))); /* three operations */
    fl_scope_end(scope);
    fl_lazy_traffic_reset();
    assert_int_equal(fl_eval(y), FL_OK);
    fl_lazy_traffic t = fl_lazy_traffic_get();
    assert_int_equal(t.passes, 1);
    assert_int_equal(t.operations, 3);
    assert_int_equal(t.fused_read, 4 * N);
    assert_int_equal(t.fused_written, 4 * N);
    assert_int_equal(t.unfused_read, 3 * 4 * N + 2 * 4); /* and the two scalars */
    assert_int_equal(t.unfused_written, 3 * 4 * N);
    /* Read while the scope still holds the intermediates, they are written too. */
    fl_lazy_traffic_reset();
    fl_tensor *z = fl_exp(fl_add_scalar(fl_mul_scalar(x, 2), 1));
    assert_int_equal(fl_eval(z), FL_OK);
    assert_int_equal(fl_lazy_traffic_get().fused_written, 3 * 4 * N);
    fl_release(y);
    y = z;
    assert_values(fl_index(y, FL_INDEX(FL_AT(0))), 1e-6, 0, 20.085536923187668);
}

/* Layer norm reads its pending input four times: the mean, the mean again and the
 * squared deviations (fl_var), the normalization. The repeated mean is a copy of the
 * first, and the second pass keeps the input's values (a sum of two full-size
 * inputs), so its two operations are computed twice, not four times. */
static void a_graph_read_again_is_kept(void **state)
{
    enum { R = 3, C = 5 };
    fl_tensor *a = on("lazy", fl_arange(0, R * C, 1, FL_F32)), *b = on("lazy", fl_ones(FL_F32, FL_SHAPE(R, C)));
    assert_int_equal(fl_eval(a), FL_OK);
    assert_int_equal(fl_eval(b), FL_OK);
    fl_tensor *x = fl_add(fl_mul_scalar(fl_reshape(a, FL_SHAPE(R, C)), 2), b); /* 2 a + 1 */
    const int last[] = {-1};
    /* A graph with one full-size input is cheaper computed again than written and read. */
    fl_tensor *cheap = fl_add_scalar(fl_mul_scalar(a, 2), 1);
    assert_values(fl_sum(cheap, FL_ALL_AXES, false), 0, 0, 225);
    assert_values(fl_max(cheap, FL_ALL_AXES, false), 0, 0, 29);
    assert_true(pending(cheap));
    fl_lazy_traffic_reset();
    fl_tensor *sums = fl_sum(x, last, 1, false);
    assert_int_equal(fl_lazy_traffic_get().passes, 1);
    assert_values(fl_sum(x, last, 1, false), 0, 0, 25, 75, 125);
    assert_values(sums, 0, 0, 25, 75, 125);
    assert_int_equal(fl_lazy_traffic_get().passes, 1); /* a copy */
    assert_true(pending(x));
    fl_tensor *mean = fl_mean(x, last, 1, true), *var = fl_var(x, last, 1, 0, true);
    fl_tensor *xhat = fl_div(fl_sub(x, mean), fl_sqrt(var));
    assert_int_equal(fl_eval(xhat), FL_OK);
    fl_lazy_traffic t = fl_lazy_traffic_get();
    assert_int_equal(t.recomputed, 2);
    assert_false(pending(x));
    assert_values(x, 0, 0, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29);
    assert_values(fl_index(mean, FL_INDEX(FL_AT(2))), 0, 1e-6, 25);
    assert_values(fl_index(var, FL_INDEX(FL_AT(2))), 0, 1e-6, 8);
    double z = 2 / sqrt(8);
    assert_values(fl_index(xhat, FL_INDEX(FL_AT(1))), 1e-6, 1e-6, -2 * z, -z, 0, z, 2 * z);
}

static void reshapes_keep_a_graph_pending(void **state)
{
    fl_tensor *x = on("lazy", T_F32(FL_SHAPE(2, 3), 1, 2, 3, 4, 5, 6));
    assert_int_equal(fl_eval(x), FL_OK);
    /* A reshape of a pending graph is pending, and so is a graph built on it. */
    fl_tensor *y = fl_add(x, on("lazy", T_F32(FL_SHAPE(2, 3), 1, 2, 3, 4, 5, 6))); /* 2 x, of two inputs */
    fl_tensor *r = fl_reshape(fl_reshape(y, FL_SHAPE(3, 2)), FL_SHAPE(6));
    fl_tensor *z = fl_add(r, on("lazy", T_F32(FL_SHAPE(6), 0, 1, 0, 1, 0, 1)));
    assert_true(pending(r));
    assert_true(pending(z));
    assert_ptr_equal(lazy_impl(r)->args[0], y); /* a reshape of a reshape refers to the operation */
    /* Fused reductions read through it: rows of 2 are trailing axes of [3, 2]. */
    assert_values(fl_sum(fl_reshape(z, FL_SHAPE(3, 2)), FL_AXES(-1), false), 0, 1e-6, 7, 15, 23);
    /* One pass writes z, and y (held by this scope) once: r is a view of y. */
    fl_lazy_traffic_reset();
    assert_values(z, 0, 1e-6, 2, 5, 6, 9, 10, 13);
    assert_int_equal(fl_lazy_traffic_get().passes, 1);
    assert_int_equal(fl_lazy_traffic_get().fused_written, 2 * 6 * 4);
    assert_false(pending(r));
    assert_ptr_equal(cpu_data(lazy_impl(r)->value), cpu_data(lazy_impl(y)->value));
    assert_values(r, 0, 0, 2, 4, 6, 8, 10, 12);
    /* A reshape whose operand was read after it was made is a view without a pass. */
    fl_tensor *w = fl_add_scalar(x, 1), *v = fl_reshape(w, FL_SHAPE(6));
    assert_values(w, 0, 0, 2, 3, 4, 5, 6, 7);
    fl_lazy_traffic_reset();
    assert_values(v, 0, 0, 2, 3, 4, 5, 6, 7);
    assert_int_equal(fl_lazy_traffic_get().passes, 0);
    assert_ptr_equal(cpu_data(lazy_impl(v)->value), cpu_data(lazy_impl(w)->value));
    /* Not held from outside, the reshaped operation is computed inside the pass. */
    fl_scope scope = fl_scope_begin();
    fl_tensor *t = fl_keep(fl_reshape(fl_exp(fl_mul_scalar(x, 0)), FL_SHAPE(3, 2)));
    fl_scope_end(scope);
    fl_lazy_traffic_reset();
    assert_values(t, 0, 0, 1, 1, 1, 1, 1, 1);
    assert_int_equal(fl_lazy_traffic_get().fused_written, 6 * 4);
    fl_release(t);
}

static void casts_to_f32_are_read_by_the_pass(void **state)
{
    /* Each dtype a pass converts, fused with arithmetic, as the cpu backend computes it;
     * the integers are transposed (strided) and the bool row broadcast. */
    fl_tensor *b = on("lazy", T_BOOL(FL_SHAPE(1, 3), 1, 0, 1));
    fl_tensor *u = on("lazy", T_U8(FL_SHAPE(2, 3), 0, 1, 2, 200, 254, 255));
    fl_tensor *i = on("lazy", T_I32(FL_SHAPE(3, 2), -1, 4, 2, -5, 3, 6));
    fl_tensor *l = on("lazy", T_I64(FL_SHAPE(3, 2), 16777217, 0, -2, 7, 1, 1));
    fl_tensor *d = on("lazy", T_F64(FL_SHAPE(2, 3), 0.1, 1e40, -2.5, 1, 2, 3));
    const fl_tensor *sources[] = {b, u, i, l, d};
    fl_tensor *converted[5];
    for (int k = 0; k < 5; k++) {
        const fl_tensor *t = fl_ndim(sources[k]) == 2 && fl_dim(sources[k], 0) == 3 ? fl_transpose(sources[k], 0, 1)
                                                                                   : sources[k];
        converted[k] = fl_mul_scalar(fl_cast(t, FL_F32), 2);
        assert_true(pending(converted[k]));
        if (fl_dim(t, 0) == 1)
            converted[k] = fl_add(converted[k], on("lazy", fl_zeros(FL_F32, FL_SHAPE(2, 3))));
        fl_tensor *expected = fl_mul_scalar(fl_cast(fl_to_backend(t, "cpu"), FL_F32), 2);
        assert_close(converted[k], fl_broadcast_to(expected, FL_SHAPE(2, 3)), 0, 0);
    }
    /* A conversion read by a reduction is fused with it; one held stays a conversion,
     * and every pass that reads it reads the bools. */
    fl_tensor *mask = fl_cast(on("lazy", T_BOOL(FL_SHAPE(2, 3), 1, 1, 0, 0, 1, 0)), FL_F32);
    assert_values(fl_sum(mask, FL_ALL_AXES, false), 0, 0, 3);
    assert_true(pending(mask));
    fl_tensor *scaled = fl_mul_scalar(mask, 2);
    fl_lazy_traffic_reset();
    assert_values(scaled, 0, 0, 2, 2, 0, 0, 2, 0);
    fl_lazy_traffic t = fl_lazy_traffic_get();
    assert_int_equal(t.fused_read, 6);            /* six bools */
    assert_int_equal(t.fused_written, 6 * 4);     /* the result */
    assert_true(pending(mask));
    assert_values(mask, 0, 0, 1, 1, 0, 0, 1, 0);
    /* Halves and conversions to other dtypes run on cpu at once. */
    assert_false(pending(fl_cast(on("lazy", fl_ones(FL_F16, FL_SHAPE(2))), FL_F32)));
    assert_false(pending(fl_cast(i, FL_F64)));
}

static void delegated_operations_and_errors(void **state)
{
    /* Operations the backend does not fuse run on cpu with materialized operands. */
    fl_tensor *a = on("lazy", T_F32(FL_SHAPE(2, 2), 1, 2, 3, 4));
    fl_tensor *b = fl_add_scalar(a, 1); /* pending */
    assert_values(fl_matmul(b, b), 0, 1e-6, 2 * 2 + 3 * 4, 2 * 3 + 3 * 5, 4 * 2 + 5 * 4, 4 * 3 + 5 * 5);
    assert_values(fl_argmax(fl_neg(a), 1, false), 0, 0, 0, 0);
    assert_values(fl_cast(fl_add_scalar(a, 0.5), FL_I32), 0, 0, 1, 2, 3, 4);
    /* A constant operand of a delegated primitive is one element viewed in its shape,
     * never written out in full; fl_eval writes a constant out. */
    const char *previous = fl_default_backend()->name;
    fl_set_default_backend("lazy");
    fl_tensor *zeros = fl_zeros_like(a), *filled = fl_zeros_like(a), *dense = fl_zeros_like(a);
    fl_set_default_backend(previous);
    assert_values(fl_scatter_add(zeros, 0, on("lazy", T_I64(FL_SHAPE(1, 2), 1, 0)), a), 0, 0, 0, 2, 1, 0);
    assert_false(pending(zeros));
    assert_int_equal(cpu_impl(lazy_impl(zeros)->value)->strides[0], 0);
    assert_int_equal(cpu_impl(lazy_impl(zeros)->value)->strides[1], 0);
    assert_values(fl_eq(fl_sub_scalar(a, 2), filled), 0, 0, 0, 1, 0, 0);
    assert_int_equal(cpu_impl(lazy_impl(filled)->value)->strides[0], 0);
    assert_int_equal(fl_eval(dense), FL_OK);
    assert_true(cpu_contiguous(lazy_impl(dense)->value));
    /* Integer work is not deferred. */
    fl_tensor *i = fl_add_scalar(on("lazy", T_I32(FL_SHAPE(2), 1, 2)), 1);
    assert_false(pending(i));
    assert_values(i, 0, 0, 2, 3);
    /* Softmax runs on cpu's fused kernel; without it, lazy declines and the tensor
     * layer composes softmax, which lazy fuses. */
    fl_tensor *p = fl_softmax(b, -1);
    assert_values(p, 1e-6, 0, 1 / (1 + exp(1)), 1 / (1 + exp(-1)), 1 / (1 + exp(1)), 1 / (1 + exp(-1)));
    assert_false(pending(p));
    fl_backend cpu = support_derive("cpu");
    cpu.softmax = NULL;
    fl_backend original = support_override(&cpu);
    fl_tensor *composed = fl_log_softmax(b, -1);
    support_override(&original);
    assert_close(composed, fl_log_softmax(b, -1), 1e-6, 1e-6);
    assert_no_error();
    /* A failing delegated primitive reports through the tensor layer, naming lazy. */
    assert_fails(fl_matmul(b, on("lazy", T_F32(FL_SHAPE(3, 1), 1, 2, 3))), FL_ERR_SHAPE, "fl_matmul");
}

/* Every compilable operation, a broadcast row, a strided operand, a converted mask,
 * constants, NaN and infinities, and a node held from outside (written by the same
 * pass): big enough to be compiled. */
static fl_tensor *compilable(const fl_tensor *x, const fl_tensor *row, const fl_tensor *xt, const fl_tensor *mask,
                             fl_tensor **held)
{
    fl_tensor *y = fl_add(fl_mul(x, row), fl_transpose(xt, 0, 1));
    *held = y = fl_sub(fl_mul(y, fl_cast(mask, FL_F32)), fl_tanh(fl_sigmoid(y)));
    y = fl_add(fl_erf(y), fl_div(fl_exp(fl_neg(fl_abs(y))), fl_log1p(fl_sqrt(fl_abs(y)))));
    y = fl_maximum(fl_minimum(y, fl_rsqrt(fl_add_scalar(fl_abs(y), 1))), fl_floor(y));
    y = fl_add(y, fl_mul(fl_ceil(fl_mul_scalar(y, 3)), fl_round(fl_log(fl_add_scalar(fl_abs(y), 0.5)))));
    return fl_add(y, fl_sign(y));
}

static char logged[8192];
static int log_calls;

static void capture(fl_log_level level, const char *message, void *user)
{
    log_calls++;
    snprintf(logged, sizeof logged, "%s", message);
}

static void compiled_kernels_match_the_interpreter(void **state)
{
    enum { R = 300, C = 257 }; /* over LAZY_COMPILE_MIN elements; tiles end mid-row */
    fl_manual_seed(5);
    fl_tensor *x = fl_randn(FL_F32, FL_SHAPE(R, C)), *row = fl_randn(FL_F32, FL_SHAPE(C));
    fl_tensor *xt = fl_randn(FL_F32, FL_SHAPE(C, R)), *mask = fl_lt(fl_rand(FL_F32, FL_SHAPE(R, C)), fl_scalar(0.9, FL_F32));
    x = fl_index_assign(x, FL_INDEX(FL_AT(7), FL_RANGE(0, 3)), T_F32(FL_SHAPE(3), NAN, INFINITY, -INFINITY));
    x = on("lazy", x), row = on("lazy", row), xt = on("lazy", xt), mask = on("lazy", mask);
    const int last[] = {-1};
    fl_tensor *held[2], *y[2], *sums[2], *gelu[2][2][2];
    lazy_compile_stats before = lazy_compile_stats_get();
    for (int compiled = 0; compiled < 2; compiled++) {
        lazy_compile_set_mode(compiled ? LAZY_COMPILE_SYNC : LAZY_COMPILE_OFF);
        y[compiled] = compilable(x, row, xt, mask, &held[compiled]);
        assert_int_equal(fl_eval(y[compiled]), FL_OK);
        /* a fused trailing reduction, and GELU's value and gradient (lazy graph nodes) */
        sums[compiled] = fl_sum(fl_mul(fl_add(x, row), fl_abs(x)), last, 1, true);
        for (int approximate = 0; approximate < 2; approximate++) {
            fl_variable *v = fl_v_new(x, true), *g = fl_v_gelu(v, approximate);
            assert_int_equal(fl_v_backward(g, fl_mul(x, row), false), FL_OK);
            gelu[compiled][approximate][0] = fl_retain(fl_v_value(g));
            gelu[compiled][approximate][1] = fl_retain(fl_v_grad(v));
            fl_eval(gelu[compiled][approximate][0]);
            fl_eval(gelu[compiled][approximate][1]);
        }
    }
    lazy_compile_set_mode(LAZY_COMPILE_ASYNC);
    lazy_compile_stats after = lazy_compile_stats_get();
    assert_true(after.compiled + after.loaded > before.compiled + before.loaded);
    assert_int_equal(after.failed, before.failed);
    assert_close(y[1], y[0], 0, 0);
    assert_close(held[1], held[0], 0, 0);
    assert_close(sums[1], sums[0], 1e-6, 1e-6);
    for (int approximate = 0; approximate < 2; approximate++)
        for (int k = 0; k < 2; k++) {
            assert_close(gelu[1][approximate][k], gelu[0][approximate][k], 0, 0); /* bit for bit */
            fl_release(gelu[0][approximate][k]);
            fl_release(gelu[1][approximate][k]);
        }
    /* A compiler that fails: reported once, counted, and the pass is interpreted. */
    /* It goes to the log callback, and nothing to stderr. */
    lazy_compile_set_compiler("false");
    lazy_compile_set_mode(LAZY_COMPILE_SYNC);
    fl_set_log(capture, NULL);
    fflush(stderr);
    FILE *written = tmpfile();
    int saved = dup(STDERR_FILENO);
    dup2(fileno(written), STDERR_FILENO);
    fl_tensor *odd = fl_ceil(fl_floor(fl_ceil(fl_mul_scalar(x, 7)))); /* a program nothing else compiles */
    assert_int_equal(fl_eval(odd), FL_OK);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    fl_set_log(NULL, NULL);
    assert_int_equal(ftell(written), 0);
    fclose(written);
    lazy_compile_set_mode(LAZY_COMPILE_ASYNC);
    lazy_compile_set_compiler(NULL);
    assert_int_equal(log_calls, 1);
    assert_non_null(strstr(logged, "could not compile a fused kernel with 'false' (exit status 1; its output, kept in"));
    assert_int_equal(lazy_compile_stats_get().failed, after.failed + 1);
    assert_close(odd, fl_ceil(fl_mul_scalar(fl_to_backend(x, "cpu"), 7)), 0, 0);
    assert_no_error();
}

/* Threads that read one shared pending tensor race to materialize it: each must see
 * the node computed once, never a node whose operands another thread freed. */
typedef struct {
    const fl_tensor *shared;
    float sum;
} reader;

static void *transpose_and_read(void *arg)
{
    reader *r = arg;
    fl_scope scope = fl_scope_begin();
    fl_tensor *t = fl_transpose(r->shared, 0, 1);
    r->sum = t ? (float)fl_item(fl_sum(t, FL_ALL_AXES, false)) : NAN;
    fl_scope_end(scope);
    return NULL;
}

static void threads_share_a_pending_tensor(void **state)
{
    int64_t shape[] = {64, 33};
    fl_tensor *x = on("lazy", fl_ones(FL_F32, 2, shape));
    for (int round = 0; round < 200; round++) {
        fl_scope scope = fl_scope_begin();
        fl_tensor *y = fl_add_scalar(fl_mul_scalar(fl_exp(fl_mul_scalar(x, 0)), 2), 1); /* 3 everywhere */
        assert_true(pending(y));
        reader readers[4];
        pthread_t threads[4];
        for (int i = 0; i < 4; i++) {
            readers[i] = (reader){y, 0};
            assert_int_equal(pthread_create(&threads[i], NULL, transpose_and_read, &readers[i]), 0);
        }
        for (int i = 0; i < 4; i++) {
            pthread_join(threads[i], NULL);
            assert_float_equal(readers[i].sum, 3 * 64 * 33, 0);
        }
        assert_false(pending(y));
        fl_scope_end(scope);
    }
    assert_no_error();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        scoped_test(fused_values_match_the_cpu_backend),
        scoped_test(held_nodes_are_written_by_the_same_pass),
        scoped_test(graphs_stay_bounded_in_a_loop_that_never_reads),
        scoped_test(traffic_counts_fused_and_unfused_bytes),
        scoped_test(a_graph_read_again_is_kept),
        scoped_test(reshapes_keep_a_graph_pending),
        scoped_test(casts_to_f32_are_read_by_the_pass),
        scoped_test(delegated_operations_and_errors),
        scoped_test(compiled_kernels_match_the_interpreter),
        scoped_test(threads_share_a_pending_tensor),
    };
    return cmocka_run_group_tests_name("lazy", tests, NULL, NULL);
}
