/* Initializers: torch.nn.init's, replacing a parameter's value. */
#include <math.h>

#include "internal.h"

fl_status fl_init_fans(const fl_tensor *t, int64_t *fan_in, int64_t *fan_out)
{
    if (fl_null_args("fl_init_fans", 1, t))
        return fl_last_status();
    if (fl_ndim(t) < 2) {
        char d[FL_DESC_SIZE];
        return fl_error(FL_ERR_SHAPE, "fl_init_fans", "fans need two or more axes, got %s", fl_describe(t, d)),
               FL_ERR_SHAPE;
    }
    int64_t receptive = 1;
    for (int i = 2; i < fl_ndim(t); i++)
        receptive *= fl_shape(t)[i];
    *fan_in = fl_shape(t)[1] * receptive;
    *fan_out = fl_shape(t)[0] * receptive;
    return FL_OK;
}

/* Whether initializers initialize on this thread (fl_nn_set_initialization). */
static _Thread_local bool skipping;

bool fl__nn_initializing(void) { return !skipping; }

bool fl_nn_set_initialization(bool on)
{
    bool was = !skipping;
    skipping = !on;
    return was;
}

/* Sets p's value to value (made in the caller's scope), or passes on its failure. */
static fl_status replace(fl_variable *p, fl_tensor *value)
{
    return value ? fl_v_set_value(p, value) : fl_last_status();
}

static fl_status init_uniform(const char *fn, fl_variable *p, double low, double high)
{
    if (fl_null_args(fn, 1, p))
        return fl_last_status();
    if (skipping)
        return FL_OK;
    const fl_tensor *v = fl_v_value(p);
    fl_scope scope = fl_scope_begin();
    fl_status status = replace(p, fl_uniform(low, high, fl_dtype_of(v), fl_ndim(v), fl_shape(v)));
    fl_scope_end(scope);
    return status;
}

static fl_status init_normal(const char *fn, fl_variable *p, double mean, double std)
{
    if (fl_null_args(fn, 1, p))
        return fl_last_status();
    if (skipping)
        return FL_OK;
    const fl_tensor *v = fl_v_value(p);
    fl_scope scope = fl_scope_begin();
    fl_status status = replace(p, fl_normal(mean, std, fl_dtype_of(v), fl_ndim(v), fl_shape(v)));
    fl_scope_end(scope);
    return status;
}

fl_status fl_init_uniform(fl_variable *p, double low, double high)
{
    return init_uniform("fl_init_uniform", p, low, high);
}

fl_status fl_init_normal(fl_variable *p, double mean, double std)
{
    return init_normal("fl_init_normal", p, mean, std);
}

fl_status fl_init_constant(fl_variable *p, double value)
{
    if (fl_null_args("fl_init_constant", 1, p))
        return fl_last_status();
    if (skipping)
        return FL_OK;
    fl_scope scope = fl_scope_begin();
    fl_status status = replace(p, fl_full_like(fl_v_value(p), value));
    fl_scope_end(scope);
    return status;
}

fl_status fl_init_zeros(fl_variable *p) { return fl_init_constant(p, 0); }
fl_status fl_init_ones(fl_variable *p) { return fl_init_constant(p, 1); }

/* torch.nn.init.calculate_gain("leaky_relu", a). */
static double leaky_relu_gain(double a) { return sqrt(2.0 / (1.0 + a * a)); }

static bool fan_of(const char *fn, fl_variable *p, fl_fan_mode mode, int64_t *fan)
{
    int64_t in, out;
    if (fl_null_args(fn, 1, p) || fl_init_fans(fl_v_value(p), &in, &out) != FL_OK)
        return false;
    *fan = mode == FL_FAN_OUT ? out : in;
    if (*fan == 0)
        return fl_error(FL_ERR_SHAPE, fn, "a parameter with no elements has no fan"), false;
    return true;
}

fl_status fl_init_kaiming_uniform(fl_variable *p, double a, fl_fan_mode mode)
{
    int64_t fan;
    if (!fan_of("fl_init_kaiming_uniform", p, mode, &fan))
        return fl_last_status();
    double bound = leaky_relu_gain(a) * sqrt(3.0 / (double)fan);
    return init_uniform("fl_init_kaiming_uniform", p, -bound, bound);
}

fl_status fl_init_kaiming_normal(fl_variable *p, double a, fl_fan_mode mode)
{
    int64_t fan;
    if (!fan_of("fl_init_kaiming_normal", p, mode, &fan))
        return fl_last_status();
    return init_normal("fl_init_kaiming_normal", p, 0, leaky_relu_gain(a) / sqrt((double)fan));
}

static bool fans_of(const char *fn, fl_variable *p, double *sum)
{
    int64_t in, out;
    if (fl_null_args(fn, 1, p) || fl_init_fans(fl_v_value(p), &in, &out) != FL_OK)
        return false;
    if (in + out == 0)
        return fl_error(FL_ERR_SHAPE, fn, "a parameter with no elements has no fan"), false;
    *sum = (double)(in + out);
    return true;
}

fl_status fl_init_xavier_uniform(fl_variable *p, double gain)
{
    double fans;
    if (!fans_of("fl_init_xavier_uniform", p, &fans))
        return fl_last_status();
    double bound = gain * sqrt(6.0 / fans);
    return init_uniform("fl_init_xavier_uniform", p, -bound, bound);
}

fl_status fl_init_xavier_normal(fl_variable *p, double gain)
{
    double fans;
    if (!fans_of("fl_init_xavier_normal", p, &fans))
        return fl_last_status();
    return init_normal("fl_init_xavier_normal", p, 0, gain * sqrt(2.0 / fans));
}

/* Linear's and ConvNd's reset_parameters(): kaiming_uniform(a = sqrt(5)) for the
 * weight, which is U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the same bound for the bias. */
fl_status fl__nn_reset_affine(fl_module *m)
{
    fl_variable *weight = fl_module_parameter(m, "weight"), *bias = fl_module_parameter(m, "bias");
    int64_t fan_in, fan_out;
    fl_status status = fl_init_fans(fl_v_value(weight), &fan_in, &fan_out);
    if (status == FL_OK && fan_in > 0)
        status = fl_init_kaiming_uniform(weight, sqrt(5.0), FL_FAN_IN);
    if (status == FL_OK && bias && fan_in > 0)
        status = fl_init_uniform(bias, -1 / sqrt((double)fan_in), 1 / sqrt((double)fan_in));
    return status;
}
