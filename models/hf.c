/*
 * Pretrained weights in the Hugging Face layout (models.h): a directory of config.json
 * and model.safetensors, mapped onto Flare's own models. The configuration is checked
 * key by key, so that a checkpoint of an architecture Flare does not compute is refused
 * by name instead of giving other numbers.
 */
#include <stdio.h>
#include <string.h>

#include "hf_common.h"
#include "sequence_build.h"

#define FN "hf_load_gpt2"

/* Records the error; the message names the file and the key. */
#define fail(status, ...) ((void)fl_error((status), FN, __VA_ARGS__))

/* An optional boolean key that must have the value Flare computes. */
static bool config_flag(json_t *config, const char *path, const char *key, bool required)
{
    json_t *v = json_object_get(config, key);
    if (!v || (json_is_boolean(v) && json_boolean_value(v) == required))
        return true;
    fail(FL_ERR_VALUE, "%s: \"%s\" must be %s: Flare's GPT computes no other", path, key, required ? "true" : "false");
    return false;
}

static bool read_config(const char *path, void *out)
{
    gpt_config *c = out;
    json_t *config = hf_config_open(FN, path);
    if (!config)
        return false;
    bool ok = json_is_object(config);
    if (!ok)
        fail(FL_ERR_VALUE, "%s: %s%s", path, "is not a JSON object", "");
    json_t *type = json_object_get(config, "model_type");
    if (ok && !(json_is_string(type) && strcmp(json_string_value(type), "gpt2") == 0)) {
        ok = false;
        fail(FL_ERR_VALUE, "%s: \"%s\" must be \"gpt2\", got %s", path, "model_type",
             json_is_string(type) ? json_string_value(type) : "no string");
    }
    *c = (gpt_config){.dropout = 0, .layer_norm_eps = 1e-5, .gelu_tanh = true};
    ok = ok && hf_config_int(FN, config, path, "vocab_size", &c->vocab) &&
         hf_config_int(FN, config, path, "n_positions", &c->context) &&
         hf_config_int(FN, config, path, "n_embd", &c->embed) &&
         hf_config_int(FN, config, path, "n_layer", &c->layers) &&
         hf_config_int(FN, config, path, "n_head", &c->heads) && hf_config_unquantized(FN, config, path);
    json_t *eps = json_object_get(config, "layer_norm_epsilon");
    if (ok && eps) {
        if (!json_is_number(eps) || !(json_number_value(eps) > 0))
            ok = false, fail(FL_ERR_VALUE, "%s: \"%s\" must be a positive number%s", path, "layer_norm_epsilon", "");
        else
            c->layer_norm_eps = json_number_value(eps);
    }
    json_t *act = json_object_get(config, "activation_function");
    if (ok && act) {
        const char *a = json_is_string(act) ? json_string_value(act) : "";
        if (strcmp(a, "gelu_new") == 0 || strcmp(a, "gelu_pytorch_tanh") == 0)
            c->gelu_tanh = true;
        else if (strcmp(a, "gelu") == 0)
            c->gelu_tanh = false;
        else
            ok = false,
            fail(FL_ERR_VALUE, "%s: \"%s\" \"%s\" is not one Flare has (\"gelu_new\", \"gelu_pytorch_tanh\", \"gelu\")",
                 path, "activation_function", a);
    }
    json_t *inner = json_object_get(config, "n_inner");
    if (ok && inner && !json_is_null(inner) && !(json_is_integer(inner) && json_integer_value(inner) == 4 * c->embed))
        ok = false, fail(FL_ERR_VALUE, "%s: \"%s\" must be null or 4 n_embd%s", path, "n_inner", "");
    ok = ok && config_flag(config, path, "scale_attn_weights", true) &&
         config_flag(config, path, "scale_attn_by_inverse_layer_idx", false) &&
         config_flag(config, path, "add_cross_attention", false) &&
         config_flag(config, path, "tie_word_embeddings", true);
    if (ok && c->embed % c->heads) {
        char detail[96];
        snprintf(detail, sizeof detail, " (%lld and %lld)", (long long)c->embed, (long long)c->heads);
        ok = false, fail(FL_ERR_VALUE, "%s: \"%s\" must divide n_embd%s", path, "n_head", detail);
    }
    json_decref(config);
    return ok;
}

/* GPT-2's name of each of Flare's parameters (without "transformer."), and whether
 * the tensor is a Conv1D weight, [in, out], to transpose. */
typedef struct name_pair {
    const char *hf, *flare;
    bool conv1d;
} name_pair;

static const name_pair block_names[] = {
    {"ln_1.weight", "norm1.weight", false},
    {"ln_1.bias", "norm1.bias", false},
    {"attn.c_attn.weight", "self_attn.in_proj_weight", true},
    {"attn.c_attn.bias", "self_attn.in_proj_bias", false},
    {"attn.c_proj.weight", "self_attn.out_proj.weight", true},
    {"attn.c_proj.bias", "self_attn.out_proj.bias", false},
    {"ln_2.weight", "norm2.weight", false},
    {"ln_2.bias", "norm2.bias", false},
    {"mlp.c_fc.weight", "linear1.weight", true},
    {"mlp.c_fc.bias", "linear1.bias", false},
    {"mlp.c_proj.weight", "linear2.weight", true},
    {"mlp.c_proj.bias", "linear2.bias", false},
};

static const name_pair top_names[] = {
    {"wte.weight", "tok_embed.weight", false},
    {"wpe.weight", "pos_embed.weight", false},
    {"ln_f.weight", "ln_f.weight", false},
    {"ln_f.bias", "ln_f.bias", false},
};

static bool ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && strcmp(s + n - k, tail) == 0;
}

/* Copies file[hf] into values[flare], checked against the shape of expected[flare]
 * (transposed first for a Conv1D weight) and made f32. */
static bool take(const char *path, const fl_tensor_map *file, const char *hf, const name_pair *p, const char *flare,
                 const fl_tensor_map *expected, fl_tensor_map *values)
{
    const fl_tensor *want = fl_tensor_map_get(expected, flare);
    int64_t shape[FL_MAX_DIMS];
    for (int i = 0; i < fl_ndim(want); i++)
        shape[i] = fl_dim(want, p->conv1d ? fl_ndim(want) - 1 - i : i);
    fl_tensor *v = hf_tensor(FN, path, file, hf, fl_ndim(want), shape);
    if (!v)
        return false;
    if (p->conv1d)
        v = fl_transpose(v, 0, 1);
    return fl_tensor_map_set(values, flare, v) == FL_OK;
}

/* The values of Flare's parameters under Flare's names, from the file's. */
static bool map_weights(const char *path, const fl_tensor_map *file, const void *config, const fl_tensor_map *expected,
                        fl_tensor_map *values)
{
    const gpt_config *c = config;
    const char *prefix = fl_tensor_map_contains(file, "transformer.wte.weight") ? "transformer." : "";
    char hf[256], flare[256];
    for (size_t i = 0; i < sizeof top_names / sizeof *top_names; i++) {
        snprintf(hf, sizeof hf, "%s%s", prefix, top_names[i].hf);
        if (!take(path, file, hf, &top_names[i], top_names[i].flare, expected, values))
            return false;
    }
    for (int64_t layer = 0; layer < c->layers; layer++)
        for (size_t i = 0; i < sizeof block_names / sizeof *block_names; i++) {
            snprintf(hf, sizeof hf, "%sh.%lld.%s", prefix, (long long)layer, block_names[i].hf);
            snprintf(flare, sizeof flare, "blocks.layers.%lld.%s", (long long)layer, block_names[i].flare);
            if (!take(path, file, hf, &block_names[i], flare, expected, values))
                return false;
        }
    /* Anything else must be a tensor Flare knows to be redundant: the tied head (equal
     * to wte), or the causal-mask buffers older versions saved. */
    for (size_t i = 0; i < fl_tensor_map_count(file); i++) {
        const char *name = fl_tensor_map_name_at(file, i);
        if (ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias"))
            continue;
        if (strcmp(name, "lm_head.weight") == 0) {
            fl_tensor *head = fl_tensor_map_get(file, name), *wte = fl_tensor_map_get(values, "tok_embed.weight");
            bool same = fl_ndim(head) == 2 && fl_dim(head, 0) == fl_dim(wte, 0) && fl_dim(head, 1) == fl_dim(wte, 1) &&
                        fl_item(fl_max(fl_abs(fl_sub(fl_cast(head, FL_F32), wte)), FL_ALL_AXES, false)) == 0;
            if (!same)
                return fail(FL_ERR_VALUE, "%s: \"%s\" differs from %swte.weight: Flare's GPT ties its head", path, name,
                            prefix),
                       false;
            continue;
        }
        bool known = false;
        for (size_t j = 0; j < sizeof top_names / sizeof *top_names && !known; j++)
            known = strncmp(name, prefix, strlen(prefix)) == 0 && strcmp(name + strlen(prefix), top_names[j].hf) == 0;
        if (!known && strncmp(name, prefix, strlen(prefix)) == 0 && strncmp(name + strlen(prefix), "h.", 2) == 0) {
            long long layer = -1;
            int consumed = 0;
            const char *rest = name + strlen(prefix) + 2;
            if (sscanf(rest, "%lld.%n", &layer, &consumed) == 1 && consumed > 0 && layer >= 0 && layer < c->layers)
                for (size_t j = 0; j < sizeof block_names / sizeof *block_names && !known; j++)
                    known = strcmp(rest + consumed, block_names[j].hf) == 0;
        }
        if (!known)
            return fail(FL_ERR_VALUE, "%s: the tensor \"%s\" is not part of the GPT-2 of config.json%s", path, name,
                        ""),
                   false;
    }
    return true;
}

static fl_module *build(const void *config) { return gpt_new(config); }

/* gpt_new's parameters: the token and position embeddings; per block the attention's
 * in and out projections, the MLP's two (4 n_embd wide) and two LayerNorms; the final
 * LayerNorm. The head is the token embedding. */
static double count_parameters(const void *config)
{
    const gpt_config *c = config;
    double e = (double)c->embed;
    return ((double)c->vocab + (double)c->context) * e + (double)c->layers * (12 * e * e + 13 * e) + 2 * e;
}

fl_status hf_load_gpt2(const char *dir, fl_module **model, gpt_config *config)
{
    gpt_config c;
    fl_status status = hf_load(FN, dir, &c, read_config, count_parameters, build, map_weights, model);
    if (status == FL_OK && config)
        *config = c;
    return status;
}
