/* ReLU, GELU, Tanh, Sigmoid and LogSoftmax as modules. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static fl_variable *relu_forward(fl_module *m, fl_variable *x) { return fl_v_relu(x); }
static fl_variable *tanh_forward(fl_module *m, fl_variable *x) { return fl_v_tanh(x); }
static fl_variable *sigmoid_forward(fl_module *m, fl_variable *x) { return fl_v_sigmoid(x); }
static fl_variable *gelu_forward(fl_module *m, fl_variable *x) { return fl_v_gelu(x, *(const bool *)fl_module_state(m)); }
static fl_variable *log_softmax_forward(fl_module *m, fl_variable *x)
{
    return fl_v_log_softmax(x, *(const int *)fl_module_state(m));
}

static const fl_module_type relu_type = {.name = "ReLU", .forward = relu_forward};
static const fl_module_type tanh_type = {.name = "Tanh", .forward = tanh_forward};
static const fl_module_type sigmoid_type = {.name = "Sigmoid", .forward = sigmoid_forward};
static const fl_module_type gelu_type = {.name = "GELU", .forward = gelu_forward};
static const fl_module_type log_softmax_type = {.name = "LogSoftmax", .forward = log_softmax_forward};

fl_module *fl_nn_relu(void) { return fl_module_new(&relu_type, NULL); }
fl_module *fl_nn_tanh(void) { return fl_module_new(&tanh_type, NULL); }
fl_module *fl_nn_sigmoid(void) { return fl_module_new(&sigmoid_type, NULL); }

/* A module whose state is a copy of size bytes at value. */
static fl_module *with_state(const char *fn, const fl_module_type *type, const void *value, size_t size)
{
    void *state = malloc(size);
    if (!state)
        return fl_error(FL_ERR_MEMORY, fn, "out of memory");
    memcpy(state, value, size);
    return fl_module_new(type, state);
}

fl_module *fl_nn_gelu(bool approximate)
{
    return with_state("fl_nn_gelu", &gelu_type, &approximate, sizeof approximate);
}

fl_module *fl_nn_log_softmax(int axis)
{
    return with_state("fl_nn_log_softmax", &log_softmax_type, &axis, sizeof axis);
}
