/* Losses: cross-entropy and NLL on class indices, and the elementwise MSE, L1, BCE
 * and BCE-with-logits; each one node with its gradient in closed form. */
#include <math.h>

#include "internal.h"

static const char *reduction_name(fl_reduction r)
{
    return r == FL_REDUCTION_MEAN ? "mean" : r == FL_REDUCTION_SUM ? "sum" : r == FL_REDUCTION_NONE ? "none" : NULL;
}

/* ---- class losses ---- */

typedef struct class_context {
    int class_axis;
    bool from_logits;
    double smoothing;
    int64_t classes;
} class_context;

/* Saved: log-probabilities, the target indices (ignored ones as 0) and each target's
 * weight (0 if ignored, 1 / count for the mean), both with the class axis kept.
 * With r = dy * weight: d(logits) = (softmax - s / C) r - (1 - s) r at the target
 * (fl_cross_entropy_backward: one pass where the backend has the fused kernel);
 * d(log-probabilities) = -r at the target, scattered into zeros. */
static void class_loss_grad(fl_grad *g)
{
    const class_context *c = g->context;
    const fl_tensor *log_probs = g->saved[0], *index = g->saved[1], *weight = g->saved[2];
    const fl_tensor *dy = g->output_grad;
    if (fl_ndim(dy) > 0)
        dy = fl_unsqueeze(dy, c->class_axis);
    fl_tensor *r = fl_mul(dy, weight);
    g->input_grads[0] = c->from_logits
                            ? fl_cross_entropy_backward(log_probs, c->class_axis, index, r, c->smoothing)
                            : fl_scatter_add(fl_zeros_like(log_probs), c->class_axis, index, fl_neg(r));
}

static fl_variable *class_loss(const char *fn, fl_variable *x, const fl_tensor *targets,
                               const fl_class_loss_options *options, bool from_logits)
{
    fl_class_loss_options o = options ? *options : FL_CLASS_LOSS_DEFAULTS;
    if (fl_null_args(fn, 2, x, targets) || fl_mixed_backends(fn, 2, fl_v_value(x), targets))
        return NULL;
    const fl_tensor *xv = fl_v_value(x);
    char dx[FL_DESC_SIZE], dt[FL_DESC_SIZE];
    if (!reduction_name(o.reduction) || !(o.label_smoothing >= 0 && o.label_smoothing <= 1) ||
        (!from_logits && o.label_smoothing != 0))
        return fl_error(FL_ERR_VALUE, fn, "reduction %d and label smoothing %g: %s", (int)o.reduction,
                        o.label_smoothing, from_logits ? "smoothing is in [0, 1]" : "NLL takes no smoothing");
    const char *what = from_logits ? "logits" : "log-probabilities";
    if (!fl_dtype_is_float(fl_dtype_of(xv)) || !fl_dtype_is_integer(fl_dtype_of(targets)))
        return fl_error(FL_ERR_DTYPE, fn, "%s %s and targets %s: expects floats and integer class indices (u8, i32 "
                        "or i64)", what, fl_describe(xv, dx), fl_describe(targets, dt));
    int ndim = fl_ndim(xv), class_axis = ndim == 1 ? 0 : 1;
    bool shapes_match = ndim >= 1 && fl_ndim(targets) == ndim - 1;
    for (int i = 0, j = 0; shapes_match && i < ndim; i++)
        if (i != class_axis && fl_shape(xv)[i] != fl_shape(targets)[j++])
            shapes_match = false;
    if (!shapes_match)
        return fl_error(FL_ERR_SHAPE, fn, "%s %s and targets %s: expects [N, C, d...] (or [C]) and [N, d...] (or [])",
                        what, fl_describe(xv, dx), fl_describe(targets, dt));
    int64_t classes = fl_shape(xv)[class_axis];
    fl_dtype dtype = fl_dtype_of(xv);
    fl_scope scope = fl_scope_begin();
    /* In i64 the ignore_index fits whatever the targets' dtype (u8 cannot hold -100). */
    const fl_tensor *wide = fl_dtype_of(targets) == FL_I64 ? targets : fl_cast(targets, FL_I64);
    double ignored = (double)o.ignore_index; /* 2^63 (from INT64_MAX) would not convert back */
    fl_tensor *kept =
        ignored < 0x1p63 ? fl_ne(wide, fl_new_scalar(wide, ignored, FL_I64)) : fl_cast(fl_ones_like(wide), FL_BOOL);
    fl_tensor *index = fl_unsqueeze(fl_where(kept, wide, fl_new_scalar(wide, 0, FL_I64)), class_axis);
    int64_t known_low, known_high;
    bool known = fl_known_bounds(index, &known_low, &known_high) && known_low >= 0 && known_high < classes;
    if (fl_numel(index) > 0 && index && !known) { /* read only what is not known to be good */
        double low = fl_item(fl_min(index, FL_ALL_AXES, false)), high = fl_item(fl_max(index, FL_ALL_AXES, false));
        if (low < 0 || high >= (double)classes) {
            fl_error(FL_ERR_INDEX, fn, "a target of %s is out of the %lld classes of %s", fl_describe(targets, dt),
                      (long long)classes, fl_describe(xv, dx));
            fl_scope_end(scope);
            return NULL;
        }
    }
    const fl_tensor *log_probs = from_logits ? fl_log_softmax(xv, class_axis) : xv;
    fl_tensor *loss = fl_neg(fl_gather(log_probs, class_axis, index));
    if (o.label_smoothing > 0) {
        fl_tensor *uniform = fl_neg(fl_mean(log_probs, FL_AXES(class_axis), true));
        loss = fl_add(fl_mul_scalar(loss, 1 - o.label_smoothing), fl_mul_scalar(uniform, o.label_smoothing));
    }
    fl_tensor *weight = fl_cast(fl_unsqueeze(kept, class_axis), dtype);
    loss = fl_mul(loss, weight);
    if (o.reduction == FL_REDUCTION_MEAN) {
        /* With every target ignored the mean is 0 / 0, nan as in PyTorch, and the
         * gradient is zero, as PyTorch's: the weights divide by at least 1. */
        fl_tensor *count = fl_sum(weight, FL_ALL_AXES, false);
        weight = fl_div(weight, fl_maximum_scalar(count, 1));
        loss = fl_div(fl_sum(loss, FL_ALL_AXES, false), count);
    } else if (o.reduction == FL_REDUCTION_SUM)
        loss = fl_sum(loss, FL_ALL_AXES, false);
    else
        loss = fl_squeeze(loss, class_axis);
    class_context c = {class_axis, from_logits, o.label_smoothing, classes};
    fl_variable *y =
        fl_v_record(loss, FL_VARS(x), class_loss_grad, FL_SAVE(log_probs, index, weight), &c, sizeof c);
    return fl_v_scope_return(scope, y);
}

fl_variable *fl_nn_cross_entropy(fl_variable *logits, const fl_tensor *targets, const fl_class_loss_options *options)
{
    return class_loss("fl_nn_cross_entropy", logits, targets, options, true);
}

fl_variable *fl_nn_nll_loss(fl_variable *log_probs, const fl_tensor *targets, const fl_class_loss_options *options)
{
    return class_loss("fl_nn_nll_loss", log_probs, targets, options, false);
}

/* ---- elementwise losses ---- */

typedef enum pointwise_kind { MSE, L1, BCE, BCE_WITH_LOGITS } pointwise_kind;

typedef struct pointwise_context {
    pointwise_kind kind;
    double scale; /* 1 / numel for the mean, else 1 */
} pointwise_context;

/* log(t) clamped at -100, as PyTorch's BCELoss does so that log(0) stays finite. */
static fl_tensor *clamped_log(const fl_tensor *t) { return fl_maximum_scalar(fl_log(t), -100); }

/* Saved: input x, target y. The derivatives of the per-element loss l(x, y):
 *   MSE (x - y)^2: 2 (x - y), -2 (x - y)         L1 |x - y|: sign(x - y), -sign(x - y)
 *   BCE: (x - y) / max(x (1 - x), 1e-12) (PyTorch's), log(1 - x) - log(x) (clamped)
 *   BCE with logits: sigmoid(x) - y, -x */
static void pointwise_grad(fl_grad *g)
{
    const pointwise_context *c = g->context;
    const fl_tensor *x = g->saved[0], *y = g->saved[1];
    fl_tensor *dy = fl_mul_scalar(g->output_grad, c->scale);
    fl_tensor *dx = NULL, *dt = NULL;
    switch (c->kind) {
    case MSE:
        dx = fl_mul_scalar(fl_sub(x, y), 2), dt = fl_neg(dx);
        break;
    case L1:
        dx = fl_sign(fl_sub(x, y)), dt = fl_neg(dx);
        break;
    case BCE:
        dx = fl_div(fl_sub(x, y), fl_maximum_scalar(fl_mul(x, fl_sub(fl_new_scalar(x, 1, fl_dtype_of(x)), x)), 1e-12));
        dt = fl_sub(clamped_log(fl_sub(fl_new_scalar(x, 1, fl_dtype_of(x)), x)), clamped_log(x));
        break;
    case BCE_WITH_LOGITS:
        dx = fl_sub(fl_sigmoid(x), y), dt = fl_neg(x);
        break;
    }
    if (g->needs_grad[0])
        g->input_grads[0] = fl_mul(dx, dy);
    if (g->needs_grad[1])
        g->input_grads[1] = fl_mul(dt, dy);
}

static fl_tensor *pointwise_loss(pointwise_kind kind, const fl_tensor *x, const fl_tensor *y)
{
    fl_tensor *one = fl_new_scalar(x, 1, fl_dtype_of(x));
    switch (kind) {
    case MSE:
        return fl_square(fl_sub(x, y));
    case L1:
        return fl_abs(fl_sub(x, y));
    case BCE:
        return fl_neg(fl_add(fl_mul(y, clamped_log(x)), fl_mul(fl_sub(one, y), clamped_log(fl_sub(one, x)))));
    case BCE_WITH_LOGITS:
        return fl_add(fl_sub(fl_maximum_scalar(x, 0), fl_mul(x, y)), fl_log1p(fl_exp(fl_neg(fl_abs(x)))));
    }
    return NULL;
}

static fl_variable *pointwise(const char *fn, pointwise_kind kind, fl_variable *input, fl_variable *target,
                              fl_reduction reduction)
{
    if (fl_null_args(fn, 2, input, target) || fl_mixed_backends(fn, 2, fl_v_value(input), fl_v_value(target)))
        return NULL;
    const fl_tensor *x = fl_v_value(input), *y = fl_v_value(target);
    if (!reduction_name(reduction))
        return fl_error(FL_ERR_VALUE, fn, "%d is not a reduction", (int)reduction);
    if (!fl_same_shape(x, y) || fl_dtype_of(x) != fl_dtype_of(y) || !fl_dtype_is_float(fl_dtype_of(x))) {
        char dx[FL_DESC_SIZE], dy[FL_DESC_SIZE];
        return fl_error(FL_ERR_SHAPE, fn, "input %s and target %s: expects floats of one shape and dtype",
                         fl_describe(x, dx), fl_describe(y, dy));
    }
    fl_scope scope = fl_scope_begin();
    fl_tensor *loss = pointwise_loss(kind, x, y);
    pointwise_context c = {kind, 1};
    if (reduction == FL_REDUCTION_MEAN)
        loss = fl_mean(loss, FL_ALL_AXES, false), c.scale = 1.0 / (double)fl_numel(x);
    else if (reduction == FL_REDUCTION_SUM)
        loss = fl_sum(loss, FL_ALL_AXES, false);
    fl_variable *result = fl_v_record(loss, FL_VARS(input, target), pointwise_grad, FL_SAVE(x, y), &c, sizeof c);
    return fl_v_scope_return(scope, result);
}

fl_variable *fl_nn_mse_loss(fl_variable *input, fl_variable *target, fl_reduction reduction)
{
    return pointwise("fl_nn_mse_loss", MSE, input, target, reduction);
}

fl_variable *fl_nn_l1_loss(fl_variable *input, fl_variable *target, fl_reduction reduction)
{
    return pointwise("fl_nn_l1_loss", L1, input, target, reduction);
}

fl_variable *fl_nn_bce_loss(fl_variable *probs, fl_variable *target, fl_reduction reduction)
{
    return pointwise("fl_nn_bce_loss", BCE, probs, target, reduction);
}

fl_variable *fl_nn_bce_with_logits_loss(fl_variable *logits, fl_variable *target, fl_reduction reduction)
{
    return pointwise("fl_nn_bce_with_logits_loss", BCE_WITH_LOGITS, logits, target, reduction);
}
