/*
 * The ASR Transformer of Table 3 (Flashlight's benchmark model, after RASR), trained
 * with CTC on random log-mel-like features in memory. bench/torch/asr.py is the same
 * model in PyTorch, with the same state_dict names:
 *
 *     frontend            Conv1d over the log-mel channels to 2 d_model channels
 *                         (kernel 7, "same" padding, a stride that subsamples time),
 *                         then a GLU over channels (no parameters)
 *     dropout             after the fixed sinusoidal positions are added
 *     encoder.layers.N.*  post-norm ReLU TransformerEncoderLayer
 *     output              Linear to the tokens; CTC with blank 0
 *
 * Every input is full length (no padding mask). PAPER is Flashlight's benchmark
 * configuration (36 x 768, 4 heads, FFN 3072, stride 3, dropout 0.4, 1500 frames)
 * over RASR's 10000 word pieces: 263.7M parameters (Table 3: 263M).
 */
#include <math.h>

#include "sequence_build.h"

typedef struct asr_config {
    int64_t features, frames, d_model, nhead, dim_ff, layers, tokens;
    int kernel, stride;
    double dropout;
} asr_config;

static const asr_config configs[MODEL_SIZES] = {
    [MODEL_TINY] = {.features = 16, .frames = 48, .d_model = 32, .nhead = 4, .dim_ff = 64, .layers = 2, .tokens = 10,
                    .kernel = 7, .stride = 2, .dropout = 0.1},
    [MODEL_CPU] = {.features = 80, .frames = 400, .d_model = 512, .nhead = 8, .dim_ff = 2048, .layers = 6,
                   .tokens = 30, .kernel = 7, .stride = 2, .dropout = 0.1},
    [MODEL_PAPER] = {.features = 80, .frames = 1500, .d_model = 768, .nhead = 4, .dim_ff = 3072, .layers = 36,
                     .tokens = 10000, .kernel = 7, .stride = 3, .dropout = 0.4},
};

#define BLANK 0

static int64_t output_frames(const asr_config *c)
{
    return (c->frames + 2 * (c->kernel / 2) - c->kernel) / c->stride + 1;
}

/* pe[t, 2i] = sin(t w_i), pe[t, 2i + 1] = cos(t w_i), w_i = 10000^(-2i / dim): [length, dim]. */
static fl_tensor *sinusoids(int64_t length, int64_t dim)
{
    fl_tensor *inv_freq = fl_exp(fl_mul_scalar(fl_arange(0, (double)dim, 2, FL_F32), -log(10000.0) / (double)dim));
    fl_tensor *angles =
        fl_mul(fl_unsqueeze(fl_arange(0, (double)length, 1, FL_F32), 1), fl_unsqueeze(inv_freq, 0));
    fl_tensor *pair[2] = {fl_sin(angles), fl_cos(angles)};
    return fl_reshape(fl_stack(pair, 2, -1), FL_SHAPE(length, dim));
}

/* PyTorch's F.glu(x, dim): the first half of the axis times the sigmoid of the second. */
static fl_variable *glu(fl_variable *x, int axis)
{
    const fl_tensor *v = fl_v_value(x);
    if (!v)
        return NULL;
    int64_t half = fl_dim(v, axis) / 2;
    fl_variable *parts[2] = {NULL, NULL};
    if (fl_v_split(x, (const int64_t[]){half, half}, 2, axis, parts) != FL_OK)
        return NULL;
    return fl_v_mul(parts[0], fl_v_sigmoid(parts[1]));
}

static fl_variable *apply(fl_module *m, const char *child, fl_variable *x)
{
    return fl_module_forward(fl_module_child(m, child), x);
}

/* Features [N, F, T] to logits [N, T', tokens]. */
static fl_variable *asr_forward(fl_module *m, fl_variable *features)
{
    const asr_config *c = fl_module_state(m);
    const fl_tensor *x = fl_v_value(features);
    if (fl_null_args("AsrTransformer", 1, x))
        return NULL;
    if (fl_ndim(x) != 3 || fl_dim(x, 1) != c->features) {
        char d[FL_DESC_SIZE];
        return fl_error(FL_ERR_SHAPE, "AsrTransformer", "expects features [N, %lld, T], got %s",
                         (long long)c->features, fl_describe(x, d));
    }
    fl_scope scope = fl_scope_begin();
    fl_variable *h = fl_v_transpose(glu(apply(m, "frontend", features), 1), 1, 2);
    const fl_tensor *hv = fl_v_value(h);
    if (hv)
        h = fl_v_add(h, fl_v_new(sinusoids(fl_dim(hv, 1), c->d_model), false));
    h = apply(m, "encoder", apply(m, "dropout", h));
    return fl_v_scope_return(scope, apply(m, "output", h));
}

static const fl_module_type asr_type = {.name = "AsrTransformer", .forward = asr_forward};

static fl_module *asr_build(model_size size)
{
    if (!valid_size("asr.build", size))
        return NULL;
    const asr_config *c = &configs[size];
    const fl_conv_params frontend = {.stride = {1, c->stride}, .padding = {0, c->kernel / 2}};
    fl_module *layer =
        fl_nn_transformer_encoder_layer(c->d_model, c->nhead, c->dim_ff, c->dropout, "relu", 1e-5, true, false);
    return with_children(
        module_with_config(&asr_type, c, sizeof *c),
        NAMED_CHILDREN({"frontend", fl_nn_conv1d(c->features, 2 * c->d_model, c->kernel, &frontend, true)},
                       {"dropout", fl_nn_dropout(c->dropout)},
                       {"encoder", fl_nn_transformer_encoder(layer, (int)c->layers, NULL)},
                       {"output", fl_nn_linear(c->d_model, c->tokens, true)}));
}

/* Normalized log-mel-like features N(0, 1) [N, F, T], and targets [N, S] of token
 * ids in [1, tokens) padded with the blank, of lengths uniform in [T'/8, T'/4]
 * (12 to 25 tokens a second at T' = 100 frames a second): characters or word pieces
 * at the pace of speech. */
static fl_status asr_make_batch(model_size size, int64_t batch, fl_tensor **input, fl_tensor **target)
{
    if (batch_start("asr.make_batch", size, batch, input, target) != FL_OK)
        return FL_ERR_VALUE;
    const asr_config *c = &configs[size];
    int64_t t = output_frames(c), low = t / 8 > 1 ? t / 8 : 1, high = t / 4 > 1 ? t / 4 : 1;
    fl_scope scope = fl_scope_begin();
    fl_tensor *x = fl_randn(FL_F32, FL_SHAPE(batch, c->features, c->frames));
    fl_tensor *lengths = fl_randint(low, high + 1, FL_I64, FL_SHAPE(batch, 1));
    fl_tensor *tokens = fl_randint(1, c->tokens, FL_I64, FL_SHAPE(batch, high));
    fl_tensor *inside = fl_lt(fl_unsqueeze(fl_arange(0, (double)high, 1, FL_I64), 0), lengths);
    fl_tensor *y = fl_where(inside, tokens, fl_scalar(BLANK, FL_I64));
    return batch_return(scope, x, y, input, target);
}

/* CTC of the log-softmax over [T', N, tokens], each input full length, each target
 * as long as its ids other than the blank (padding); PyTorch's mean reduction. */
static fl_variable *asr_loss(fl_module *model, const fl_tensor *input, const fl_tensor *target)
{
    fl_scope scope = fl_scope_begin();
    fl_variable *logits = fl_module_forward(model, fl_v_new(input, false));
    const fl_tensor *value = fl_v_value(logits);
    fl_variable *loss = NULL;
    if (value) {
        fl_variable *log_probs = fl_v_transpose(fl_v_log_softmax(logits, 2), 0, 1);
        fl_tensor *input_lengths = fl_full((double)fl_dim(value, 1), FL_I64, FL_SHAPE(fl_dim(value, 0)));
        fl_tensor *target_lengths = fl_sum(fl_ne(target, fl_scalar(BLANK, fl_dtype_of(target))), FL_AXES(1), false);
        loss = fl_nn_ctc_loss(log_probs, target, input_lengths, target_lengths, BLANK, FL_REDUCTION_MEAN, false);
    }
    return fl_v_scope_return(scope, loss);
}

/* Multiply-adds of the convolution and the matrix products, 2 FLOPs each, forward and
 * backward (3x). */
static double asr_flops_per_sample(model_size size)
{
    if (!valid_size("asr.flops_per_sample", size))
        return NAN;
    const asr_config *c = &configs[size];
    double t = (double)output_frames(c), d = (double)c->d_model;
    double frontend = t * 2 * d * (double)c->features * c->kernel;
    double layer = t * (4 * d * d + 2 * d * (double)c->dim_ff + 2 * t * d);
    double output = t * d * (double)c->tokens;
    return 3 * 2 * (frontend + (double)c->layers * layer + output);
}

const benchmark_model benchmark_asr = {
    .name = "asr",
    .batch = {[MODEL_TINY] = 4, [MODEL_CPU] = 4, [MODEL_PAPER] = 10},
    .build = asr_build,
    .make_batch = asr_make_batch,
    .loss = asr_loss,
    .flops_per_sample = asr_flops_per_sample,
};
