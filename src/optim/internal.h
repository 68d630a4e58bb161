/* What the built-in optimizers share: a per-parameter state of named tensors and a
 * step count, saved and loaded under PyTorch's names, and one step loop that calls
 * each family's update rule for one parameter at a time. */
#ifndef FLARE_OPTIM_INTERNAL_H
#define FLARE_OPTIM_INTERNAL_H

#include "flare/backend.h" /* struct fl_tensor */
#include "flare/extension.h"
#include "flare/optim.h"

#define FL_OPTIM_MAX_BUFFERS 3

typedef enum fl__buffer_shape { FL_BUFFER_LIKE_PARAM, FL_BUFFER_SCALAR } fl__buffer_shape;

typedef struct fl__optim fl__optim;

/* The new value of one parameter, computed from its value and gradient (same shape
 * and dtype). buffers holds the parameter's state tensors, NULL before its first
 * step; the rule replaces them with new tensors (left in the caller's scope: the
 * caller keeps them). step is the parameter's step count, this step included. */
typedef fl_tensor *(*fl__update_fn)(const fl__optim *o, const fl_tensor *value, const fl_tensor *grad, double step,
                                    fl_tensor **buffers);

struct fl__optim {
    fl_optimizer base;
    fl__update_fn update;
    bool counts_steps; /* saves "step" (SGD and Novograd keep no count) */
    int nbuffers;
    const char *buffer_names[FL_OPTIM_MAX_BUFFERS];
    fl__buffer_shape buffer_shapes[FL_OPTIM_MAX_BUFFERS];
    double *steps;        /* count */
    fl_tensor **buffers;  /* count * nbuffers, owned */
    const void *options;  /* the family's options, stored after this struct */
};

/* A new optimizer over the parameters, with the family's options (options_size
 * bytes, copied) and buffers named by a NULL-terminated list; NULL and an error
 * (naming fn) if the parameters are invalid. Optional buffers are left out of the
 * list by the caller. */
fl__optim *fl__optim_create(const char *fn, const char *name, fl_variable *const *params, size_t count, double lr,
                            fl__update_fn update, bool counts_steps, const char *const *buffer_names,
                            const fl__buffer_shape *buffer_shapes, const void *options, size_t options_size);

/* Option checks: false and an error "fn: option = value ..." when violated. */
bool fl__check_nonnegative(const char *fn, const char *option, double value);
bool fl__check_beta(const char *fn, const char *option, double value); /* [0, 1) */

/* buffer, or zeros shaped like it should be, in like's dtype; held by the scope. */
fl_tensor *fl__buffer_or_zeros(const fl_tensor *buffer, const fl_tensor *like);
/* grad + weight_decay * value, or grad itself when weight_decay is 0; held by the
 * scope. */
fl_tensor *fl__decayed_grad(const fl_tensor *grad, const fl_tensor *value, double weight_decay);

#endif
