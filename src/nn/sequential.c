/* Sequential: children applied in order, named "0", "1", ... as in PyTorch; and
 * ModuleList: children named the same way, iterated by the caller. */
#include <stdio.h>

#include "flare/extension.h"
#include "flare/nn.h"
#include "internal.h"

static fl_variable *sequential_forward(fl_module *m, fl_variable *x)
{
    fl_scope scope = fl_scope_begin();
    for (int i = 0; x && i < fl_module_child_count(m); i++)
        x = fl_module_forward(fl_module_child_at(m, i, NULL), x);
    return fl_v_scope_return(scope, x);
}

/* A Sequential takes what any of its children takes, so a Sequential nested in another
 * is given only the arguments some module inside it uses. */
static unsigned sequential_accepted(const fl_module *m, int *max_inputs)
{
    unsigned accepts = 0;
    int most = 1;
    for (int i = 0; i < fl_module_child_count(m); i++) {
        int inputs;
        accepts |= fl_module_accepted(fl_module_child_at(m, i, NULL), &inputs);
        most = inputs > most ? inputs : most;
    }
    *max_inputs = most;
    return accepts;
}

/* The rule of nn.h: inputs[0] threaded through, the rest broadcast to every child that
 * takes it. fl_module_forward_args has checked that some child takes each argument. */
static fl_variable *sequential_forward_args(fl_module *m, const fl_module_args *args)
{
    fl_scope scope = fl_scope_begin();
    fl_variable *x = args->inputs[0];
    for (int i = 0; x && i < fl_module_child_count(m); i++) {
        fl_module *child = fl_module_child_at(m, i, NULL);
        int max_inputs;
        unsigned accepts = fl_module_accepted(child, &max_inputs);
        fl_module_args given = {.inputs = {x}};
        for (int k = 1; k < max_inputs && k < FL_MODULE_MAX_INPUTS; k++)
            given.inputs[k] = args->inputs[k];
        given.key_padding_mask = accepts & FL_ARG_KEY_PADDING_MASK ? args->key_padding_mask : NULL;
        given.attn_mask = accepts & FL_ARG_ATTN_MASK ? args->attn_mask : NULL;
        given.is_causal = (accepts & FL_ARG_IS_CAUSAL) && args->is_causal;
        given.memory_key_padding_mask = accepts & FL_ARG_MEMORY_KEY_PADDING_MASK ? args->memory_key_padding_mask
                                                                                  : NULL;
        given.memory_mask = accepts & FL_ARG_MEMORY_MASK ? args->memory_mask : NULL;
        given.memory_is_causal = (accepts & FL_ARG_MEMORY_IS_CAUSAL) && args->memory_is_causal;
        x = fl_module_forward_args(child, &given);
    }
    return fl_v_scope_return(scope, x);
}

static const fl_module_type sequential_type = {.name = "Sequential",
                                               .forward = sequential_forward,
                                               .forward_args = sequential_forward_args,
                                               .accepted = sequential_accepted};

static fl_variable *module_list_forward(fl_module *m, fl_variable *x)
{
    (void)m, (void)x;
    return fl_error(FL_ERR_VALUE, "ModuleList",
                    "a ModuleList has no forward: iterate its children (fl_module_child_count, "
                    "fl_module_child_at) and call them, or use a Sequential");
}

static const fl_module_type module_list_type = {.name = "ModuleList", .forward = module_list_forward};

static fl_status add(const char *fn, const fl_module_type *type, fl_module *container, fl_module *module)
{
    if (fl_null_args(fn, 2, container, module)) {
        fl_module_release(module);
        return fl_last_status();
    }
    if (fl_module_type_of(container) != type) {
        fl_module_release(module);
        return fl_error(FL_ERR_VALUE, fn, "the module is a %s, not a %s", fl_module_type_of(container)->name,
                        type->name),
               FL_ERR_VALUE;
    }
    char name[16];
    snprintf(name, sizeof name, "%d", fl_module_child_count(container));
    return fl_module_add_child(container, name, module);
}

fl_status fl_nn_sequential_add(fl_module *sequential, fl_module *module)
{
    return add("fl_nn_sequential_add", &sequential_type, sequential, module);
}

fl_status fl_nn_module_list_add(fl_module *list, fl_module *module)
{
    return add("fl_nn_module_list_add", &module_list_type, list, module);
}

/* A new container of modules, each appended as the add function named fn does. */
static fl_module *container(const char *fn, const fl_module_type *type, fl_module *const *modules, int count)
{
    fl_module *m = fl_module_new(type, NULL);
    for (int i = 0; i < count; i++) {
        if (add(fn, type, m, modules[i]) != FL_OK) {
            for (int j = i + 1; j < count; j++)
                fl_module_release(modules[j]);
            fl_module_release(m);
            return NULL;
        }
    }
    return m;
}

fl_module *fl_nn_sequential(fl_module *const *modules, int count)
{
    return container("fl_nn_sequential_add", &sequential_type, modules, count);
}

fl_module *fl_nn_module_list(fl_module *const *modules, int count)
{
    return container("fl_nn_module_list_add", &module_list_type, modules, count);
}
