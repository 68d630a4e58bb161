/*
 * Neural-network modules: the Module interface, containers, layers, initializers and
 * losses.
 *
 * A module is a forward function with named parameters (leaf variables that require a
 * gradient), named buffers (tensors saved with the model but not trained, such as
 * BatchNorm's running statistics), and named children. Names follow PyTorch's
 * state_dict, so "0.weight" is the weight of the first module of a Sequential and
 * "layer1.0.bn1.running_mean" a buffer deep in a ResNet; checkpoints move between the
 * two frameworks by name (include/flare/io.h).
 *
 * Writing a module: a fl_module_type (its name, forward and, if it keeps state of its
 * own, destroy; forward_args if it takes more than one input, or masks), fl_module_new,
 * then fl_module_add_parameter / add_buffer / add_child in PyTorch's registration order.
 * Modules are reference counted and not owned by tensor scopes; fl_module_add_child and
 * the containers take over the reference of the child they are given, so a model builds
 * as one expression:
 *
 *     fl_module *model = fl_nn_sequential(FL_MODULES(fl_nn_linear(784, 10, true), fl_nn_log_softmax(1)));
 *
 * Functions returning a module return NULL (with the error recorded) on bad arguments,
 * and accept NULL children, propagating them.
 */
#ifndef FLARE_NN_H
#define FLARE_NN_H

#include "flare/autograd.h"
#include "flare/tensor.h"
#include "flare/tensor_map.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fl_module fl_module;

/*
 * The inputs of a module call beyond one tensor: PyTorch's forward(*args, **kwargs) for
 * modules that take masks, a memory or initial states, in one struct so that
 * containers can pass them along (fl_module_forward_args).
 *
 * inputs: the positional variables, inputs[0] first (x, query or tgt) and the others
 * after it, ending at the first NULL (a variable after a NULL is an error). The named
 * arguments are given when non-NULL (masks) or true (flags), and follow the attention
 * mask convention below (bool true forbids). Their meaning, module by module:
 *
 *   MultiheadAttention       inputs query, key, value (key defaults to query, value
 *                            to key); key_padding_mask, attn_mask, is_causal
 *   TransformerEncoderLayer  inputs src; key_padding_mask (src_key_padding_mask),
 *   TransformerEncoder       attn_mask (mask), is_causal
 *   TransformerDecoderLayer  inputs tgt, memory (required); key_padding_mask, attn_mask,
 *   TransformerDecoder       is_causal (tgt_key_padding_mask, tgt_mask, tgt_is_causal);
 *                            memory_key_padding_mask, memory_mask, memory_is_causal
 *   LSTM                     inputs x, h0, c0 (gives y only: fl_nn_lstm_forward gives
 *                            the final states too)
 *   GRU                      inputs x, h0 (gives y only, as the LSTM)
 *   Sequential               the rule of fl_nn_sequential
 *   every other layer        inputs x alone
 */
#define FL_MODULE_MAX_INPUTS 4

typedef struct fl_module_args {
    fl_variable *inputs[FL_MODULE_MAX_INPUTS];
    const fl_tensor *key_padding_mask, *attn_mask;
    const fl_tensor *memory_key_padding_mask, *memory_mask;
    bool is_causal, memory_is_causal;
} fl_module_args;

/* The named arguments, as bits of fl_module_type's accepts. */
enum {
    FL_ARG_KEY_PADDING_MASK = 1u << 0,
    FL_ARG_ATTN_MASK = 1u << 1,
    FL_ARG_IS_CAUSAL = 1u << 2,
    FL_ARG_MEMORY_KEY_PADDING_MASK = 1u << 3,
    FL_ARG_MEMORY_MASK = 1u << 4,
    FL_ARG_MEMORY_IS_CAUSAL = 1u << 5,
};

typedef struct fl_module_type {
    const char *name; /* PyTorch's class name: "Linear", "Conv2d", ... */
    /* The forward pass of one input to one output. Modules of several inputs use the
     * common case here and take the others through forward_args (below); those of
     * several outputs (the recurrent layers' final states) give their full form as a
     * function of their own. */
    fl_variable *(*forward)(fl_module *m, fl_variable *x);
    /* Frees the type's own state (fl_module_state); NULL if it is a plain free() or none. */
    void (*destroy)(void *state);
    /* Optional, for a module of several inputs or of masks and flags: the forward of
     * fl_module_args, one output. It is called only with at most max_inputs inputs
     * and the named arguments whose FL_ARG_* bits are in accepts (fl_module_forward_args
     * refuses the others), so it need not check for arguments it does not take. */
    fl_variable *(*forward_args)(fl_module *m, const fl_module_args *args);
    int max_inputs;   /* positional inputs forward_args takes (at least 1) */
    unsigned accepts; /* FL_ARG_* bits of the named arguments forward_args takes */
    /* Optional, for containers that have forward_args: what a module of this type
     * takes, when it depends on its children (the Sequential's is what any child
     * takes); NULL: max_inputs and accepts. */
    unsigned (*accepted)(const fl_module *m, int *max_inputs);
} fl_module_type;

/* ---- the Module interface ---------------------------------------------------------- */

/* state (may be NULL) is owned by the module from now on. */
fl_module *fl_module_new(const fl_module_type *type, void *state);
fl_module *fl_module_retain(fl_module *m);
void fl_module_release(fl_module *m);

const fl_module_type *fl_module_type_of(const fl_module *m);
void *fl_module_state(const fl_module *m);

/* Registers a parameter (retained) / a buffer (retained) / a child (taken over). Names
 * are unique within a module and contain no '.'. */
fl_status fl_module_add_parameter(fl_module *m, const char *name, fl_variable *parameter);
fl_status fl_module_add_buffer(fl_module *m, const char *name, const fl_tensor *buffer);
fl_status fl_module_add_child(fl_module *m, const char *name, fl_module *child);

/* Direct members, by name; NULL (without an error) if there is none. Borrowed. */
fl_variable *fl_module_parameter(const fl_module *m, const char *name);
fl_tensor *fl_module_buffer(const fl_module *m, const char *name);
fl_module *fl_module_child(const fl_module *m, const char *name);
int fl_module_child_count(const fl_module *m);
fl_module *fl_module_child_at(const fl_module *m, int i, const char **name);
/* Replaces a buffer's value (running statistics); shape, dtype and backend must match. */
fl_status fl_module_set_buffer(fl_module *m, const char *name, const fl_tensor *value);

fl_variable *fl_module_forward(fl_module *m, fl_variable *x);
/* The forward of several inputs, masks and flags (fl_module_args): the type's
 * forward_args, or its forward when it has none and args holds one input and nothing
 * else. An input or a named argument the module does not take is an error naming the
 * module's class and what was passed, never silently dropped. */
fl_variable *fl_module_forward_args(fl_module *m, const fl_module_args *args);
/* What m takes: the FL_ARG_* bits of its named arguments, and (max_inputs, may be
 * NULL) how many positional inputs. A module without forward_args takes 1 and none. */
unsigned fl_module_accepted(const fl_module *m, int *max_inputs);

/* Training mode (the default) or evaluation mode, for the module and all below it. */
void fl_module_train(fl_module *m, bool training);
bool fl_module_is_training(const fl_module *m);

/* Every parameter below m, depth first in registration order, with its dotted name:
 * PyTorch's named_parameters(). The list holds references; free it with
 * fl_parameters_free. */
typedef struct fl_parameters {
    size_t count;
    fl_variable **items;
    char **names;
} fl_parameters;

fl_parameters *fl_module_parameters(const fl_module *m);
void fl_parameters_free(fl_parameters *p);
/* The number of scalars in all parameters (what PyTorch's
 * sum(p.numel() for p in model.parameters()) gives). */
int64_t fl_module_parameter_count(const fl_module *m);
/* Drops the accumulated gradient of every parameter. */
void fl_module_zero_grad(fl_module *m);

/* PyTorch's module.to(device): moves every parameter (its value and gradient, in place,
 * as fl_v_to_backend does, so an optimizer over them sees them moved) and every buffer
 * below m to the backend named backend. An optimizer's own state moves with
 * fl_optimizer_to_backend; with both moved, training goes on on the new backend. On
 * error the members moved so far are moved back. */
fl_status fl_module_to_backend(fl_module *m, const char *backend);

/* PyTorch's state_dict(): every parameter's value and every buffer, by dotted name,
 * each module's parameters, then its buffers, then its children. */
fl_status fl_module_state_dict(const fl_module *m, fl_tensor_map *out);
/* load_state_dict(): sets parameters' and buffers' values by name to the map's
 * tensors, converted to the member's dtype and moved to its backend where they differ.
 * Where they agree the member takes the map's tensor itself (values never change, so
 * no copy is needed; a map of views into larger tensors keeps those alive as long as
 * the module holds the views). strict: every name of the module must be in the map and
 * every name of the map in the module; the error counts the names missing and the
 * names unexpected, and quotes the first 10 of each. A shape mismatch is always an error. Nothing is changed on error. */
fl_status fl_module_load_state_dict(fl_module *m, const fl_tensor_map *map, bool strict);

/* ---- containers -------------------------------------------------------------------- */

#define FL_MODULES(...) \
    (fl_module *const[]){__VA_ARGS__}, (int)(sizeof((fl_module *[]){__VA_ARGS__}) / sizeof(fl_module *))

/* Applies its children in order; they are named "0", "1", ... The modules are taken
 * over (even when the call fails).
 *
 * Given fl_module_args (fl_module_forward_args), the first input is threaded through:
 * the first child gets inputs[0], each next child the previous one's output. Everything
 * else is broadcast, the same to every child that takes it (fl_module_accepted): the
 * other inputs (inputs[i] to each child taking more than i inputs, so a stack of
 * decoder layers shares one memory), the masks and the flags (so a stack of encoder
 * layers shares one padding mask). A child that does not take an argument is called
 * without it; an argument that no child takes is an error, not dropped. */
fl_module *fl_nn_sequential(fl_module *const *modules, int count);
/* Appends one more (taken over). */
fl_status fl_nn_sequential_add(fl_module *sequential, fl_module *module);
/* PyTorch's ModuleList: children named "0", "1", ... (taken over, even when the call
 * fails) that the caller iterates with fl_module_child_count / fl_module_child_at and
 * calls with forward functions of its own. It has no forward of its own: calling one
 * is an error. fl_nn_module_list(NULL, 0) is an empty one. */
fl_module *fl_nn_module_list(fl_module *const *modules, int count);
/* Appends one more (taken over). */
fl_status fl_nn_module_list_add(fl_module *list, fl_module *module);

/* ---- layers ------------------------------------------------------------------------ */
/* Each mirrors the PyTorch class in its name, with the same parameter and buffer names,
 * shapes and default initialization (docs/NN.md), so a PyTorch state_dict loads into it.
 * A forward given an input of the wrong shape fails with an error naming the class,
 * what it expects and what it got. */

/* Linear: y = x W^T + b for x [*, in]; weight [out, in], bias [out]. */
fl_module *fl_nn_linear(int64_t in_features, int64_t out_features, bool bias);
/* Conv1d / Conv2d: x [N, C, L] / [N, C, H, W]; weight [out, in / groups, (kh,) kw],
 * bias [out]. params (NULL: stride 1, no padding) as for fl_conv1d / fl_conv2d; the
 * 1-D form uses index 1 of its pairs. */
fl_module *fl_nn_conv1d(int64_t in_channels, int64_t out_channels, int kernel, const fl_conv_params *params,
                        bool bias);
fl_module *fl_nn_conv2d(int64_t in_channels, int64_t out_channels, int kernel_h, int kernel_w,
                        const fl_conv_params *params, bool bias);
/* MaxPool2d / AvgPool2d with a square kernel (stride 0: the kernel), and the general
 * form of fl_pool2d's parameters (class name "MaxPool2d" or "AvgPool2d"). */
fl_module *fl_nn_max_pool2d(int kernel, int stride, int padding);
fl_module *fl_nn_avg_pool2d(int kernel, int stride, int padding);
fl_module *fl_nn_pool2d(const fl_pool_params *params);
/* AdaptiveAvgPool2d: [N, C, H, W] to [N, C, oh, ow], window i of an axis of length n
 * covering [floor(i n / o), ceil((i + 1) n / o)) as in PyTorch. */
fl_module *fl_nn_adaptive_avg_pool2d(int64_t out_h, int64_t out_w);

/* BatchNorm1d ([N, C] or [N, C, L]) and BatchNorm2d ([N, C, H, W]). Parameters weight,
 * bias (affine); buffers running_mean, running_var, num_batches_tracked (i64)
 * (track_running_stats). Training normalizes with the batch's statistics and updates
 * the running ones (running = (1 - momentum) running + momentum batch, with the
 * unbiased batch variance); evaluation uses the running ones if tracked. A negative
 * momentum is PyTorch's momentum=None: a cumulative average. PyTorch: eps 1e-5,
 * momentum 0.1. */
fl_module *fl_nn_batch_norm1d(int64_t features, double eps, double momentum, bool affine, bool track_running_stats);
fl_module *fl_nn_batch_norm2d(int64_t features, double eps, double momentum, bool affine, bool track_running_stats);
/* LayerNorm over the last ndim axes, of the given shape; weight and bias of that
 * shape if elementwise_affine. PyTorch: eps 1e-5. */
fl_module *fl_nn_layer_norm(int ndim, const int64_t *normalized_shape, double eps, bool elementwise_affine);
/* Dropout: zeroes each element with probability p while training and scales the rest
 * by 1 / (1 - p); the identity in evaluation. */
fl_module *fl_nn_dropout(double p);
/* Embedding: indices (i64 or i32) of any shape to [*, dim]; weight [num, dim].
 * padding_idx: the row that is zero at start and gets no gradient; -1 for none
 * (PyTorch's None; PyTorch's other negative values, counting from the end, are
 * refused). */
fl_module *fl_nn_embedding(int64_t num_embeddings, int64_t embedding_dim, int64_t padding_idx);
/* View (Flashlight's; PyTorch has Unflatten/Flatten): reshapes to shape, where one
 * entry may be -1 (inferred) and 0 keeps the input's size on that axis. */
fl_module *fl_nn_view(int ndim, const int64_t *shape);
/* Padding (PyTorch's ConstantPadNd): before[i] and after[i] values of value around
 * the i-th of the last count axes. */
fl_module *fl_nn_padding(int count, const int64_t *before, const int64_t *after, double value);
/* Activations, as the PyTorch modules of the same names. */
fl_module *fl_nn_relu(void);
fl_module *fl_nn_gelu(bool approximate); /* false: exact erf form ("none"); true: "tanh" */
fl_module *fl_nn_tanh(void);
fl_module *fl_nn_sigmoid(void);
fl_module *fl_nn_log_softmax(int axis);

/* torch.nn.utils.weight_norm(module, name, dim): the parameter name of module becomes
 * name_g * name_v / ||name_v||, the norm taken over every axis but dim (-1: over all,
 * PyTorch's dim=None), with name_g (the norms, the shape of name with 1 on the other
 * axes) and name_v (name's value) the parameters, registered after the module's
 * others, as PyTorch does. module (taken over) must have parameters only (no buffers
 * or children): Linear, Conv1d, Conv2d, Embedding. The result reports the module's
 * class name. */
fl_module *fl_nn_weight_norm(fl_module *module, const char *name, int dim);

/* ---- functional forms -------------------------------------------------------------- */
/* Differentiable functions with gradients of their own (one node each), for layers
 * that compose them (attention, transformers). Optional variables may be NULL. */

/* x [*, in] @ weight[out, in]^T + bias[out], without copying weight transposed. */
fl_variable *fl_f_linear(fl_variable *x, fl_variable *weight, fl_variable *bias);
/* LayerNorm over the last ndim axes of x; weight and bias have those axes' shape. */
fl_variable *fl_f_layer_norm(fl_variable *x, fl_variable *weight, fl_variable *bias, int ndim, double eps);
/* BatchNorm of x [N, C, *] per channel. training: with the batch's statistics, and
 * (where not NULL) *batch_mean and *batch_var receive them (C values, the variance
 * unbiased, for running statistics; the caller owns them); otherwise with
 * running_mean and running_var. */
fl_variable *fl_f_batch_norm(fl_variable *x, const fl_tensor *running_mean, const fl_tensor *running_var,
                             fl_variable *weight, fl_variable *bias, bool training, double eps,
                             fl_tensor **batch_mean, fl_tensor **batch_var);
/* Dropout with a mask from the counter-based generator (fl_rand); x itself (a new
 * reference) when not training or p is 0. */
fl_variable *fl_f_dropout(fl_variable *x, double p, bool training);

/* ---- initializers ------------------------------------------------------------------ */
/* torch.nn.init's, replacing the value of a parameter (a leaf variable) with a fresh
 * tensor of its shape and dtype from the generator of fl_manual_seed. Fans as
 * PyTorch computes them: fan_in = shape[1] * receptive field, fan_out = shape[0] *
 * receptive field (parameters of two or more axes). */

typedef enum fl_fan_mode { FL_FAN_IN, FL_FAN_OUT } fl_fan_mode;

fl_status fl_init_uniform(fl_variable *p, double low, double high);
fl_status fl_init_normal(fl_variable *p, double mean, double std);
fl_status fl_init_constant(fl_variable *p, double value);
fl_status fl_init_zeros(fl_variable *p);
fl_status fl_init_ones(fl_variable *p);
/* Kaiming (He) initialization for the leaky_relu of slope a (a = 0: ReLU):
 * gain = sqrt(2 / (1 + a^2)), bound = gain * sqrt(3 / fan), std = gain / sqrt(fan). */
fl_status fl_init_kaiming_uniform(fl_variable *p, double a, fl_fan_mode mode);
fl_status fl_init_kaiming_normal(fl_variable *p, double a, fl_fan_mode mode);
/* Xavier (Glorot): bound = gain * sqrt(6 / (fan_in + fan_out)), std = gain * sqrt(2 / (fan_in + fan_out)). */
fl_status fl_init_xavier_uniform(fl_variable *p, double gain);
fl_status fl_init_xavier_normal(fl_variable *p, double gain);
/* The fans of a shape, as above. */
fl_status fl_init_fans(const fl_tensor *t, int64_t *fan_in, int64_t *fan_out);
/* Turns the initializers above off (false) or on again (true, the default) for the
 * calling thread, and returns the previous setting. Off, each returns FL_OK and leaves
 * the parameter as it is, so that a model built meanwhile has zeros for parameters
 * (its layers' constructors initialize through these functions) and consumes nothing
 * of the generator: for a model whose every parameter a checkpoint is about to
 * replace, as transformers' no_init_weights does. hf_load_gpt2 and hf_load_bert build
 * so. Arguments are still checked (FL_ERR_NULL). */
bool fl_nn_set_initialization(bool on);

/* ---- losses ------------------------------------------------------------------------ */
/* Functions of a prediction and a target, reduced to a scalar (mean or sum) or not
 * (none: one loss per element, or per sample for the class losses). */

typedef enum fl_reduction { FL_REDUCTION_MEAN, FL_REDUCTION_SUM, FL_REDUCTION_NONE } fl_reduction;

typedef struct fl_class_loss_options {
    fl_reduction reduction;
    int64_t ignore_index;   /* targets of this class count for nothing (PyTorch: -100) */
    double label_smoothing; /* cross-entropy only: the target is (1 - s) one-hot + s / C */
} fl_class_loss_options;

/* PyTorch's defaults; a NULL options pointer means the same. */
#define FL_CLASS_LOSS_DEFAULTS ((fl_class_loss_options){.reduction = FL_REDUCTION_MEAN, .ignore_index = -100})

/* CrossEntropyLoss of logits [N, C] or [N, C, d...] (or [C]) and class indices
 * of any integer dtype (u8, i32, i64) [N] or [N, d...] (or []): log_softmax over
 * axis 1 and the target's entry, one node. The mean is over the targets not
 * ignored; with every target ignored it is nan (0 / 0, as PyTorch's) and the
 * gradient is zero, as PyTorch's. Class weights and probability targets are not
 * supported. */
fl_variable *fl_nn_cross_entropy(fl_variable *logits, const fl_tensor *targets, const fl_class_loss_options *options);
/* NLLLoss: the same for log-probabilities (label_smoothing must be 0). */
fl_variable *fl_nn_nll_loss(fl_variable *log_probs, const fl_tensor *targets, const fl_class_loss_options *options);
/* MSELoss, L1Loss: of two variables of the same shape, both differentiated. */
fl_variable *fl_nn_mse_loss(fl_variable *input, fl_variable *target, fl_reduction reduction);
fl_variable *fl_nn_l1_loss(fl_variable *input, fl_variable *target, fl_reduction reduction);
/* BCELoss of probabilities (each log clamped at -100, as PyTorch does) and
 * BCEWithLogitsLoss of logits, computed stably as max(x, 0) - x y + log1p(exp(-|x|)).
 * No weight or pos_weight. */
fl_variable *fl_nn_bce_loss(fl_variable *probs, fl_variable *target, fl_reduction reduction);
fl_variable *fl_nn_bce_with_logits_loss(fl_variable *logits, fl_variable *target, fl_reduction reduction);

/* ---- sequence models: attention, the Transformer, positions, recurrent layers, CTC -- */

/*
 * ATTENTION MASKS: ONE CONVENTION FOR EVERY FUNCTION BELOW (scaled dot-product attention,
 * MultiheadAttention's key_padding_mask and attn_mask, the Transformer layers and stacks):
 *
 *   a bool mask is TRUE WHERE ATTENTION IS FORBIDDEN ("masked out": that key is ignored
 *   by that query), and false where it is allowed;
 *   a float mask is added to the scores (0 allows, -inf forbids);
 *   a query whose every key is forbidden gets zero attention weights: a zero attention
 *   output and finite gradients, never nan.
 *
 * This is PyTorch's convention for nn.MultiheadAttention and nn.Transformer*. PyTorch's
 * torch.nn.functional.scaled_dot_product_attention alone uses the opposite (true =
 * allowed): a bool mask taken from code written for it must be inverted
 * (fl_logical_not) before it is given to fl_f_scaled_dot_product_attention.
 */

/* softmax(q k^T / sqrt(D) + mask) v over the last two axes: q [..., L, D], k [..., S, D],
 * v [..., S, Dv] (leading axes broadcast), giving [..., L, Dv]. mask (may be NULL)
 * broadcasts to [..., L, S] and follows the convention above (bool: true forbids; float:
 * added). The mask is a constant (no gradient). A query whose every key is masked gets
 * zero weights, so a zero output and finite gradients (where a plain softmax would give
 * nan). is_causal also forbids every key after the query (key j > query i, the
 * [L, S] lower triangle allowed, top-left aligned as PyTorch's is_causal); unlike
 * PyTorch, it may be combined with a mask (a key is forbidden if either forbids it).
 * In training, dropout_p of the attention weights are zeroed and the rest scaled by
 * 1 / (1 - dropout_p). */
fl_variable *fl_f_scaled_dot_product_attention(fl_variable *q, fl_variable *k, fl_variable *v, const fl_tensor *mask,
                                               double dropout_p, bool is_causal, bool training);

/* PyTorch's nn.MultiheadAttention(embed_dim, num_heads, dropout, bias, batch_first)
 * (kdim = vdim = embed_dim, no bias_kv, no zero_attn): in_proj_weight [3E, E],
 * in_proj_bias [3E], out_proj.weight, out_proj.bias. Its module forward is
 * self-attention of x; the full form takes query [N, L, E], key and value [N, S, E]
 * ([L, N, E] and [S, N, E] without batch_first) and two optional masks, as PyTorch's:
 * key_padding_mask [N, S] (bool: true ignores that key; float: added) and attn_mask
 * [L, S] or [N * num_heads, L, S] (bool: true forbids; float: added), the two added. It returns the
 * attention output only (PyTorch's need_weights=False). Both masks follow the
 * convention above (bool true forbids). A fully padded sample gets
 * out_proj's bias as its output and finite gradients, as with need_weights=False
 * (PyTorch's need_weights=True path gives nan there). is_causal forbids each query the
 * keys after it, as fl_f_scaled_dot_product_attention's (PyTorch's is_causal is only a
 * hint about attn_mask; here it is the mask, alone or added to the others).
 * fl_module_forward_args gives the full form too (query, key, value as inputs 0..2). */
fl_module *fl_nn_multihead_attention(int64_t embed_dim, int64_t num_heads, double dropout, bool bias,
                                     bool batch_first);
fl_variable *fl_nn_multihead_attention_forward(fl_module *m, fl_variable *query, fl_variable *key,
                                               fl_variable *value, const fl_tensor *key_padding_mask,
                                               const fl_tensor *attn_mask, bool is_causal);

/* PyTorch's nn.TransformerEncoderLayer (children self_attn, linear1, dropout, linear2,
 * norm1, norm2, dropout1, dropout2; layer-norm eps, bias on every layer). activation:
 * "relu", "gelu" (exact) or "gelu_tanh" (the tanh approximation, GPT-2's).
 * norm_first: pre-norm (x + attn(norm1(x)), as ViT) instead of post-norm
 * (norm1(x + attn(x))). The module forward is the layer without masks; the full form
 * takes the masks of fl_nn_multihead_attention_forward (bool true forbids, as
 * everywhere) and is_causal, applied to the self-attention; is_causal makes it a
 * decoder-only (GPT-style) block. fl_module_forward_args takes the same masks, so a
 * Sequential of encoder layers passes one padding mask to each. */
fl_module *fl_nn_transformer_encoder_layer(int64_t d_model, int64_t nhead, int64_t dim_feedforward, double dropout,
                                           const char *activation, double layer_norm_eps, bool batch_first,
                                           bool norm_first);
fl_variable *fl_nn_transformer_encoder_layer_forward(fl_module *m, fl_variable *x, const fl_tensor *key_padding_mask,
                                                     const fl_tensor *attn_mask, bool is_causal);
/* PyTorch's nn.TransformerEncoder: num_layers copies of layer ("layers.0", ...; the
 * layer given is taken over and cloned with its current values, kept in a ModuleList)
 * and an optional final norm ("norm", taken over; may be NULL). */
fl_module *fl_nn_transformer_encoder(fl_module *layer, int num_layers, fl_module *norm);
fl_variable *fl_nn_transformer_encoder_forward(fl_module *m, fl_variable *x, const fl_tensor *key_padding_mask,
                                               const fl_tensor *attn_mask, bool is_causal);

/* The masks of a Transformer decoder (all optional; a NULL pointer to the struct means
 * none), PyTorch's names and the convention above (bool true forbids): tgt_mask and
 * tgt_key_padding_mask for the self-attention of tgt, memory_mask and
 * memory_key_padding_mask for the attention to the memory; *_is_causal as
 * fl_nn_multihead_attention_forward's (tgt_is_causal: each position sees itself and the
 * earlier ones only, as a language model's decoder). */
typedef struct fl_transformer_decoder_masks {
    const fl_tensor *tgt_mask, *memory_mask, *tgt_key_padding_mask, *memory_key_padding_mask;
    bool tgt_is_causal, memory_is_causal;
} fl_transformer_decoder_masks;

/* PyTorch's nn.TransformerDecoderLayer (children self_attn, multihead_attn, linear1,
 * dropout, linear2, norm1..3, dropout1..3; the arguments of the encoder layer):
 * self-attention of tgt, attention to the memory, the feed-forward block; post-norm
 * (norm1(x + sa(x)), norm2(x + ca(x, memory)), norm3(x + ff(x))) or, with norm_first,
 * pre-norm (x + sa(norm1(x)), ...). tgt is [N, T, E] and memory [N, S, E] with
 * batch_first, else [T, N, E] and [S, N, E]. Its module forward is refused (it needs a
 * memory); the forward functions take the memory and the masks, and so does
 * fl_module_forward_args (memory as inputs[1], the tgt masks as key_padding_mask,
 * attn_mask and is_causal, the memory's as memory_*). */
fl_module *fl_nn_transformer_decoder_layer(int64_t d_model, int64_t nhead, int64_t dim_feedforward, double dropout,
                                           const char *activation, double layer_norm_eps, bool batch_first,
                                           bool norm_first);
fl_variable *fl_nn_transformer_decoder_layer_forward(fl_module *m, fl_variable *tgt, fl_variable *memory,
                                                     const fl_transformer_decoder_masks *masks);
/* PyTorch's nn.TransformerDecoder: num_layers clones of layer ("layers.0", ...; taken
 * over) and an optional final norm ("norm", taken over; may be NULL); every layer
 * attends to the same memory with the same masks. */
fl_module *fl_nn_transformer_decoder(fl_module *layer, int num_layers, fl_module *norm);
fl_variable *fl_nn_transformer_decoder_forward(fl_module *m, fl_variable *tgt, fl_variable *memory,
                                               const fl_transformer_decoder_masks *masks);

/* Positional embeddings (no PyTorch module; as in "Attention is all you need" and
 * GPT/BERT): the module forward of x [N, L, E] with batch_first, else [L, N, E], with
 * L <= max_len and E = embedding_dim, is x + P[:L], P [max_len, E] broadcast over the
 * batch. Sinusoidal: P[pos, 2i] = sin(pos / 10000^(2i / E)), P[pos, 2i + 1] =
 * cos(pos / 10000^(2i / E)), fixed (no parameters, nothing in the state_dict),
 * computed in f64 and cast to x's floating dtype. Learned: P is the parameter "weight"
 * [max_len, E], N(0, 1) as nn.Embedding(max_len, E)'s, and x must share its dtype.
 * Scaling x (by sqrt(E), as the paper's embeddings) is the caller's. */
fl_module *fl_nn_sinusoidal_positional_embedding(int64_t max_len, int64_t embedding_dim, bool batch_first);
fl_module *fl_nn_learned_positional_embedding(int64_t max_len, int64_t embedding_dim, bool batch_first);

/* Rotary positional embedding (RoPE), as GPT-NeoX and LLaMA apply it to the queries and
 * keys of attention, in Hugging Face's rotate-half convention (apply_rotary_pos_emb of
 * transformers' LLaMA): x [..., L, D] (q or k as [N, heads, L, head_dim], D even), the
 * position of row l being offset + l (offset: the number of positions already in a KV
 * cache), gives
 *     x * cos(angle) + rotate_half(x) * sin(angle),
 *     rotate_half(x) = concat(-x[..., D/2:], x[..., :D/2]),
 *     angle[l, j] = (offset + l) * base^(-2 (j mod D/2) / D)
 * (base: 10000 in LLaMA and GPT-NeoX). The angles are computed in f64 and their cos and
 * sin cast to x's dtype (Hugging Face computes the angles in f32, which differs by f32
 * rounding at large positions). Differentiable in x. GPT-NeoX's partial rotation
 * (rotary_pct < 1) is the caller's: rotate a split of the first dims and concatenate. */
fl_variable *fl_f_rotary_embedding(fl_variable *x, int64_t offset, double base);

/* PyTorch's nn.LSTM and nn.GRU (no proj_size): per layer l and direction, weight_ih_l<l>,
 * weight_hh_l<l>, bias_ih_l<l>, bias_hh_l<l> ("_reverse" for the backward direction),
 * PyTorch's gate order (LSTM i, f, g, o; GRU r, z, n with r applied to W_hn h + b_hn)
 * and initialization U(-1/sqrt(H), 1/sqrt(H)). x is [N, T, input_size] with
 * batch_first, else [T, N, input_size]; dropout applies to the outputs of every layer
 * but the last, in training. The module forward returns the output sequence y
 * ([N, T, D * hidden_size], D = 2 if bidirectional); the full forms take the initial
 * states h0 (and c0) [num_layers * D, N, hidden_size] (NULL: zeros) and give y and the
 * final states (any of the out pointers may be NULL). fl_module_forward_args takes x,
 * h0, c0 (LSTM) or x, h0 (GRU) as its inputs and gives y. */
fl_module *fl_nn_lstm(int64_t input_size, int64_t hidden_size, int num_layers, bool bias, bool batch_first,
                      double dropout, bool bidirectional);
fl_status fl_nn_lstm_forward(fl_module *m, fl_variable *x, fl_variable *h0, fl_variable *c0, fl_variable **y,
                             fl_variable **hn, fl_variable **cn);
fl_module *fl_nn_gru(int64_t input_size, int64_t hidden_size, int num_layers, bool bias, bool batch_first,
                     double dropout, bool bidirectional);
fl_status fl_nn_gru_forward(fl_module *m, fl_variable *x, fl_variable *h0, fl_variable **y, fl_variable **hn);

/* torch.nn.functional.ctc_loss: log_probs [T, N, C] (log-softmax outputs), targets
 * [N, S] (padded) or [sum(target_lengths)] (concatenated), input_lengths and
 * target_lengths [N] (integers). FL_REDUCTION_NONE gives [N], SUM the total, MEAN the
 * mean over the batch of each loss divided by its target length. zero_infinity
 * replaces infinite losses (impossible alignments) and their gradients by zeros. The
 * gradient is PyTorch's: exp(log_probs) - posterior, exact for log-softmax inputs. */
fl_variable *fl_nn_ctc_loss(fl_variable *log_probs, const fl_tensor *targets, const fl_tensor *input_lengths,
                            const fl_tensor *target_lengths, int64_t blank, fl_reduction reduction,
                            bool zero_infinity);

/* ---- data-parallel training -------------------------------------------------------- */

/*
 * PyTorch's DistributedDataParallel on Flare's distributed interface
 * (include/flare/distributed.h, after fl_distributed_init): every rank trains a replica
 * of the model on its own part of each batch, and gradients are averaged so that the
 * replicas take the same steps.
 *
 * fl_data_parallel_new broadcasts the model's parameters and buffers from rank 0, then
 * hooks every parameter: as soon as backward has finished a parameter's gradient, it
 * joins a bucket (bucket_bytes; 0 means FL_DIST_DEFAULT_BUCKET_BYTES) whose all-reduce
 * starts once the bucket is full, while backward goes on. fl_data_parallel_sync, after
 * fl_v_backward and before the optimizer's step, waits for the buckets and replaces
 * each gradient by its mean over the ranks. In a single process both do nothing.
 */
typedef struct fl_data_parallel fl_data_parallel;

fl_data_parallel *fl_data_parallel_new(fl_module *model, size_t bucket_bytes);
fl_status fl_data_parallel_sync(fl_data_parallel *dp);
int fl_data_parallel_bucket_count(const fl_data_parallel *dp);
void fl_data_parallel_free(fl_data_parallel *dp);

#ifdef __cplusplus
}
#endif

#endif
