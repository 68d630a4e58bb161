/* The backend table is open: replacing one entry at run time changes what every
 * layer above uses. Here `add` is wrapped with a counter, and composite operations
 * that add (a linear layer's bias, logsumexp's shift, a random draw moved to its
 * mean) are seen going through the replacement; likewise `sum` under mean and
 * variance, which are built on it. */
#include "support.h"

static fl_binary_fn original_add;
static int add_calls;

static int counting_add(fl_tensor *out, const fl_tensor *a, const fl_tensor *b)
{
    add_calls++;
    return original_add(out, a, b);
}

static void replace_add(void)
{
    fl_backend *backend = fl_default_backend();
    original_add = backend->add;
    backend->add = counting_add;
    add_calls = 0;
}

static void restore_add(void) { fl_default_backend()->add = original_add; }

static void composites_go_through_the_replaced_add(void **state)
{
    replace_add();
    fl_tensor *x = T_F32(FL_SHAPE(2, 3), 1, 2, 3, 4, 5, 6);
    fl_tensor *w = T_F32(FL_SHAPE(3, 2), 1, 0, 0, 1, 1, 1);
    fl_tensor *bias = T_F32(FL_SHAPE(2), 10, 20);

    /* A linear layer: x @ w + bias. */
    int before = add_calls;
    fl_tensor *y = fl_add(fl_matmul(x, w), bias);
    assert_values(y, 0, 1e-6, 14, 25, 20, 31);
    assert_true(add_calls > before);

    /* Composites built on add in the tensor layer. */
    before = add_calls;
    assert_values(fl_normal(5, 0, FL_F32, FL_SHAPE(2)), 0, 0, 5, 5);
    assert_true(add_calls > before);
    before = add_calls;
    assert_values(fl_logsumexp(T_F32(FL_SHAPE(2), 0, 0), FL_ALL_AXES, false), 1e-6, 0, 0.69314718);
    assert_true(add_calls > before);

    /* A replacement that changes results changes them everywhere. */
    restore_add();
    fl_backend *backend = fl_default_backend();
    original_add = backend->add;
    backend->add = backend->sub; /* a deliberately wrong "add" */
    assert_values(fl_add_scalar(x, 1), 0, 0, 0, 1, 2, 3, 4, 5);
    restore_add();
    assert_values(fl_add_scalar(x, 1), 0, 0, 2, 3, 4, 5, 6, 7);
}

static fl_reduce_fn original_sum;
static int sum_calls;

static int counting_sum(fl_tensor *out, const fl_tensor *a, unsigned axes)
{
    sum_calls++;
    return original_sum(out, a, axes);
}

static void mean_and_variance_go_through_the_replaced_sum(void **state)
{
    fl_backend *backend = fl_default_backend();
    original_sum = backend->sum;
    backend->sum = counting_sum;
    fl_tensor *x = T_F32(FL_SHAPE(2, 2), 1, 2, 3, 6);
    assert_values(fl_mean(x, FL_AXES(1), false), 1e-6, 0, 1.5, 4.5);
    assert_int_equal(sum_calls, 1);
    assert_values(fl_var(x, FL_ALL_AXES, 0, false), 1e-6, 0, 3.5);
    assert_true(sum_calls >= 3);
    backend->sum = original_sum;
}

static int failing_add(fl_tensor *out, const fl_tensor *a, const fl_tensor *b)
{
    (void)out, (void)a, (void)b;
    return fl_backend_error(FL_ERR_BACKEND, "the replaced add failed");
}

/* A backend's message is the cause reported for the operation that failed, never one
 * left behind by an earlier direct call that fl_clear_error discarded. */
static void a_failing_primitive_reports_its_own_message(void **state)
{
    fl_backend_error(FL_ERR_DTYPE, "left behind by a direct call");
    fl_clear_error();
    fl_backend *backend = fl_default_backend();
    original_add = backend->add;
    backend->add = failing_add;
    fl_tensor *x = T_F32(FL_SHAPE(2), 1, 2);
    fl_tensor *y = fl_add(x, x);
    restore_add();
    assert_fails(y, FL_ERR_BACKEND, "fl_add: the replaced add failed");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        scoped_test(composites_go_through_the_replaced_add),
        scoped_test(mean_and_variance_go_through_the_replaced_sum),
        scoped_test(a_failing_primitive_reports_its_own_message),
    };
    return cmocka_run_group_tests_name("backend", tests, NULL, NULL);
}
