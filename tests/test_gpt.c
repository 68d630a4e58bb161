/* The GPT-style language model of models/gpt.c: its forward and errors, the tied
 * output head, PyTorch's loss, logits and gradients for the same weights
 * (tests/fixtures/gen_gpt.py), decoding with the key/value cache against full
 * forwards, the sampling rules of gpt_generate, and its benchmark model. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "flare/io.h"
#include "flare/optim.h"
#include "models.h"
#include "support.h"

extern const benchmark_model benchmark_gpt;

static const gpt_config tiny = {.vocab = 23, .context = 12, .layers = 2, .heads = 2, .embed = 16, .dropout = 0};

static fl_module *eval_model(uint64_t seed)
{
    fl_manual_seed(seed);
    fl_module *m = gpt_new(&tiny);
    assert_non_null(m);
    fl_module_train(m, false);
    return m;
}

static fl_tensor *random_tokens(int64_t n, int64_t l) { return fl_randint(0, tiny.vocab, FL_I64, FL_SHAPE(n, l)); }

static fl_tensor *forward(fl_module *m, const fl_tensor *tokens)
{
    fl_variable *y = fl_module_forward(m, fl_v_new(tokens, false));
    assert_non_null(y);
    return fl_reshape(fl_v_value(y), fl_ndim(fl_v_value(y)), fl_shape(fl_v_value(y)));
}

/* The logits of the full forward at the last position, [N, V]. */
static fl_tensor *last_logits(fl_module *m, const fl_tensor *tokens)
{
    return fl_index(forward(m, tokens), FL_INDEX(FL_SPAN, FL_AT(fl_dim(tokens, 1) - 1)));
}

static void forward_gives_logits_and_refuses_bad_tokens(void **state)
{
    (void)state;
    fl_module *m = eval_model(1);
    fl_tensor *logits = forward(m, random_tokens(3, tiny.context));
    assert_shape(logits, 3, tiny.context, tiny.vocab);
    assert_true(isfinite(fl_item(fl_sum(logits, FL_ALL_AXES, false))));
    assert_fails(fl_module_forward(m, fl_v_new(random_tokens(1, tiny.context + 1), false)), FL_ERR_SHAPE,
                 "exceed the context of 12");
    assert_fails(fl_module_forward(m, fl_v_new(T_I64(FL_SHAPE(1, 3), 1, 23, 2), false)), FL_ERR_VALUE,
                 "must lie in [0, 23)");
    assert_fails(fl_module_forward(m, fl_v_new(T_I64(FL_SHAPE(1, 2), -1, 2), false)), FL_ERR_VALUE, "from -1 to 2");
    assert_fails(fl_module_forward(m, fl_v_new(fl_zeros(FL_F32, FL_SHAPE(1, 2)), false)), FL_ERR_SHAPE, "i64 [N, L]");
    assert_fails(fl_module_forward(m, fl_v_new(fl_zeros(FL_I64, FL_SHAPE(0, 2)), false)), FL_ERR_SHAPE, "i64[0, 2]");
    assert_fails(gpt_new(&(gpt_config){.vocab = 5, .context = 4, .layers = 1, .heads = 3, .embed = 8}), FL_ERR_VALUE,
                 "divisible by heads");
    gpt_cache *cache = gpt_cache_new(m, 1);
    assert_non_null(cache);
    assert_non_null(gpt_cache_feed(cache, random_tokens(1, 10)));
    assert_fails(gpt_cache_feed(cache, random_tokens(1, 3)), FL_ERR_SHAPE, "13 positions (10 cached");
    assert_int_equal(gpt_cache_length(cache), 10);
    assert_fails(gpt_cache_feed(cache, random_tokens(2, 1)), FL_ERR_SHAPE, "batch of 1");
    gpt_cache_free(cache);
    fl_module *relu = fl_nn_relu();
    assert_fails(gpt_cache_new(relu, 1), FL_ERR_VALUE, "not a GPT");
    fl_module_release(relu);
    assert_fails(gpt_cache_new(m, 0), FL_ERR_VALUE, "batch must be positive");
    const gpt_sampling greedy = {0};
    assert_fails(gpt_generate(m, random_tokens(1, 4), 10, &greedy), FL_ERR_SHAPE, "past the context");
    fl_module_release(m);
    assert_no_error();
}

/* The output head is the token embedding itself: one [V, E] parameter, and the
 * parameter count has no second copy. */
static void output_head_is_tied_to_the_embedding(void **state)
{
    (void)state;
    fl_module *m = eval_model(2);
    fl_parameters *p = fl_module_parameters(m);
    int vocab_sized = 0;
    for (size_t i = 0; i < p->count; i++)
        if (fl_dim(fl_v_value(p->items[i]), 0) == tiny.vocab)
            vocab_sized++, assert_string_equal(p->names[i], "tok_embed.weight");
    assert_int_equal(vocab_sized, 1);
    fl_parameters_free(p);
    int64_t e = tiny.embed, block = 4 * e * e + 4 * e /* attention */ + 8 * e * e + 5 * e /* MLP */ + 4 * e /* norms */;
    assert_int_equal(fl_module_parameter_count(m), tiny.vocab * e + tiny.context * e + tiny.layers * block + 2 * e);
    fl_module_release(m);
}

/* The cross-entropy of the logits of tokens [1, L] against target [L]; with backward,
 * its gradient accumulates into the parameters. */
static double next_token_loss(fl_module *m, const fl_tensor *tokens, const fl_tensor *target, bool backward)
{
    fl_scope scope = fl_scope_begin();
    fl_variable *logits = fl_module_forward(m, fl_v_new(tokens, false));
    fl_variable *loss = fl_nn_cross_entropy(fl_v_reshape(logits, FL_SHAPE(fl_dim(target, 0), tiny.vocab)), target,
                                            &FL_CLASS_LOSS_DEFAULTS);
    assert_non_null(loss);
    double value = fl_item(fl_v_value(loss));
    if (backward)
        assert_int_equal(fl_v_backward(loss, NULL, false), FL_OK);
    fl_scope_end(scope);
    return value;
}

/* The gradient of the tied weight holds both uses: a row of a token absent from the
 * input still gets the head's gradient, and a central difference on a row of a token
 * in the input (moving its embedding and its logit together) matches the gradient. */
static void tied_embedding_gets_the_gradient_of_both_uses(void **state)
{
    (void)state;
    fl_module *m = eval_model(3);
    fl_tensor *tokens = T_I64(FL_SHAPE(1, 5), 4, 7, 4, 9, 7);
    fl_tensor *target = T_I64(FL_SHAPE(5), 7, 4, 9, 7, 1);
    fl_variable *weight = fl_module_parameter(fl_module_child(m, "tok_embed"), "weight");
    fl_tensor *w0 = fl_reshape(fl_v_value(weight), FL_SHAPE(tiny.vocab, tiny.embed));
    next_token_loss(m, tokens, target, true);
    const fl_tensor *g = fl_v_grad(weight);
    assert_non_null(g);
    /* Token 12 is not in the input: only the head reaches its row. */
    assert_true(fl_item(fl_sum(fl_abs(fl_index(g, FL_INDEX(FL_AT(12)))), FL_ALL_AXES, false)) > 1e-6);
    const double h = 1e-2;
    for (int64_t col = 0; col < 3; col++) {
        double lossed[2];
        for (int side = 0; side < 2; side++) {
            fl_tensor *bump = fl_index_assign(fl_zeros_like(w0), FL_INDEX(FL_AT(7), FL_AT(col)),
                                              fl_scalar(side ? h : -h, FL_F32));
            assert_int_equal(fl_v_set_value(weight, fl_add(w0, bump)), FL_OK);
            lossed[side] = next_token_loss(m, tokens, target, false);
        }
        double numeric = (lossed[1] - lossed[0]) / (2 * h);
        double analytic = fl_item(fl_index(g, FL_INDEX(FL_AT(7), FL_AT(col))));
        if (fabs(numeric - analytic) > 2e-3 + 2e-2 * fabs(analytic))
            fail_msg("column %lld: numeric %g, analytic %g", (long long)col, numeric, analytic);
    }
    fl_module_release(m);
    assert_no_error();
}

/* The TINY benchmark GPT with PyTorch's weights, loaded by name, on PyTorch's batch,
 * dropout off: the same logits, loss and gradient of every parameter, the tied
 * embedding's included. The parameter counts are bench/torch/gpt.py's. */
static void gpt_matches_pytorch(void **state)
{
    (void)state;
    fl_module *model = benchmark_gpt.build(MODEL_TINY);
    assert_non_null(model);
    fl_tensor_map *weights;
    assert_int_equal(fl_load_safetensors(FLARE_FIXTURES "/gpt_tiny.safetensors", &weights), FL_OK);
    assert_int_equal(fl_module_load_state_dict(model, weights, true), FL_OK);
    fl_tensor_map_free(weights);
    fl_module_train(model, false);

    fl_tensor *tokens = fixture("gpt.bin", "tokens"), *targets = fixture("gpt.bin", "targets");
    fl_variable *logits = fl_module_forward(model, fl_v_new(tokens, false));
    assert_non_null(logits);
    assert_close(fl_v_value(logits), fixture("gpt.bin", "logits"), 1e-4, 1e-5);
    fl_variable *loss = benchmark_gpt.loss(model, tokens, targets);
    assert_non_null(loss);
    assert_close(fl_v_value(loss), fixture("gpt.bin", "loss"), 1e-5, 0);
    assert_int_equal(fl_v_backward(loss, NULL, false), FL_OK);
    fl_parameters *p = fl_module_parameters(model);
    assert_int_equal(p->count, 2 + 2 * 12 + 2); /* embeddings, 2 blocks of 12, ln_f */
    for (size_t i = 0; i < p->count; i++) {
        char name[256];
        snprintf(name, sizeof name, "grad.%s", p->names[i]);
        assert_close(fl_v_grad(p->items[i]), fixture("gpt.bin", name), 1e-4, 1e-6);
    }
    fl_parameters_free(p);
    assert_int_equal(fl_module_parameter_count(model), 29056);
    fl_module_release(model);
    fl_module *cpu = benchmark_gpt.build(MODEL_CPU);
    assert_non_null(cpu);
    assert_int_equal(fl_module_parameter_count(cpu), 34537472);
    fl_module_release(cpu);

    fl_tensor *input, *target;
    assert_int_equal(benchmark_gpt.make_batch(MODEL_TINY, 3, &input, &target), FL_OK);
    assert_shape(input, 3, 16);
    assert_shape(target, 3, 16);
    assert_close(fl_index(input, FL_INDEX(FL_SPAN, FL_RANGE(1, 16))),
                 fl_index(target, FL_INDEX(FL_SPAN, FL_RANGE(0, 15))), 0, 0);
    assert_true(benchmark_gpt.flops_per_sample(MODEL_TINY) > 0);
    assert_fails(benchmark_gpt.build(MODEL_SIZES), FL_ERR_VALUE, "MODEL_TINY");
    assert_no_error();
}

/* At every step of incremental decoding, the cached logits equal the full forward's at the last position. */
static void cached_logits_equal_full_forward(void **state)
{
    (void)state;
    fl_module *m = eval_model(4);
    fl_tensor *sequence = random_tokens(2, tiny.context);
    gpt_cache *cache = gpt_cache_new(m, 2);
    assert_non_null(cache);
    /* A prompt of 3, a chunk of 2 after it (causal within the chunk, offset by the
     * cache), then one token at a time. */
    const int64_t ends[] = {3, 5, 6, 7, 8, 9, 10, 11, 12};
    for (size_t i = 0; i < sizeof ends / sizeof *ends; i++) {
        int64_t end = ends[i];
        fl_scope scope = fl_scope_begin();
        fl_tensor *fed = fl_index(sequence, FL_INDEX(FL_SPAN, FL_RANGE(i == 0 ? 0 : ends[i - 1], end)));
        fl_tensor *cached = gpt_cache_feed(cache, fed);
        assert_non_null(cached);
        assert_shape(cached, 2, tiny.vocab);
        assert_int_equal(gpt_cache_length(cache), end);
        assert_close(cached, last_logits(m, fl_index(sequence, FL_INDEX(FL_SPAN, FL_RANGE(0, end)))), 1e-4, 1e-4);
        fl_scope_end(scope);
    }
    gpt_cache_free(cache);
    fl_module_release(m);
    assert_no_error();
}

/* Greedy generation is the argmax of repeated full forwards. */
static void greedy_generation_equals_repeated_argmax(void **state)
{
    (void)state;
    fl_module *m = eval_model(5);
    fl_tensor *prompt = random_tokens(2, 3);
    const int64_t steps = tiny.context - 3 + 1;
    fl_tensor *generated = gpt_generate(m, prompt, steps, &(gpt_sampling){.temperature = 0});
    assert_non_null(generated);
    assert_shape(generated, 2, 3 + steps);
    fl_tensor *expected = prompt;
    for (int64_t i = 0; i < steps; i++) {
        fl_tensor *next = fl_reshape(fl_argmax(last_logits(m, expected), 1, false), FL_SHAPE(2, 1));
        expected = fl_concat((fl_tensor *[]){expected, next}, 2, 1);
    }
    assert_true(fl_item(fl_all(fl_eq(generated, expected), FL_ALL_AXES, false)) == 1);
    fl_module_release(m);
    assert_no_error();
}

static bool same(const fl_tensor *a, const fl_tensor *b)
{
    return fl_item(fl_all(fl_eq(a, b), FL_ALL_AXES, false)) == 1;
}

/* The seed decides the sample; the global generator is left alone; top_k = 1 and a
 * tiny top_p are greedy; top_k = 2 samples only the two most likely tokens. */
static void sampling_follows_its_seed_and_limits(void **state)
{
    (void)state;
    fl_module *m = eval_model(6);
    fl_tensor *prompt = random_tokens(2, 2);
    const int64_t steps = 9;
    gpt_sampling s = {.temperature = 1.5, .top_p = 1, .seed = 42};
    fl_manual_seed(100);
    fl_tensor *a = gpt_generate(m, prompt, steps, &s);
    fl_tensor *after = fl_rand(FL_F32, FL_SHAPE(4));
    fl_manual_seed(100);
    fl_tensor *untouched = fl_rand(FL_F32, FL_SHAPE(4));
    assert_close(after, untouched, 0, 0);
    fl_tensor *b = gpt_generate(m, prompt, steps, &s);
    assert_true(same(a, b));
    s.seed = 43;
    fl_tensor *c = gpt_generate(m, prompt, steps, &s);
    assert_non_null(c);
    assert_false(same(a, c));

    fl_tensor *greedy = gpt_generate(m, prompt, steps, &(gpt_sampling){.temperature = 0});
    assert_true(same(gpt_generate(m, prompt, steps, &(gpt_sampling){.temperature = 1, .top_k = 1, .top_p = 1,
                                                                      .seed = 7}),
                     greedy));
    assert_true(same(gpt_generate(m, prompt, steps, &(gpt_sampling){.temperature = 1, .top_p = 1e-6, .seed = 7}),
                     greedy));

    fl_tensor *top2 = NULL;
    assert_int_equal(fl_topk(last_logits(m, prompt), 2, 1, true, NULL, &top2), FL_OK);
    bool seen_second = false;
    for (uint64_t seed = 0; seed < 40; seed++) {
        fl_tensor *one = gpt_generate(m, prompt, 1, &(gpt_sampling){.temperature = 5, .top_k = 2, .top_p = 1,
                                                                     .seed = seed});
        fl_tensor *next = fl_index(one, FL_INDEX(FL_SPAN, FL_RANGE(2, 3)));
        fl_tensor *hit = fl_eq(next, top2);
        assert_true(fl_item(fl_all(fl_any(hit, FL_AXES(1), false), FL_ALL_AXES, false)) == 1);
        seen_second |= fl_item(fl_sum(fl_index(hit, FL_INDEX(FL_SPAN, FL_AT(1))), FL_ALL_AXES, false)) > 0;
    }
    assert_true(seen_second);
    assert_fails(gpt_generate(m, prompt, 1, &(gpt_sampling){.temperature = 1, .top_p = -0.5}), FL_ERR_VALUE,
                 "top_p >= 0");
    fl_module_release(m);
    assert_no_error();
}

/* A few Adam steps on a short sequence repeated lower the next-token loss. */
static void training_lowers_the_loss(void **state)
{
    (void)state;
    fl_manual_seed(7);
    gpt_config c = tiny;
    c.dropout = 0.1;
    fl_module *m = gpt_new(&c);
    assert_non_null(m);
    int64_t seq[13];
    for (int i = 0; i < 13; i++)
        seq[i] = (int64_t)(3 + i % 4);
    fl_tensor *input = fl_from_data(seq, FL_I64, FL_SHAPE(1, 12));
    fl_tensor *target = fl_from_data(seq + 1, FL_I64, FL_SHAPE(12));
    fl_parameters *p = fl_module_parameters(m);
    fl_adam_options options = FL_ADAM_DEFAULTS;
    options.lr = 1e-2;
    fl_optimizer *opt = fl_adam(p->items, p->count, &options);
    assert_non_null(opt);
    double first = 0, last = 0;
    for (int step = 0; step < 25; step++) {
        fl_scope scope = fl_scope_begin();
        fl_variable *logits = fl_module_forward(m, fl_v_new(input, false));
        fl_variable *loss =
            fl_nn_cross_entropy(fl_v_reshape(logits, FL_SHAPE(12, c.vocab)), target, &FL_CLASS_LOSS_DEFAULTS);
        assert_non_null(loss);
        last = fl_item(fl_v_value(loss));
        if (step == 0)
            first = last;
        assert_int_equal(fl_v_backward(loss, NULL, false), FL_OK);
        assert_int_equal(fl_optimizer_step(opt), FL_OK);
        fl_optimizer_zero_grad(opt);
        fl_scope_end(scope);
    }
    if (!(last < 0.5 * first))
        fail_msg("loss went from %g to %g", first, last);
    fl_optimizer_free(opt);
    fl_parameters_free(p);
    fl_module_release(m);
    assert_no_error();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        scoped_test(forward_gives_logits_and_refuses_bad_tokens),
        scoped_test(output_head_is_tied_to_the_embedding),
        scoped_test(tied_embedding_gets_the_gradient_of_both_uses),
        scoped_test(gpt_matches_pytorch),
        scoped_test(cached_logits_equal_full_forward),
        scoped_test(greedy_generation_equals_repeated_argmax),
        scoped_test(sampling_follows_its_seed_and_limits),
        scoped_test(training_lowers_the_loss),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
