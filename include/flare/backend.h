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
 * naming the backend and the primitive. Entries may be replaced at run time
 * (fl_backend_find("cpu")->add = my_add) and every layer above uses the replacement.
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
    fl_backend *backend;
    void *impl; /* the backend's state: storage, strides, a pending expression, ... */
};

typedef int (*fl_unary_fn)(fl_tensor *out, const fl_tensor *a);
typedef int (*fl_binary_fn)(fl_tensor *out, const fl_tensor *a, const fl_tensor *b);
/* axes is a bit mask of the axes to reduce (bit i for axis i). */
typedef int (*fl_reduce_fn)(fl_tensor *out, const fl_tensor *a, unsigned axes);

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

typedef enum fl_random_kind { FL_RANDOM_UNIFORM, FL_RANDOM_NORMAL } fl_random_kind;

struct fl_backend {
    const char *name;
    void *state; /* the backend's own, global state */

    /* -- housekeeping (not operations) -- */
    void (*release)(fl_tensor *t); /* frees t->impl */
    /* Materializes deferred work; NULL for eager backends. */
    int (*eval)(fl_tensor *t);

    /* -- data movement and creation -- */
    int (*from_host)(fl_tensor *out, const void *src); /* src is row-major, out's dtype */
    int (*to_host)(const fl_tensor *t, void *dst);
    int (*full)(fl_tensor *out, double value);
    int (*arange)(fl_tensor *out, double start, double step); /* out is 1-D */
    /* Philox-4x32-10 keyed by seed: element i uses counter offset + i / 4, lane i % 4;
     * normals come from Box-Muller on lanes (0,1) and (2,3). Uniform is [0, 1). */
    int (*random)(fl_tensor *out, fl_random_kind kind, uint64_t seed, uint64_t offset);
    int (*cast)(fl_tensor *out, const fl_tensor *a); /* any dtype to any; a dense copy */

    /* -- layout: views where the backend can -- */
    int (*reshape)(fl_tensor *out, const fl_tensor *a); /* same numel, row-major order */
    int (*permute)(fl_tensor *out, const fl_tensor *a, const int *axes);
    int (*expand)(fl_tensor *out, const fl_tensor *a); /* a's size-1 axes broadcast; same ndim */
    /* out[i...] = a[start + i * step ...]; steps may be negative, never zero. */
    int (*slice)(fl_tensor *out, const fl_tensor *a, const int64_t *start, const int64_t *step);
    /* out = base with base[start + i * step ...] replaced by src[i...]. */
    int (*update_slice)(fl_tensor *out, const fl_tensor *base, const fl_tensor *src, const int64_t *start,
                        const int64_t *step);
    int (*concat)(fl_tensor *out, const fl_tensor *const *inputs, int count, int axis);

    /* -- indexing (indices are i64, already checked to be in range) -- */
    int (*where)(fl_tensor *out, const fl_tensor *cond, const fl_tensor *a, const fl_tensor *b);
    int (*gather)(fl_tensor *out, const fl_tensor *a, int axis, const fl_tensor *index);
    int (*scatter_add)(fl_tensor *out, const fl_tensor *base, int axis, const fl_tensor *index,
                       const fl_tensor *src);
    int (*index_select)(fl_tensor *out, const fl_tensor *a, int axis, const fl_tensor *index);

    /* -- unary elementwise -- */
    fl_unary_fn neg, abs, sign;
    fl_unary_fn exp, log, log1p, sqrt, rsqrt, sin, cos, tanh, sigmoid, erf; /* float dtypes */
    fl_unary_fn floor, ceil, round;                                          /* float dtypes */
    fl_unary_fn isnan, isinf;     /* float in, bool out */
    fl_unary_fn logical_not;      /* bool in, bool out */

    /* -- binary elementwise -- */
    fl_binary_fn add, sub, mul, div, pow, minimum, maximum;
    fl_binary_fn eq, ne, lt, le;  /* bool out; gt and ge swap the operands of lt and le */
    fl_binary_fn logical_and, logical_or; /* bool in, bool out */

    /* -- reductions (out keeps reduced axes as size 1) -- */
    fl_reduce_fn sum, prod, max, min; /* out dtype == a's dtype */
    int (*argmax)(fl_tensor *out, const fl_tensor *a, int axis); /* out i64 */
    int (*argmin)(fl_tensor *out, const fl_tensor *a, int axis);
    int (*cumsum)(fl_tensor *out, const fl_tensor *a, int axis);
    /* Stable; values has a's dtype, indices are i64; both have a's shape. */
    int (*sort)(fl_tensor *values, fl_tensor *indices, const fl_tensor *a, int axis, bool descending);

    /* -- linear algebra, convolution, pooling (float dtypes) -- */
    /* a [..., M, K] times b [..., K, N] with equal batch shapes (possibly expanded). */
    fl_binary_fn matmul;
    int (*conv2d)(fl_tensor *out, const fl_tensor *x, const fl_tensor *w, const fl_conv2d_desc *d);
    int (*conv2d_backward_input)(fl_tensor *dx, const fl_tensor *dy, const fl_tensor *w, const fl_conv2d_desc *d);
    int (*conv2d_backward_weight)(fl_tensor *dw, const fl_tensor *x, const fl_tensor *dy,
                                  const fl_conv2d_desc *d);
    int (*pool2d)(fl_tensor *out, const fl_tensor *x, const fl_pool2d_desc *d);
    int (*pool2d_backward)(fl_tensor *dx, const fl_tensor *dy, const fl_tensor *x, const fl_pool2d_desc *d);

    /* -- optional fused kernels --
     * Each of these computes what the tensor layer also composes from the primitives
     * above, in one pass instead of several. A backend may leave any of them NULL and
     * the composition is used; the composition defines the semantics, and the tests
     * check each fused kernel against it. They exist where a composition cannot come
     * near a framework's fused kernel on speed (softmax: five passes over memory
     * against one). A researcher who replaces exp and wants softmax to follow sets
     * softmax to NULL. */
    /* softmax, or log-softmax if logarithm, over a's last axis; f32 and f64. It may
     * decline a call by returning FL_ERR_UNSUPPORTED: the tensor layer composes then. */
    int (*softmax)(fl_tensor *out, const fl_tensor *a, bool logarithm);
    /* Batch normalization of x [N, C, *] per channel (axis 1), f32 and f64; weight and
     * bias are [C] or NULL (no affine), all of x's dtype.
     * Training (running_mean and running_var NULL): the statistics are x's own, over
     * every axis but 1; save_mean and save_var ([C], out) receive their mean and biased
     * variance. Inference: the running statistics [C] are used and save_mean and
     * save_var are NULL. y = (x - mean) / sqrt(var + eps) weight + bias. */
    int (*batch_norm)(fl_tensor *y, fl_tensor *save_mean, fl_tensor *save_var, const fl_tensor *x,
                      const fl_tensor *weight, const fl_tensor *bias, const fl_tensor *running_mean,
                      const fl_tensor *running_var, double eps);
    /* The gradients of batch_norm from dy (x's shape): mean and invstd = 1 / sqrt(var +
     * eps) are [C], of the batch statistics (training: the gradient also flows through
     * them) or of the running ones (not training). dx (x's shape), dweight and
     * dbias ([C]) are outputs, each NULL when not wanted; weight may be NULL (as 1). */
    int (*batch_norm_backward)(fl_tensor *dx, fl_tensor *dweight, fl_tensor *dbias, const fl_tensor *dy,
                               const fl_tensor *x, const fl_tensor *mean, const fl_tensor *invstd,
                               const fl_tensor *weight, bool training);
    /* GELU of a (dy NULL), or its gradient dy * GELU'(a); the erf form, or the tanh
     * approximation if approximate; f32 and f64, dy of a's shape and dtype. */
    int (*gelu)(fl_tensor *out, const fl_tensor *a, const fl_tensor *dy, bool approximate);
};

/* The number of operation entries in struct fl_backend (everything after eval). */
int fl_backend_primitive_count(void);
/* The name of operation entry i, in table order, or NULL past the end. */
const char *fl_backend_primitive_name(int i);

/* Backends are registered by name; the first registered ("cpu") is the default
 * unless FLARE_BACKEND names another. Registration keeps the pointer: the table
 * must outlive its use, and replacing its entries changes every caller. */
fl_status fl_backend_register(fl_backend *backend);
fl_backend *fl_backend_find(const char *name);
fl_backend *fl_default_backend(void);
fl_status fl_set_default_backend(const char *name);

/* Records an error from inside a primitive; the tensor layer adds the operation,
 * shapes and dtypes. Returns status for convenience. */
int fl_backend_error(fl_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A new tensor handle on backend with the given metadata and no impl: for backends
 * that build outputs of their own (a fallback to another backend, say). */
fl_tensor *fl_tensor_alloc(fl_backend *backend, fl_dtype dtype, int ndim, const int64_t *shape);

/* IEEE half precision and bfloat16, rounding to nearest even; for casts. */
float fl_half_to_float(uint16_t h);
uint16_t fl_float_to_half(float f);
float fl_bf16_to_float(uint16_t b);
uint16_t fl_float_to_bf16(float f);

#ifdef __cplusplus
}
#endif

#endif
