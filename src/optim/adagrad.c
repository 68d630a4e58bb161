/* Adagrad, as torch.optim.Adagrad. */
#include "internal.h"

static fl_tensor *adagrad_update(const fl__optim *o, const fl_tensor *value, const fl_tensor *grad, double step,
                                 fl_tensor **buffers)
{
    const fl_adagrad_options *opt = o->options;
    fl_tensor *g = fl__decayed_grad(grad, value, opt->weight_decay);
    double lr = o->base.lr / (1 + (step - 1) * opt->lr_decay);
    /* PyTorch fills the sum when it makes the optimizer; here on the first step, the
     * same value, so the state of a parameter never stepped is simply absent. */
    fl_tensor *sum = buffers[0] ? buffers[0] : fl_full_like(value, opt->initial_accumulator_value);
    sum = buffers[0] = fl_add(sum, fl_mul(g, g));
    fl_tensor *std = fl_add_scalar(fl_sqrt(sum), opt->eps);
    return fl_sub(value, fl_mul_scalar(fl_div(g, std), lr));
}

fl_optimizer *fl_adagrad(fl_variable *const *params, size_t count, const fl_adagrad_options *options)
{
    const char *fn = "fl_adagrad";
    fl_adagrad_options opt = options ? *options : FL_ADAGRAD_DEFAULTS;
    if (!fl__check_nonnegative(fn, "lr_decay", opt.lr_decay) ||
        !fl__check_nonnegative(fn, "weight_decay", opt.weight_decay) ||
        !fl__check_nonnegative(fn, "initial_accumulator_value", opt.initial_accumulator_value) ||
        !fl__check_nonnegative(fn, "eps", opt.eps))
        return NULL;
    const char *names[] = {"sum", NULL};
    fl__optim *o = fl__optim_create(fn, "adagrad", params, count, opt.lr, adagrad_update, true, names, NULL, &opt,
                                    sizeof opt);
    return o ? &o->base : NULL;
}
