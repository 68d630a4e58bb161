/* Rotary positional embedding against Hugging Face LLaMA's formula
 * (tests/fixtures/gen_rotary.py), its behaviour with a KV cache's offset, the relative
 * position property it exists for, its gradient by finite differences, and errors. */
#include <math.h>
#include <stdio.h>

#include "flare/nn.h"
#include "gradcheck.h"
#include "support.h"

#define FIXTURES "rotary.bin"

static fl_tensor *fx(const char *case_name, const char *what)
{
    char name[128];
    snprintf(name, sizeof name, "%s.%s", case_name, what);
    return fixture(FIXTURES, name);
}

static void matches_the_hugging_face_formula(void **state)
{
    (void)state;
    const char *cases[] = {"plain", "offset", "long_offset", "base_500000"};
    for (int i = 0; i < 4; i++) {
        fl_variable *x = fl_v_new(fx(cases[i], "x"), false);
        int64_t offset = (int64_t)fl_item(fx(cases[i], "offset"));
        fl_variable *y = fl_f_rotary_embedding(x, offset, fl_item(fx(cases[i], "base")));
        assert_non_null(y);
        assert_dtype(fl_v_value(y), FL_F32);
        assert_close(fl_v_value(y), fl_cast(fx(cases[i], "y"), FL_F32), 1e-5, 2e-6);
    }
}

/* Rows from position k on, rotated with offset k, are the same rows of the whole
 * sequence rotated from 0: what a KV cache relies on. */
static void an_offset_continues_the_sequence(void **state)
{
    (void)state;
    fl_variable *x = fl_v_new(fl_randn(FL_F32, FL_SHAPE(2, 2, 7, 6)), false);
    fl_variable *whole = fl_f_rotary_embedding(x, 0, 10000);
    fl_variable *tail = fl_f_rotary_embedding(fl_v_index(x, FL_INDEX(FL_SPAN, FL_SPAN, FL_RANGE(4, 7))), 4, 10000);
    assert_close(fl_v_value(tail), fl_index(fl_v_value(whole), FL_INDEX(FL_SPAN, FL_SPAN, FL_RANGE(4, 7))), 1e-6, 1e-6);
    /* Position 0 is the identity. */
    assert_close(fl_index(fl_v_value(whole), FL_INDEX(FL_SPAN, FL_SPAN, FL_RANGE(0, 1))),
                 fl_index(fl_v_value(x), FL_INDEX(FL_SPAN, FL_SPAN, FL_RANGE(0, 1))), 0, 1e-7);
}

/* q at position m and k at position n: q'.k' depends on m - n only, and the norm of
 * each row is kept (a rotation). */
static void scores_depend_on_relative_positions(void **state)
{
    (void)state;
    fl_variable *q = fl_v_new(fl_randn(FL_F64, FL_SHAPE(1, 8)), false);
    fl_variable *k = fl_v_new(fl_randn(FL_F64, FL_SHAPE(1, 8)), false);
    double scores[3];
    const int64_t at[3][2] = {{3, 1}, {10, 8}, {102, 100}};
    for (int i = 0; i < 3; i++) {
        const fl_tensor *qr = fl_v_value(fl_f_rotary_embedding(q, at[i][0], 10000));
        const fl_tensor *kr = fl_v_value(fl_f_rotary_embedding(k, at[i][1], 10000));
        scores[i] = fl_item(fl_sum(fl_mul(qr, kr), FL_ALL_AXES, false));
        assert_true(fabs(fl_item(fl_sum(fl_mul(qr, qr), FL_ALL_AXES, false)) -
                         fl_item(fl_sum(fl_mul(fl_v_value(q), fl_v_value(q)), FL_ALL_AXES, false))) < 1e-9);
    }
    assert_true(fabs(scores[0] - scores[1]) < 1e-9);
    assert_true(fabs(scores[0] - scores[2]) < 1e-9);
    /* and does change with it */
    double other = fl_item(fl_sum(fl_mul(fl_v_value(fl_f_rotary_embedding(q, 3, 10000)),
                                         fl_v_value(fl_f_rotary_embedding(k, 2, 10000))),
                                  FL_ALL_AXES, false));
    assert_true(fabs(other - scores[0]) > 1e-6);
}

static fl_variable *rotary_at(fl_variable *const *x, void *ctx)
{
    return fl_f_rotary_embedding(x[0], *(const int64_t *)ctx, 10000);
}

static void gradient_matches_finite_differences(void **state)
{
    (void)state;
    int64_t offsets[] = {0, 5, 333};
    for (int i = 0; i < 3; i++)
        assert_gradcheck(rotary_at, &offsets[i], gradcheck_input(-1, 1, FL_SHAPE(2, 2, 3, 6)));
    assert_gradcheck(rotary_at, &offsets[1], gradcheck_input(-1, 1, FL_SHAPE(4, 2)));
}

static void bad_arguments_are_refused(void **state)
{
    (void)state;
    fl_variable *x = fl_v_new(fl_zeros(FL_F32, FL_SHAPE(1, 2, 3, 4)), false);
    assert_fails(fl_f_rotary_embedding(fl_v_new(fl_zeros(FL_F32, FL_SHAPE(1, 2, 3, 5)), false), 0, 10000),
                 FL_ERR_SHAPE, "D even");
    assert_fails(fl_f_rotary_embedding(fl_v_new(fl_zeros(FL_F32, FL_SHAPE(4)), false), 0, 10000), FL_ERR_SHAPE,
                 "f32[4]");
    assert_fails(fl_f_rotary_embedding(fl_v_new(fl_zeros(FL_I64, FL_SHAPE(3, 4)), false), 0, 10000), FL_ERR_DTYPE,
                 "floating");
    assert_fails(fl_f_rotary_embedding(x, -1, 10000), FL_ERR_VALUE, "offset (-1)");
    assert_fails(fl_f_rotary_embedding(x, 0, 0), FL_ERR_VALUE, "base (0)");
    assert_fails(fl_f_rotary_embedding(x, 0, NAN), FL_ERR_VALUE, "base");
    assert_fails(fl_f_rotary_embedding(NULL, 0, 10000), FL_ERR_NULL, "fl_f_rotary_embedding");
    /* An empty sequence is fine. */
    fl_variable *empty = fl_f_rotary_embedding(fl_v_new(fl_zeros(FL_F32, FL_SHAPE(1, 2, 0, 4)), false), 3, 10000);
    assert_non_null(empty);
    assert_shape(fl_v_value(empty), 1, 2, 0, 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        scoped_test(matches_the_hugging_face_formula),
        scoped_test(an_offset_continues_the_sequence),
        scoped_test(scores_depend_on_relative_positions),
        scoped_test(gradient_matches_finite_differences),
        scoped_test(bad_arguments_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
