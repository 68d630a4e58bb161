/* MaxPool2d, AvgPool2d and AdaptiveAvgPool2d. */
#include <stdlib.h>

#include "internal.h"

static fl_variable *pool_forward(fl_module *m, fl_variable *x)
{
    if (!fl__nn_check_input(m, x, 4, 4, -1, 0, "an input of shape [N, C, H, W]"))
        return NULL;
    return fl_v_pool2d(x, fl_module_state(m));
}

static const fl_module_type max_pool2d_type = {.name = "MaxPool2d", .forward = pool_forward};
static const fl_module_type avg_pool2d_type = {.name = "AvgPool2d", .forward = pool_forward};

fl_module *fl_nn_pool2d(const fl_pool_params *params)
{
    const char *fn = "fl_nn_pool2d";
    if (fl_null_args(fn, 1, params))
        return NULL;
    const fl_pool_params *p = params;
    if (p->kernel[0] <= 0 || p->kernel[1] <= 0 || p->stride[0] < 0 || p->stride[1] < 0 || p->padding[0] < 0 ||
        p->padding[1] < 0 || 2 * p->padding[0] > p->kernel[0] || 2 * p->padding[1] > p->kernel[1])
        return fl_error(FL_ERR_VALUE, fn,
                        "kernel %dx%d, stride %dx%d, padding %dx%d: the kernel must be positive, and padding at "
                        "most half of it",
                        p->kernel[0], p->kernel[1], p->stride[0], p->stride[1], p->padding[0], p->padding[1]);
    fl_pool_params *state = malloc(sizeof *state);
    if (!state)
        return fl_error(FL_ERR_MEMORY, fn, "out of memory");
    *state = *params;
    return fl_module_new(p->kind == FL_POOL_MAX ? &max_pool2d_type : &avg_pool2d_type, state);
}

fl_module *fl_nn_max_pool2d(int kernel, int stride, int padding)
{
    return fl_nn_pool2d(&(fl_pool_params){
        .kind = FL_POOL_MAX, .kernel = {kernel, kernel}, .stride = {stride, stride}, .padding = {padding, padding}});
}

/* PyTorch's AvgPool2d counts the padding in the window by default. */
fl_module *fl_nn_avg_pool2d(int kernel, int stride, int padding)
{
    return fl_nn_pool2d(&(fl_pool_params){.kind = FL_POOL_AVG,
                                          .kernel = {kernel, kernel},
                                          .stride = {stride, stride},
                                          .padding = {padding, padding},
                                          .count_include_pad = true});
}

/* ---- adaptive average pooling ----
 * Averaging windows are separable, so the pooling is A_h x A_w^T with A [out, in]
 * holding 1 / (window length) over each window: two matrix products forward and two
 * backward, for any sizes. */

typedef struct adaptive_state {
    int64_t out[2];
} adaptive_state;

/* On like's backend, in its dtype. */
static fl_tensor *window_matrix(int64_t out, int64_t in, const fl_tensor *like)
{
    double *a = calloc((size_t)(out * in), sizeof *a);
    if (!a)
        return fl_error(FL_ERR_MEMORY, "AdaptiveAvgPool2d", "out of memory");
    for (int64_t i = 0; i < out; i++) {
        int64_t start = i * in / out, end = ((i + 1) * in + out - 1) / out;
        for (int64_t j = start; j < end; j++)
            a[i * in + j] = 1.0 / (double)(end - start);
    }
    fl_tensor *t = fl_to_backend(fl_cast(fl_from_data(a, FL_F64, FL_SHAPE(out, in)), fl_dtype_of(like)),
                                 fl_backend_name(like));
    free(a);
    return t;
}

/* Saved: A_h, A_w. dx = A_h^T dy A_w. */
static void adaptive_grad(fl_grad *g)
{
    const fl_tensor *ah = g->saved[0], *aw = g->saved[1];
    g->input_grads[0] = fl_matmul(fl_matmul(fl_transpose(ah, 0, 1), g->output_grad), aw);
}

static fl_variable *adaptive_forward(fl_module *m, fl_variable *x)
{
    const adaptive_state *s = fl_module_state(m);
    if (!fl__nn_check_input(m, x, 4, 4, -1, 0, "an input of shape [N, C, H, W]"))
        return NULL;
    const fl_tensor *xv = fl_v_value(x);
    fl_scope scope = fl_scope_begin();
    fl_tensor *ah = window_matrix(s->out[0], fl_shape(xv)[2], xv);
    fl_tensor *aw = window_matrix(s->out[1], fl_shape(xv)[3], xv);
    fl_tensor *y = fl_matmul(fl_matmul(ah, xv), fl_transpose(aw, 0, 1));
    return fl_v_scope_return(scope, fl_v_record(y, FL_VARS(x), adaptive_grad, FL_SAVE(ah, aw), NULL, 0));
}

static const fl_module_type adaptive_avg_pool2d_type = {.name = "AdaptiveAvgPool2d", .forward = adaptive_forward};

fl_module *fl_nn_adaptive_avg_pool2d(int64_t out_h, int64_t out_w)
{
    if (out_h <= 0 || out_w <= 0)
        return fl_error(FL_ERR_VALUE, "fl_nn_adaptive_avg_pool2d", "output size %lldx%lld is not positive",
                        (long long)out_h, (long long)out_w);
    adaptive_state *s = malloc(sizeof *s);
    if (!s)
        return fl_error(FL_ERR_MEMORY, "fl_nn_adaptive_avg_pool2d", "out of memory");
    *s = (adaptive_state){{out_h, out_w}};
    return fl_module_new(&adaptive_avg_pool2d_type, s);
}
