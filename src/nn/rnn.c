/* LSTM and GRU: PyTorch's nn.LSTM and nn.GRU, layer by layer and direction by direction.
 * The input projection of all time steps is one matmul; the recurrence is one node
 * (src/nn/recurrence.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "flare/extension.h"
#include "flare/nn.h"
#include "internal.h"
#include "recurrence.h"

typedef struct rnn_state {
    bool lstm; /* else GRU */
    int64_t input_size, hidden_size;
    int num_layers;
    bool bias, batch_first, bidirectional;
    double dropout;
} rnn_state;

static fl_variable *lstm_module_forward(fl_module *m, fl_variable *x);
static fl_variable *gru_module_forward(fl_module *m, fl_variable *x);

static fl_variable *lstm_forward_args(fl_module *m, const fl_module_args *args);
static fl_variable *gru_forward_args(fl_module *m, const fl_module_args *args);

static const fl_module_type lstm_type = {
    .name = "LSTM", .forward = lstm_module_forward, .forward_args = lstm_forward_args, .max_inputs = 3};
static const fl_module_type gru_type = {
    .name = "GRU", .forward = gru_module_forward, .forward_args = gru_forward_args, .max_inputs = 2};

static int directions(const rnn_state *st) { return st->bidirectional ? 2 : 1; }

static fl_variable *weight(fl_module *m, const char *kind, int layer, int direction)
{
    char name[64];
    snprintf(name, sizeof name, "%s_l%d%s", kind, layer, direction ? "_reverse" : "");
    return fl_module_parameter(m, name);
}

/* The initial state of one layer and direction: state[index], or zeros of x's dtype
 * and backend. */
static fl_variable *initial(fl_variable *state, int index, int64_t batch, int64_t hidden, const fl_tensor *x)
{
    if (state)
        return fl_v_index(state, FL_INDEX(FL_AT(index)));
    return fl_v_new(fl_new_full(x, 0, fl_dtype_of(x), FL_SHAPE(batch, hidden)), false);
}

static bool state_fits(const char *fn, const char *name, const fl_variable *state, int64_t layers, int64_t batch,
                       int64_t hidden, fl_dtype dtype)
{
    if (!state)
        return true;
    const fl_tensor *s = fl_v_value(state);
    char a[FL_DESC_SIZE];
    if (fl_ndim(s) != 3 || fl_dim(s, 0) != layers || fl_dim(s, 1) != batch || fl_dim(s, 2) != hidden)
        return fl_error(FL_ERR_SHAPE, fn, "%s must be [%lld, %lld, %lld], got %s", name, (long long)layers,
                         (long long)batch, (long long)hidden, fl_describe(s, a)),
               false;
    if (fl_dtype_of(s) != dtype)
        return fl_error(FL_ERR_DTYPE, fn, "%s must be %s as the input, got %s", name, fl_dtype_name(dtype),
                         fl_describe(s, a)),
               false;
    return true;
}

static void release_variable(void *v) { fl_v_release(v); }

/* Both forms of both modules. c0 and cn are for the LSTM only. */
static fl_status run(const char *fn, fl_module *m, const fl_module_type *type, fl_variable *x, fl_variable *h0,
                     fl_variable *c0, fl_variable **y, fl_variable **hn, fl_variable **cn)
{
    fl_variable **outs[3] = {y, hn, cn};
    for (int i = 0; i < 3; i++)
        if (outs[i])
            *outs[i] = NULL;
    if (fl_null_args(fn, 2, m, x))
        return fl_last_status();
    if (fl_module_type_of(m) != type)
        return fl_error(FL_ERR_VALUE, fn, "the module is a %s, not a %s", fl_module_type_of(m)->name, type->name),
               FL_ERR_VALUE;
    const rnn_state *st = fl_module_state(m);
    const fl_tensor *xt = fl_v_value(x);
    char a[FL_DESC_SIZE];
    if (fl_ndim(xt) != 3 || fl_dim(xt, 2) != st->input_size || fl_dim(xt, st->batch_first ? 1 : 0) < 1)
        return fl_error(FL_ERR_SHAPE, fn, "x must be %s with input_size %lld and at least one step, got %s",
                        st->batch_first ? "[N, T, input_size]" : "[T, N, input_size]", (long long)st->input_size,
                         fl_describe(xt, a)),
               FL_ERR_SHAPE;
    if (!fl_dtype_is_float(fl_dtype_of(xt)))
        return fl_error(FL_ERR_DTYPE, fn, "x must be floating, got %s", fl_describe(xt, a)), FL_ERR_DTYPE;
    int dirs = directions(st);
    int64_t batch = fl_dim(xt, st->batch_first ? 0 : 1), h = st->hidden_size, stacked = st->num_layers * dirs;
    fl_dtype dtype = fl_dtype_of(xt);
    if (!state_fits(fn, "h0", h0, stacked, batch, h, dtype) || !state_fits(fn, "c0", c0, stacked, batch, h, dtype))
        return fl_last_status();

    /* The last step of every layer and direction, for hn and cn. */
    fl_variable **finals_h = calloc((size_t)stacked * 2, sizeof *finals_h);
    if (!finals_h)
        return fl_error(FL_ERR_MEMORY, fn, "out of memory for the states of %lld layers", (long long)stacked),
               FL_ERR_MEMORY;
    fl_variable **finals_c = finals_h + stacked;
    fl_scope scope = fl_scope_begin();
    fl_variable *seq = st->batch_first ? fl_v_transpose(x, 0, 1) : x; /* [T, N, features] */
    int64_t last = fl_dim(xt, st->batch_first ? 1 : 0) - 1;
    for (int layer = 0; layer < st->num_layers; layer++) {
        fl_variable *outputs[2];
        for (int d = 0; d < dirs; d++) {
            int index = layer * dirs + d;
            int64_t end = d ? 0 : last; /* the step where this direction ends */
            fl_variable *b_ih = weight(m, "bias_ih", layer, d), *b_hh = weight(m, "bias_hh", layer, d);
            fl_variable *w_ih = weight(m, "weight_ih", layer, d);
            if (st->lstm) {
                /* Both biases enter the LSTM's gates the same way: add them once, and
                 * in the recurrence's steps rather than a pass over the projection. */
                fl_variable *xproj = fl_f_linear(seq, w_ih, NULL);
                fl_variable *out = fl__lstm_recurrence(xproj, st->bias ? fl_v_add(b_ih, b_hh) : NULL,
                                                       h0 ? initial(h0, index, batch, h, xt) : NULL,
                                                       initial(c0, index, batch, h, xt),
                                                       weight(m, "weight_hh", layer, d), d == 1);
                outputs[d] = fl_v_index(out, FL_INDEX(FL_RANGE(0, last + 1)));
                finals_h[index] = fl_v_index(out, FL_INDEX(FL_AT(end)));
                finals_c[index] = fl_v_index(out, FL_INDEX(FL_AT(last + 1 + end)));
            } else {
                /* The GRU's b_hn sits inside r * (W_hn h + b_hn): b_hh goes to the recurrence. */
                outputs[d] = fl__gru_recurrence(fl_f_linear(seq, w_ih, b_ih), initial(h0, index, batch, h, xt),
                                                weight(m, "weight_hh", layer, d), b_hh, d == 1);
                finals_h[index] = fl_v_index(outputs[d], FL_INDEX(FL_AT(end)));
            }
        }
        seq = dirs == 2 ? fl_v_concat(outputs, 2, -1) : outputs[0];
        if (layer + 1 < st->num_layers && st->dropout > 0 && fl_module_is_training(m))
            seq = fl_f_dropout(seq, st->dropout, true);
    }
    fl_variable *results[3] = {st->batch_first ? fl_v_transpose(seq, 0, 1) : seq,
                               hn ? fl_v_stack(finals_h, (int)stacked, 0) : NULL,
                               cn && st->lstm ? fl_v_stack(finals_c, (int)stacked, 0) : NULL};
    fl_status status = results[0] && (!hn || results[1]) && (!cn || !st->lstm || results[2]) ? FL_OK
                                                                                            : fl_last_status();
    for (int i = 0; i < 3; i++)
        if (results[i] && outs[i] && status == FL_OK)
            *outs[i] = fl_v_keep(results[i]);
    fl_scope_end(scope);
    free(finals_h);
    /* Hand the results to the caller's scope, as every function returning a variable. */
    for (int i = 0; i < 3; i++)
        if (outs[i] && *outs[i])
            fl_scope_own(*outs[i], release_variable);
    return status;
}

fl_status fl_nn_lstm_forward(fl_module *m, fl_variable *x, fl_variable *h0, fl_variable *c0, fl_variable **y,
                             fl_variable **hn, fl_variable **cn)
{
    return run("fl_nn_lstm_forward", m, &lstm_type, x, h0, c0, y, hn, cn);
}

fl_status fl_nn_gru_forward(fl_module *m, fl_variable *x, fl_variable *h0, fl_variable **y, fl_variable **hn)
{
    return run("fl_nn_gru_forward", m, &gru_type, x, h0, NULL, y, hn, NULL);
}

static fl_variable *lstm_module_forward(fl_module *m, fl_variable *x)
{
    fl_variable *y;
    return fl_nn_lstm_forward(m, x, NULL, NULL, &y, NULL, NULL) == FL_OK ? y : NULL;
}

static fl_variable *gru_module_forward(fl_module *m, fl_variable *x)
{
    fl_variable *y;
    return fl_nn_gru_forward(m, x, NULL, &y, NULL) == FL_OK ? y : NULL;
}

static fl_module *build(const char *fn, const fl_module_type *type, int gates, int64_t input_size,
                        int64_t hidden_size, int num_layers, bool bias, bool batch_first, double dropout_p,
                        bool bidirectional)
{
    if (input_size < 1 || hidden_size < 1 || num_layers < 1)
        return fl_error(FL_ERR_VALUE, fn, "input_size (%lld), hidden_size (%lld) and num_layers (%d) must be positive",
                        (long long)input_size, (long long)hidden_size, num_layers);
    if (!(dropout_p >= 0 && dropout_p <= 1))
        return fl_error(FL_ERR_VALUE, fn, "dropout must be in [0, 1], got %g", dropout_p);
    rnn_state *st = malloc(sizeof *st);
    if (!st)
        return fl_error(FL_ERR_MEMORY, fn, "out of memory");
    *st = (rnn_state){type == &lstm_type, input_size, hidden_size, num_layers, bias, batch_first, bidirectional,
                      dropout_p};
    fl_module *m = fl_module_new(type, st);
    fl_scope scope = fl_scope_begin();
    double bound = 1 / sqrt((double)hidden_size); /* PyTorch's reset_parameters */
    fl_status status = m ? FL_OK : fl_last_status();
    for (int layer = 0; layer < num_layers; layer++) {
        for (int d = 0; d < directions(st); d++) {
            int64_t in = layer == 0 ? input_size : hidden_size * directions(st), rows = gates * hidden_size;
            const char *kinds[4] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh"};
            int64_t shapes[4][2] = {{rows, in}, {rows, hidden_size}, {rows}, {rows}};
            for (int k = 0; k < (bias ? 4 : 2) && status == FL_OK; k++) {
                char name[64];
                snprintf(name, sizeof name, "%s_l%d%s", kinds[k], layer, d ? "_reverse" : "");
                fl_variable *p = fl__nn_parameter(m, name, k < 2 ? 2 : 1, shapes[k]);
                status = p ? fl_init_uniform(p, -bound, bound) : fl_last_status();
            }
        }
    }
    fl_scope_end(scope);
    if (status != FL_OK) {
        fl_module_release(m);
        return NULL;
    }
    return m;
}

fl_module *fl_nn_lstm(int64_t input_size, int64_t hidden_size, int num_layers, bool bias, bool batch_first,
                      double dropout, bool bidirectional)
{
    return build("fl_nn_lstm", &lstm_type, 4, input_size, hidden_size, num_layers, bias, batch_first, dropout,
                 bidirectional);
}

fl_module *fl_nn_gru(int64_t input_size, int64_t hidden_size, int num_layers, bool bias, bool batch_first,
                     double dropout, bool bidirectional)
{
    return build("fl_nn_gru", &gru_type, 3, input_size, hidden_size, num_layers, bias, batch_first, dropout,
                 bidirectional);
}

static fl_variable *lstm_forward_args(fl_module *m, const fl_module_args *args)
{
    fl_variable *y;
    return fl_nn_lstm_forward(m, args->inputs[0], args->inputs[1], args->inputs[2], &y, NULL, NULL) == FL_OK ? y
                                                                                                            : NULL;
}

static fl_variable *gru_forward_args(fl_module *m, const fl_module_args *args)
{
    fl_variable *y;
    return fl_nn_gru_forward(m, args->inputs[0], args->inputs[1], &y, NULL) == FL_OK ? y : NULL;
}
