/*
 * An LSTM language model: embedding, a 2-layer LSTM (batch first, no dropout) and a
 * linear head over the vocabulary, trained with cross-entropy on the next token of
 * random token sequences in memory. bench/torch/lstm.py is the same model in PyTorch,
 * with the same state_dict names and PyTorch's default initialization on both sides:
 *
 *     embed    Embedding(vocab, embed)
 *     lstm     LSTM(embed, hidden, 2 layers), weight_ih_l0, ..., bias_hh_l1
 *     head     Linear(hidden, vocab)
 *
 * CPU is a small word-level model of PTB's shape (35 steps, batch 20); PAPER is the
 * "medium" model of Zaremba et al. (650 units, 10000 words) without its dropout.
 */
#include <math.h>

#include "sequence_build.h"

typedef struct lstm_config {
    int64_t vocab, embed, hidden, layers, steps;
} lstm_config;

static const lstm_config configs[MODEL_SIZES] = {
    [MODEL_TINY] = {.vocab = 50, .embed = 16, .hidden = 32, .layers = 2, .steps = 12},
    [MODEL_CPU] = {.vocab = 2000, .embed = 256, .hidden = 256, .layers = 2, .steps = 35},
    [MODEL_PAPER] = {.vocab = 10000, .embed = 650, .hidden = 650, .layers = 2, .steps = 35},
};

static fl_variable *apply(fl_module *m, const char *child, fl_variable *x)
{
    return fl_module_forward(fl_module_child(m, child), x);
}

/* Token ids [N, T] to logits [N, T, vocab]. */
static fl_variable *lstm_lm_forward(fl_module *m, fl_variable *tokens)
{
    const fl_tensor *x = fl_v_value(tokens);
    if (fl_null_args("LstmLanguageModel", 1, x))
        return NULL;
    if (fl_ndim(x) != 2 || fl_dtype_is_float(fl_dtype_of(x))) {
        char d[FL_DESC_SIZE];
        return fl_error(FL_ERR_SHAPE, "LstmLanguageModel", "expects token ids [N, T] of an integer dtype, got %s",
                        fl_describe(x, d));
    }
    fl_scope scope = fl_scope_begin();
    fl_variable *h = apply(m, "lstm", apply(m, "embed", tokens));
    return fl_v_scope_return(scope, apply(m, "head", h));
}

static const fl_module_type lstm_lm_type = {.name = "LstmLanguageModel", .forward = lstm_lm_forward};

static fl_module *lstm_lm_build(model_size size)
{
    if (!valid_size("lstm.build", size))
        return NULL;
    const lstm_config *c = &configs[size];
    return with_children(module_with_config(&lstm_lm_type, c, sizeof *c),
                         NAMED_CHILDREN({"embed", fl_nn_embedding(c->vocab, c->embed, -1)},
                                        {"lstm", fl_nn_lstm(c->embed, c->hidden, (int)c->layers, true, true, 0, false)},
                                        {"head", fl_nn_linear(c->hidden, c->vocab, true)}));
}

/* Token ids uniform over the vocabulary [N, T + 1]: the input is the first T, the
 * target the last T (the next token of each). */
static fl_status lstm_lm_make_batch(model_size size, int64_t batch, fl_tensor **input, fl_tensor **target)
{
    if (batch_start("lstm.make_batch", size, batch, input, target) != FL_OK)
        return FL_ERR_VALUE;
    return next_token_batch(batch, configs[size].vocab, configs[size].steps, input, target);
}

/* Multiply-adds of the matrix products (the input and hidden projections of the four
 * gates, the head), 2 FLOPs each, forward and backward (3x). */
static double lstm_lm_flops_per_sample(model_size size)
{
    if (!valid_size("lstm.flops_per_sample", size))
        return NAN;
    const lstm_config *c = &configs[size];
    double e = (double)c->embed, h = (double)c->hidden, layers = (double)c->layers;
    double recurrent = 4 * h * (e + h) + (layers - 1) * 4 * h * (h + h);
    return 3 * 2 * (double)c->steps * (recurrent + h * (double)c->vocab);
}

const benchmark_model benchmark_lstm = {
    .name = "lstm",
    .batch = {[MODEL_TINY] = 4, [MODEL_CPU] = 20, [MODEL_PAPER] = 20},
    .build = lstm_lm_build,
    .make_batch = lstm_lm_make_batch,
    .loss = token_loss,
    .flops_per_sample = lstm_lm_flops_per_sample,
};
