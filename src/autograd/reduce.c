/* Gradients of the reductions. Each spreads the output's gradient back over the
 * reduced axes: an expanded view, not a copy, where every element gets the same share. */
#include <string.h>

#include "internal.h"

/* The input's shape and the reduced axes (as a mask), enough to spread a gradient back. */
typedef struct reduce_context {
    int ndim;
    int64_t shape[FL_MAX_DIMS];
    unsigned axes;
} reduce_context;

static bool reduce_context_of(const char *fn, const fl_tensor *x, const int *axes, int count, reduce_context *c)
{
    c->ndim = x->ndim;
    memcpy(c->shape, x->shape, sizeof c->shape);
    return fl_axes_mask(fn, axes, count, x->ndim, &c->axes);
}

/* dy, reduced with or without keepdims, reshaped to keep the reduced axes. */
static fl_tensor *with_kept_axes(const fl_tensor *dy, const reduce_context *c)
{
    int64_t kept[FL_MAX_DIMS];
    for (int i = 0; i < c->ndim; i++)
        kept[i] = c->axes & (1u << i) ? 1 : c->shape[i];
    return fl_reshape(dy, c->ndim, kept);
}

static void sum_grad(fl_grad *g)
{
    const reduce_context *c = g->context;
    g->input_grads[0] = fl_expand(with_kept_axes(g->output_grad, c), c->ndim, c->shape);
}

fl_variable *fl_v_sum(fl_variable *x, const int *axes, int count, bool keepdims)
{
    if (fl_null_args("fl_v_sum", 1, x))
        return NULL;
    reduce_context c;
    if (!reduce_context_of("fl_v_sum", x->value, axes, count, &c))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_variable *y = fl_v_record(fl_sum(x->value, axes, count, keepdims), FL_VARS(x), sum_grad, FL_SAVE_NOTHING,
                                 &c, sizeof c);
    return fl_v_scope_return(scope, y);
}

/* The number of elements each output reduces. */
static int64_t extent(const reduce_context *c)
{
    int64_t n = 1;
    for (int i = 0; i < c->ndim; i++)
        if (c->axes & (1u << i))
            n *= c->shape[i];
    return n;
}

static void mean_grad(fl_grad *g)
{
    const reduce_context *c = g->context;
    fl_tensor *share = fl_div_scalar(with_kept_axes(g->output_grad, c), (double)extent(c));
    g->input_grads[0] = fl_expand(share, c->ndim, c->shape);
}

fl_variable *fl_v_mean(fl_variable *x, const int *axes, int count, bool keepdims)
{
    if (fl_null_args("fl_v_mean", 1, x))
        return NULL;
    reduce_context c;
    if (!reduce_context_of("fl_v_mean", x->value, axes, count, &c))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_variable *y = fl_v_record(fl_mean(x->value, axes, count, keepdims), FL_VARS(x), mean_grad, FL_SAVE_NOTHING,
                                 &c, sizeof c);
    return fl_v_scope_return(scope, y);
}

typedef struct var_context {
    reduce_context reduce;
    int correction;
} var_context;

/* Saved: x. d var / dx = 2 (x - mean) / (n - correction); with too few elements the
 * divisor is zero, as in the forward (torch.var gives inf or nan there too). */
static void var_grad(fl_grad *g)
{
    const var_context *c = g->context;
    const reduce_context *r = &c->reduce;
    const fl_tensor *x = g->saved[0];
    int64_t n = extent(r);
    double divisor = n > c->correction ? (double)(n - c->correction) : 0;
    int axes[FL_MAX_DIMS], count = 0;
    for (int i = 0; i < r->ndim; i++)
        if (r->axes & (1u << i))
            axes[count++] = i;
    fl_tensor *deviation = fl_sub(x, fl_mean(x, axes, count, true));
    fl_tensor *scale = fl_mul_scalar(with_kept_axes(g->output_grad, r), 2 / divisor);
    g->input_grads[0] = fl_mul(deviation, scale);
}

fl_variable *fl_v_var(fl_variable *x, const int *axes, int count, int correction, bool keepdims)
{
    if (fl_null_args("fl_v_var", 1, x))
        return NULL;
    var_context c = {.correction = correction};
    if (!reduce_context_of("fl_v_var", x->value, axes, count, &c.reduce))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_variable *y = fl_v_record(fl_var(x->value, axes, count, correction, keepdims), FL_VARS(x), var_grad,
                                 FL_SAVE(x->value), &c, sizeof c);
    return fl_v_scope_return(scope, y);
}

/* Saved: x. The gradient goes to the first extremum of each reduced slice (in
 * row-major order of the reduced axes), as fl_argmax picks it. PyTorch's amax/amin
 * split it evenly among ties instead; one winner keeps the gradient of max pooling
 * and of max over one axis (torch.max(x, dim)) consistent with this one. The reduced
 * axes are moved last and flattened into one, so that argmax can find the winner. */
static void extremum_grad(fl_grad *g, bool largest)
{
    const reduce_context *c = g->context;
    const fl_tensor *x = g->saved[0];
    int order[FL_MAX_DIMS], inverse[FL_MAX_DIMS], kept = 0;
    int64_t moved[FL_MAX_DIMS], rows[FL_MAX_DIMS], reduced = 1;
    for (int i = 0; i < c->ndim; i++)
        if (!(c->axes & (1u << i))) {
            rows[kept] = c->shape[i];
            order[kept++] = i;
        }
    for (int i = 0, k = kept; i < c->ndim; i++)
        if (c->axes & (1u << i)) {
            reduced *= c->shape[i];
            order[k++] = i;
        }
    for (int i = 0; i < c->ndim; i++) {
        inverse[order[i]] = i;
        moved[i] = c->shape[order[i]];
    }
    rows[kept] = reduced;
    fl_tensor *flat = fl_reshape(fl_permute(x, order), kept + 1, rows);
    fl_tensor *winner = largest ? fl_argmax(flat, -1, true) : fl_argmin(flat, -1, true);
    rows[kept] = 1;
    fl_tensor *dy = fl_reshape(g->output_grad, kept + 1, rows);
    rows[kept] = reduced;
    fl_tensor *spread = fl_scatter_add(fl_new_full(dy, 0, fl_dtype_of(dy), kept + 1, rows), -1, winner, dy);
    g->input_grads[0] = fl_permute(fl_reshape(spread, c->ndim, moved), inverse);
}

static void max_grad(fl_grad *g) { extremum_grad(g, true); }
static void min_grad(fl_grad *g) { extremum_grad(g, false); }

static fl_variable *extremum(const char *fn, fl_variable *x, const int *axes, int count, bool keepdims, bool largest)
{
    if (fl_null_args(fn, 1, x))
        return NULL;
    reduce_context c;
    if (!reduce_context_of(fn, x->value, axes, count, &c))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_tensor *y = largest ? fl_max(x->value, axes, count, keepdims) : fl_min(x->value, axes, count, keepdims);
    fl_variable *v = fl_v_record(y, FL_VARS(x), largest ? max_grad : min_grad, FL_SAVE(x->value), &c, sizeof c);
    return fl_v_scope_return(scope, v);
}

fl_variable *fl_v_max(fl_variable *x, const int *axes, int count, bool keepdims)
{
    return extremum("fl_v_max", x, axes, count, keepdims, true);
}

fl_variable *fl_v_min(fl_variable *x, const int *axes, int count, bool keepdims)
{
    return extremum("fl_v_min", x, axes, count, keepdims, false);
}

/* Saved: x, y. d logsumexp / dx = exp(x - y), the softmax over the reduced axes. */
static void logsumexp_grad(fl_grad *g)
{
    const reduce_context *c = g->context;
    fl_tensor *y = with_kept_axes(g->saved[1], c);
    fl_tensor *softmax = fl_exp(fl_sub(g->saved[0], y));
    g->input_grads[0] = fl_mul(softmax, with_kept_axes(g->output_grad, c));
}

fl_variable *fl_v_logsumexp(fl_variable *x, const int *axes, int count, bool keepdims)
{
    if (fl_null_args("fl_v_logsumexp", 1, x))
        return NULL;
    reduce_context c;
    if (!reduce_context_of("fl_v_logsumexp", x->value, axes, count, &c))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_tensor *y = fl_logsumexp(x->value, axes, count, keepdims);
    fl_variable *v = fl_v_record(y, FL_VARS(x), logsumexp_grad, FL_SAVE(x->value, y), &c, sizeof c);
    return fl_v_scope_return(scope, v);
}
