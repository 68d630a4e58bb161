/*
 * A CTC acoustic model small enough to train on a few CPU cores (models.h): two 1-D
 * convolutions over log-mel frames, the second subsampling time, then pre-norm
 * Transformer encoder layers with a padding mask, and a linear layer to the tokens
 * (blank included). Children, in state_dict order:
 *
 *     conv1      Conv1d(features, channels, kernel, stride 1, "same"), GELU
 *     conv2      Conv1d(channels, d_model, kernel, stride, padding kernel / 2), GELU
 *     encoder    TransformerEncoder of pre-norm GELU layers, final LayerNorm "norm"
 *     output     Linear(d_model, tokens)
 *
 * Fixed sinusoidal positions are added after conv2; dropout is the encoder layers'.
 */
#include <math.h>
#include <stdlib.h>

#include "sequence_build.h"

static fl_variable *apply(fl_module *m, const char *child, fl_variable *x)
{
    return fl_module_forward(fl_module_child(m, child), x);
}

int64_t speech_ctc_output_length(const speech_ctc_config *c, int64_t frames)
{
    int64_t pad = c->kernel / 2;
    return frames + 2 * pad < c->kernel ? 0 : (frames + 2 * pad - c->kernel) / c->stride + 1;
}

/* pe[t, 2i] = sin(t w_i), pe[t, 2i + 1] = cos(t w_i), w_i = 10000^(-2i / dim). */
static fl_tensor *sinusoids(int64_t length, int64_t dim)
{
    fl_tensor *inv_freq = fl_exp(fl_mul_scalar(fl_arange(0, (double)dim, 2, FL_F32), -log(10000.0) / (double)dim));
    fl_tensor *angles = fl_mul(fl_unsqueeze(fl_arange(0, (double)length, 1, FL_F32), 1), fl_unsqueeze(inv_freq, 0));
    fl_tensor *pair[2] = {fl_sin(angles), fl_cos(angles)};
    return fl_reshape(fl_stack(pair, 2, -1), FL_SHAPE(length, dim));
}

fl_variable *speech_ctc_forward(fl_module *m, fl_variable *features, const fl_tensor *lengths,
                                fl_tensor **out_lengths)
{
    static const char *const fn = "speech_ctc_forward";
    if (out_lengths)
        *out_lengths = NULL;
    const fl_tensor *x = fl_v_value(features);
    if (fl_null_args(fn, 3, m, x, lengths))
        return NULL;
    const speech_ctc_config *c = fl_module_state(m);
    char d[FL_DESC_SIZE], e[FL_DESC_SIZE];
    if (fl_ndim(x) != 3 || fl_dim(x, 2) != c->features || fl_ndim(lengths) != 1 || fl_dim(lengths, 0) != fl_dim(x, 0) ||
        fl_dtype_is_float(fl_dtype_of(lengths)))
        return fl_error(FL_ERR_SHAPE, fn, "expects features [N, T, %lld] and integer lengths [N], got %s and %s",
                        (long long)c->features, fl_describe(x, d), fl_describe(lengths, e));
    int64_t frames = fl_dim(x, 1), out = speech_ctc_output_length(c, frames);
    if (out < 1)
        return fl_error(FL_ERR_SHAPE, fn, "%lld frames are too few for kernel %d", (long long)frames, c->kernel);
    fl_scope scope = fl_scope_begin();
    fl_variable *h = fl_v_gelu(apply(m, "conv1", fl_v_transpose(features, 1, 2)), false);
    /* Output frame t starts at input frame t * stride - pad; it is padding when its
     * centre, input frame t * stride, lies at or past the utterance's end. */
    int64_t n = fl_dim(x, 0);
    int64_t *kept = malloc((size_t)n * sizeof *kept);
    bool *padding = malloc((size_t)(n * out) * sizeof *padding);
    fl_status status = FL_ERR_MEMORY;
    if (kept && padding)
        status = fl_to_host(fl_cast(lengths, FL_I64), kept, (size_t)n * sizeof *kept);
    else
        fl_error(status, fn, "out of memory for %lld lengths", (long long)n);
    for (int64_t i = 0; status == FL_OK && i < n; i++) {
        if (kept[i] < 1 || kept[i] > frames) {
            status = FL_ERR_VALUE;
            fl_error(status, fn, "lengths[%lld] is %lld, outside [1, %lld]", (long long)i, (long long)kept[i],
                     (long long)frames);
            break;
        }
        kept[i] = (kept[i] + c->stride - 1) / c->stride;
        for (int64_t t = 0; t < out; t++)
            padding[i * out + t] = t >= kept[i];
    }
    fl_variable *log_probs = NULL;
    fl_tensor *out_len = NULL;
    if (status == FL_OK) {
        /* conv1's outputs past the end are zeroed, so that conv2 sees there what it sees
         * past the end of an unpadded utterance, its zero padding: a sample's outputs do
         * not depend on how much its batch pads it. */
        fl_tensor *inside = fl_lt(fl_reshape(fl_arange(0, (double)frames, 1, FL_I64), FL_SHAPE(1, 1, frames)),
                                  fl_reshape(fl_cast(lengths, FL_I64), FL_SHAPE(n, 1, 1)));
        h = fl_v_mul(h, fl_v_new(fl_cast(inside, fl_dtype_of(x)), false));
        h = fl_v_transpose(fl_v_gelu(apply(m, "conv2", h), false), 1, 2); /* [N, T', d_model] */
        h = fl_v_add(h, fl_v_new(sinusoids(out, c->d_model), false));
        h = fl_nn_transformer_encoder_forward(fl_module_child(m, "encoder"), h,
                                              fl_from_data(padding, FL_BOOL, FL_SHAPE(n, out)), NULL, false);
        log_probs = fl_v_transpose(fl_v_log_softmax(apply(m, "output", h), 2), 0, 1);
        out_len = fl_from_data(kept, FL_I64, FL_SHAPE(n));
    }
    free(kept);
    free(padding);
    if (log_probs && out_lengths && out_len)
        *out_lengths = fl_keep(out_len);
    log_probs = fl_v_scope_return(scope, log_probs);
    if (out_lengths && *out_lengths)
        *out_lengths = fl_scope_own(*out_lengths, release_tensor);
    return log_probs;
}

static fl_variable *module_forward(fl_module *m, fl_variable *features)
{
    const fl_tensor *x = fl_v_value(features);
    if (fl_null_args("SpeechCtc", 1, x))
        return NULL;
    if (fl_ndim(x) != 3)
        return fl_error(FL_ERR_SHAPE, "SpeechCtc", "expects features [N, T, F]");
    fl_scope scope = fl_scope_begin();
    fl_tensor *lengths = fl_full((double)fl_dim(x, 1), FL_I64, FL_SHAPE(fl_dim(x, 0)));
    return fl_v_scope_return(scope, speech_ctc_forward(m, features, lengths, NULL));
}

static const fl_module_type speech_ctc_type = {.name = "SpeechCtc", .forward = module_forward};

fl_module *speech_ctc_new(const speech_ctc_config *c)
{
    static const char *const fn = "speech_ctc_new";
    if (!c)
        return fl_error(FL_ERR_NULL, fn, "the configuration is NULL");
    if (c->features < 1 || c->channels < 1 || c->d_model < 2 || c->d_model % 2 || c->heads < 1 ||
        c->d_model % c->heads || c->dim_ff < 1 || c->layers < 1 || c->tokens < 2 || c->kernel < 1 ||
        c->kernel % 2 == 0 || c->stride < 1 || !(c->dropout >= 0 && c->dropout < 1))
        return fl_error(FL_ERR_VALUE, fn,
                        "needs positive sizes, an even d_model (%lld) divisible by heads (%lld), at least 2 tokens, an "
                        "odd kernel (%d), a positive stride (%d) and dropout in [0, 1) (%g)",
                        (long long)c->d_model, (long long)c->heads, c->kernel, c->stride, c->dropout);
    const fl_conv_params same = {.stride = {1, 1}, .padding = {0, c->kernel / 2}};
    const fl_conv_params strided = {.stride = {1, c->stride}, .padding = {0, c->kernel / 2}};
    const int64_t width[] = {c->d_model};
    fl_module *layer = fl_nn_transformer_encoder_layer(c->d_model, c->heads, c->dim_ff, c->dropout, "gelu", 1e-5,
                                                       true, true);
    return with_children(
        module_with_config(&speech_ctc_type, c, sizeof *c),
        NAMED_CHILDREN({"conv1", fl_nn_conv1d(c->features, c->channels, c->kernel, &same, true)},
                       {"conv2", fl_nn_conv1d(c->channels, c->d_model, c->kernel, &strided, true)},
                       {"encoder", fl_nn_transformer_encoder(layer, (int)c->layers,
                                                             fl_nn_layer_norm(1, width, 1e-5, true))},
                       {"output", fl_nn_linear(c->d_model, c->tokens, true)}));
}
