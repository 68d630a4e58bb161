/* The registry of tensor backends, and the list of primitives for introspection. */
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "../tensor/config.h"
#include "../tensor/internal.h"

/* The built-in backends, registered on first use (cpu first: it is the default;
 * lazy defers and fuses elementwise work, delegating the rest to cpu). */
fl_backend *fl_cpu_backend(void);
fl_backend *fl_lazy_backend(void);

#define MAX_BACKENDS 16

static fl_backend *backends[MAX_BACKENDS];
static int backend_count;
static fl_backend *default_backend;
static pthread_once_t builtins_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;

static fl_backend *find_registered(const char *name)
{
    fl_backend *found = NULL;
    pthread_mutex_lock(&registry_lock);
    for (int i = 0; i < backend_count && !found; i++)
        if (strcmp(backends[i]->name, name) == 0)
            found = backends[i];
    pthread_mutex_unlock(&registry_lock);
    return found;
}

/* Runs inside pthread_once, so it must not call fl_backend_find (which waits on the
 * same once). An unknown FLARE_BACKEND leaves cpu the default. */
static void register_builtins(void)
{
    fl_backend_register(fl_cpu_backend());
    fl_backend_register(fl_lazy_backend());
    const char *name = fl__config()->backend;
    fl_backend *chosen = name && *name ? find_registered(name) : NULL;
    if (chosen)
        default_backend = chosen;
}

fl_status fl_backend_register(fl_backend *backend)
{
    if (!backend || !backend->name) {
        fl__error(FL_ERR_NULL, "fl_backend_register", "the backend or its name is NULL");
        return FL_ERR_NULL;
    }
    fl_status status = FL_OK;
    pthread_mutex_lock(&registry_lock);
    for (int i = 0; i < backend_count; i++)
        if (strcmp(backends[i]->name, backend->name) == 0)
            status = FL_ERR_VALUE;
    if (status == FL_OK && backend_count == MAX_BACKENDS)
        status = FL_ERR_MEMORY;
    if (status == FL_OK) {
        backends[backend_count++] = backend;
        if (!default_backend)
            default_backend = backend;
    }
    pthread_mutex_unlock(&registry_lock);
    if (status == FL_ERR_VALUE)
        fl__error(status, "fl_backend_register", "a backend named '%s' is already registered", backend->name);
    else if (status != FL_OK)
        fl__error(status, "fl_backend_register", "at most %d backends can be registered", MAX_BACKENDS);
    return status;
}

fl_backend *fl_backend_find(const char *name)
{
    pthread_once(&builtins_once, register_builtins);
    if (!name)
        return NULL;
    return find_registered(name);
}

fl_backend *fl_default_backend(void)
{
    pthread_once(&builtins_once, register_builtins);
    return default_backend;
}

fl_status fl_set_default_backend(const char *name)
{
    fl_backend *backend = fl_backend_find(name);
    if (!backend) {
        fl__error(FL_ERR_VALUE, "fl_set_default_backend", "no backend named '%s' is registered",
                  name ? name : "(null)");
        return FL_ERR_VALUE;
    }
    default_backend = backend;
    return FL_OK;
}

/* Every operation entry of struct fl_backend, in table order. A test checks that
 * this list covers the table exactly, so the table cannot grow unnoticed. */
static const char *const primitive_names[] = {
    "from_host", "to_host", "full", "arange", "random", "cast",
    "reshape", "permute", "expand", "slice", "update_slice", "concat",
    "where", "gather", "scatter_add", "index_select",
    "neg", "abs", "sign", "exp", "log", "log1p", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "erf",
    "floor", "ceil", "round", "isnan", "isinf", "logical_not",
    "add", "sub", "mul", "div", "pow", "minimum", "maximum", "eq", "ne", "lt", "le", "logical_and", "logical_or",
    "sum", "prod", "max", "min", "argmax", "argmin", "cumsum", "sort",
    "matmul", "conv2d", "conv2d_backward_input", "conv2d_backward_weight", "pool2d", "pool2d_backward",
    /* optional fused kernels */
    "softmax", "batch_norm", "batch_norm_backward", "gelu",
};

int fl_backend_primitive_count(void) { return (int)(sizeof primitive_names / sizeof primitive_names[0]); }

const char *fl_backend_primitive_name(int i)
{
    return i >= 0 && i < fl_backend_primitive_count() ? primitive_names[i] : NULL;
}
