/* RMSprop, plain or centered, with momentum, as torch.optim.RMSprop. */
#include "internal.h"

typedef struct rmsprop_config {
    fl_rmsprop_options options;
    int momentum_buffer, grad_avg; /* the buffers' positions, or -1 when unused */
} rmsprop_config;

static fl_tensor *rmsprop_update(const fl__optim *o, const fl_tensor *value, const fl_tensor *grad, double step,
                                 fl_tensor **buffers)
{
    const rmsprop_config *c = o->options;
    const fl_rmsprop_options *opt = &c->options;
    fl_tensor *g = fl__decayed_grad(grad, value, opt->weight_decay);
    fl_tensor *square_avg = fl__buffer_or_zeros(buffers[0], value);
    square_avg = fl_add(fl_mul_scalar(square_avg, opt->alpha), fl_mul(fl_mul_scalar(g, 1 - opt->alpha), g));
    buffers[0] = square_avg;
    fl_tensor *avg;
    if (opt->centered) {
        fl_tensor *grad_avg = fl__buffer_or_zeros(buffers[c->grad_avg], value);
        grad_avg = fl_add(grad_avg, fl_mul_scalar(fl_sub(g, grad_avg), 1 - opt->alpha)); /* lerp */
        buffers[c->grad_avg] = grad_avg;
        avg = fl_sqrt(fl_sub(square_avg, fl_mul(grad_avg, grad_avg)));
    } else {
        avg = fl_sqrt(square_avg);
    }
    avg = fl_add_scalar(avg, opt->eps);
    fl_tensor *update = fl_div(g, avg);
    if (opt->momentum > 0) {
        fl_tensor *buf = fl__buffer_or_zeros(buffers[c->momentum_buffer], value);
        update = buffers[c->momentum_buffer] = fl_add(fl_mul_scalar(buf, opt->momentum), update);
    }
    return fl_sub(value, fl_mul_scalar(update, o->base.lr));
}

fl_optimizer *fl_rmsprop(fl_variable *const *params, size_t count, const fl_rmsprop_options *options)
{
    const char *fn = "fl_rmsprop";
    rmsprop_config c = {options ? *options : FL_RMSPROP_DEFAULTS, -1, -1};
    if (!fl__check_nonnegative(fn, "alpha", c.options.alpha) || !fl__check_nonnegative(fn, "eps", c.options.eps) ||
        !fl__check_nonnegative(fn, "weight_decay", c.options.weight_decay) ||
        !fl__check_nonnegative(fn, "momentum", c.options.momentum))
        return NULL;
    /* PyTorch's order: square_avg, momentum_buffer, grad_avg. */
    const char *names[4] = {"square_avg"};
    int n = 1;
    if (c.options.momentum > 0)
        names[c.momentum_buffer = n++] = "momentum_buffer";
    if (c.options.centered)
        names[c.grad_avg = n++] = "grad_avg";
    names[n] = NULL;
    fl__optim *o = fl__optim_create(fn, "rmsprop", params, count, c.options.lr, rmsprop_update, true, names, NULL,
                                    &c, sizeof c);
    return o ? &o->base : NULL;
}
