/* BatchNorm1d/2d and LayerNorm, on one normalization with a gradient of its own:
 * y = (x - mean) / sqrt(var + eps) * weight + bias, the statistics taken over some
 * axes (BatchNorm: all but the channels; LayerNorm: the last ones) and the affine
 * parameters spread over others. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../tensor/internal.h" /* the fused batch-norm kernels */
#include "internal.h"

typedef struct norm_context {
    int ndim;
    unsigned stat_axes;  /* the axes the statistics reduce */
    unsigned param_axes; /* the axes the weight and bias span */
    bool batch_stats;    /* statistics of x itself (so the gradient goes through them) */
    bool weight, bias;
} norm_context;

static int axes_of(unsigned mask, int ndim, int *axes)
{
    int count = 0;
    for (int i = 0; i < ndim; i++)
        if (mask & (1u << i))
            axes[count++] = i;
    return count;
}

/* The shape of a tensor spanning the mask's axes of x, with 1 on the others. */
static void spread_shape(const fl_tensor *x, unsigned mask, int64_t *shape)
{
    for (int i = 0; i < fl_ndim(x); i++)
        shape[i] = mask & (1u << i) ? fl_shape(x)[i] : 1;
}

/* t summed over every axis outside the mask, those axes dropped. */
static fl_tensor *sum_outside(const fl_tensor *t, const norm_context *c)
{
    int axes[FL_MAX_DIMS];
    int count = axes_of(~c->param_axes, c->ndim, axes);
    return count ? fl_sum(t, axes, count, false) : fl_reshape(t, fl_ndim(t), fl_shape(t));
}

/* Saved: x-hat, 1 / sqrt(var + eps), and the spread weight if any.
 * dx-hat = dy weight; with batch statistics, over the statistic axes,
 * dx = (dx-hat - mean(dx-hat) - x-hat mean(dx-hat x-hat)) / std; else dx = dx-hat / std. */
static void norm_grad(fl_grad *g)
{
    const norm_context *c = g->context;
    const fl_tensor *xhat = g->saved[0], *invstd = g->saved[1], *dy = g->output_grad;
    int next = 1;
    if (g->needs_grad[0]) {
        const fl_tensor *dxhat = c->weight ? fl_mul(dy, g->saved[2]) : dy;
        if (c->batch_stats) {
            int axes[FL_MAX_DIMS];
            int count = axes_of(c->stat_axes, c->ndim, axes);
            fl_tensor *centered = fl_sub(dxhat, fl_mean(dxhat, axes, count, true));
            dxhat = fl_sub(centered, fl_mul(xhat, fl_mean(fl_mul(dxhat, xhat), axes, count, true)));
        }
        g->input_grads[0] = fl_mul(dxhat, invstd);
    }
    if (c->weight && g->needs_grad[next++])
        g->input_grads[next - 1] = sum_outside(fl_mul(dy, xhat), c);
    if (c->bias && g->needs_grad[next])
        g->input_grads[next] = sum_outside(dy, c);
}

/* The variables a normalization's gradient node depends on: x, then the weight and
 * the bias where the layer has them. Returns how many. */
static int gradient_inputs(fl_variable *inputs[3], fl_variable *x, fl_variable *weight, fl_variable *bias)
{
    int n = 0;
    inputs[n++] = x;
    if (weight)
        inputs[n++] = weight;
    if (bias)
        inputs[n++] = bias;
    return n;
}

/* mean and var (spread over x's axes) given, or NULL for x's own; batch_mean and
 * batch_var (may be NULL) receive x's statistics. */
static fl_variable *normalize(norm_context *c, fl_variable *x, fl_variable *weight, fl_variable *bias,
                              const fl_tensor *mean, const fl_tensor *var, double eps, fl_tensor **batch_mean,
                              fl_tensor **batch_var)
{
    const fl_tensor *xv = fl_v_value(x);
    int axes[FL_MAX_DIMS];
    int count = axes_of(c->stat_axes, c->ndim, axes);
    int64_t spread[FL_MAX_DIMS];
    spread_shape(xv, c->param_axes, spread);
    fl_scope scope = fl_scope_begin();
    if (c->batch_stats) {
        mean = fl_mean(xv, axes, count, true);
        var = fl_var(xv, axes, count, 0, true);
        int64_t n = fl_numel(xv) / (fl_numel(mean) ? fl_numel(mean) : 1);
        if (batch_mean)
            *batch_mean = fl_keep(fl_reshape(mean, FL_SHAPE(-1)));
        if (batch_var)
            *batch_var = fl_keep(fl_reshape(fl_mul_scalar(var, (double)n / (double)(n - 1)), FL_SHAPE(-1)));
    }
    fl_tensor *invstd = fl_rsqrt(fl_add_scalar(var, eps));
    fl_tensor *xhat = fl_mul(fl_sub(xv, mean), invstd);
    fl_tensor *y = xhat, *w = NULL;
    if (weight)
        y = fl_mul(y, w = fl_reshape(fl_v_value(weight), c->ndim, spread));
    if (bias)
        y = fl_add(y, fl_reshape(fl_v_value(bias), c->ndim, spread));
    c->weight = weight != NULL;
    c->bias = bias != NULL;
    fl_variable *inputs[3];
    int ninputs = gradient_inputs(inputs, x, weight, bias);
    const fl_tensor *saved[3] = {xhat, invstd, w};
    fl_variable *result = fl_v_record(y, inputs, ninputs, norm_grad, saved, weight ? 3 : 2, c, sizeof *c);
    return fl_v_scope_return(scope, result);
}

/* ---- batch norm on the backend's fused kernels ----
 * When the backend has batch_norm and batch_norm_backward, a batch norm is one forward
 * pass that saves x and the [C] statistics, and one gradient node; the composition
 * above stays the definition (tests/test_nn.c checks one against the other). */

typedef struct fused_context {
    bool training, weight, bias;
} fused_context;

/* The backend's kernels, if they exist and take these operands: f32 or f64 x on one
 * backend with the per-channel tensors, all of x's dtype. */
static bool can_fuse(const fl_tensor *x, const fl_tensor *const *per_channel, int count)
{
    if (!fl__batch_norm_fusable(x))
        return false;
    for (int i = 0; i < count; i++)
        if (per_channel[i] && (!fl__same_backend(per_channel[i], x) || per_channel[i]->dtype != x->dtype))
            return false;
    return true;
}

/* A fresh [C] output of x's dtype and backend, or NULL. */
static fl_tensor *new_per_channel(const fl_tensor *x)
{
    return fl__new(x->backend, x->dtype, 1, &x->shape[1]);
}

/* Saved: x, mean, invstd, then the weight if any. */
static void fused_batch_norm_grad(fl_grad *g)
{
    const fused_context *c = g->context;
    const fl_tensor *x = g->saved[0], *dy = g->output_grad;
    bool want[3] = {g->needs_grad[0], c->weight && g->needs_grad[1], c->bias && g->needs_grad[1 + c->weight]};
    fl_tensor *out[3] = {NULL}, *first = NULL;
    for (int i = 0; i < 3; i++) {
        if (!want[i])
            continue;
        out[i] = i ? new_per_channel(x) : fl__new(x->backend, x->dtype, x->ndim, x->shape);
        if (!out[i]) {
            for (int j = 0; j < i; j++)
                fl_release(out[j]);
            return;
        }
        first = first ? first : out[i];
    }
    if (!first)
        return;
    int rc = fl__batch_norm_backward(out[0], out[1], out[2], dy, x, g->saved[1], g->saved[2],
                                     c->weight ? g->saved[3] : NULL, c->training);
    /* fl__finish records a failure (freeing the output it is given) and ends the
     * operation; the other outputs go with it. */
    if (!fl__finish("fl_f_batch_norm (gradient)", first, rc, 2, (const fl_tensor *const[]){dy, x})) {
        for (int i = 0; i < 3; i++)
            if (out[i] != first)
                fl_release(out[i]);
        return;
    }
    int next = 0;
    g->input_grads[next++] = fl_out(out[0]);
    if (c->weight)
        g->input_grads[next++] = fl_out(out[1]);
    if (c->bias)
        g->input_grads[next] = fl_out(out[2]);
}

/* fl_f_batch_norm on the backend's kernels; the arguments are checked. */
static fl_variable *fused_batch_norm(fl_variable *x, const fl_tensor *running_mean, const fl_tensor *running_var,
                                     fl_variable *weight, fl_variable *bias, bool training, double eps,
                                     fl_tensor **batch_mean, fl_tensor **batch_var)
{
    const fl_tensor *xv = fl_v_value(x);
    const fl_tensor *w = weight ? fl_v_value(weight) : NULL, *b = bias ? fl_v_value(bias) : NULL;
    fl_scope scope = fl_scope_begin();
    /* Training writes the batch statistics into mean and var; inference reads the
     * running ones, in x's dtype (the module keeps them in f32). */
    fl_tensor *mean = fl_out(training ? new_per_channel(xv) : fl__cast(running_mean, xv->dtype));
    fl_tensor *var = fl_out(training ? new_per_channel(xv) : fl__cast(running_var, xv->dtype));
    fl_tensor *y = mean && var ? fl__new(xv->backend, xv->dtype, xv->ndim, xv->shape) : NULL;
    if (!y)
        return fl_v_scope_return(scope, NULL);
    int rc = fl__batch_norm(y, training ? mean : NULL, training ? var : NULL, xv, w, b, training ? NULL : mean,
                            training ? NULL : var, eps);
    if (!fl_out(fl__finish("fl_f_batch_norm", y, rc, 1, &xv)))
        return fl_v_scope_return(scope, NULL);
    if (training) {
        int64_t n = xv->numel / xv->shape[1];
        if (batch_mean)
            *batch_mean = fl_keep(mean);
        if (batch_var)
            *batch_var = fl_keep(fl_mul_scalar(var, (double)n / (double)(n - 1)));
    }
    fused_context c = {training, weight != NULL, bias != NULL};
    fl_variable *inputs[3];
    int ninputs = gradient_inputs(inputs, x, weight, bias);
    const fl_tensor *saved[4] = {xv, mean, fl_rsqrt(fl_add_scalar(var, eps)), w};
    fl_variable *result = fl_v_record(y, inputs, ninputs, fused_batch_norm_grad, saved, weight ? 4 : 3, &c, sizeof c);
    return fl_v_scope_return(scope, result);
}

static bool has_shape(const fl_tensor *t, int ndim, const int64_t *shape)
{
    return fl_ndim(t) == ndim && memcmp(fl_shape(t), shape, (size_t)ndim * sizeof *shape) == 0;
}

fl_variable *fl_f_layer_norm(fl_variable *x, fl_variable *weight, fl_variable *bias, int ndim, double eps)
{
    const char *fn = "fl_f_layer_norm";
    if (fl_null_args(fn, 1, x))
        return NULL;
    const fl_tensor *xv = fl_v_value(x);
    int xdim = fl_ndim(xv);
    if (ndim < 1 || ndim > xdim)
        return fl_error(FL_ERR_AXIS, fn, "cannot normalize the last %d axes of %d", ndim, xdim);
    const int64_t *normalized = fl_shape(xv) + xdim - ndim;
    fl_variable *given[2] = {weight, bias};
    for (int i = 0; i < 2; i++) {
        if (given[i] && !has_shape(fl_v_value(given[i]), ndim, normalized)) {
            char dx[FL_DESC_SIZE], dp[FL_DESC_SIZE];
            return fl_error(FL_ERR_SHAPE, fn, "the %s %s does not match the last %d axes of x %s",
                             i ? "bias" : "weight", fl_describe(fl_v_value(given[i]), dp), ndim,
                             fl_describe(xv, dx));
        }
    }
    norm_context c = {.ndim = xdim, .batch_stats = true};
    for (int i = xdim - ndim; i < xdim; i++)
        c.stat_axes |= 1u << i;
    c.param_axes = c.stat_axes;
    return normalize(&c, x, weight, bias, NULL, NULL, eps, NULL, NULL);
}

fl_variable *fl_f_batch_norm(fl_variable *x, const fl_tensor *running_mean, const fl_tensor *running_var,
                             fl_variable *weight, fl_variable *bias, bool training, double eps,
                             fl_tensor **batch_mean, fl_tensor **batch_var)
{
    const char *fn = "fl_f_batch_norm";
    if (fl_null_args(fn, 1, x) || (!training && fl_null_args(fn, 2, running_mean, running_var)) ||
        fl_mixed_backends(fn, 5, fl_v_value(x), running_mean, running_var, weight ? fl_v_value(weight) : NULL,
                          bias ? fl_v_value(bias) : NULL))
        return NULL;
    const fl_tensor *xv = fl_v_value(x);
    char dx[FL_DESC_SIZE], dp[FL_DESC_SIZE];
    if (fl_ndim(xv) < 2)
        return fl_error(FL_ERR_SHAPE, fn, "x %s is not [N, C, *]", fl_describe(xv, dx));
    int64_t channels = fl_shape(xv)[1];
    const fl_tensor *per_channel[4] = {weight ? fl_v_value(weight) : NULL, bias ? fl_v_value(bias) : NULL,
                                       training ? NULL : running_mean, training ? NULL : running_var};
    const char *names[4] = {"weight", "bias", "running_mean", "running_var"};
    for (int i = 0; i < 4; i++)
        if (per_channel[i] && !has_shape(per_channel[i], 1, &channels))
            return fl_error(FL_ERR_SHAPE, fn, "%s %s does not match the %lld channels of x %s", names[i],
                             fl_describe(per_channel[i], dp), (long long)channels, fl_describe(xv, dx));
    if (training && fl_numel(xv) / (channels ? channels : 1) <= 1)
        return fl_error(FL_ERR_VALUE, fn, "x %s has one value per channel: no batch statistics",
                         fl_describe(xv, dx));
    const fl_tensor *operands[4] = {per_channel[0], per_channel[1], running_mean, running_var};
    if (can_fuse(xv, operands, training ? 2 : 4))
        return fused_batch_norm(x, running_mean, running_var, weight, bias, training, eps, batch_mean, batch_var);
    norm_context c = {.ndim = fl_ndim(xv), .param_axes = 1u << 1, .batch_stats = training};
    c.stat_axes = ((1u << c.ndim) - 1) & ~c.param_axes;
    if (training)
        return normalize(&c, x, weight, bias, NULL, NULL, eps, batch_mean, batch_var);
    int64_t spread[FL_MAX_DIMS];
    spread_shape(xv, c.param_axes, spread);
    fl_scope scope = fl_scope_begin();
    fl_dtype dtype = fl_dtype_of(xv);
    fl_variable *y = normalize(&c, x, weight, bias, fl_reshape(fl_cast(running_mean, dtype), c.ndim, spread),
                               fl_reshape(fl_cast(running_var, dtype), c.ndim, spread), eps, NULL, NULL);
    return fl_v_scope_return(scope, y);
}

/* ---- BatchNorm ---- */

typedef struct batch_norm_state {
    int min_ndim, max_ndim;
    int64_t features;
    double eps, momentum;
} batch_norm_state;

/* running = (1 - momentum) running + momentum batch, in the buffer's dtype. */
static fl_status update_running(fl_module *m, const char *name, const fl_tensor *batch, double momentum)
{
    const fl_tensor *running = fl_module_buffer(m, name);
    fl_tensor *blended = fl_add(fl_mul_scalar(running, 1 - momentum),
                                fl_mul_scalar(fl_cast(batch, fl_dtype_of(running)), momentum));
    return blended ? fl_module_set_buffer(m, name, blended) : fl_last_status();
}

static fl_variable *batch_norm_forward(fl_module *m, fl_variable *x)
{
    const batch_norm_state *s = fl_module_state(m);
    fl_tensor *running_mean = fl_module_buffer(m, "running_mean"), *running_var = fl_module_buffer(m, "running_var");
    long long c = (long long)s->features;
    char what[64];
    if (s->max_ndim == 3)
        snprintf(what, sizeof what, "an input of shape [N, %lld] or [N, %lld, L]", c, c);
    else
        snprintf(what, sizeof what, "an input of shape [N, %lld, H, W]", c);
    if (!fl__nn_check_input(m, x, s->min_ndim, s->max_ndim, 1, s->features, what))
        return NULL;
    bool tracked = running_mean != NULL;
    bool training = fl_module_is_training(m);
    fl_scope scope = fl_scope_begin();
    fl_tensor *batch_mean = NULL, *batch_var = NULL;
    fl_variable *y = fl_f_batch_norm(x, running_mean, running_var, fl_module_parameter(m, "weight"),
                                     fl_module_parameter(m, "bias"), training || !tracked, s->eps,
                                     training && tracked ? &batch_mean : NULL, training && tracked ? &batch_var : NULL);
    if (y && training && tracked) {
        fl_tensor *count = fl_add_scalar(fl_module_buffer(m, "num_batches_tracked"), 1);
        double momentum = s->momentum >= 0 ? s->momentum : 1.0 / fl_item(count);
        if (fl_module_set_buffer(m, "num_batches_tracked", count) != FL_OK ||
            update_running(m, "running_mean", batch_mean, momentum) != FL_OK ||
            update_running(m, "running_var", batch_var, momentum) != FL_OK)
            y = NULL;
    }
    fl_release(batch_mean);
    fl_release(batch_var);
    return fl_v_scope_return(scope, y);
}

static const fl_module_type batch_norm1d_type = {.name = "BatchNorm1d", .forward = batch_norm_forward};
static const fl_module_type batch_norm2d_type = {.name = "BatchNorm2d", .forward = batch_norm_forward};

static fl_module *batch_norm(const char *fn, const fl_module_type *type, int min_ndim, int max_ndim,
                             int64_t features, double eps, double momentum, bool affine, bool track)
{
    if (features <= 0 || !(eps >= 0) || momentum > 1)
        return fl_error(FL_ERR_VALUE, fn, "%lld features, eps %g, momentum %g: features must be positive, eps "
                                           "non-negative and momentum at most 1", (long long)features, eps, momentum);
    batch_norm_state *s = malloc(sizeof *s);
    if (!s)
        return fl_error(FL_ERR_MEMORY, fn, "out of memory");
    *s = (batch_norm_state){min_ndim, max_ndim, features, eps, momentum};
    fl_module *m = fl_module_new(type, s);
    bool ok = m != NULL;
    fl_scope scope = fl_scope_begin();
    if (ok && affine) {
        fl_variable *w = fl__nn_parameter(m, "weight", FL_SHAPE(features));
        ok = w && fl__nn_parameter(m, "bias", FL_SHAPE(features)) && fl_init_ones(w) == FL_OK;
    }
    if (ok && track)
        ok = fl_module_add_buffer(m, "running_mean", fl_zeros(FL_F32, FL_SHAPE(features))) == FL_OK &&
             fl_module_add_buffer(m, "running_var", fl_ones(FL_F32, FL_SHAPE(features))) == FL_OK &&
             fl_module_add_buffer(m, "num_batches_tracked", fl_zeros(FL_I64, FL_SHAPE())) == FL_OK;
    fl_scope_end(scope);
    if (!ok)
        fl_module_release(m), m = NULL;
    return m;
}

fl_module *fl_nn_batch_norm1d(int64_t features, double eps, double momentum, bool affine, bool track_running_stats)
{
    return batch_norm("fl_nn_batch_norm1d", &batch_norm1d_type, 2, 3, features, eps, momentum, affine,
                      track_running_stats);
}

fl_module *fl_nn_batch_norm2d(int64_t features, double eps, double momentum, bool affine, bool track_running_stats)
{
    return batch_norm("fl_nn_batch_norm2d", &batch_norm2d_type, 4, 4, features, eps, momentum, affine,
                      track_running_stats);
}

/* ---- LayerNorm ---- */

typedef struct layer_norm_state {
    int ndim;
    int64_t shape[FL_MAX_DIMS];
    double eps;
} layer_norm_state;

static fl_variable *layer_norm_forward(fl_module *m, fl_variable *x)
{
    const layer_norm_state *s = fl_module_state(m);
    const fl_tensor *xv = fl_v_value(x);
    if (fl_ndim(xv) < s->ndim || memcmp(fl_shape(xv) + fl_ndim(xv) - s->ndim, s->shape, (size_t)s->ndim * sizeof *s->shape) != 0) {
        char want[FL_DESC_SIZE], got[FL_DESC_SIZE];
        return fl_error(FL_ERR_SHAPE, "LayerNorm", "expects an input of shape [*, %s, got %s",
                         fl_describe_shape(s->ndim, s->shape, want) + 1, fl_describe(xv, got));
    }
    return fl_f_layer_norm(x, fl_module_parameter(m, "weight"), fl_module_parameter(m, "bias"), s->ndim, s->eps);
}

static const fl_module_type layer_norm_type = {.name = "LayerNorm", .forward = layer_norm_forward};

fl_module *fl_nn_layer_norm(int ndim, const int64_t *normalized_shape, double eps, bool elementwise_affine)
{
    const char *fn = "fl_nn_layer_norm";
    if (fl_null_args(fn, 1, normalized_shape))
        return NULL;
    if (ndim < 1 || ndim > FL_MAX_DIMS || !(eps >= 0))
        return fl_error(FL_ERR_VALUE, fn, "a normalized shape of %d axes with eps %g", ndim, eps);
    layer_norm_state *s = malloc(sizeof *s);
    if (!s)
        return fl_error(FL_ERR_MEMORY, fn, "out of memory");
    s->ndim = ndim;
    s->eps = eps;
    memcpy(s->shape, normalized_shape, (size_t)ndim * sizeof *normalized_shape);
    fl_module *m = fl_module_new(&layer_norm_type, s);
    if (m && elementwise_affine) {
        fl_variable *w = fl__nn_parameter(m, "weight", ndim, normalized_shape);
        if (!w || !fl__nn_parameter(m, "bias", ndim, normalized_shape) || fl_init_ones(w) != FL_OK)
            fl_module_release(m), m = NULL;
    }
    return m;
}
