/* NovoGrad as Flashlight's fl::NovogradOptimizer computes it (the formula is in
 * include/flare/optim.h). It differs from the paper's Algorithm 1 (arXiv:1905.11286)
 * in two ways, both Flashlight's: the second moment starts at 0 rather than at the
 * first gradient's squared norm, and the gradient term of the first moment is
 * weighted by (1 - beta1). */
#include "internal.h"

static fl_tensor *novograd_update(const fl__optim *o, const fl_tensor *value, const fl_tensor *grad, double step,
                                  fl_tensor **buffers)
{
    const fl_novograd_options *opt = o->options;
    fl_tensor *m = fl__buffer_or_zeros(buffers[0], value);
    fl_tensor *v = buffers[1] ? buffers[1] : fl_new_scalar(value, 0, fl_dtype_of(value));
    fl_tensor *norm_squared = fl_sum(fl_mul(grad, grad), FL_ALL_AXES, false);
    v = fl_add(fl_mul_scalar(v, opt->beta2), fl_mul_scalar(norm_squared, 1 - opt->beta2));
    fl_tensor *normalized = fl_div(grad, fl_add_scalar(fl_sqrt(v), opt->eps));
    fl_tensor *direction = fl__decayed_grad(normalized, value, opt->weight_decay);
    m = fl_add(fl_mul_scalar(m, opt->beta1), fl_mul_scalar(direction, 1 - opt->beta1));
    buffers[0] = m;
    buffers[1] = v;
    return fl_sub(value, fl_mul_scalar(m, o->base.lr));
}

fl_optimizer *fl_novograd(fl_variable *const *params, size_t count, const fl_novograd_options *options)
{
    const char *fn = "fl_novograd";
    fl_novograd_options opt = options ? *options : FL_NOVOGRAD_DEFAULTS;
    if (!fl__check_beta(fn, "beta1", opt.beta1) || !fl__check_beta(fn, "beta2", opt.beta2) ||
        !fl__check_nonnegative(fn, "eps", opt.eps) || !fl__check_nonnegative(fn, "weight_decay", opt.weight_decay))
        return NULL;
    const char *names[] = {"exp_avg", "exp_avg_sq", NULL};
    const fl__buffer_shape shapes[] = {FL_BUFFER_LIKE_PARAM, FL_BUFFER_SCALAR};
    fl__optim *o = fl__optim_create(fn, "novograd", params, count, opt.lr, novograd_update, false, names, shapes,
                                    &opt, sizeof opt);
    return o ? &o->base : NULL;
}
