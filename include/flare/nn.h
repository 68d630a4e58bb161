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
 * own, destroy), fl_module_new, then fl_module_add_parameter / add_buffer / add_child
 * in PyTorch's registration order. Modules are reference counted and not owned by
 * tensor scopes; fl_module_add_child and the containers take over the reference of
 * the child they are given, so a model builds as one expression:
 *
 *     fl_module *model = fl_nn_sequential(FL_MODULES(fl_nn_linear(784, 10, true), fl_nn_log_softmax(1)));
 *
 * Functions returning a module return NULL (with the error recorded) on bad arguments,
 * and accept NULL children, propagating them.
 */
#ifndef FLARE_NN_H
#define FLARE_NN_H

#include "flare/autograd.h"
#include "flare/io.h"
#include "flare/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fl_module fl_module;

typedef struct fl_module_type {
    const char *name; /* PyTorch's class name: "Linear", "Conv2d", ... */
    /* The forward pass of one input to one output. Modules of several inputs or
     * outputs (attention, recurrent layers) give their full form as a function of
     * their own and use the common case here. */
    fl_variable *(*forward)(fl_module *m, fl_variable *x);
    /* Frees the type's own state (fl_module_state); NULL if it is a plain free() or none. */
    void (*destroy)(void *state);
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
/* Replaces a buffer's value (running statistics); shape and dtype must match. */
fl_status fl_module_set_buffer(fl_module *m, const char *name, const fl_tensor *value);

fl_variable *fl_module_forward(fl_module *m, fl_variable *x);

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

/* PyTorch's state_dict(): every parameter's value and every buffer, by dotted name,
 * each module's parameters, then its buffers, then its children. */
fl_status fl_module_state_dict(const fl_module *m, fl_tensor_map *out);
/* load_state_dict(): copies values into parameters and buffers by name, converting
 * the dtype if it differs. strict: every name of the module must be in the map and
 * every name of the map in the module; the error lists the first names missing or
 * unexpected. A shape mismatch is always an error. Nothing is changed on error. */
fl_status fl_module_load_state_dict(fl_module *m, const fl_tensor_map *map, bool strict);

/* ---- containers -------------------------------------------------------------------- */

#define FL_MODULES(...) \
    (fl_module *const[]){__VA_ARGS__}, (int)(sizeof((fl_module *[]){__VA_ARGS__}) / sizeof(fl_module *))

/* Applies its children in order; they are named "0", "1", ... The modules are taken
 * over (even when the call fails). */
fl_module *fl_nn_sequential(fl_module *const *modules, int count);
/* Appends one more (taken over). */
fl_status fl_nn_sequential_add(fl_module *sequential, fl_module *module);

/* ---- sequence models: attention, the Transformer encoder, recurrent layers, CTC ------ */

/* softmax(q k^T / sqrt(D) + mask) v over the last two axes: q [..., L, D], k [..., S, D],
 * v [..., S, Dv] (leading axes broadcast), giving [..., L, Dv]. mask (may be NULL)
 * broadcasts to [..., L, S]: a float mask is added to the scores; a bool mask, as in
 * PyTorch's scaled_dot_product_attention, is true where attention is allowed (false
 * gives -inf). The mask is a constant (no gradient). In training, dropout_p of the
 * attention weights are zeroed and the rest scaled by 1 / (1 - dropout_p). */
fl_variable *fl_f_scaled_dot_product_attention(fl_variable *q, fl_variable *k, fl_variable *v, const fl_tensor *mask,
                                               double dropout_p, bool training);

/* PyTorch's nn.MultiheadAttention(embed_dim, num_heads, dropout, bias, batch_first)
 * (kdim = vdim = embed_dim, no bias_kv, no zero_attn): in_proj_weight [3E, E],
 * in_proj_bias [3E], out_proj.weight, out_proj.bias. Its module forward is
 * self-attention of x; the full form takes query [N, L, E], key and value [N, S, E]
 * ([L, N, E] and [S, N, E] without batch_first) and two optional masks, as PyTorch's:
 * key_padding_mask [N, S] (bool: true ignores that key; float: added) and attn_mask
 * [L, S] or [N * num_heads, L, S] (bool: true forbids; float: added). It returns the
 * attention output only (PyTorch's need_weights=False). */
fl_module *fl_nn_multihead_attention(int64_t embed_dim, int64_t num_heads, double dropout, bool bias,
                                     bool batch_first);
fl_variable *fl_nn_multihead_attention_forward(fl_module *m, fl_variable *query, fl_variable *key,
                                               fl_variable *value, const fl_tensor *key_padding_mask,
                                               const fl_tensor *attn_mask);

/* PyTorch's nn.TransformerEncoderLayer (children self_attn, linear1, dropout, linear2,
 * norm1, norm2, dropout1, dropout2; layer-norm eps, bias on every layer). activation:
 * "relu" or "gelu". norm_first: pre-norm (x + attn(norm1(x)), as ViT) instead of
 * post-norm (norm1(x + attn(x))). The module forward is the layer without masks; the
 * full form takes the masks of fl_nn_multihead_attention_forward. */
fl_module *fl_nn_transformer_encoder_layer(int64_t d_model, int64_t nhead, int64_t dim_feedforward, double dropout,
                                           const char *activation, double layer_norm_eps, bool batch_first,
                                           bool norm_first);
fl_variable *fl_nn_transformer_encoder_layer_forward(fl_module *m, fl_variable *x, const fl_tensor *key_padding_mask,
                                                     const fl_tensor *attn_mask);
/* PyTorch's nn.TransformerEncoder: num_layers copies of layer ("layers.0", ...; the
 * layer given is taken over and cloned with its current values) and an optional final
 * norm ("norm", taken over; may be NULL). */
fl_module *fl_nn_transformer_encoder(fl_module *layer, int num_layers, fl_module *norm);
fl_variable *fl_nn_transformer_encoder_forward(fl_module *m, fl_variable *x, const fl_tensor *key_padding_mask,
                                               const fl_tensor *attn_mask);

/* PyTorch's nn.LSTM and nn.GRU (no proj_size): per layer l and direction, weight_ih_l<l>,
 * weight_hh_l<l>, bias_ih_l<l>, bias_hh_l<l> ("_reverse" for the backward direction),
 * PyTorch's gate order (LSTM i, f, g, o; GRU r, z, n with r applied to W_hn h + b_hn)
 * and initialization U(-1/sqrt(H), 1/sqrt(H)). x is [N, T, input_size] with
 * batch_first, else [T, N, input_size]; dropout applies to the outputs of every layer
 * but the last, in training. The module forward returns the output sequence y
 * ([N, T, D * hidden_size], D = 2 if bidirectional); the full forms take the initial
 * states h0 (and c0) [num_layers * D, N, hidden_size] (NULL: zeros) and give y and the
 * final states (any of the out pointers may be NULL). */
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

#ifdef __cplusplus
}
#endif

#endif
