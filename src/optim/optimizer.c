/* The optimizer interface, and what the built-in optimizers share: parameter checks,
 * the step loop, and the state as named tensors. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ---- the interface ---- */

fl_status fl_optimizer_step(fl_optimizer *o)
{
    if (fl_null_args("fl_optimizer_step", 1, o))
        return fl_last_status();
    return o->step(o);
}

void fl_optimizer_zero_grad(fl_optimizer *o)
{
    if (!o)
        return;
    for (size_t i = 0; i < o->count; i++)
        fl_v_zero_grad(o->params[i]);
}

fl_status fl_optimizer_set_lr(fl_optimizer *o, double lr)
{
    if (fl_null_args("fl_optimizer_set_lr", 1, o))
        return fl_last_status();
    if (!fl__check_nonnegative("fl_optimizer_set_lr", "lr", lr))
        return FL_ERR_VALUE;
    o->lr = lr;
    return FL_OK;
}

double fl_optimizer_get_lr(const fl_optimizer *o) { return o ? o->lr : NAN; }

fl_status fl_optimizer_state(const fl_optimizer *o, fl_tensor_map *map, const char *prefix)
{
    if (fl_null_args("fl_optimizer_state", 2, o, map))
        return fl_last_status();
    return o->save_state(o, map, prefix ? prefix : "");
}

fl_status fl_optimizer_load_state(fl_optimizer *o, const fl_tensor_map *map, const char *prefix)
{
    if (fl_null_args("fl_optimizer_load_state", 2, o, map))
        return fl_last_status();
    return o->load_state(o, map, prefix ? prefix : "");
}

/* The optimizer's state is what save_state writes (the contract every optimizer keeps:
 * loading it back continues the run exactly), so moving it is a save, a move of each
 * tensor and a load: one path for the built-in optimizers and one's own alike. */
fl_status fl_optimizer_to_backend(fl_optimizer *o, const char *backend)
{
    const char *fn = "fl_optimizer_to_backend";
    if (fl_null_args(fn, 2, o, backend))
        return fl_last_status();
    if (!fl_backend_find(backend))
        return fl_error(FL_ERR_VALUE, fn, "no backend named '%s' is registered", backend), FL_ERR_VALUE;
    fl_tensor_map *state = fl_tensor_map_create(), *moved = fl_tensor_map_create();
    const char **from = calloc(o->count ? o->count : 1, sizeof *from);
    fl_status status = state && moved && from ? o->save_state(o, state, "") : FL_ERR_MEMORY;
    if (status == FL_ERR_MEMORY && (!state || !moved || !from))
        fl_error(FL_ERR_MEMORY, fn, "out of memory");
    fl_scope scope = fl_scope_begin();
    for (size_t i = 0; status == FL_OK && i < fl_tensor_map_count(state); i++) {
        fl_tensor *t = fl_to_backend(fl_tensor_map_tensor_at(state, i), backend);
        status = t ? fl_tensor_map_set(moved, fl_tensor_map_name_at(state, i), t) : fl_last_status();
    }
    fl_scope_end(scope);
    /* The parameters (shared with the model, which may have moved them already), then
     * the state, which the optimizer checks against them. */
    size_t done = 0;
    for (; status == FL_OK && done < o->count; done++) {
        from[done] = fl_backend_name(fl_v_value(o->params[done]));
        status = fl_v_to_backend(o->params[done], backend);
    }
    if (status == FL_OK)
        status = o->load_state(o, moved, "");
    /* On failure the parameters go back, so that they stay with the state. */
    for (size_t i = done; status != FL_OK && i-- > 0;)
        if (from[i])
            fl_v_to_backend(o->params[i], from[i]);
    free(from);
    fl_tensor_map_free(state);
    fl_tensor_map_free(moved);
    return status;
}

void fl_optimizer_free(fl_optimizer *o)
{
    if (o)
        o->destroy(o);
}

/* ---- option checks ---- */

bool fl__check_nonnegative(const char *fn, const char *option, double value)
{
    if (value >= 0 && value <= INFINITY)
        return true;
    fl_error(FL_ERR_VALUE, fn, "%s = %g: it must be >= 0", option, value);
    return false;
}

bool fl__check_beta(const char *fn, const char *option, double value)
{
    if (value >= 0 && value < 1)
        return true;
    fl_error(FL_ERR_VALUE, fn, "%s = %g: it must be in [0, 1)", option, value);
    return false;
}

/* ---- helpers of the update rules ---- */

/* Both run inside the step's scope: what they return, the scope holds. */
fl_tensor *fl__buffer_or_zeros(const fl_tensor *buffer, const fl_tensor *like)
{
    return buffer ? fl_out(fl_retain(buffer)) : fl_zeros_like(like);
}

fl_tensor *fl__decayed_grad(const fl_tensor *grad, const fl_tensor *value, double weight_decay)
{
    return weight_decay != 0 ? fl_add_scaled(grad, 1, value, weight_decay) : fl_out(fl_retain(grad));
}

/* ---- the shared implementation ---- */

static fl_tensor **buffers_of(const fl__optim *o, size_t i) { return o->buffers + i * (size_t)o->nbuffers; }

static bool has_state(const fl__optim *o, size_t i)
{
    return (o->counts_steps && o->steps[i] > 0) || (o->nbuffers && buffers_of(o, i)[0]);
}

static fl_status step(fl_optimizer *base)
{
    fl__optim *o = (fl__optim *)base;
    bool recording = fl_set_grad_enabled(false);
    fl_status status = FL_OK;
    for (size_t i = 0; i < o->base.count && status == FL_OK; i++) {
        fl_variable *p = o->base.params[i];
        /* fl_v_set_grad and the engine keep a gradient of the value's shape and dtype. */
        const fl_tensor *grad = fl_v_grad(p);
        if (!grad)
            continue;
        fl_scope scope = fl_scope_begin();
        fl_tensor **state = buffers_of(o, i);
        fl_tensor *next[FL_OPTIM_MAX_BUFFERS];
        memcpy(next, state, (size_t)o->nbuffers * sizeof *next);
        double count = o->steps[i] + 1;
        fl_tensor *value = o->update(o, fl_v_value(p), grad, count, next);
        if (value && fl_v_set_value(p, value) == FL_OK) {
            for (int b = 0; b < o->nbuffers; b++) {
                if (next[b] == state[b])
                    continue;
                fl_release(state[b]);
                state[b] = fl_keep(next[b]);
            }
            o->steps[i] = count;
        } else {
            status = fl_last_status() != FL_OK ? fl_last_status() : FL_ERR_BACKEND;
        }
        fl_scope_end(scope);
    }
    fl_set_grad_enabled(recording);
    return status;
}

/* "<prefix>state.<i>.<name>", malloc'd (NULL if out of memory). */
static char *state_name(const char *prefix, size_t i, const char *name)
{
    int n = snprintf(NULL, 0, "%sstate.%zu.%s", prefix, i, name);
    char *s = malloc((size_t)n + 1);
    if (s)
        snprintf(s, (size_t)n + 1, "%sstate.%zu.%s", prefix, i, name);
    return s;
}

static char *lr_name(const char *prefix)
{
    size_t n = strlen(prefix) + sizeof "param_groups.0.lr";
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%sparam_groups.0.lr", prefix);
    return s;
}

/* Stores a new tensor under a malloc'd name, taking both. */
static fl_status put(fl_tensor_map *map, char *name, fl_tensor *t)
{
    fl_status status = name ? fl_tensor_map_set(map, name, t)
                            : (fl_error(FL_ERR_MEMORY, "fl_optimizer_state", "out of memory"), FL_ERR_MEMORY);
    free(name);
    return status;
}

static fl_status save_state(const fl_optimizer *base, fl_tensor_map *map, const char *prefix)
{
    const fl__optim *o = (const fl__optim *)base;
    fl_scope scope = fl_scope_begin();
    fl_status status = put(map, lr_name(prefix), fl_scalar(o->base.lr, FL_F64));
    for (size_t i = 0; i < o->base.count && status == FL_OK; i++) {
        if (!has_state(o, i))
            continue;
        if (o->counts_steps)
            status = put(map, state_name(prefix, i, "step"), fl_scalar(o->steps[i], FL_F64));
        for (int b = 0; b < o->nbuffers && status == FL_OK; b++)
            status = put(map, state_name(prefix, i, o->buffer_names[b]), buffers_of(o, i)[b]);
    }
    fl_scope_end(scope);
    return status;
}

/* Checks that every entry under "<prefix>state." names a parameter this optimizer has
 * and a state this optimizer keeps, so that the state of another kind of optimizer,
 * or of a longer list of parameters, is refused rather than silently half-read. */
static fl_status check_state_names(const fl__optim *o, const fl_tensor_map *map, const char *prefix)
{
    size_t prefix_length = strlen(prefix);
    for (size_t k = 0; k < fl_tensor_map_count(map); k++) {
        const char *name = fl_tensor_map_name_at(map, k);
        if (strncmp(name, prefix, prefix_length) != 0 || strncmp(name + prefix_length, "state.", 6) != 0)
            continue;
        const char *index = name + prefix_length + 6;
        char *end;
        errno = 0;
        unsigned long long i = strtoull(index, &end, 10);
        if (end == index || *end != '.' || errno || *index == '-' || *index == '+')
            return fl_error(FL_ERR_VALUE, "fl_optimizer_load_state", "'%s' is not state.<index>.<name>", name),
                   FL_ERR_VALUE;
        if (i >= o->base.count)
            return fl_error(FL_ERR_INDEX, "fl_optimizer_load_state",
                            "'%s' is for parameter %llu, but the %s optimizer has %zu", name, i, o->base.name,
                            o->base.count),
                   FL_ERR_INDEX;
        const char *state = end + 1;
        bool known = o->counts_steps && strcmp(state, "step") == 0;
        for (int b = 0; b < o->nbuffers && !known; b++)
            known = strcmp(state, o->buffer_names[b]) == 0;
        if (!known)
            return fl_error(FL_ERR_VALUE, "fl_optimizer_load_state", "'%s': the %s optimizer keeps no '%s'", name,
                            o->base.name, state),
                   FL_ERR_VALUE;
    }
    return FL_OK;
}

/* The tensor under a malloc'd name (taken), or NULL without an error if there is none. */
static fl_tensor *lookup(const fl_tensor_map *map, char *name)
{
    fl_tensor *t = name && fl_tensor_map_contains(map, name) ? fl_tensor_map_get(map, name) : NULL;
    free(name);
    return t;
}

/* A buffer from the map as the parameter's state: the shape the optimizer keeps,
 * converted to the parameter's dtype (as PyTorch's load_state_dict does). Owned. */
static fl_tensor *load_buffer(const fl__optim *o, size_t i, int b, const fl_tensor *t)
{
    const fl_tensor *value = fl_v_value(o->base.params[i]);
    bool fits = o->buffer_shapes[b] == FL_BUFFER_SCALAR ? fl_ndim(t) == 0 : fl_same_shape(t, value);
    char d[FL_DESC_SIZE], v[FL_DESC_SIZE];
    if (!fits || !fl_dtype_is_float(fl_dtype_of(t)))
        return fl_error(FL_ERR_SHAPE, "fl_optimizer_load_state", "state.%zu.%s is %s, for a parameter %s%s", i,
                         o->buffer_names[b], fl_describe(t, d), fl_describe(value, v),
                         o->buffer_shapes[b] == FL_BUFFER_SCALAR ? " (it must be 0-d)" : "");
    fl_scope scope = fl_scope_begin();
    fl_tensor *cast = fl_keep(fl_to_backend(fl_cast(t, fl_dtype_of(value)), fl_backend_name(value)));
    fl_scope_end(scope);
    return cast;
}

static fl_status load_state(fl_optimizer *base, const fl_tensor_map *map, const char *prefix)
{
    fl__optim *o = (fl__optim *)base;
    const char *fn = "fl_optimizer_load_state";
    fl_status status = check_state_names(o, map, prefix);
    if (status != FL_OK)
        return status;
    double lr = o->base.lr;
    fl_tensor *lr_tensor = lookup(map, lr_name(prefix));
    if (lr_tensor) {
        lr = fl_numel(lr_tensor) == 1 ? fl_item(lr_tensor) : NAN;
        if (!fl__check_nonnegative(fn, "param_groups.0.lr", lr))
            return FL_ERR_VALUE;
    }
    size_t nbuffers = o->base.count * (size_t)o->nbuffers;
    fl_tensor **buffers = calloc(nbuffers ? nbuffers : 1, sizeof *buffers);
    double *steps = calloc(o->base.count, sizeof *steps);
    if (!buffers || !steps) {
        free(buffers);
        free(steps);
        return fl_error(FL_ERR_MEMORY, fn, "out of memory"), FL_ERR_MEMORY;
    }
    for (size_t i = 0; i < o->base.count && status == FL_OK; i++) {
        fl_tensor *step_tensor = o->counts_steps ? lookup(map, state_name(prefix, i, "step")) : NULL;
        int found = step_tensor != NULL;
        for (int b = 0; b < o->nbuffers && status == FL_OK; b++) {
            fl_tensor *t = lookup(map, state_name(prefix, i, o->buffer_names[b]));
            if (!t)
                continue;
            found++;
            buffers[i * o->nbuffers + b] = load_buffer(o, i, b, t);
            if (!buffers[i * o->nbuffers + b])
                status = fl_last_status();
        }
        if (status != FL_OK || !found)
            continue; /* no entries: a parameter not stepped yet */
        if (found != o->nbuffers + o->counts_steps) {
            fl_error(FL_ERR_VALUE, fn, "the state of parameter %zu is incomplete: the %s optimizer keeps %d entries, "
                     "the map has %d", i, o->base.name, o->nbuffers + o->counts_steps, found);
            status = FL_ERR_VALUE;
            continue;
        }
        if (step_tensor) {
            double count = fl_numel(step_tensor) == 1 ? fl_item(step_tensor) : NAN;
            if (!(count >= 0 && count == floor(count) && count < 0x1p53)) {
                fl_error(FL_ERR_VALUE, fn, "state.%zu.step = %g: it must be a count", i, count);
                status = FL_ERR_VALUE;
            }
            steps[i] = count;
        }
    }
    if (status != FL_OK) {
        for (size_t k = 0; k < nbuffers; k++)
            fl_release(buffers[k]);
        free(buffers);
        free(steps);
        return status;
    }
    for (size_t k = 0; k < nbuffers; k++)
        fl_release(o->buffers[k]);
    free(o->buffers);
    free(o->steps);
    o->buffers = buffers;
    o->steps = steps;
    o->base.lr = lr;
    return FL_OK;
}

static void destroy(fl_optimizer *base)
{
    fl__optim *o = (fl__optim *)base;
    for (size_t k = 0; k < o->base.count * (size_t)o->nbuffers; k++)
        fl_release(o->buffers[k]);
    for (size_t i = 0; i < o->base.count; i++)
        fl_v_release(o->base.params[i]);
    free(o->buffers);
    free(o->steps);
    free(o->base.params);
    free(o);
}

static bool check_params(const char *fn, fl_variable *const *params, size_t count)
{
    if (fl_null_args(fn, 1, params))
        return false;
    if (count == 0) {
        fl_error(FL_ERR_VALUE, fn, "no parameters to optimize");
        return false;
    }
    for (size_t i = 0; i < count; i++) {
        const fl_variable *p = params[i];
        char d[FL_DESC_SIZE];
        if (!p) {
            if (fl_last_status() == FL_OK)
                fl_error(FL_ERR_NULL, fn, "parameter %zu is NULL", i);
            return false;
        }
        for (size_t k = 0; k < i; k++)
            if (params[k] == p) { /* it would be stepped twice per step, with one state for both */
                fl_error(FL_ERR_VALUE, fn, "parameter %zu is parameter %zu listed again", i, k);
                return false;
            }
        if (!fl_v_is_leaf(p)) {
            fl_error(FL_ERR_VALUE, fn, "parameter %zu is not a leaf (a computed variable cannot be optimized)", i);
            return false;
        }
        if (!fl_dtype_is_float(fl_dtype_of(fl_v_value(p)))) {
            fl_error(FL_ERR_DTYPE, fn, "parameter %zu is %s: parameters must be floating point", i,
                      fl_describe(fl_v_value(p), d));
            return false;
        }
    }
    return true;
}

fl__optim *fl__optim_create(const char *fn, const char *name, fl_variable *const *params, size_t count, double lr,
                            fl__update_fn update, bool counts_steps, const char *const *buffer_names,
                            const fl__buffer_shape *buffer_shapes, const void *options, size_t options_size)
{
    if (!check_params(fn, params, count) || !fl__check_nonnegative(fn, "lr", lr))
        return NULL;
    int nbuffers = 0;
    while (buffer_names[nbuffers])
        nbuffers++;
    fl__optim *o = calloc(1, sizeof *o + options_size);
    fl_variable **kept = calloc(count, sizeof *kept);
    double *steps = calloc(count, sizeof *steps);
    fl_tensor **buffers = calloc(count * (size_t)(nbuffers ? nbuffers : 1), sizeof *buffers);
    if (!o || !kept || !steps || !buffers) {
        free(o);
        free(kept);
        free(steps);
        free(buffers);
        return fl_error(FL_ERR_MEMORY, fn, "out of memory");
    }
    for (size_t i = 0; i < count; i++)
        kept[i] = fl_v_retain(params[i]);
    memcpy(o + 1, options, options_size);
    o->base = (fl_optimizer){.name = name, .params = kept, .count = count, .lr = lr, .step = step,
                             .save_state = save_state, .load_state = load_state, .destroy = destroy};
    o->update = update;
    o->counts_steps = counts_steps;
    o->nbuffers = nbuffers;
    for (int b = 0; b < nbuffers; b++) {
        o->buffer_names[b] = buffer_names[b];
        o->buffer_shapes[b] = buffer_shapes ? buffer_shapes[b] : FL_BUFFER_LIKE_PARAM;
    }
    o->steps = steps;
    o->buffers = buffers;
    o->options = o + 1;
    return o;
}
