/*
 * One step of an LSTM cell and its gradient: composed of primitives, which defines
 * them, or the backend's optional fused kernels (backend.h, lstm_cell) where it has
 * them for the dtype: one pass instead of about ten calls each way.
 */
#include "internal.h"

/* t[:, from:to] of a [N, X] tensor (a view). */
static fl_tensor *columns(const fl_tensor *t, int64_t from, int64_t to)
{
    return fl_index(t, FL_INDEX(FL_SPAN, FL_RANGE(from, to)));
}

/* s - s^2 and 1 - t^2: the slopes of sigmoid and tanh from their outputs. */
static fl_tensor *sigmoid_slope(const fl_tensor *s) { return fl_sub(s, fl_square(s)); }
static fl_tensor *tanh_slope(const fl_tensor *t) { return fl_add_scalar(fl_neg(fl_square(t)), 1); }

/* Hands the owned results to the caller's scope, or releases those not wanted. */
static fl_status hand_over(int count, fl_tensor **owned, fl_tensor ***wanted)
{
    bool ok = true;
    for (int k = 0; k < count; k++)
        ok = ok && owned[k];
    for (int k = 0; k < count; k++) {
        if (ok && wanted[k])
            *wanted[k] = fl_out(owned[k]);
        else
            fl_release(owned[k]);
    }
    return ok ? FL_OK : fl_last_status();
}

static fl_status cell_composed(const fl_tensor *pre, const fl_tensor *c_prev, fl_tensor **out)
{
    int64_t h = c_prev->shape[1];
    fl_scope scope = fl_scope_begin();
    fl_tensor *sig = fl_sigmoid(pre);
    fl_tensor *i = columns(sig, 0, h), *f = columns(sig, h, 2 * h), *o = columns(sig, 3 * h, 4 * h);
    fl_tensor *g = fl_tanh(columns(pre, 2 * h, 3 * h));
    fl_tensor *c = fl_add(fl_mul(f, c_prev), fl_mul(i, g));
    out[0] = fl_keep(fl_concat((fl_tensor *[]){i, f, g, o}, 4, 1));
    out[1] = fl_keep(c);
    out[2] = fl_keep(fl_mul(o, fl_tanh(c)));
    fl_scope_end(scope);
    return FL_OK;
}

static fl_status cell_backward_composed(const fl_tensor *dh, const fl_tensor *dc, const fl_tensor *gates,
                                        const fl_tensor *c_prev, const fl_tensor *c, fl_tensor **out)
{
    int64_t h = c->shape[1];
    fl_scope scope = fl_scope_begin();
    fl_tensor *i = columns(gates, 0, h), *f = columns(gates, h, 2 * h), *g = columns(gates, 2 * h, 3 * h),
              *o = columns(gates, 3 * h, 4 * h);
    fl_tensor *t = fl_tanh(c);
    fl_tensor *total = fl_add(dc, fl_mul(fl_mul(dh, o), tanh_slope(t)));
    fl_tensor *parts[4] = {fl_mul(fl_mul(total, g), sigmoid_slope(i)), fl_mul(fl_mul(total, c_prev), sigmoid_slope(f)),
                           fl_mul(fl_mul(total, i), tanh_slope(g)), fl_mul(fl_mul(dh, t), sigmoid_slope(o))};
    out[0] = fl_keep(fl_concat(parts, 4, 1));
    out[1] = fl_keep(fl_mul(total, f));
    fl_scope_end(scope);
    return FL_OK;
}

/* Whether t is [rows, cols] of dtype on backend. */
static bool shaped(const fl_tensor *t, int64_t rows, int64_t cols, const fl_tensor *like)
{
    return t->ndim == 2 && t->shape[0] == rows && t->shape[1] == cols && t->dtype == like->dtype &&
           fl__same_backend(t, like);
}

static bool fusable(const fl_tensor *t, bool backward)
{
    const fl_backend *b = t->backend;
    return (backward ? b->lstm_cell_backward != NULL : b->lstm_cell != NULL) &&
           (t->dtype == FL_F32 || t->dtype == FL_F64);
}

/* Runs a fused kernel's outputs (count, made here) through fl__finish: on failure all
 * are released and the error recorded with the inputs. */
static fl_status finish_all(const char *fn, int count, fl_tensor **out, int rc, int ninputs,
                            const fl_tensor *const *inputs)
{
    if (rc)
        for (int k = 1; k < count; k++) {
            fl_release(out[k]);
            out[k] = NULL;
        }
    out[0] = fl__finish(fn, out[0], rc, ninputs, inputs);
    return out[0] ? FL_OK : fl_last_status();
}

fl_status fl_lstm_cell(const fl_tensor *pre, const fl_tensor *c_prev, fl_tensor **gates, fl_tensor **c,
                       fl_tensor **h)
{
    const char *fn = "fl_lstm_cell";
    fl_tensor **wanted[3] = {gates, c, h};
    for (int k = 0; k < 3; k++)
        if (wanted[k])
            *wanted[k] = NULL;
    if (fl_null_args(fn, 2, pre, c_prev) || fl_mixed_backends(fn, 2, pre, c_prev))
        return fl_last_status();
    char a[FL_DESC_SIZE], b[FL_DESC_SIZE];
    if (!fl_dtype_is_float(pre->dtype)) {
        fl_error(FL_ERR_DTYPE, fn, "takes float tensors, got pre %s", fl_describe(pre, a));
        return fl_last_status();
    }
    if (pre->ndim != 2 || pre->shape[1] % 4 != 0 || !shaped(c_prev, pre->shape[0], pre->shape[1] / 4, pre)) {
        fl_error(FL_ERR_SHAPE, fn, "needs pre [N, 4H] and c_prev [N, H] of one dtype, got pre %s and c_prev %s",
                 fl_describe(pre, a), fl_describe(c_prev, b));
        return fl_last_status();
    }
    fl_tensor *out[3] = {NULL, NULL, NULL};
    if (!fusable(pre, false)) {
        cell_composed(pre, c_prev, out);
        return hand_over(3, out, wanted);
    }
    fl__begin("lstm_cell");
    out[0] = fl__new(pre->backend, pre->dtype, 2, pre->shape);
    out[1] = fl__new(pre->backend, pre->dtype, 2, c_prev->shape);
    out[2] = fl__new(pre->backend, pre->dtype, 2, c_prev->shape);
    if (!out[0] || !out[1] || !out[2]) {
        fl__end();
        return hand_over(3, out, (fl_tensor **[]){NULL, NULL, NULL});
    }
    int rc = pre->backend->lstm_cell(pre->backend, out[0], out[1], out[2], pre, c_prev);
    if (finish_all(fn, 3, out, rc, 2, (const fl_tensor *const[]){pre, c_prev}) != FL_OK)
        return fl_last_status();
    return hand_over(3, out, wanted);
}

fl_status fl_lstm_cell_backward(const fl_tensor *dh, const fl_tensor *dc, const fl_tensor *gates,
                                const fl_tensor *c_prev, const fl_tensor *c, fl_tensor **dpre, fl_tensor **dc_prev)
{
    const char *fn = "fl_lstm_cell_backward";
    fl_tensor **wanted[2] = {dpre, dc_prev};
    for (int k = 0; k < 2; k++)
        if (wanted[k])
            *wanted[k] = NULL;
    if (fl_null_args(fn, 5, dh, dc, gates, c_prev, c) || fl_mixed_backends(fn, 5, dh, dc, gates, c_prev, c))
        return fl_last_status();
    char a[FL_DESC_SIZE], b[FL_DESC_SIZE];
    if (!fl_dtype_is_float(gates->dtype)) {
        fl_error(FL_ERR_DTYPE, fn, "takes float tensors, got gates %s", fl_describe(gates, a));
        return fl_last_status();
    }
    if (gates->ndim != 2 || gates->shape[1] % 4 != 0) {
        fl_error(FL_ERR_SHAPE, fn, "needs gates [N, 4H], got %s", fl_describe(gates, a));
        return fl_last_status();
    }
    const fl_tensor *states[4] = {dh, dc, c_prev, c};
    static const char *const names[4] = {"dh", "dc", "c_prev", "c"};
    for (int k = 0; k < 4; k++)
        if (!shaped(states[k], gates->shape[0], gates->shape[1] / 4, gates)) {
            fl_error(FL_ERR_SHAPE, fn, "needs %s [N, H] of the dtype of gates %s, got %s", names[k],
                     fl_describe(gates, a), fl_describe(states[k], b));
            return fl_last_status();
        }
    fl_tensor *out[2] = {NULL, NULL};
    if (!fusable(gates, true)) {
        cell_backward_composed(dh, dc, gates, c_prev, c, out);
        return hand_over(2, out, wanted);
    }
    fl__begin("lstm_cell_backward");
    out[0] = fl__new(gates->backend, gates->dtype, 2, gates->shape);
    out[1] = fl__new(gates->backend, gates->dtype, 2, c->shape);
    if (!out[0] || !out[1]) {
        fl__end();
        return hand_over(2, out, (fl_tensor **[]){NULL, NULL});
    }
    int rc = gates->backend->lstm_cell_backward(gates->backend, out[0], out[1], dh, dc, gates, c_prev, c);
    if (finish_all(fn, 2, out, rc, 3, (const fl_tensor *const[]){gates, dh, c}) != FL_OK)
        return fl_last_status();
    return hand_over(2, out, wanted);
}
