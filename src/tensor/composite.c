/*
 * Composite functions: softmax and log-softmax, written with primitives only (max,
 * sub, exp, sum, div, log), so that replacing any of those in the backend table
 * changes these too; and the gradient of cross-entropy from a log-softmax (exp, mul
 * and scatter_add).
 *
 * Both shift by the maximum along the axis first, so that exp never overflows.
 * Over the last axis, a backend's optional fused softmax does the same in one pass;
 * these compositions remain the definition it is tested against.
 * Integers compute in f32; f16 and bf16 compute in f32 throughout and are rounded
 * once, at the end. A slice holding only -inf gives nan, as in PyTorch.
 */
#include "internal.h"

static fl_tensor *softmax(const char *fn, const fl_tensor *t, int axis, bool logarithm)
{
    int a;
    if (fl_null_args(fn, 1, t) || !fl_normalize_axis(fn, axis, t->ndim, &a))
        return NULL;
    fl_dtype result = fl_dtype_is_float(t->dtype) ? t->dtype : FL_DEFAULT_FLOAT;
    if (t->numel == 0) /* nothing to normalize (and no maximum to shift by) */
        return fl_cast(t, result);
    fl_scope scope = fl_scope_begin();
    fl_tensor *x = fl_cast(t, fl__compute_dtype(result));
    FL_ENTRY_TYPE(softmax) fused = t->backend->softmax;
    if (x && fused && a == t->ndim - 1 && (x->dtype == FL_F32 || x->dtype == FL_F64)) {
        fl__begin("softmax");
        fl_tensor *y = fl__new(x->backend, x->dtype, x->ndim, x->shape);
        if (!y) {
            fl__end();
            return fl_scope_return(scope, NULL);
        }
        int rc = fused(x->backend, y, x, logarithm);
        if (!fl__declined(rc)) {
            y = fl_out(fl__finish(fn, y, rc, 1, (const fl_tensor *const *)&x));
            return fl_scope_return(scope, fl_cast(y, result));
        }
        fl_release(y);
    }
    fl_tensor *shifted = fl_sub(x, fl_max(x, &a, 1, true));
    fl_tensor *exps = fl_exp(shifted);
    fl_tensor *sums = fl_sum(exps, &a, 1, true);
    fl_tensor *y = logarithm ? fl_sub(shifted, fl_log(sums)) : fl_div(exps, sums);
    return fl_scope_return(scope, fl_cast(y, result));
}

fl_tensor *fl_softmax(const fl_tensor *t, int axis) { return softmax("fl_softmax", t, axis, false); }
fl_tensor *fl_log_softmax(const fl_tensor *t, int axis) { return softmax("fl_log_softmax", t, axis, true); }

/* Whether index and scale have log_probs's shape with axis of size 1. */
static bool per_target(const fl_tensor *t, const fl_tensor *log_probs, int axis)
{
    if (t->ndim != log_probs->ndim)
        return false;
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] != (i == axis ? 1 : log_probs->shape[i]))
            return false;
    return true;
}

fl_tensor *fl_cross_entropy_backward(const fl_tensor *log_probs, int axis, const fl_tensor *index,
                                     const fl_tensor *scale, double smoothing)
{
    const char *fn = "fl_cross_entropy_backward";
    int a;
    if (fl_null_args(fn, 3, log_probs, index, scale) || fl_mixed_backends(fn, 3, log_probs, index, scale) ||
        !fl_normalize_axis(fn, axis, log_probs->ndim, &a))
        return NULL;
    char d[3][FL_DESC_SIZE];
    if (!fl_dtype_is_float(log_probs->dtype) || index->dtype != FL_I64 || scale->dtype != log_probs->dtype)
        return fl_error(FL_ERR_DTYPE, fn, "needs float log_probs, i64 index and scale of log_probs's dtype, got %s, %s "
                        "and %s", fl_describe(log_probs, d[0]), fl_describe(index, d[1]), fl_describe(scale, d[2]));
    if (!per_target(index, log_probs, a) || !per_target(scale, log_probs, a))
        return fl_error(FL_ERR_SHAPE, fn, "needs index and scale of log_probs's shape with axis %d of size 1, got "
                        "%s, %s and %s", a, fl_describe(log_probs, d[0]), fl_describe(index, d[1]),
                        fl_describe(scale, d[2]));
    if (!(smoothing >= 0 && smoothing <= 1))
        return fl_error(FL_ERR_VALUE, fn, "smoothing %g is not in [0, 1]", smoothing);
    int64_t classes = log_probs->shape[a];
    fl_scope scope = fl_scope_begin();
    /* checked here, as every index operation checks its own: the kernel relies on it */
    index = fl_out(fl__checked_index(fn, index, log_probs, a, classes));
    if (!index)
        return fl_scope_return(scope, NULL);
    FL_ENTRY_TYPE(cross_entropy_backward) fused = log_probs->backend->cross_entropy_backward;
    if (fused && a == log_probs->ndim - 1 && classes > 0 && (log_probs->dtype == FL_F32 || log_probs->dtype == FL_F64)) {
        int64_t rows = log_probs->numel / classes;
        const fl_tensor *in[3] = {fl_reshape(log_probs, 2, (int64_t[]){rows, classes}),
                                  fl_reshape(index, 2, (int64_t[]){rows, 1}), fl_reshape(scale, 2, (int64_t[]){rows, 1})};
        if (!in[0] || !in[1] || !in[2])
            return fl_scope_return(scope, NULL);
        fl__begin("cross_entropy_backward");
        fl_tensor *dx = fl__new(log_probs->backend, log_probs->dtype, 2, in[0]->shape);
        if (!dx) {
            fl__end();
            return fl_scope_return(scope, NULL);
        }
        int rc = fused(log_probs->backend, dx, in[0], in[1], in[2], smoothing);
        if (!fl__declined(rc)) {
            dx = fl__finish(fn, dx, rc, 3, in);
            return fl_scope_return(scope, dx ? fl_reshape(fl_out(dx), log_probs->ndim, log_probs->shape) : NULL);
        }
        fl_release(dx);
    }
    fl_tensor *probs = fl_exp(log_probs);
    if (smoothing != 0)
        probs = fl_add_scalar(probs, -smoothing / (double)classes);
    fl_tensor *at_target = fl_mul_scalar(scale, -(1 - smoothing));
    return fl_scope_return(scope, fl_scatter_add(fl_mul(probs, scale), a, index, at_target));
}
