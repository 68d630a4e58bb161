/*
 * Reverse-mode automatic differentiation on a dynamic tape.
 *
 * A variable wraps a tensor. Every differentiable function (fl_v_*) computes its value
 * with the tensor API and, when gradients are wanted, records a node: the gradient
 * function, edges to the nodes (or leaf variables) of its inputs, and only the
 * tensors the gradient function needs. fl_v_backward walks the nodes reachable from a
 * result in reverse topological order, so a node's gradient is complete before its
 * gradient function runs; the engine then releases that gradient, and, unless the
 * graph is retained, the node's saved tensors, as soon as it has run.
 *
 * Gradients accumulate into leaves (variables made with fl_v_new and requires_grad)
 * across calls of fl_v_backward until fl_v_zero_grad. A gradient function may return
 * a gradient of the broadcast shape of an input; the engine sums it down to the
 * input's shape and dtype, so broadcasting needs no care in gradient functions.
 *
 * Ownership follows the tensor API: functions returning a variable return a new
 * reference, owned by the innermost tensor scope if one is open (fl_v_keep takes it
 * out), else by the caller (fl_v_release). Tensors passed in are borrowed (retained
 * when kept). Tensors returned by accessors are borrowed from the variable. NULL
 * variables propagate as NULL tensors do.
 *
 * Writing a differentiable function (the Flashlight paper's Listing 4):
 *
 *     static void cos_grad(fl_grad *g)
 *     {
 *         g->input_grads[0] = fl_mul(g->output_grad, fl_neg(fl_sin(g->saved[0])));
 *     }
 *
 *     fl_variable *my_cos(fl_variable *x)
 *     {
 *         const fl_tensor *v = fl_v_value(x);
 *         return fl_v_record(fl_cos(v), FL_VARS(x), cos_grad, FL_SAVE(v), NULL, 0);
 *     }
 */
#ifndef FLARE_AUTOGRAD_H
#define FLARE_AUTOGRAD_H

#include "flare/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fl_variable fl_variable;

/* ---- variables ------------------------------------------------------------------ */

fl_variable *fl_v_new(const fl_tensor *value, bool requires_grad);
fl_variable *fl_v_retain(fl_variable *v);
void fl_v_release(fl_variable *v);
/* As fl_keep for tensors: the caller's own reference, taken out of the innermost scope. */
fl_variable *fl_v_keep(fl_variable *v);
/* Ends scope, handing result (made inside it) to the enclosing scope: how a function
 * that computes with temporaries returns its result. */
fl_variable *fl_v_scope_return(fl_scope scope, fl_variable *result);

const fl_tensor *fl_v_value(const fl_variable *v);
/* The accumulated gradient of a leaf, or NULL before any backward reached it. */
const fl_tensor *fl_v_grad(const fl_variable *v);
/* True for leaves that accumulate a gradient and for results recorded on the tape. */
bool fl_v_requires_grad(const fl_variable *v);
/* True for variables made with fl_v_new (no recorded node). */
bool fl_v_is_leaf(const fl_variable *v);
/* Drops the accumulated gradient (the next backward starts from nothing). */
void fl_v_zero_grad(fl_variable *v);
/* Replaces a leaf's value (an optimizer step): the tensor is retained, and must have
 * the variable's shape, dtype and backend. */
fl_status fl_v_set_value(fl_variable *v, const fl_tensor *value);
/* Replaces a leaf's gradient (gradient clipping, all-reduce); NULL drops it. */
fl_status fl_v_set_grad(fl_variable *v, const fl_tensor *grad);
/* Moves a leaf to the backend named backend in place: its value and its gradient are
 * copied there, and whatever holds the variable (a module, an optimizer) sees it
 * moved. A leaf already there is left as it is. fl_v_set_value and fl_v_set_grad
 * take tensors on the variable's backend only. */
fl_status fl_v_to_backend(fl_variable *v, const char *backend);
/* A new leaf sharing v's value, cut from the tape. */
fl_variable *fl_v_detach(const fl_variable *v);

/* Called once per backward pass, when the gradient of a leaf is complete (all the
 * nodes that contribute to it have run); data-parallel training starts reducing a
 * gradient here while backward goes on. */
typedef void (*fl_grad_hook)(fl_variable *leaf, void *user);
fl_status fl_v_add_grad_hook(fl_variable *leaf, fl_grad_hook hook, void *user);
/* Removes the hook added with this function and user, if there is one. */
void fl_v_remove_grad_hook(fl_variable *leaf, fl_grad_hook hook, void *user);

/* ---- backward ------------------------------------------------------------------- */

/* Accumulates d(root)/d(leaf) into every leaf that requires a gradient. grad is the
 * gradient of root (NULL means ones, allowed for one-element roots only). Without
 * retain_graph the nodes' saved tensors are released as they are used, and a second
 * backward through them is an error. */
fl_status fl_v_backward(fl_variable *root, const fl_tensor *grad, bool retain_graph);

/* Gradient recording is on by default; off, functions compute values only and record
 * nothing (evaluation, optimizer updates). Per thread. Returns the previous setting. */
bool fl_set_grad_enabled(bool enabled);
bool fl_grad_enabled(void);

/* ---- recording a differentiable function ---------------------------------------- */

/* What a gradient function receives. It sets input_grads[i] (a tensor made in the
 * function: the engine runs it inside a scope) for the inputs whose needs_grad[i] is
 * true, and may leave the others NULL (a zero gradient). A function that needs its
 * output's value saves it, as it saves anything else: a node keeps only what it saves,
 * so intermediate values are freed as soon as nothing else holds them. */
typedef struct fl_grad {
    fl_tensor *output_grad;        /* borrowed from the engine: never release it */
    fl_tensor *const *saved;       /* the tensors the forward saved, in order */
    const void *context;           /* a copy of the forward's context bytes */
    int ninputs;
    const bool *needs_grad;
    fl_tensor **input_grads;
} fl_grad;

typedef void (*fl_grad_fn)(fl_grad *g);

/* A variable of value (borrowed), recorded as computed from inputs by a function whose
 * gradient is grad_fn. saved tensors are retained for grad_fn; context_size bytes at
 * context are copied. If no input requires a gradient, or recording is off, nothing is
 * recorded and the result is a plain variable. A NULL value or input gives NULL. */
fl_variable *fl_v_record(const fl_tensor *value, fl_variable *const *inputs, int ninputs, fl_grad_fn grad_fn,
                         const fl_tensor *const *saved, int nsaved, const void *context, size_t context_size);

#define FL_VARS(...) \
    (fl_variable *const[]){__VA_ARGS__}, (int)(sizeof((fl_variable *[]){__VA_ARGS__}) / sizeof(fl_variable *))
#define FL_SAVE(...) \
    (const fl_tensor *const[]){__VA_ARGS__}, (int)(sizeof((const fl_tensor *[]){__VA_ARGS__}) / sizeof(fl_tensor *))
#define FL_SAVE_NOTHING NULL, 0

/* ---- differentiable functions ---------------------------------------------------- */
/* Each is its tensor-API namesake (include/flare/tensor.h), with a gradient. Those
 * taking a variable of indices or a condition do not differentiate it. */

/* elementwise */
fl_variable *fl_v_add(fl_variable *a, fl_variable *b);
fl_variable *fl_v_sub(fl_variable *a, fl_variable *b);
fl_variable *fl_v_mul(fl_variable *a, fl_variable *b);
fl_variable *fl_v_div(fl_variable *a, fl_variable *b);
fl_variable *fl_v_pow(fl_variable *a, fl_variable *b);
fl_variable *fl_v_minimum(fl_variable *a, fl_variable *b);
fl_variable *fl_v_maximum(fl_variable *a, fl_variable *b);
fl_variable *fl_v_add_scalar(fl_variable *x, double value);
fl_variable *fl_v_mul_scalar(fl_variable *x, double value);
fl_variable *fl_v_pow_scalar(fl_variable *x, double value);
fl_variable *fl_v_neg(fl_variable *x);
fl_variable *fl_v_abs(fl_variable *x);
fl_variable *fl_v_exp(fl_variable *x);
fl_variable *fl_v_log(fl_variable *x);
fl_variable *fl_v_log1p(fl_variable *x);
fl_variable *fl_v_sqrt(fl_variable *x);
fl_variable *fl_v_rsqrt(fl_variable *x);
fl_variable *fl_v_sin(fl_variable *x);
fl_variable *fl_v_cos(fl_variable *x);
fl_variable *fl_v_tanh(fl_variable *x);
fl_variable *fl_v_sigmoid(fl_variable *x);
fl_variable *fl_v_erf(fl_variable *x);
fl_variable *fl_v_square(fl_variable *x);
fl_variable *fl_v_reciprocal(fl_variable *x);
fl_variable *fl_v_clamp(fl_variable *x, double low, double high);
fl_variable *fl_v_where(const fl_tensor *cond, fl_variable *a, fl_variable *b);
fl_variable *fl_v_cast(fl_variable *x, fl_dtype dtype);

/* activations */
fl_variable *fl_v_relu(fl_variable *x);
fl_variable *fl_v_leaky_relu(fl_variable *x, double negative_slope);
/* approximate: false is the exact x * Phi(x) (PyTorch's default), true the tanh form. */
fl_variable *fl_v_gelu(fl_variable *x, bool approximate);
fl_variable *fl_v_softmax(fl_variable *x, int axis);
fl_variable *fl_v_log_softmax(fl_variable *x, int axis);

/* reductions */
fl_variable *fl_v_sum(fl_variable *x, const int *axes, int count, bool keepdims);
fl_variable *fl_v_mean(fl_variable *x, const int *axes, int count, bool keepdims);
fl_variable *fl_v_var(fl_variable *x, const int *axes, int count, int correction, bool keepdims);
/* The gradient goes to the first maximum (minimum) of each reduced slice. */
fl_variable *fl_v_max(fl_variable *x, const int *axes, int count, bool keepdims);
fl_variable *fl_v_min(fl_variable *x, const int *axes, int count, bool keepdims);
fl_variable *fl_v_logsumexp(fl_variable *x, const int *axes, int count, bool keepdims);

/* shape and indexing */
fl_variable *fl_v_reshape(fl_variable *x, int ndim, const int64_t *shape);
fl_variable *fl_v_flatten(fl_variable *x, int start_axis, int end_axis);
fl_variable *fl_v_permute(fl_variable *x, const int *axes);
fl_variable *fl_v_transpose(fl_variable *x, int axis0, int axis1);
fl_variable *fl_v_expand(fl_variable *x, int ndim, const int64_t *shape);
fl_variable *fl_v_squeeze(fl_variable *x, int axis);
fl_variable *fl_v_unsqueeze(fl_variable *x, int axis);
fl_variable *fl_v_concat(fl_variable *const *xs, int count, int axis);
fl_variable *fl_v_stack(fl_variable *const *xs, int count, int axis);
fl_status fl_v_split(fl_variable *x, const int64_t *sizes, int count, int axis, fl_variable **out);
fl_variable *fl_v_index(fl_variable *x, const fl_index_item *index, int count);
fl_variable *fl_v_pad(fl_variable *x, const int64_t *before, const int64_t *after, double value);
fl_variable *fl_v_tile(fl_variable *x, int count, const int64_t *repeats);
fl_variable *fl_v_gather(fl_variable *x, int axis, const fl_tensor *index);
fl_variable *fl_v_index_select(fl_variable *x, int axis, const fl_tensor *index);
/* The gradient is the same triangle of the output's gradient. */
fl_variable *fl_v_tril(fl_variable *x, int64_t diagonal);
fl_variable *fl_v_triu(fl_variable *x, int64_t diagonal);

/* linear algebra, convolution, pooling */
fl_variable *fl_v_matmul(fl_variable *a, fl_variable *b);
fl_variable *fl_v_conv1d(fl_variable *x, fl_variable *weight, const fl_conv_params *params);
fl_variable *fl_v_conv2d(fl_variable *x, fl_variable *weight, const fl_conv_params *params);
fl_variable *fl_v_pool2d(fl_variable *x, const fl_pool_params *params);

#ifdef __cplusplus
}
#endif

#endif
