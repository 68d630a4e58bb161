/* Adam and AdamW, with or without AMSGrad, as torch.optim.Adam and AdamW. */
#include <math.h>

#include "../tensor/internal.h" /* fl__adam_update, the fused step */
#include "internal.h"

typedef struct adam_config {
    fl_adam_options options;
    bool decoupled; /* AdamW: decay the value, not the gradient */
} adam_config;

static fl_tensor *adam_update(const fl__optim *o, const fl_tensor *value, const fl_tensor *grad, double step,
                              fl_tensor **buffers)
{
    const adam_config *c = o->options;
    const fl_adam_options *opt = &c->options;
    double lr = o->base.lr;
    if (buffers[0] && buffers[1] && (!opt->amsgrad || buffers[2])) {
        /* After the first step, the step in place, under SGD's conditions (sgd.c). */
        fl_adam_desc d = {.lr = lr,
                          .beta1 = opt->beta1,
                          .beta2 = opt->beta2,
                          .eps = opt->eps,
                          .weight_decay = opt->weight_decay,
                          .step = step,
                          .decoupled = c->decoupled,
                          .amsgrad = opt->amsgrad};
        fl_status status = fl__adam_update("fl_optimizer_step", value, buffers[0], buffers[1],
                                           opt->amsgrad ? buffers[2] : NULL, grad, &d);
        if (status == FL_OK)
            return fl_out(fl_retain(value));
        if (status != FL_ERR_UNSUPPORTED)
            return NULL;
    }
    const fl_tensor *g = grad;
    if (opt->weight_decay != 0) {
        if (c->decoupled)
            value = fl_mul_scalar(value, 1 - lr * opt->weight_decay);
        else
            g = fl__decayed_grad(grad, value, opt->weight_decay);
    }
    fl_tensor *m = fl__buffer_or_zeros(buffers[0], value);
    fl_tensor *v = fl__buffer_or_zeros(buffers[1], value);
    /* m.lerp_(g, 1 - beta1), in lerp's form for weights below one half. */
    m = fl_add(m, fl_mul_scalar(fl_sub(g, m), 1 - opt->beta1));
    v = fl_add(fl_mul_scalar(v, opt->beta2), fl_mul(fl_mul_scalar(g, 1 - opt->beta2), g));
    buffers[0] = m;
    buffers[1] = v;
    double bias_correction1 = 1 - pow(opt->beta1, step);
    double bias_correction2_sqrt = sqrt(1 - pow(opt->beta2, step));
    fl_tensor *second = v;
    if (opt->amsgrad)
        second = buffers[2] = fl_maximum(fl__buffer_or_zeros(buffers[2], value), v);
    fl_tensor *denom = fl_add_scalar(fl_div_scalar(fl_sqrt(second), bias_correction2_sqrt), opt->eps);
    return fl_sub(value, fl_mul_scalar(fl_div(m, denom), lr / bias_correction1));
}

static fl_optimizer *create(const char *fn, const char *name, fl_variable *const *params, size_t count,
                            const fl_adam_options *options, fl_adam_options defaults, bool decoupled)
{
    adam_config c = {options ? *options : defaults, decoupled};
    if (!fl__check_beta(fn, "beta1", c.options.beta1) || !fl__check_beta(fn, "beta2", c.options.beta2) ||
        !fl__check_nonnegative(fn, "eps", c.options.eps) ||
        !fl__check_nonnegative(fn, "weight_decay", c.options.weight_decay))
        return NULL;
    const char *names[] = {"exp_avg", "exp_avg_sq", c.options.amsgrad ? "max_exp_avg_sq" : NULL, NULL};
    fl__optim *o = fl__optim_create(fn, name, params, count, c.options.lr, adam_update, true, names, NULL, &c,
                                    sizeof c);
    return o ? &o->base : NULL;
}

fl_optimizer *fl_adam(fl_variable *const *params, size_t count, const fl_adam_options *options)
{
    return create("fl_adam", "adam", params, count, options, FL_ADAM_DEFAULTS, false);
}

fl_optimizer *fl_adamw(fl_variable *const *params, size_t count, const fl_adam_options *options)
{
    return create("fl_adamw", "adamw", params, count, options, FL_ADAMW_DEFAULTS, true);
}
