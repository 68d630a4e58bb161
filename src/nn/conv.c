/* Conv1d and Conv2d: the convolution of fl_v_conv1d / fl_v_conv2d plus a bias per
 * output channel. */
#include <stdlib.h>

#include "internal.h"

typedef struct conv_state {
    int spatial; /* 1 or 2 */
    fl_conv_params params;
} conv_state;

static fl_variable *conv_forward(fl_module *m, fl_variable *x)
{
    const conv_state *s = fl_module_state(m);
    fl_variable *weight = fl_module_parameter(m, "weight"), *bias = fl_module_parameter(m, "bias");
    const int64_t *w = fl_shape(fl_v_value(weight));
    int64_t channels = w[1] * (s->params.groups ? s->params.groups : 1);
    char what[64];
    snprintf(what, sizeof what, "an input of shape [N, %lld, %s]", (long long)channels, s->spatial == 2 ? "H, W" : "L");
    if (!fl__nn_check_input(m, x, s->spatial + 2, s->spatial + 2, 1, channels, what))
        return NULL;
    fl_scope scope = fl_scope_begin();
    fl_variable *y = s->spatial == 2 ? fl_v_conv2d(x, weight, &s->params) : fl_v_conv1d(x, weight, &s->params);
    if (bias)
        y = fl_v_add(y, fl_v_reshape(bias, s->spatial + 1, (const int64_t[]){w[0], 1, 1}));
    return fl_v_scope_return(scope, y);
}

static const fl_module_type conv1d_type = {.name = "Conv1d", .forward = conv_forward};
static const fl_module_type conv2d_type = {.name = "Conv2d", .forward = conv_forward};

static fl_module *conv(const char *fn, int spatial, int64_t in, int64_t out, const int *kernel,
                       const fl_conv_params *params, bool bias)
{
    fl_conv_params p = params ? *params : (fl_conv_params){0};
    int groups = p.groups ? p.groups : 1;
    if (in <= 0 || out <= 0 || kernel[0] <= 0 || kernel[1] <= 0 || groups < 0 || in % groups || out % groups)
        return fl_error(FL_ERR_VALUE, fn,
                        "%lld in and %lld out channels in %d groups with a %dx%d kernel: sizes must be positive and "
                        "channels divisible by the groups",
                        (long long)in, (long long)out, groups, kernel[0], kernel[1]);
    conv_state *s = malloc(sizeof *s);
    if (!s)
        return fl_error(FL_ERR_MEMORY, fn, "out of memory");
    *s = (conv_state){spatial, p};
    fl_module *m = fl_module_new(spatial == 2 ? &conv2d_type : &conv1d_type, s);
    int64_t shape[4] = {out, in / groups, kernel[0], kernel[1]};
    if (spatial == 1)
        shape[2] = kernel[1];
    bool ok = fl__nn_parameter(m, "weight", spatial + 2, shape) && (!bias || fl__nn_parameter(m, "bias", FL_SHAPE(out))) &&
              fl__nn_reset_affine(m) == FL_OK;
    if (!ok)
        fl_module_release(m), m = NULL;
    return m;
}

fl_module *fl_nn_conv1d(int64_t in_channels, int64_t out_channels, int kernel, const fl_conv_params *params,
                        bool bias)
{
    return conv("fl_nn_conv1d", 1, in_channels, out_channels, (const int[]){1, kernel}, params, bias);
}

fl_module *fl_nn_conv2d(int64_t in_channels, int64_t out_channels, int kernel_h, int kernel_w,
                        const fl_conv_params *params, bool bias)
{
    return conv("fl_nn_conv2d", 2, in_channels, out_channels, (const int[]){kernel_h, kernel_w}, params, bias);
}
