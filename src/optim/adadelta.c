/* Adadelta, as torch.optim.Adadelta. */
#include "internal.h"

static fl_tensor *adadelta_update(const fl__optim *o, const fl_tensor *value, const fl_tensor *grad, double step,
                                  fl_tensor **buffers)
{
    const fl_adadelta_options *opt = o->options;
    fl_tensor *g = fl__decayed_grad(grad, value, opt->weight_decay);
    fl_tensor *square_avg = fl__buffer_or_zeros(buffers[0], value);
    fl_tensor *acc_delta = fl__buffer_or_zeros(buffers[1], value);
    square_avg = fl_add(fl_mul_scalar(square_avg, opt->rho), fl_mul(fl_mul_scalar(g, 1 - opt->rho), g));
    fl_tensor *std = fl_sqrt(fl_add_scalar(square_avg, opt->eps));
    fl_tensor *delta = fl_mul(fl_div(fl_sqrt(fl_add_scalar(acc_delta, opt->eps)), std), g);
    acc_delta = fl_add(fl_mul_scalar(acc_delta, opt->rho), fl_mul(fl_mul_scalar(delta, 1 - opt->rho), delta));
    buffers[0] = square_avg;
    buffers[1] = acc_delta;
    return fl_sub(value, fl_mul_scalar(delta, o->base.lr));
}

fl_optimizer *fl_adadelta(fl_variable *const *params, size_t count, const fl_adadelta_options *options)
{
    const char *fn = "fl_adadelta";
    fl_adadelta_options opt = options ? *options : FL_ADADELTA_DEFAULTS;
    if (!(opt.rho >= 0 && opt.rho <= 1))
        return fl_error(FL_ERR_VALUE, fn, "rho = %g: it must be in [0, 1]", opt.rho);
    if (!fl__check_nonnegative(fn, "eps", opt.eps) || !fl__check_nonnegative(fn, "weight_decay", opt.weight_decay))
        return NULL;
    const char *names[] = {"square_avg", "acc_delta", NULL};
    fl__optim *o = fl__optim_create(fn, "adadelta", params, count, opt.lr, adadelta_update, true, names, NULL, &opt,
                                    sizeof opt);
    return o ? &o->base : NULL;
}
