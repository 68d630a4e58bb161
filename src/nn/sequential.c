/* Sequential: children applied in order, named "0", "1", ... as in PyTorch. */
#include <stdio.h>

#include "flare/extension.h"
#include "flare/nn.h"

static fl_variable *sequential_forward(fl_module *m, fl_variable *x)
{
    fl_scope scope = fl_scope_begin();
    for (int i = 0; x && i < fl_module_child_count(m); i++)
        x = fl_module_forward(fl_module_child_at(m, i, NULL), x);
    return fl_v_scope_return(scope, x);
}

static const fl_module_type sequential_type = {.name = "Sequential", .forward = sequential_forward};

fl_status fl_nn_sequential_add(fl_module *sequential, fl_module *module)
{
    if (fl_null_args("fl_nn_sequential_add", 2, sequential, module)) {
        fl_module_release(module);
        return fl_last_status();
    }
    if (fl_module_type_of(sequential) != &sequential_type) {
        fl_module_release(module);
        return fl_error(FL_ERR_VALUE, "fl_nn_sequential_add", "the module is a %s, not a Sequential",
                        fl_module_type_of(sequential)->name),
               FL_ERR_VALUE;
    }
    char name[16];
    snprintf(name, sizeof name, "%d", fl_module_child_count(sequential));
    return fl_module_add_child(sequential, name, module);
}

fl_module *fl_nn_sequential(fl_module *const *modules, int count)
{
    fl_module *m = fl_module_new(&sequential_type, NULL);
    for (int i = 0; i < count; i++) {
        if (fl_nn_sequential_add(m, modules[i]) != FL_OK) {
            for (int j = i + 1; j < count; j++)
                fl_module_release(modules[j]);
            fl_module_release(m);
            return NULL;
        }
    }
    return m;
}
