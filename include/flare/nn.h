/*
 * Neural-network modules: the Module interface, containers, layers, initializers and
 * losses.
 *
 * A module is a forward function with named parameters (leaf variables that require a
 * gradient), named buffers (tensors saved with the model but not trained, such as
 * BatchNorm's running statistics), and named children. Names follow PyTorch's
 * state_dict, so "0.weight" is the weight of the first module of a Sequential and
 * "layer1.0.bn1.running_mean" a buffer deep in a ResNet; checkpoints move between the
 * two frameworks by name (include/flare/io.h).
 *
 * Writing a module: a fl_module_type (its name, forward and, if it keeps state of its
 * own, destroy), fl_module_new, then fl_module_add_parameter / add_buffer / add_child
 * in PyTorch's registration order. Modules are reference counted and not owned by
 * tensor scopes; fl_module_add_child and the containers take over the reference of
 * the child they are given, so a model builds as one expression:
 *
 *     fl_module *model = fl_nn_sequential(FL_MODULES(fl_nn_linear(784, 10, true), fl_nn_log_softmax(1)));
 *
 * Functions returning a module return NULL (with the error recorded) on bad arguments,
 * and accept NULL children, propagating them.
 */
#ifndef FLARE_NN_H
#define FLARE_NN_H

#include "flare/autograd.h"
#include "flare/io.h"
#include "flare/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fl_module fl_module;

typedef struct fl_module_type {
    const char *name; /* PyTorch's class name: "Linear", "Conv2d", ... */
    /* The forward pass of one input to one output. Modules of several inputs or
     * outputs (attention, recurrent layers) give their full form as a function of
     * their own and use the common case here. */
    fl_variable *(*forward)(fl_module *m, fl_variable *x);
    /* Frees the type's own state (fl_module_state); NULL if it is a plain free() or none. */
    void (*destroy)(void *state);
} fl_module_type;

/* ---- the Module interface ---------------------------------------------------------- */

/* state (may be NULL) is owned by the module from now on. */
fl_module *fl_module_new(const fl_module_type *type, void *state);
fl_module *fl_module_retain(fl_module *m);
void fl_module_release(fl_module *m);

const fl_module_type *fl_module_type_of(const fl_module *m);
void *fl_module_state(const fl_module *m);

/* Registers a parameter (retained) / a buffer (retained) / a child (taken over). Names
 * are unique within a module and contain no '.'. */
fl_status fl_module_add_parameter(fl_module *m, const char *name, fl_variable *parameter);
fl_status fl_module_add_buffer(fl_module *m, const char *name, const fl_tensor *buffer);
fl_status fl_module_add_child(fl_module *m, const char *name, fl_module *child);

/* Direct members, by name; NULL (without an error) if there is none. Borrowed. */
fl_variable *fl_module_parameter(const fl_module *m, const char *name);
fl_tensor *fl_module_buffer(const fl_module *m, const char *name);
fl_module *fl_module_child(const fl_module *m, const char *name);
int fl_module_child_count(const fl_module *m);
fl_module *fl_module_child_at(const fl_module *m, int i, const char **name);
/* Replaces a buffer's value (running statistics); shape and dtype must match. */
fl_status fl_module_set_buffer(fl_module *m, const char *name, const fl_tensor *value);

fl_variable *fl_module_forward(fl_module *m, fl_variable *x);

/* Training mode (the default) or evaluation mode, for the module and all below it. */
void fl_module_train(fl_module *m, bool training);
bool fl_module_is_training(const fl_module *m);

/* Every parameter below m, depth first in registration order, with its dotted name:
 * PyTorch's named_parameters(). The list holds references; free it with
 * fl_parameters_free. */
typedef struct fl_parameters {
    size_t count;
    fl_variable **items;
    char **names;
} fl_parameters;

fl_parameters *fl_module_parameters(const fl_module *m);
void fl_parameters_free(fl_parameters *p);
/* The number of scalars in all parameters (what PyTorch's
 * sum(p.numel() for p in model.parameters()) gives). */
int64_t fl_module_parameter_count(const fl_module *m);
/* Drops the accumulated gradient of every parameter. */
void fl_module_zero_grad(fl_module *m);

/* PyTorch's state_dict(): every parameter's value and every buffer, by dotted name,
 * each module's parameters, then its buffers, then its children. */
fl_status fl_module_state_dict(const fl_module *m, fl_tensor_map *out);
/* load_state_dict(): copies values into parameters and buffers by name, converting
 * the dtype if it differs. strict: every name of the module must be in the map and
 * every name of the map in the module; the error lists the first names missing or
 * unexpected. A shape mismatch is always an error. Nothing is changed on error. */
fl_status fl_module_load_state_dict(fl_module *m, const fl_tensor_map *map, bool strict);

/* ---- containers -------------------------------------------------------------------- */

#define FL_MODULES(...) \
    (fl_module *const[]){__VA_ARGS__}, (int)(sizeof((fl_module *[]){__VA_ARGS__}) / sizeof(fl_module *))

/* Applies its children in order; they are named "0", "1", ... The modules are taken
 * over (even when the call fails). */
fl_module *fl_nn_sequential(fl_module *const *modules, int count);
/* Appends one more (taken over). */
fl_status fl_nn_sequential_add(fl_module *sequential, fl_module *module);

#ifdef __cplusplus
}
#endif

#endif
