/* Embedding: rows of a weight matrix selected by index, with a gradient that adds
 * into the selected rows (and skips the padding row). */
#include <stdlib.h>

#include "internal.h"

typedef struct embedding_context {
    int64_t num, dim, padding_idx;
} embedding_context;

/* Saved: the flat indices. dW = zeros with each row of dy added at its index; rows
 * of the padding index contribute nothing. The zeros are a broadcast scalar, which the
 * scatter writes out once, instead of a [num, dim] tensor filled and then copied. */
static void embedding_grad(fl_grad *g)
{
    const embedding_context *c = g->context;
    const fl_tensor *index = g->saved[0];
    fl_tensor *dy = fl_reshape(g->output_grad, FL_SHAPE(-1, c->dim));
    if (c->padding_idx >= 0)
        dy = fl_where(fl_unsqueeze(fl_ne(index, fl_new_scalar(index, (double)c->padding_idx, fl_dtype_of(index))), 1),
                      dy, fl_new_scalar(dy, 0, fl_dtype_of(dy)));
    fl_tensor *rows = fl_expand(fl_unsqueeze(index, 1), FL_SHAPE(-1, c->dim));
    fl_tensor *zeros = fl_expand(fl_new_scalar(dy, 0, fl_dtype_of(dy)), FL_SHAPE(c->num, c->dim));
    g->input_grads[0] = fl_scatter_add(zeros, 0, rows, dy);
}

static fl_variable *embedding_forward(fl_module *m, fl_variable *x)
{
    const int64_t *padding_idx = fl_module_state(m);
    fl_variable *weight = fl_module_parameter(m, "weight");
    const fl_tensor *w = fl_v_value(weight), *index = fl_v_value(x);
    if (fl_null_args("Embedding", 1, index))
        return NULL;
    if (fl_dtype_of(index) != FL_I64 && fl_dtype_of(index) != FL_I32) {
        char d[FL_DESC_SIZE];
        return fl_error(FL_ERR_DTYPE, "Embedding", "expects i64 or i32 indices, got %s", fl_describe(index, d));
    }
    embedding_context c = {fl_shape(w)[0], fl_shape(w)[1], *padding_idx};
    int64_t shape[FL_MAX_DIMS + 1];
    if (fl_ndim(index) >= FL_MAX_DIMS)
        return fl_error(FL_ERR_SHAPE, "Embedding", "indices of %d axes leave no room for the embedding axis",
                        fl_ndim(index));
    for (int i = 0; i < fl_ndim(index); i++)
        shape[i] = fl_shape(index)[i];
    shape[fl_ndim(index)] = c.dim;
    fl_scope scope = fl_scope_begin();
    fl_tensor *flat = fl_reshape(index, FL_SHAPE(-1));
    fl_tensor *y = fl_reshape(fl_index_select(w, 0, flat), fl_ndim(index) + 1, shape);
    return fl_v_scope_return(scope, fl_v_record(y, FL_VARS(weight), embedding_grad, FL_SAVE(flat), &c, sizeof c));
}

static const fl_module_type embedding_type = {.name = "Embedding", .forward = embedding_forward};

fl_module *fl_nn_embedding(int64_t num_embeddings, int64_t embedding_dim, int64_t padding_idx)
{
    const char *fn = "fl_nn_embedding";
    if (num_embeddings <= 0 || embedding_dim <= 0 || padding_idx < -1 || padding_idx >= num_embeddings)
        return fl_error(FL_ERR_VALUE, fn,
                        "%lld embeddings of %lld with padding index %lld: sizes must be positive and the padding "
                        "index a row or -1",
                        (long long)num_embeddings, (long long)embedding_dim, (long long)padding_idx);
    int64_t *state = malloc(sizeof *state);
    if (!state)
        return fl_error(FL_ERR_MEMORY, fn, "out of memory");
    *state = padding_idx;
    fl_module *m = fl_module_new(&embedding_type, state);
    fl_variable *w = fl__nn_parameter(m, "weight", FL_SHAPE(num_embeddings, embedding_dim));
    /* PyTorch: N(0, 1), then the padding row zeroed. */
    fl_status status = w ? fl_init_normal(w, 0, 1) : fl_last_status();
    if (status == FL_OK && padding_idx >= 0) {
        fl_scope scope = fl_scope_begin();
        fl_tensor *zero_row = fl_zeros(FL_F32, FL_SHAPE(embedding_dim));
        status = fl_v_set_value(w, fl_index_assign(fl_v_value(w), FL_INDEX(FL_AT(padding_idx)), zero_row));
        fl_scope_end(scope);
    }
    if (status != FL_OK)
        fl_module_release(m), m = NULL;
    return m;
}
