/*
 * The tensor backend interface: a table of primitive operations, in the manner of
 * SQLite's sqlite3_vfs. The tensor layer (tensor.h) validates arguments, broadcasts,
 * promotes dtypes and composes everything else from these primitives in one place,
 * so a backend implements each primitive under simple contracts:
 *
 *  - Every primitive receives its output as an fl_tensor whose dtype, ndim and shape
 *    are already set and whose impl is NULL; it stores its per-tensor state in
 *    out->impl and returns 0, or a non-zero fl_status after fl_backend_error().
 *  - Elementwise inputs have exactly the output's shape (the tensor layer expands
 *    broadcast operands first, which a strided backend does with zero strides) and
 *    the same dtype as each other; arithmetic inputs also have the output's dtype.
 *  - Reductions keep reduced axes with size 1; the tensor layer drops them.
 *  - Primitives never compute on f16 or bf16: the tensor layer computes in f32 and
 *    casts the result back. Data movement (from_host, to_host, cast, the layout and
 *    indexing primitives) does see them and copies them by element size.
 *
 * Nothing here assumes eager execution: a backend may record the operation in
 * out->impl and compute only when to_host or eval asks for values.
 *
 * A NULL entry means "not implemented": the tensor layer reports FL_ERR_UNSUPPORTED
 * naming the backend and the primitive.
 *
 * The contract of the table itself:
 *
 *  - Versioned and append-only. A table says which FL_BACKEND_VERSION it was written
 *    against and its size; registration copies it, so a table of an older version
 *    registers and reads its later entries as NULL, and a size that does not match
 *    its version (a table compiled against a modified header) is refused.
 *  - Registered tables are the registry's. fl_backend_find returns the registered
 *    table, which lives as long as the process and which users never write: to
 *    change an entry, derive a table (fl_backend_derive copies every entry and
 *    records the base), override entries, and register it, under a new name or
 *    under the base's name. Registered under the base's name it replaces the base
 *    in place, for every tensor, those already made included: its entries are
 *    written one by one, each store atomic, so a thread calling meanwhile gets the
 *    old entry or the new one. A replacement must keep the release entry of the
 *    table it replaces (tensors keep their storage), and its base becomes a
 *    snapshot of what the name held before.
 *  - Every entry receives self, the table the call went through, so an override can
 *    wrap the entry it replaces: self->base->add(self->base, out, a, b).
 *    docs/BACKENDS.md ("Replacing an entry") has the example and what a replaced
 *    cpu entry means under the lazy backend.
 *
 * Fused kernels. softmax, batch_norm, batch_norm_backward, gelu, the LSTM cell, the
 * LSTM recurrence, add_scaled, cross_entropy_backward, linear, sgd_update and adam_update compute what the tensor
 * layer also composes from the primitives, in one pass instead of several. A backend
 * may leave any of them NULL and the composition is used; the composition defines
 * the semantics, and the tests check each fused kernel against it. They exist
 * where a composition cannot come near a framework's fused kernel on speed (softmax:
 * five passes over memory against one). A researcher who replaces exp and wants
 * softmax to follow sets softmax to NULL.
 *  - softmax: softmax, or log-softmax if logarithm, over a's last axis; f32 and f64.
 *    It may decline a call by returning FL_ERR_UNSUPPORTED: the tensor layer
 *    composes then.
 *  - batch_norm: of x [N, C, *] per channel (axis 1), f32 and f64; weight and bias
 *    are [C] or NULL (no affine), all of x's dtype. Training (running_mean and
 *    running_var NULL): the statistics are x's own, over every axis but 1; save_mean
 *    and save_var ([C], out) receive their mean and biased variance. Inference: the
 *    running statistics [C] are used and save_mean and save_var are NULL.
 *    y = (x - mean) / sqrt(var + eps) weight + bias.
 *  - batch_norm_backward: the gradients of batch_norm from dy (x's shape): mean and
 *    invstd = 1 / sqrt(var + eps) are [C], of the batch statistics (training: the
 *    gradient also flows through them) or of the running ones (not training). dx
 *    (x's shape), dweight and dbias ([C]) are outputs, each NULL when not wanted;
 *    weight may be NULL (as 1).
 *  - gelu: GELU of a (dy NULL), or its gradient dy * GELU'(a); the erf form, or the
 *    tanh approximation if approximate; f32 and f64, dy of a's shape and dtype.
 *  - lstm_cell (version 3): one step of an LSTM cell from its preactivations pre
 *    [N, 4H] (gates i, f, g, o in PyTorch's order) and the cell state c_prev [N, H]:
 *    gates [N, 4H] receives sigmoid of i, f, o and tanh of g; c = f c_prev + i g and
 *    h = o tanh(c) ([N, H]). All of one dtype, f32 or f64.
 *  - lstm_cell_backward (version 3): the gradients of lstm_cell from dh and dc [N, H]
 *    (dc: what flows into c from outside h), its gates and c, and c_prev: with
 *    dc' = dc + dh o (1 - tanh(c)^2), dpre [N, 4H] = (dc' g, dc' c_prev, dc' i,
 *    dh tanh(c)) times each gate's slope (s - s^2 for a sigmoid, 1 - t^2 for tanh), and
 *    dc_prev [N, H] = dc' f.
 *    The pair exists because an LSTM step composed of primitives is about ten passes
 *    over small tensors, each a call with its own overhead, against one. Either may
 *    decline a call with FL_ERR_UNSUPPORTED; the tensor layer composes then.
 *  - lstm_sequence (version 4): every step of one LSTM layer from the input
 *    projections xproj [T, N, 4H] (x_t W_ih^T, steps in time order), the biases
 *    [4H] (b_ih + b_hh; NULL for none), the initial states h0 and c0 [N, H] and w_hh
 *    [4H, H]: step t's preactivations are (xproj[t] + bias) + h_prev w_hh^T, then
 *    lstm_cell. The steps run t = 0 .. T-1, or
 *    T-1 .. 0 if reverse, h_prev and c_prev being those of the step before in that
 *    order (h0 and c0 for the first). states [2T, N, H] receives h_t at t and c_t at
 *    T + t; gates [T, N, 4H] the activated gates of each step.
 *  - lstm_sequence_backward (version 4): the gradients of lstm_sequence from dstates
 *    [2T, N, H] (what reaches each h_t and, from outside h, each c_t) and its states
 *    and gates: dxproj [T, N, 4H] (the preactivations' gradients, which are xproj's),
 *    dh0 and dc0 [N, H]. The gradient of w_hh is left to the caller: one product of
 *    dxproj with the previous states over all steps.
 *    The pair exists because a recurrence composed of a product and a cell per step
 *    pays a call, a fork and a join of the thread pool per step for a product of a
 *    few microseconds; as one call it forks once and synchronizes threads once a step.
 *    Either entry may decline a call (a dtype it lacks) with FL_ERR_UNSUPPORTED; the
 *    tensor layer composes then. A backend whose matmul is replaced and that wants the
 *    recurrence to follow sets both to NULL.
 *  - add_scaled (version 4): out = alpha a + beta b, a and b of out's shape and one
 *    float dtype; the composition is mul_scalar twice and add, three passes over
 *    memory against one. Every optimizer's update is made of such sums (momentum,
 *    moments, the step itself). It may decline a call (a layout or dtype it lacks)
 *    with FL_ERR_UNSUPPORTED; the tensor layer composes then.
 *  - cross_entropy_backward (version 5): the gradient of cross-entropy with respect
 *    to the logits, from their log-softmax log_probs [N, C] (classes on the last
 *    axis), each row's target index [N, 1] (i64, already checked to be in [0, C)) and
 *    each row's scale [N, 1] (the loss's gradient times the row's weight; log_probs's
 *    dtype): dlogits [N, C] = (exp(log_probs) - smoothing / C) scale, and
 *    -(1 - smoothing) scale added at each row's target. Composed, that is exp, a
 *    product and a scatter_add that copies its base: three passes over [N, C] writing
 *    three tensors of its size, against one pass; over a language model's vocabulary
 *    it is the largest tensor of the step. It may decline a call (a dtype it lacks)
 *    with FL_ERR_UNSUPPORTED; the tensor layer composes then.
 *  - linear (version 6): a linear layer's product and its bias, out [M, N] =
 *    x [M, K] weight^T + bias, with weight [N, K] as the layer stores it and bias
 *    [N]; all of one dtype, f32 or f64; x and weight may be views (a matrix whose
 *    rows or columns are contiguous). Composed, the bias is a second pass that reads
 *    and writes the product again: over a language model's vocabulary, a tensor as
 *    large as any of the step's. Fused, the bias is added as the product writes out.
 *    It may decline a call with FL_ERR_UNSUPPORTED; the tensor layer composes then.
 *
 *  - sgd_update (version 7): one step of SGD with momentum for one parameter, as
 *    torch.optim.SGD takes it after its first, written into param and buffer (the
 *    momentum buffer), grad of their shape and all three of one float dtype. With
 *    d's options: g = grad + weight_decay param (left out when weight_decay is 0),
 *    buffer = momentum buffer + (1 - dampening) g, then param = param - lr (g +
 *    momentum buffer) with nesterov, param - lr buffer without: the composition's
 *    sums (add_scaled's alpha a + beta b), in its order. With adam_update, one of
 *    the two entries that write into tensors they are given: the tensor layer calls
 *    it only for a param and a buffer that no other fl_tensor references,
 *    and the entry must decline (FL_ERR_UNSUPPORTED, having written nothing) where
 *    either's storage is shared with another tensor (a view) or is not a layout it
 *    takes; the tensor layer then composes the step from add_scaled into new
 *    tensors. Composed, the step is two passes that each write a new tensor as
 *    large as the parameter: reading memory back for ownership before writing it,
 *    they move about twice the bytes of one pass in place, which on a small model's
 *    step is most of the optimizer's time.
 *
 *  - adam_update (version 8): one step of Adam or AdamW for one parameter, as
 *    torch.optim.Adam and AdamW take it after their first, written into param,
 *    exp_avg, exp_avg_sq and, with amsgrad, max_exp_avg_sq (NULL without); grad of
 *    their shape and all of one float dtype. With d's options, t the step counted from
 *    1, and each scalar taken in the dtype: AdamW first scales param by 1 - lr
 *    weight_decay, Adam adds weight_decay param to the gradient g (add_scaled's sum;
 *    both left out when weight_decay is 0); exp_avg += (g - exp_avg) (1 - beta1);
 *    exp_avg_sq = exp_avg_sq beta2 + (g (1 - beta2)) g; with amsgrad, max_exp_avg_sq =
 *    maximum(max_exp_avg_sq, exp_avg_sq), which the denominator then takes in place
 *    of exp_avg_sq; denom = sqrt(exp_avg_sq) / sqrt(1 - beta2^t) + eps; param -=
 *    (exp_avg / denom) (lr / (1 - beta1^t)). Each operation rounded as the
 *    composition's own, in its order, so that the step in place gives its bits. It
 *    writes into the tensors it is given under sgd_update's rules: the tensor layer
 *    calls it only for tensors that nothing else references, and the entry declines
 *    where any one's storage is shared or not a layout it takes. Composed, the step is
 *    about a dozen passes, each writing a new tensor as large as the parameter.
 *
 * Host access (version 2), for layers that hand memory to code outside Flare (the
 * MPI engine of the distributed layer), so that they never look inside a backend:
 *  - empty: out gets storage whose values are unspecified, to be written through
 *    host_data before anything else reads it.
 *  - host_data: *data = the address of t's values, row-major and dense, in memory
 *    the host can read (and, for a tensor just made by empty and not yet shared,
 *    write), valid while t lives; or FL_ERR_UNSUPPORTED when there is none (device
 *    memory, a strided view, deferred work). The caller then copies with to_host and
 *    from_host. Both are optional.
 *
 * Thread safety: entries are called concurrently from any thread (data loaders build
 * batches on worker threads); a backend's entries must be safe for that on distinct
 * tensors, and on shared tensors where they only read them.
 */
#ifndef FLARE_BACKEND_H
#define FLARE_BACKEND_H

#include "flare/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fl_backend fl_backend;

/* What a backend sees of a tensor. Users see only the opaque handle. */
struct fl_tensor {
    int refcount;
    fl_dtype dtype;
    int ndim;
    int64_t shape[FL_MAX_DIMS];
    int64_t numel;
    const fl_backend *backend;
    void *impl; /* the backend's state: storage, strides, a pending expression, ... */
    /* Bounds of an integer tensor's values that the tensor layer knows without reading
     * them (bounded): every value lies in [low, high]. Set where a tensor is made from
     * host values, and carried through casts, reshapes, slices and selections, so that
     * index checks need not read a device's memory (the labels of a batch). */
    bool bounded;
    int64_t low, high;
};

/* Convolution parameters with defaults resolved (all strides and dilations >= 1). */
typedef struct fl_conv2d_desc {
    int stride[2], padding[2], dilation[2], groups;
} fl_conv2d_desc;

/* Pooling parameters with defaults resolved; output sizes are in out->shape. */
typedef struct fl_pool2d_desc {
    fl_pool_kind kind;
    int kernel[2], stride[2], padding[2];
    bool count_include_pad;
} fl_pool2d_desc;

/* SGD's options for sgd_update (torch.optim.SGD's names). */
typedef struct fl_sgd_desc {
    double lr, momentum, dampening, weight_decay;
    bool nesterov;
} fl_sgd_desc;

/* Adam's options for adam_update (torch.optim.Adam's names); step is the step being
 * taken, counted from 1, which the bias corrections raise beta1 and beta2 to. */
typedef struct fl_adam_desc {
    double lr, beta1, beta2, eps, weight_decay, step;
    bool decoupled; /* AdamW: weight decay scales the value, rather than adding to the gradient */
    bool amsgrad;
} fl_adam_desc;

typedef enum fl_random_kind { FL_RANDOM_UNIFORM, FL_RANDOM_NORMAL } fl_random_kind;

/* Every operation entry of the table, in table order: X(version, name, parameters).
 * One list makes the struct, the names (fl_backend_primitive_name) and the count, so
 * they cannot drift apart. Each entry is `int (*name)(const fl_backend *self, ...)`:
 * self is the table the call went through, so one table can wrap another (see
 * fl_backend_derive). version is the FL_BACKEND_VERSION that appended the entry.
 * Entries are appended, never reordered or removed. */
#define FL_BACKEND_OPERATIONS(X)                                                                                 \
    /* -- data movement and creation -- */                                                                       \
    X(1, from_host, (fl_tensor *out, const void *src)) /* src is row-major, out's dtype */                       \
    X(1, to_host, (const fl_tensor *t, void *dst))                                                               \
    X(1, full, (fl_tensor *out, double value))                                                                   \
    X(1, arange, (fl_tensor *out, double start, double step)) /* out is 1-D */                                   \
    /* Philox-4x32-10 keyed by seed: element i uses counter offset + i / 4, lane i % 4; normals come from      \
     * Box-Muller on lanes (0,1) and (2,3). Uniform is [0, 1). */                                              \
    X(1, random, (fl_tensor *out, fl_random_kind kind, uint64_t seed, uint64_t offset))                          \
    X(1, cast, (fl_tensor *out, const fl_tensor *a)) /* any dtype to any; a dense copy */                        \
    /* -- layout: views where the backend can -- */                                                            \
    X(1, reshape, (fl_tensor *out, const fl_tensor *a)) /* same numel, row-major order */                        \
    X(1, permute, (fl_tensor *out, const fl_tensor *a, const int *axes))                                         \
    X(1, expand, (fl_tensor *out, const fl_tensor *a)) /* a's size-1 axes broadcast; same ndim */                \
    /* out[i...] = a[start + i * step ...]; steps may be negative, never zero. */                              \
    X(1, slice, (fl_tensor *out, const fl_tensor *a, const int64_t *start, const int64_t *step))                 \
    /* out = base with base[start + i * step ...] replaced by src[i...]. */                                    \
    X(1, update_slice,                                                                                           \
      (fl_tensor *out, const fl_tensor *base, const fl_tensor *src, const int64_t *start, const int64_t *step))  \
    X(1, concat, (fl_tensor *out, const fl_tensor *const *inputs, int count, int axis))                          \
    /* -- indexing (indices are i64, already checked to be in range) -- */                                     \
    X(1, where, (fl_tensor *out, const fl_tensor *cond, const fl_tensor *a, const fl_tensor *b))                 \
    X(1, gather, (fl_tensor *out, const fl_tensor *a, int axis, const fl_tensor *index))                         \
    X(1, scatter_add, (fl_tensor *out, const fl_tensor *base, int axis, const fl_tensor *index,                  \
                       const fl_tensor *src))                                                                    \
    X(1, index_select, (fl_tensor *out, const fl_tensor *a, int axis, const fl_tensor *index))                   \
    /* -- unary elementwise: exp to erf and floor to round take float dtypes; isnan and isinf take float     \
     * and give bool; logical_not takes and gives bool -- */                                                   \
    X(1, neg, FL_UNARY_PARAMS) X(1, abs, FL_UNARY_PARAMS) X(1, sign, FL_UNARY_PARAMS)                            \
    X(1, exp, FL_UNARY_PARAMS) X(1, log, FL_UNARY_PARAMS) X(1, log1p, FL_UNARY_PARAMS)                           \
    X(1, sqrt, FL_UNARY_PARAMS) X(1, rsqrt, FL_UNARY_PARAMS) X(1, sin, FL_UNARY_PARAMS)                          \
    X(1, cos, FL_UNARY_PARAMS) X(1, tanh, FL_UNARY_PARAMS) X(1, sigmoid, FL_UNARY_PARAMS)                        \
    X(1, erf, FL_UNARY_PARAMS) X(1, floor, FL_UNARY_PARAMS) X(1, ceil, FL_UNARY_PARAMS)                          \
    X(1, round, FL_UNARY_PARAMS) X(1, isnan, FL_UNARY_PARAMS) X(1, isinf, FL_UNARY_PARAMS)                       \
    X(1, logical_not, FL_UNARY_PARAMS)                                                                           \
    /* -- binary elementwise: eq to le give bool (gt and ge swap the operands of lt and le); logical_and     \
     * and logical_or take and give bool -- */                                                                 \
    X(1, add, FL_BINARY_PARAMS) X(1, sub, FL_BINARY_PARAMS) X(1, mul, FL_BINARY_PARAMS)                          \
    X(1, div, FL_BINARY_PARAMS) X(1, pow, FL_BINARY_PARAMS) X(1, minimum, FL_BINARY_PARAMS)                      \
    X(1, maximum, FL_BINARY_PARAMS) X(1, eq, FL_BINARY_PARAMS) X(1, ne, FL_BINARY_PARAMS)                        \
    X(1, lt, FL_BINARY_PARAMS) X(1, le, FL_BINARY_PARAMS) X(1, logical_and, FL_BINARY_PARAMS)                    \
    X(1, logical_or, FL_BINARY_PARAMS)                                                                           \
    /* -- reductions: out keeps reduced axes as size 1 and has a's dtype -- */                                 \
    X(1, sum, FL_REDUCE_PARAMS) X(1, prod, FL_REDUCE_PARAMS) X(1, max, FL_REDUCE_PARAMS)                         \
    X(1, min, FL_REDUCE_PARAMS)                                                                                  \
    X(1, argmax, (fl_tensor *out, const fl_tensor *a, int axis)) /* out i64 */                                   \
    X(1, argmin, (fl_tensor *out, const fl_tensor *a, int axis))                                                 \
    X(1, cumsum, (fl_tensor *out, const fl_tensor *a, int axis))                                                 \
    /* Stable; values has a's dtype, indices are i64; both have a's shape. */                                  \
    X(1, sort, (fl_tensor *values, fl_tensor *indices, const fl_tensor *a, int axis, bool descending))           \
    /* -- linear algebra, convolution, pooling (float dtypes) -- */                                            \
    /* a [..., M, K] times b [..., K, N] with equal batch shapes (possibly expanded). */                       \
    X(1, matmul, FL_BINARY_PARAMS)                                                                               \
    X(1, conv2d, (fl_tensor *out, const fl_tensor *x, const fl_tensor *w, const fl_conv2d_desc *d))              \
    X(1, conv2d_backward_input, (fl_tensor *dx, const fl_tensor *dy, const fl_tensor *w, const fl_conv2d_desc *d)) \
    X(1, conv2d_backward_weight,                                                                                 \
      (fl_tensor *dw, const fl_tensor *x, const fl_tensor *dy, const fl_conv2d_desc *d))                         \
    X(1, pool2d, (fl_tensor *out, const fl_tensor *x, const fl_pool2d_desc *d))                                  \
    X(1, pool2d_backward, (fl_tensor *dx, const fl_tensor *dy, const fl_tensor *x, const fl_pool2d_desc *d))     \
    /* -- optional fused kernels (see "Fused kernels" above) -- */                                             \
    X(1, softmax, (fl_tensor *out, const fl_tensor *a, bool logarithm))                                          \
    X(1, batch_norm, (fl_tensor *y, fl_tensor *save_mean, fl_tensor *save_var, const fl_tensor *x,               \
                      const fl_tensor *weight, const fl_tensor *bias, const fl_tensor *running_mean,             \
                      const fl_tensor *running_var, double eps))                                                 \
    X(1, batch_norm_backward, (fl_tensor *dx, fl_tensor *dweight, fl_tensor *dbias, const fl_tensor *dy,         \
                               const fl_tensor *x, const fl_tensor *mean, const fl_tensor *invstd,               \
                               const fl_tensor *weight, bool training))                                          \
    X(1, gelu, (fl_tensor *out, const fl_tensor *a, const fl_tensor *dy, bool approximate))                      \
    /* -- version 2: host access (see "Host access" above) -- */                                               \
    X(2, empty, (fl_tensor *out))                                                                                \
    X(2, host_data, (const fl_tensor *t, void **data))                                                           \
    /* -- version 3: the fused LSTM cell (see "Fused kernels" above) -- */                                     \
    X(3, lstm_cell, (fl_tensor *gates, fl_tensor *c, fl_tensor *h, const fl_tensor *pre, const fl_tensor *c_prev)) \
    X(3, lstm_cell_backward, (fl_tensor *dpre, fl_tensor *dc_prev, const fl_tensor *dh, const fl_tensor *dc,       \
                              const fl_tensor *gates, const fl_tensor *c_prev, const fl_tensor *c))                \
    /* -- version 4: the fused LSTM recurrence and scaled addition (see "Fused kernels") -- */                               \
    X(4, lstm_sequence, (fl_tensor *states, fl_tensor *gates, const fl_tensor *xproj, const fl_tensor *bias,        \
                         const fl_tensor *h0, const fl_tensor *c0, const fl_tensor *w_hh, bool reverse))           \
    X(4, lstm_sequence_backward, (fl_tensor *dxproj, fl_tensor *dh0, fl_tensor *dc0, const fl_tensor *dstates,     \
                                  const fl_tensor *states, const fl_tensor *gates, const fl_tensor *h0,            \
                                  const fl_tensor *c0, const fl_tensor *w_hh, bool reverse))               \
    X(4, add_scaled, (fl_tensor *out, const fl_tensor *a, const fl_tensor *b, double alpha, double beta))         \
    /* -- version 5: the gradient of cross-entropy (see "Fused kernels" above) -- */                          \
    X(5, cross_entropy_backward, (fl_tensor *dlogits, const fl_tensor *log_probs, const fl_tensor *index,         \
                                  const fl_tensor *scale, double smoothing))                                      \
    /* -- version 6: a linear layer's product with its bias (see "Fused kernels" above) -- */                    \
    X(6, linear, (fl_tensor *out, const fl_tensor *x, const fl_tensor *weight, const fl_tensor *bias))           \
    /* -- version 7: SGD's step in place (see "Fused kernels" above) -- */                                       \
    X(7, sgd_update, (fl_tensor *param, fl_tensor *buffer, const fl_tensor *grad, const fl_sgd_desc *d))        \
    /* -- version 8: Adam's step in place (see "Fused kernels" above) -- */                                       \
    X(8, adam_update, (fl_tensor *param, fl_tensor *exp_avg, fl_tensor *exp_avg_sq, fl_tensor *max_exp_avg_sq,    \
                       const fl_tensor *grad, const fl_adam_desc *d))

#define FL_UNARY_PARAMS (fl_tensor *out, const fl_tensor *a)
#define FL_BINARY_PARAMS (fl_tensor *out, const fl_tensor *a, const fl_tensor *b)
/* axes is a bit mask of the axes to reduce (bit i for axis i). */
#define FL_REDUCE_PARAMS (fl_tensor *out, const fl_tensor *a, unsigned axes)

/* The version of struct fl_backend this header declares. */
#define FL_BACKEND_VERSION 8

#define FL__BACKEND_SELF(...) (const fl_backend *self, __VA_ARGS__)
/* The parameter list of an entry whose parameters after self are params. */
#define FL_BACKEND_SIGNATURE(params) FL__BACKEND_SELF params
#define FL__BACKEND_ENTRY(version, name, params) int(*name) FL_BACKEND_SIGNATURE(params);

struct fl_backend {
    /* What the table was written against: FL_BACKEND_VERSION and sizeof(fl_backend)
     * of that header. Registration refuses a size that does not match its version. */
    int version;
    size_t table_size;
    const char *name;
    void *state; /* the backend's own, global state */
    /* The table this one was derived from (fl_backend_derive), or NULL. */
    const fl_backend *base;
    void *user; /* free for whoever derives a table; NULL otherwise */

    /* -- housekeeping (not operations) -- */
    void (*release)(const fl_backend *self, fl_tensor *t); /* frees t->impl */
    /* Materializes deferred work; NULL for eager backends. */
    int (*eval)(const fl_backend *self, fl_tensor *t);

    FL_BACKEND_OPERATIONS(FL__BACKEND_ENTRY)
};

typedef int(*fl_unary_fn) FL_BACKEND_SIGNATURE(FL_UNARY_PARAMS);
typedef int(*fl_binary_fn) FL_BACKEND_SIGNATURE(FL_BINARY_PARAMS);
typedef int(*fl_reduce_fn) FL_BACKEND_SIGNATURE(FL_REDUCE_PARAMS);

/* The number of operation entries in struct fl_backend (everything after eval). */
int fl_backend_primitive_count(void);
/* The name of operation entry i, in table order, or NULL past the end. */
const char *fl_backend_primitive_name(int i);
/* The FL_BACKEND_VERSION that appended operation entry i, or 0 past the end. */
int fl_backend_primitive_version(int i);
/* sizeof(fl_backend) as version declared it, or 0 for a version that does not exist. */
size_t fl_backend_size(int version);

/* Registers a copy of table (see the contract above) under table->name, or replaces
 * the table registered under that name. The built-in "cpu" (the default) and "lazy"
 * are registered on first use; FLARE_BACKEND names another default. Thread-safe. */
fl_status fl_backend_register(const fl_backend *table);
/* The registered table of that name, or NULL. */
const fl_backend *fl_backend_find(const char *name);
const fl_backend *fl_default_backend(void);
fl_status fl_set_default_backend(const char *name);

/* Fills *out with a copy of base (every entry, its state) to override entries of:
 * version and table_size are this header's, base points to base, user is NULL and name is
 * the given one (kept as a pointer: it must outlive the table). */
void fl_backend_derive(fl_backend *out, const fl_backend *base, const char *name);

/* The built-in backends' tables, as they were first registered (not any
 * replacement registered under their names since). */
const fl_backend *fl_cpu_backend(void);
const fl_backend *fl_lazy_backend(void);
/* OpenCL devices (docs/BACKENDS.md): the first GPU, or FLARE_OPENCL_DEVICE's. The table
 * is always there; its first tensor fails with a message if no device is. */
const fl_backend *fl_opencl_backend(void);

/* Records an error from inside a primitive; the tensor layer adds the operation,
 * shapes and dtypes. Returns status for convenience. */
int fl_backend_error(fl_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* For strided backends: the strides (elements) that let shape (ndim axes) view the
 * elements of a, laid out with a_strides, in row-major order without a copy, as
 * NumPy's _attempt_nocopy_reshape finds them: each run of a's axes that merges into
 * (or splits into) a run of new axes must step evenly through memory. False if some
 * run does not (a transposed or expanded axis merged with its neighbour). */
bool fl_view_strides(const fl_tensor *a, const int64_t *a_strides, int ndim, const int64_t *shape, int64_t *strides);

/* A new tensor handle on backend with the given metadata and no impl: for backends
 * that build outputs of their own (a fallback to another backend, say). */
fl_tensor *fl_tensor_alloc(const fl_backend *backend, fl_dtype dtype, int ndim, const int64_t *shape);

/* IEEE half precision and bfloat16, rounding to nearest even; for casts. */
float fl_half_to_float(uint16_t h);
uint16_t fl_float_to_half(float f);
float fl_bf16_to_float(uint16_t b);
uint16_t fl_float_to_bf16(float f);

#ifdef __cplusplus
}
#endif

#endif
