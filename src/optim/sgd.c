/* Stochastic gradient descent with momentum, Nesterov momentum and weight decay, as
 * torch.optim.SGD. */
#include "../tensor/internal.h" /* fl__sgd_update, the fused step */
#include "internal.h"

static fl_tensor *sgd_update(const fl__optim *o, const fl_tensor *value, const fl_tensor *grad, double step,
                             fl_tensor **buffers)
{
    const fl_sgd_options *opt = o->options;
    if (opt->momentum != 0 && buffers[0]) {
        /* After the first step, the step in place where the backend has the kernel and
         * nothing but the parameter and this optimizer holds the value and the buffer
         * (fl__sgd_update checks): the parameter's value tensor is then its own
         * again, its values the new ones. */
        fl_sgd_desc d = {.lr = o->base.lr, .momentum = opt->momentum, .dampening = opt->dampening,
                         .weight_decay = opt->weight_decay, .nesterov = opt->nesterov};
        fl_status status = fl__sgd_update("fl_optimizer_step", value, buffers[0], grad, &d);
        if (status == FL_OK)
            return fl_out(fl_retain(value));
        if (status != FL_ERR_UNSUPPORTED)
            return NULL;
    }
    fl_tensor *g = fl__decayed_grad(grad, value, opt->weight_decay);
    if (opt->momentum != 0) {
        /* The first step starts the buffer at the gradient itself, undamped. Each sum
         * is one fl_add_scaled: one pass over memory where the backend fuses it. */
        fl_tensor *buf = buffers[0] ? fl_add_scaled(buffers[0], opt->momentum, g, 1 - opt->dampening) : g;
        buffers[0] = buf;
        g = opt->nesterov ? fl_add_scaled(g, 1, buf, opt->momentum) : buf;
    }
    return fl_add_scaled(value, 1, g, -o->base.lr);
}

fl_optimizer *fl_sgd(fl_variable *const *params, size_t count, const fl_sgd_options *options)
{
    const char *fn = "fl_sgd";
    fl_sgd_options opt = options ? *options : FL_SGD_DEFAULTS;
    if (!fl__check_nonnegative(fn, "momentum", opt.momentum) ||
        !fl__check_nonnegative(fn, "dampening", opt.dampening) ||
        !fl__check_nonnegative(fn, "weight_decay", opt.weight_decay))
        return NULL;
    if (opt.nesterov && (opt.momentum <= 0 || opt.dampening != 0))
        return fl_error(FL_ERR_VALUE, fn, "Nesterov momentum needs momentum > 0 and dampening 0 (momentum = %g, "
                        "dampening = %g)", opt.momentum, opt.dampening);
    const char *momentum[] = {"momentum_buffer", NULL}, *none[] = {NULL};
    fl__optim *o = fl__optim_create(fn, "sgd", params, count, opt.lr, sgd_update, false,
                                    opt.momentum != 0 ? momentum : none, NULL, &opt, sizeof opt);
    return o ? &o->base : NULL;
}
