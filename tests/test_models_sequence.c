/* The sequence models of models/ (the BERT-like encoder, the ASR Transformer, ViT):
 * each builds and trains at TINY size, the CPU configurations have PyTorch's
 * parameter counts, a short training run memorizes a fixed batch, and the BERT-like
 * encoder loaded with PyTorch's weights gives PyTorch's loss, logits and parameter
 * gradients (tests/fixtures/gen_models_sequence.py). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "flare/io.h"
#include "flare/optim.h"
#include "models.h"
#include "support.h"

extern const benchmark_model benchmark_bert, benchmark_asr, benchmark_vit;
static const benchmark_model *const sequence_models[] = {&benchmark_bert, &benchmark_asr, &benchmark_vit};
#define MODEL_COUNT (int)(sizeof sequence_models / sizeof *sequence_models)

#define FIXTURES "models_sequence.bin"

/* One step of SGD on a fresh batch; returns the loss. */
static double train_step(const benchmark_model *bm, fl_module *model, fl_optimizer *opt, fl_tensor *input,
                         fl_tensor *target)
{
    fl_scope scope = fl_scope_begin();
    fl_variable *loss = bm->loss(model, input, target);
    assert_non_null(loss);
    double value = fl_item(fl_v_value(loss));
    assert_int_equal(fl_v_backward(loss, NULL, false), FL_OK);
    assert_int_equal(fl_optimizer_step(opt), FL_OK);
    fl_optimizer_zero_grad(opt);
    fl_scope_end(scope);
    return value;
}

static fl_optimizer *adam(fl_module *model, double lr, fl_parameters **params)
{
    *params = fl_module_parameters(model);
    assert_non_null(*params);
    fl_adam_options options = FL_ADAM_DEFAULTS;
    options.lr = lr;
    fl_optimizer *opt = fl_adam((*params)->items, (*params)->count, &options);
    assert_non_null(opt);
    return opt;
}

/* Every model builds at TINY size, makes a batch of its batch size and takes a
 * training step in which every parameter receives a finite gradient. */
static void tiny_models_take_a_training_step(void **state)
{
    (void)state;
    for (int i = 0; i < MODEL_COUNT; i++) {
        const benchmark_model *bm = sequence_models[i];
        fl_manual_seed(1);
        fl_module *model = bm->build(MODEL_TINY);
        assert_non_null(model);
        fl_tensor *input, *target;
        assert_int_equal(bm->make_batch(MODEL_TINY, bm->batch[MODEL_TINY], &input, &target), FL_OK);
        assert_int_equal(fl_dim(input, 0), bm->batch[MODEL_TINY]);
        assert_int_equal(fl_dim(target, 0), bm->batch[MODEL_TINY]);
        fl_variable *loss = bm->loss(model, input, target);
        if (!loss)
            fail_msg("%s: %s", bm->name, fl_last_error());
        assert_true(isfinite(fl_item(fl_v_value(loss))) && fl_item(fl_v_value(loss)) > 0);
        assert_int_equal(fl_v_backward(loss, NULL, false), FL_OK);
        fl_parameters *p = fl_module_parameters(model);
        for (size_t k = 0; k < p->count; k++) {
            const fl_tensor *g = fl_v_grad(p->items[k]);
            if (!g)
                fail_msg("%s: %s has no gradient", bm->name, p->names[k]);
            assert_true(isfinite(fl_item(fl_sum(g, FL_ALL_AXES, false))));
        }
        assert_true(bm->flops_per_sample(MODEL_TINY) > 0);
        fl_parameters_free(p);
        fl_module_release(model);
        assert_no_error();
    }
}

/* sum(p.numel() for p in build("cpu").parameters()) of bench/torch/{bert,asr,vit}.py:
 *     cd bench/torch && ~/.cache/flare/venv/bin/python -c "import bert, asr, vit
 *     print([sum(p.numel() for p in m.build('cpu').parameters()) for m in (bert, asr, vit)])"
 * (PAPER, not built here: 406880345, 263715088, 86567656.) */
static void cpu_parameter_counts_match_pytorch(void **state)
{
    (void)state;
    const int64_t expected[MODEL_COUNT] = {50191152, 19504158, 11403880};
    for (int i = 0; i < MODEL_COUNT; i++) {
        fl_module *model = sequence_models[i]->build(MODEL_CPU);
        assert_non_null(model);
        assert_int_equal(fl_module_parameter_count(model), expected[i]);
        fl_module_release(model);
    }
}

/* Memorizing a fixed batch: the loss falls to well under half its start. */
static void short_training_runs_decrease_the_loss(void **state)
{
    (void)state;
    const int steps = 200;
    const double lr[MODEL_COUNT] = {3e-3, 3e-3, 3e-3};
    for (int i = 0; i < MODEL_COUNT; i++) {
        const benchmark_model *bm = sequence_models[i];
        fl_manual_seed(2);
        fl_module *model = bm->build(MODEL_TINY);
        fl_tensor *input, *target;
        assert_int_equal(bm->make_batch(MODEL_TINY, bm->batch[MODEL_TINY], &input, &target), FL_OK);
        fl_parameters *params;
        fl_optimizer *opt = adam(model, lr[i], &params);
        double first = 0, last = 0;
        for (int step = 0; step < steps; step++) {
            double loss = train_step(bm, model, opt, input, target);
            if (step == 0)
                first = loss;
            last = loss;
        }
        printf("%s: loss %.4f -> %.4f in %d steps\n", bm->name, first, last, steps);
        assert_true(last < 0.5 * first);
        fl_optimizer_free(opt);
        fl_parameters_free(params);
        fl_module_release(model);
    }
}

/* The TINY BERT-like encoder with PyTorch's weights, loaded by name, on PyTorch's
 * batch, dropout off: the same loss, logits and gradient of every parameter. */
static void bert_matches_pytorch(void **state)
{
    (void)state;
    fl_module *model = benchmark_bert.build(MODEL_TINY);
    fl_tensor_map *weights;
    assert_int_equal(fl_load_safetensors(FLARE_FIXTURES "/models_sequence_bert.safetensors", &weights), FL_OK);
    assert_int_equal(fl_module_load_state_dict(model, weights, true), FL_OK);
    fl_tensor_map_free(weights);
    fl_module_train(model, false);

    fl_tensor *tokens = fixture(FIXTURES, "bert.tokens"), *targets = fixture(FIXTURES, "bert.targets");
    fl_variable *logits = fl_module_forward(model, fl_v_new(tokens, false));
    assert_non_null(logits);
    assert_close(fl_v_value(logits), fixture(FIXTURES, "bert.logits"), 1e-4, 1e-5);
    fl_variable *loss = benchmark_bert.loss(model, tokens, targets);
    assert_non_null(loss);
    assert_close(fl_v_value(loss), fixture(FIXTURES, "bert.loss"), 1e-5, 0);
    assert_int_equal(fl_v_backward(loss, NULL, false), FL_OK);

    fl_parameters *p = fl_module_parameters(model);
    assert_int_equal(p->count, 34); /* embeddings 4, 2 layers of 12, the head 6 */
    for (size_t i = 0; i < p->count; i++) {
        char name[256];
        snprintf(name, sizeof name, "bert.grad.%s", p->names[i]);
        assert_close(fl_v_grad(p->items[i]), fixture(FIXTURES, name), 1e-4, 1e-6);
    }
    fl_parameters_free(p);
    fl_module_release(model);
}

static void bad_arguments_fail_with_a_message(void **state)
{
    (void)state;
    fl_tensor *input, *target;
    for (int i = 0; i < MODEL_COUNT; i++) {
        const benchmark_model *bm = sequence_models[i];
        assert_fails(bm->build(MODEL_SIZES), FL_ERR_VALUE, "MODEL_TINY");
        assert_fails_status(bm->make_batch((model_size)-1, 2, &input, &target), FL_ERR_VALUE, "size -1");
        assert_null(input);
        assert_fails_status(bm->make_batch(MODEL_TINY, 0, &input, &target), FL_ERR_VALUE, "batch must be positive");
        assert_true(isnan(bm->flops_per_sample(MODEL_SIZES)));
        fl_clear_error();
    }
    fl_module *bert = benchmark_bert.build(MODEL_TINY);
    assert_fails(benchmark_bert.loss(bert, fl_zeros(FL_I64, FL_SHAPE(2, 17)), fl_zeros(FL_I64, FL_SHAPE(2, 17))),
                 FL_ERR_SHAPE, "BertLike: expects token ids [N, S] with S <= 16, got i64[2, 17]");
    fl_module_release(bert);
    fl_module *asr = benchmark_asr.build(MODEL_TINY);
    assert_fails(benchmark_asr.loss(asr, fl_zeros(FL_F32, FL_SHAPE(2, 15, 48)), fl_zeros(FL_I64, FL_SHAPE(2, 3))),
                 FL_ERR_SHAPE, "AsrTransformer: expects features [N, 16, T], got f32[2, 15, 48]");
    fl_module_release(asr);
    fl_module *vit = benchmark_vit.build(MODEL_TINY);
    assert_fails(benchmark_vit.loss(vit, fl_zeros(FL_F32, FL_SHAPE(2, 3, 32, 31)), fl_zeros(FL_I64, FL_SHAPE(2))),
                 FL_ERR_SHAPE, "ViT: expects images [N, 3, 32, 32], got f32[2, 3, 32, 31]");
    fl_module_release(vit);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        scoped_test(tiny_models_take_a_training_step),
        scoped_test(cpu_parameter_counts_match_pytorch),
        scoped_test(short_training_runs_decrease_the_loss),
        scoped_test(bert_matches_pytorch),
        scoped_test(bad_arguments_fail_with_a_message),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
