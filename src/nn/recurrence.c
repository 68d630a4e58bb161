/* The LSTM and GRU recurrences, each one node on the tape with its own
 * backpropagation through time.
 *
 * Recorded step by step, a layer of T steps would put about 15 nodes per step on the
 * tape, and slicing step t out of the input projection would give every step a
 * gradient the size of the whole sequence (T^2 memory). As one node, the forward keeps
 * only the activated gates and the states of every step; the backward walks the steps
 * in reverse, and the gradient of W_hh is one matmul over all steps at the end. The
 * LSTM's walks are fl_lstm_sequence and its gradient (src/tensor/lstm.c); the GRU's
 * run here, each step in a scope of its own, so temporaries die with their step. */
#include <stdlib.h>

#include "flare/extension.h"
#include "recurrence.h"

typedef struct recurrence_context {
    bool reverse;
    bool has_bias; /* LSTM: b_ih + b_hh is an input; GRU: b_hh is */
    bool zero_h0;  /* LSTM: h0 is zeros of the recurrence's own */
} recurrence_context;

static void release_tensor(void *t) { fl_release(t); }

/* Hands a tensor the caller owns to the innermost scope. */
static fl_tensor *to_scope(fl_tensor *owned) { return owned ? fl_scope_own(owned, release_tensor) : NULL; }

/* t[:, from:to] of a [N, X] tensor (a view). */
static fl_tensor *columns(const fl_tensor *t, int64_t from, int64_t to)
{
    return fl_index(t, FL_INDEX(FL_SPAN, FL_RANGE(from, to)));
}

static fl_tensor *step_of(const fl_tensor *t, int64_t time) { return fl_index(t, FL_INDEX(FL_AT(time))); }

/* The derivatives of sigmoid and tanh from their outputs. */
static fl_tensor *sigmoid_slope(const fl_tensor *s) { return fl_sub(s, fl_square(s)); }
static fl_tensor *tanh_slope(const fl_tensor *t) { return fl_add_scalar(fl_neg(fl_square(t)), 1); }

/* The state entering each step: states [T, N, H] shifted by one step against the
 * direction of the recurrence, initial [N, H] in the first step's place. */
static fl_tensor *previous_states(const fl_tensor *states, const fl_tensor *initial, bool reverse)
{
    int64_t steps = fl_dim(states, 0);
    fl_tensor *first = fl_unsqueeze(initial, 0);
    if (steps == 1)
        return first;
    fl_tensor *rest = fl_index(states, FL_INDEX(reverse ? FL_RANGE(1, FL_END) : FL_RANGE(0, steps - 1)));
    return fl_concat((fl_tensor *[]){reverse ? rest : first, reverse ? first : rest}, 2, 0);
}

/* The steps after the first in the direction of the recurrence (t > 0 forward,
 * t < T - 1 in reverse) of x [T, ...], and the steps before the last (their
 * previous states, from hidden states [T, N, H]): a dense view each. */
static fl_tensor *after_first(const fl_tensor *x, bool reverse)
{
    int64_t steps = fl_dim(x, 0);
    return fl_index(x, FL_INDEX(reverse ? FL_RANGE(0, steps - 1) : FL_RANGE(1, steps)));
}

static fl_tensor *before_last(const fl_tensor *x, bool reverse) { return after_first(x, !reverse); }

/* sum over steps and batch of d^T prev: d [T, N, G], prev [T, N, H] -> [G, H] */
static fl_tensor *summed_outer(const fl_tensor *d, const fl_tensor *prev)
{
    int64_t rows = fl_dim(d, 0) * fl_dim(d, 1);
    fl_tensor *d2 = fl_reshape(d, 2, (int64_t[]){rows, fl_dim(d, 2)});
    return fl_matmul(fl_transpose(d2, 0, 1), fl_reshape(prev, 2, (int64_t[]){rows, fl_dim(prev, 2)}));
}

/* Stacks the steps (owned, released here) along a new first axis. */
static fl_tensor *stack_steps(fl_tensor **steps, int64_t count)
{
    fl_tensor *stacked = fl_stack(steps, (int)count, 0);
    for (int64_t t = 0; t < count; t++)
        fl_release(steps[t]);
    free(steps);
    return stacked;
}

static fl_tensor **step_list(int64_t count)
{
    fl_tensor **list = calloc((size_t)(count > 0 ? count : 1), sizeof *list);
    return list ? list : fl_error(FL_ERR_MEMORY, "recurrence", "no memory for %lld steps", (long long)count);
}

/* ---- LSTM ---- */

/* saved: the output [2T, N, H] (h_t at t, c_t at T + t), h0, c0, w_hh and the
 * activated gates [T, N, 4H]. Inputs: xproj, h0, c0, w_hh, and the bias if any. */
static void lstm_grad(fl_grad *g)
{
    const recurrence_context *c = g->context;
    fl_tensor *out = g->saved[0], *h0 = g->saved[1], *c0 = g->saved[2], *w_hh = g->saved[3], *gates = g->saved[4];
    fl_tensor *dxproj = NULL, *dh0 = NULL, *dc0 = NULL;
    if (fl_lstm_sequence_backward(g->output_grad, out, gates, h0, c0, w_hh, c->reverse, &dxproj, &dh0, &dc0) != FL_OK)
        return;
    g->input_grads[0] = dxproj;
    g->input_grads[1] = dh0;
    g->input_grads[2] = dc0;
    if (g->needs_grad[3]) {
        /* With h0 zero the first step adds nothing, and leaving it out spares the
         * copy of every state behind h0 that previous_states makes. */
        int64_t steps = fl_dim(out, 0) / 2;
        fl_tensor *hidden = fl_index(out, FL_INDEX(FL_RANGE(0, steps)));
        g->input_grads[3] = c->zero_h0 ? summed_outer(after_first(dxproj, c->reverse), before_last(hidden, c->reverse))
                                       : summed_outer(dxproj, previous_states(hidden, h0, c->reverse));
    }
    if (c->has_bias && g->needs_grad[4])
        g->input_grads[4] = fl_sum(dxproj, FL_AXES(0, 1), false);
}

/* The whole recurrence is fl_lstm_sequence: the backend's fused kernel where it has
 * one, else a product with W_hh and the fused cell per step. */
fl_variable *fl__lstm_recurrence(fl_variable *xproj, fl_variable *bias, fl_variable *h0, fl_variable *c0,
                                 fl_variable *w_hh, bool reverse)
{
    if (fl_null_args("lstm recurrence", 3, xproj, c0, w_hh))
        return NULL;
    fl_scope scope = fl_scope_begin();
    bool zero_h0 = h0 == NULL;
    if (zero_h0)
        h0 = fl_v_new(fl_zeros_like(fl_v_value(c0)), false);
    fl_tensor *out = NULL, *gates = NULL;
    fl_variable *y = NULL;
    if (h0 && fl_lstm_sequence(fl_v_value(xproj), bias ? fl_v_value(bias) : NULL, fl_v_value(h0), fl_v_value(c0),
                               fl_v_value(w_hh), reverse, &out, &gates) == FL_OK) {
        recurrence_context c = {.reverse = reverse, .has_bias = bias != NULL, .zero_h0 = zero_h0};
        const fl_tensor *save[] = {out, fl_v_value(h0), fl_v_value(c0), fl_v_value(w_hh), gates};
        y = bias ? fl_v_record(out, FL_VARS(xproj, h0, c0, w_hh, bias), lstm_grad, save, 5, &c, sizeof c)
                 : fl_v_record(out, FL_VARS(xproj, h0, c0, w_hh), lstm_grad, save, 5, &c, sizeof c);
    }
    return fl_v_scope_return(scope, y);
}

/* ---- GRU ---- */

/* saved: r, z, n and W_hn h + b_hn of every step [T, N, 4H], the output [T, N, H], h0,
 * w_hh. */
static void gru_grad(fl_grad *g)
{
    const recurrence_context *c = g->context;
    fl_tensor *acts = g->saved[0], *out = g->saved[1], *h0 = g->saved[2], *w_hh = g->saved[3];
    int64_t steps = fl_dim(out, 0), h = fl_dim(h0, -1);
    fl_tensor *before = previous_states(out, h0, c->reverse);
    fl_tensor **dx = step_list(steps), **dhg = step_list(steps), *dh_next = NULL;
    for (int64_t s = steps - 1; dx && dhg && s >= 0; s--) {
        int64_t t = c->reverse ? steps - 1 - s : s;
        fl_scope step = fl_scope_begin();
        fl_tensor *dh = step_of(g->output_grad, t);
        if (dh_next)
            dh = fl_add(dh, dh_next);
        fl_tensor *a = step_of(acts, t);
        fl_tensor *r = columns(a, 0, h), *z = columns(a, h, 2 * h), *n = columns(a, 2 * h, 3 * h),
                  *hn = columns(a, 3 * h, 4 * h);
        fl_tensor *dn = fl_mul(fl_mul(dh, fl_add_scalar(fl_neg(z), 1)), tanh_slope(n));
        fl_tensor *dz = fl_mul(fl_mul(dh, fl_sub(step_of(before, t), n)), sigmoid_slope(z));
        fl_tensor *dr = fl_mul(fl_mul(dn, hn), sigmoid_slope(r));
        dx[t] = fl_keep(fl_concat((fl_tensor *[]){dr, dz, dn}, 3, 1));
        fl_tensor *d_hidden_gates = fl_concat((fl_tensor *[]){dr, dz, fl_mul(dn, r)}, 3, 1);
        dhg[t] = fl_keep(d_hidden_gates);
        fl_tensor *dh_prev = fl_keep(fl_add(fl_mul(dh, z), fl_matmul(d_hidden_gates, w_hh)));
        fl_scope_end(step);
        fl_release(dh_next);
        dh_next = dh_prev;
    }
    g->input_grads[0] = dx ? stack_steps(dx, steps) : NULL;
    g->input_grads[1] = to_scope(dh_next);
    fl_tensor *dhidden_gates = dhg ? stack_steps(dhg, steps) : NULL;
    if (g->needs_grad[2])
        g->input_grads[2] = summed_outer(dhidden_gates, before);
    if (c->has_bias && g->needs_grad[3])
        g->input_grads[3] = fl_sum(dhidden_gates, FL_AXES(0, 1), false);
}

fl_variable *fl__gru_recurrence(fl_variable *xproj, fl_variable *h0, fl_variable *w_hh, fl_variable *b_hh,
                                bool reverse)
{
    if (fl_null_args("gru recurrence", 3, xproj, h0, w_hh))
        return NULL;
    const fl_tensor *x = fl_v_value(xproj);
    int64_t steps = fl_dim(x, 0), h = fl_dim(fl_v_value(h0), -1);
    fl_tensor **acts = step_list(steps), **states = step_list(steps);
    fl_scope scope = fl_scope_begin();
    fl_tensor *w_t = fl_transpose(fl_v_value(w_hh), 0, 1);
    const fl_tensor *hidden = fl_v_value(h0);
    for (int64_t s = 0; acts && states && s < steps; s++) {
        int64_t t = reverse ? steps - 1 - s : s;
        fl_scope step = fl_scope_begin();
        fl_tensor *xg = step_of(x, t), *hg = fl_matmul(hidden, w_t);
        if (b_hh)
            hg = fl_add(hg, fl_v_value(b_hh));
        fl_tensor *rz = fl_sigmoid(fl_add(columns(xg, 0, 2 * h), columns(hg, 0, 2 * h)));
        fl_tensor *r = columns(rz, 0, h), *z = columns(rz, h, 2 * h), *hn = columns(hg, 2 * h, 3 * h);
        fl_tensor *n = fl_tanh(fl_add(columns(xg, 2 * h, 3 * h), fl_mul(r, hn)));
        states[t] = fl_keep(fl_add(n, fl_mul(z, fl_sub(hidden, n))));
        acts[t] = fl_keep(fl_concat((fl_tensor *[]){rz, n, hn}, 3, 1));
        fl_scope_end(step);
        if (!states[t])
            break;
        hidden = states[t];
    }
    fl_tensor *saved_acts = acts ? stack_steps(acts, steps) : NULL;
    fl_tensor *out = states ? stack_steps(states, steps) : NULL;
    recurrence_context c = {.reverse = reverse, .has_bias = b_hh != NULL};
    const fl_tensor *save[] = {saved_acts, out, fl_v_value(h0), fl_v_value(w_hh)};
    fl_variable *y = b_hh ? fl_v_record(out, FL_VARS(xproj, h0, w_hh, b_hh), gru_grad, save, 4, &c, sizeof c)
                          : fl_v_record(out, FL_VARS(xproj, h0, w_hh), gru_grad, save, 4, &c, sizeof c);
    return fl_v_scope_return(scope, y);
}
