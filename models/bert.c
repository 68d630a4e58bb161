/*
 * The BERT-like encoder of Table 3 with a masked-LM head, trained on random text in
 * memory as the paper does. bench/torch/bert.py is the same model in PyTorch, with
 * the same state_dict names:
 *
 *     tok_embed, pos_embed          Embedding (vocabulary, positions)
 *     embed_norm, embed_dropout     LayerNorm (eps 1e-12), Dropout
 *     encoder.layers.N.*            post-norm GELU TransformerEncoderLayer (BERT's)
 *     mlm.dense, mlm.norm,          the MLM head: Linear, GELU, LayerNorm, and a
 *     mlm.decoder                   decoder Linear untied from tok_embed
 *
 * Initialization is PyTorch's defaults (not BERT's N(0, 0.02)) on both sides. PAPER
 * is RoBERTa-large's shape with the untied decoder: 406.9M parameters (Table 3: 406M).
 */
#include <math.h>

#include "sequence_build.h"

typedef struct bert_config {
    int64_t vocab, d_model, nhead, dim_ff, layers, seq, max_positions;
    double dropout;
} bert_config;

static const bert_config configs[MODEL_SIZES] = {
    [MODEL_TINY] = {.vocab = 96, .d_model = 32, .nhead = 4, .dim_ff = 64, .layers = 2, .seq = 16, .max_positions = 16,
                    .dropout = 0.1},
    [MODEL_CPU] = {.vocab = 30000, .d_model = 512, .nhead = 8, .dim_ff = 2048, .layers = 6, .seq = 128,
                   .max_positions = 512, .dropout = 0.1},
    [MODEL_PAPER] = {.vocab = 50265, .d_model = 1024, .nhead = 16, .dim_ff = 4096, .layers = 24, .seq = 128,
                     .max_positions = 512, .dropout = 0.1},
};

#define LAYER_NORM_EPS 1e-12
/* Token ids 0 (padding) and 1 ([MASK]) are reserved; the random text uses the rest. */
#define MASK_ID 1
#define FIRST_WORD 2
#define MASK_RATE 0.15
#define IGNORE_INDEX -100

/* ---- the masked-LM head ---- */

static fl_variable *mlm_forward(fl_module *m, fl_variable *x)
{
    fl_scope scope = fl_scope_begin();
    fl_variable *h = fl_v_gelu(fl_module_forward(fl_module_child(m, "dense"), x), false);
    h = fl_module_forward(fl_module_child(m, "norm"), h);
    return fl_v_scope_return(scope, fl_module_forward(fl_module_child(m, "decoder"), h));
}

static const fl_module_type mlm_type = {.name = "MaskedLMHead", .forward = mlm_forward};

static fl_module *mlm_head(int64_t d_model, int64_t vocab)
{
    const int64_t features[] = {d_model};
    return with_children(fl_module_new(&mlm_type, NULL),
                         NAMED_CHILDREN({"dense", fl_nn_linear(d_model, d_model, true)},
                                        {"norm", fl_nn_layer_norm(1, features, LAYER_NORM_EPS, true)},
                                        {"decoder", fl_nn_linear(d_model, vocab, true)}));
}

/* ---- the model ---- */

static fl_variable *apply(fl_module *m, const char *child, fl_variable *x)
{
    return fl_module_forward(fl_module_child(m, child), x);
}

/* Token ids [N, S] (i64) to MLM logits [N, S, vocabulary]. */
static fl_variable *bert_forward(fl_module *m, fl_variable *tokens)
{
    const bert_config *c = fl_module_state(m);
    const fl_tensor *ids = fl_v_value(tokens);
    if (fl_null_args("BertLike", 1, ids))
        return NULL;
    if (fl_ndim(ids) != 2 || fl_dim(ids, 1) > c->max_positions) {
        char d[FL_DESC_SIZE];
        return fl_error(FL_ERR_SHAPE, "BertLike", "expects token ids [N, S] with S <= %lld, got %s",
                         (long long)c->max_positions, fl_describe(ids, d));
    }
    fl_scope scope = fl_scope_begin();
    fl_variable *positions = fl_v_new(fl_arange(0, (double)fl_dim(ids, 1), 1, FL_I64), false);
    fl_variable *h = fl_v_add(apply(m, "tok_embed", tokens), apply(m, "pos_embed", positions));
    h = apply(m, "embed_dropout", apply(m, "embed_norm", h));
    return fl_v_scope_return(scope, apply(m, "mlm", apply(m, "encoder", h)));
}

static const fl_module_type bert_type = {.name = "BertLike", .forward = bert_forward};

static fl_module *bert_build(model_size size)
{
    if (!valid_size("bert.build", size))
        return NULL;
    const bert_config *c = &configs[size];
    const int64_t features[] = {c->d_model};
    fl_module *layer = fl_nn_transformer_encoder_layer(c->d_model, c->nhead, c->dim_ff, c->dropout, "gelu",
                                                       LAYER_NORM_EPS, true, false);
    return with_children(module_with_config(&bert_type, c, sizeof *c),
                         NAMED_CHILDREN({"tok_embed", fl_nn_embedding(c->vocab, c->d_model, -1)},
                                        {"pos_embed", fl_nn_embedding(c->max_positions, c->d_model, -1)},
                                        {"embed_norm", fl_nn_layer_norm(1, features, LAYER_NORM_EPS, true)},
                                        {"embed_dropout", fl_nn_dropout(c->dropout)},
                                        {"encoder", fl_nn_transformer_encoder(layer, (int)c->layers, NULL)},
                                        {"mlm", mlm_head(c->d_model, c->vocab)}));
}

/* Random text with BERT's masking: 15% of the positions are chosen for prediction,
 * and of those 80% replaced by [MASK], 10% by a random word, 10% kept. The target is
 * the original word at chosen positions and -100 (ignored) elsewhere. */
static fl_status bert_make_batch(model_size size, int64_t batch, fl_tensor **input, fl_tensor **target)
{
    if (batch_start("bert.make_batch", size, batch, input, target) != FL_OK)
        return FL_ERR_VALUE;
    const bert_config *c = &configs[size];
    fl_scope scope = fl_scope_begin();
    fl_tensor *words = fl_randint(FIRST_WORD, c->vocab, FL_I64, FL_SHAPE(batch, c->seq));
    fl_tensor *chosen = fl_lt(fl_rand(FL_F32, FL_SHAPE(batch, c->seq)), fl_scalar(MASK_RATE, FL_F32));
    fl_tensor *how = fl_rand(FL_F32, FL_SHAPE(batch, c->seq));
    fl_tensor *random_words = fl_randint(FIRST_WORD, c->vocab, FL_I64, FL_SHAPE(batch, c->seq));
    fl_tensor *masked = fl_logical_and(chosen, fl_lt(how, fl_scalar(0.8, FL_F32)));
    fl_tensor *replaced =
        fl_logical_and(chosen, fl_logical_and(fl_ge(how, fl_scalar(0.8, FL_F32)), fl_lt(how, fl_scalar(0.9, FL_F32))));
    fl_tensor *x = fl_where(masked, fl_scalar(MASK_ID, FL_I64), words);
    x = fl_where(replaced, random_words, x);
    fl_tensor *y = fl_where(chosen, words, fl_scalar(IGNORE_INDEX, FL_I64));
    return batch_return(scope, x, y, input, target);
}

/* Multiply-adds of the matrix products, 2 FLOPs each, forward and backward (3x). */
static double bert_flops_per_sample(model_size size)
{
    if (!valid_size("bert.flops_per_sample", size))
        return NAN;
    const bert_config *c = &configs[size];
    double s = (double)c->seq, d = (double)c->d_model;
    double projections = 4 * d * d + 2 * d * (double)c->dim_ff; /* q, k, v, out; the feed-forward */
    double attention = 2 * s * d;                              /* q k^T and weights v, per position */
    double layer = s * (projections + attention);
    double head = s * (d * d + d * (double)c->vocab);
    return 3 * 2 * ((double)c->layers * layer + head);
}

const benchmark_model benchmark_bert = {
    .name = "bert",
    .batch = {[MODEL_TINY] = 4, [MODEL_CPU] = 8, [MODEL_PAPER] = 128},
    .build = bert_build,
    .make_batch = bert_make_batch,
    .loss = token_loss,
    .flops_per_sample = bert_flops_per_sample,
};
