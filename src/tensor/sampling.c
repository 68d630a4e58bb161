/*
 * Triangular masks and sampling, composed of public operations so that every backend
 * runs them: tril/triu select with fl_where, and the draws come from fl_rand (the
 * Philox generator), so a seed reproduces them on any backend and thread count.
 */
#include <math.h>
#include <stdlib.h>

#include "internal.h"

/* ---- triangles ---- */

static fl_tensor *triangle(const char *fn, const fl_tensor *t, int64_t diagonal, bool lower)
{
    if (fl_null_args(fn, 1, t))
        return NULL;
    if (t->ndim < 2) {
        char d[FL_DESC_SIZE];
        return fl_error(FL_ERR_SHAPE, fn, "needs at least 2 dimensions, got %s", fl_describe(t, d));
    }
    int64_t rows = t->shape[t->ndim - 2], cols = t->shape[t->ndim - 1];
    fl_scope scope = fl_scope_begin();
    /* keep[i][j] is j - i <= diagonal (lower) or j - i >= diagonal (upper). */
    fl_tensor *r = fl_reshape(fl_arange(0, (double)rows, 1, FL_I64), FL_SHAPE(rows, 1));
    fl_tensor *c = fl_reshape(fl_arange(0, (double)cols, 1, FL_I64), FL_SHAPE(1, cols));
    fl_tensor *offset = fl_sub(c, r);
    fl_tensor *bound = fl_scalar((double)diagonal, FL_I64);
    fl_tensor *keep = lower ? fl_le(offset, bound) : fl_ge(offset, bound);
    keep = fl_to_backend(keep, t->backend->name);
    fl_tensor *y = fl_where(keep, t, fl_new_scalar(t, 0, t->dtype));
    return fl_scope_return(scope, y);
}

fl_tensor *fl_tril(const fl_tensor *t, int64_t diagonal) { return triangle("fl_tril", t, diagonal, true); }
fl_tensor *fl_triu(const fl_tensor *t, int64_t diagonal) { return triangle("fl_triu", t, diagonal, false); }

/* ---- draws ---- */

fl_tensor *fl_bernoulli(const fl_tensor *p)
{
    static const char fn[] = "fl_bernoulli";
    if (fl_null_args(fn, 1, p))
        return NULL;
    char d[FL_DESC_SIZE];
    if (!fl_dtype_is_float(p->dtype))
        return fl_error(FL_ERR_DTYPE, fn, "needs float probabilities, got %s", fl_describe(p, d));
    fl_scope scope = fl_scope_begin();
    /* One sync: a probability outside [0, 1], or NaN, is an error rather than a
     * silent 0 or 1. */
    fl_tensor *inside = fl_logical_and(fl_ge(p, fl_new_scalar(p, 0, p->dtype)), fl_le(p, fl_new_scalar(p, 1, p->dtype)));
    double all_inside = fl_item(fl_all(inside, FL_ALL_AXES, false));
    if (isnan(all_inside)) {
        fl_scope_end(scope);
        return NULL;
    }
    if (all_inside == 0) {
        fl_scope_end(scope);
        return fl_error(FL_ERR_VALUE, fn, "probabilities must lie in [0, 1] (and not be NaN) in %s", fl_describe(p, d));
    }
    /* u < p with u uniform in [0, 1): probability p exactly, 0 never fires, 1 always. */
    fl_tensor *u = fl_to_backend(fl_rand(p->dtype, p->ndim, p->shape), p->backend->name);
    return fl_scope_return(scope, fl_cast(fl_lt(u, p), p->dtype));
}

fl_tensor *fl_randperm(int64_t n, fl_dtype dtype)
{
    static const char fn[] = "fl_randperm";
    if (n < 0)
        return fl_error(FL_ERR_VALUE, fn, "n must be non-negative, got %lld", (long long)n);
    if (dtype >= FL_DTYPE_COUNT || dtype == FL_BOOL || (int)dtype < 0)
        return fl_error(FL_ERR_DTYPE, fn, "needs an integer or float dtype, got %d", (int)dtype);
    double largest = dtype == FL_U8 ? 255 : dtype == FL_I32 ? 2147483647.0 : dtype == FL_F16 ? 2048
                   : dtype == FL_BF16 ? 256 : dtype == FL_F32 ? 16777216.0 : 9007199254740992.0;
    if (n > 0 && (double)(n - 1) > largest)
        return fl_error(FL_ERR_VALUE, fn, "%s cannot hold every index below n = %lld", fl_dtype_name(dtype),
                        (long long)n);
    fl_scope scope = fl_scope_begin();
    /* The order of n f64 uniforms: the stable sort keeps it a permutation even if two
     * draws tie. */
    fl_tensor *indices = NULL;
    if (fl_sort(fl_rand(FL_F64, FL_SHAPE(n)), 0, false, NULL, &indices) != FL_OK) {
        fl_scope_end(scope);
        return NULL;
    }
    return fl_scope_return(scope, fl_cast(indices, dtype));
}

/* Reads the weights to the host to check them: per row, the number of positive
 * weights and the last positive category (for draws that round past the total). */
static bool check_weights(const char *fn, const fl_tensor *probs, int64_t rows, int64_t cols, int64_t *positive,
                          int64_t *last)
{
    char d[FL_DESC_SIZE];
    size_t n = (size_t)(rows * cols);
    double *w = malloc((n ? n : 1) * sizeof *w);
    if (!w)
        return fl_error(FL_ERR_MEMORY, fn, "cannot read the weights of %s", fl_describe(probs, d)), false;
    fl_scope scope = fl_scope_begin();
    fl_status status = fl_to_host(fl_cast(probs, FL_F64), w, n * sizeof *w);
    fl_scope_end(scope);
    bool ok = status == FL_OK;
    for (int64_t i = 0; ok && i < rows; i++) {
        positive[i] = 0;
        last[i] = 0;
        for (int64_t j = 0; j < cols; j++) {
            double v = w[i * cols + j];
            if (!(v >= 0) || isinf(v)) {
                fl_error(FL_ERR_VALUE, fn, "weights must be finite and non-negative: row %lld, category %lld is %g in %s",
                         (long long)i, (long long)j, v, fl_describe(probs, d));
                ok = false;
                break;
            }
            if (v > 0) {
                positive[i]++;
                last[i] = j;
            }
        }
        if (ok && positive[i] == 0) {
            fl_error(FL_ERR_VALUE, fn, "row %lld of %s has no positive weight", (long long)i, fl_describe(probs, d));
            ok = false;
        }
    }
    free(w);
    return ok;
}

fl_tensor *fl_multinomial(const fl_tensor *probs, int64_t num_samples, bool replacement)
{
    static const char fn[] = "fl_multinomial";
    if (fl_null_args(fn, 1, probs))
        return NULL;
    char d[FL_DESC_SIZE];
    if (!fl_dtype_is_float(probs->dtype))
        return fl_error(FL_ERR_DTYPE, fn, "needs float weights, got %s", fl_describe(probs, d));
    if (probs->ndim != 1 && probs->ndim != 2)
        return fl_error(FL_ERR_SHAPE, fn, "needs weights [C] or [N, C], got %s", fl_describe(probs, d));
    int64_t rows = probs->ndim == 2 ? probs->shape[0] : 1, cols = probs->shape[probs->ndim - 1];
    if (num_samples < 1)
        return fl_error(FL_ERR_VALUE, fn, "num_samples must be positive, got %lld", (long long)num_samples);
    if (cols == 0)
        return fl_error(FL_ERR_SHAPE, fn, "no categories to draw from in %s", fl_describe(probs, d));
    if (!replacement && num_samples > cols)
        return fl_error(FL_ERR_VALUE, fn, "cannot draw %lld samples without replacement from %lld categories (%s)",
                        (long long)num_samples, (long long)cols, fl_describe(probs, d));
    int64_t *positive = malloc((size_t)(rows ? rows : 1) * 2 * sizeof *positive);
    if (!positive)
        return fl_error(FL_ERR_MEMORY, fn, "cannot allocate for %lld rows", (long long)rows);
    int64_t *last = positive + rows;
    if (!check_weights(fn, probs, rows, cols, positive, last)) {
        free(positive);
        return NULL;
    }
    for (int64_t i = 0; !replacement && i < rows; i++)
        if (positive[i] < num_samples) {
            fl_error(FL_ERR_VALUE, fn,
                     "row %lld has %lld positive weights, too few for %lld samples without replacement in %s",
                     (long long)i, (long long)positive[i], (long long)num_samples, fl_describe(probs, d));
            free(positive);
            return NULL;
        }
    fl_scope scope = fl_scope_begin();
    const char *backend = probs->backend->name;
    fl_tensor *w = fl_reshape(fl_cast(probs, FL_F64), FL_SHAPE(rows, cols));
    fl_tensor *y = NULL;
    if (replacement) {
        fl_tensor *u = fl_to_backend(fl_rand(FL_F64, FL_SHAPE(rows, num_samples)), backend);
        /* Inverse CDF: the category is the number of cumulative weights at or below
         * u * total. Rounding can carry u * total to the total itself; the last
         * positive category takes such a draw. */
        fl_tensor *cdf = fl_cumsum(w, 1);
        fl_tensor *total = fl_index(cdf, FL_INDEX(FL_SPAN, FL_RANGE(cols - 1, cols)));
        fl_tensor *target = fl_unsqueeze(fl_mul(u, total), 2);                     /* [N, S, 1] */
        fl_tensor *below = fl_le(fl_unsqueeze(cdf, 1), target);                      /* [N, S, C] */
        fl_tensor *index = fl_sum(below, FL_AXES(2), false);                         /* i64 [N, S] */
        fl_tensor *cap = fl_to_backend(fl_from_data(last, FL_I64, FL_SHAPE(rows, 1)), backend);
        y = fl_minimum(index, cap);
    } else {
        /* Efraimidis and Spirakis: the num_samples largest keys log(1 - u) / w are a
         * draw without replacement in proportion to w; zero weights never come up. */
        fl_tensor *u = fl_to_backend(fl_rand(FL_F64, FL_SHAPE(rows, cols)), backend);
        fl_tensor *keys = fl_div(fl_log1p(fl_neg(u)), w);
        fl_tensor *never = fl_new_scalar(w, -INFINITY, FL_F64);
        keys = fl_where(fl_gt(w, fl_new_scalar(w, 0, FL_F64)), keys, never);
        if (fl_topk(keys, num_samples, 1, true, NULL, &y) != FL_OK)
            y = NULL;
    }
    free(positive);
    if (probs->ndim == 1)
        y = fl_reshape(y, FL_SHAPE(num_samples));
    return fl_scope_return(scope, y);
}
