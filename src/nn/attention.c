/* Attention: scaled dot-product attention with a fused gradient, and PyTorch's
 * MultiheadAttention on top of it. */
#include <math.h>
#include <stdlib.h>

#include "flare/extension.h"
#include "flare/nn.h"

/* ---- scaled dot-product attention ---- */

/* The composed tape would record eight nodes (transpose, matmul, scale, mask, softmax,
 * dropout, matmul) and keep the scores, the weights and the dropped weights; the fused
 * gradient keeps the weights only, and the softmax gradient is one expression. */
typedef struct sdpa_context {
    double scale;
    bool dropout; /* saved[4] is the dropout multiplier: 0 or 1 / (1 - p) */
} sdpa_context;

static fl_tensor *last_two_swapped(const fl_tensor *t) { return fl_transpose(t, -2, -1); }

/* saved: q, k, v, the attention weights p, [the dropout multiplier]. */
static void sdpa_grad(fl_grad *g)
{
    const sdpa_context *c = g->context;
    fl_tensor *q = g->saved[0], *k = g->saved[1], *v = g->saved[2], *p = g->saved[3];
    fl_tensor *dropped = c->dropout ? fl_mul(p, g->saved[4]) : p;
    if (g->needs_grad[2])
        g->input_grads[2] = fl_matmul(last_two_swapped(dropped), g->output_grad);
    if (!g->needs_grad[0] && !g->needs_grad[1])
        return;
    fl_tensor *dp = fl_matmul(g->output_grad, last_two_swapped(v));
    if (c->dropout)
        dp = fl_mul(dp, g->saved[4]);
    /* The softmax gradient: p * (dp - sum(dp * p)), then the scale of the scores. */
    fl_tensor *rowdot = fl_sum(fl_mul(dp, p), FL_AXES(-1), true);
    fl_tensor *dscores = fl_mul_scalar(fl_mul(p, fl_sub(dp, rowdot)), c->scale);
    if (g->needs_grad[0])
        g->input_grads[0] = fl_matmul(dscores, k);
    if (g->needs_grad[1])
        g->input_grads[1] = fl_matmul(last_two_swapped(dscores), q);
}

static bool sdpa_arguments_fit(const char *fn, const fl_tensor *q, const fl_tensor *k, const fl_tensor *v,
                               const fl_tensor *mask, double dropout_p)
{
    char a[FL_DESC_SIZE], b[FL_DESC_SIZE], d[FL_DESC_SIZE];
    fl_dtype dtype = fl_dtype_of(q);
    if (!fl_dtype_is_float(dtype) || fl_dtype_of(k) != dtype || fl_dtype_of(v) != dtype)
        return fl_error(FL_ERR_DTYPE, fn, "q, k and v must share a floating dtype, got %s, %s and %s",
                         fl_describe(q, a), fl_describe(k, b), fl_describe(v, d)),
               false;
    if (fl_ndim(q) < 2 || fl_ndim(k) < 2 || fl_ndim(v) < 2 || fl_dim(q, -1) != fl_dim(k, -1) ||
        fl_dim(k, -2) != fl_dim(v, -2))
        return fl_error(FL_ERR_SHAPE, fn, "q [..., L, D], k [..., S, D], v [..., S, Dv] do not fit: %s, %s, %s",
                         fl_describe(q, a), fl_describe(k, b), fl_describe(v, d)),
               false;
    if (mask && fl_dtype_of(mask) != FL_BOOL && !fl_dtype_is_float(fl_dtype_of(mask)))
        return fl_error(FL_ERR_DTYPE, fn, "the mask must be bool or floating, got %s", fl_describe(mask, a)), false;
    if (!(dropout_p >= 0 && dropout_p <= 1))
        return fl_error(FL_ERR_VALUE, fn, "dropout_p must be in [0, 1], got %g", dropout_p), false;
    return true;
}

/* [L, S] bool, true where key j comes after query i (j > i): the keys a causal query
 * may not see, top-left aligned as PyTorch's is_causal. On q's backend. */
static fl_tensor *causal_forbidden(const fl_tensor *q, int64_t l, int64_t s)
{
    fl_tensor *keys = fl_arange(0, (double)s, 1, FL_I64);
    fl_tensor *queries = fl_reshape(fl_arange(0, (double)l, 1, FL_I64), 2, (int64_t[]){l, 1});
    return fl_to_backend(fl_gt(keys, queries), fl_backend_name(q));
}

/* scores with -inf where the bool mask forbidden is true: a bool attention mask and
 * the causal mask alike. like gives the backend of the -inf. */
static fl_tensor *forbid(fl_tensor *scores, const fl_tensor *forbidden, const fl_tensor *like, fl_dtype dtype)
{
    return fl_where(forbidden, fl_new_scalar(like, -INFINITY, dtype), scores);
}

fl_variable *fl_f_scaled_dot_product_attention(fl_variable *q, fl_variable *k, fl_variable *v, const fl_tensor *mask,
                                               double dropout_p, bool is_causal, bool training)
{
    const char *fn = "fl_f_scaled_dot_product_attention";
    if (fl_null_args(fn, 3, q, k, v) || fl_mixed_backends(fn, 4, fl_v_value(q), fl_v_value(k), fl_v_value(v), mask))
        return NULL;
    const fl_tensor *qt = fl_v_value(q), *kt = fl_v_value(k), *vt = fl_v_value(v);
    if (!sdpa_arguments_fit(fn, qt, kt, vt, mask, dropout_p))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_dtype dtype = fl_dtype_of(qt);
    sdpa_context c = {.scale = 1.0 / sqrt((double)fl_dim(qt, -1)), .dropout = training && dropout_p > 0};
    fl_tensor *scores = fl_mul_scalar(fl_matmul(qt, last_two_swapped(kt)), c.scale);
    /* One convention for every attention function (nn.h): a bool mask is true where
     * attention is forbidden. */
    if (mask && fl_dtype_of(mask) == FL_BOOL)
        scores = forbid(scores, mask, qt, dtype);
    else if (mask)
        scores = fl_add(scores, fl_cast(mask, dtype));
    if (is_causal)
        scores = forbid(scores, causal_forbidden(qt, fl_dim(qt, -2), fl_dim(kt, -2)), qt, dtype);
    fl_tensor *p = fl_softmax(scores, -1);
    /* A query whose every key is masked has no softmax (0 / 0 gives nan, which the
     * gradient spreads to every parameter): its weights are zero instead, so its output
     * is zero and its gradients finite, as PyTorch's scaled_dot_product_attention. A nan
     * from the inputs stays nan: only rows whose maximum is -inf are zeroed. */
    if (mask || is_causal)
        p = fl_where(fl_eq(fl_max(scores, FL_AXES(-1), true), fl_new_scalar(qt, -INFINITY, dtype)),
                     fl_new_scalar(qt, 0, dtype), p);
    fl_tensor *multiplier = NULL, *weights = p;
    if (c.dropout && p) {
        /* drawn on the default backend: the same mask on any backend */
        fl_tensor *u = fl_to_backend(fl_rand(dtype, fl_ndim(p), fl_shape(p)), fl_backend_name(qt));
        fl_tensor *kept = fl_lt(u, fl_new_scalar(qt, 1 - dropout_p, dtype));
        multiplier = fl_mul_scalar(fl_cast(kept, dtype), dropout_p < 1 ? 1 / (1 - dropout_p) : 0);
        weights = fl_mul(p, multiplier);
    }
    fl_tensor *out = fl_matmul(weights, vt);
    fl_variable *result = c.dropout ? fl_v_record(out, FL_VARS(q, k, v), sdpa_grad, FL_SAVE(qt, kt, vt, p, multiplier),
                                                  &c, sizeof c)
                                    : fl_v_record(out, FL_VARS(q, k, v), sdpa_grad, FL_SAVE(qt, kt, vt, p), &c, sizeof c);
    return fl_v_scope_return(scope, result);
}

/* ---- multi-head attention ---- */

typedef struct attention_state {
    int64_t embed_dim, num_heads;
    double dropout;
    bool batch_first;
} attention_state;

static fl_variable *self_attention_forward(fl_module *m, fl_variable *x);
static fl_variable *attention_forward_args(fl_module *m, const fl_module_args *args);

static const fl_module_type multihead_attention_type = {
    .name = "MultiheadAttention",
    .forward = self_attention_forward,
    .forward_args = attention_forward_args,
    .max_inputs = 3,
    .accepts = FL_ARG_KEY_PADDING_MASK | FL_ARG_ATTN_MASK | FL_ARG_IS_CAUSAL};

/* [N, L, E] -> [N, heads, L, E / heads] */
static fl_variable *split_heads(fl_variable *x, int64_t heads)
{
    const int64_t *s = fl_shape(fl_v_value(x));
    fl_variable *y = fl_v_reshape(x, 4, (int64_t[]){s[0], s[1], heads, s[2] / heads});
    return fl_v_permute(y, (int[]){0, 2, 1, 3});
}

static fl_variable *merge_heads(fl_variable *x)
{
    const int64_t *s = fl_shape(fl_v_value(x));
    fl_variable *y = fl_v_permute(x, (int[]){0, 2, 1, 3});
    return fl_v_reshape(y, 3, (int64_t[]){s[0], s[2], s[1] * s[3]});
}

/* A mask as added to the scores: bool true (forbidden) becomes -inf. */
static fl_tensor *additive(const fl_tensor *mask, fl_dtype dtype)
{
    if (fl_dtype_of(mask) != FL_BOOL)
        return fl_cast(mask, dtype);
    return fl_where(mask, fl_new_scalar(mask, -INFINITY, dtype), fl_new_scalar(mask, 0, dtype));
}

/* The two masks of PyTorch's MultiheadAttention merged into one additive mask that
 * broadcasts to the scores [N, heads, L, S]; NULL if there is none (or on error). */
static fl_tensor *attention_mask(const char *fn, const fl_tensor *key_padding_mask, const fl_tensor *attn_mask,
                                 int64_t n, int64_t heads, int64_t l, int64_t s, fl_dtype dtype)
{
    char a[FL_DESC_SIZE];
    fl_tensor *mask = NULL;
    const fl_tensor *masks[2] = {key_padding_mask, attn_mask};
    for (int i = 0; i < 2; i++)
        if (masks[i] && fl_dtype_of(masks[i]) != FL_BOOL && !fl_dtype_is_float(fl_dtype_of(masks[i])))
            return fl_error(FL_ERR_DTYPE, fn, "a mask must be bool or floating, got %s", fl_describe(masks[i], a));
    if (key_padding_mask) {
        if (fl_ndim(key_padding_mask) != 2 || fl_dim(key_padding_mask, 0) != n || fl_dim(key_padding_mask, 1) != s)
            return fl_error(FL_ERR_SHAPE, fn, "key_padding_mask must be [%lld, %lld], got %s", (long long)n,
                             (long long)s, fl_describe(key_padding_mask, a));
        mask = fl_reshape(additive(key_padding_mask, dtype), 4, (int64_t[]){n, 1, 1, s});
    }
    if (attn_mask) {
        fl_tensor *added;
        if (fl_ndim(attn_mask) == 2 && fl_dim(attn_mask, 0) == l && fl_dim(attn_mask, 1) == s)
            added = additive(attn_mask, dtype);
        else if (fl_ndim(attn_mask) == 3 && fl_dim(attn_mask, 0) == n * heads && fl_dim(attn_mask, 1) == l &&
                 fl_dim(attn_mask, 2) == s)
            added = fl_reshape(additive(attn_mask, dtype), 4, (int64_t[]){n, heads, l, s});
        else
            return fl_error(FL_ERR_SHAPE, fn, "attn_mask must be [%lld, %lld] or [%lld, %lld, %lld], got %s",
                            (long long)l, (long long)s, (long long)(n * heads), (long long)l, (long long)s,
                             fl_describe(attn_mask, a));
        mask = mask ? fl_add(mask, added) : added;
    }
    return mask;
}

fl_variable *fl_nn_multihead_attention_forward(fl_module *m, fl_variable *query, fl_variable *key,
                                               fl_variable *value, const fl_tensor *key_padding_mask,
                                               const fl_tensor *attn_mask, bool is_causal)
{
    const char *fn = "fl_nn_multihead_attention_forward";
    if (fl_null_args(fn, 4, m, query, key, value))
        return NULL;
    if (fl_module_type_of(m) != &multihead_attention_type)
        return fl_error(FL_ERR_VALUE, fn, "the module is a %s, not a MultiheadAttention", fl_module_type_of(m)->name);
    const attention_state *st = fl_module_state(m);
    const fl_tensor *q = fl_v_value(query), *k = fl_v_value(key), *v = fl_v_value(value);
    if (fl_mixed_backends(fn, 5, q, k, v, key_padding_mask, attn_mask))
        return NULL;
    char a[FL_DESC_SIZE], b[FL_DESC_SIZE], d[FL_DESC_SIZE];
    int64_t e = st->embed_dim;
    int batch_axis = st->batch_first ? 0 : 1, seq_axis = 1 - batch_axis;
    if (fl_ndim(q) != 3 || fl_ndim(k) != 3 || fl_ndim(v) != 3 || fl_dim(q, 2) != e || fl_dim(k, 2) != e ||
        fl_dim(v, 2) != e || fl_dim(k, batch_axis) != fl_dim(q, batch_axis) ||
        fl_dim(v, batch_axis) != fl_dim(q, batch_axis) || fl_dim(k, seq_axis) != fl_dim(v, seq_axis))
        return fl_error(FL_ERR_SHAPE, fn, "query, key and value must be %s of embedding %lld, got %s, %s and %s",
                        st->batch_first ? "[N, L, E], [N, S, E], [N, S, E]" : "[L, N, E], [S, N, E], [S, N, E]",
                         (long long)e, fl_describe(q, a), fl_describe(k, b), fl_describe(v, d));

    fl_scope scope = fl_scope_begin();
    fl_variable *weight = fl_module_parameter(m, "in_proj_weight"), *bias = fl_module_parameter(m, "in_proj_bias");
    bool self = query == key && key == value;
    if (!st->batch_first) {
        query = fl_v_transpose(query, 0, 1);
        key = self ? query : fl_v_transpose(key, 0, 1);
        value = self ? query : fl_v_transpose(value, 0, 1);
    }
    fl_variable *qp[3];
    if (self) {
        fl_v_split(fl_f_linear(query, weight, bias), (int64_t[]){e, e, e}, 3, -1, qp);
    } else {
        fl_variable *w[3], *bs[3] = {NULL, NULL, NULL};
        fl_v_split(weight, (int64_t[]){e, e, e}, 3, 0, w);
        if (bias)
            fl_v_split(bias, (int64_t[]){e, e, e}, 3, 0, bs);
        fl_variable *inputs[3] = {query, key, value};
        for (int i = 0; i < 3; i++)
            qp[i] = fl_f_linear(inputs[i], w[i], bs[i]);
    }
    int64_t n = fl_dim(q, batch_axis), l = fl_dim(q, seq_axis), s = fl_dim(k, seq_axis);
    fl_tensor *mask = attention_mask(fn, key_padding_mask, attn_mask, n, st->num_heads, l, s, fl_dtype_of(q));
    fl_variable *out = NULL;
    if (mask || (!key_padding_mask && !attn_mask)) {
        out = fl_f_scaled_dot_product_attention(split_heads(qp[0], st->num_heads), split_heads(qp[1], st->num_heads),
                                                split_heads(qp[2], st->num_heads), mask, st->dropout, is_causal,
                                                fl_module_is_training(m));
        out = fl_module_forward(fl_module_child(m, "out_proj"), merge_heads(out));
        if (!st->batch_first)
            out = fl_v_transpose(out, 0, 1);
    }
    return fl_v_scope_return(scope, out);
}

static fl_variable *self_attention_forward(fl_module *m, fl_variable *x)
{
    return fl_nn_multihead_attention_forward(m, x, x, x, NULL, NULL, false);
}

static fl_variable *attention_forward_args(fl_module *m, const fl_module_args *args)
{
    fl_variable *query = args->inputs[0];
    fl_variable *key = args->inputs[1] ? args->inputs[1] : query;
    fl_variable *value = args->inputs[1] && args->inputs[2] ? args->inputs[2] : key;
    return fl_nn_multihead_attention_forward(m, query, key, value, args->key_padding_mask, args->attn_mask,
                                             args->is_causal);
}

fl_module *fl_nn_multihead_attention(int64_t embed_dim, int64_t num_heads, double dropout, bool bias, bool batch_first)
{
    const char *fn = "fl_nn_multihead_attention";
    if (embed_dim < 1 || num_heads < 1 || embed_dim % num_heads != 0)
        return fl_error(FL_ERR_VALUE, fn, "embed_dim (%lld) must be a positive multiple of num_heads (%lld)",
                        (long long)embed_dim, (long long)num_heads);
    if (!(dropout >= 0 && dropout <= 1))
        return fl_error(FL_ERR_VALUE, fn, "dropout must be in [0, 1], got %g", dropout);
    attention_state *st = malloc(sizeof *st);
    if (!st)
        return fl_error(FL_ERR_MEMORY, fn, "out of memory");
    *st = (attention_state){embed_dim, num_heads, dropout, batch_first};
    fl_module *m = fl_module_new(&multihead_attention_type, st);
    if (!m)
        return NULL;
    /* PyTorch's _reset_parameters: Xavier-uniform projections, zero biases. */
    fl_scope scope = fl_scope_begin();
    fl_variable *in_proj = fl_v_new(fl_zeros(FL_F32, FL_SHAPE(3 * embed_dim, embed_dim)), true);
    fl_status status = fl_init_xavier_uniform(in_proj, 1.0);
    if (status == FL_OK)
        status = fl_module_add_parameter(m, "in_proj_weight", in_proj);
    if (status == FL_OK && bias)
        status = fl_module_add_parameter(m, "in_proj_bias", fl_v_new(fl_zeros(FL_F32, FL_SHAPE(3 * embed_dim)), true));
    if (status == FL_OK)
        status = fl_module_add_child(m, "out_proj", fl_nn_linear(embed_dim, embed_dim, bias));
    if (status == FL_OK && bias)
        status = fl_v_set_value(fl_module_parameter(fl_module_child(m, "out_proj"), "bias"),
                                fl_zeros(FL_F32, FL_SHAPE(embed_dim)));
    fl_scope_end(scope);
    if (status != FL_OK) {
        fl_module_release(m);
        return NULL;
    }
    return m;
}
