/*
 * Matrix products, convolutions and pooling: shape checks, output sizes, dtype rules
 * and the reshapes that let one backend primitive serve several public functions
 * (conv1d is conv2d over a height of 1; a batch of matrices times one matrix is one
 * tall matrix product).
 *
 * Primitives see only f32 and f64. f16 and bf16 compute in f32 and the result is
 * cast back, as PyTorch does on CPU. Integer matmul (which PyTorch allows on CPU)
 * computes in f64 and is cast back: exact while every partial sum stays below 2^53,
 * where PyTorch's integer kernel would instead wrap around.
 */
#include <string.h>

#include "internal.h"

/* Every intermediate made here goes into a private scope through `own`; the caller's
 * result leaves it with fl_scope_return. */
static fl_tensor *own(fl_tensor *t) { return fl_out(t); }

/* Calls a primitive with two tensor inputs and an extra argument through a thunk. */
typedef int (*call_fn)(void *primitive, const fl_backend *backend, fl_tensor *out, const fl_tensor *a, const fl_tensor *b,
                       const void *extra);

static fl_tensor *dispatch(const char *fn, size_t offset, const char *entry, call_fn call, const fl_tensor *a,
                           const fl_tensor *b, const void *extra, fl_dtype dtype, int ndim, const int64_t *shape)
{
    void *primitive = fl__primitive(fn, a->backend, offset, entry);
    if (!primitive)
        return NULL;
    fl_tensor *out = fl__new(a->backend, dtype, ndim, shape);
    if (!out)
        return NULL;
    const fl_tensor *inputs[2] = {a, b};
    fl__begin(entry);
    return own(fl__finish(fn, out, call(primitive, a->backend, out, a, b, extra), b ? 2 : 1, inputs));
}

/* ---- matmul ---- */

static int call_matmul(void *p, const fl_backend *backend, fl_tensor *out, const fl_tensor *a,
                       const fl_tensor *b, const void *extra)
{
    return ((fl_binary_fn)p)(backend, out, a, b);
}

/* a [..., M, K] @ b [..., K, N] with operands already of the compute dtype. */
static fl_tensor *matmul_batched(const fl_tensor *a, const fl_tensor *b)
{
    const char *fn = "fl_matmul";
    int64_t M = a->shape[a->ndim - 2], K = a->shape[a->ndim - 1], N = b->shape[b->ndim - 1];
    /* One matrix on the right: fold a's batch into its rows, one large product. */
    if (b->ndim == 2 && a->ndim > 2 && K > 0) {
        fl_tensor *rows = own(fl__reshape(a, 2, (int64_t[]){a->numel / K, K}));
        fl_tensor *product = rows ? matmul_batched(rows, b) : NULL;
        int64_t shape[FL_MAX_DIMS];
        memcpy(shape, a->shape, sizeof shape);
        shape[a->ndim - 1] = N;
        return product ? own(fl__reshape(product, a->ndim, shape)) : NULL;
    }
    int ndim;
    int64_t shape[FL_MAX_DIMS], a_shape[FL_MAX_DIMS], b_shape[FL_MAX_DIMS];
    char da[FL_DESC_SIZE], db[FL_DESC_SIZE];
    if (!fl__broadcast_shapes(a->ndim - 2, a->shape, b->ndim - 2, b->shape, &ndim, shape))
        return fl_error(FL_ERR_SHAPE, fn, "batch dimensions of %s and %s do not broadcast", fl_describe(a, da),
                         fl_describe(b, db));
    memcpy(a_shape, shape, sizeof shape);
    memcpy(b_shape, shape, sizeof shape);
    a_shape[ndim] = M, a_shape[ndim + 1] = K;
    b_shape[ndim] = K, b_shape[ndim + 1] = N;
    shape[ndim] = M, shape[ndim + 1] = N;
    fl_tensor *ea = own(fl__expand(a, ndim + 2, a_shape));
    fl_tensor *eb = ea ? own(fl__expand(b, ndim + 2, b_shape)) : NULL;
    if (!eb)
        return NULL;
    return dispatch(fn, FL_PRIMITIVE(matmul), "matmul", call_matmul, ea, eb, NULL, a->dtype, ndim + 2, shape);
}

fl_tensor *fl_matmul(const fl_tensor *a, const fl_tensor *b)
{
    const char *fn = "fl_matmul";
    if (fl_null_args(fn, 2, a, b) || fl_mixed_backends(fn, 2, a, b))
        return NULL;
    char da[FL_DESC_SIZE], db[FL_DESC_SIZE];
    if (a->ndim == 0 || b->ndim == 0)
        return fl_error(FL_ERR_SHAPE, fn, "both operands need at least one dimension, got %s and %s",
                         fl_describe(a, da), fl_describe(b, db));
    fl_dtype result = fl_promote_types(a->dtype, b->dtype);
    if (result == FL_BOOL)
        return fl_error(FL_ERR_DTYPE, fn, "is not defined for bool tensors (%s, %s)", fl_describe(a, da),
                         fl_describe(b, db));
    int64_t K = a->shape[a->ndim - 1], Kb = b->shape[b->ndim == 1 ? 0 : b->ndim - 2];
    if (K != Kb)
        return fl_error(FL_ERR_SHAPE, fn, "inner dimensions do not match: %s @ %s (%lld != %lld)",
                         fl_describe(a, da), fl_describe(b, db), (long long)K, (long long)Kb);
    fl_dtype compute = fl_dtype_is_float(result) ? fl__compute_dtype(result) : FL_F64;

    fl_scope scope = fl_scope_begin();
    /* numpy.matmul: a vector on the left is a row, on the right a column; the added
     * axis is removed from the result. */
    fl_tensor *ca = own(fl__cast(a, compute)), *cb = ca ? own(fl__cast(b, compute)) : NULL;
    if (ca && a->ndim == 1)
        ca = own(fl__reshape(ca, 2, (int64_t[]){1, K}));
    if (cb && b->ndim == 1)
        cb = own(fl__reshape(cb, 2, (int64_t[]){K, 1}));
    fl_tensor *product = ca && cb ? matmul_batched(ca, cb) : NULL;
    if (product && (a->ndim == 1 || b->ndim == 1)) {
        int64_t shape[FL_MAX_DIMS];
        int ndim = product->ndim - 2;
        memcpy(shape, product->shape, sizeof shape);
        if (a->ndim != 1)
            shape[ndim++] = product->shape[product->ndim - 2];
        if (b->ndim != 1)
            shape[ndim++] = product->shape[product->ndim - 1];
        product = own(fl__reshape(product, ndim, shape));
    }
    if (product && result != compute)
        product = own(fl__cast(product, result));
    return fl_scope_return(scope, product);
}

/* ---- linear ---- */

/* The backend's fused kernel on x folded into rows: false where the backend declined
 * the call (nothing recorded); else *y is the result, or NULL after an error. */
static bool linear_fused(const fl_tensor *x, const fl_tensor *weight, const fl_tensor *bias, fl_tensor **y)
{
    const char *fn = "fl_linear";
    int64_t K = weight->shape[1], N = weight->shape[0], rows = 1;
    for (int i = 0; i < x->ndim - 1; i++)
        rows *= x->shape[i];
    const fl_tensor *in[3] = {fl_out(fl__reshape(x, 2, (int64_t[]){rows, K})), weight, bias};
    *y = NULL;
    if (!in[0])
        return true;
    fl__begin("linear");
    fl_tensor *out = fl__new(x->backend, x->dtype, 2, (int64_t[]){rows, N});
    if (!out) {
        fl__end();
        return true;
    }
    int rc = x->backend->linear(x->backend, out, in[0], weight, bias);
    if (fl__declined(rc)) {
        fl_release(out);
        return false;
    }
    out = fl_out(fl__finish(fn, out, rc, 3, in));
    int64_t shape[FL_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = N;
    *y = out ? fl_out(fl__reshape(out, x->ndim, shape)) : NULL;
    return true;
}

fl_tensor *fl_linear(const fl_tensor *x, const fl_tensor *weight, const fl_tensor *bias)
{
    const char *fn = "fl_linear";
    if (fl_null_args(fn, 2, x, weight) || fl_mixed_backends(fn, 3, x, weight, bias))
        return NULL;
    char dx[FL_DESC_SIZE], dw[FL_DESC_SIZE], db[FL_DESC_SIZE];
    if (x->ndim < 1 || weight->ndim != 2 || x->shape[x->ndim - 1] != weight->shape[1] ||
        (bias && (bias->ndim != 1 || bias->shape[0] != weight->shape[0])))
        return fl_error(FL_ERR_SHAPE, fn, "x %s, weight %s and bias %s do not make x [*, in] weight [out, in]^T + "
                        "bias [out]", fl_describe(x, dx), fl_describe(weight, dw), bias ? fl_describe(bias, db) : "none");
    fl_scope scope = fl_scope_begin();
    fl_tensor *y;
    /* Mixed dtypes take the composition, which promotes them. */
    bool fusable = bias && x->backend->linear && (x->dtype == FL_F32 || x->dtype == FL_F64) &&
                   weight->dtype == x->dtype && bias->dtype == x->dtype;
    if (!fusable || !linear_fused(x, weight, bias, &y)) {
        y = fl_matmul(x, fl_transpose(weight, 0, 1));
        if (y && bias)
            y = fl_add(y, bias);
    }
    return fl_scope_return(scope, y);
}

/* ---- convolution ---- */

static bool resolve_conv_params(const char *fn, const fl_conv_params *p, fl_conv2d_desc *d)
{
    static const fl_conv_params defaults;
    if (!p)
        p = &defaults;
    for (int i = 0; i < 2; i++) {
        if (p->stride[i] < 0 || p->dilation[i] < 0 || p->padding[i] < 0) {
            fl_error(FL_ERR_VALUE, fn, "stride, padding and dilation must not be negative (stride {%d, %d}, "
                     "padding {%d, %d}, dilation {%d, %d})", p->stride[0], p->stride[1], p->padding[0],
                      p->padding[1], p->dilation[0], p->dilation[1]);
            return false;
        }
        d->stride[i] = p->stride[i] ? p->stride[i] : 1;
        d->dilation[i] = p->dilation[i] ? p->dilation[i] : 1;
        d->padding[i] = p->padding[i];
    }
    if (p->groups < 0) {
        fl_error(FL_ERR_VALUE, fn, "groups must be positive, got %d", p->groups);
        return false;
    }
    d->groups = p->groups ? p->groups : 1;
    return true;
}

/* The 1-D functions use index 1 of the 2-D parameters over a height of 1. */
static bool resolve_conv1d_params(const char *fn, const fl_conv_params *p, fl_conv2d_desc *d)
{
    if (!resolve_conv_params(fn, p, d))
        return false;
    d->stride[0] = d->dilation[0] = 1;
    d->padding[0] = 0;
    return true;
}

/* Checks x [N, C, H, W] against weight [K, C/groups, R, S] and computes y's shape,
 * as PyTorch does. x_shown and w_shown describe the caller's own tensors (3-D for
 * conv1d) in messages. */
static bool conv_output_shape(const char *fn, const int64_t *x, const int64_t *w, const fl_conv2d_desc *d,
                              const char *x_shown, const char *w_shown, int64_t *y)
{
    int64_t channels;
    if (!fl_size_mul(w[1], d->groups, &channels) || x[1] != channels) {
        fl_error(FL_ERR_SHAPE, fn, "weight %s with groups=%d expects an input with %lld channels, got %s", w_shown,
                 d->groups, (long long)(w[1] * d->groups), x_shown);
        return false;
    }
    if (w[0] % d->groups != 0) {
        fl_error(FL_ERR_SHAPE, fn, "weight %s has %lld output channels, not divisible by groups=%d", w_shown,
                 (long long)w[0], d->groups);
        return false;
    }
    y[0] = x[0];
    y[1] = w[0];
    for (int i = 0; i < 2; i++) {
        int64_t padded = x[2 + i] + 2 * (int64_t)d->padding[i];
        int64_t extent = 0;
        if (w[2 + i] < 1 || !fl_size_mul(d->dilation[i], w[2 + i] - 1, &extent) || ++extent > padded) {
            fl_error(FL_ERR_SHAPE, fn, "kernel %s (dilated extent %lld) is larger than the padded input %s "
                     "(padding %d)", w_shown, (long long)extent, x_shown, d->padding[i]);
            return false;
        }
        y[2 + i] = (padded - extent) / d->stride[i] + 1;
    }
    return true;
}

/* Convolutions compute on floats of one dtype, as PyTorch's do. */
static bool conv_dtypes(const char *fn, const fl_tensor *a, const fl_tensor *b)
{
    char da[FL_DESC_SIZE], db[FL_DESC_SIZE];
    if (!fl_dtype_is_float(a->dtype) || a->dtype != b->dtype) {
        fl_error(FL_ERR_DTYPE, fn, "needs floating-point operands of one dtype, got %s and %s", fl_describe(a, da),
                  fl_describe(b, db));
        return false;
    }
    return true;
}

static bool check_ndim(const char *fn, const char *what, const fl_tensor *t, int ndim)
{
    char buf[FL_DESC_SIZE];
    if (t->ndim == ndim)
        return true;
    fl_error(FL_ERR_SHAPE, fn, "%s must have %d dimensions, got %s", what, ndim, fl_describe(t, buf));
    return false;
}

static bool check_shape_arg(const char *fn, const char *what, const int64_t *shape, int ndim)
{
    if (!shape) {
        fl_error(FL_ERR_NULL, fn, "%s is NULL", what);
        return false;
    }
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0) {
            char buf[FL_DESC_SIZE];
            fl_error(FL_ERR_SHAPE, fn, "%s %s has a negative size", what, fl_describe_shape(ndim, shape, buf));
            return false;
        }
    return true;
}

static bool same_shape_as(const char *fn, const char *what, const fl_tensor *t, int ndim, const int64_t *expected)
{
    char a[FL_DESC_SIZE], b[FL_DESC_SIZE];
    if (t->ndim == ndim && memcmp(t->shape, expected, (size_t)ndim * sizeof *expected) == 0)
        return true;
    fl_error(FL_ERR_SHAPE, fn, "%s is %s; the convolution's output shape is %s", what, fl_describe(t, a),
              fl_describe_shape(ndim, expected, b));
    return false;
}

typedef enum conv_op { CONV_FORWARD, CONV_BACKWARD_INPUT, CONV_BACKWARD_WEIGHT } conv_op;

static int call_conv(void *p, const fl_backend *backend, fl_tensor *out, const fl_tensor *a,
                     const fl_tensor *b, const void *d)
{
    return ((FL_ENTRY_TYPE(conv2d))p)(backend, out, a, b, d);
}

/* Runs one of the three convolution primitives on 4-D operands a and b (x and w, dy
 * and w, or x and dy), computing f16/bf16 in f32; out_shape has been checked. */
static fl_tensor *conv_dispatch(const char *fn, conv_op op, const fl_tensor *a, const fl_tensor *b,
                                const fl_conv2d_desc *d, const int64_t *out_shape)
{
    static const size_t offsets[] = {FL_PRIMITIVE(conv2d), FL_PRIMITIVE(conv2d_backward_input),
                                     FL_PRIMITIVE(conv2d_backward_weight)};
    static const char *names[] = {"conv2d", "conv2d_backward_input", "conv2d_backward_weight"};
    fl_dtype compute = fl__compute_dtype(a->dtype);
    fl_tensor *ca = own(fl__cast(a, compute)), *cb = ca ? own(fl__cast(b, compute)) : NULL;
    fl_tensor *out = cb ? dispatch(fn, offsets[op], names[op], call_conv, ca, cb, d, compute, 4, out_shape) : NULL;
    return out && compute != a->dtype ? own(fl__cast(out, a->dtype)) : out;
}

/* The three convolutions in 2-D form. `spatial` is 1 for the conv1d family, whose
 * operands arrive 3-D and are viewed as 4-D with a height of 1. */
static fl_tensor *convolve(const char *fn, conv_op op, const fl_tensor *a, const fl_tensor *b,
                           const int64_t *given_shape, const fl_conv_params *params, int spatial)
{
    static const char *operand_names[][2] = {{"x", "weight"}, {"dy", "weight"}, {"x", "dy"}};
    if (fl_null_args(fn, 2, a, b) || fl_mixed_backends(fn, 2, a, b))
        return NULL;
    int ndim = spatial + 2;
    fl_conv2d_desc d;
    if (!check_ndim(fn, operand_names[op][0], a, ndim) || !check_ndim(fn, operand_names[op][1], b, ndim) ||
        !conv_dtypes(fn, a, b) ||
        !(spatial == 2 ? resolve_conv_params(fn, params, &d) : resolve_conv1d_params(fn, params, &d)))
        return NULL;
    if (op == CONV_BACKWARD_INPUT && !check_shape_arg(fn, "x_shape", given_shape, ndim))
        return NULL;
    if (op == CONV_BACKWARD_WEIGHT && !check_shape_arg(fn, "weight_shape", given_shape, ndim))
        return NULL;

    /* The 4-D shapes of x, w and y; the 1-D forms gain a height of 1 after N and C. */
    int64_t shapes[3][4], given4[4];
    const int64_t *sources[3] = {a->shape, b->shape, given_shape};
    for (int i = 0; i < 3; i++) {
        const int64_t *s = sources[i];
        if (!s)
            continue;
        int64_t *t = i < 2 ? shapes[i] : given4;
        if (spatial == 2)
            memcpy(t, s, 4 * sizeof *t);
        else
            t[0] = s[0], t[1] = s[1], t[2] = 1, t[3] = s[2];
    }
    const int64_t *x = op == CONV_BACKWARD_INPUT ? given4 : shapes[0];
    const int64_t *w = op == CONV_FORWARD ? shapes[1] : op == CONV_BACKWARD_INPUT ? shapes[1] : given4;
    char x_shown[FL_DESC_SIZE], w_shown[FL_DESC_SIZE];
    if (op == CONV_BACKWARD_INPUT)
        fl_describe_shape(ndim, given_shape, x_shown);
    else
        fl_describe(a, x_shown);
    if (op == CONV_BACKWARD_WEIGHT)
        fl_describe_shape(ndim, given_shape, w_shown);
    else
        fl_describe(b, w_shown);
    int64_t y[4];
    if (!conv_output_shape(fn, x, w, &d, x_shown, w_shown, y) ||
        !fl_check_size(fn, a->dtype, 4, op == CONV_FORWARD ? y : op == CONV_BACKWARD_INPUT ? x : w))
        return NULL;
    int64_t y_shown[3] = {y[0], y[1], y[3]};
    if (op != CONV_FORWARD && !same_shape_as(fn, "dy", op == CONV_BACKWARD_INPUT ? a : b, ndim,
                                             spatial == 2 ? y : y_shown))
        return NULL;

    fl_scope scope = fl_scope_begin();
    fl_tensor *a4 = own(fl__reshape(a, 4, op == CONV_BACKWARD_INPUT ? y : shapes[0]));
    fl_tensor *b4 = a4 ? own(fl__reshape(b, 4, op == CONV_BACKWARD_WEIGHT ? y : shapes[1])) : NULL;
    const int64_t *out4 = op == CONV_FORWARD ? y : op == CONV_BACKWARD_INPUT ? x : w;
    fl_tensor *out = b4 ? conv_dispatch(fn, op, a4, b4, &d, out4) : NULL;
    if (out && spatial == 1)
        out = own(fl__reshape(out, 3, (int64_t[]){out4[0], out4[1], out4[3]}));
    return fl_scope_return(scope, out);
}

fl_tensor *fl_conv2d(const fl_tensor *x, const fl_tensor *weight, const fl_conv_params *params)
{
    return convolve("fl_conv2d", CONV_FORWARD, x, weight, NULL, params, 2);
}

fl_tensor *fl_conv2d_backward_input(const fl_tensor *dy, const fl_tensor *weight, const int64_t *x_shape,
                                    const fl_conv_params *params)
{
    return convolve("fl_conv2d_backward_input", CONV_BACKWARD_INPUT, dy, weight, x_shape, params, 2);
}

fl_tensor *fl_conv2d_backward_weight(const fl_tensor *x, const fl_tensor *dy, const int64_t *weight_shape,
                                     const fl_conv_params *params)
{
    return convolve("fl_conv2d_backward_weight", CONV_BACKWARD_WEIGHT, x, dy, weight_shape, params, 2);
}

fl_tensor *fl_conv1d(const fl_tensor *x, const fl_tensor *weight, const fl_conv_params *params)
{
    return convolve("fl_conv1d", CONV_FORWARD, x, weight, NULL, params, 1);
}

fl_tensor *fl_conv1d_backward_input(const fl_tensor *dy, const fl_tensor *weight, const int64_t *x_shape,
                                    const fl_conv_params *params)
{
    return convolve("fl_conv1d_backward_input", CONV_BACKWARD_INPUT, dy, weight, x_shape, params, 1);
}

fl_tensor *fl_conv1d_backward_weight(const fl_tensor *x, const fl_tensor *dy, const int64_t *weight_shape,
                                     const fl_conv_params *params)
{
    return convolve("fl_conv1d_backward_weight", CONV_BACKWARD_WEIGHT, x, dy, weight_shape, params, 1);
}

/* ---- pooling ---- */

/* PyTorch's pooling_output_shape: with ceil_mode the last window may hang over the
 * edge, but it must start inside the input or its left padding. */
static int64_t pooled_size(int64_t size, int kernel, int stride, int padding, bool ceil_mode)
{
    int64_t span = size + 2 * (int64_t)padding - kernel + (ceil_mode ? stride - 1 : 0);
    int64_t out = (span >= 0 ? span / stride : -((-span + stride - 1) / stride)) + 1;
    if (ceil_mode && (out - 1) * stride >= size + padding)
        out--;
    return out;
}

static bool resolve_pool(const char *fn, const fl_tensor *x, const fl_pool_params *p, fl_pool2d_desc *d,
                         int64_t *y)
{
    char buf[FL_DESC_SIZE];
    if (!p) {
        fl_error(FL_ERR_NULL, fn, "params is NULL (the kernel size has no default)");
        return false;
    }
    if (p->kind != FL_POOL_MAX && p->kind != FL_POOL_AVG) {
        fl_error(FL_ERR_VALUE, fn, "unknown pooling kind %d", (int)p->kind);
        return false;
    }
    if (!check_ndim(fn, "x", x, 4))
        return false;
    if (!fl_dtype_is_float(x->dtype)) {
        fl_error(FL_ERR_DTYPE, fn, "needs a floating-point input, got %s", fl_describe(x, buf));
        return false;
    }
    d->kind = p->kind;
    d->count_include_pad = p->count_include_pad;
    y[0] = x->shape[0];
    y[1] = x->shape[1];
    for (int i = 0; i < 2; i++) {
        if (p->kernel[i] <= 0 || p->stride[i] < 0 || p->padding[i] < 0) {
            fl_error(FL_ERR_VALUE, fn, "kernel {%d, %d} must be positive and stride {%d, %d} and padding {%d, %d} "
                     "not negative", p->kernel[0], p->kernel[1], p->stride[0], p->stride[1], p->padding[0],
                     p->padding[1]);
            return false;
        }
        if (p->padding[i] > p->kernel[i] / 2) {
            fl_error(FL_ERR_VALUE, fn, "padding {%d, %d} must be at most half of the kernel {%d, %d}",
                     p->padding[0], p->padding[1], p->kernel[0], p->kernel[1]);
            return false;
        }
        d->kernel[i] = p->kernel[i];
        d->stride[i] = p->stride[i] ? p->stride[i] : p->kernel[i];
        d->padding[i] = p->padding[i];
        y[2 + i] = pooled_size(x->shape[2 + i], d->kernel[i], d->stride[i], d->padding[i], p->ceil_mode);
        if (y[2 + i] < 1) {
            fl_error(FL_ERR_SHAPE, fn, "kernel {%d, %d} is larger than the padded input %s (padding {%d, %d})",
                      p->kernel[0], p->kernel[1], fl_describe(x, buf), p->padding[0], p->padding[1]);
            return false;
        }
    }
    return true;
}

static int call_pool(void *p, const fl_backend *backend, fl_tensor *out, const fl_tensor *x, const fl_tensor *unused, const void *d)
{
    return ((FL_ENTRY_TYPE(pool2d))p)(backend, out, x, d);
}

static int call_pool_backward(void *p, const fl_backend *backend, fl_tensor *out, const fl_tensor *dy, const fl_tensor *x,
                              const void *d)
{
    return ((FL_ENTRY_TYPE(pool2d_backward))p)(backend, out, dy, x, d);
}

fl_tensor *fl_pool2d(const fl_tensor *x, const fl_pool_params *params)
{
    const char *fn = "fl_pool2d";
    fl_pool2d_desc d;
    int64_t y[4];
    if (fl_null_args(fn, 1, x) || !resolve_pool(fn, x, params, &d, y))
        return NULL;
    fl_dtype compute = fl__compute_dtype(x->dtype);
    fl_scope scope = fl_scope_begin();
    fl_tensor *cx = own(fl__cast(x, compute));
    fl_tensor *out = cx ? dispatch(fn, FL_PRIMITIVE(pool2d), "pool2d", call_pool, cx, NULL, &d, compute, 4, y) : NULL;
    if (out && compute != x->dtype)
        out = own(fl__cast(out, x->dtype));
    return fl_scope_return(scope, out);
}

fl_tensor *fl_pool2d_backward(const fl_tensor *dy, const fl_tensor *x, const fl_pool_params *params)
{
    const char *fn = "fl_pool2d_backward";
    fl_pool2d_desc d;
    int64_t y[4];
    char a[FL_DESC_SIZE], b[FL_DESC_SIZE];
    if (fl_null_args(fn, 2, dy, x) || fl_mixed_backends(fn, 2, dy, x) || !resolve_pool(fn, x, params, &d, y))
        return NULL;
    if (dy->dtype != x->dtype)
        return fl_error(FL_ERR_DTYPE, fn, "dy %s and x %s must have one dtype", fl_describe(dy, a),
                         fl_describe(x, b));
    if (dy->ndim != 4 || memcmp(dy->shape, y, sizeof y) != 0)
        return fl_error(FL_ERR_SHAPE, fn, "dy is %s; pooling %s gives %s", fl_describe(dy, a), fl_describe(x, b),
                         fl_describe_shape(4, y, (char[FL_DESC_SIZE]){0}));
    fl_dtype compute = fl__compute_dtype(x->dtype);
    fl_scope scope = fl_scope_begin();
    fl_tensor *cdy = own(fl__cast(dy, compute)), *cx = cdy ? own(fl__cast(x, compute)) : NULL;
    fl_tensor *out = cx ? dispatch(fn, FL_PRIMITIVE(pool2d_backward), "pool2d_backward", call_pool_backward, cdy, cx,
                                   &d, compute, 4, x->shape)
                        : NULL;
    if (out && compute != x->dtype)
        out = own(fl__cast(out, x->dtype));
    return fl_scope_return(scope, out);
}
