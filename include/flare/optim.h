/*
 * Optimizers, learning-rate schedules and gradient clipping.
 *
 * An optimizer updates a list of parameters (leaf variables, retained for its life)
 * from their accumulated gradients (fl_v_grad). Each one applies PyTorch's update rule
 * (torch.optim, the single-tensor form), in the parameter's dtype, and skips
 * parameters without a gradient, as PyTorch does: their state, step count included,
 * does not advance. Values are replaced with fl_v_set_value; the arithmetic runs with
 * gradient recording off, inside a scope, so a step leaves nothing behind but the new
 * values and state. SGD with momentum, once it has a momentum buffer, and Adam and
 * AdamW, once they have their moments, write a value and its state in place instead,
 * where the backend has the kernel (backend.h, sgd_update and adam_update) and nothing
 * else holds any of those tensors: a tensor taken with fl_v_value
 * and kept (fl_retain), or a view of it, keeps the values it had, as with every other
 * step; only a pointer kept without a reference sees the new values.
 *
 * Options. Every field is taken as written: zero means zero. A NULL options pointer
 * means PyTorch's defaults, and FL_<NAME>_DEFAULTS is the same defaults as a value to
 * start from, since a zero-filled struct cannot stand for them (beta1 = 0 and AdamW's
 * weight_decay = 0 are meaningful settings):
 *
 *     fl_adam_options options = FL_ADAMW_DEFAULTS;
 *     options.lr = 3e-4;
 *     fl_optimizer *opt = fl_adamw(params, count, &options);
 *
 * Options whose defaults are all zero but lr read well as literals:
 * fl_sgd(params, count, &(fl_sgd_options){.lr = 0.1, .momentum = 0.9}).
 *
 * State. fl_optimizer_state writes the state as named tensors under PyTorch's
 * state_dict names, "<prefix>state.<parameter index>.<name>" (exp_avg, exp_avg_sq,
 * max_exp_avg_sq, momentum_buffer, square_avg, grad_avg, acc_delta, sum, and step as
 * an f64 0-d tensor), plus "<prefix>param_groups.0.lr"; a parameter that has not been
 * stepped has no entries, as in PyTorch (except that PyTorch's Adagrad makes its state
 * when it is created, Flare's at the first step). Loading it into an optimizer of the same kind
 * and options over parameters of the same shapes continues the run bit for bit; the
 * state loaded lives on each parameter's backend, whatever backend the map's tensors
 * are on.
 *
 * Errors follow tensor.h: NULL or a non-zero fl_status, with a message naming the
 * function, the option or parameter, and the shapes and dtypes.
 */
#ifndef FLARE_OPTIM_H
#define FLARE_OPTIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "flare/autograd.h"
#include "flare/tensor_map.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the interface ----------------------------------------------------------------- */

typedef struct fl_optimizer fl_optimizer;

/* A table of function pointers over a list of parameters, as the memory manager is:
 * an optimizer of one's own fills it in (the built-in ones are in src/optim/). */
struct fl_optimizer {
    const char *name;      /* "sgd", "adam", ... */
    fl_variable **params;  /* retained; destroy releases them */
    size_t count;
    double lr;             /* read at every step: schedules change it between steps */
    /* One update of every parameter that has a gradient. On failure (out of memory)
     * the parameters before the failing one have been updated, the rest not. */
    fl_status (*step)(fl_optimizer *o);
    /* Writes the state into map under prefix (see above). */
    fl_status (*save_state)(const fl_optimizer *o, fl_tensor_map *map, const char *prefix);
    /* Replaces the state by what map holds under prefix; on error the state is unchanged. */
    fl_status (*load_state)(fl_optimizer *o, const fl_tensor_map *map, const char *prefix);
    /* Releases the parameters, the state and the optimizer itself. */
    void (*destroy)(fl_optimizer *o);
};

fl_status fl_optimizer_step(fl_optimizer *o);
/* Drops every parameter's gradient (the same for every optimizer, so not in the table). */
void fl_optimizer_zero_grad(fl_optimizer *o);
fl_status fl_optimizer_set_lr(fl_optimizer *o, double lr); /* lr >= 0 */
double fl_optimizer_get_lr(const fl_optimizer *o);         /* NAN for NULL */
fl_status fl_optimizer_state(const fl_optimizer *o, fl_tensor_map *map, const char *prefix);
fl_status fl_optimizer_load_state(fl_optimizer *o, const fl_tensor_map *map, const char *prefix);
/* Moves the parameters (in place, as fl_v_to_backend: they are the model's too) and
 * the state to the backend named backend, through save_state and load_state, so it
 * works for any optimizer whose saved state is complete. With the model's buffers
 * moved too (fl_module_to_backend; either order), training goes on there from the
 * same values and state. On error nothing is moved. */
fl_status fl_optimizer_to_backend(fl_optimizer *o, const char *backend);
void fl_optimizer_free(fl_optimizer *o);

/* ---- the optimizers ---------------------------------------------------------------- */
/* Each takes count parameters (at least one; leaves of a floating-point dtype) and its
 * options (NULL for the defaults), and returns a new optimizer to free with
 * fl_optimizer_free, or NULL and an error. */

/* torch.optim.SGD. Nesterov momentum needs momentum > 0 and dampening 0. */
typedef struct fl_sgd_options {
    double lr, momentum, dampening, weight_decay;
    bool nesterov;
} fl_sgd_options;
#define FL_SGD_DEFAULTS ((fl_sgd_options){.lr = 1e-3})
fl_optimizer *fl_sgd(fl_variable *const *params, size_t count, const fl_sgd_options *options);

/* torch.optim.Adam and AdamW; amsgrad keeps the maximum of the second moment
 * (AMSGrad). Adam adds weight_decay * value to the gradient (L2); AdamW decays the
 * value itself by lr * weight_decay before the update. */
typedef struct fl_adam_options {
    double lr, beta1, beta2, eps, weight_decay;
    bool amsgrad;
} fl_adam_options;
#define FL_ADAM_DEFAULTS ((fl_adam_options){.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8})
#define FL_ADAMW_DEFAULTS \
    ((fl_adam_options){.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 1e-2})
fl_optimizer *fl_adam(fl_variable *const *params, size_t count, const fl_adam_options *options);
fl_optimizer *fl_adamw(fl_variable *const *params, size_t count, const fl_adam_options *options);

/* torch.optim.RMSprop. centered divides by an estimate of the gradient's variance
 * instead of its second moment. */
typedef struct fl_rmsprop_options {
    double lr, alpha, eps, weight_decay, momentum;
    bool centered;
} fl_rmsprop_options;
#define FL_RMSPROP_DEFAULTS ((fl_rmsprop_options){.lr = 1e-2, .alpha = 0.99, .eps = 1e-8})
fl_optimizer *fl_rmsprop(fl_variable *const *params, size_t count, const fl_rmsprop_options *options);

/* torch.optim.Adagrad. */
typedef struct fl_adagrad_options {
    double lr, lr_decay, weight_decay, initial_accumulator_value, eps;
} fl_adagrad_options;
#define FL_ADAGRAD_DEFAULTS ((fl_adagrad_options){.lr = 1e-2, .eps = 1e-10})
fl_optimizer *fl_adagrad(fl_variable *const *params, size_t count, const fl_adagrad_options *options);

/* torch.optim.Adadelta. */
typedef struct fl_adadelta_options {
    double lr, rho, eps, weight_decay;
} fl_adadelta_options;
#define FL_ADADELTA_DEFAULTS ((fl_adadelta_options){.lr = 1.0, .rho = 0.9, .eps = 1e-6})
fl_optimizer *fl_adadelta(fl_variable *const *params, size_t count, const fl_adadelta_options *options);

/* NovoGrad (Ginsburg et al., 2019, arXiv:1905.11286) as Flashlight defines it
 * (fl::NovogradOptimizer), with its default betas; PyTorch has none. Per parameter
 * tensor ("layer"), with n = sum(grad^2):
 *     v = beta2 * v + (1 - beta2) * n                       (v starts at 0)
 *     m = beta1 * m + (1 - beta1) * (grad / (sqrt(v) + eps) + weight_decay * value)
 *     value -= lr * m
 * State names follow NVIDIA's apex FusedNovoGrad: exp_avg (m), exp_avg_sq (v, 0-d). */
typedef struct fl_novograd_options {
    double lr, beta1, beta2, eps, weight_decay;
} fl_novograd_options;
#define FL_NOVOGRAD_DEFAULTS ((fl_novograd_options){.lr = 1e-3, .beta1 = 0.95, .beta2 = 0.98, .eps = 1e-8})
fl_optimizer *fl_novograd(fl_variable *const *params, size_t count, const fl_novograd_options *options);

/* ---- learning-rate schedules --------------------------------------------------------- */
/* The learning rate at epoch (or step) index epoch >= 0, in the closed forms of
 * torch.optim.lr_scheduler; NAN and an error on invalid arguments. Apply one with
 * fl_optimizer_set_lr(o, fl_lr_cosine(base_lr, epoch, ...)) before each step. */

/* StepLR: base_lr * gamma^floor(epoch / step_size). */
double fl_lr_step(double base_lr, int64_t epoch, int64_t step_size, double gamma);
/* CosineAnnealingLR: eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / t_max)) / 2. */
double fl_lr_cosine(double base_lr, int64_t epoch, int64_t t_max, double eta_min);
/* LinearLR: base_lr times a factor going linearly from start_factor to end_factor
 * over total_iters epochs, then staying at end_factor. */
double fl_lr_linear(double base_lr, int64_t epoch, double start_factor, double end_factor, int64_t total_iters);

typedef enum fl_lr_kind { FL_LR_CONSTANT, FL_LR_STEP, FL_LR_COSINE } fl_lr_kind;

/* A schedule with an optional linear warm-up: for epoch < warmup_iters, LinearLR from
 * warmup_start_factor to 1; after it, the main schedule counted from the end of the
 * warm-up (torch's SequentialLR of LinearLR and the main one, milestone warmup_iters). */
typedef struct fl_lr_schedule {
    fl_lr_kind kind;
    int64_t step_size; double gamma;   /* FL_LR_STEP */
    int64_t t_max; double eta_min;     /* FL_LR_COSINE */
    int64_t warmup_iters;              /* 0: none */
    double warmup_start_factor;        /* in (0, 1]; 0 means LinearLR's default, 1/3 */
} fl_lr_schedule;

double fl_lr_at(const fl_lr_schedule *schedule, double base_lr, int64_t epoch);

/* ---- gradient clipping --------------------------------------------------------------- */

/* torch.nn.utils.clip_grad_norm_: the norm of all the gradients together (norm_type
 * p > 0, or INFINITY for the largest magnitude), computed in their promoted dtype;
 * every gradient is multiplied by min(1, max_norm / (norm + 1e-6)). Parameters
 * without a gradient are left out. Returns the norm before clipping (0 if no
 * parameter has a gradient), or NAN and an error. */
double fl_clip_grad_norm(fl_variable *const *params, size_t count, double max_norm, double norm_type);

#ifdef __cplusplus
}
#endif

#endif
