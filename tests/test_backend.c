/* The backend table is an open contract: a table derived from a registered one, with
 * an entry overridden and registered under the same name, changes what every layer
 * above uses. Here `add` is wrapped with a counter that calls the entry it replaced
 * through self->base, and composite operations that add (a linear layer's bias,
 * logsumexp's shift, a random draw moved to its mean) are seen going through it;
 * likewise `sum` under mean and variance. Then the contract itself: versions and
 * sizes checked at registration, registered tables immutable, and what a replaced
 * cpu entry means under the lazy backend. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "support.h"

static int add_calls;

static int counting_add(const fl_backend *self, fl_tensor *out, const fl_tensor *a, const fl_tensor *b)
{
    add_calls++;
    return self->base->add(self->base, out, a, b);
}

static int subtracting_add(const fl_backend *self, fl_tensor *out, const fl_tensor *a, const fl_tensor *b)
{
    return self->base->sub(self->base, out, a, b);
}

static fl_backend override_add(fl_binary_fn add)
{
    fl_backend derived = support_derive(fl_default_backend()->name);
    derived.add = add;
    add_calls = 0;
    return support_override(&derived);
}

static void composites_go_through_the_replaced_add(void **state)
{
    fl_backend original = override_add(counting_add);
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

    /* A replacement that changes results changes them everywhere, also for tensors
     * made before it (their table releases storage alike, so they meet in one call). */
    support_override(&original);
    override_add(subtracting_add);
    assert_values(fl_add_scalar(x, 1), 0, 0, 0, 1, 2, 3, 4, 5);
    support_override(&original);
    assert_values(fl_add_scalar(x, 1), 0, 0, 2, 3, 4, 5, 6, 7);
}

static int sum_calls;

static int counting_sum(const fl_backend *self, fl_tensor *out, const fl_tensor *a, unsigned axes)
{
    sum_calls++;
    return self->base->sum(self->base, out, a, axes);
}

static void mean_and_variance_go_through_the_replaced_sum(void **state)
{
    fl_backend derived = support_derive(fl_default_backend()->name);
    derived.sum = counting_sum;
    fl_backend original = support_override(&derived);
    fl_tensor *x = T_F32(FL_SHAPE(2, 2), 1, 2, 3, 6);
    assert_values(fl_mean(x, FL_AXES(1), false), 1e-6, 0, 1.5, 4.5);
    assert_int_equal(sum_calls, 1);
    assert_values(fl_var(x, FL_ALL_AXES, 0, false), 1e-6, 0, 3.5);
    assert_true(sum_calls >= 3);
    support_override(&original);
}

static int failing_add(const fl_backend *self, fl_tensor *out, const fl_tensor *a, const fl_tensor *b)
{
    (void)self, (void)out, (void)a, (void)b;
    return fl_backend_error(FL_ERR_BACKEND, "the replaced add failed");
}

/* A backend's message is the cause reported for the operation that failed, never one
 * left behind by an earlier direct call that fl_clear_error discarded. */
static void a_failing_primitive_reports_its_own_message(void **state)
{
    fl_backend_error(FL_ERR_DTYPE, "left behind by a direct call");
    fl_clear_error();
    fl_backend original = override_add(failing_add);
    fl_tensor *x = T_F32(FL_SHAPE(2), 1, 2);
    fl_tensor *y = fl_add(x, x);
    support_override(&original);
    assert_fails(y, FL_ERR_BACKEND, "fl_add: the replaced add failed");
}

/* One list makes the struct, the names, the versions and the sizes. */
static void the_entry_list_describes_the_table(void **state)
{
    int count = fl_backend_primitive_count();
    assert_string_equal(fl_backend_primitive_name(0), "from_host");
    assert_string_equal(fl_backend_primitive_name(count - 1), "adam_update");
    assert_null(fl_backend_primitive_name(count));
    assert_int_equal(sizeof(fl_backend), offsetof(fl_backend, adam_update) + sizeof(void *));
    assert_int_equal(fl_backend_size(FL_BACKEND_VERSION), sizeof(fl_backend));
    assert_int_equal(fl_backend_size(1), offsetof(fl_backend, gelu) + sizeof(void *));
    assert_int_equal(fl_backend_size(2), offsetof(fl_backend, host_data) + sizeof(void *));
    assert_int_equal(fl_backend_size(3), offsetof(fl_backend, lstm_cell_backward) + sizeof(void *));
    assert_int_equal(fl_backend_size(4), offsetof(fl_backend, add_scaled) + sizeof(void *));
    assert_int_equal(fl_backend_size(5), offsetof(fl_backend, cross_entropy_backward) + sizeof(void *));
    assert_int_equal(fl_backend_size(6), offsetof(fl_backend, linear) + sizeof(void *));
    assert_int_equal(fl_backend_size(7), offsetof(fl_backend, sgd_update) + sizeof(void *));
    assert_int_equal(fl_backend_size(0), 0);
    assert_int_equal(fl_backend_size(FL_BACKEND_VERSION + 1), 0);
    /* Versions never decrease along the table: entries are only appended. */
    for (int i = 1; i < count; i++)
        assert_true(fl_backend_primitive_version(i) >= fl_backend_primitive_version(i - 1));
    assert_int_equal(fl_backend_primitive_version(0), 1);
    assert_int_equal(fl_backend_primitive_version(count - 1), FL_BACKEND_VERSION);
    /* The table stays small: growing it is a decision, not an accident. 62 required
     * primitives, 4 optional fused kernels, the 2 host-access entries, then the 2
     * entries of the fused LSTM cell, the 2 of the fused LSTM recurrence, the scaled
     * addition, the cross-entropy gradient, the linear layer's product with its bias,
     * SGD's step in place and Adam's. */
    assert_int_equal(count, 77);
}

static int from_host_calls;

static int counting_from_host(const fl_backend *self, fl_tensor *out, const void *src)
{
    from_host_calls++;
    return self->base->from_host(self->base, out, src);
}

/* A table written against version 1 (no host-access entries) registers, and its
 * later entries read as NULL whatever lies past its size; a size that does not match
 * its version, a version from the future and a table without release are refused. */
static void registration_checks_version_and_size(void **state)
{
    fl_backend table;
    fl_backend_derive(&table, fl_backend_find("cpu"), "cpu-version-1");
    table.version = 1;
    table.table_size = fl_backend_size(1);
    table.from_host = counting_from_host;
    assert_non_null(table.host_data); /* past version 1's size: not copied */
    assert_int_equal(fl_backend_register(&table), FL_OK);
    const fl_backend *registered = fl_backend_find("cpu-version-1");
    assert_non_null(registered);
    assert_ptr_not_equal(registered, &table);
    assert_null(registered->host_data);
    assert_null(registered->empty);
    assert_int_equal(registered->version, FL_BACKEND_VERSION);
    /* The registered copy is immutable: changing the caller's struct changes nothing. */
    table.from_host = NULL;
    fl_tensor *t = fl_to_backend(T_F32(FL_SHAPE(2), 1, 2), "cpu-version-1");
    assert_values(t, 0, 0, 1, 2);
    assert_int_equal(from_host_calls, 1);
    assert_string_equal(fl_backend_name(t), "cpu-version-1");

    table.version = 1;
    table.table_size = sizeof(fl_backend);
    assert_fails_status(fl_backend_register(&table), FL_ERR_VALUE, "compiled against a different backend.h");
    table.version = FL_BACKEND_VERSION + 1;
    assert_fails_status(fl_backend_register(&table), FL_ERR_VALUE, "written against version");
    table.version = 0;
    assert_fails_status(fl_backend_register(&table), FL_ERR_VALUE, "written against version");
    fl_backend_derive(&table, fl_backend_find("cpu"), "no-release");
    table.release = NULL;
    assert_fails_status(fl_backend_register(&table), FL_ERR_VALUE, "no release entry");
    table.name = NULL;
    assert_fails_status(fl_backend_register(&table), FL_ERR_NULL, "name");
    assert_fails_status(fl_backend_register(NULL), FL_ERR_NULL, "fl_backend_register");
}

/* Under the lazy backend, f32 elementwise work is fused by lazy itself and never
 * reaches cpu's entries; what lazy delegates (integer arithmetic, matmul,
 * reductions it cannot fuse) runs on the table registered as "cpu" at the time, so a
 * replaced cpu add is seen there. Replacing lazy's own add intercepts f32 adds. */
static void a_replaced_cpu_entry_under_lazy(void **state)
{
    fl_backend derived = support_derive("cpu");
    derived.add = counting_add;
    fl_backend original = support_override(&derived);
    add_calls = 0;
    fl_tensor *f = fl_to_backend(T_F32(FL_SHAPE(3), 1, 2, 3), "lazy");
    fl_tensor *i = fl_to_backend(T_I32(FL_SHAPE(3), 1, 2, 3), "lazy");
    fl_tensor *fsum = fl_add(f, f);
    assert_int_equal(fl_eval(fsum), FL_OK);
    assert_values(fsum, 0, 0, 2, 4, 6);
    assert_int_equal(add_calls, 0); /* fused by lazy */
    assert_values(fl_add(i, i), 0, 0, 2, 4, 6);
    assert_int_equal(add_calls, 1); /* delegated to cpu */
    support_override(&original);

    fl_backend lazy = support_derive("lazy");
    lazy.add = counting_add;
    original = support_override(&lazy);
    add_calls = 0;
    fl_tensor *g = fl_to_backend(T_F32(FL_SHAPE(3), 1, 2, 3), "lazy");
    assert_values(fl_add(g, g), 0, 0, 2, 4, 6);
    assert_int_equal(add_calls, 1);
    support_override(&original);
}

/* A cpu table registered without its fused kernels (backend.h: a replacement whose
 * parts they would bypass sets them to NULL) leaves lazy nothing to delegate them
 * to: lazy declines them, and the tensor layer composes, with the values the kernels
 * give. */
static void lazy_composes_what_the_cpu_table_lacks(void **state)
{
    fl_tensor *x = fl_to_backend(fl_randn(FL_F32, FL_SHAPE(3, 2, 8)), "lazy");
    fl_tensor *h = fl_to_backend(fl_randn(FL_F32, FL_SHAPE(2, 2)), "lazy");
    fl_tensor *w = fl_to_backend(fl_randn(FL_F32, FL_SHAPE(8, 2)), "lazy");
    fl_tensor *pre = fl_to_backend(fl_randn(FL_F32, FL_SHAPE(2, 8)), "lazy");
    fl_tensor *lp = fl_to_backend(fl_log_softmax(fl_randn(FL_F32, FL_SHAPE(4, 5)), 1), "lazy");
    fl_tensor *index = fl_to_backend(T_I64(FL_SHAPE(4, 1), 0, 4, 2, 2), "lazy");
    fl_tensor *scale = fl_to_backend(T_F32(FL_SHAPE(4, 1), 1, -1, 0.5f, 2), "lazy");
    fl_tensor *results[2][4];
    for (int lacking = 0; lacking < 2; lacking++) {
        fl_backend derived = support_derive("cpu"), original;
        if (lacking) {
            derived.lstm_cell = NULL;
            derived.lstm_sequence = NULL;
            derived.cross_entropy_backward = NULL;
            original = support_override(&derived);
        }
        fl_tensor **r = results[lacking], *gates;
        assert_int_equal(fl_lstm_sequence(x, NULL, h, h, w, false, &r[0], &gates), FL_OK);
        assert_int_equal(fl_lstm_cell(pre, h, &gates, NULL, &r[1]), FL_OK);
        r[2] = gates;
        r[3] = fl_cross_entropy_backward(lp, 1, index, scale, 0.1);
        if (lacking)
            support_override(&original);
    }
    for (int i = 0; i < 4; i++) {
        assert_string_equal(fl_backend_name(results[1][i]), "lazy");
        assert_close(results[1][i], results[0][i], 1e-6, 1e-6);
    }
    assert_no_error();
}

/* Every operation of several tensors refuses operands on two backends before it
 * computes, with a message naming the operation and both backends. */
#define REFUSED(call, fn, first, second)                                                                          \
    do {                                                                                                         \
        char expected[200];                                                                                      \
        snprintf(expected, sizeof expected,                                                                      \
                 fn ": operands on different backends (%s and %s); move one with fl_to_backend", first, second); \
        assert_fails(call, FL_ERR_VALUE, expected);                                                              \
    } while (0)

static void operands_on_two_backends_are_refused(void **state)
{
    const char *h = fl_default_backend()->name, *t = support_other_backend();
    fl_tensor *a = T_F32(FL_SHAPE(1, 1, 2, 2), 1, 2, 3, 4), *b = fl_to_backend(a, t);
    fl_tensor *index = T_I64(FL_SHAPE(1, 1, 2, 2), 0, 1, 1, 0), *far_index = fl_to_backend(index, t);
    fl_tensor *rows = T_I64(FL_SHAPE(2), 1, 0), *cond = T_BOOL(FL_SHAPE(2), 1, 0);
    fl_conv_params conv = {0};
    fl_pool_params pool = {.kind = FL_POOL_MAX, .kernel = {1, 1}};
    REFUSED(fl_add(a, b), "fl_add", h, t);
    REFUSED(fl_sub(b, a), "fl_sub", t, h);
    REFUSED(fl_maximum(a, b), "fl_maximum", h, t);
    REFUSED(fl_gt(a, b), "fl_gt", t, h); /* b < a */
    REFUSED(fl_logical_and(a, b), "fl_logical_and", h, t);
    REFUSED(fl_pow(fl_cast(a, FL_I32), fl_cast(b, FL_I32)), "fl_pow", h, t); /* before reading the exponent */
    REFUSED(fl_matmul(a, b), "fl_matmul", h, t);
    REFUSED(fl_conv2d(a, b, &conv), "fl_conv2d", h, t);
    REFUSED(fl_conv2d_backward_input(b, a, (const int64_t[]){1, 1, 2, 2}, &conv), "fl_conv2d_backward_input", t, h);
    REFUSED(fl_conv2d_backward_weight(a, b, (const int64_t[]){1, 1, 1, 1}, &conv), "fl_conv2d_backward_weight", h, t);
    REFUSED(fl_pool2d_backward(b, a, &pool), "fl_pool2d_backward", t, h);
    REFUSED(fl_concat((fl_tensor *[]){a, a, b}, 3, 0), "fl_concat", h, t);
    REFUSED(fl_stack((fl_tensor *[]){b, a}, 2, 0), "fl_stack", t, h);
    REFUSED(fl_where(cond, fl_reshape(a, FL_SHAPE(4)), fl_reshape(b, FL_SHAPE(4))), "fl_where", h, t);
    REFUSED(fl_gather(a, 3, far_index), "fl_gather", h, t);
    REFUSED(fl_scatter_add(a, 3, index, b), "fl_scatter_add", h, t);
    REFUSED(fl_index_select(b, 3, rows), "fl_index_select", t, h);
    REFUSED(fl_index_assign(a, FL_INDEX(FL_AT(0)), b), "fl_index_assign", h, t);
    REFUSED(fl_gelu_backward(a, b, false), "fl_gelu_backward", h, t);
    fl_tensor *cell = fl_zeros(FL_F32, FL_SHAPE(2, 1)), *far_cell = fl_to_backend(cell, t);
    fl_tensor *pre = fl_zeros(FL_F32, FL_SHAPE(2, 4)), *out = NULL;
    REFUSED(fl_lstm_cell(pre, far_cell, &out, NULL, NULL) == FL_OK ? out : NULL, "fl_lstm_cell", h, t);
    REFUSED(fl_lstm_cell_backward(cell, cell, pre, cell, far_cell, &out, NULL) == FL_OK ? out : NULL,
            "fl_lstm_cell_backward", h, t);
}

/* Registering while other threads compute through the registry is safe: readers see
 * either table, each complete. */
static void *adds_in_a_loop(void *unused)
{
    (void)unused;
    for (int k = 0; k < 200; k++) {
        fl_scope scope = fl_scope_begin();
        fl_tensor *x = fl_to_backend(fl_ones(FL_F32, FL_SHAPE(4)), "cpu");
        fl_tensor *y = fl_add(x, x);
        float v[4] = {0};
        if (!y || fl_to_host(y, v, sizeof v) != FL_OK || v[3] != 2)
            return (void *)1;
        fl_scope_end(scope);
    }
    return NULL;
}

static int plain_add(const fl_backend *self, fl_tensor *out, const fl_tensor *a, const fl_tensor *b)
{
    return self->base->add(self->base, out, a, b);
}

static void registration_is_thread_safe(void **state)
{
    pthread_t threads[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, adds_in_a_loop, NULL), 0);
    fl_backend original = *fl_backend_find("cpu");
    for (int k = 0; k < 50; k++) {
        fl_backend derived = support_derive("cpu");
        derived.add = plain_add;
        support_override(&derived);
    }
    for (int i = 0; i < 2; i++) {
        void *failed;
        pthread_join(threads[i], &failed);
        assert_null(failed);
    }
    support_override(&original);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        scoped_test(composites_go_through_the_replaced_add),
        scoped_test(mean_and_variance_go_through_the_replaced_sum),
        scoped_test(a_failing_primitive_reports_its_own_message),
        scoped_test(the_entry_list_describes_the_table),
        scoped_test(registration_checks_version_and_size),
        scoped_test(a_replaced_cpu_entry_under_lazy),
        scoped_test(lazy_composes_what_the_cpu_table_lacks),
        scoped_test(operands_on_two_backends_are_refused),
        scoped_test(registration_is_thread_safe),
    };
    return cmocka_run_group_tests_name("backend", tests, NULL, NULL);
}
