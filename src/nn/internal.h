/* What the layers of src/nn share: making parameters, checking inputs, and the
 * module-internal access weight normalization needs. */
#ifndef FLARE_NN_INTERNAL_H
#define FLARE_NN_INTERNAL_H

#include "flare/backend.h" /* struct fl_tensor */
#include "flare/extension.h"
#include "flare/nn.h"

/* Registers a new f32 parameter of shape (zeros, for an initializer to fill); returns
 * it (borrowed from the module), or NULL with the error recorded. */
fl_variable *fl__nn_parameter(fl_module *m, const char *name, int ndim, const int64_t *shape);
/* Whether initializers initialize on this thread (fl_nn_set_initialization). */
bool fl__nn_initializing(void);

/* Linear's and Conv's default initialization of "weight" and "bias" (init.c). */
fl_status fl__nn_reset_affine(fl_module *m);

/* True if x has between min_ndim and max_ndim axes and, where channel_axis >= 0,
 * channels entries on that axis; otherwise records "<class>: expects <what>, got
 * f32[...]" and returns false. */
bool fl__nn_check_input(const fl_module *m, const fl_variable *x, int min_ndim, int max_ndim, int channel_axis,
                        int64_t channels, const char *what);

/* A new reference to x, owned by the innermost scope as results are (the identity
 * of a layer in a mode where it does nothing). */
fl_variable *fl__nn_identity(fl_variable *x);

/* Replaces the variable of m's parameter name with value (any variable, not only a
 * leaf), returning the one it held; the references move with them. For weight
 * normalization, which computes a layer's weight before each forward. */
fl_variable *fl__module_exchange_parameter(fl_module *m, const char *name, fl_variable *value);

/* The arguments args gives: the FL_ARG_* bits of its named ones, and (inputs, may be
 * NULL) the count of its positional inputs. */
unsigned fl__module_args_given(const fl_module_args *args, int *inputs);
/* "2 inputs, key_padding_mask, is_causal", for errors. */
void fl__module_args_describe(int inputs, unsigned named, char *out, size_t size);
/* FL_OK if args is not NULL, has inputs[0] and no input after a NULL one; otherwise
 * records the error of fn. */
fl_status fl__module_args_check(const char *fn, const fl_module_args *args);

#endif
