/* The Transformer encoder: PyTorch's nn.TransformerEncoderLayer (pre- or post-norm) and
 * nn.TransformerEncoder, with PyTorch's children and so its state_dict names. */
#include <stdlib.h>
#include <string.h>

#include "flare/extension.h"
#include "flare/nn.h"

typedef struct layer_state {
    int64_t d_model, nhead, dim_feedforward;
    double dropout, eps;
    bool gelu, batch_first, norm_first;
} layer_state;

static fl_variable *layer_module_forward(fl_module *m, fl_variable *x);
static fl_variable *encoder_module_forward(fl_module *m, fl_variable *x);

static const fl_module_type layer_type = {.name = "TransformerEncoderLayer", .forward = layer_module_forward};
static const fl_module_type encoder_type = {.name = "TransformerEncoder", .forward = encoder_module_forward};

static fl_variable *apply(fl_module *m, const char *child, fl_variable *x)
{
    return fl_module_forward(fl_module_child(m, child), x);
}

static fl_variable *attention_block(fl_module *m, fl_variable *x, const fl_tensor *key_padding_mask,
                                    const fl_tensor *attn_mask, bool is_causal)
{
    fl_variable *y = fl_nn_multihead_attention_forward(fl_module_child(m, "self_attn"), x, x, x, key_padding_mask,
                                                       attn_mask, is_causal);
    return apply(m, "dropout1", y);
}

static fl_variable *feedforward_block(fl_module *m, fl_variable *x)
{
    const layer_state *st = fl_module_state(m);
    fl_variable *h = apply(m, "linear1", x);
    h = st->gelu ? fl_v_gelu(h, false) : fl_v_relu(h);
    return apply(m, "dropout2", apply(m, "linear2", apply(m, "dropout", h)));
}

fl_variable *fl_nn_transformer_encoder_layer_forward(fl_module *m, fl_variable *x, const fl_tensor *key_padding_mask,
                                                     const fl_tensor *attn_mask, bool is_causal)
{
    const char *fn = "fl_nn_transformer_encoder_layer_forward";
    if (fl_null_args(fn, 2, m, x))
        return NULL;
    if (fl_module_type_of(m) != &layer_type)
        return fl_error(FL_ERR_VALUE, fn, "the module is a %s, not a TransformerEncoderLayer",
                        fl_module_type_of(m)->name);
    const layer_state *st = fl_module_state(m);
    fl_scope scope = fl_scope_begin();
    if (st->norm_first) {
        x = fl_v_add(x, attention_block(m, apply(m, "norm1", x), key_padding_mask, attn_mask, is_causal));
        x = fl_v_add(x, feedforward_block(m, apply(m, "norm2", x)));
    } else {
        x = apply(m, "norm1", fl_v_add(x, attention_block(m, x, key_padding_mask, attn_mask, is_causal)));
        x = apply(m, "norm2", fl_v_add(x, feedforward_block(m, x)));
    }
    return fl_v_scope_return(scope, x);
}

static fl_variable *layer_module_forward(fl_module *m, fl_variable *x)
{
    return fl_nn_transformer_encoder_layer_forward(m, x, NULL, NULL, false);
}

fl_module *fl_nn_transformer_encoder_layer(int64_t d_model, int64_t nhead, int64_t dim_feedforward, double dropout,
                                           const char *activation, double layer_norm_eps, bool batch_first,
                                           bool norm_first)
{
    const char *fn = "fl_nn_transformer_encoder_layer";
    if (fl_null_args(fn, 1, activation))
        return NULL;
    if (strcmp(activation, "relu") != 0 && strcmp(activation, "gelu") != 0)
        return fl_error(FL_ERR_VALUE, fn, "activation must be \"relu\" or \"gelu\", got \"%s\"", activation);
    if (dim_feedforward < 1 || !(layer_norm_eps > 0))
        return fl_error(FL_ERR_VALUE, fn, "dim_feedforward (%lld) and layer_norm_eps (%g) must be positive",
                        (long long)dim_feedforward, layer_norm_eps);
    fl_module *attention = fl_nn_multihead_attention(d_model, nhead, dropout, true, batch_first);
    if (!attention)
        return NULL;
    layer_state *st = malloc(sizeof *st);
    if (!st) {
        fl_module_release(attention);
        return fl_error(FL_ERR_MEMORY, fn, "out of memory");
    }
    *st = (layer_state){d_model, nhead, dim_feedforward, dropout, layer_norm_eps, activation[0] == 'g', batch_first,
                        norm_first};
    fl_module *m = fl_module_new(&layer_type, st);
    const int64_t features[] = {d_model};
    /* PyTorch's registration order, so state_dict names and order match. */
    fl_status status = fl_module_add_child(m, "self_attn", attention);
    if (status == FL_OK)
        status = fl_module_add_child(m, "linear1", fl_nn_linear(d_model, dim_feedforward, true));
    if (status == FL_OK)
        status = fl_module_add_child(m, "dropout", fl_nn_dropout(dropout));
    if (status == FL_OK)
        status = fl_module_add_child(m, "linear2", fl_nn_linear(dim_feedforward, d_model, true));
    if (status == FL_OK)
        status = fl_module_add_child(m, "norm1", fl_nn_layer_norm(1, features, layer_norm_eps, true));
    if (status == FL_OK)
        status = fl_module_add_child(m, "norm2", fl_nn_layer_norm(1, features, layer_norm_eps, true));
    if (status == FL_OK)
        status = fl_module_add_child(m, "dropout1", fl_nn_dropout(dropout));
    if (status == FL_OK)
        status = fl_module_add_child(m, "dropout2", fl_nn_dropout(dropout));
    if (status != FL_OK) {
        fl_module_release(m);
        return NULL;
    }
    return m;
}

/* ---- the encoder ---- */

/* A new layer of the same configuration and values (PyTorch's deepcopy). */
static fl_module *clone_layer(const fl_module *layer)
{
    const layer_state *st = fl_module_state(layer);
    fl_module *copy = fl_nn_transformer_encoder_layer(st->d_model, st->nhead, st->dim_feedforward, st->dropout,
                                                      st->gelu ? "gelu" : "relu", st->eps, st->batch_first,
                                                      st->norm_first);
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

fl_module *fl_nn_transformer_encoder(fl_module *layer, int num_layers, fl_module *norm)
{
    const char *fn = "fl_nn_transformer_encoder";
    fl_module *m = NULL;
    if (fl_null_args(fn, 1, layer))
        goto fail;
    if (fl_module_type_of(layer) != &layer_type) {
        fl_error(FL_ERR_VALUE, fn, "the layer is a %s, not a TransformerEncoderLayer", fl_module_type_of(layer)->name);
        goto fail;
    }
    if (num_layers < 1) {
        fl_error(FL_ERR_VALUE, fn, "num_layers must be positive, got %d", num_layers);
        goto fail;
    }
    fl_module *layers = fl_nn_sequential(NULL, 0); /* PyTorch's ModuleList: children "0", "1", ... */
    m = fl_module_new(&encoder_type, NULL);
    fl_status status = m && layers ? FL_OK : fl_last_status();
    for (int i = 0; i < num_layers && status == FL_OK; i++)
        status = fl_nn_sequential_add(layers, clone_layer(layer));
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
