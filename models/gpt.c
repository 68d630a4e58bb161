/*
 * A GPT-style causal language model (models.h): embeddings, pre-norm causal blocks,
 * a final LayerNorm and an output head tied to the token embedding; and decoding with
 * a cache of keys and values, so that each new token costs one position's work
 * instead of a forward over the whole sequence.
 */
#include <math.h>
#include <stdlib.h>

#include "sequence_build.h"

#define LAYER_NORM_EPS 1e-5 /* when gpt_config's is 0 */
#define EMBED_INIT_STD 0.02

static fl_variable *apply(fl_module *m, const char *child, fl_variable *x)
{
    return fl_module_forward(fl_module_child(m, child), x);
}

static void release_tensor_object(void *t) { fl_release(t); }

/* Ends scope, handing t (made inside it) to the enclosing scope, else to the caller. */
static fl_tensor *tensor_scope_return(fl_scope scope, fl_tensor *t)
{
    t = fl_keep(t);
    fl_scope_end(scope);
    return t ? fl_scope_own(t, release_tensor_object) : NULL;
}

/* A tensor of its own (in the scope) for v's value, so that it can be kept. */
static fl_tensor *own_value(const fl_variable *v)
{
    const fl_tensor *t = fl_v_value(v);
    return t ? fl_reshape(t, fl_ndim(t), fl_shape(t)) : NULL;
}

/* Token ids i64 [N, L] with offset + L <= context and every id in [0, vocab). Reads the
 * ids' extremes (a sync on deferred backends). */
static bool valid_tokens(const char *fn, const gpt_config *c, const fl_tensor *ids, int64_t offset)
{
    char d[FL_DESC_SIZE];
    if (fl_null_args(fn, 1, ids))
        return false;
    if (fl_dtype_of(ids) != FL_I64 || fl_ndim(ids) != 2 || fl_dim(ids, 0) < 1 || fl_dim(ids, 1) < 1) {
        fl_error(FL_ERR_SHAPE, fn, "expects token ids i64 [N, L] with N, L >= 1, got %s", fl_describe(ids, d));
        return false;
    }
    if (offset + fl_dim(ids, 1) > c->context) {
        fl_error(FL_ERR_SHAPE, fn, "%lld positions (%lld cached, %s given) exceed the context of %lld",
                 (long long)(offset + fl_dim(ids, 1)), (long long)offset, fl_describe(ids, d),
                 (long long)c->context);
        return false;
    }
    fl_scope scope = fl_scope_begin();
    double lo = fl_item(fl_min(ids, FL_ALL_AXES, false)), hi = fl_item(fl_max(ids, FL_ALL_AXES, false));
    fl_scope_end(scope);
    if (!(lo >= 0 && hi < (double)c->vocab)) {
        fl_error(FL_ERR_VALUE, fn, "token ids must lie in [0, %lld), got ids from %.0f to %.0f in %s",
                 (long long)c->vocab, lo, hi, fl_describe(ids, d));
        return false;
    }
    return true;
}

/* The tied output head: h [..., E] times tok_embed.weight [V, E] transposed. */
static fl_variable *tied_head(fl_module *m, fl_variable *h)
{
    return fl_f_linear(h, fl_module_parameter(fl_module_child(m, "tok_embed"), "weight"), NULL);
}

static fl_variable *gpt_forward(fl_module *m, fl_variable *tokens)
{
    const gpt_config *c = fl_module_state(m);
    if (fl_null_args("gpt_forward", 1, tokens) || !valid_tokens("gpt_forward", c, fl_v_value(tokens), 0))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_variable *h = apply(m, "pos_embed", apply(m, "tok_embed", tokens));
    h = apply(m, "drop", h);
    h = fl_nn_transformer_encoder_forward(fl_module_child(m, "blocks"), h, NULL, NULL, true);
    return fl_v_scope_return(scope, tied_head(m, apply(m, "ln_f", h)));
}

static const fl_module_type gpt_type = {.name = "GPT", .forward = gpt_forward};

fl_module *gpt_new(const gpt_config *config)
{
    const char *fn = "gpt_new";
    if (fl_null_args(fn, 1, config))
        return NULL;
    const gpt_config *c = config;
    if (c->vocab < 1 || c->context < 1 || c->layers < 1 || c->heads < 1 || c->embed < 1 || c->embed % c->heads ||
        !(c->dropout >= 0 && c->dropout < 1))
        return fl_error(FL_ERR_VALUE, fn,
                        "needs vocab, context, layers, heads, embed >= 1 with embed divisible by heads and dropout "
                        "in [0, 1), got vocab %lld, context %lld, layers %lld, heads %lld, embed %lld, dropout %g",
                        (long long)c->vocab, (long long)c->context, (long long)c->layers, (long long)c->heads,
                        (long long)c->embed, c->dropout);
    if (!(c->layer_norm_eps >= 0))
        return fl_error(FL_ERR_VALUE, fn, "layer_norm_eps must be positive (or 0 for %g), got %g", LAYER_NORM_EPS,
                        c->layer_norm_eps);
    if (c->layers > 4096)
        return fl_error(FL_ERR_VALUE, fn, "%lld layers are too many", (long long)c->layers);
    const int64_t features[] = {c->embed};
    const double eps = c->layer_norm_eps > 0 ? c->layer_norm_eps : LAYER_NORM_EPS;
    fl_module *block = fl_nn_transformer_encoder_layer(c->embed, c->heads, 4 * c->embed, c->dropout,
                                                       c->gelu_tanh ? "gelu_tanh" : "gelu", eps, true, true);
    fl_module *m =
        with_children(module_with_config(&gpt_type, c, sizeof *c),
                      NAMED_CHILDREN({"tok_embed", fl_nn_embedding(c->vocab, c->embed, -1)},
                                     {"pos_embed", fl_nn_learned_positional_embedding(c->context, c->embed, true)},
                                     {"drop", fl_nn_dropout(c->dropout)},
                                     {"blocks", fl_nn_transformer_encoder(block, (int)c->layers, NULL)},
                                     {"ln_f", fl_nn_layer_norm(1, features, eps, true)}));
    if (!m)
        return NULL;
    if (fl_init_normal(fl_module_parameter(fl_module_child(m, "tok_embed"), "weight"), 0, EMBED_INIT_STD) != FL_OK ||
        fl_init_normal(fl_module_parameter(fl_module_child(m, "pos_embed"), "weight"), 0, EMBED_INIT_STD) != FL_OK) {
        fl_module_release(m);
        return NULL;
    }
    return m;
}

/* ---- the cache of keys and values ---- */

struct gpt_cache {
    fl_module *model; /* retained */
    int64_t batch, length;
    fl_tensor **keys, **values; /* per block, [N, heads, length, head_dim]; NULL while empty */
};

static bool is_gpt(const char *fn, const fl_module *m)
{
    if (fl_module_type_of(m) == &gpt_type)
        return true;
    fl_error(FL_ERR_VALUE, fn, "the module is a %s, not a GPT made by gpt_new", fl_module_type_of(m)->name);
    return false;
}

gpt_cache *gpt_cache_new(fl_module *gpt, int64_t batch)
{
    const char *fn = "gpt_cache_new";
    if (fl_null_args(fn, 1, gpt) || !is_gpt(fn, gpt))
        return NULL;
    if (batch < 1)
        return fl_error(FL_ERR_VALUE, fn, "batch must be positive, got %lld", (long long)batch);
    const gpt_config *c = fl_module_state(gpt);
    gpt_cache *cache = calloc(1, sizeof *cache);
    if (cache) {
        cache->keys = calloc((size_t)c->layers, sizeof *cache->keys);
        cache->values = calloc((size_t)c->layers, sizeof *cache->values);
    }
    if (!cache || !cache->keys || !cache->values) {
        if (cache) {
            free(cache->keys);
            free(cache->values);
        }
        free(cache);
        return fl_error(FL_ERR_MEMORY, fn, "out of memory");
    }
    cache->model = fl_module_retain(gpt);
    cache->batch = batch;
    return cache;
}

void gpt_cache_free(gpt_cache *cache)
{
    if (!cache)
        return;
    const gpt_config *c = fl_module_state(cache->model);
    for (int64_t i = 0; i < c->layers; i++) {
        fl_release(cache->keys[i]);
        fl_release(cache->values[i]);
    }
    free(cache->keys);
    free(cache->values);
    fl_module_release(cache->model);
    free(cache);
}

int64_t gpt_cache_length(const gpt_cache *cache) { return cache ? cache->length : 0; }

/* [N, T, E] to [N, heads, T, E / heads]. */
static fl_variable *split_heads(fl_variable *x, int64_t heads)
{
    const fl_tensor *v = fl_v_value(x);
    int64_t n = fl_dim(v, 0), t = fl_dim(v, 1), e = fl_dim(v, 2);
    return fl_v_transpose(fl_v_reshape(x, FL_SHAPE(n, t, heads, e / heads)), 1, 2);
}

/* The cached [N, H, S, D] (NULL while empty) followed by fresh [N, H, T, D]. */
static fl_tensor *extended(fl_tensor *cached, fl_variable *fresh)
{
    fl_tensor *whole = own_value(fresh);
    if (cached && whole) {
        fl_tensor *parts[] = {cached, whole};
        whole = fl_concat(parts, 2, 2);
    }
    return whole;
}

/* One pre-norm block on x [N, T, E] at positions length .. length + T - 1, with the
 * block's own parameters; mask [T, length + T] forbids the later keys. The block's
 * keys and values of all length + T positions go to *keys and *values (in the scope). */
static fl_variable *cached_block(gpt_cache *cache, int64_t layer, fl_module *block, fl_variable *x,
                                 const fl_tensor *mask, fl_tensor **keys, fl_tensor **values)
{
    const gpt_config *c = fl_module_state(cache->model);
    fl_module *attn = fl_module_child(block, "self_attn");
    fl_variable *qkv = fl_f_linear(apply(block, "norm1", x), fl_module_parameter(attn, "in_proj_weight"),
                                   fl_module_parameter(attn, "in_proj_bias"));
    fl_variable *parts[3];
    if (fl_v_split(qkv, (const int64_t[]){c->embed, c->embed, c->embed}, 3, 2, parts) != FL_OK)
        return NULL;
    *keys = extended(cache->keys[layer], split_heads(parts[1], c->heads));
    *values = extended(cache->values[layer], split_heads(parts[2], c->heads));
    if (!*keys || !*values)
        return NULL;
    fl_variable *out = fl_f_scaled_dot_product_attention(split_heads(parts[0], c->heads), fl_v_new(*keys, false),
                                                         fl_v_new(*values, false), mask, 0, false, false);
    const fl_tensor *o = fl_v_value(out);
    if (!o)
        return NULL;
    out = fl_v_reshape(fl_v_transpose(out, 1, 2), FL_SHAPE(fl_dim(o, 0), fl_dim(o, 2), c->embed));
    x = fl_v_add(x, apply(attn, "out_proj", out));
    fl_variable *h = fl_v_gelu(apply(block, "linear1", apply(block, "norm2", x)), c->gelu_tanh);
    return fl_v_add(x, apply(block, "linear2", h));
}

fl_tensor *gpt_cache_feed(gpt_cache *cache, const fl_tensor *tokens)
{
    const char *fn = "gpt_cache_feed";
    if (fl_null_args(fn, 2, cache, tokens))
        return NULL;
    fl_module *m = cache->model;
    const gpt_config *c = fl_module_state(m);
    if (!valid_tokens(fn, c, tokens, cache->length))
        return NULL;
    if (fl_dim(tokens, 0) != cache->batch) {
        char d[FL_DESC_SIZE];
        return fl_error(FL_ERR_SHAPE, fn, "the cache holds a batch of %lld, got tokens %s", (long long)cache->batch,
                        fl_describe(tokens, d));
    }
    int64_t t = fl_dim(tokens, 1), past = cache->length, total = past + t;
    bool grad = fl_set_grad_enabled(false);
    fl_scope scope = fl_scope_begin();
    /* Query i (position past + i) may see keys 0 .. past + i. */
    fl_tensor *mask = fl_gt(fl_reshape(fl_arange(0, (double)total, 1, FL_I64), FL_SHAPE(1, total)),
                            fl_reshape(fl_arange((double)past, (double)total, 1, FL_I64), FL_SHAPE(t, 1)));
    fl_variable *pos_weight = fl_module_parameter(fl_module_child(m, "pos_embed"), "weight");
    fl_variable *h = fl_v_add(apply(m, "tok_embed", fl_v_new(tokens, false)),
                              fl_v_index(pos_weight, FL_INDEX(FL_RANGE(past, total))));
    fl_module *layers = fl_module_child(fl_module_child(m, "blocks"), "layers");
    /* The new keys and values replace the cached ones only once every block succeeded,
     * so a failed call leaves the cache as it was. */
    fl_tensor **keys = calloc((size_t)(2 * c->layers), sizeof *keys), **values = keys ? keys + c->layers : NULL;
    if (!keys)
        fl_error(FL_ERR_MEMORY, fn, "out of memory");
    for (int64_t i = 0; i < c->layers && h && keys; i++)
        h = cached_block(cache, i, fl_module_child_at(layers, (int)i, NULL), h, mask, &keys[i], &values[i]);
    fl_tensor *logits = NULL;
    if (h && keys) {
        fl_variable *last = fl_v_index(h, FL_INDEX(FL_SPAN, FL_AT(t - 1)));
        fl_variable *out = tied_head(m, apply(m, "ln_f", last));
        logits = out ? own_value(out) : NULL;
    }
    if (logits) {
        for (int64_t i = 0; i < c->layers; i++) {
            fl_release(cache->keys[i]);
            fl_release(cache->values[i]);
            cache->keys[i] = fl_keep(keys[i]);
            cache->values[i] = fl_keep(values[i]);
        }
        cache->length = total;
    }
    free(keys);
    fl_set_grad_enabled(grad);
    return tensor_scope_return(scope, logits);
}

/* ---- generation ---- */

/* The next token of each row of logits [N, V], [N, 1] i64, as gpt_sampling says. */
static fl_tensor *pick(const fl_tensor *logits, const gpt_sampling *s)
{
    int64_t n = fl_dim(logits, 0), vocab = fl_dim(logits, 1);
    if (s->temperature <= 0)
        return fl_reshape(fl_argmax(logits, 1, false), FL_SHAPE(n, 1));
    fl_tensor *z = fl_div_scalar(logits, s->temperature);
    if (s->top_k > 0 && s->top_k < vocab) {
        fl_tensor *top = NULL;
        if (fl_topk(z, s->top_k, 1, true, &top, NULL) != FL_OK)
            return NULL;
        fl_tensor *kth = fl_index(top, FL_INDEX(FL_SPAN, FL_RANGE(s->top_k - 1, s->top_k)));
        z = fl_where(fl_lt(z, kth), fl_scalar(-INFINITY, fl_dtype_of(z)), z);
    }
    fl_tensor *p = fl_softmax(z, 1);
    if (s->top_p > 0 && s->top_p < 1) {
        /* In descending order, a token goes when the mass of the ones before it already
         * reaches top_p; the first never goes. Scattering that back through the sort's
         * permutation marks the dropped tokens in vocabulary order. */
        fl_tensor *sorted = NULL, *order = NULL;
        if (fl_sort(p, 1, true, &sorted, &order) != FL_OK)
            return NULL;
        fl_tensor *before = fl_sub(fl_cumsum(sorted, 1), sorted);
        fl_tensor *gone = fl_cast(fl_ge(before, fl_scalar(s->top_p, fl_dtype_of(p))), fl_dtype_of(p));
        fl_tensor *dropped = fl_scatter_add(fl_zeros_like(p), 1, order, gone);
        p = fl_where(fl_gt(dropped, fl_scalar(0, fl_dtype_of(p))), fl_scalar(0, fl_dtype_of(p)), p);
    }
    return fl_multinomial(p, 1, true);
}

fl_tensor *gpt_generate(fl_module *gpt, const fl_tensor *prompt, int64_t new_tokens, const gpt_sampling *sampling)
{
    const char *fn = "gpt_generate";
    if (fl_null_args(fn, 3, gpt, prompt, sampling) || !is_gpt(fn, gpt))
        return NULL;
    const gpt_config *c = fl_module_state(gpt);
    const gpt_sampling *s = sampling;
    if (new_tokens < 0)
        return fl_error(FL_ERR_VALUE, fn, "new_tokens must not be negative, got %lld", (long long)new_tokens);
    if (isnan(s->temperature) || s->top_k < 0 || !(s->top_p >= 0))
        return fl_error(FL_ERR_VALUE, fn, "needs a temperature (not nan), top_k >= 0 and top_p >= 0, got %g, %lld, %g",
                        s->temperature, (long long)s->top_k, s->top_p);
    if (!valid_tokens(fn, c, prompt, 0))
        return NULL;
    int64_t n = fl_dim(prompt, 0), p = fl_dim(prompt, 1);
    if (p + new_tokens - 1 > c->context) {
        char d[FL_DESC_SIZE];
        return fl_error(FL_ERR_SHAPE, fn, "a prompt %s and %lld new tokens need %lld positions, past the context of %lld",
                        fl_describe(prompt, d), (long long)new_tokens, (long long)(p + new_tokens - 1),
                        (long long)c->context);
    }
    fl_scope outer = fl_scope_begin();
    fl_tensor *out = fl_reshape(prompt, FL_SHAPE(n, p));
    gpt_cache *cache = new_tokens > 0 ? gpt_cache_new(gpt, n) : NULL;
    fl_random_stream previous = fl_random_stream_begin(s->seed);
    fl_tensor *logits = cache ? gpt_cache_feed(cache, prompt) : NULL;
    for (int64_t step = 0; step < new_tokens && out; step++) {
        /* A scope per step, so that a long generation holds one step's temporaries. */
        fl_scope inner = fl_scope_begin();
        fl_tensor *next = logits ? pick(logits, s) : NULL;
        fl_tensor *longer = next ? fl_concat((fl_tensor *[]){out, next}, 2, 1) : NULL;
        fl_tensor *following = next && step + 1 < new_tokens ? gpt_cache_feed(cache, next) : NULL;
        bool ok = longer && (step + 1 == new_tokens || following);
        longer = ok ? fl_keep(longer) : NULL;
        following = ok && following ? fl_keep(following) : NULL;
        fl_scope_end(inner);
        out = longer ? fl_scope_own(longer, release_tensor_object) : NULL;
        logits = following ? fl_scope_own(following, release_tensor_object) : NULL;
    }
    fl_random_stream_end(previous);
    gpt_cache_free(cache);
    return tensor_scope_return(outer, out);
}

/* ---- the benchmark model ----
 *
 * Next-token prediction on random text, as the paper trains on random data in memory.
 * bench/torch/gpt.py is the same model in PyTorch with the same state_dict names. TINY
 * is small for tests, CPU is six 512-wide blocks (the BERT-like model's size), PAPER
 * is GPT-2 small's shape (124.4M parameters with the tied head). */

typedef struct gpt_benchmark_config {
    gpt_config model;
    int64_t seq;
} gpt_benchmark_config;

static const gpt_benchmark_config benchmark_configs[MODEL_SIZES] = {
    [MODEL_TINY] = {{.vocab = 96, .context = 16, .layers = 2, .heads = 4, .embed = 32, .dropout = 0.1}, .seq = 16},
    [MODEL_CPU] = {{.vocab = 30000, .context = 512, .layers = 6, .heads = 8, .embed = 512, .dropout = 0.1},
                   .seq = 128},
    [MODEL_PAPER] = {{.vocab = 50257, .context = 1024, .layers = 12, .heads = 12, .embed = 768, .dropout = 0.1},
                     .seq = 1024},
};

static fl_module *gpt_build(model_size size)
{
    return valid_size("gpt.build", size) ? gpt_new(&benchmark_configs[size].model) : NULL;
}

/* Random tokens [N, seq + 1]: the input is the first seq, the target the last seq. */
static fl_status gpt_make_batch(model_size size, int64_t batch, fl_tensor **input, fl_tensor **target)
{
    if (batch_start("gpt.make_batch", size, batch, input, target) != FL_OK)
        return FL_ERR_VALUE;
    const gpt_benchmark_config *c = &benchmark_configs[size];
    return next_token_batch(batch, c->model.vocab, c->seq, input, target);
}

/* Multiply-adds of the matrix products, 2 FLOPs each, forward and backward (3x); the
 * causal attention is counted whole, as it is computed. */
static double gpt_flops_per_sample(model_size size)
{
    if (!valid_size("gpt.flops_per_sample", size))
        return NAN;
    const gpt_benchmark_config *c = &benchmark_configs[size];
    double s = (double)c->seq, d = (double)c->model.embed;
    double projections = 4 * d * d + 2 * d * 4 * d; /* q, k, v, out; the MLP */
    double attention = 2 * s * d;                   /* q k^T and weights v, per position */
    double head = s * d * (double)c->model.vocab;
    return 3 * 2 * ((double)c->model.layers * s * (projections + attention) + head);
}

const benchmark_model benchmark_gpt = {
    .name = "gpt",
    .batch = {[MODEL_TINY] = 4, [MODEL_CPU] = 8, [MODEL_PAPER] = 8},
    .build = gpt_build,
    .make_batch = gpt_make_batch,
    .loss = token_loss,
    .flops_per_sample = gpt_flops_per_sample,
};
