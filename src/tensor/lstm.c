/*
 * One step of an LSTM cell and its gradient, and the recurrence of a whole layer and
 * its gradient: composed of primitives, which defines them, or the backend's
 * optional fused kernels (backend.h, lstm_cell and lstm_sequence) where it has them
 * for the dtype: one pass instead of about ten calls each way for a cell, one call
 * instead of a product and a cell per step for a layer.
 */
#include <stdlib.h>

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

/* Whether a fused entry's call went through (true: out holds its results or the
 * error is recorded); false when the backend declined it and nothing is left over. */
static bool fused_ran(const char *fn, int rc, int count, fl_tensor **out, int ninputs, const fl_tensor *const *inputs)
{
    if (fl__declined(rc)) {
        for (int k = 0; k < count; k++) {
            fl_release(out[k]);
            out[k] = NULL;
        }
        return false;
    }
    finish_all(fn, count, out, rc, ninputs, inputs);
    return true;
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
    if (!fused_ran(fn, rc, 3, out, 2, (const fl_tensor *const[]){pre, c_prev}))
        cell_composed(pre, c_prev, out);
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
    if (!fused_ran(fn, rc, 2, out, 3, (const fl_tensor *const[]){gates, dh, c}))
        cell_backward_composed(dh, dc, gates, c_prev, c, out);
    return hand_over(2, out, wanted);
}

/* ---- the recurrence of one layer ---- */

static fl_tensor *step_of(const fl_tensor *t, int64_t step) { return fl_index(t, FL_INDEX(FL_AT(step))); }

/* The step before step t in the order the recurrence runs, or -1 for its first. */
static int64_t step_before(int64_t t, int64_t steps, bool reverse)
{
    return reverse ? (t + 1 < steps ? t + 1 : -1) : t - 1;
}

/* A product and a cell per step; w_hh^T is made dense once, so that each step's small
 * product reads it row by row. */
static fl_status sequence_composed(const fl_tensor *xproj, const fl_tensor *bias, const fl_tensor *h0,
                                   const fl_tensor *c0, const fl_tensor *w_hh, bool reverse, fl_tensor **out)
{
    int64_t steps = xproj->shape[0];
    fl_tensor **parts = calloc((size_t)(3 * steps + 1), sizeof *parts); /* h_t, c_t, gates_t */
    if (!parts) {
        fl_error(FL_ERR_MEMORY, "fl_lstm_sequence", "no memory for %lld steps", (long long)steps);
        return fl_last_status();
    }
    fl_scope scope = fl_scope_begin();
    fl_tensor *w_t = fl_copy(fl_transpose(w_hh, 0, 1));
    bool ok = w_t != NULL;
    for (int64_t s = 0; ok && s < steps; s++) {
        int64_t t = reverse ? steps - 1 - s : s, before = step_before(t, steps, reverse);
        const fl_tensor *h_prev = before < 0 ? h0 : parts[before], *c_prev = before < 0 ? c0 : parts[steps + before];
        fl_scope step = fl_scope_begin(); /* a step's temporaries die with it */
        fl_tensor *gates = NULL, *c = NULL, *h = NULL, *x_t = step_of(xproj, t);
        if (bias)
            x_t = fl_add(x_t, bias);
        ok = fl_lstm_cell(fl_add(x_t, fl_matmul(h_prev, w_t)), c_prev, &gates, &c, &h) == FL_OK;
        parts[t] = fl_keep(h);
        parts[steps + t] = fl_keep(c);
        parts[2 * steps + t] = fl_keep(gates);
        fl_scope_end(step);
    }
    out[0] = ok ? fl_keep(fl_stack(parts, (int)(2 * steps), 0)) : NULL;
    out[1] = ok ? fl_keep(fl_stack(parts + 2 * steps, (int)steps, 0)) : NULL;
    fl_scope_end(scope);
    for (int64_t k = 0; k < 3 * steps; k++)
        fl_release(parts[k]);
    free(parts);
    return out[0] && out[1] ? FL_OK : fl_last_status();
}

static fl_status sequence_backward_composed(const fl_tensor *dstates, const fl_tensor *states, const fl_tensor *gates,
                                            const fl_tensor *c0, const fl_tensor *w_hh, bool reverse, fl_tensor **out)
{
    int64_t steps = gates->shape[0];
    fl_tensor **dpre = calloc((size_t)steps + 1, sizeof *dpre), *dh_next = NULL, *dc_next = NULL;
    bool ok = dpre != NULL;
    for (int64_t s = 0; ok && s < steps; s++) {
        int64_t t = reverse ? s : steps - 1 - s, before = step_before(t, steps, reverse);
        fl_scope step = fl_scope_begin();
        fl_tensor *dh = step_of(dstates, t), *dc = step_of(dstates, steps + t);
        if (dh_next) {
            dh = fl_add(dh, dh_next);
            dc = fl_add(dc, dc_next);
        }
        const fl_tensor *c_prev = before < 0 ? c0 : step_of(states, steps + before);
        fl_tensor *d = NULL, *dc_prev = NULL;
        ok = fl_lstm_cell_backward(dh, dc, step_of(gates, t), c_prev, step_of(states, steps + t), &d, &dc_prev) ==
             FL_OK;
        dpre[t] = fl_keep(d);
        fl_tensor *dh_prev = ok ? fl_keep(fl_matmul(d, w_hh)) : NULL;
        dc_prev = fl_keep(dc_prev);
        fl_scope_end(step);
        fl_release(dh_next);
        fl_release(dc_next);
        dh_next = dh_prev;
        dc_next = dc_prev;
        ok = ok && dh_next && dc_next;
    }
    out[0] = ok ? fl_keep(fl_stack(dpre, (int)steps, 0)) : NULL;
    out[1] = out[0] ? dh_next : NULL;
    out[2] = out[0] ? dc_next : NULL;
    if (!out[0]) {
        fl_release(dh_next);
        fl_release(dc_next);
    }
    for (int64_t t = 0; dpre && t < steps; t++)
        fl_release(dpre[t]);
    free(dpre);
    return out[0] ? FL_OK : fl_last_status();
}

/* Checks the operands the forward and backward share; false after an error. */
static bool sequence_operands(const char *fn, const fl_tensor *xproj, const fl_tensor *h0, const fl_tensor *c0,
                              const fl_tensor *w_hh)
{
    char a[FL_DESC_SIZE], b[FL_DESC_SIZE], c[FL_DESC_SIZE], d[FL_DESC_SIZE];
    if (!fl_dtype_is_float(xproj->dtype)) {
        fl_error(FL_ERR_DTYPE, fn, "takes float tensors, got %s", fl_describe(xproj, a));
        return false;
    }
    int64_t n = xproj->ndim == 3 ? xproj->shape[1] : -1, h = xproj->ndim == 3 ? xproj->shape[2] / 4 : -1;
    if (xproj->ndim != 3 || xproj->shape[2] != 4 * h || !shaped(h0, n, h, xproj) || !shaped(c0, n, h, xproj) ||
        !shaped(w_hh, 4 * h, h, xproj)) {
        fl_error(FL_ERR_SHAPE, fn,
                 "needs [T, N, 4H], h0 and c0 [N, H] and w_hh [4H, H] of one dtype, got %s, h0 %s, c0 %s and "
                 "w_hh %s",
                 fl_describe(xproj, a), fl_describe(h0, b), fl_describe(c0, c), fl_describe(w_hh, d));
        return false;
    }
    return true;
}

fl_status fl_lstm_sequence(const fl_tensor *xproj, const fl_tensor *bias, const fl_tensor *h0, const fl_tensor *c0,
                           const fl_tensor *w_hh, bool reverse, fl_tensor **states, fl_tensor **gates)
{
    const char *fn = "fl_lstm_sequence";
    fl_tensor **wanted[2] = {states, gates};
    for (int k = 0; k < 2; k++)
        if (wanted[k])
            *wanted[k] = NULL;
    if (fl_null_args(fn, 4, xproj, h0, c0, w_hh) || fl_mixed_backends(fn, 5, xproj, h0, c0, w_hh, bias) ||
        !sequence_operands(fn, xproj, h0, c0, w_hh))
        return fl_last_status();
    if (bias && (bias->ndim != 1 || bias->shape[0] != xproj->shape[2] || bias->dtype != xproj->dtype)) {
        char a[FL_DESC_SIZE], d[FL_DESC_SIZE];
        fl_error(FL_ERR_SHAPE, fn, "needs bias [4H] of the dtype of %s, got %s", fl_describe(xproj, a),
                 fl_describe(bias, d));
        return fl_last_status();
    }
    fl_tensor *out[2] = {NULL, NULL};
    const fl_backend *b = xproj->backend;
    int64_t steps = xproj->shape[0];
    if (steps == 0) {
        out[0] = fl_keep(fl_new_full(xproj, 0, xproj->dtype, 3, (int64_t[]){0, h0->shape[0], h0->shape[1]}));
        out[1] = fl_keep(fl_new_full(xproj, 0, xproj->dtype, 3, xproj->shape));
        return hand_over(2, out, wanted);
    }
    if (b->lstm_sequence) {
        fl__begin("lstm_sequence");
        out[0] = fl__new(b, xproj->dtype, 3, (int64_t[]){2 * steps, h0->shape[0], h0->shape[1]});
        out[1] = fl__new(b, xproj->dtype, 3, xproj->shape);
        if (!out[0] || !out[1]) {
            fl__end();
            return hand_over(2, out, (fl_tensor **[]){NULL, NULL});
        }
        int rc = b->lstm_sequence(b, out[0], out[1], xproj, bias, h0, c0, w_hh, reverse);
        if (fused_ran(fn, rc, 2, out, 4, (const fl_tensor *const[]){xproj, h0, c0, w_hh}))
            return out[0] ? hand_over(2, out, wanted) : fl_last_status();
    }
    if (sequence_composed(xproj, bias, h0, c0, w_hh, reverse, out) != FL_OK)
        return hand_over(2, out, (fl_tensor **[]){NULL, NULL});
    return hand_over(2, out, wanted);
}

fl_status fl_lstm_sequence_backward(const fl_tensor *dstates, const fl_tensor *states, const fl_tensor *gates,
                                    const fl_tensor *h0, const fl_tensor *c0, const fl_tensor *w_hh, bool reverse,
                                    fl_tensor **dxproj, fl_tensor **dh0, fl_tensor **dc0)
{
    const char *fn = "fl_lstm_sequence_backward";
    fl_tensor **wanted[3] = {dxproj, dh0, dc0};
    for (int k = 0; k < 3; k++)
        if (wanted[k])
            *wanted[k] = NULL;
    if (fl_null_args(fn, 6, dstates, states, gates, h0, c0, w_hh) ||
        fl_mixed_backends(fn, 6, dstates, states, gates, h0, c0, w_hh) || !sequence_operands(fn, gates, h0, c0, w_hh))
        return fl_last_status();
    int64_t steps = gates->shape[0], n = gates->shape[1], h = gates->shape[2] / 4;
    const fl_tensor *state_like[2] = {dstates, states};
    static const char *const names[2] = {"dstates", "states"};
    for (int k = 0; k < 2; k++) {
        const fl_tensor *t = state_like[k];
        if (t->ndim != 3 || t->shape[0] != 2 * steps || t->shape[1] != n || t->shape[2] != h ||
            t->dtype != gates->dtype) {
            char a[FL_DESC_SIZE], b[FL_DESC_SIZE];
            fl_error(FL_ERR_SHAPE, fn, "needs %s [2T, N, H] of the dtype of gates %s, got %s", names[k],
                     fl_describe(gates, a), fl_describe(t, b));
            return fl_last_status();
        }
    }
    fl_tensor *out[3] = {NULL, NULL, NULL};
    const fl_backend *b = gates->backend;
    if (steps == 0) {
        out[0] = fl_keep(fl_new_full(gates, 0, gates->dtype, 3, gates->shape));
        out[1] = fl_keep(fl_new_full(gates, 0, gates->dtype, 2, h0->shape));
        out[2] = fl_keep(fl_new_full(gates, 0, gates->dtype, 2, h0->shape));
        return hand_over(3, out, wanted);
    }
    if (b->lstm_sequence_backward) {
        fl__begin("lstm_sequence_backward");
        out[0] = fl__new(b, gates->dtype, 3, gates->shape);
        out[1] = fl__new(b, gates->dtype, 2, h0->shape);
        out[2] = fl__new(b, gates->dtype, 2, h0->shape);
        if (!out[0] || !out[1] || !out[2]) {
            fl__end();
            return hand_over(3, out, (fl_tensor **[]){NULL, NULL, NULL});
        }
        int rc = b->lstm_sequence_backward(b, out[0], out[1], out[2], dstates, states, gates, h0, c0, w_hh, reverse);
        if (fused_ran(fn, rc, 3, out, 4, (const fl_tensor *const[]){dstates, states, gates, w_hh}))
            return out[0] ? hand_over(3, out, wanted) : fl_last_status();
    }
    if (sequence_backward_composed(dstates, states, gates, c0, w_hh, reverse, out) != FL_OK)
        return hand_over(3, out, (fl_tensor **[]){NULL, NULL, NULL});
    return hand_over(3, out, wanted);
}
