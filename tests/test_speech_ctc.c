/* The CTC acoustic model of models/speech_ctc.c: output shapes and lengths, outputs of
 * a sample independent of the padding its batch gives it, refusals of bad input, and
 * a short training run that memorizes two utterances. */
#include <math.h>
#include <string.h>

#include "flare/optim.h"
#include "models.h"
#include "support.h"

static const speech_ctc_config tiny = {.features = 8, .channels = 12, .d_model = 16, .heads = 2, .dim_ff = 24,
                                       .layers = 2, .tokens = 6, .kernel = 5, .stride = 3, .dropout = 0};

static void shapes_and_lengths(void **state)
{
    (void)state;
    fl_module *m = speech_ctc_new(&tiny);
    assert_non_null(m);
    fl_tensor *lengths = NULL;
    fl_variable *y = speech_ctc_forward(m, fl_v_new(fl_randn(FL_F32, FL_SHAPE(3, 20, 8)), false),
                                        T_I64(FL_SHAPE(3), 20, 7, 1), &lengths);
    assert_non_null(y);
    assert_shape(fl_v_value(y), 7, 3, 6);
    assert_close(lengths, T_I64(FL_SHAPE(3), 7, 3, 1), 0, 0);
    assert_int_equal(speech_ctc_output_length(&tiny, 20), 7);
    assert_int_equal(speech_ctc_output_length(&tiny, 1), 1);
    /* Log-probabilities: each frame's exponentials sum to 1. */
    assert_close(fl_sum(fl_exp(fl_v_value(y)), FL_AXES(2), false), fl_ones(FL_F32, FL_SHAPE(7, 3)), 1e-5, 1e-5);
    fl_module_release(m);
    assert_no_error();
}

/* A 10-frame utterance alone and padded to 16 frames beside another: the same
 * log-probabilities over its 4 output frames. */
static void padding_does_not_change_a_sample(void **state)
{
    (void)state;
    fl_module *m = speech_ctc_new(&tiny);
    fl_tensor *a = fl_randn(FL_F32, FL_SHAPE(1, 10, 8)), *b = fl_randn(FL_F32, FL_SHAPE(1, 16, 8));
    fl_variable *alone = speech_ctc_forward(m, fl_v_new(a, false), T_I64(FL_SHAPE(1), 10), NULL);
    fl_tensor *padded = fl_concat((fl_tensor *[]){fl_pad(a, (const int64_t[]){0, 0, 0}, (const int64_t[]){0, 6, 0}, 0), b}, 2, 0);
    fl_variable *both = speech_ctc_forward(m, fl_v_new(padded, false), T_I64(FL_SHAPE(2), 10, 16), NULL);
    assert_non_null(alone);
    assert_non_null(both);
    assert_close(fl_index(fl_v_value(both), FL_INDEX(FL_RANGE(0, 4), FL_RANGE(0, 1))), fl_v_value(alone), 1e-5,
                 1e-5);
    fl_module_release(m);
    assert_no_error();
}

static void bad_input_is_refused(void **state)
{
    (void)state;
    speech_ctc_config c = tiny;
    c.kernel = 4;
    assert_fails(speech_ctc_new(&c), FL_ERR_VALUE, "odd kernel (4)");
    c = tiny;
    c.heads = 3;
    assert_fails(speech_ctc_new(&c), FL_ERR_VALUE, "divisible by heads (3)");
    fl_module *m = speech_ctc_new(&tiny);
    fl_variable *x = fl_v_new(fl_randn(FL_F32, FL_SHAPE(2, 9, 8)), false);
    assert_fails(speech_ctc_forward(m, fl_v_new(fl_randn(FL_F32, FL_SHAPE(2, 9, 7)), false), T_I64(FL_SHAPE(2), 9, 9),
                                    NULL),
                 FL_ERR_SHAPE, "expects features [N, T, 8]");
    assert_fails(speech_ctc_forward(m, x, T_I64(FL_SHAPE(3), 9, 9, 9), NULL), FL_ERR_SHAPE, "integer lengths [N]");
    assert_fails(speech_ctc_forward(m, x, T_I64(FL_SHAPE(2), 9, 10), NULL), FL_ERR_VALUE,
                 "lengths[1] is 10, outside [1, 9]");
    assert_fails(speech_ctc_forward(m, x, T_I64(FL_SHAPE(2), 0, 9), NULL), FL_ERR_VALUE, "lengths[0] is 0");
    fl_module_release(m);
}

/* Two utterances of random features and their token sequences, learnt by Adam: the
 * CTC loss falls from about its starting value to a small fraction of it, and greedy
 * decoding of the outputs gives the targets back. */
static void memorizes_two_utterances(void **state)
{
    (void)state;
    fl_manual_seed(3);
    fl_module *m = speech_ctc_new(&tiny);
    fl_parameters *params = fl_module_parameters(m);
    fl_adam_options options = FL_ADAM_DEFAULTS;
    options.lr = 3e-3;
    fl_optimizer *opt = fl_adam(params->items, params->count, &options);
    fl_tensor *x = fl_randn(FL_F32, FL_SHAPE(2, 30, 8)), *lengths = T_I64(FL_SHAPE(2), 30, 24);
    fl_tensor *targets = T_I64(FL_SHAPE(2, 4), 1, 2, 3, 4, 5, 3, 0, 0), *target_lengths = T_I64(FL_SHAPE(2), 4, 2);
    double first = 0, last = 0;
    for (int step = 0; step < 150; step++) {
        fl_scope scope = fl_scope_begin();
        fl_tensor *out_lengths;
        fl_variable *lp = speech_ctc_forward(m, fl_v_new(x, false), lengths, &out_lengths);
        fl_variable *loss = fl_nn_ctc_loss(lp, targets, out_lengths, target_lengths, 0, FL_REDUCTION_MEAN, false);
        assert_non_null(loss);
        last = fl_item(fl_v_value(loss));
        if (step == 0)
            first = last;
        assert_int_equal(fl_v_backward(loss, NULL, false), FL_OK);
        assert_int_equal(fl_optimizer_step(opt), FL_OK);
        fl_optimizer_zero_grad(opt);
        fl_scope_end(scope);
    }
    assert_true(last < first / 20);
    fl_tensor *best = fl_argmax(fl_v_value(speech_ctc_forward(m, fl_v_new(x, false), lengths, NULL)), 2, false);
    int64_t path[10 * 2];
    assert_int_equal(fl_to_host(fl_copy(fl_transpose(best, 0, 1)), path, sizeof path), FL_OK);
    const int64_t expected[2][4] = {{1, 2, 3, 4}, {5, 3}};
    const int64_t frames[2] = {10, 8}, count[2] = {4, 2};
    for (int i = 0; i < 2; i++) {
        int64_t decoded[10], n = 0, previous = 0;
        for (int64_t t = 0; t < frames[i]; t++) {
            int64_t k = path[i * 10 + t];
            if (k != 0 && k != previous)
                decoded[n++] = k;
            previous = k;
        }
        assert_int_equal(n, count[i]);
        assert_memory_equal(decoded, expected[i], (size_t)n * sizeof *decoded);
    }
    fl_optimizer_free(opt);
    fl_parameters_free(params);
    fl_module_release(m);
    assert_no_error();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        scoped_test(shapes_and_lengths),
        scoped_test(padding_does_not_change_a_sample),
        scoped_test(bad_input_is_refused),
        scoped_test(memorizes_two_utterances),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
