/* Lifetimes: checked handles (FLARE_CHECK_HANDLES) turn a use after release into an
 * error naming the operation and what released the handle. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flare/autograd.h"
#include "flare/config.h"
#include "flare/extension.h"
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
        scoped_test(the_setting_comes_from_the_environment_or_fl_init),
    };
    return cmocka_run_group_tests_name("handles", tests, NULL, NULL);
}
