/* Meters: each against hand-computed values; top-k against PyTorch (gen_meter.py). */
#include <math.h>
#include <string.h>
#include <time.h>

#include "flare/meter.h"
#include "support.h"

static void average_value(void **state)
{
    fl_average_meter m = {0};
    assert_true(isnan(fl_average_meter_value(&m)));
    fl_average_meter_add(&m, 1.0, 1.0);
    fl_average_meter_add(&m, 3.0, 3.0);
    fl_average_meter_add(&m, 100.0, 0.0); /* no weight: counted, not averaged */
    assert_float_equal(fl_average_meter_value(&m), 10.0 / 4.0, 1e-12);
    assert_int_equal(m.count, 3);
    assert_float_equal(m.weight, 4.0, 0);
    fl_average_meter_reset(&m);
    assert_int_equal(m.count, 0);
    fl_average_meter_add(&m, -2.5, 2.0);
    assert_float_equal(fl_average_meter_value(&m), -2.5, 0);
}

static void frame_error(void **state)
{
    fl_frame_error_meter m = {0};
    assert_float_equal(fl_frame_error_meter_value(&m), 0, 0);
    assert_int_equal(fl_frame_error_meter_add(&m, T_I64(FL_SHAPE(4), 1, 2, 3, 4), T_I64(FL_SHAPE(4), 1, 0, 3, 0)),
                     FL_OK);
    assert_float_equal(fl_frame_error_meter_value(&m), 50.0, 1e-12);
    /* Accumulates, across shapes and dtypes that compare by value. */
    assert_int_equal(fl_frame_error_meter_add(&m, T_I32(FL_SHAPE(1, 2), 5, 5), T_I64(FL_SHAPE(1, 2), 5, 5)), FL_OK);
    assert_int_equal(m.errors, 2);
    assert_int_equal(m.total, 6);
    assert_float_equal(fl_frame_error_meter_value(&m), 100.0 / 3.0, 1e-12);

    assert_fails_status(fl_frame_error_meter_add(&m, T_I64(FL_SHAPE(3), 1, 2, 3), T_I64(FL_SHAPE(2), 1, 2)),
                        FL_ERR_SHAPE, "predictions i64[3] and targets i64[2] differ in shape");
    assert_fails_status(fl_frame_error_meter_add(&m, NULL, T_I64(FL_SHAPE(2), 1, 2)), FL_ERR_NULL,
                        "fl_frame_error_meter_add");
    assert_fails_status(fl_frame_error_meter_add(NULL, T_I64(FL_SHAPE(1), 1), T_I64(FL_SHAPE(1), 1)), FL_ERR_NULL,
                        "the meter is NULL");
    assert_int_equal(m.total, 6); /* failures leave the meter as it was */
    fl_frame_error_meter_reset(&m);
    assert_int_equal(m.errors + m.total, 0);
}

static void topk_accuracy_matches_pytorch(void **state)
{
    fl_tensor *logits = fixture("meter.bin", "logits"), *targets = fixture("meter.bin", "targets");
    const int64_t ks[] = {1, 2, 3, 5, 10};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        char name[16];
        snprintf(name, sizeof name, "top%lld", (long long)ks[i]);
        fl_topk_meter m;
        assert_int_equal(fl_topk_meter_init(&m, ks[i]), FL_OK);
        /* In two halves: the meter accumulates. */
        assert_int_equal(fl_topk_meter_add(&m, fl_index(logits, FL_INDEX(FL_RANGE(0, 10))),
                                           fl_index(targets, FL_INDEX(FL_RANGE(0, 10)))), FL_OK);
        assert_int_equal(fl_topk_meter_add(&m, fl_index(logits, FL_INDEX(FL_RANGE(10, FL_END))),
                                           fl_index(targets, FL_INDEX(FL_RANGE(10, FL_END)))), FL_OK);
        assert_int_equal(m.total, 24);
        assert_float_equal(fl_topk_meter_value(&m), fl_item(fixture("meter.bin", name)), 1e-9);
    }
    assert_no_error();
}

static void topk_by_hand_and_errors(void **state)
{
    fl_topk_meter m;
    assert_int_equal(fl_topk_meter_init(&m, 2), FL_OK);
    assert_float_equal(fl_topk_meter_value(&m), 0, 0);
    /* Row 0 ranks 2 > 0 > 1: target 0 is second (hit); row 1 ranks 1 > 2 > 0: target 0 last (miss);
     * row 2 ties 0 and 1 above 2, the lower index first: target 1 is second (hit). */
    fl_tensor *logits = T_F32(FL_SHAPE(3, 3), 0.5, 0.1, 0.9, 0.1, 0.8, 0.3, 0.7, 0.7, 0.2);
    assert_int_equal(fl_topk_meter_add(&m, logits, T_I32(FL_SHAPE(3), 0, 0, 1)), FL_OK);
    assert_int_equal(m.correct, 2);
    assert_float_equal(fl_topk_meter_value(&m), 200.0 / 3.0, 1e-12);

    assert_fails_status(fl_topk_meter_init(&m, 0), FL_ERR_VALUE, "k must be at least 1, got 0");
    fl_topk_meter five;
    fl_topk_meter_init(&five, 5);
    assert_fails_status(fl_topk_meter_add(&five, logits, T_I32(FL_SHAPE(3), 0, 0, 1)), FL_ERR_VALUE,
                        "k = 5 is more than the 3 classes of logits f32[3, 3]");
    assert_fails_status(fl_topk_meter_add(&m, logits, T_I32(FL_SHAPE(3), 0, 3, 1)), FL_ERR_INDEX,
                        "targets i32[3] hold classes from 0 to 3, outside [0, 3)");
    assert_fails_status(fl_topk_meter_add(&m, logits, T_I32(FL_SHAPE(3), 0, -1, 1)), FL_ERR_INDEX, "from -1");
    assert_fails_status(fl_topk_meter_add(&m, logits, T_I32(FL_SHAPE(2), 0, 1)), FL_ERR_SHAPE,
                        "needs logits [N, C] and targets [N], got f32[3, 3] and i32[2]");
    assert_fails_status(fl_topk_meter_add(&m, T_I32(FL_SHAPE(1, 2), 1, 2), T_I32(FL_SHAPE(1), 0)), FL_ERR_DTYPE,
                        "needs float logits and integer targets");
    assert_fails_status(fl_topk_meter_add(&m, logits, T_F32(FL_SHAPE(3), 0, 0, 1)), FL_ERR_DTYPE, NULL);
    assert_fails_status(fl_topk_meter_add(&m, logits, NULL), FL_ERR_NULL, "fl_topk_meter_add");
    fl_topk_meter zeroed = {0};
    assert_fails_status(fl_topk_meter_add(&zeroed, logits, T_I32(FL_SHAPE(3), 0, 0, 1)), FL_ERR_VALUE,
                        "call fl_topk_meter_init first");
    assert_int_equal(m.total, 3);
    /* No rows: nothing counted. */
    assert_int_equal(fl_topk_meter_add(&m, fl_zeros(FL_F32, FL_SHAPE(0, 3)), fl_zeros(FL_I64, FL_SHAPE(0))), FL_OK);
    assert_int_equal(m.total, 3);
}

#define SEQ(...) (const int64_t[]){__VA_ARGS__}, (int64_t)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t))

static void edit_distance(void **state)
{
    enum { k = 'k', i = 'i', t = 't', e = 'e', n = 'n', s = 's', g = 'g' };
    fl_edit_distance_meter m = {0};
    assert_float_equal(fl_edit_distance_meter_error_rate(&m), 0, 0);
    /* Predicting "sitting" for "kitten": k->s and e->i substituted, g inserted. */
    assert_int_equal(fl_edit_distance_meter_add(&m, SEQ(s, i, t, t, i, n, g), SEQ(k, i, t, t, e, n)), FL_OK);
    assert_int_equal(m.substitutions, 2);
    assert_int_equal(m.insertions, 1);
    assert_int_equal(m.deletions, 0);
    assert_float_equal(fl_edit_distance_meter_error_rate(&m), 50.0, 1e-12);
    /* A reference token missing from the prediction is a deletion. */
    assert_int_equal(fl_edit_distance_meter_add(&m, SEQ(1, 3), SEQ(1, 2, 3)), FL_OK);
    assert_int_equal(m.deletions, 1);
    assert_int_equal(fl_edit_distance_meter_errors(&m), 4);
    assert_int_equal(m.reference_length, 9);
    assert_int_equal(m.sequences, 2);
    assert_float_equal(fl_edit_distance_meter_error_rate(&m), 400.0 / 9.0, 1e-12);
    /* Empty sides. */
    assert_int_equal(fl_edit_distance_meter_add(&m, NULL, 0, SEQ(7, 8)), FL_OK);
    assert_int_equal(m.deletions, 3);
    assert_int_equal(fl_edit_distance_meter_add(&m, SEQ(7, 8, 9), NULL, 0), FL_OK);
    assert_int_equal(m.insertions, 4);
    assert_int_equal(fl_edit_distance_meter_errors(&m), 9);
    assert_int_equal(m.reference_length, 11);

    /* Ties between alignments: "ab" for "ba" could be two substitutions or an insertion
     * and a deletion; a substitution is preferred. */
    fl_edit_distance_meter tie = {0};
    fl_edit_distance_meter_add(&tie, SEQ(1, 2), SEQ(2, 1));
    assert_int_equal(tie.substitutions, 2);
    assert_int_equal(tie.insertions + tie.deletions, 0);

    fl_edit_distance_meter only_insertions = {0};
    fl_edit_distance_meter_add(&only_insertions, SEQ(1), NULL, 0);
    assert_true(isinf(fl_edit_distance_meter_error_rate(&only_insertions)));

    /* Tensors of any integer dtype. */
    fl_edit_distance_meter_reset(&m);
    assert_int_equal(fl_edit_distance_meter_add_tensors(&m, T_I32(FL_SHAPE(7), s, i, t, t, i, n, g),
                                                        T_U8(FL_SHAPE(6), k, i, t, t, e, n)), FL_OK);
    assert_int_equal(fl_edit_distance_meter_errors(&m), 3);
    assert_int_equal(fl_edit_distance_meter_add_tensors(&m, fl_zeros(FL_I64, FL_SHAPE(0)), T_I64(FL_SHAPE(1), 4)),
                     FL_OK);
    assert_int_equal(m.deletions, 1);

    assert_fails_status(fl_edit_distance_meter_add_tensors(&m, T_F32(FL_SHAPE(1), 1), T_I64(FL_SHAPE(1), 1)),
                        FL_ERR_SHAPE, "prediction must be a 1-D integer tensor, got f32[1]");
    assert_fails_status(fl_edit_distance_meter_add_tensors(&m, T_I64(FL_SHAPE(1), 1), T_I64(FL_SHAPE(1, 1), 1)),
                        FL_ERR_SHAPE, "reference must be a 1-D integer tensor, got i64[1, 1]");
    assert_fails_status(fl_edit_distance_meter_add_tensors(&m, NULL, T_I64(FL_SHAPE(1), 1)), FL_ERR_NULL, NULL);
    assert_fails_status(fl_edit_distance_meter_add(&m, NULL, 2, SEQ(1)), FL_ERR_NULL, "prediction is NULL");
    assert_fails_status(fl_edit_distance_meter_add(&m, SEQ(1), (const int64_t[]){1}, -1), FL_ERR_VALUE, "negative lengths");
    assert_int_equal(m.sequences, 2);
}

static void sleep_seconds(double seconds)
{
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static void timer(void **state)
{
    fl_timer_meter m;
    fl_timer_meter_reset(&m);
    assert_float_equal(fl_timer_meter_value(&m), 0, 0);
    assert_true(isnan(fl_timer_meter_per_sample(&m)));

    fl_timer_meter_start(&m);
    sleep_seconds(0.02);
    fl_timer_meter_stop(&m);
    double first = fl_timer_meter_value(&m);
    assert_true(first >= 0.02 && first < 2.0);
    /* Stopped: time does not run. */
    sleep_seconds(0.02);
    assert_float_equal(fl_timer_meter_value(&m), first, 0);
    fl_timer_meter_stop(&m); /* stopping twice changes nothing */
    assert_float_equal(fl_timer_meter_value(&m), first, 0);

    fl_timer_meter_resume(&m);
    sleep_seconds(0.02);
    double running = fl_timer_meter_value(&m); /* read while running */
    assert_true(running >= first + 0.02 && running < first + 2.0);
    fl_timer_meter_stop(&m);
    fl_timer_meter_add_samples(&m, 3);
    fl_timer_meter_add_samples(&m, 1);
    assert_float_equal(fl_timer_meter_per_sample(&m), fl_timer_meter_value(&m) / 4, 1e-15);

    /* start resets. */
    fl_timer_meter_start(&m);
    assert_int_equal(m.samples, 0);
    assert_true(fl_timer_meter_value(&m) < first);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        scoped_test(average_value),
        scoped_test(frame_error),
        scoped_test(topk_accuracy_matches_pytorch),
        scoped_test(topk_by_hand_and_errors),
        scoped_test(edit_distance),
        scoped_test(timer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
