/* The autograd engine: accumulation, retained graphs, no-grad, hooks, user functions,
 * memory release, errors; and finite-difference checks of the functions in
 * src/autograd/arithmetic.c, linalg.c, reduce.c and activation.c. */
#include <math.h>

#include "gradcheck.h"

#define V(t, grad) fl_v_new((t), (grad))

/* ---- the engine ---- */

static void gradients_accumulate_across_backward_calls(void **state)
{
    fl_variable *x = V(T_F32(FL_SHAPE(3), 1, 2, 3), true);
    fl_variable *y = fl_v_sum(fl_v_mul(x, x), FL_ALL_AXES, false); /* dy/dx = 2x */
    assert_int_equal(fl_v_backward(y, NULL, true), FL_OK);
    assert_values(fl_v_grad(x), 0, 0, 2, 4, 6);
    assert_int_equal(fl_v_backward(y, NULL, false), FL_OK);
    assert_values(fl_v_grad(x), 0, 0, 4, 8, 12);
    fl_v_zero_grad(x);
    assert_null(fl_v_grad(x));
}

static void a_freed_graph_cannot_be_walked_again(void **state)
{
    fl_variable *x = V(T_F32(FL_SHAPE(2), 1, 2), true);
    fl_variable *y = fl_v_sum(fl_v_mul(x, x), FL_ALL_AXES, false);
    assert_int_equal(fl_v_backward(y, NULL, false), FL_OK);
    assert_fails_status(fl_v_backward(y, NULL, false), FL_ERR_VALUE, "retain_graph");
}

static void a_shared_subexpression_gets_the_sum_of_its_gradients(void **state)
{
    /* z = (x*x) used twice: d/dx sum(z + z*3) = 2x * 4 */
    fl_variable *x = V(T_F64(FL_SHAPE(2), 1.5, -2), true);
    fl_variable *z = fl_v_mul(x, x);
    fl_variable *y = fl_v_add(z, fl_v_mul(z, V(fl_scalar(3, FL_F64), false)));
    assert_int_equal(fl_v_backward(fl_v_sum(y, FL_ALL_AXES, false), NULL, false), FL_OK);
    assert_values(fl_v_grad(x), 0, 1e-12, 12, -16);
}

static void broadcast_gradients_are_summed_to_the_input_shape(void **state)
{
    fl_variable *a = V(T_F32(FL_SHAPE(2, 3), 1, 2, 3, 4, 5, 6), true);
    fl_variable *row = V(T_F32(FL_SHAPE(3), 10, 20, 30), true);
    fl_variable *col = V(T_F32(FL_SHAPE(2, 1), 1, 2), true);
    fl_variable *y = fl_v_mul(fl_v_add(a, row), col);
    assert_int_equal(fl_v_backward(y, fl_ones(FL_F32, FL_SHAPE(2, 3)), false), FL_OK);
    assert_shape(fl_v_grad(row), 3);
    assert_values(fl_v_grad(row), 0, 0, 3, 3, 3);
    assert_shape(fl_v_grad(col), 2, 1);
    assert_values(fl_v_grad(col), 0, 0, 66, 75);
    assert_values(fl_v_grad(a), 0, 0, 1, 1, 1, 2, 2, 2);
}

static void gradients_keep_the_dtype_of_their_input(void **state)
{
    fl_variable *a = V(T_F32(FL_SHAPE(2), 1, 2), true);
    fl_variable *b = V(T_F64(FL_SHAPE(2), 3, 4), true);
    assert_int_equal(fl_v_backward(fl_v_sum(fl_v_mul(a, b), FL_ALL_AXES, false), NULL, false), FL_OK);
    assert_dtype(fl_v_grad(a), FL_F32);
    assert_dtype(fl_v_grad(b), FL_F64);
    assert_values(fl_v_grad(a), 0, 0, 3, 4);
}

static void nothing_is_recorded_without_grad(void **state)
{
    fl_variable *x = V(T_F32(FL_SHAPE(2), 1, 2), true);
    bool was = fl_set_grad_enabled(false);
    assert_true(was);
    fl_variable *y = fl_v_mul(x, x);
    assert_false(fl_v_requires_grad(y));
    assert_true(fl_v_is_leaf(y));
    fl_set_grad_enabled(true);
    assert_fails_status(fl_v_backward(fl_v_sum(y, FL_ALL_AXES, false), NULL, false), FL_ERR_VALUE,
                        "does not require a gradient");
    /* Constants are not differentiated. */
    fl_variable *c = V(T_F32(FL_SHAPE(2), 5, 6), false);
    assert_int_equal(fl_v_backward(fl_v_sum(fl_v_mul(x, c), FL_ALL_AXES, false), NULL, false), FL_OK);
    assert_null(fl_v_grad(c));
    assert_values(fl_v_grad(x), 0, 0, 5, 6);
}

static void detach_cuts_the_tape(void **state)
{
    fl_variable *x = V(T_F32(FL_SHAPE(2), 1, 2), true);
    fl_variable *d = fl_v_detach(fl_v_mul(x, x));
    assert_false(fl_v_requires_grad(d));
    assert_values(fl_v_value(d), 0, 0, 1, 4);
}

typedef struct hook_log {
    int calls;
    double grad0;
} hook_log;

static void log_hook(fl_variable *leaf, void *user)
{
    hook_log *log = user;
    log->calls++;
    double g[2];
    fl_to_host(fl_v_grad(leaf), g, sizeof g);
    log->grad0 = g[0];
}

static void a_hook_runs_once_the_leaf_gradient_is_complete(void **state)
{
    /* x reaches the loss by three paths; the hook sees the full gradient once. */
    fl_variable *x = V(T_F64(FL_SHAPE(2), 1, 2), true);
    hook_log log = {0};
    assert_int_equal(fl_v_add_grad_hook(x, log_hook, &log), FL_OK);
    fl_variable *y = fl_v_add(fl_v_mul(x, x), fl_v_add(x, x));
    assert_int_equal(fl_v_backward(fl_v_sum(y, FL_ALL_AXES, false), NULL, false), FL_OK);
    assert_int_equal(log.calls, 1);
    assert_float_equal(log.grad0, 4.0, 0); /* 2x + 2 */
    assert_fails_status(fl_v_add_grad_hook(fl_v_mul(x, x), log_hook, &log), FL_ERR_VALUE, "leaves");
}

/* The paper's Listing 4, as a user writes it. */
static void cos_grad(fl_grad *g)
{
    g->input_grads[0] = fl_mul(g->output_grad, fl_neg(fl_sin(g->saved[0])));
}

static fl_variable *my_cos(fl_variable *x)
{
    const fl_tensor *v = fl_v_value(x);
    return fl_v_record(fl_cos(v), FL_VARS(x), cos_grad, FL_SAVE(v), NULL, 0);
}

static fl_variable *cos_of(fl_variable *const *x, void *ctx) { return my_cos(x[0]); }

static void a_user_defined_function_is_differentiated(void **state)
{
    assert_gradcheck(cos_of, NULL, gradcheck_input(-3, 3, FL_SHAPE(7)));
}

static void gradient_memory_is_released_as_the_pass_goes(void **state)
{
    /* A chain of 8 multiplications of 4 MiB tensors: once backward is over and the
     * graph freed, only x, its gradient and the result remain. */
    fl_memory_stats before, after;
    fl_variable *x = V(fl_ones(FL_F32, FL_SHAPE(1024, 1024)), true);
    fl_memory_stats_get(&before);
    fl_scope scope = fl_scope_begin();
    fl_variable *y = x;
    for (int i = 0; i < 8; i++)
        y = fl_v_mul(y, V(fl_full(1.01, FL_F32, FL_SHAPE(1024, 1024)), false));
    fl_variable *loss = fl_v_keep(fl_v_sum(y, FL_ALL_AXES, false));
    fl_scope_end(scope);
    assert_int_equal(fl_v_backward(loss, NULL, false), FL_OK);
    fl_memory_stats_get(&after);
    /* x's gradient is the only large tensor made. */
    assert_true(after.in_use - before.in_use <= 4u * 1024 * 1024 + 65536);
    fl_v_release(loss);
}

static void errors_are_clear(void **state)
{
    fl_variable *x = V(T_F32(FL_SHAPE(2), 1, 2), true);
    assert_fails(fl_v_new(T_I32(FL_SHAPE(2), 1, 2), true), FL_ERR_DTYPE, "floating-point");
    assert_fails_status(fl_v_backward(fl_v_mul(x, x), NULL, false), FL_ERR_SHAPE, "more than one element");
    assert_fails_status(fl_v_backward(fl_v_mul(x, x), fl_ones(FL_F32, FL_SHAPE(3)), false), FL_ERR_SHAPE, "f32[3]");
    assert_fails_status(fl_v_set_value(x, fl_ones(FL_F32, FL_SHAPE(3))), FL_ERR_SHAPE, "f32[2]");
    assert_fails_status(fl_v_set_value(fl_v_mul(x, x), fl_ones(FL_F32, FL_SHAPE(2))), FL_ERR_VALUE, "leaf");
    assert_fails_status(fl_v_set_grad(fl_v_mul(x, x), fl_ones(FL_F32, FL_SHAPE(2))), FL_ERR_VALUE,
                        "fl_v_set_grad: only a leaf's gradient can be replaced");
    assert_fails(fl_v_record(fl_v_value(x), (fl_variable *const[]){x}, -1, cos_grad, NULL, 0,
                             NULL, 0),
                 FL_ERR_VALUE, "fl_v_record: invalid lists of -1 inputs and 0 saved tensors");
    assert_fails(fl_v_record(fl_v_value(x), (fl_variable *const[]){x}, 1, cos_grad, NULL, -2, NULL, 0), FL_ERR_VALUE,
                 "-2 saved tensors");
    assert_fails(fl_v_add(x, NULL), FL_ERR_NULL, "fl_v_add");
    assert_fails(fl_v_matmul(x, V(T_F32(FL_SHAPE(3), 1, 2, 3), true)), FL_ERR_SHAPE, "fl_matmul");
    /* A NULL from an earlier failure propagates without a new message. */
    assert_null(fl_v_relu(fl_v_matmul(x, V(T_F32(FL_SHAPE(3), 1, 2, 3), true))));
    assert_fails(NULL, FL_ERR_SHAPE, "fl_matmul");
}

/* ---- finite-difference checks ---- */

static fl_variable *add_of(fl_variable *const *x, void *ctx) { return fl_v_add(x[0], x[1]); }
static fl_variable *sub_of(fl_variable *const *x, void *ctx) { return fl_v_sub(x[0], x[1]); }
static fl_variable *mul_of(fl_variable *const *x, void *ctx) { return fl_v_mul(x[0], x[1]); }
static fl_variable *div_of(fl_variable *const *x, void *ctx) { return fl_v_div(x[0], x[1]); }
static fl_variable *matmul_of(fl_variable *const *x, void *ctx) { return fl_v_matmul(x[0], x[1]); }
static fl_variable *relu_of(fl_variable *const *x, void *ctx) { return fl_v_relu(x[0]); }

static void arithmetic_gradients(void **state)
{
    gradcheck_fn fns[] = {add_of, sub_of, mul_of, div_of};
    for (int i = 0; i < 4; i++) {
        assert_gradcheck(fns[i], NULL, gradcheck_input(0.5, 2, FL_SHAPE(2, 3)), gradcheck_input(0.5, 2, FL_SHAPE(2, 3)));
        /* broadcast both ways */
        assert_gradcheck(fns[i], NULL, gradcheck_input(0.5, 2, FL_SHAPE(2, 1, 3)), gradcheck_input(0.5, 2, FL_SHAPE(4, 1)));
        assert_gradcheck(fns[i], NULL, gradcheck_input(0.5, 2, FL_SHAPE(3)), gradcheck_input(0.5, 2, FL_SHAPE()));
    }
}

static void matmul_gradients(void **state)
{
    int64_t cases[][2][4] = {
        {{2, 3}, {3, 4}},       {{3}, {3, 4}},       {{2, 3}, {3}},     {{3}, {3}},
        {{2, 2, 3}, {3, 4}},    {{5, 3}, {2, 3, 4}}, {{2, 1, 2, 3}, {3, 3, 2}},
    };
    int ndims[][2] = {{2, 2}, {1, 2}, {2, 1}, {1, 1}, {3, 2}, {2, 3}, {4, 3}};
    for (int i = 0; i < 7; i++)
        assert_gradcheck(matmul_of, NULL, gradcheck_input(-1, 1, ndims[i][0], cases[i][0]),
                         gradcheck_input(-1, 1, ndims[i][1], cases[i][1]));
}

typedef struct sum_case {
    int axes[2], count;
    bool keepdims;
} sum_case;

static fl_variable *sum_of(fl_variable *const *x, void *ctx)
{
    sum_case *c = ctx;
    return fl_v_sum(x[0], c->count ? c->axes : NULL, c->count, c->keepdims);
}

static void sum_gradients(void **state)
{
    sum_case cases[] = {{{0}, 0, false}, {{1}, 1, false}, {{0, 2}, 2, true}, {{-1}, 1, true}};
    for (int i = 0; i < 4; i++)
        assert_gradcheck(sum_of, &cases[i], gradcheck_input(-1, 1, FL_SHAPE(2, 3, 4)));
}

static void relu_gradient(void **state)
{
    /* away from the kink at 0, where differences are meaningless */
    fl_tensor *x = T_F64(FL_SHAPE(6), -2, -0.5, -0.1, 0.1, 0.7, 3);
    assert_gradcheck(relu_of, NULL, x);
    /* At the kink and at NaN, PyTorch's values: 0 at 0 (and -0), dy at NaN. */
    fl_variable *v = V(T_F32(FL_SHAPE(5), -1, 0, -0.0, 2, NAN), true);
    fl_v_backward(fl_v_relu(v), T_F32(FL_SHAPE(5), 5, 6, 7, 8, 9), false);
    assert_values(fl_v_grad(v), 0, 0, 0, 0, 0, 8, 9);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        scoped_test(gradients_accumulate_across_backward_calls),
        scoped_test(a_freed_graph_cannot_be_walked_again),
        scoped_test(a_shared_subexpression_gets_the_sum_of_its_gradients),
        scoped_test(broadcast_gradients_are_summed_to_the_input_shape),
        scoped_test(gradients_keep_the_dtype_of_their_input),
        scoped_test(nothing_is_recorded_without_grad),
        scoped_test(detach_cuts_the_tape),
        scoped_test(a_hook_runs_once_the_leaf_gradient_is_complete),
        scoped_test(a_user_defined_function_is_differentiated),
        scoped_test(gradient_memory_is_released_as_the_pass_goes),
        scoped_test(errors_are_clear),
        scoped_test(arithmetic_gradients),
        scoped_test(matmul_gradients),
        scoped_test(sum_gradients),
        scoped_test(relu_gradient),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
