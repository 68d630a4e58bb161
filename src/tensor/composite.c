/*
 * Composite functions: softmax and log-softmax, written with primitives only (max,
 * sub, exp, sum, div, log), so that replacing any of those in the backend table
 * changes these too.
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
        int rc = y ? fused(x->backend, y, x, logarithm) : FL_ERR_MEMORY;
        if (!fl__declined(rc)) {
            y = y ? fl_out(fl__finish(fn, y, rc, 1, (const fl_tensor *const *)&x)) : NULL;
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
