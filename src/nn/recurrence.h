/* The recurrences of one LSTM or GRU layer in one direction, each a single node on the
 * tape with its own backpropagation through time (src/nn/recurrence.c). The input
 * projection of every time step is computed before, in one matmul (src/nn/rnn.c). */
#ifndef FLARE_NN_RECURRENCE_H
#define FLARE_NN_RECURRENCE_H

#include "flare/autograd.h"

/* xproj [T, N, 4H]: x W_ih^T, gates in PyTorch's order i, f, g, o; bias [4H]: b_ih +
 * b_hh, or NULL (the recurrence adds it to each step, which saves a pass over xproj);
 * h0 and c0 [N, H], h0 NULL for zeros (then the gradient of w_hh leaves out the first
 * step, whose term is zero); w_hh [4H, H]. Gives [2T, N, H]: the hidden state h_t of
 * every step t at t, its cell state c_t at T + t (so that the hidden states are a
 * dense [T, N, H] view). reverse runs from t = T - 1 down to 0. */
fl_variable *fl__lstm_recurrence(fl_variable *xproj, fl_variable *bias, fl_variable *h0, fl_variable *c0,
                                 fl_variable *w_hh, bool reverse);

/* xproj [T, N, 3H]: x W_ih^T + b_ih, gates r, z, n; h0 [N, H]; w_hh [3H, H]; b_hh [3H]
 * or NULL. Gives the hidden states [T, N, H]. */
fl_variable *fl__gru_recurrence(fl_variable *xproj, fl_variable *h0, fl_variable *w_hh, fl_variable *b_hh,
                                bool reverse);

#endif
