/* Positional embeddings added to a sequence: the fixed sinusoids of "Attention is all
 * you need" and a learned table of positions. */
#include <math.h>
#include <stdlib.h>

#include "internal.h"

typedef struct positional_state {
    int64_t max_len, dim;
    bool batch_first;
} positional_state;

/* The sequence length of x, or -1 with the error recorded. */
static int64_t sequence_length(const fl_module *m, const fl_variable *x)
{
    const char *name = fl_module_type_of(m)->name;
    const positional_state *st = fl_module_state(m);
    if (fl_null_args(name, 1, x))
        return -1;
    const fl_tensor *t = fl_v_value(x);
    char d[FL_DESC_SIZE];
    if (!fl_dtype_is_float(fl_dtype_of(t)))
        return fl_error(FL_ERR_DTYPE, name, "expects a floating sequence, got %s", fl_describe(t, d)), -1;
    int seq_axis = st->batch_first ? 1 : 0;
    if (fl_ndim(t) != 3 || fl_dim(t, 2) != st->dim || fl_dim(t, seq_axis) > st->max_len)
        return fl_error(FL_ERR_SHAPE, name, "expects %s with E = %lld and L <= max_len = %lld, got %s",
                        st->batch_first ? "[N, L, E]" : "[L, N, E]", (long long)st->dim, (long long)st->max_len,
                        fl_describe(t, d)),
               -1;
    return fl_dim(t, seq_axis);
}

/* x + positions, the [L, E] positions laid out to broadcast over x's batch axis. */
static fl_variable *add_positions(const positional_state *st, fl_variable *x, fl_variable *positions, int64_t len)
{
    int64_t shape[3] = {1, len, st->dim};
    if (!st->batch_first)
        shape[0] = len, shape[1] = 1;
    return fl_v_add(x, fl_v_reshape(positions, 3, shape));
}

static fl_variable *sinusoidal_forward(fl_module *m, fl_variable *x)
{
    const positional_state *st = fl_module_state(m);
    int64_t len = sequence_length(m, x);
    if (len < 0)
        return NULL;
    double *table = malloc(sizeof *table * (size_t)(len * st->dim > 0 ? len * st->dim : 1));
    if (!table)
        return fl_error(FL_ERR_MEMORY, fl_module_type_of(m)->name, "out of memory");
    /* P[pos, 2i] = sin(pos / 10000^(2i / E)), P[pos, 2i + 1] = cos(the same angle);
     * computed in f64, then cast to x's dtype. */
    for (int64_t pos = 0; pos < len; pos++)
        for (int64_t j = 0; j < st->dim; j++) {
            double angle = (double)pos * exp(-(double)(j - j % 2) / (double)st->dim * log(10000.0));
            table[pos * st->dim + j] = j % 2 ? cos(angle) : sin(angle);
        }
    fl_scope scope = fl_scope_begin();
    const fl_tensor *t = fl_v_value(x);
    fl_tensor *positions = fl_from_data(table, FL_F64, 2, (int64_t[]){len, st->dim});
    free(table);
    positions = fl_to_backend(fl_cast(positions, fl_dtype_of(t)), fl_backend_name(t));
    return fl_v_scope_return(scope, add_positions(st, x, fl_v_new(positions, false), len));
}

static fl_variable *learned_forward(fl_module *m, fl_variable *x)
{
    const positional_state *st = fl_module_state(m);
    int64_t len = sequence_length(m, x);
    if (len < 0)
        return NULL;
    fl_variable *weight = fl_module_parameter(m, "weight");
    const fl_tensor *t = fl_v_value(x), *w = fl_v_value(weight);
    char a[FL_DESC_SIZE], b[FL_DESC_SIZE];
    if (fl_dtype_of(t) != fl_dtype_of(w))
        return fl_error(FL_ERR_DTYPE, fl_module_type_of(m)->name, "the sequence %s and the weight %s differ in dtype",
                        fl_describe(t, a), fl_describe(w, b));
    fl_scope scope = fl_scope_begin();
    fl_tensor *index = fl_to_backend(fl_arange(0, (double)len, 1, FL_I64), fl_backend_name(w));
    return fl_v_scope_return(scope, add_positions(st, x, fl_v_index_select(weight, 0, index), len));
}

static const fl_module_type sinusoidal_type = {.name = "SinusoidalPositionalEmbedding",
                                               .forward = sinusoidal_forward};
static const fl_module_type learned_type = {.name = "LearnedPositionalEmbedding", .forward = learned_forward};

static fl_module *positional(const fl_module_type *type, const char *fn, int64_t max_len, int64_t embedding_dim,
                             bool batch_first)
{
    if (max_len < 1 || embedding_dim < 1)
        return fl_error(FL_ERR_VALUE, fn, "max_len (%lld) and embedding_dim (%lld) must be positive",
                        (long long)max_len, (long long)embedding_dim);
    positional_state *st = malloc(sizeof *st);
    if (!st)
        return fl_error(FL_ERR_MEMORY, fn, "out of memory");
    *st = (positional_state){max_len, embedding_dim, batch_first};
    return fl_module_new(type, st);
}

fl_module *fl_nn_sinusoidal_positional_embedding(int64_t max_len, int64_t embedding_dim, bool batch_first)
{
    return positional(&sinusoidal_type, "fl_nn_sinusoidal_positional_embedding", max_len, embedding_dim, batch_first);
}

fl_module *fl_nn_learned_positional_embedding(int64_t max_len, int64_t embedding_dim, bool batch_first)
{
    fl_module *m =
        positional(&learned_type, "fl_nn_learned_positional_embedding", max_len, embedding_dim, batch_first);
    if (!m)
        return NULL;
    fl_variable *w = fl__nn_parameter(m, "weight", FL_SHAPE(max_len, embedding_dim));
    /* As an Embedding over positions: N(0, 1), PyTorch's nn.Embedding default. */
    if ((w ? fl_init_normal(w, 0, 1) : fl_last_status()) != FL_OK)
        fl_module_release(m), m = NULL;
    return m;
}

/* Rotary embedding, Hugging Face LLaMA's form: x * cos + rotate_half(x) * sin, where
 * column j of the [L, D] tables holds the angle (offset + pos) * base^(-2 (j mod D/2) / D)
 * and rotate_half(x) = concat(-x[..., D/2:], x[..., :D/2]). The tables are constants,
 * so the gradient is the same rotation transposed, through the variable ops. */
fl_variable *fl_f_rotary_embedding(fl_variable *x, int64_t offset, double base)
{
    const char *fn = "fl_f_rotary_embedding";
    if (fl_null_args(fn, 1, x))
        return NULL;
    const fl_tensor *t = fl_v_value(x);
    char d[FL_DESC_SIZE];
    if (!fl_dtype_is_float(fl_dtype_of(t)))
        return fl_error(FL_ERR_DTYPE, fn, "expects a floating tensor, got %s", fl_describe(t, d));
    int ndim = fl_ndim(t);
    if (ndim < 2 || fl_dim(t, ndim - 1) < 2 || fl_dim(t, ndim - 1) % 2 != 0)
        return fl_error(FL_ERR_SHAPE, fn, "expects [..., L, D] with D even (q or k as [N, heads, L, head_dim]), got %s",
                        fl_describe(t, d));
    if (offset < 0 || !(base > 0) || !isfinite(base))
        return fl_error(FL_ERR_VALUE, fn, "offset (%lld) must be >= 0 and base (%g) positive and finite",
                        (long long)offset, base);
    int64_t len = fl_dim(t, ndim - 2), dim = fl_dim(t, ndim - 1), half = dim / 2;
    size_t count = (size_t)(len * dim > 0 ? len * dim : 1);
    double *table = malloc(2 * sizeof *table * count);
    if (!table)
        return fl_error(FL_ERR_MEMORY, fn, "out of memory");
    for (int64_t pos = 0; pos < len; pos++)
        for (int64_t j = 0; j < dim; j++) {
            double angle = (double)(offset + pos) * pow(base, -2.0 * (double)(j % half) / (double)dim);
            table[pos * dim + j] = cos(angle);
            table[count + (size_t)(pos * dim + j)] = sin(angle);
        }
    fl_scope scope = fl_scope_begin();
    fl_variable *tables[2];
    for (int k = 0; k < 2; k++) {
        fl_tensor *values = fl_from_data(table + (size_t)k * count, FL_F64, 2, (int64_t[]){len, dim});
        tables[k] = fl_v_new(fl_to_backend(fl_cast(values, fl_dtype_of(t)), fl_backend_name(t)), false);
    }
    free(table);
    fl_variable *halves[2];
    fl_variable *out = NULL;
    if (fl_v_split(x, (int64_t[]){half, half}, 2, ndim - 1, halves) == FL_OK) {
        fl_variable *rotated = fl_v_concat((fl_variable *[]){fl_v_neg(halves[1]), halves[0]}, 2, ndim - 1);
        out = fl_v_add(fl_v_mul(x, tables[0]), fl_v_mul(rotated, tables[1]));
    }
    return fl_v_scope_return(scope, out);
}
