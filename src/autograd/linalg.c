/* Gradient of matmul, with NumPy's promotion of 1-D operands and broadcast batches. */
#include "internal.h"

typedef struct matmul_context {
    int a_ndim, b_ndim;
} matmul_context;

static fl_tensor *transpose_last(const fl_tensor *t) { return fl_transpose(t, -1, -2); }

/* Saved: a, b. With 1-D operands seen as [1, k] and [k, 1], dA = dY B^T and dB = A^T dY;
 * the engine sums broadcast batch axes away. */
static void matmul_grad(fl_grad *g)
{
    const matmul_context *c = g->context;
    const fl_tensor *a = g->saved[0], *b = g->saved[1];
    const fl_tensor *dy = g->output_grad;
    if (c->a_ndim == 1)
        a = fl_unsqueeze(a, 0), dy = fl_unsqueeze(dy, c->b_ndim == 1 ? 0 : -2);
    if (c->b_ndim == 1)
        b = fl_unsqueeze(b, 1), dy = fl_unsqueeze(dy, -1);
    if (g->needs_grad[0]) {
        fl_tensor *da = fl_matmul(dy, transpose_last(b));
        g->input_grads[0] = c->a_ndim == 1 ? fl_squeeze(da, -2) : da;
    }
    if (g->needs_grad[1]) {
        fl_tensor *db = fl_matmul(transpose_last(a), dy);
        g->input_grads[1] = c->b_ndim == 1 ? fl_squeeze(db, -1) : db;
    }
}

fl_variable *fl_v_matmul(fl_variable *a, fl_variable *b)
{
    if (fl_null_args("fl_v_matmul", 2, a, b))
        return NULL;
    fl_scope scope = fl_scope_begin();
    matmul_context c = {a->value->ndim, b->value->ndim};
    fl_variable *y = fl_v_record(fl_matmul(a->value, b->value), FL_VARS(a, b), matmul_grad,
                                 FL_SAVE(a->value, b->value), &c, sizeof c);
    return fl_v_scope_return(scope, y);
}
