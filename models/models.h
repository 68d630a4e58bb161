/*
 * The benchmark models of the Flashlight paper (Table 3), built from Flare's own
 * modules, shared by apps/benchmark and the tests. Each model has a configuration
 * that trains in reasonable time on a CPU and the paper's configuration for large
 * machines.
 *
 * A benchmark model is a table: how to build it, how to make a batch of random data
 * in memory (as the paper does), and its loss on a batch, so the harness can time
 * data, forward, backward and the optimizer step of any of them the same way.
 */
#ifndef FLARE_MODELS_H
#define FLARE_MODELS_H

#include "flare/autograd.h"
#include "flare/nn.h"
#include "flare/tensor.h"

/* TINY: the same architecture made small (fewer layers, channels, classes, a smaller
 * input) for tests and short training runs; CPU: sized for a CPU of a few cores (the
 * README's benchmark table); PAPER: Table 3's. */
typedef enum model_size { MODEL_TINY, MODEL_CPU, MODEL_PAPER, MODEL_SIZES } model_size;

typedef struct benchmark_model {
    const char *name;  /* "resnet50", "bert", ... */
    /* The batch size of each configuration. */
    int64_t batch[MODEL_SIZES];
    fl_module *(*build)(model_size size);
    /* A batch of random inputs and targets (owned by the caller's scope). */
    fl_status (*make_batch)(model_size size, int64_t batch, fl_tensor **input, fl_tensor **target);
    /* Forward and loss, a scalar variable. */
    fl_variable *(*loss)(fl_module *model, const fl_tensor *input, const fl_tensor *target);
    /* Floating-point operations of one training step (forward and backward) per sample,
     * counted from the model's layers, for GFLOP/s. */
    double (*flops_per_sample)(model_size size);
} benchmark_model;

/* The CNN of the paper's Listing 8 (models/mnist.c): [N, 1, 28, 28] images to
 * log-probabilities of 10 classes. Its parameter names are those of apps/mnist's
 * checkpoints. */
fl_module *mnist_cnn(void);

/* Every model, NULL-terminated, in the order of the paper's Table 3 (then GPT, MNIST). */
extern const benchmark_model *const benchmark_models[];
const benchmark_model *benchmark_model_find(const char *name);

/* ---- a GPT-style causal language model (models/gpt.c) ---------------------------- */

/* vocab token ids; at most context positions; layers pre-LayerNorm Transformer blocks
 * of embed features in heads heads (embed divisible by heads), a GELU MLP of 4 embed;
 * dropout after the embeddings, in attention and in the MLP (training only).
 * layer_norm_eps: every LayerNorm's (0: 1e-5); gelu_tanh: the MLP's GELU is the tanh
 * approximation (GPT-2's "gelu_new") instead of the exact erf form. */
typedef struct gpt_config {
    int64_t vocab, context, layers, heads, embed;
    double dropout;
    double layer_norm_eps;
    bool gelu_tanh;
} gpt_config;

/* Token embedding ("tok_embed", nn.Embedding) plus a learned position embedding
 * ("pos_embed"), dropout, the blocks ("blocks.layers.N", pre-norm causal GELU
 * TransformerEncoderLayers), a final LayerNorm ("ln_f") and an output head tied to the
 * token embedding: logits = h tok_embed.weight^T, the same parameter (it appears once
 * among the parameters and gets the gradient of both uses). Both embeddings start as
 * N(0, 0.02), as GPT-2's. The module forward takes token ids i64 [N, L] (L <= context,
 * every id in [0, vocab)) to logits [N, L, vocab]; a longer sequence or an id out of
 * the vocabulary is an error (FL_ERR_SHAPE, FL_ERR_VALUE). */
fl_module *gpt_new(const gpt_config *config);

/* Incremental decoding: the keys and values of every block for the positions fed so
 * far, of one model and batch size. gpt_cache_feed runs tokens i64 [N, T] as the next
 * T positions (attending to the cached ones and causally among themselves), appends
 * their keys and values, and returns the logits of the last of them, [N, vocab] (f32,
 * owned by the innermost scope, else the caller's). It runs without recording
 * gradients and with dropout off, whatever the model's mode; positions past the
 * context are an error (FL_ERR_SHAPE). Its logits equal those of the module forward
 * in evaluation mode over the whole sequence fed, at its last position. */
typedef struct gpt_cache gpt_cache;
gpt_cache *gpt_cache_new(fl_module *gpt, int64_t batch);
void gpt_cache_free(gpt_cache *cache);
int64_t gpt_cache_length(const gpt_cache *cache);
fl_tensor *gpt_cache_feed(gpt_cache *cache, const fl_tensor *tokens);

/* How gpt_generate picks each token from the logits: temperature <= 0 is greedy (the
 * first argmax); otherwise it samples from softmax(logits / temperature), restricted to
 * the top_k most likely tokens (top_k > 0; 0 for all) and then to the smallest set of
 * most likely tokens whose probability reaches top_p (nucleus sampling, for 0 < top_p < 1;
 * 0 or 1 and more for all; the most likely token is always kept). A zeroed struct is
 * greedy. Draws come from the
 * library's Philox generator keyed by seed (fl_random_stream), so the same seed gives
 * the same tokens and the global generator (fl_manual_seed) is left as it was. */
typedef struct gpt_sampling {
    double temperature;
    int64_t top_k;
    double top_p;
    uint64_t seed;
} gpt_sampling;

/* The prompt i64 [N, P] (P >= 1) followed by new_tokens generated ones, [N, P +
 * new_tokens], decoded with a KV cache (the prompt fed at once, then one token per
 * step); P + new_tokens - 1 must not exceed the context (FL_ERR_SHAPE). The result
 * belongs to the innermost scope, else to the caller. */
fl_tensor *gpt_generate(fl_module *gpt, const fl_tensor *prompt, int64_t new_tokens, const gpt_sampling *sampling);

/* ---- a CTC acoustic model (models/speech_ctc.c) ----------------------------------- */

/* features log-mel channels in; conv1 of channels and conv2 to d_model, both of an
 * odd kernel, conv2 subsampling time by stride; layers pre-norm GELU Transformer
 * encoder layers (heads heads, dim_ff features, dropout); tokens outputs, the CTC blank
 * among them. */
typedef struct speech_ctc_config {
    int64_t features, channels, d_model, heads, dim_ff, layers, tokens;
    int kernel, stride;
    double dropout;
} speech_ctc_config;

fl_module *speech_ctc_new(const speech_ctc_config *config);

/* The output frames of an input of frames frames: ceil(frames / stride). */
int64_t speech_ctc_output_length(const speech_ctc_config *config, int64_t frames);

/* Log-probabilities [T', N, tokens] (fl_nn_ctc_loss's layout) of features [N, T,
 * features] whose sample i is lengths[i] frames long (the rest padding, which no
 * output frame of the sample attends to); *out_lengths (may be NULL) receives the
 * output lengths i64 [N], ceil(lengths / stride). Both are owned by the innermost
 * scope. */
fl_variable *speech_ctc_forward(fl_module *m, fl_variable *features, const fl_tensor *lengths,
                                fl_tensor **out_lengths);

/* ---- Hugging Face checkpoints (models/hf.c) ---------------------------------------- */

/* Loads a directory written by transformers' GPT2LMHeadModel.save_pretrained (or
 * GPT2Model's): config.json and model.safetensors (f32, f16, bf16 or f64 weights, read as
 * f32; or the shards model.safetensors.index.json lists; a directory with only
 * pytorch_model.bin is an error saying to save safetensors), into a new GPT of gpt_new (*model, in evaluation mode; release it with
 * fl_module_release) and its configuration (*config, may be NULL). GPT-2's Conv1D
 * weights [in, out] are transposed into Flare's [out, in]; c_attn's packed q, k, v
 * become the attention's in_proj; the head is tied to wte as in GPT-2 (a saved
 * lm_head.weight must equal wte.weight). Names may carry the "transformer." prefix or
 * not (the gpt2 repository's file has none, and the causal-mask buffers attn.bias and
 * attn.masked_bias, which are skipped). The configuration must be one Flare's model computes: model_type "gpt2",
 * activation_function "gelu_new" (or "gelu_pytorch_tanh", "gelu"), n_inner null or
 * 4 n_embd, scaled attention without GPT-2's per-layer scaling, upcasting or cross
 * attention, not quantized (no quantization_config); anything else, a missing or extra tensor, or a tensor of the wrong shape
 * is an error (FL_ERR_VALUE, FL_ERR_SHAPE; FL_ERR_IO for a missing file) naming the
 * file and the key. Nothing is returned on error. */
fl_status hf_load_gpt2(const char *dir, fl_module **model, gpt_config *config);

/* The families hf_load_bert reads, each its own checkpoint names. */
typedef enum hf_bert_family { HF_BERT, HF_ROBERTA, HF_DISTILBERT, HF_ALBERT, HF_ELECTRA } hf_bert_family;

/* transformers' BertModel, RobertaModel, DistilBertModel, AlbertModel or ElectraModel
 * (the encoder; a pooler is not loaded): vocab token ids, max_positions positions,
 * type_vocab token types (0: DistilBERT, which has none), embedded in embedding
 * features (hidden but for ALBERT and ELECTRA), projected to hidden where projected
 * (ALBERT's always, ELECTRA's where embedding is not hidden), layers post-norm blocks
 * of hidden features in heads heads with a GELU MLP of intermediate features (GELU's
 * tanh form where gelu_tanh: ALBERT's "gelu_new"). shared_layers (ALBERT): one block's
 * weights, applied by every layer. padding_id is -1 but for RoBERTa, whose positions
 * are padding_id + 1, + 2, ... over the tokens that are not its padding token
 * (pad_token_id) and padding_id at the padding tokens; the others' are 0, 1, .... */
typedef struct hf_bert_config {
    hf_bert_family family;
    int64_t vocab, max_positions, type_vocab, layers, heads, hidden, intermediate, embedding;
    double layer_norm_eps;
    int64_t padding_id;
    bool projected, shared_layers, gelu_tanh;
} hf_bert_config;

/* Loads a directory written by BertModel.save_pretrained (config.json with model_type
 * "bert", hidden_act "gelu", absolute positions, not a decoder, no pruned heads, not
 * quantized; the weights as
 * hf_load_gpt2 reads them, names with or without "bert.", LayerNorm parameters named
 * weight and bias or, as checkpoints converted from the original release have them,
 * gamma and beta; the heads of BertFor* classes beside "bert." ("cls.", "classifier.",
 * "qa_outputs.") are skipped), by RobertaModel's or XLMRobertaModel's (model_type
 * "roberta" or "xlm-roberta", the same conditions, pad_token_id 1 if absent; names with
 * or without "roberta.", the heads "lm_head.", "classifier." and "qa_outputs." skipped)
 * or by DistilBertModel's (model_type "distilbert", activation "gelu"; names with or
 * without "distilbert.", the heads "vocab_*", "pre_classifier.", "classifier." and
 * "qa_outputs." skipped) or by AlbertModel's (model_type "albert", hidden_act "gelu",
 * "gelu_new" or "gelu_pytorch_tanh", one hidden group of one layer, as every published
 * ALBERT has; names with or without "albert.", the heads "predictions.",
 * "sop_classifier.", "classifier." and "qa_outputs." skipped) or ElectraModel's
 * (model_type "electra", BertModel's conditions; names with or without "electra.",
 * the heads "discriminator_predictions.", "generator_predictions.",
 * "generator_lm_head.", "classifier." and "qa_outputs." skipped; CamemBERT's,
 * model_type "camembert", are RoBERTa's) into a new encoder (*model, in evaluation
 * mode) and its configuration (*config, may be NULL). query, key and value are stacked into the
 * attention's in_proj; the pooler's tensors are skipped. Errors as hf_load_gpt2's,
 * naming the file and the key. The module forward takes token ids i64 [N, S] to the
 * last hidden states [N, S, hidden]. */
fl_status hf_load_bert(const char *dir, fl_module **model, hf_bert_config *config);

/* The last hidden states [N, S, hidden] of ids i64 [N, S] (S <= max_positions, for
 * RoBERTa S <= max_positions - padding_id - 1), with
 * token_types i64 [N, S] (NULL: all 0; DistilBERT takes none) and attention_mask i64 [N, S] of 0 and 1 (NULL:
 * all 1; 0 is a padding token no other attends to), as BertModel's (RobertaModel's)
 * last_hidden_state; padding positions get values too, as there. */
fl_variable *hf_bert_forward(fl_module *bert, const fl_tensor *ids, const fl_tensor *token_types,
                             const fl_tensor *attention_mask);

/* The mean of hidden [N, S, H] over the positions attention_mask [N, S] (NULL: all)
 * marks with 1, [N, H]: sentence-transformers' mean pooling. Owned by the innermost
 * scope, else the caller. */
fl_tensor *hf_bert_mean_pool(const fl_tensor *hidden, const fl_tensor *attention_mask);

#endif
