/*
 * BERT, RoBERTa, DistilBERT and ALBERT checkpoints in the Hugging Face layout
 * (models.h): transformers' BertModel is a post-norm GELU Transformer encoder, so its
 * weights map onto Flare's own layers; the separate query, key and value projections
 * are stacked into the attention's in_proj. RobertaModel (and XLMRobertaModel, the
 * same code) is BertModel with other names and positions that skip the padding tokens;
 * DistilBertModel is BertModel with other names and no token types; AlbertModel is
 * BertModel with narrower embeddings projected to the hidden size, and one layer whose
 * weights every layer applies; ElectraModel is BertModel whose embeddings may be
 * narrower and projected. CamembertModel is RobertaModel.
 */
#include <stdio.h>
#include <string.h>

#include "hf_common.h"
#include "sequence_build.h"

#define FN "hf_load_bert"
/* Records the error; the message names the file and the key. */
#define fail(status, ...) ((void)fl_error((status), FN, __VA_ARGS__))

static fl_variable *apply(fl_module *m, const char *child, fl_variable *x)
{
    return fl_module_forward(fl_module_child(m, child), x);
}

/* ---- the model ---- */

static bool valid_ids(const char *fn, const char *what, const fl_tensor *t, const fl_tensor *like, int64_t limit)
{
    char d[FL_DESC_SIZE], e[FL_DESC_SIZE];
    if (fl_dtype_of(t) != FL_I64 || fl_ndim(t) != 2 || fl_dim(t, 0) < 1 || fl_dim(t, 1) < 1 ||
        (like && (fl_dim(t, 0) != fl_dim(like, 0) || fl_dim(t, 1) != fl_dim(like, 1)))) {
        fl_error(FL_ERR_SHAPE, fn, "expects %s i64 [N, S]%s%s, got %s", what, like ? " like the ids " : "",
                 like ? fl_describe(like, e) : "", fl_describe(t, d));
        return false;
    }
    fl_scope scope = fl_scope_begin();
    double lo = fl_item(fl_min(t, FL_ALL_AXES, false)), hi = fl_item(fl_max(t, FL_ALL_AXES, false));
    fl_scope_end(scope);
    if (!(lo >= 0 && hi < (double)limit)) {
        fl_error(FL_ERR_VALUE, fn, "%s must lie in [0, %lld), got %.0f to %.0f", what, (long long)limit, lo, hi);
        return false;
    }
    return true;
}

fl_variable *hf_bert_forward(fl_module *bert, const fl_tensor *ids, const fl_tensor *token_types,
                             const fl_tensor *attention_mask)
{
    const char *fn = "hf_bert_forward";
    if (fl_null_args(fn, 2, bert, ids))
        return NULL;
    const hf_bert_config *c = fl_module_state(bert);
    if (token_types && c->type_vocab == 0)
        return fl_error(FL_ERR_VALUE, fn, "DistilBERT has no token types: pass NULL");
    if (!valid_ids(fn, "token ids", ids, NULL, c->vocab) ||
        (token_types && !valid_ids(fn, "token types", token_types, ids, c->type_vocab)) ||
        (attention_mask && !valid_ids(fn, "the attention mask", attention_mask, ids, 2)))
        return NULL;
    int64_t n = fl_dim(ids, 0), s = fl_dim(ids, 1);
    /* RoBERTa's positions start after its padding id: 514 of them hold 512 tokens. */
    int64_t first = c->padding_id >= 0 ? c->padding_id + 1 : 0;
    if (s > c->max_positions - first)
        return fl_error(FL_ERR_SHAPE, fn, "%lld positions exceed the %lld of the model%s", (long long)s,
                        (long long)(c->max_positions - first),
                        first ? " (RoBERTa's positions start after pad_token_id)" : "");
    fl_scope scope = fl_scope_begin();
    fl_tensor *positions = fl_reshape(fl_arange(0, (double)s, 1, FL_I64), FL_SHAPE(1, s));
    if (c->padding_id >= 0) {
        /* RoBERTa's: padding_id + 1, + 2, ... over the tokens that are not padding, in
         * order, and padding_id itself at the padding tokens (by id, not by the mask),
         * as transformers' create_position_ids_from_input_ids. */
        fl_tensor *pad = fl_scalar((double)c->padding_id, FL_I64);
        fl_tensor *counted = fl_cast(fl_ne(ids, pad), FL_I64);
        positions = fl_add(fl_mul(fl_cumsum(counted, 1), counted), pad);
    }
    fl_variable *h = fl_v_add(apply(bert, "word_embeddings", fl_v_new(ids, false)),
                              apply(bert, "position_embeddings", fl_v_new(positions, false)));
    if (c->type_vocab > 0) {
        const fl_tensor *types = token_types ? token_types : fl_zeros(FL_I64, FL_SHAPE(n, s));
        h = fl_v_add(h, apply(bert, "token_type_embeddings", fl_v_new(types, false)));
    }
    h = apply(bert, "dropout", apply(bert, "embed_norm", h));
    if (c->projected)
        h = apply(bert, "embed_project", h);
    /* Hugging Face's mask is 1 for a token to attend to; Flare's padding mask is true
     * for a key to ignore. ALBERT's encoder holds its one shared layer, applied by each. */
    fl_tensor *padding = attention_mask ? fl_eq(attention_mask, fl_scalar(0, FL_I64)) : NULL;
    for (int64_t k = 0; h && k < (c->shared_layers ? c->layers : 1); k++)
        h = fl_nn_transformer_encoder_forward(fl_module_child(bert, "encoder"), h, padding, NULL, false);
    return fl_v_scope_return(scope, h);
}

static void release_tensor_object(void *t) { fl_release(t); }

fl_tensor *hf_bert_mean_pool(const fl_tensor *hidden, const fl_tensor *attention_mask)
{
    const char *fn = "hf_bert_mean_pool";
    if (fl_null_args(fn, 1, hidden))
        return NULL;
    char d[FL_DESC_SIZE], e[FL_DESC_SIZE];
    if (fl_ndim(hidden) != 3 ||
        (attention_mask && (fl_ndim(attention_mask) != 2 || fl_dim(attention_mask, 0) != fl_dim(hidden, 0) ||
                            fl_dim(attention_mask, 1) != fl_dim(hidden, 1))))
        return fl_error(FL_ERR_SHAPE, fn, "expects hidden states [N, S, H] and a mask [N, S], got %s and %s",
                        fl_describe(hidden, d), attention_mask ? fl_describe(attention_mask, e) : "none");
    if (!attention_mask)
        return fl_mean(hidden, (const int[]){1}, 1, false);
    fl_scope scope = fl_scope_begin();
    fl_tensor *w =
        fl_reshape(fl_cast(attention_mask, fl_dtype_of(hidden)), FL_SHAPE(fl_dim(hidden, 0), fl_dim(hidden, 1), 1));
    fl_tensor *pooled =
        fl_div(fl_sum(fl_mul(hidden, w), (const int[]){1}, 1, false), fl_sum(w, (const int[]){1}, 1, false));
    pooled = fl_keep(pooled);
    fl_scope_end(scope);
    return pooled ? fl_scope_own(pooled, release_tensor_object) : NULL;
}

static fl_variable *bert_module_forward(fl_module *m, fl_variable *ids)
{
    return fl_null_args("HFBert", 1, ids) ? NULL : hf_bert_forward(m, fl_v_value(ids), NULL, NULL);
}

static const fl_module_type bert_type = {.name = "HFBert", .forward = bert_module_forward};

/* The layers whose weights the checkpoint holds: ALBERT's one, shared. */
static int64_t stored_layers(const hf_bert_config *c) { return c->shared_layers ? 1 : c->layers; }

/* BertModel's modules, in its order; DistilBERT (type_vocab 0) has no token types, and
 * only ALBERT and ELECTRA project their embeddings. */
static fl_module *bert_new(const hf_bert_config *c)
{
    const int64_t features[] = {c->embedding};
    fl_module *layer = fl_nn_transformer_encoder_layer(c->hidden, c->heads, c->intermediate, 0.0,
                                                       c->gelu_tanh ? "gelu_tanh" : "gelu", c->layer_norm_eps, true,
                                                       false);
    fl_module *types = c->type_vocab > 0 ? fl_nn_embedding(c->type_vocab, c->embedding, -1) : NULL;
    fl_module *project = c->projected ? fl_nn_linear(c->embedding, c->hidden, true) : NULL;
    named_child children[] = {
        {"word_embeddings", fl_nn_embedding(c->vocab, c->embedding, -1)},
        {"position_embeddings", fl_nn_embedding(c->max_positions, c->embedding, -1)},
        {"token_type_embeddings", types},
        {"embed_norm", fl_nn_layer_norm(1, features, c->layer_norm_eps, true)},
        {"dropout", fl_nn_dropout(0.0)},
        {"embed_project", project},
        {"encoder", fl_nn_transformer_encoder(layer, (int)stored_layers(c), NULL)},
    };
    int count = sizeof children / sizeof *children;
    /* the absent children, from the last */
    for (int k = count - 1; k >= 0; k--)
        if ((k == 2 && !types) || (k == 5 && !project))
            memmove(&children[k], &children[k + 1], (size_t)(--count - k) * sizeof *children);
    return with_children(module_with_config(&bert_type, c, sizeof *c), children, count);
}

/* ---- config.json ---- */

/* An optional string key that must have the value Flare computes. */
static bool config_string(json_t *config, const char *path, const char *key, const char *required)
{
    json_t *v = json_object_get(config, key);
    if (!v || (json_is_string(v) && strcmp(json_string_value(v), required) == 0))
        return true;
    fail(FL_ERR_VALUE, "%s: \"%s\" must be \"%s\", got %s", path, key, required,
         json_is_string(v) ? json_string_value(v) : "no string");
    return false;
}

static bool config_false(json_t *config, const char *path, const char *key)
{
    json_t *v = json_object_get(config, key);
    if (!v || json_is_false(v))
        return true;
    fail(FL_ERR_VALUE, "%s: \"%s\" must be false: Flare's BERT encoder computes no other", path, key);
    return false;
}

/* ALBERT's hidden_act: the exact GELU or its tanh form ("gelu_new", as published). */
static bool albert_activation(json_t *config, const char *path, hf_bert_config *c)
{
    const char *act = json_string_value(json_object_get(config, "hidden_act"));
    c->gelu_tanh = act && (strcmp(act, "gelu_new") == 0 || strcmp(act, "gelu_pytorch_tanh") == 0);
    if (!json_object_get(config, "hidden_act") || c->gelu_tanh || (act && strcmp(act, "gelu") == 0))
        return true;
    fail(FL_ERR_VALUE, "%s: \"hidden_act\" \"%s\" is not one Flare has (\"gelu_new\", \"gelu_pytorch_tanh\", \"gelu\")",
         path, act ? act : "(no string)");
    return false;
}

/* ALBERT's embedding size, and its layers grouped one group of one layer, which every
 * published ALBERT has: the checkpoint then holds one layer, which every layer applies. */
static bool read_albert_keys(json_t *config, const char *path, hf_bert_config *c)
{
    int64_t groups = 0, inner = 0;
    if (!hf_config_int(FN, config, path, "embedding_size", &c->embedding) ||
        !hf_config_int(FN, config, path, "num_hidden_groups", &groups) ||
        !hf_config_int(FN, config, path, "inner_group_num", &inner))
        return false;
    if (groups != 1 || inner != 1)
        return fail(FL_ERR_VALUE, "%s: \"num_hidden_groups\" and \"inner_group_num\" must be 1 (got %lld and %lld): "
                                  "Flare's ALBERT shares one layer's weights across all layers",
                    path, (long long)groups, (long long)inner),
               false;
    c->shared_layers = c->projected = true;
    return true;
}

/* ELECTRA's embedding size: its embeddings are projected where it is not hidden_size. */
static bool read_electra_keys(json_t *config, const char *path, hf_bert_config *c)
{
    if (!hf_config_int(FN, config, path, "embedding_size", &c->embedding))
        return false;
    c->projected = c->embedding != c->hidden;
    return config_string(config, path, "hidden_act", "gelu");
}

/* BertConfig's, RobertaConfig's, AlbertConfig's and ElectraConfig's keys. RoBERTa's
 * positions count from its padding id, RobertaConfig's default 1. */
static bool read_bert_keys(json_t *config, const char *path, hf_bert_config *c)
{
    bool roberta = c->family == HF_ROBERTA;
    bool ok = hf_config_int(FN, config, path, "vocab_size", &c->vocab) &&
              hf_config_int(FN, config, path, "max_position_embeddings", &c->max_positions) &&
              hf_config_int(FN, config, path, "type_vocab_size", &c->type_vocab) &&
              hf_config_int(FN, config, path, "num_hidden_layers", &c->layers) &&
              hf_config_int(FN, config, path, "num_attention_heads", &c->heads) &&
              hf_config_int(FN, config, path, "hidden_size", &c->hidden) &&
              hf_config_int(FN, config, path, "intermediate_size", &c->intermediate) &&
              (c->family == HF_ALBERT    ? albert_activation(config, path, c) && read_albert_keys(config, path, c)
               : c->family == HF_ELECTRA ? read_electra_keys(config, path, c)
                                         : config_string(config, path, "hidden_act", "gelu")) &&
              config_string(config, path, "position_embedding_type", "absolute") &&
              config_false(config, path, "is_decoder") && config_false(config, path, "add_cross_attention");
    json_t *pruned = json_object_get(config, "pruned_heads");
    if (ok && pruned && !(json_is_object(pruned) && json_object_size(pruned) == 0)) {
        ok = false;
        fail(FL_ERR_VALUE, "%s: \"pruned_heads\" must be empty: Flare's BERT encoder keeps every head", path);
    }
    json_t *eps = json_object_get(config, "layer_norm_eps");
    if (ok && eps) {
        if (!json_is_number(eps) || !(json_number_value(eps) > 0))
            ok = false, fail(FL_ERR_VALUE, "%s: \"layer_norm_eps\" must be a positive number", path);
        else
            c->layer_norm_eps = json_number_value(eps);
    }
    if (ok && roberta) {
        json_t *pad = json_object_get(config, "pad_token_id");
        c->padding_id = pad ? (json_is_integer(pad) ? json_integer_value(pad) : -1) : 1;
        if (c->padding_id < 0) {
            ok = false;
            fail(FL_ERR_VALUE, "%s: \"pad_token_id\" must be an integer >= 0: RoBERTa's positions count from it",
                 path);
        } else if (c->padding_id >= c->vocab || c->padding_id + 1 >= c->max_positions) {
            ok = false;
            fail(FL_ERR_VALUE,
                 "%s: \"pad_token_id\" (%lld) must be a token id below \"vocab_size\" (%lld) with a position after "
                 "it below \"max_position_embeddings\" (%lld)",
                 path, (long long)c->padding_id, (long long)c->vocab, (long long)c->max_positions);
        }
    }
    return ok;
}

/* DistilBertConfig's keys: its LayerNorms' eps is fixed, and it has no token types.
 * sinusoidal_pos_embds only says how the position embeddings were made: the file holds
 * them either way. */
static bool read_distilbert_keys(json_t *config, const char *path, hf_bert_config *c)
{
    c->type_vocab = 0;
    return hf_config_int(FN, config, path, "vocab_size", &c->vocab) &&
           hf_config_int(FN, config, path, "max_position_embeddings", &c->max_positions) &&
           hf_config_int(FN, config, path, "n_layers", &c->layers) &&
           hf_config_int(FN, config, path, "n_heads", &c->heads) &&
           hf_config_int(FN, config, path, "dim", &c->hidden) &&
           hf_config_int(FN, config, path, "hidden_dim", &c->intermediate) &&
           config_string(config, path, "activation", "gelu");
}

static bool read_config(const char *path, void *out)
{
    hf_bert_config *c = out;
    json_t *config = hf_config_open(FN, path);
    if (!config)
        return false;
    *c = (hf_bert_config){.layer_norm_eps = 1e-12, .padding_id = -1};
    const char *type = json_string_value(json_object_get(config, "model_type"));
    bool ok = json_is_object(config);
    if (!ok)
        fail(FL_ERR_VALUE, "%s: is not a JSON object", path);
    /* CamemBERT is RoBERTa's code under another name, as XLM-RoBERTa is. */
    static const struct {
        const char *type;
        hf_bert_family family;
    } types[] = {{"bert", HF_BERT},        {"roberta", HF_ROBERTA},         {"xlm-roberta", HF_ROBERTA},
                 {"camembert", HF_ROBERTA}, {"distilbert", HF_DISTILBERT}, {"albert", HF_ALBERT},
                 {"electra", HF_ELECTRA}};
    size_t known = sizeof types / sizeof *types, t = 0;
    while (type && t < known && strcmp(type, types[t].type) != 0)
        t++;
    if (ok && (!type || t == known)) {
        ok = false;
        fail(FL_ERR_VALUE,
             "%s: \"model_type\" must be \"bert\", \"roberta\", \"xlm-roberta\", \"camembert\", \"distilbert\", "
             "\"albert\" or \"electra\", got %s",
             path, type ? type : "no string");
    }
    bool distil = ok && types[t].family == HF_DISTILBERT;
    if (ok)
        c->family = types[t].family;
    ok = ok && (distil ? read_distilbert_keys(config, path, c) : read_bert_keys(config, path, c)) &&
         hf_config_unquantized(FN, config, path);
    if (ok && c->family != HF_ALBERT && c->family != HF_ELECTRA)
        c->embedding = c->hidden;
    if (ok && (c->hidden % c->heads || c->layers > 4096)) {
        ok = false;
        fail(FL_ERR_VALUE, "%s: \"%s\" (%lld) must divide \"%s\" (%lld), with at most 4096 layers", path,
             distil ? "n_heads" : "num_attention_heads", (long long)c->heads, distil ? "dim" : "hidden_size",
             (long long)c->hidden);
    }
    json_decref(config);
    return ok;
}

/* ---- the weights ---- */

typedef struct name_pair {
    const char *hf, *flare;
} name_pair;

/* The names of one family's checkpoints: its embeddings' (with the projection and the
 * token types where the model has them), its layers' (each under layers "<i>."), the
 * query, key and value projections (qkv, each with .weight and .bias), the prefix the
 * encoder has inside the family's task classes, and those classes' heads beside it. */
enum { TOP_NAMES = 7, LAYER_NAMES = 10, HEAD_PREFIXES = 6 };
typedef struct naming {
    const char *model, *wrapper, *layers, *qkv[3], *heads[HEAD_PREFIXES]; /* heads: NULL after the last */
    name_pair top[TOP_NAMES], layer[LAYER_NAMES];                          /* top: NULL after the last */
} naming;

#define BERT_LAYER_NAMES                                                                                      \
    {{"attention.output.dense.weight", "self_attn.out_proj.weight"},                                          \
     {"attention.output.dense.bias", "self_attn.out_proj.bias"},                                              \
     {"attention.output.LayerNorm.weight", "norm1.weight"},                                                   \
     {"attention.output.LayerNorm.bias", "norm1.bias"},                                                       \
     {"intermediate.dense.weight", "linear1.weight"},                                                         \
     {"intermediate.dense.bias", "linear1.bias"},                                                             \
     {"output.dense.weight", "linear2.weight"},                                                               \
     {"output.dense.bias", "linear2.bias"},                                                                   \
     {"output.LayerNorm.weight", "norm2.weight"},                                                             \
     {"output.LayerNorm.bias", "norm2.bias"}}
/* Every family's embeddings (has_top drops the token types where a model has none),
 * and the projection's, its name with the prefix p, where it has one. */
#define EMBEDDING_NAMES                                                                                       \
    {"embeddings.word_embeddings.weight", "word_embeddings.weight"},                                          \
    {"embeddings.position_embeddings.weight", "position_embeddings.weight"},                                  \
    {"embeddings.LayerNorm.weight", "embed_norm.weight"},                                                     \
    {"embeddings.LayerNorm.bias", "embed_norm.bias"},                                                         \
    {"embeddings.token_type_embeddings.weight", "token_type_embeddings.weight"}
#define BERT_TOP_NAMES {EMBEDDING_NAMES}
#define PROJECTED_TOP_NAMES(p) {EMBEDDING_NAMES, {p "weight", "embed_project.weight"}, {p "bias", "embed_project.bias"}}

static const naming bert_names = {
    .model = "BertModel",
    .wrapper = "bert.",
    .layers = "encoder.layer.",
    .qkv = {"attention.self.query", "attention.self.key", "attention.self.value"},
    .heads = {"cls.", "classifier.", "qa_outputs."},
    .top = BERT_TOP_NAMES,
    .layer = BERT_LAYER_NAMES,
};

static const naming roberta_names = {
    .model = "RobertaModel",
    .wrapper = "roberta.",
    .layers = "encoder.layer.",
    .qkv = {"attention.self.query", "attention.self.key", "attention.self.value"},
    .heads = {"lm_head.", "classifier.", "qa_outputs."},
    .top = BERT_TOP_NAMES,
    .layer = BERT_LAYER_NAMES,
};

/* DistilBertFor*'s heads: the masked LM's vocab_transform, vocab_layer_norm and
 * vocab_projector; the classifiers' pre_classifier and classifier; qa_outputs. */
static const naming distilbert_names = {
    .model = "DistilBertModel",
    .wrapper = "distilbert.",
    .layers = "transformer.layer.",
    .qkv = {"attention.q_lin", "attention.k_lin", "attention.v_lin"},
    .heads = {"vocab_", "pre_classifier.", "classifier.", "qa_outputs."},
    .top = BERT_TOP_NAMES,
    .layer = {{"attention.out_lin.weight", "self_attn.out_proj.weight"},
              {"attention.out_lin.bias", "self_attn.out_proj.bias"},
              {"sa_layer_norm.weight", "norm1.weight"},
              {"sa_layer_norm.bias", "norm1.bias"},
              {"ffn.lin1.weight", "linear1.weight"},
              {"ffn.lin1.bias", "linear1.bias"},
              {"ffn.lin2.weight", "linear2.weight"},
              {"ffn.lin2.bias", "linear2.bias"},
              {"output_layer_norm.weight", "norm2.weight"},
              {"output_layer_norm.bias", "norm2.bias"}},
};

/* AlbertFor*'s heads: the masked LM's predictions, the pretraining's sentence-order
 * classifier, classifier and qa_outputs. */
static const naming albert_names = {
    .model = "AlbertModel",
    .wrapper = "albert.",
    .layers = "encoder.albert_layer_groups.0.albert_layers.",
    .qkv = {"attention.query", "attention.key", "attention.value"},
    .heads = {"predictions.", "sop_classifier.", "classifier.", "qa_outputs."},
    .top = PROJECTED_TOP_NAMES("encoder.embedding_hidden_mapping_in."),
    .layer = {{"attention.dense.weight", "self_attn.out_proj.weight"},
              {"attention.dense.bias", "self_attn.out_proj.bias"},
              {"attention.LayerNorm.weight", "norm1.weight"},
              {"attention.LayerNorm.bias", "norm1.bias"},
              {"ffn.weight", "linear1.weight"},
              {"ffn.bias", "linear1.bias"},
              {"ffn_output.weight", "linear2.weight"},
              {"ffn_output.bias", "linear2.bias"},
              {"full_layer_layer_norm.weight", "norm2.weight"},
              {"full_layer_layer_norm.bias", "norm2.bias"}},
};

/* ElectraFor*'s heads: the pretraining's discriminator, the masked LM's generator and
 * its output, the classifier and qa_outputs. */
static const naming electra_names = {
    .model = "ElectraModel",
    .wrapper = "electra.",
    .layers = "encoder.layer.",
    .qkv = {"attention.self.query", "attention.self.key", "attention.self.value"},
    .heads = {"discriminator_predictions.", "generator_predictions.", "generator_lm_head.", "classifier.",
              "qa_outputs."},
    .top = PROJECTED_TOP_NAMES("embeddings_project."),
    .layer = BERT_LAYER_NAMES,
};

static const naming *names_of(const hf_bert_config *c)
{
    static const naming *const by_family[] = {[HF_BERT] = &bert_names, [HF_ROBERTA] = &roberta_names,
                                              [HF_DISTILBERT] = &distilbert_names, [HF_ALBERT] = &albert_names,
                                              [HF_ELECTRA] = &electra_names};
    return by_family[c->family];
}

/* Whether the model has the embedding tensor p names: not a projection it lacks, nor
 * token types where it has none. */
static bool has_top(const hf_bert_config *c, const name_pair *p)
{
    static const char project[] = "embed_project.", types[] = "token_type_";
    return p->hf && (c->projected || strncmp(p->flare, project, sizeof project - 1) != 0) &&
           (c->type_vocab > 0 || strncmp(p->flare, types, sizeof types - 1) != 0);
}

/* Checkpoints converted from the original BERT release (bert-base-uncased's among
 * them) name a LayerNorm's parameters gamma and beta; transformers renames them on
 * load. */
static const char *legacy_name(const char *name, char *out, size_t size)
{
    const char *tails[][2] = {{"LayerNorm.weight", "LayerNorm.gamma"}, {"LayerNorm.bias", "LayerNorm.beta"}};
    size_t n = strlen(name);
    for (int i = 0; i < 2; i++) {
        size_t k = strlen(tails[i][0]);
        if (n >= k && strcmp(name + n - k, tails[i][0]) == 0 && n - k + strlen(tails[i][1]) < size) {
            snprintf(out, size, "%.*s%s", (int)(n - k), name, tails[i][1]);
            return out;
        }
    }
    return NULL;
}

/* The name the file uses for hf: hf itself, or its legacy gamma/beta spelling. */
static const char *file_name(const fl_tensor_map *file, const char *hf, char *out, size_t size)
{
    if (fl_tensor_map_contains(file, hf))
        return hf;
    const char *legacy = legacy_name(hf, out, size);
    return legacy && fl_tensor_map_contains(file, legacy) ? legacy : hf;
}

/* name, or its legacy spelling, is hf */
static bool same_name(const char *name, const char *hf)
{
    char legacy[256];
    return strcmp(name, hf) == 0 || (legacy_name(hf, legacy, sizeof legacy) && strcmp(name, legacy) == 0);
}

static bool known_name(const char *name, const char *prefix, const hf_bert_config *c)
{
    const naming *names = names_of(c);
    for (int i = 0; *prefix && i < HEAD_PREFIXES && names->heads[i]; i++)
        if (strncmp(name, names->heads[i], strlen(names->heads[i])) == 0)
            return true;
    if (strncmp(name, prefix, strlen(prefix)) != 0)
        return false;
    name += strlen(prefix);
    /* The pooler (dense and tanh on the first token) is not part of the encoder's
     * output; position_ids is a buffer of the positions 0, 1, ... */
    if (strncmp(name, "pooler.", 7) == 0 || strcmp(name, "embeddings.position_ids") == 0)
        return true;
    for (size_t j = 0; j < TOP_NAMES; j++)
        if (has_top(c, &names->top[j]) && same_name(name, names->top[j].hf))
            return true;
    size_t n = strlen(names->layers);
    long long layer = -1;
    int consumed = 0;
    if (strncmp(name, names->layers, n) != 0 || sscanf(name + n, "%lld.%n", &layer, &consumed) != 1 ||
        consumed == 0 || layer < 0 || layer >= stored_layers(c))
        return false;
    const char *rest = name + n + consumed;
    for (size_t j = 0; j < LAYER_NAMES; j++)
        if (same_name(rest, names->layer[j].hf))
            return true;
    for (int j = 0; j < 3; j++) {
        size_t k = strlen(names->qkv[j]);
        if (strncmp(rest, names->qkv[j], k) != 0)
            continue;
        if (strcmp(rest + k, ".weight") == 0 || strcmp(rest + k, ".bias") == 0)
            return true;
    }
    return false;
}

static bool map_weights(const char *path, const fl_tensor_map *file, const void *config,
                        const fl_tensor_map *expected, fl_tensor_map *values)
{
    const hf_bert_config *c = config;
    const naming *names = names_of(c);
    /* The encoder's own names, or those of a task class around it */
    char hf[256], flare[256], legacy[256];
    snprintf(hf, sizeof hf, "%sembeddings.word_embeddings.weight", names->wrapper);
    const char *prefix = fl_tensor_map_contains(file, hf) ? names->wrapper : "";
    size_t top = TOP_NAMES;
    for (size_t i = 0; i < top + (size_t)stored_layers(c) * LAYER_NAMES; i++) {
        if (i < top && !has_top(c, &names->top[i]))
            continue;
        if (i < top) {
            snprintf(hf, sizeof hf, "%s%s", prefix, names->top[i].hf);
            snprintf(flare, sizeof flare, "%s", names->top[i].flare);
        } else {
            size_t layer = (i - top) / LAYER_NAMES, j = (i - top) % LAYER_NAMES;
            snprintf(hf, sizeof hf, "%s%s%zu.%s", prefix, names->layers, layer, names->layer[j].hf);
            snprintf(flare, sizeof flare, "encoder.layers.%zu.%s", layer, names->layer[j].flare);
        }
        const fl_tensor *want = fl_tensor_map_get(expected, flare);
        fl_tensor *t = hf_tensor(FN, path, file, file_name(file, hf, legacy, sizeof legacy), fl_ndim(want),
                                 fl_shape(want));
        if (!t || fl_tensor_map_set(values, flare, t) != FL_OK)
            return false;
    }
    const int64_t square[] = {c->hidden, c->hidden};
    for (int64_t layer = 0; layer < stored_layers(c); layer++) {
        fl_tensor *weights[3], *biases[3];
        for (int j = 0; j < 3; j++) {
            const char *qkv = names->qkv[j];
            snprintf(hf, sizeof hf, "%s%s%lld.%s.weight", prefix, names->layers, (long long)layer, qkv);
            if (!(weights[j] = hf_tensor(FN, path, file, hf, 2, square)))
                return false;
            snprintf(hf, sizeof hf, "%s%s%lld.%s.bias", prefix, names->layers, (long long)layer, qkv);
            if (!(biases[j] = hf_tensor(FN, path, file, hf, 1, square)))
                return false;
        }
        snprintf(flare, sizeof flare, "encoder.layers.%lld.self_attn.in_proj_weight", (long long)layer);
        if (fl_tensor_map_set(values, flare, fl_concat(weights, 3, 0)) != FL_OK)
            return false;
        snprintf(flare, sizeof flare, "encoder.layers.%lld.self_attn.in_proj_bias", (long long)layer);
        if (fl_tensor_map_set(values, flare, fl_concat(biases, 3, 0)) != FL_OK)
            return false;
    }
    for (size_t i = 0; i < fl_tensor_map_count(file); i++)
        if (!known_name(fl_tensor_map_name_at(file, i), prefix, c))
            return fail(FL_ERR_VALUE, "%s: the tensor \"%s\" is not part of the %s of config.json", path,
                        fl_tensor_map_name_at(file, i), names->model),
                   false;
    return true;
}

static fl_module *build(const void *config) { return bert_new(config); }

/* bert_new's parameters: the embeddings, their LayerNorm and ALBERT's projection; per
 * stored layer the attention's in and out projections, the MLP's two and two
 * LayerNorms. */
static double count_parameters(const void *config)
{
    const hf_bert_config *c = config;
    double h = (double)c->hidden, e = (double)c->embedding, inner = (double)c->intermediate;
    double embeddings = ((double)c->vocab + (double)c->max_positions + (double)c->type_vocab) * e + 2 * e;
    double project = c->projected ? e * h + h : 0;
    double layer = 4 * h * h + 2 * h * inner + 9 * h + inner;
    return embeddings + project + (double)stored_layers(c) * layer;
}

fl_status hf_load_bert(const char *dir, fl_module **model, hf_bert_config *config)
{
    hf_bert_config c;
    fl_status status = hf_load(FN, dir, &c, read_config, count_parameters, build, map_weights, model);
    if (status == FL_OK && config)
        *config = c;
    return status;
}
