/* Lifetimes: checked handles (FLARE_CHECK_HANDLES) turn a use after release into an
 * error naming the operation and what released the handle; fl_live_tensors shows
 * a training loop that forgot its per-step scope. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flare/autograd.h"
#include "flare/config.h"
#include "flare/extension.h"
#include "flare/nn.h"
#include "flare/optim.h"
#include "support.h"

/* ---- checked handles (on for this process: main sets FLARE_CHECK_HANDLES=1) ---- */

static void a_tensor_used_after_its_scope_fails(void **state)
{
    assert_true(fl_handles_checked());
    fl_scope scope = fl_scope_begin();
    fl_tensor *t = fl_ones(FL_F32, FL_SHAPE(2, 3));
    fl_scope_end(scope);
    assert_fails(fl_add(t, t), FL_ERR_RELEASED,
                 "fl_add: a tensor used after its last reference was released by fl_scope_end "
                 "(the scope at depth 2, opened by call ");
    fl_clear_error();
    assert_true(isnan(fl_item(t)));
    assert_int_equal(fl_last_status(), FL_ERR_RELEASED);
    assert_non_null(strstr(fl_last_error(), "fl_item: a tensor used after"));
    fl_clear_error();
    assert_fails(fl_retain(t), FL_ERR_RELEASED, "fl_retain: a tensor used after");
    fl_clear_error();
}

static void a_tensor_released_twice_fails(void **state)
{
    fl_tensor *t = fl_keep(fl_zeros(FL_F32, FL_SHAPE(4)));
    fl_release(t);
    fl_release(t);
    assert_int_equal(fl_last_status(), FL_ERR_RELEASED);
    assert_string_equal(fl_last_error(), "fl_release: a tensor used after its last reference was released by fl_release");
    fl_clear_error();
    assert_fails(fl_sum(t, NULL, 0, false), FL_ERR_RELEASED, "fl_sum: a tensor used after");
    fl_clear_error();
}

static void a_variable_used_after_its_scope_fails(void **state)
{
    fl_scope scope = fl_scope_begin();
    fl_variable *v = fl_v_new(fl_full(3, FL_F32, FL_SHAPE(2)), true);
    fl_scope_end(scope);
    assert_null(fl_v_value(v));
    assert_int_equal(fl_last_status(), FL_ERR_RELEASED);
    assert_non_null(strstr(fl_last_error(), "fl_v_value: a variable used after its last reference was released "
                                            "by fl_scope_end (the scope at depth 2"));
    fl_clear_error();
    /* the natural misuse: no crash, no garbage, a NaN and the error */
    assert_true(isnan(fl_item(fl_v_value(v))));
    assert_int_equal(fl_last_status(), FL_ERR_RELEASED);
    fl_clear_error();
    assert_fails(fl_v_add(v, v), FL_ERR_RELEASED, "fl_v_add: a variable used after");
    fl_clear_error();
    assert_false(fl_v_requires_grad(v));
    fl_clear_error();
}

static void a_variable_released_twice_fails(void **state)
{
    fl_tensor *ones = fl_keep(fl_ones(FL_F32, FL_SHAPE(1)));
    fl_variable *v = fl_v_keep(fl_v_new(ones, false));
    fl_release(ones);
    const fl_tensor *value = fl_v_value(v); /* borrowed: lives as long as v */
    fl_v_release(v);
    fl_v_release(v);
    assert_int_equal(fl_last_status(), FL_ERR_RELEASED);
    assert_string_equal(fl_last_error(), "fl_v_release: a variable used after its last reference was released by fl_v_release");
    fl_clear_error();
    assert_fails(fl_neg(value), FL_ERR_RELEASED, "fl_neg: a tensor used after its last reference was released by fl_release");
    fl_clear_error();
}

/* A live handle of the same address as a released one cannot be mistaken for it: the
 * released one is not freed while it is kept. */
static void live_handles_pass(void **state)
{
    for (int i = 0; i < 1000; i++) {
        fl_scope scope = fl_scope_begin();
        fl_tensor *a = fl_ones(FL_F32, FL_SHAPE(3));
        fl_tensor *b = fl_add(a, a);
        assert_non_null(b);
        fl_scope_end(scope);
    }
    assert_no_error();
}

/* ---- fl_live_tensors ---- */

static void step(fl_module *model, fl_optimizer *opt, const fl_tensor *x, const fl_tensor *y)
{
    fl_variable *loss = fl_nn_cross_entropy(fl_module_forward(model, fl_v_new(x, false)), y, NULL);
    assert_int_equal(fl_v_backward(loss, NULL, false), FL_OK);
    assert_int_equal(fl_optimizer_step(opt), FL_OK);
    fl_optimizer_zero_grad(opt);
}

/* Evaluates the parameters, which on the lazy backend are pending expressions that
 * hold their inputs, so that the count is of what the loop keeps. */
static void settle(const fl_parameters *params)
{
    for (size_t i = 0; i < params->count; i++)
        assert_int_equal(fl_eval(fl_v_value(params->items[i])), FL_OK);
}

/* How many more tensors are alive after `steps` steps of a small MLP than before;
 * per_step_scope false forgets the scope of each step. */
static int64_t live_growth(int steps, bool per_step_scope)
{
    fl_manual_seed(1);
    fl_module *model = fl_nn_sequential(FL_MODULES(fl_nn_linear(4, 8, true), fl_nn_relu(), fl_nn_linear(8, 3, true)));
    fl_parameters *params = fl_module_parameters(model);
    fl_optimizer *opt = fl_sgd(params->items, params->count, &(fl_sgd_options){.lr = 0.1, .momentum = 0.9});
    fl_tensor *x = fl_keep(fl_randn(FL_F32, FL_SHAPE(16, 4)));
    fl_tensor *y = fl_keep(fl_randint(0, 3, FL_I64, FL_SHAPE(16)));
    fl_scope first = fl_scope_begin(); /* the optimizer's state is made by the first step */
    step(model, opt, x, y);
    fl_scope_end(first);
    settle(params);
    int64_t before = fl_live_tensors();
    fl_scope outer = fl_scope_begin(); /* what a forgotten step scope leaves its tensors to */
    for (int i = 0; i < steps; i++) {
        fl_scope scope = per_step_scope ? fl_scope_begin() : (fl_scope){0, 0};
        step(model, opt, x, y);
        if (per_step_scope)
            fl_scope_end(scope);
    }
    settle(params);
    int64_t grown = fl_live_tensors() - before;
    fl_scope_end(outer);
    fl_release(x);
    fl_release(y);
    fl_optimizer_free(opt);
    fl_parameters_free(params);
    fl_module_release(model);
    assert_no_error();
    return grown;
}

static void a_forgotten_step_scope_shows_in_the_live_count(void **state)
{
    int64_t base = fl_live_tensors();
    assert_int_equal(live_growth(10, true), 0);
    int64_t one = live_growth(1, false), ten = live_growth(10, false);
    assert_true(one > 0);
    assert_int_equal(ten, 10 * one);
    assert_int_equal(fl_live_tensors(), base); /* the model, optimizer and data are gone */
}

/* ---- the setting, in fresh processes ---- */

#define OUTPUT 4096
static char out[OUTPUT], err[OUTPUT];

static int report_checked(void)
{
    printf("checked=%d field=%d", fl_handles_checked(), fl_config_current()->check_handles);
    return 0;
}

static char logged[1024];

static void capture(fl_log_level level, const char *message, void *user)
{
    (void)level;
    (void)user;
    snprintf(logged, sizeof logged, "%s", message);
}

static int bad_value_is_logged(void)
{
    fl_set_log(capture, NULL);
    report_checked();
    printf(" log=%s", logged);
    return 0;
}

static int explicit_configuration(void)
{
    fl_config c = {.size = sizeof c, .check_handles = 1};
    if (fl_init(&c) != FL_OK)
        return 1;
    return report_checked();
}

static void the_setting_comes_from_the_environment_or_fl_init(void **state)
{
    assert_int_equal(support_run_self("report_checked", (const char *const[]){"FLARE_CHECK_HANDLES=0", NULL}, out,
                                      err, OUTPUT),
                     0);
    assert_string_equal(out, "checked=0 field=-1");
    assert_int_equal(support_run_self("report_checked", (const char *const[]){"FLARE_CHECK_HANDLES=1", NULL}, out,
                                      err, OUTPUT),
                     0);
    assert_string_equal(out, "checked=1 field=1");
#ifdef FLARE_CHECK_HANDLES_DEFAULT
    const char *by_default = "checked=1 field=1";
#else
    const char *by_default = "checked=0 field=-1";
#endif
    assert_int_equal(support_run_self("report_checked", (const char *const[]){"FLARE_CHECK_HANDLES", NULL}, out,
                                      err, OUTPUT),
                     0);
    assert_string_equal(out, by_default);
    assert_int_equal(support_run_self("bad_value_is_logged", (const char *const[]){"FLARE_CHECK_HANDLES=yes", NULL},
                                      out, err, OUTPUT),
                     0);
    assert_non_null(strstr(out, "log=FLARE_CHECK_HANDLES is 'yes', neither '0' nor '1'; using the build's default"));
    assert_int_equal(support_run_self("explicit_configuration", (const char *const[]){"FLARE_CHECK_HANDLES=0", NULL},
                                      out, err, OUTPUT),
                     0);
    assert_string_equal(out, "checked=1 field=1");
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        if (strcmp(argv[1], "report_checked") == 0)
            return report_checked();
        if (strcmp(argv[1], "bad_value_is_logged") == 0)
            return bad_value_is_logged();
        if (strcmp(argv[1], "explicit_configuration") == 0)
            return explicit_configuration();
        return 2;
    }
    setenv("FLARE_CHECK_HANDLES", "1", 1); /* before anything reads the settings */
    const struct CMUnitTest tests[] = {
        scoped_test(a_tensor_used_after_its_scope_fails),
        scoped_test(a_tensor_released_twice_fails),
        scoped_test(a_variable_used_after_its_scope_fails),
        scoped_test(a_variable_released_twice_fails),
        scoped_test(live_handles_pass),
        scoped_test(a_forgotten_step_scope_shows_in_the_live_count),
        scoped_test(the_setting_comes_from_the_environment_or_fl_init),
    };
    return cmocka_run_group_tests_name("handles", tests, NULL, NULL);
}
