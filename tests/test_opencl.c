/*
 * What the opencl backend promises beyond the shared suite (which every row of the
 * matrix runs): the work reaches the device without host round trips, per-operation
 * waits or repeated program builds; f32 elementwise chains fuse into one kernel;
 * device errors are statuses with messages. Every test here works on the "opencl"
 * backend whatever the row's default, and is skipped where there is no device.
 */
#include "support.h"

#include <math.h>
#include <string.h>

#include "flare/autograd.h"
#include "flare/nn.h"
#include "flare/opencl.h"
#include "flare/optim.h"

#include "backends/opencl/runtime.h"
#include "tensor/internal.h"


#define REQUIRE_DEVICE()                   \
    do {                                   \
        if (!fl_opencl_device())           \
            skip();                        \
    } while (0)

static const char *previous;

static void use_opencl(void)
{
    previous = fl_default_backend()->name;
    assert_int_equal(fl_set_default_backend("opencl"), FL_OK);
}

static void restore(void) { fl_set_default_backend(previous); }

/* A chain of f32 elementwise operations runs as one kernel, when it is read. */
static void elementwise_chains_fuse_into_one_kernel(void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    use_opencl();
    float host[1000];
    for (int i = 0; i < 1000; i++)
        host[i] = (float)i / 100.0f - 5.0f;
    fl_tensor *x = fl_from_data(host, FL_F32, 1, (int64_t[]){1000});
    fl_tensor *b = fl_scalar(0.5, FL_F32);
    fl_opencl_counters before = fl_opencl_counters_get();
    fl_scope scope = fl_scope_begin();
    fl_tensor *y = fl_keep(fl_tanh(fl_mul(fl_add(fl_exp(fl_neg(x)), b), x)));
    fl_scope_end(scope); /* the intermediates are the graph's alone now */
    fl_opencl_counters pending = fl_opencl_counters_get();
    assert_int_equal(pending.launches, before.launches); /* nothing ran yet */
    float got[1000];
    assert_int_equal(fl_to_host(y, got, sizeof got), FL_OK);
    fl_opencl_counters after = fl_opencl_counters_get();
    assert_int_equal(after.launches - before.launches, 1);
    assert_int_equal(after.downloads - before.downloads, 1);
    for (int i = 0; i < 1000; i++) {
        double v = host[i], want = tanh((exp(-v) + 0.5) * v);
        assert_true(fabs(got[i] - want) <= 1e-5 * (1 + fabs(want)));
    }
    fl_release(y);
    fl_release(x);
    fl_release(b);
    restore();
}

/* A pending node that something else holds (autograd keeps intermediates) is written
 * by the kernel that computes its consumer, and not computed again. */
static void held_intermediates_are_written_once(void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    use_opencl();
    fl_tensor *x = fl_full(2.0, FL_F32, 1, (int64_t[]){4096});
    fl_tensor *kept = fl_exp(x); /* held here */
    fl_tensor *root = fl_sqrt(kept);
    fl_tensor *y = fl_add(root, kept); /* reads it twice */
    fl_release(root);
    fl_opencl_counters before = fl_opencl_counters_get();
    assert_int_equal(fl_eval(y), FL_OK);
    assert_int_equal(fl_eval(kept), FL_OK); /* already written */
    fl_opencl_counters after = fl_opencl_counters_get();
    assert_int_equal(after.launches - before.launches, 1);
    fl_tensor *total = fl_sum(kept, FL_ALL_AXES, false);
    assert_true(fabs(fl_item(total) / 4096 - exp(2.0)) < 1e-4);
    fl_release(total);
    fl_release(y);
    fl_release(kept);
    fl_release(x);
    restore();
}

/* More held intermediates than one kernel has outputs: those past its outputs run
 * right after it, so that none stays pending. Left pending, a node read only through
 * later ones (an optimizer's parameter whose sum with another is all a step reads,
 * as an LSTM's two biases) grew by a step's operations every step, and each step
 * built a new program. */
static void held_intermediates_past_the_outputs_are_written(void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    use_opencl();
    enum { HELD = 6 };
    fl_tensor *x = fl_full(2.0, FL_F32, 1, (int64_t[]){4096}), *kept[HELD], *sum = NULL;
    for (int k = 0; k < HELD; k++) {
        kept[k] = fl_mul_scalar(x, k + 1); /* held here */
        fl_tensor *next = sum ? fl_add(sum, kept[k]) : fl_exp(kept[k]);
        fl_release(sum);
        sum = next;
    }
    fl_opencl_counters before = fl_opencl_counters_get();
    assert_int_equal(fl_eval(sum), FL_OK);
    fl_opencl_counters ran = fl_opencl_counters_get();
    for (int k = 0; k < HELD; k++)
        assert_int_equal(fl_eval(kept[k]), FL_OK); /* already written */
    fl_opencl_counters after = fl_opencl_counters_get();
    assert_true(ran.launches - before.launches >= 2); /* the graph, then what it could not write */
    assert_int_equal(after.launches - ran.launches, 0);
    for (int k = 0; k < HELD; k++) {
        fl_tensor *total = fl_sum(kept[k], FL_ALL_AXES, false);
        assert_true(fabs(fl_item(total) / 4096 - 2.0 * (k + 1)) < 1e-4);
        fl_release(total);
        fl_release(kept[k]);
    }
    fl_release(sum);
    fl_release(x);
    restore();
}

/* One training step of a small classifier: the batch goes up, the loss comes down,
 * and nothing else crosses; once the steps repeat, no program is built again and the
 * host waits only for the loss. */
static void a_training_step_stays_on_the_device(void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    use_opencl();
    fl_manual_seed(7);
    fl_module *layers[] = {fl_nn_linear(20, 32, true), fl_nn_relu(), fl_nn_linear(32, 5, true)};
    fl_module *model = fl_nn_sequential(layers, 3);
    assert_non_null(model);
    fl_parameters *params = fl_module_parameters(model);
    fl_optimizer *opt = fl_sgd(params->items, params->count, &(fl_sgd_options){.lr = 0.1, .momentum = 0.9});
    float batch[16 * 20];
    int64_t labels[16];
    for (int i = 0; i < 16 * 20; i++)
        batch[i] = (float)((i * 37) % 11) / 11.0f - 0.5f;
    for (int i = 0; i < 16; i++)
        labels[i] = i % 5;
    double first = 0, last = 0;
    fl_opencl_counters warm = {0};
    for (int step = 0; step < 8; step++) {
        fl_scope scope = fl_scope_begin();
        fl_opencl_counters before = fl_opencl_counters_get();
        fl_tensor *x = fl_from_data(batch, FL_F32, 2, (int64_t[]){16, 20});
        fl_tensor *y = fl_from_data(labels, FL_I64, 1, (int64_t[]){16});
        fl_variable *input = fl_v_new(x, false);
        fl_variable *loss = fl_nn_cross_entropy(fl_module_forward(model, input), y, NULL);
        fl_optimizer_zero_grad(opt);
        assert_int_equal(fl_v_backward(loss, NULL, false), FL_OK);
        assert_int_equal(fl_optimizer_step(opt), FL_OK);
        double value = fl_item(fl_v_value(loss));
        fl_opencl_counters after = fl_opencl_counters_get();
        assert_int_equal(after.uploads - before.uploads, 2); /* the batch and its labels */
        assert_int_equal(after.downloads - before.downloads, 1); /* the loss */
        /* SGD's momentum buffer takes three steps to reach its steady form (absent,
         * then the first gradient, then updated in place), so the programs do too. */
        if (step == 2)
            warm = after;
        if (step > 2) {
            assert_int_equal(after.builds, warm.builds); /* every kernel came from the cache */
            /* for the loss only: each kernel's first run, which waits too, is past */
            assert_int_equal(after.waits - before.waits, 1);
        }
        first = step == 0 ? value : first;
        last = value;
        fl_scope_end(scope);
    }
    assert_true(last < first);
    fl_optimizer_free(opt);
    fl_parameters_free(params);
    fl_module_release(model);
    restore();
}

/* Device errors are statuses naming the operation, the device and OpenCL's error. */
static void device_errors_are_statuses(void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    use_opencl();
    /* more memory than any device has: an f32 fill is a constant until read */
    fl_tensor *huge = fl_zeros(FL_F32, 2, (int64_t[]){1 << 20, 1 << 20});
    assert_non_null(huge);
    assert_int_equal(fl_eval(huge), FL_ERR_MEMORY);
    fl_release(huge);
    fl_clear_error();
    assert_null(fl_zeros(FL_I32, 2, (int64_t[]){1 << 20, 1 << 20}));
    if (fl_last_status() != FL_ERR_MEMORY || !strstr(fl_last_error(), "device memory") ||
        !strstr(fl_last_error(), fl_opencl_device()))
        fail_msg("a 4 TiB tensor: status %d, \"%s\"", (int)fl_last_status(), fl_last_error());
    /* an operation across backends names both */
    fl_tensor *a = fl_ones(FL_F32, 1, (int64_t[]){3});
    fl_tensor *c = fl_to_backend(a, "cpu");
    fl_clear_error();
    assert_null(fl_add(a, c));
    assert_non_null(strstr(fl_last_error(), "opencl"));
    assert_non_null(strstr(fl_last_error(), "cpu"));
    fl_release(c);
    fl_release(a);
    restore();
}

/* A kernel the device's compiler refuses is a status whose message carries the build
 * log, not an abort; and it is not cached as if it had built. */
static void a_kernel_that_does_not_build_is_an_error(void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    static const char broken[] = "__kernel void broken(__global float *y) { y[0] = not_declared_anywhere; }\n";
    for (int attempt = 0; attempt < 2; attempt++) {
        fl_opencl_counters before = fl_opencl_counters_get();
        assert_null(ocl_kernel(broken, "broken"));
        char message[2048];
        assert_int_equal(fl__take_backend_error(message, sizeof message), FL_ERR_BACKEND);
        assert_non_null(strstr(message, "CL_BUILD_PROGRAM_FAILURE"));
        assert_non_null(strstr(message, "not_declared_anywhere")); /* from the build log */
        assert_non_null(strstr(message, fl_opencl_device()));
        assert_int_equal(fl_opencl_counters_get().builds, before.builds + 1);
    }
}

/* Device memory goes through a caching manager with the host manager's statistics. */
static void device_memory_is_cached(void **state)
{
    (void)state;
    REQUIRE_DEVICE();
    use_opencl();
    fl_memory_manager *m = fl_opencl_memory();
    assert_non_null(m);
    fl_memory_stats s0, s1, s2;
    m->stats(m, &s0);
    fl_tensor *t = fl_zeros(FL_F32, 1, (int64_t[]){100000});
    assert_int_equal(fl_eval(t), FL_OK);
    m->stats(m, &s1);
    assert_true(s1.in_use >= s0.in_use + 400000);
    fl_release(t);
    t = fl_zeros(FL_F32, 1, (int64_t[]){100000});
    assert_int_equal(fl_eval(t), FL_OK);
    m->stats(m, &s2);
    assert_true(s2.cache_hits > s1.cache_hits);
    assert_int_equal(s2.system_allocations, s1.system_allocations);
    fl_release(t);
    restore();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(elementwise_chains_fuse_into_one_kernel),
        cmocka_unit_test(held_intermediates_are_written_once),
        cmocka_unit_test(held_intermediates_past_the_outputs_are_written),
        cmocka_unit_test(a_training_step_stays_on_the_device),
        cmocka_unit_test(device_errors_are_statuses),
        cmocka_unit_test(a_kernel_that_does_not_build_is_an_error),
        cmocka_unit_test(device_memory_is_cached),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
