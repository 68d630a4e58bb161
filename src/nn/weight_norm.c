/* torch.nn.utils.weight_norm: a parameter recomputed before each forward as
 * g v / ||v||, from the parameters name_g and name_v.
 *
 * The result is a module of its own, standing for the wrapped one: it registers the
 * wrapped module's other parameters and then name_g and name_v, so its state_dict is
 * the one PyTorch gives, and it reports the wrapped module's class name. Its forward
 * lends the computed weight to the wrapped module for the duration of the call. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct weight_norm_state {
    fl_module_type type; /* the wrapped module's name, this file's forward */
    fl_module *inner;
    char name[64], g_name[72], v_name[72];
    int dim; /* -1: the norm over every axis */
} weight_norm_state;

typedef struct norm_context {
    int ndim;
    int axes[FL_MAX_DIMS];
    int count;
} norm_context;

static norm_context context_of(const fl_tensor *v, int dim)
{
    norm_context c = {.ndim = fl_ndim(v)};
    for (int i = 0; i < c.ndim; i++)
        if (i != dim)
            c.axes[c.count++] = i;
    return c;
}

/* ||v|| over every axis but dim, kept as axes of size 1 (the shape of g). */
static fl_tensor *norm_except_dim(const fl_tensor *v, const norm_context *c)
{
    if (c->count == c->ndim) /* PyTorch's dim=None: a 0-d norm */
        return fl_sqrt(fl_sum(fl_square(v), FL_ALL_AXES, false));
    return fl_sqrt(fl_sum(fl_square(v), c->axes, c->count, true));
}

/* Saved: v, g, ||v||. With s = sum(dw v) over the norm's axes:
 * dg = s / ||v||, dv = g / ||v|| dw - g s / ||v||^3 v. */
static void weight_norm_grad(fl_grad *g)
{
    const norm_context *c = g->context;
    const fl_tensor *v = g->saved[0], *gain = g->saved[1], *norm = g->saved[2], *dw = g->output_grad;
    fl_tensor *s = c->count == c->ndim ? fl_sum(fl_mul(dw, v), FL_ALL_AXES, false)
                                       : fl_sum(fl_mul(dw, v), c->axes, c->count, true);
    if (g->needs_grad[0]) {
        fl_tensor *scale = fl_div(gain, norm);
        g->input_grads[0] = fl_sub(fl_mul(dw, scale), fl_mul(v, fl_div(fl_mul(scale, s), fl_square(norm))));
    }
    if (g->needs_grad[1])
        g->input_grads[1] = fl_div(s, norm);
}

static fl_variable *weight_of(fl_variable *v, fl_variable *gain, int dim)
{
    const fl_tensor *vv = fl_v_value(v);
    norm_context c = context_of(vv, dim);
    fl_scope scope = fl_scope_begin();
    fl_tensor *norm = norm_except_dim(vv, &c);
    fl_tensor *w = fl_mul(vv, fl_div(fl_v_value(gain), norm));
    fl_variable *result =
        fl_v_record(w, FL_VARS(v, gain), weight_norm_grad, FL_SAVE(vv, fl_v_value(gain), norm), &c, sizeof c);
    return fl_v_scope_return(scope, result);
}

static fl_variable *weight_norm_forward(fl_module *m, fl_variable *x)
{
    weight_norm_state *s = fl_module_state(m);
    fl_scope scope = fl_scope_begin();
    fl_variable *w = weight_of(fl_module_parameter(m, s->v_name), fl_module_parameter(m, s->g_name), s->dim);
    fl_variable *y = NULL;
    if (w) {
        fl_module_train(s->inner, fl_module_is_training(m));
        fl_variable *own = fl__module_exchange_parameter(s->inner, s->name, w);
        y = fl_module_forward(s->inner, x);
        fl__module_exchange_parameter(s->inner, s->name, own);
    }
    return fl_v_scope_return(scope, y);
}

static void weight_norm_destroy(void *state)
{
    weight_norm_state *s = state;
    fl_module_release(s->inner);
    free(s);
}

/* True if m has parameters and nothing else. */
static bool parameters_only(const fl_module *m)
{
    fl_tensor_map *map = fl_tensor_map_create();
    fl_parameters *p = fl_module_parameters(m);
    bool only = map && p && fl_module_state_dict(m, map) == FL_OK && fl_tensor_map_count(map) == p->count;
    fl_tensor_map_free(map);
    fl_parameters_free(p);
    return only;
}

fl_module *fl_nn_weight_norm(fl_module *module, const char *name, int dim)
{
    const char *fn = "fl_nn_weight_norm";
    if (fl_null_args(fn, 2, module, name)) {
        fl_module_release(module);
        return NULL;
    }
    fl_variable *weight = fl_module_parameter(module, name);
    const char *problem = !weight                       ? "no such parameter"
                          : strlen(name) > 60          ? "the name is too long"
                          : !parameters_only(module)   ? "the module has buffers or children"
                          : dim < -1 || dim >= fl_ndim(fl_v_value(weight)) ? "dim is not an axis of it or -1"
                                                                           : NULL;
    if (problem) {
        fl_error(FL_ERR_VALUE, fn, "cannot normalize '%s' of a %s (dim %d): %s", name,
                 fl_module_type_of(module)->name, dim, problem);
        fl_module_release(module);
        return NULL;
    }
    weight_norm_state *s = calloc(1, sizeof *s);
    if (!s) {
        fl_module_release(module);
        return fl_error(FL_ERR_MEMORY, fn, "out of memory");
    }
    s->type = (fl_module_type){.name = fl_module_type_of(module)->name, .forward = weight_norm_forward,
                               .destroy = weight_norm_destroy};
    s->inner = module;
    s->dim = dim;
    snprintf(s->name, sizeof s->name, "%s", name);
    snprintf(s->g_name, sizeof s->g_name, "%s_g", name);
    snprintf(s->v_name, sizeof s->v_name, "%s_v", name);
    /* The type lives in the state, which the module frees last. */
    fl_module *m = fl_module_new(&s->type, s);
    if (!m)
        return NULL;
    fl_module_train(m, fl_module_is_training(module));
    fl_scope scope = fl_scope_begin();
    fl_parameters *p = fl_module_parameters(module);
    fl_status status = p ? FL_OK : fl_last_status();
    for (size_t i = 0; status == FL_OK && i < p->count; i++)
        if (strcmp(p->names[i], name) != 0)
            status = fl_module_add_parameter(m, p->names[i], p->items[i]);
    const fl_tensor *v = fl_v_value(weight);
    norm_context c = context_of(v, dim);
    if (status == FL_OK)
        status = fl_module_add_parameter(m, s->g_name, fl_v_new(norm_except_dim(v, &c), true));
    if (status == FL_OK)
        status = fl_module_add_parameter(m, s->v_name, fl_v_new(v, true));
    fl_parameters_free(p);
    fl_scope_end(scope);
    if (status != FL_OK)
        fl_module_release(m), m = NULL;
    return m;
}
