/* The Transformer encoder and decoder: PyTorch's nn.TransformerEncoderLayer and
 * nn.TransformerDecoderLayer (pre- or post-norm), nn.TransformerEncoder and
 * nn.TransformerDecoder, with PyTorch's children and so its state_dict names. */
#include <stdlib.h>
#include <string.h>

#include "flare/extension.h"
#include "flare/nn.h"

typedef struct layer_state {
    int64_t d_model, nhead, dim_feedforward;
    double dropout, eps;
    int activation; /* an index into activations */
    bool batch_first, norm_first;
} layer_state;

/* "gelu_tanh" is GPT-2's tanh approximation ("gelu_new" in Hugging Face's configs),
 * which PyTorch's layers take as a callable. */
static const char *const activations[] = {"relu", "gelu", "gelu_tanh"};

static int activation_index(const char *name)
{
    for (int i = 0; i < 3; i++)
        if (strcmp(name, activations[i]) == 0)
            return i;
    return -1;
}

static fl_variable *layer_module_forward(fl_module *m, fl_variable *x);
static fl_variable *encoder_module_forward(fl_module *m, fl_variable *x);

static fl_variable *decoder_without_memory(fl_module *m, fl_variable *x);

static fl_variable *encoder_forward_args(fl_module *m, const fl_module_args *args);
static fl_variable *decoder_forward_args(fl_module *m, const fl_module_args *args);

#define SELF_ATTENTION_ARGS (FL_ARG_KEY_PADDING_MASK | FL_ARG_ATTN_MASK | FL_ARG_IS_CAUSAL)
#define DECODER_ARGS \
    (SELF_ATTENTION_ARGS | FL_ARG_MEMORY_KEY_PADDING_MASK | FL_ARG_MEMORY_MASK | FL_ARG_MEMORY_IS_CAUSAL)

static const fl_module_type layer_type = {.name = "TransformerEncoderLayer",
                                          .forward = layer_module_forward,
                                          .forward_args = encoder_forward_args,
                                          .max_inputs = 1,
                                          .accepts = SELF_ATTENTION_ARGS};
static const fl_module_type encoder_type = {.name = "TransformerEncoder",
                                            .forward = encoder_module_forward,
                                            .forward_args = encoder_forward_args,
                                            .max_inputs = 1,
                                            .accepts = SELF_ATTENTION_ARGS};
static const fl_module_type decoder_layer_type = {.name = "TransformerDecoderLayer",
                                                  .forward = decoder_without_memory,
                                                  .forward_args = decoder_forward_args,
                                                  .max_inputs = 2,
                                                  .accepts = DECODER_ARGS};
static const fl_module_type decoder_type = {.name = "TransformerDecoder",
                                            .forward = decoder_without_memory,
                                            .forward_args = decoder_forward_args,
                                            .max_inputs = 2,
                                            .accepts = DECODER_ARGS};

static fl_variable *apply(fl_module *m, const char *child, fl_variable *x)
{
    return fl_module_forward(fl_module_child(m, child), x);
}

/* The children of the residual blocks, block i (from 0) owning norms[i] and dropouts[i]. */
static const char *const norms[] = {"norm1", "norm2", "norm3"};
static const char *const dropouts[] = {"dropout1", "dropout2", "dropout3"};

/* The sublayer of a residual block: attention of x to kv (x itself when kv is NULL)
 * through attn, or the feed-forward block when attn is NULL. */
typedef struct sublayer {
    fl_module *attn;
    fl_variable *kv;
    const fl_tensor *key_padding_mask, *attn_mask;
    bool is_causal;
} sublayer;

static fl_variable *sublayer_forward(fl_module *m, const sublayer *s, fl_variable *x)
{
    if (s->attn) {
        fl_variable *kv = s->kv ? s->kv : x;
        return fl_nn_multihead_attention_forward(s->attn, x, kv, kv, s->key_padding_mask, s->attn_mask, s->is_causal);
    }
    const layer_state *st = fl_module_state(m);
    fl_variable *h = apply(m, "linear1", x);
    h = st->activation == 0 ? fl_v_relu(h) : fl_v_gelu(h, st->activation == 2);
    return apply(m, "linear2", apply(m, "dropout", h));
}

/* Residual block i: x + dropout(sublayer(norm(x))) pre-norm, norm(x + dropout(sublayer(x)))
 * post-norm. */
static fl_variable *residual_block(fl_module *m, int i, const sublayer *s, fl_variable *x)
{
    const layer_state *st = fl_module_state(m);
    if (st->norm_first)
        return fl_v_add(x, apply(m, dropouts[i], sublayer_forward(m, s, apply(m, norms[i], x))));
    return apply(m, norms[i], fl_v_add(x, apply(m, dropouts[i], sublayer_forward(m, s, x))));
}

static const sublayer feedforward = {.attn = NULL};

fl_variable *fl_nn_transformer_encoder_layer_forward(fl_module *m, fl_variable *x, const fl_tensor *key_padding_mask,
                                                     const fl_tensor *attn_mask, bool is_causal)
{
    const char *fn = "fl_nn_transformer_encoder_layer_forward";
    if (fl_null_args(fn, 2, m, x))
        return NULL;
    if (fl_module_type_of(m) != &layer_type)
        return fl_error(FL_ERR_VALUE, fn, "the module is a %s, not a TransformerEncoderLayer",
                        fl_module_type_of(m)->name);
    const sublayer self_attn = {fl_module_child(m, "self_attn"), NULL, key_padding_mask, attn_mask, is_causal};
    fl_scope scope = fl_scope_begin();
    x = residual_block(m, 0, &self_attn, x);
    x = residual_block(m, 1, &feedforward, x);
    return fl_v_scope_return(scope, x);
}

static fl_variable *layer_module_forward(fl_module *m, fl_variable *x)
{
    return fl_nn_transformer_encoder_layer_forward(m, x, NULL, NULL, false);
}

static bool layer_arguments_fit(const char *fn, int64_t dim_feedforward, const char *activation,
                                double layer_norm_eps)
{
    if (fl_null_args(fn, 1, activation))
        return false;
    if (activation_index(activation) < 0)
        return fl_error(FL_ERR_VALUE, fn, "activation must be \"relu\", \"gelu\" or \"gelu_tanh\", got \"%s\"",
                        activation),
               false;
    if (dim_feedforward < 1 || !(layer_norm_eps > 0))
        return fl_error(FL_ERR_VALUE, fn, "dim_feedforward (%lld) and layer_norm_eps (%g) must be positive",
                        (long long)dim_feedforward, layer_norm_eps),
               false;
    return true;
}

/* A new encoder layer (of type layer_type) or decoder layer (decoder_layer_type, which
 * adds the cross-attention "multihead_attn" and a third residual block). */
static fl_module *new_layer(const char *fn, const fl_module_type *type, int64_t d_model, int64_t nhead,
                            int64_t dim_feedforward, double dropout, const char *activation, double layer_norm_eps,
                            bool batch_first, bool norm_first)
{
    if (!layer_arguments_fit(fn, dim_feedforward, activation, layer_norm_eps))
        return NULL;
    fl_module *self_attention = fl_nn_multihead_attention(d_model, nhead, dropout, true, batch_first);
    if (!self_attention)
        return NULL;
    layer_state *st = malloc(sizeof *st);
    if (!st) {
        fl_module_release(self_attention);
        return fl_error(FL_ERR_MEMORY, fn, "out of memory");
    }
    *st = (layer_state){d_model, nhead, dim_feedforward, dropout, layer_norm_eps, activation_index(activation),
                        batch_first, norm_first};
    fl_module *m = fl_module_new(type, st);
    const int64_t features[] = {d_model};
    const bool decoder = type == &decoder_layer_type;
    const int blocks = decoder ? 3 : 2;
    /* PyTorch's registration order, so state_dict names and order match. */
    fl_status status = fl_module_add_child(m, "self_attn", self_attention);
    if (status == FL_OK && decoder)
        status = fl_module_add_child(m, "multihead_attn",
                                     fl_nn_multihead_attention(d_model, nhead, dropout, true, batch_first));
    if (status == FL_OK)
        status = fl_module_add_child(m, "linear1", fl_nn_linear(d_model, dim_feedforward, true));
    if (status == FL_OK)
        status = fl_module_add_child(m, "dropout", fl_nn_dropout(dropout));
    if (status == FL_OK)
        status = fl_module_add_child(m, "linear2", fl_nn_linear(dim_feedforward, d_model, true));
    for (int i = 0; i < blocks && status == FL_OK; i++)
        status = fl_module_add_child(m, norms[i], fl_nn_layer_norm(1, features, layer_norm_eps, true));
    for (int i = 0; i < blocks && status == FL_OK; i++)
        status = fl_module_add_child(m, dropouts[i], fl_nn_dropout(dropout));
    if (status != FL_OK) {
        fl_module_release(m);
        return NULL;
    }
    return m;
}

fl_module *fl_nn_transformer_encoder_layer(int64_t d_model, int64_t nhead, int64_t dim_feedforward, double dropout,
                                           const char *activation, double layer_norm_eps, bool batch_first,
                                           bool norm_first)
{
    return new_layer("fl_nn_transformer_encoder_layer", &layer_type, d_model, nhead, dim_feedforward, dropout,
                     activation, layer_norm_eps, batch_first, norm_first);
}

/* ---- the encoder ---- */

/* A new layer (encoder or decoder) of the same configuration and values (PyTorch's
 * deepcopy). */
static fl_module *clone_layer(const fl_module *layer)
{
    const layer_state *st = fl_module_state(layer);
    fl_module *(*make)(int64_t, int64_t, int64_t, double, const char *, double, bool, bool) =
        fl_module_type_of(layer) == &layer_type ? fl_nn_transformer_encoder_layer : fl_nn_transformer_decoder_layer;
    fl_module *copy = make(st->d_model, st->nhead, st->dim_feedforward, st->dropout, activations[st->activation],
                           st->eps, st->batch_first, st->norm_first);
    fl_tensor_map *values = fl_tensor_map_create();
    fl_status status = copy && values ? fl_module_state_dict(layer, values) : FL_ERR_MEMORY;
    if (status == FL_OK)
        status = fl_module_load_state_dict(copy, values, true);
    fl_tensor_map_free(values);
    if (status != FL_OK) {
        fl_module_release(copy);
        return NULL;
    }
    fl_module_train(copy, fl_module_is_training(layer));
    return copy;
}

fl_variable *fl_nn_transformer_encoder_forward(fl_module *m, fl_variable *x, const fl_tensor *key_padding_mask,
                                               const fl_tensor *attn_mask, bool is_causal)
{
    const char *fn = "fl_nn_transformer_encoder_forward";
    if (fl_null_args(fn, 2, m, x))
        return NULL;
    if (fl_module_type_of(m) != &encoder_type)
        return fl_error(FL_ERR_VALUE, fn, "the module is a %s, not a TransformerEncoder", fl_module_type_of(m)->name);
    fl_scope scope = fl_scope_begin();
    fl_module *layers = fl_module_child(m, "layers");
    for (int i = 0; x && i < fl_module_child_count(layers); i++)
        x = fl_nn_transformer_encoder_layer_forward(fl_module_child_at(layers, i, NULL), x, key_padding_mask,
                                                    attn_mask, is_causal);
    fl_module *norm = fl_module_child(m, "norm");
    if (norm && x)
        x = fl_module_forward(norm, x);
    return fl_v_scope_return(scope, x);
}

static fl_variable *encoder_module_forward(fl_module *m, fl_variable *x)
{
    return fl_nn_transformer_encoder_forward(m, x, NULL, NULL, false);
}

/* A stack of num_layers clones of layer (of layer_kind) and an optional final norm. */
static fl_module *stack(const char *fn, const fl_module_type *type, const fl_module_type *layer_kind,
                        fl_module *layer, int num_layers, fl_module *norm)
{
    fl_module *m = NULL;
    if (fl_null_args(fn, 1, layer))
        goto fail;
    if (fl_module_type_of(layer) != layer_kind) {
        fl_error(FL_ERR_VALUE, fn, "the layer is a %s, not a %s", fl_module_type_of(layer)->name, layer_kind->name);
        goto fail;
    }
    if (num_layers < 1) {
        fl_error(FL_ERR_VALUE, fn, "num_layers must be positive, got %d", num_layers);
        goto fail;
    }
    fl_module *layers = fl_nn_module_list(NULL, 0);
    m = fl_module_new(type, NULL);
    fl_status status = m && layers ? FL_OK : fl_last_status();
    for (int i = 0; i < num_layers && status == FL_OK; i++)
        status = fl_nn_module_list_add(layers, clone_layer(layer));
    status = status == FL_OK ? fl_module_add_child(m, "layers", layers) : (fl_module_release(layers), status);
    if (status == FL_OK && norm)
        status = fl_module_add_child(m, "norm", norm), norm = NULL;
    if (status == FL_OK) {
        fl_module_release(layer);
        return m;
    }
fail:
    fl_module_release(m);
    fl_module_release(layer);
    fl_module_release(norm);
    return NULL;
}

fl_module *fl_nn_transformer_encoder(fl_module *layer, int num_layers, fl_module *norm)
{
    return stack("fl_nn_transformer_encoder", &encoder_type, &layer_type, layer, num_layers, norm);
}

/* ---- the decoder ---- */

fl_module *fl_nn_transformer_decoder_layer(int64_t d_model, int64_t nhead, int64_t dim_feedforward, double dropout,
                                           const char *activation, double layer_norm_eps, bool batch_first,
                                           bool norm_first)
{
    return new_layer("fl_nn_transformer_decoder_layer", &decoder_layer_type, d_model, nhead, dim_feedforward,
                     dropout, activation, layer_norm_eps, batch_first, norm_first);
}

static const fl_transformer_decoder_masks no_masks;

fl_variable *fl_nn_transformer_decoder_layer_forward(fl_module *m, fl_variable *tgt, fl_variable *memory,
                                                     const fl_transformer_decoder_masks *masks)
{
    const char *fn = "fl_nn_transformer_decoder_layer_forward";
    if (fl_null_args(fn, 3, m, tgt, memory))
        return NULL;
    if (fl_module_type_of(m) != &decoder_layer_type)
        return fl_error(FL_ERR_VALUE, fn, "the module is a %s, not a TransformerDecoderLayer",
                        fl_module_type_of(m)->name);
    const fl_transformer_decoder_masks *k = masks ? masks : &no_masks;
    const sublayer self_attn = {fl_module_child(m, "self_attn"), NULL, k->tgt_key_padding_mask, k->tgt_mask,
                                k->tgt_is_causal};
    const sublayer cross_attn = {fl_module_child(m, "multihead_attn"), memory, k->memory_key_padding_mask,
                                 k->memory_mask, k->memory_is_causal};
    fl_scope scope = fl_scope_begin();
    fl_variable *x = residual_block(m, 0, &self_attn, tgt);
    x = residual_block(m, 1, &cross_attn, x);
    x = residual_block(m, 2, &feedforward, x);
    return fl_v_scope_return(scope, x);
}

static fl_variable *decoder_without_memory(fl_module *m, fl_variable *x)
{
    (void)x;
    return fl_error(FL_ERR_VALUE, fl_module_type_of(m)->name,
                    "a decoder needs a memory: call fl_nn_transformer_decoder%s_forward, or fl_module_forward_args "
                    "with the memory as inputs[1]",
                    fl_module_type_of(m) == &decoder_layer_type ? "_layer" : "");
}

static fl_variable *encoder_forward_args(fl_module *m, const fl_module_args *args)
{
    if (fl_module_type_of(m) == &layer_type)
        return fl_nn_transformer_encoder_layer_forward(m, args->inputs[0], args->key_padding_mask, args->attn_mask,
                                                       args->is_causal);
    return fl_nn_transformer_encoder_forward(m, args->inputs[0], args->key_padding_mask, args->attn_mask,
                                             args->is_causal);
}

static fl_variable *decoder_forward_args(fl_module *m, const fl_module_args *args)
{
    if (!args->inputs[1])
        return decoder_without_memory(m, args->inputs[0]);
    const fl_transformer_decoder_masks masks = {
        .tgt_mask = args->attn_mask,
        .memory_mask = args->memory_mask,
        .tgt_key_padding_mask = args->key_padding_mask,
        .memory_key_padding_mask = args->memory_key_padding_mask,
        .tgt_is_causal = args->is_causal,
        .memory_is_causal = args->memory_is_causal,
    };
    if (fl_module_type_of(m) == &decoder_layer_type)
        return fl_nn_transformer_decoder_layer_forward(m, args->inputs[0], args->inputs[1], &masks);
    return fl_nn_transformer_decoder_forward(m, args->inputs[0], args->inputs[1], &masks);
}

fl_module *fl_nn_transformer_decoder(fl_module *layer, int num_layers, fl_module *norm)
{
    return stack("fl_nn_transformer_decoder", &decoder_type, &decoder_layer_type, layer, num_layers, norm);
}

fl_variable *fl_nn_transformer_decoder_forward(fl_module *m, fl_variable *tgt, fl_variable *memory,
                                               const fl_transformer_decoder_masks *masks)
{
    const char *fn = "fl_nn_transformer_decoder_forward";
    if (fl_null_args(fn, 3, m, tgt, memory))
        return NULL;
    if (fl_module_type_of(m) != &decoder_type)
        return fl_error(FL_ERR_VALUE, fn, "the module is a %s, not a TransformerDecoder", fl_module_type_of(m)->name);
    fl_scope scope = fl_scope_begin();
    fl_module *layers = fl_module_child(m, "layers");
    fl_variable *x = tgt;
    for (int i = 0; x && i < fl_module_child_count(layers); i++)
        x = fl_nn_transformer_decoder_layer_forward(fl_module_child_at(layers, i, NULL), x, memory, masks);
    fl_module *norm = fl_module_child(m, "norm");
    if (norm && x)
        x = fl_module_forward(norm, x);
    return fl_v_scope_return(scope, x);
}
