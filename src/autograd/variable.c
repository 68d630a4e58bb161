/* Variables: lifetime, accessors, gradient hooks and the grad-enabled switch. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static _Thread_local bool grad_disabled;

bool fl_set_grad_enabled(bool enabled)
{
    bool previous = !grad_disabled;
    grad_disabled = !enabled;
    return previous;
}

bool fl_grad_enabled(void) { return !grad_disabled; }

static void release_variable(void *v) { fl_v_release(v); }

/* Hands a fresh variable to the innermost scope, as fl_out does for tensors. */
static fl_variable *out(fl_variable *v) { return fl_scope_own(v, release_variable); }

fl_variable *fl__v_new_owned(const fl_tensor *value, bool requires_grad, fl_node *node)
{
    fl_variable *v = calloc(1, sizeof *v);
    if (!v)
        return fl_error(FL_ERR_MEMORY, "fl_v_new", "out of memory");
    v->refcount = 1;
    v->value = fl_retain(value);
    v->requires_grad = requires_grad;
    v->node = node;
    return v;
}

fl_variable *fl__v_out(fl_variable *v) { return out(v); }

fl_variable *fl_v_new(const fl_tensor *value, bool requires_grad)
{
    if (fl_null_args("fl_v_new", 1, value))
        return NULL;
    if (requires_grad && !fl_dtype_is_float(fl_dtype_of(value))) {
        char d[FL_DESC_SIZE];
        return fl_error(FL_ERR_DTYPE, "fl_v_new", "only floating-point variables can require a gradient, not %s",
                         fl_describe(value, d));
    }
    return out(fl__v_new_owned(value, requires_grad, NULL));
}

/* With checked handles on: true, after recording FL_ERR_RELEASED, if v was released. */
static bool released(const char *fn, const fl_variable *v)
{
    return fl_handle_released(fn, v); /* false at once when the checks are off */
}

fl_variable *fl_v_retain(fl_variable *v)
{
    if (released("fl_v_retain", v))
        return NULL;
    if (v)
        __atomic_add_fetch(&v->refcount, 1, __ATOMIC_RELAXED);
    return v;
}

static void free_variable(void *v) { free(v); }

void fl_v_release(fl_variable *v)
{
    if (released("fl_v_release", v))
        return; /* released twice: the second release is the error */
    if (!v || __atomic_sub_fetch(&v->refcount, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    fl_release(v->value);
    fl_release(v->grad);
    fl__node_release(v->node);
    free(v->hooks);
    if (__builtin_expect(fl_handles_checked(), 0)) {
        *v = (fl_variable){0}; /* a use past the checks reads NULLs, not freed memory */
        fl_handle_retire(v, "variable", "fl_v_release", free_variable);
    } else {
        free(v);
    }
}

fl_variable *fl_v_keep(fl_variable *v)
{
    if (!v || released("fl_v_keep", v))
        return NULL;
    return fl_scope_disown(v) ? v : fl_v_retain(v);
}

fl_variable *fl_v_scope_return(fl_scope scope, fl_variable *result)
{
    /* A reference of the caller's own survives the scope; then it goes to the caller's scope. */
    if (released("fl_v_scope_return", result))
        result = NULL;
    bool owned_here = fl_scope_disown(result);
    if (result && !owned_here)
        fl_v_retain(result);
    fl_scope_end(scope);
    return out(result);
}

const fl_tensor *fl_v_value(const fl_variable *v) { return v && !released("fl_v_value", v) ? v->value : NULL; }
const fl_tensor *fl_v_grad(const fl_variable *v) { return v && !released("fl_v_grad", v) ? v->grad : NULL; }
bool fl_v_requires_grad(const fl_variable *v) { return v && !released("fl_v_requires_grad", v) && v->requires_grad; }
bool fl_v_is_leaf(const fl_variable *v) { return v && !released("fl_v_is_leaf", v) && !v->node; }

void fl_v_zero_grad(fl_variable *v)
{
    if (!v || released("fl_v_zero_grad", v))
        return;
    fl_release(v->grad);
    v->grad = NULL;
}

static bool same_description(const char *fn, const char *what, const fl_variable *v, const fl_tensor *t)
{
    if (fl_dtype_of(t) == fl_dtype_of(v->value) && fl_same_shape(t, v->value))
        return true;
    char a[FL_DESC_SIZE], b[FL_DESC_SIZE];
    fl_error(FL_ERR_SHAPE, fn, "the %s %s does not match the variable's %s", what, fl_describe(t, a),
              fl_describe(v->value, b));
    return false;
}

fl_status fl_v_set_value(fl_variable *v, const fl_tensor *value)
{
    if (fl_null_args("fl_v_set_value", 2, v, value))
        return fl_last_status();
    if (v->node)
        return fl_error(FL_ERR_VALUE, "fl_v_set_value", "only a leaf's value can be replaced"), FL_ERR_VALUE;
    if (fl_mixed_backends("fl_v_set_value", 2, v->value, value))
        return FL_ERR_VALUE;
    if (!same_description("fl_v_set_value", "value", v, value))
        return FL_ERR_SHAPE;
    fl_tensor *old = v->value;
    v->value = fl_retain(value);
    fl_release(old);
    return FL_OK;
}

fl_status fl_v_set_grad(fl_variable *v, const fl_tensor *grad)
{
    if (fl_null_args("fl_v_set_grad", 1, v))
        return fl_last_status();
    if (v->node) /* its gradient flows on to the leaves; a stored one would never be read */
        return fl_error(FL_ERR_VALUE, "fl_v_set_grad", "only a leaf's gradient can be replaced"), FL_ERR_VALUE;
    if (grad && fl_mixed_backends("fl_v_set_grad", 2, v->value, grad))
        return FL_ERR_VALUE;
    if (grad && !same_description("fl_v_set_grad", "gradient", v, grad))
        return FL_ERR_SHAPE;
    fl_tensor *old = v->grad;
    v->grad = fl_retain(grad);
    fl_release(old);
    return FL_OK;
}

fl_status fl_v_to_backend(fl_variable *v, const char *backend)
{
    const char *fn = "fl_v_to_backend";
    if (fl_null_args(fn, 2, v, backend))
        return fl_last_status();
    if (v->node) /* the tape's saved tensors and gradients would stay behind */
        return fl_error(FL_ERR_VALUE, fn, "only a leaf can be moved; fl_v_detach a computed variable first"),
               FL_ERR_VALUE;
    /* Both copies are made before either is replaced: on failure nothing moves. */
    fl_scope scope = fl_scope_begin();
    fl_tensor *value = fl_to_backend(v->value, backend);
    fl_tensor *grad = value && v->grad ? fl_to_backend(v->grad, backend) : NULL;
    fl_status status = value && (grad || !v->grad) ? FL_OK : fl_last_status();
    if (status == FL_OK) {
        fl_tensor *old_value = v->value, *old_grad = v->grad;
        v->value = fl_retain(value);
        v->grad = fl_retain(grad);
        fl_release(old_value);
        fl_release(old_grad);
    }
    fl_scope_end(scope);
    return status;
}

fl_variable *fl_v_detach(const fl_variable *v)
{
    if (fl_null_args("fl_v_detach", 1, v))
        return NULL;
    return out(fl__v_new_owned(v->value, false, NULL));
}

fl_status fl_v_add_grad_hook(fl_variable *leaf, fl_grad_hook fn, void *user)
{
    if (fl_null_args("fl_v_add_grad_hook", 2, leaf, fn))
        return fl_last_status();
    if (leaf->node || !leaf->requires_grad)
        return fl_error(FL_ERR_VALUE, "fl_v_add_grad_hook", "hooks go on leaves that require a gradient"),
               FL_ERR_VALUE;
    hook *hooks = realloc(leaf->hooks, (size_t)(leaf->nhooks + 1) * sizeof *hooks);
    if (!hooks)
        return fl_error(FL_ERR_MEMORY, "fl_v_add_grad_hook", "out of memory"), FL_ERR_MEMORY;
    hooks[leaf->nhooks++] = (hook){fn, user};
    leaf->hooks = hooks;
    return FL_OK;
}

void fl_v_remove_grad_hook(fl_variable *leaf, fl_grad_hook fn, void *user)
{
    for (int i = 0; leaf && i < leaf->nhooks; i++) {
        if (leaf->hooks[i].fn == fn && leaf->hooks[i].user == user) {
            memmove(&leaf->hooks[i], &leaf->hooks[i + 1], (size_t)(leaf->nhooks - i - 1) * sizeof *leaf->hooks);
            leaf->nhooks--;
            return;
        }
    }
}
