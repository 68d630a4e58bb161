/* Learning-rate schedules: the closed forms of torch.optim.lr_scheduler's StepLR,
 * CosineAnnealingLR and LinearLR, written as PyTorch writes them (same operations,
 * same order), and their composition after a linear warm-up. */
#include <math.h>

#include "internal.h"

/* Records "fn: what = value: it must be >= least" and returns NAN. */
static double too_small(const char *fn, const char *what, int64_t value, int least)
{
    fl_error(FL_ERR_VALUE, fn, "%s = %lld: it must be >= %d", what, (long long)value, least);
    return NAN;
}

double fl_lr_step(double base_lr, int64_t epoch, int64_t step_size, double gamma)
{
    if (epoch < 0)
        return too_small("fl_lr_step", "epoch", epoch, 0);
    if (step_size < 1)
        return too_small("fl_lr_step", "step_size", step_size, 1);
    return base_lr * pow(gamma, (double)(epoch / step_size));
}

double fl_lr_cosine(double base_lr, int64_t epoch, int64_t t_max, double eta_min)
{
    if (epoch < 0)
        return too_small("fl_lr_cosine", "epoch", epoch, 0);
    if (t_max < 1)
        return too_small("fl_lr_cosine", "t_max", t_max, 1);
    return eta_min + (base_lr - eta_min) * (1 + cos(M_PI * (double)epoch / (double)t_max)) / 2;
}

double fl_lr_linear(double base_lr, int64_t epoch, double start_factor, double end_factor, int64_t total_iters)
{
    const char *fn = "fl_lr_linear";
    if (epoch < 0)
        return too_small(fn, "epoch", epoch, 0);
    if (total_iters < 1)
        return too_small(fn, "total_iters", total_iters, 1);
    /* PyTorch's bounds: a start of 0 would make the first learning rate 0. */
    if (!(start_factor > 0 && start_factor <= 1))
        return fl_error(FL_ERR_VALUE, fn, "start_factor = %g: it must be in (0, 1]", start_factor), NAN;
    if (!(end_factor >= 0 && end_factor <= 1))
        return fl_error(FL_ERR_VALUE, fn, "end_factor = %g: it must be in [0, 1]", end_factor), NAN;
    int64_t done = epoch < total_iters ? epoch : total_iters;
    return base_lr * (start_factor + (end_factor - start_factor) * (double)done / (double)total_iters);
}

double fl_lr_at(const fl_lr_schedule *s, double base_lr, int64_t epoch)
{
    if (fl_null_args("fl_lr_at", 1, s))
        return NAN;
    if (s->warmup_iters < 0)
        return too_small("fl_lr_at", "warmup_iters", s->warmup_iters, 0);
    if (epoch < 0)
        return too_small("fl_lr_at", "epoch", epoch, 0);
    if (epoch < s->warmup_iters) {
        double start = s->warmup_start_factor != 0 ? s->warmup_start_factor : 1.0 / 3;
        return fl_lr_linear(base_lr, epoch, start, 1.0, s->warmup_iters);
    }
    epoch -= s->warmup_iters;
    switch (s->kind) {
    case FL_LR_CONSTANT:
        return base_lr;
    case FL_LR_STEP:
        return fl_lr_step(base_lr, epoch, s->step_size, s->gamma);
    case FL_LR_COSINE:
        return fl_lr_cosine(base_lr, epoch, s->t_max, s->eta_min);
    }
    return fl_error(FL_ERR_VALUE, "fl_lr_at", "unknown schedule kind %d", (int)s->kind), NAN;
}
