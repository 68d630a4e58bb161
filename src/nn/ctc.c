/* The CTC loss (Graves et al. 2006) as torch.nn.functional.ctc_loss computes it: the
 * forward-backward recursions in log space over the label sequence with blanks
 * between and around the labels, in double precision on the host (a dynamic program
 * over time, sequential by nature), one sample per thread. */
#include <math.h>
#include <stdlib.h>

#include "flare/extension.h"
#include "flare/nn.h"

static double log_add(double a, double b)
{
    if (a == -INFINITY)
        return b;
    if (b == -INFINITY)
        return a;
    return fmax(a, b) + log1p(exp(-fabs(a - b)));
}

/* One sample: its log-probabilities lp[t * stride + c] for t < steps, its labels. */
typedef struct sample {
    const double *lp;
    int64_t stride, steps, classes, blank;
    const int64_t *labels;
    int64_t length;
} sample;

/* The symbol at position s of the extended sequence: blank, l1, blank, l2, ..., blank. */
static int64_t symbol(const sample *x, int64_t s) { return s % 2 ? x->labels[s / 2] : x->blank; }

/* Whether a path may skip from s - 2 to s: only onto a label that differs from the
 * previous one (a repeated label needs the blank between). */
static bool may_skip(const sample *x, int64_t s) { return s > 1 && s % 2 && symbol(x, s) != symbol(x, s - 2); }

static double lp_at(const sample *x, int64_t t, int64_t s) { return x->lp[t * x->stride + symbol(x, s)]; }

/* log_alpha [steps, 2L + 1]; returns the negative log-likelihood. */
static double forward_variables(const sample *x, double *alpha)
{
    int64_t width = 2 * x->length + 1;
    if (x->steps == 0)
        return x->length == 0 ? 0 : INFINITY;
    for (int64_t s = 0; s < width; s++)
        alpha[s] = s < 2 ? lp_at(x, 0, s) : -INFINITY;
    for (int64_t t = 1; t < x->steps; t++) {
        const double *prev = alpha + (t - 1) * width;
        double *row = alpha + t * width;
        for (int64_t s = 0; s < width; s++) {
            double a = prev[s];
            if (s > 0)
                a = log_add(a, prev[s - 1]);
            if (may_skip(x, s))
                a = log_add(a, prev[s - 2]);
            row[s] = a == -INFINITY ? -INFINITY : a + lp_at(x, t, s);
        }
    }
    const double *last = alpha + (x->steps - 1) * width;
    return -log_add(last[width - 1], width > 1 ? last[width - 2] : -INFINITY);
}

static void backward_variables(const sample *x, double *beta)
{
    int64_t width = 2 * x->length + 1, t = x->steps - 1;
    for (int64_t s = 0; s < width; s++)
        beta[t * width + s] = s >= width - 2 ? lp_at(x, t, s) : -INFINITY;
    for (t = x->steps - 2; t >= 0; t--) {
        const double *next = beta + (t + 1) * width;
        double *row = beta + t * width;
        for (int64_t s = 0; s < width; s++) {
            double b = next[s];
            if (s + 1 < width)
                b = log_add(b, next[s + 1]);
            if (s + 2 < width && may_skip(x, s + 2))
                b = log_add(b, next[s + 2]);
            row[s] = b == -INFINITY ? -INFINITY : b + lp_at(x, t, s);
        }
    }
}

/* PyTorch's gradient with respect to the log-probabilities: exp(lp) minus the posterior
 * of each class at each step. The first term is what makes it exact for log-softmax
 * inputs (the gradient of the logits), as in PyTorch; grad rows are strided as lp. */
static void gradient(const sample *x, double nll, const double *alpha, const double *beta, double *lcab,
                     double *grad)
{
    int64_t width = 2 * x->length + 1;
    for (int64_t t = 0; t < x->steps; t++) {
        for (int64_t c = 0; c < x->classes; c++)
            lcab[c] = -INFINITY;
        for (int64_t s = 0; s < width; s++)
            lcab[symbol(x, s)] = log_add(lcab[symbol(x, s)], alpha[t * width + s] + beta[t * width + s]);
        for (int64_t c = 0; c < x->classes; c++) {
            double lp = x->lp[t * x->stride + c];
            grad[t * x->stride + c] = exp(lp) - exp(lcab[c] + nll - lp);
        }
    }
}

typedef struct ctc_context {
    int64_t batch;
} ctc_context;

/* saved: the gradient of each sample's loss [T, N, C]. */
static void ctc_grad(fl_grad *g)
{
    const ctc_context *c = g->context;
    g->input_grads[0] = fl_mul(g->saved[0], fl_reshape(g->output_grad, 3, (int64_t[]){1, c->batch, 1}));
}

static int64_t *host_integers(const fl_tensor *t)
{
    int64_t n = fl_numel(t);
    int64_t *values = malloc((size_t)(n ? n : 1) * sizeof *values);
    if (!values)
        return fl_error(FL_ERR_MEMORY, "fl_nn_ctc_loss", "out of memory");
    fl_scope scope = fl_scope_begin();
    fl_status status = fl_to_host(fl_cast(t, FL_I64), values, (size_t)n * sizeof *values);
    fl_scope_end(scope);
    if (status != FL_OK)
        free(values), values = NULL;
    return values;
}

/* Checks what cannot be seen from shapes: lengths in range, and labels (those within
 * the target lengths: padding may hold anything, as in PyTorch) other than the blank. */
static bool lengths_fit(const char *fn, int64_t n, int64_t steps, int64_t classes, int64_t blank, bool padded,
                        int64_t width, const int64_t *input_lengths, const int64_t *target_lengths,
                        const int64_t *labels, int64_t label_count)
{
    int64_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        if (input_lengths[i] < 0 || input_lengths[i] > steps)
            return fl_error(FL_ERR_VALUE, fn, "input_lengths[%lld] is %lld, outside [0, %lld]", (long long)i,
                            (long long)input_lengths[i], (long long)steps),
                   false;
        if (target_lengths[i] < 0 || (padded && target_lengths[i] > width))
            return fl_error(FL_ERR_VALUE, fn, "target_lengths[%lld] is %lld, outside [0, %lld]", (long long)i,
                            (long long)target_lengths[i], (long long)(padded ? width : INT64_MAX)),
                   false;
        total += target_lengths[i];
    }
    if (!padded && total != label_count)
        return fl_error(FL_ERR_SHAPE, fn, "concatenated targets hold %lld labels but target_lengths sum to %lld",
                        (long long)label_count, (long long)total),
               false;
    for (int64_t i = 0, start = 0; i < n; start += target_lengths[i], i++) {
        const int64_t *row = labels + (padded ? i * width : start);
        for (int64_t j = 0; j < target_lengths[i]; j++)
            if (row[j] < 0 || row[j] >= classes || row[j] == blank)
                return fl_error(FL_ERR_VALUE, fn,
                                "target label %lld of sample %lld is not a class in [0, %lld) other than the blank "
                                 "%lld",
                                 (long long)row[j], (long long)i, (long long)classes, (long long)blank),
                       false;
    }
    return true;
}

static bool arguments_fit(const char *fn, const fl_tensor *lp, const fl_tensor *targets, const fl_tensor *input_lengths,
                          const fl_tensor *target_lengths, int64_t blank)
{
    char a[FL_DESC_SIZE], b[FL_DESC_SIZE], c[FL_DESC_SIZE];
    if (fl_ndim(lp) != 3 || !fl_dtype_is_float(fl_dtype_of(lp)))
        return fl_error(FL_ERR_SHAPE, fn, "log_probs must be floating [T, N, C], got %s", fl_describe(lp, a)), false;
    int64_t n = fl_dim(lp, 1), classes = fl_dim(lp, 2);
    if (blank < 0 || blank >= classes)
        return fl_error(FL_ERR_VALUE, fn, "blank %lld is not a class of %s", (long long)blank, fl_describe(lp, a)),
               false;
    const fl_tensor *integers[3] = {targets, input_lengths, target_lengths};
    for (int i = 0; i < 3; i++)
        if (!fl_dtype_is_integer(fl_dtype_of(integers[i])))
            return fl_error(FL_ERR_DTYPE, fn, "targets and lengths must be integers, got %s, %s and %s",
                             fl_describe(targets, a), fl_describe(input_lengths, b), fl_describe(target_lengths, c)),
                   false;
    if (fl_ndim(input_lengths) != 1 || fl_dim(input_lengths, 0) != n || fl_ndim(target_lengths) != 1 ||
        fl_dim(target_lengths, 0) != n)
        return fl_error(FL_ERR_SHAPE, fn, "input_lengths and target_lengths must be [%lld], got %s and %s",
                         (long long)n, fl_describe(input_lengths, a), fl_describe(target_lengths, b)),
               false;
    if (!(fl_ndim(targets) == 2 && fl_dim(targets, 0) == n) && fl_ndim(targets) != 1)
        return fl_error(FL_ERR_SHAPE, fn, "targets must be [%lld, S] or concatenated [sum(target_lengths)], got %s",
                         (long long)n, fl_describe(targets, a)),
               false;
    return true;
}

/* The per-sample losses [N] (and their gradient, if wanted) of host values. */
static fl_status losses(const double *lp, int64_t steps, int64_t n, int64_t classes, int64_t blank,
                        const int64_t *labels, bool padded, int64_t width, const int64_t *input_lengths,
                        const int64_t *target_lengths, bool zero_infinity, double *nll, double *grad)
{
    int64_t *offsets = malloc((size_t)n * sizeof *offsets);
    if (!offsets)
        return fl_error(FL_ERR_MEMORY, "fl_nn_ctc_loss", "out of memory"), FL_ERR_MEMORY;
    for (int64_t i = 0, start = 0; i < n; start += target_lengths[i], i++)
        offsets[i] = padded ? i * width : start;
    int failed = 0;
#pragma omp parallel for schedule(dynamic) reduction(| : failed)
    for (int64_t i = 0; i < n; i++) {
        sample x = {lp + i * classes, n * classes, input_lengths[i], classes, blank, labels + offsets[i],
                    target_lengths[i]};
        size_t cells = (size_t)(x.steps ? x.steps : 1) * (size_t)(2 * x.length + 1);
        double *alpha = malloc(cells * sizeof *alpha);
        double *beta = grad ? malloc(cells * sizeof *beta) : NULL;
        double *lcab = grad ? malloc((size_t)classes * sizeof *lcab) : NULL;
        if (!alpha || (grad && (!beta || !lcab))) {
            failed = 1;
        } else {
            nll[i] = forward_variables(&x, alpha);
            bool impossible = isinf(nll[i]) && zero_infinity;
            if (impossible)
                nll[i] = 0;
            if (grad && !impossible && x.steps > 0) {
                backward_variables(&x, beta);
                gradient(&x, nll[i], alpha, beta, lcab, grad + i * classes);
            }
        }
        free(alpha);
        free(beta);
        free(lcab);
    }
    free(offsets);
    if (failed)
        return fl_error(FL_ERR_MEMORY, "fl_nn_ctc_loss", "out of memory"), FL_ERR_MEMORY;
    return FL_OK;
}

fl_variable *fl_nn_ctc_loss(fl_variable *log_probs, const fl_tensor *targets, const fl_tensor *input_lengths,
                            const fl_tensor *target_lengths, int64_t blank, fl_reduction reduction,
                            bool zero_infinity)
{
    const char *fn = "fl_nn_ctc_loss";
    if (fl_null_args(fn, 4, log_probs, targets, input_lengths, target_lengths) ||
        fl_mixed_backends(fn, 4, fl_v_value(log_probs), targets, input_lengths, target_lengths))
        return NULL;
    const fl_tensor *lpt = fl_v_value(log_probs);
    if (!arguments_fit(fn, lpt, targets, input_lengths, target_lengths, blank))
        return NULL;
    if (reduction != FL_REDUCTION_MEAN && reduction != FL_REDUCTION_SUM && reduction != FL_REDUCTION_NONE)
        return fl_error(FL_ERR_VALUE, fn, "unknown reduction %d", (int)reduction);
    int64_t steps = fl_dim(lpt, 0), n = fl_dim(lpt, 1), classes = fl_dim(lpt, 2);
    bool padded = fl_ndim(targets) == 2;
    int64_t width = padded ? fl_dim(targets, 1) : 0, count = fl_numel(lpt);
    bool wants_grad = fl_grad_enabled() && fl_v_requires_grad(log_probs);

    int64_t *labels = host_integers(targets), *in_len = host_integers(input_lengths),
            *target_len = host_integers(target_lengths);
    double *lp = malloc((size_t)(count ? count : 1) * sizeof *lp), *nll = malloc((size_t)n * sizeof *nll + 1);
    double *grad = wants_grad ? calloc((size_t)(count ? count : 1), sizeof *grad) : NULL;
    fl_scope scope = fl_scope_begin();
    fl_variable *result = NULL;
    fl_status status = labels && in_len && target_len ? FL_OK : fl_last_status();
    if (status == FL_OK && (!lp || !nll || (wants_grad && !grad)))
        status = (fl_error(FL_ERR_MEMORY, fn, "out of memory"), FL_ERR_MEMORY);
    if (status == FL_OK)
        status = fl_to_host(fl_cast(lpt, FL_F64), lp, (size_t)count * sizeof *lp);
    if (status == FL_OK && !lengths_fit(fn, n, steps, classes, blank, padded, width, in_len, target_len, labels,
                                        fl_numel(targets)))
        status = fl_last_status();
    if (status == FL_OK)
        status = losses(lp, steps, n, classes, blank, labels, padded, width, in_len, target_len, zero_infinity, nll,
                        grad);
    if (status == FL_OK) {
        fl_dtype dtype = fl_dtype_of(lpt);
        const char *backend = fl_backend_name(lpt); /* the host's results go back beside the input */
        fl_tensor *value = fl_to_backend(fl_cast(fl_from_data(nll, FL_F64, FL_SHAPE(n)), dtype), backend);
        ctc_context c = {n};
        result = grad ? fl_v_record(value, FL_VARS(log_probs), ctc_grad,
                                    FL_SAVE(fl_to_backend(fl_cast(fl_from_data(grad, FL_F64, 3, fl_shape(lpt)), dtype),
                                                          backend)),
                                    &c, sizeof c)
                      : fl_v_new(value, false);
        if (reduction == FL_REDUCTION_SUM) {
            result = fl_v_sum(result, FL_ALL_AXES, false);
        } else if (reduction == FL_REDUCTION_MEAN) {
            /* PyTorch's mean: each loss over its target length (at least 1), averaged. */
            for (int64_t i = 0; i < n; i++)
                nll[i] = 1.0 / ((double)(target_len[i] > 1 ? target_len[i] : 1) * (double)n);
            fl_tensor *weights = fl_to_backend(fl_cast(fl_from_data(nll, FL_F64, FL_SHAPE(n)), dtype), backend);
            result = fl_v_sum(fl_v_mul(result, fl_v_new(weights, false)), FL_ALL_AXES, false);
        }
    }
    free(labels), free(in_len), free(target_len), free(lp), free(nll), free(grad);
    return fl_v_scope_return(scope, result);
}
