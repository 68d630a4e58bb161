/*
 * Flare's public tensor API: a numpy-like library of operations on n-dimensional
 * arrays. Every function validates its arguments, applies NumPy's broadcasting and
 * PyTorch's dtype-promotion rules, and dispatches to the tensor's backend
 * (include/flare/backend.h).
 *
 * Ownership. Tensors are reference-counted handles. A function that returns a tensor
 * returns a new reference. Outside any scope the caller owns it and must fl_release
 * it; inside a scope (fl_scope_begin / fl_scope_end) the innermost scope owns it and
 * releases it when it ends, unless the caller takes it with fl_keep. Expression code
 * such as fl_add(fl_mul(a, b), c) therefore does not leak inside a scope.
 *
 * Errors. No function crashes on bad input. A failing function returns NULL (or a
 * non-zero fl_status) and records a message naming the function, the shapes and the
 * dtypes (fl_last_error). Every function accepts NULL tensors and returns NULL
 * without touching the recorded error, so a chain of calls is checked once, at the end.
 */
#ifndef FLARE_TENSOR_H
#define FLARE_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FL_MAX_DIMS 8

/* Ordered by promotion rank within each kind (bool < integers < floats). */
typedef enum fl_dtype {
    FL_BOOL,
    FL_U8,
    FL_I32,
    FL_I64,
    FL_F16,
    FL_BF16,
    FL_F32,
    FL_F64,
    FL_DTYPE_COUNT
} fl_dtype;

typedef enum fl_status {
    FL_OK = 0,
    FL_ERR_NULL,        /* a required argument was NULL */
    FL_ERR_SHAPE,       /* shapes do not match or cannot broadcast */
    FL_ERR_AXIS,        /* an axis out of range, or repeated */
    FL_ERR_DTYPE,       /* a dtype the operation does not accept */
    FL_ERR_INDEX,       /* an index out of range */
    FL_ERR_VALUE,       /* an argument's value is invalid (negative size, zero step, ...) */
    FL_ERR_MEMORY,      /* allocation failed */
    FL_ERR_UNSUPPORTED, /* the backend does not implement the operation */
    FL_ERR_BACKEND,     /* the backend failed (a library it calls returned an error) */
    FL_ERR_IO,          /* a file could not be read or written */
    FL_ERR_DISTRIBUTED, /* a collective failed: a peer died or did not arrive in time */
    FL_ERR_RELEASED     /* a tensor or variable used after its release (checked handles) */
} fl_status;

typedef struct fl_tensor fl_tensor;

/* ---- errors -------------------------------------------------------------------- */

fl_status fl_last_status(void);
/* The message of the first error since the last fl_clear_error, or "" if none. */
const char *fl_last_error(void);
void fl_clear_error(void);
const char *fl_status_name(fl_status status);
/* Called on every error as it is recorded (for logging or aborting in debug runs). */
typedef void (*fl_error_handler)(fl_status status, const char *message, void *user);
void fl_set_error_handler(fl_error_handler handler, void *user);

/* ---- lifetime ------------------------------------------------------------------ */

/* A reference of the caller's own to t (NULL passes through). It takes a const
 * tensor, a borrowed one such as fl_v_value's, since a tensor's value never changes:
 * only its reference count does, which is the handle's and not the value's. */
fl_tensor *fl_retain(const fl_tensor *t);
void fl_release(fl_tensor *t);

typedef struct fl_scope {
    size_t mark; /* where this scope's tensors begin on the thread's stack */
    int depth;   /* its nesting level, counting from 1 */
} fl_scope;

fl_scope fl_scope_begin(void);
void fl_scope_end(fl_scope scope);
/* Gives the caller a reference of its own to t, to release with fl_release. If the
 * innermost scope holds t (t was made inside it), that reference is handed over;
 * otherwise t is retained. Outside any scope it does nothing, since results made
 * there already belong to the caller. */
fl_tensor *fl_keep(fl_tensor *t);
/* Scopes hold references to objects of the layers above too (autograd variables,
 * ...). fl_scope_own hands one reference of object to the innermost scope, which
 * drops it with release when it ends; outside any scope it does nothing. It returns
 * object (NULL, after release, if the scope cannot grow; NULL, and FL_ERR_NULL, if
 * release is NULL, the object staying the caller's). fl_scope_disown takes the
 * reference back: true if the innermost scope held it. */
void *fl_scope_own(void *object, void (*release)(void *object));
bool fl_scope_disown(void *object);

/* The tensor handles alive in the process: made and not yet released for the last
 * time, on any thread. Forgetting the per-step scope of a training loop shows up as
 * a count that grows with every step (docs/NN.md, "A training loop"). Views,
 * gradients and the inputs a lazy tensor holds until it is evaluated count. */
int64_t fl_live_tensors(void);

/* ---- dtypes and introspection -------------------------------------------------- */

const char *fl_dtype_name(fl_dtype dtype);
size_t fl_dtype_size(fl_dtype dtype);
bool fl_dtype_is_float(fl_dtype dtype);
bool fl_dtype_is_integer(fl_dtype dtype); /* u8, i32, i64: not bool */
/* PyTorch's rule for two tensors: the higher kind wins (bool < int < float), and
 * within a kind the wider type; f16 with bf16 gives f32. */
fl_dtype fl_promote_types(fl_dtype a, fl_dtype b);

fl_dtype fl_dtype_of(const fl_tensor *t);
int fl_ndim(const fl_tensor *t);
const int64_t *fl_shape(const fl_tensor *t);
int64_t fl_dim(const fl_tensor *t, int axis); /* negative axes count from the end */
int64_t fl_numel(const fl_tensor *t);
const char *fl_backend_name(const fl_tensor *t);

/* Shape and axis lists as literals: fl_zeros(FL_F32, FL_SHAPE(2, 3)),
 * fl_sum(x, FL_AXES(0, -1), false). FL_ALL_AXES reduces over every axis. */
#define FL_SHAPE(...) \
    (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]){__VA_ARGS__}
#define FL_AXES(...) (const int[]){__VA_ARGS__}, (int)(sizeof((int[]){__VA_ARGS__}) / sizeof(int))
#define FL_ALL_AXES NULL, 0

/* ---- threads ------------------------------------------------------------------- */

/* The number of threads backends use. Initially FLARE_NUM_THREADS if set, else the
 * number of cores. At most FL_MAX_THREADS: OpenMP runtimes keep per-thread state on
 * the stack of the thread that starts a parallel region, and a million threads
 * overflow it. */
#define FL_MAX_THREADS 1024
void fl_set_num_threads(int n);
int fl_num_threads(void);

/* ---- creation ------------------------------------------------------------------ */

/* Copies numel elements of dtype from data (row-major). */
fl_tensor *fl_from_data(const void *data, fl_dtype dtype, int ndim, const int64_t *shape);
/* A tensor whose values fill writes: numel elements of dtype, row-major, `bytes` of
 * them at data, in host memory that is the tensor's own storage where the default
 * backend gives the host access to a new tensor (the cpu backend does), else a
 * staging buffer that is then copied over as fl_from_data copies. So a reader that
 * reads a file into tensors this way makes no copy of its own. fill is called once,
 * and not for an empty tensor; a non-zero status from it (with its error recorded by
 * fl_error) fails the call with that status and nothing is made. */
typedef fl_status (*fl_fill_fn)(void *data, size_t bytes, void *context);
fl_tensor *fl_from_fill(fl_dtype dtype, int ndim, const int64_t *shape, fl_fill_fn fill, void *context);
/* fl_scalar and fl_full refuse a value an integer dtype cannot hold (FL_ERR_VALUE):
 * converting it would be undefined. */
fl_tensor *fl_scalar(double value, fl_dtype dtype); /* a 0-d tensor */
fl_tensor *fl_zeros(fl_dtype dtype, int ndim, const int64_t *shape);
fl_tensor *fl_ones(fl_dtype dtype, int ndim, const int64_t *shape);
fl_tensor *fl_full(double value, fl_dtype dtype, int ndim, const int64_t *shape);
/* t's dtype, shape and backend. */
fl_tensor *fl_zeros_like(const fl_tensor *t);
fl_tensor *fl_ones_like(const fl_tensor *t);
fl_tensor *fl_full_like(const fl_tensor *t, double value);
/* PyTorch's t.new_full and the 0-d case: a tensor of the dtype given on t's backend
 * (t's dtype and shape do not matter), for what a function makes to combine with its
 * input. fl_full and fl_scalar make theirs on the default backend. */
fl_tensor *fl_new_full(const fl_tensor *t, double value, fl_dtype dtype, int ndim, const int64_t *shape);
fl_tensor *fl_new_scalar(const fl_tensor *t, double value, fl_dtype dtype);
/* [start, stop) in steps of step, as numpy.arange: ceil((stop - start) / step) values. */
fl_tensor *fl_arange(double start, double stop, double step, fl_dtype dtype);
fl_tensor *fl_linspace(double start, double stop, int64_t count, fl_dtype dtype);
fl_tensor *fl_eye(int64_t rows, int64_t cols, fl_dtype dtype);

/* Random numbers come from a counter-based generator (Philox-4x32-10): element i of
 * the k-th draw after fl_manual_seed(s) depends only on s, k and i, never on the
 * number of threads. */
void fl_manual_seed(uint64_t seed);
/* The generator's whole state: the seed and the number of counters drawn since. A
 * checkpoint saves it so that a resumed run draws the same numbers (dropout masks,
 * shuffles) as one that never stopped. */
void fl_random_state(uint64_t *seed, uint64_t *counter);
void fl_set_random_state(uint64_t seed, uint64_t counter);
/* Streams of one's own, for draws that must not depend on what other threads draw
 * meanwhile (an augmentation on a prefetch worker). fl_random_stream_key reserves a
 * block of the generator and returns a key derived from it: a new key each call, the
 * same sequence of keys after the same fl_manual_seed. Between fl_random_stream_begin
 * and fl_random_stream_end, draws on this thread come from Philox keyed by key, from
 * counter 0, and leave the generator of fl_manual_seed as it is. Streams nest: end
 * restores what begin returned. */
typedef struct fl_random_stream {
    uint64_t key, counter;
    bool active;
} fl_random_stream;
uint64_t fl_random_stream_key(void);
fl_random_stream fl_random_stream_begin(uint64_t key);
void fl_random_stream_end(fl_random_stream previous);
fl_tensor *fl_rand(fl_dtype dtype, int ndim, const int64_t *shape);  /* U[0, 1) */
fl_tensor *fl_randn(fl_dtype dtype, int ndim, const int64_t *shape); /* N(0, 1) */
fl_tensor *fl_uniform(double low, double high, fl_dtype dtype, int ndim, const int64_t *shape);
fl_tensor *fl_normal(double mean, double std, fl_dtype dtype, int ndim, const int64_t *shape);
/* Integers uniform in [low, high). */
fl_tensor *fl_randint(int64_t low, int64_t high, fl_dtype dtype, int ndim, const int64_t *shape);

/* A 0/1 draw for each probability of p (float, each in [0, 1]): 1 with probability
 * p[i], as torch.bernoulli; p's dtype, shape and backend. A probability outside [0, 1]
 * or NaN is an error (FL_ERR_VALUE); checking reads one value (a sync on deferred
 * backends). */
fl_tensor *fl_bernoulli(const fl_tensor *p);
/* A random permutation of 0 .. n - 1 (torch.randperm): the order of n uniform draws.
 * dtype must hold n - 1 exactly (integer or float, not bool). */
fl_tensor *fl_randperm(int64_t n, fl_dtype dtype);
/* Draws num_samples category indices (i64) per row of probs, float weights [C] or
 * [N, C] that need not sum to 1, as torch.multinomial: [num_samples] or
 * [N, num_samples]. With replacement each draw is independent; without, the indices
 * in a row are distinct (a weighted draw without replacement, in the order drawn), so
 * num_samples must not exceed C nor a row's number of positive weights. Negative,
 * NaN or infinite weights, a row of zeros and too many samples are errors
 * (FL_ERR_VALUE). The weights are read to the host to check them (a sync); the draws
 * take N * num_samples * C comparisons with replacement, N * C without. */
fl_tensor *fl_multinomial(const fl_tensor *probs, int64_t num_samples, bool replacement);

/* ---- reading values ------------------------------------------------------------ */

/* Copies the values, row-major, in the tensor's dtype; bytes must be at least
 * numel * fl_dtype_size. Materializes deferred work. */
fl_status fl_to_host(const fl_tensor *t, void *dst, size_t bytes);
/* The value of a one-element tensor as a double (NAN and an error otherwise). */
double fl_item(const fl_tensor *t);
/* Materializes deferred work now (a no-op on eager backends). The value does not
 * change, so a borrowed const tensor can be evaluated. */
fl_status fl_eval(const fl_tensor *t);
fl_status fl_print(const fl_tensor *t);
fl_status fl_fprint(FILE *out, const fl_tensor *t);
/* A tensor on another backend, or with another dtype, or both. */
fl_tensor *fl_cast(const fl_tensor *t, fl_dtype dtype);
fl_tensor *fl_to_backend(const fl_tensor *t, const char *backend_name);
/* A dense row-major copy. */
fl_tensor *fl_copy(const fl_tensor *t);

/* ---- shape ---------------------------------------------------------------------- */

/* One entry of shape may be -1: it is inferred. */
fl_tensor *fl_reshape(const fl_tensor *t, int ndim, const int64_t *shape);
fl_tensor *fl_flatten(const fl_tensor *t, int start_axis, int end_axis);
fl_tensor *fl_permute(const fl_tensor *t, const int *axes); /* fl_ndim(t) axes */
fl_tensor *fl_transpose(const fl_tensor *t, int axis0, int axis1);
/* Broadcasts to shape (NumPy's broadcast_to); -1 keeps a dimension. */
fl_tensor *fl_expand(const fl_tensor *t, int ndim, const int64_t *shape);
fl_tensor *fl_squeeze(const fl_tensor *t, int axis); /* the axis must have size 1 */
fl_tensor *fl_squeeze_all(const fl_tensor *t);
fl_tensor *fl_unsqueeze(const fl_tensor *t, int axis);
fl_tensor *fl_concat(fl_tensor *const *tensors, int count, int axis);
fl_tensor *fl_stack(fl_tensor *const *tensors, int count, int axis);
/* Splits along axis into count pieces of the given sizes, which must add up to the
 * axis's length; the pieces are stored in out[0..count). */
fl_status fl_split(const fl_tensor *t, const int64_t *sizes, int count, int axis, fl_tensor **out);
/* before[i] and after[i] elements of value around axis i. */
fl_tensor *fl_pad(const fl_tensor *t, const int64_t *before, const int64_t *after, double value);
fl_tensor *fl_tile(const fl_tensor *t, int count, const int64_t *repeats);
fl_tensor *fl_broadcast_to(const fl_tensor *t, int ndim, const int64_t *shape);

/* The lower (tril) or upper (triu) triangle of the last two axes, zeros elsewhere,
 * as torch.tril/triu: element [i, j] is kept where j - i <= diagonal (tril) or
 * j - i >= diagonal (triu). diagonal 0 is the main diagonal, positive ones above it.
 * Any dtype; at least 2-D. A causal attention mask is fl_tril(fl_ones(...), 0). */
fl_tensor *fl_tril(const fl_tensor *t, int64_t diagonal);
fl_tensor *fl_triu(const fl_tensor *t, int64_t diagonal);

/* ---- indexing ------------------------------------------------------------------- */

typedef enum fl_index_kind { FL_INDEX_SPAN, FL_INDEX_RANGE, FL_INDEX_AT, FL_INDEX_NEW } fl_index_kind;

/* One entry of a numpy-like index. Negative positions count from the end. */
typedef struct fl_index_item {
    fl_index_kind kind;
    int64_t start, stop, step; /* a RANGE [start, stop) by step; AT uses start */
} fl_index_item;

/* The whole axis, x[:]. */
#define FL_SPAN ((fl_index_item){FL_INDEX_SPAN, 0, 0, 1})
/* x[a:b]; FL_END as b means "to the end" (and, with a negative step, "to the start"). */
#define FL_RANGE(a, b) ((fl_index_item){FL_INDEX_RANGE, (a), (b), 1})
#define FL_RANGE_STEP(a, b, s) ((fl_index_item){FL_INDEX_RANGE, (a), (b), (s)})
#define FL_AT(i) ((fl_index_item){FL_INDEX_AT, (i), 0, 1})
#define FL_NEWAXIS ((fl_index_item){FL_INDEX_NEW, 0, 0, 1})
#define FL_END INT64_MAX
#define FL_INDEX(...) \
    (const fl_index_item[]){__VA_ARGS__}, (int)(sizeof((fl_index_item[]){__VA_ARGS__}) / sizeof(fl_index_item))

/* x[index...]: missing trailing entries are spans. A view where the backend can. */
fl_tensor *fl_index(const fl_tensor *t, const fl_index_item *index, int count);
/* A copy of t with t[index...] replaced by value (broadcast to the indexed shape). */
fl_tensor *fl_index_assign(const fl_tensor *t, const fl_index_item *index, int count, const fl_tensor *value);
/* cond ? a : b, broadcasting all three. */
fl_tensor *fl_where(const fl_tensor *cond, const fl_tensor *a, const fl_tensor *b);
/* out[i][j] = t[index[i][j]][j] for axis 0 (torch.gather); index is i64 or i32. */
fl_tensor *fl_gather(const fl_tensor *t, int axis, const fl_tensor *index);
/* A copy of t with src added at index along axis (torch.scatter_add). */
fl_tensor *fl_scatter_add(const fl_tensor *t, int axis, const fl_tensor *index, const fl_tensor *src);
/* The slices of t at positions index (1-D) along axis (torch.index_select). */
fl_tensor *fl_index_select(const fl_tensor *t, int axis, const fl_tensor *index);
/* index's values as one-hot vectors in a new last axis of num_classes. */
fl_tensor *fl_one_hot(const fl_tensor *index, int64_t num_classes, fl_dtype dtype);

/* ---- elementwise ---------------------------------------------------------------- */

/* Floating-point functions of integer tensors compute in f32, as PyTorch does. */
fl_tensor *fl_neg(const fl_tensor *t);
fl_tensor *fl_abs(const fl_tensor *t);
fl_tensor *fl_sign(const fl_tensor *t);
fl_tensor *fl_exp(const fl_tensor *t);
fl_tensor *fl_log(const fl_tensor *t);
fl_tensor *fl_log1p(const fl_tensor *t);
fl_tensor *fl_sqrt(const fl_tensor *t);
fl_tensor *fl_rsqrt(const fl_tensor *t);
fl_tensor *fl_sin(const fl_tensor *t);
fl_tensor *fl_cos(const fl_tensor *t);
fl_tensor *fl_tanh(const fl_tensor *t);
fl_tensor *fl_sigmoid(const fl_tensor *t);
fl_tensor *fl_erf(const fl_tensor *t);
fl_tensor *fl_floor(const fl_tensor *t);
fl_tensor *fl_ceil(const fl_tensor *t);
fl_tensor *fl_round(const fl_tensor *t); /* half to even, as numpy.round */
fl_tensor *fl_isnan(const fl_tensor *t);
fl_tensor *fl_isinf(const fl_tensor *t);
fl_tensor *fl_logical_not(const fl_tensor *t);
/* min(max(t, low), high), as PyTorch: with low > high every element is high. A bound
 * past the end of a u8 or i32 tensor's range clamps nothing on its side. */
fl_tensor *fl_clamp(const fl_tensor *t, double low, double high);
fl_tensor *fl_square(const fl_tensor *t);
fl_tensor *fl_reciprocal(const fl_tensor *t);

fl_tensor *fl_add(const fl_tensor *a, const fl_tensor *b);
fl_tensor *fl_sub(const fl_tensor *a, const fl_tensor *b);
fl_tensor *fl_mul(const fl_tensor *a, const fl_tensor *b);
fl_tensor *fl_div(const fl_tensor *a, const fl_tensor *b); /* true division */
/* Integer results wrap on overflow. An integer base with an integer exponent that
 * holds a negative value is an error (FL_ERR_VALUE), as in PyTorch and NumPy; the
 * check reads the exponent's minimum, a sync on deferred backends. */
fl_tensor *fl_pow(const fl_tensor *a, const fl_tensor *b);
fl_tensor *fl_minimum(const fl_tensor *a, const fl_tensor *b);
fl_tensor *fl_maximum(const fl_tensor *a, const fl_tensor *b);
fl_tensor *fl_eq(const fl_tensor *a, const fl_tensor *b);
fl_tensor *fl_ne(const fl_tensor *a, const fl_tensor *b);
fl_tensor *fl_lt(const fl_tensor *a, const fl_tensor *b);
fl_tensor *fl_le(const fl_tensor *a, const fl_tensor *b);
fl_tensor *fl_gt(const fl_tensor *a, const fl_tensor *b);
fl_tensor *fl_ge(const fl_tensor *a, const fl_tensor *b);
fl_tensor *fl_logical_and(const fl_tensor *a, const fl_tensor *b);
fl_tensor *fl_logical_or(const fl_tensor *a, const fl_tensor *b);

/* With a scalar on the right. The scalar is "weak", as in PyTorch: it does not widen
 * the tensor's dtype unless it is of a higher kind (an int tensor times 0.5 is f32).
 * The kind is read from the value, since C passes every scalar as a double: a whole
 * value below 2^63 in magnitude acts as PyTorch's Python int (an i32 tensor plus 3.0
 * stays i32, where PyTorch's 3.0 would give f32; a bool tensor plus 1 is i64), anything
 * else (3.5, inf, nan) as a float (an i32 tensor plus 3.5 is f32). An integer
 * scalar outside the range of the dtype it takes is an error (FL_ERR_VALUE: an i32
 * tensor plus 3e9, a u8 tensor plus -1), where PyTorch wraps it around; fl_div_scalar
 * takes it as a float. fl_pow_scalar of an integer tensor with a negative whole
 * exponent is an error, as fl_pow's. */
fl_tensor *fl_add_scalar(const fl_tensor *t, double value);
fl_tensor *fl_sub_scalar(const fl_tensor *t, double value);
fl_tensor *fl_mul_scalar(const fl_tensor *t, double value);
/* alpha a + beta b, a and b broadcasting as in fl_add: one pass where the backend has
 * the fused kernel (backend.h, add_scaled) for the operands, else
 * fl_add(fl_mul_scalar(a, alpha), fl_mul_scalar(b, beta)) (a factor of 1 left out),
 * which the kernel equals to rounding. */
fl_tensor *fl_add_scaled(const fl_tensor *a, double alpha, const fl_tensor *b, double beta);
fl_tensor *fl_div_scalar(const fl_tensor *t, double value);
fl_tensor *fl_pow_scalar(const fl_tensor *t, double value);
fl_tensor *fl_maximum_scalar(const fl_tensor *t, double value);
fl_tensor *fl_minimum_scalar(const fl_tensor *t, double value);

/* ---- reductions ----------------------------------------------------------------- */

/* Over the listed axes (negative ones count from the end; FL_ALL_AXES for all).
 * A count of 0 reduces every axis whatever axes points to, as PyTorch's dim=[]
 * (NumPy's axis=() reduces none). Listing an axis twice is an error.
 * Sums and products of bool and integer tensors are i64, as in NumPy. */
fl_tensor *fl_sum(const fl_tensor *t, const int *axes, int count, bool keepdims);
fl_tensor *fl_mean(const fl_tensor *t, const int *axes, int count, bool keepdims);
fl_tensor *fl_prod(const fl_tensor *t, const int *axes, int count, bool keepdims);
fl_tensor *fl_max(const fl_tensor *t, const int *axes, int count, bool keepdims);
fl_tensor *fl_min(const fl_tensor *t, const int *axes, int count, bool keepdims);
/* Bessel's correction: correction = 1 is the sample variance, 0 the population's. */
fl_tensor *fl_var(const fl_tensor *t, const int *axes, int count, int correction, bool keepdims);
fl_tensor *fl_std(const fl_tensor *t, const int *axes, int count, int correction, bool keepdims);
fl_tensor *fl_any(const fl_tensor *t, const int *axes, int count, bool keepdims);
fl_tensor *fl_all(const fl_tensor *t, const int *axes, int count, bool keepdims);
fl_tensor *fl_logsumexp(const fl_tensor *t, const int *axes, int count, bool keepdims);
/* Indices (i64) of the first maximum/minimum along one axis. */
fl_tensor *fl_argmax(const fl_tensor *t, int axis, bool keepdims);
fl_tensor *fl_argmin(const fl_tensor *t, int axis, bool keepdims);
/* Values and indices of the maximum/minimum along one axis (torch.max(t, dim)).
 * Either output pointer may be NULL. */
fl_status fl_max_along(const fl_tensor *t, int axis, bool keepdims, fl_tensor **values, fl_tensor **indices);
fl_status fl_min_along(const fl_tensor *t, int axis, bool keepdims, fl_tensor **values, fl_tensor **indices);
fl_tensor *fl_cumsum(const fl_tensor *t, int axis);
/* A stable sort along axis; indices are i64. Either output pointer may be NULL. */
fl_status fl_sort(const fl_tensor *t, int axis, bool descending, fl_tensor **values, fl_tensor **indices);
/* The k largest (or smallest) along axis, in sorted order. */
fl_status fl_topk(const fl_tensor *t, int64_t k, int axis, bool largest, fl_tensor **values, fl_tensor **indices);

/* ---- composite functions -------------------------------------------------------- */

fl_tensor *fl_softmax(const fl_tensor *t, int axis);
fl_tensor *fl_log_softmax(const fl_tensor *t, int axis);
/* The gradient of cross-entropy with respect to the logits, given their log-softmax
 * log_probs (float) along axis: (exp(log_probs) - smoothing / C) scale, with
 * -(1 - smoothing) scale added at each target, C being the size of axis. index holds
 * each target's class (i64, in [0, C)) and scale each target's factor (the loss's
 * gradient times the target's weight, log_probs's dtype); both have log_probs's shape
 * with axis of size 1. smoothing is in [0, 1]. One pass where the backend has the
 * fused kernel (backend.h, cross_entropy_backward) and axis is the last; else exp, a
 * product and a scatter_add. */
fl_tensor *fl_cross_entropy_backward(const fl_tensor *log_probs, int axis, const fl_tensor *index,
                                     const fl_tensor *scale, double smoothing);
/* GELU(x) = x Phi(x), or with approximate its tanh form 0.5 x (1 + tanh(sqrt(2/pi)
 * (x + 0.044715 x^3))), as PyTorch's gelu(approximate="none"/"tanh"); float x.
 * fl_gelu_backward is dy GELU'(x), dy of x's shape and dtype. */
fl_tensor *fl_gelu(const fl_tensor *x, bool approximate);
fl_tensor *fl_gelu_backward(const fl_tensor *x, const fl_tensor *dy, bool approximate);
/* One step of an LSTM cell, as PyTorch's LSTM computes it: pre [N, 4H] holds the
 * preactivations of the gates i, f, g, o (x W_ih^T + h W_hh^T + biases) and c_prev
 * [N, H] the cell state, of one float dtype. *gates [N, 4H] receives sigmoid(i),
 * sigmoid(f), tanh(g), sigmoid(o); *c = f c_prev + i g; *h = o tanh(c). Any output
 * pointer may be NULL. One pass where the backend has the fused kernel (backend.h,
 * lstm_cell), else composed. */
fl_status fl_lstm_cell(const fl_tensor *pre, const fl_tensor *c_prev, fl_tensor **gates, fl_tensor **c,
                       fl_tensor **h);
/* The gradients of fl_lstm_cell: from dh and dc [N, H] (the gradients reaching h, and
 * c from elsewhere than h), the step's gates and c and c_prev, *dpre [N, 4H] and
 * *dc_prev [N, H]. Either output pointer may be NULL. */
fl_status fl_lstm_cell_backward(const fl_tensor *dh, const fl_tensor *dc, const fl_tensor *gates,
                                const fl_tensor *c_prev, const fl_tensor *c, fl_tensor **dpre, fl_tensor **dc_prev);
/* Every step of one LSTM layer: xproj [T, N, 4H] holds each step's input projection
 * (x_t W_ih^T), bias [4H] the biases (b_ih + b_hh, or NULL), h0 and c0 [N, H] the
 * initial states and w_hh [4H, H] the recurrent weights, all of one float dtype.
 * Step t's preactivations are (xproj[t] + bias) + h_prev w_hh^T, then fl_lstm_cell; the steps run forward in time, or
 * backward if reverse. *states [2T, N, H] receives h_t at t and c_t at T + t, *gates
 * [T, N, 4H] each step's activated gates (NULL if not wanted). One call where the
 * backend has the fused recurrence (backend.h, lstm_sequence), else a product and a
 * cell per step. */
fl_status fl_lstm_sequence(const fl_tensor *xproj, const fl_tensor *bias, const fl_tensor *h0, const fl_tensor *c0,
                           const fl_tensor *w_hh, bool reverse, fl_tensor **states, fl_tensor **gates);
/* The gradients of fl_lstm_sequence from dstates [2T, N, H] (what reaches each h_t
 * and, from elsewhere than h, each c_t), given its states and gates: *dxproj
 * [T, N, 4H], *dh0 and *dc0 [N, H] (any may be NULL). The gradient of w_hh is
 * dxproj^T times the state before each step, summed over steps and batch; the bias's
 * is dxproj summed over steps and batch. */
fl_status fl_lstm_sequence_backward(const fl_tensor *dstates, const fl_tensor *states, const fl_tensor *gates,
                                    const fl_tensor *h0, const fl_tensor *c0, const fl_tensor *w_hh, bool reverse,
                                    fl_tensor **dxproj, fl_tensor **dh0, fl_tensor **dc0);

/* ---- linear algebra and convolution --------------------------------------------- */

/* numpy.matmul: 1-D operands are promoted to matrices, batch dimensions broadcast. */
fl_tensor *fl_matmul(const fl_tensor *a, const fl_tensor *b);
/* torch.nn.functional.linear: x [..., in] weight^T + bias, with weight [out, in] and
 * bias [out] (NULL for none), giving [..., out]. Operands of mixed dtypes promote as
 * fl_matmul's and fl_add's do. */
fl_tensor *fl_linear(const fl_tensor *x, const fl_tensor *weight, const fl_tensor *bias);

typedef struct fl_conv_params {
    int stride[2];   /* {height, width}; a zero means 1 */
    int padding[2];  /* zero padding on both sides */
    int dilation[2]; /* a zero means 1 */
    int groups;      /* a zero means 1 */
} fl_conv_params;

/* x [N, C, H, W] with weight [K, C/groups, R, S] gives [N, K, P, Q]. No bias: add it. */
fl_tensor *fl_conv2d(const fl_tensor *x, const fl_tensor *weight, const fl_conv_params *params);
/* The gradient of conv2d with respect to x (a transposed convolution of dy). */
fl_tensor *fl_conv2d_backward_input(const fl_tensor *dy, const fl_tensor *weight, const int64_t *x_shape,
                                    const fl_conv_params *params);
/* The gradient of conv2d with respect to the weight. */
fl_tensor *fl_conv2d_backward_weight(const fl_tensor *x, const fl_tensor *dy, const int64_t *weight_shape,
                                     const fl_conv_params *params);
/* The 1-D forms use index 1 ({*, width}) of the 2-D parameters: x [N, C, L], weight [K, C/groups, S]. */
fl_tensor *fl_conv1d(const fl_tensor *x, const fl_tensor *weight, const fl_conv_params *params);
fl_tensor *fl_conv1d_backward_input(const fl_tensor *dy, const fl_tensor *weight, const int64_t *x_shape,
                                    const fl_conv_params *params);
fl_tensor *fl_conv1d_backward_weight(const fl_tensor *x, const fl_tensor *dy, const int64_t *weight_shape,
                                     const fl_conv_params *params);

typedef enum fl_pool_kind { FL_POOL_MAX, FL_POOL_AVG } fl_pool_kind;

typedef struct fl_pool_params {
    fl_pool_kind kind;
    int kernel[2];
    int stride[2];   /* a zero means the kernel size, as in PyTorch */
    int padding[2];
    bool ceil_mode;
    bool count_include_pad; /* average pooling: divide by the whole window */
} fl_pool_params;

/* x [N, C, H, W]. Max pooling pads with -inf. */
fl_tensor *fl_pool2d(const fl_tensor *x, const fl_pool_params *params);
/* The gradient with respect to x; max pooling sends each gradient to the first
 * maximum of its window, as PyTorch does. */
fl_tensor *fl_pool2d_backward(const fl_tensor *dy, const fl_tensor *x, const fl_pool_params *params);

#ifdef __cplusplus
}
#endif

#endif
