/* Tensor handles: allocation, reference counts, scopes, introspection, threads. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "internal.h"

bool fl_check_size(const char *fn, fl_dtype dtype, int ndim, const int64_t *shape)
{
    char buf[FL_DESC_SIZE];
    if (ndim < 0 || ndim > FL_MAX_DIMS) {
        fl_error(FL_ERR_SHAPE, fn, "%d dimensions requested; Flare supports 0 to %d", ndim, FL_MAX_DIMS);
        return false;
    }
    if (ndim > 0 && !shape) {
        fl_error(FL_ERR_NULL, fn, "the shape is NULL for %d dimensions", ndim);
        return false;
    }
    if ((unsigned)dtype >= FL_DTYPE_COUNT) {
        fl_error(FL_ERR_DTYPE, fn, "invalid dtype %d", (int)dtype);
        return false;
    }
    int64_t bytes = (int64_t)fl_dtype_size(dtype);
    bool fits = true;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) {
            fl_error(FL_ERR_SHAPE, fn, "negative size in shape %s", fl_describe_shape(ndim, shape, buf));
            return false;
        }
        if (shape[i] > 0)
            fits = fits && fl_size_mul(bytes, shape[i], &bytes) && bytes <= PTRDIFF_MAX;
    }
    if (!fits)
        fl_error(FL_ERR_SHAPE, fn, "a %s tensor of shape %s is too large: its size in bytes exceeds %lld",
                 fl_dtype_name(dtype), fl_describe_shape(ndim, shape, buf), (long long)PTRDIFF_MAX);
    return fits;
}

static int64_t live_tensors;

int64_t fl_live_tensors(void) { return __atomic_load_n(&live_tensors, __ATOMIC_RELAXED); }

fl_tensor *fl__new(const fl_backend *backend, fl_dtype dtype, int ndim, const int64_t *shape)
{
    if (!fl_check_size("fl_tensor", dtype, ndim, shape))
        return NULL;
    fl_tensor *t = malloc(sizeof *t);
    if (!t) /* recorded here, once, for every operation that makes a tensor */
        return fl_error(FL_ERR_MEMORY, "fl_tensor", "cannot allocate a tensor handle");
    __atomic_add_fetch(&live_tensors, 1, __ATOMIC_RELAXED);
    t->refcount = 1;
    t->dtype = dtype;
    t->ndim = ndim;
    t->numel = 1;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        t->numel *= shape[i];
    }
    t->backend = backend;
    t->impl = NULL;
    t->bounded = false;
    t->low = t->high = 0;
    return t;
}

fl_tensor *fl_tensor_alloc(const fl_backend *backend, fl_dtype dtype, int ndim, const int64_t *shape)
{
    return fl__new(backend, dtype, ndim, shape);
}

fl_tensor *fl_retain(const fl_tensor *t)
{
    fl_tensor *own = fl__mutable(t);
    if (fl__checked() && fl_handle_released("fl_retain", t))
        return NULL;
    if (own)
        __atomic_add_fetch(&own->refcount, 1, __ATOMIC_RELAXED);
    return own;
}

static void free_handle(void *t) { free(t); }

void fl_release(fl_tensor *t)
{
    if (fl__checked() && fl_handle_released("fl_release", t))
        return; /* released twice: the second release is the error */
    if (!t || __atomic_sub_fetch(&t->refcount, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    if (t->impl && t->backend->release)
        t->backend->release(t->backend, t);
    __atomic_sub_fetch(&live_tensors, 1, __ATOMIC_RELAXED);
    if (fl__checked()) {
        t->impl = NULL;
        fl_handle_retire(t, "tensor", "fl_release", free_handle);
    } else {
        free(t);
    }
}

/* ---- scopes: a per-thread stack of owned references and of scope marks ---- */

typedef struct scope_item {
    void *object;
    void (*release)(void *object);
} scope_item;

typedef struct scope_mark {
    size_t count;   /* the items below the scope */
    int64_t serial; /* which fl_scope_begin of the thread opened it, for checked handles */
} scope_mark;

typedef struct scope_stack {
    scope_item *items;
    size_t count, capacity;
    scope_mark *marks;
    int depth, mark_capacity;
} scope_stack;

static _Thread_local scope_stack scopes;
static _Thread_local int64_t scopes_begun;

fl_scope fl_scope_begin(void)
{
    if (scopes.depth == scopes.mark_capacity) {
        int capacity = scopes.mark_capacity ? 2 * scopes.mark_capacity : 16;
        scope_mark *marks = realloc(scopes.marks, (size_t)capacity * sizeof *marks);
        if (!marks) {
            fl_error(FL_ERR_MEMORY, "fl_scope_begin", "cannot grow the scope stack");
            return (fl_scope){scopes.count, scopes.depth};
        }
        scopes.marks = marks;
        scopes.mark_capacity = capacity;
    }
    scopes.marks[scopes.depth++] = (scope_mark){scopes.count, ++scopes_begun};
    return (fl_scope){scopes.count, scopes.depth};
}

void fl_scope_end(fl_scope scope)
{
    /* Ending a scope also ends any inner scope left open inside it. Marks alone cannot
     * tell nested scopes apart (an inner scope opened before the outer one made
     * anything has the same mark), so the depth decides. */
    if (scope.depth < 1 || scope.depth > scopes.depth)
        return;
    bool checked = fl__checked();
    if (checked)
        fl__handles_scope_ending(scopes.marks[scope.depth - 1].serial, scope.depth, true);
    while (scopes.count > scope.mark) {
        scope_item item = scopes.items[--scopes.count];
        item.release(item.object);
    }
    if (checked)
        fl__handles_scope_ending(0, 0, false);
    scopes.depth = scope.depth - 1;
    if (scopes.depth == 0) {
        free(scopes.items);
        free(scopes.marks);
        memset(&scopes, 0, sizeof scopes);
    }
}

void *fl_scope_own(void *object, void (*release)(void *object))
{
    if (object && !release) /* the scope's end would call it */
        return fl_error(FL_ERR_NULL, "fl_scope_own", "the release function is NULL");
    if (!object || scopes.depth == 0)
        return object;
    if (scopes.count == scopes.capacity) {
        size_t capacity = scopes.capacity ? 2 * scopes.capacity : 256;
        scope_item *items = realloc(scopes.items, capacity * sizeof *items);
        if (!items) {
            release(object);
            return fl_error(FL_ERR_MEMORY, "fl_scope", "cannot grow the scope");
        }
        scopes.items = items;
        scopes.capacity = capacity;
    }
    scopes.items[scopes.count++] = (scope_item){object, release};
    return object;
}

bool fl_scope_disown(void *object)
{
    if (!object || scopes.depth == 0)
        return false;
    size_t floor = scopes.marks[scopes.depth - 1].count;
    for (size_t i = scopes.count; i > floor; i--) {
        if (scopes.items[i - 1].object == object) {
            /* Keep the order of the others: they are released newest first. */
            memmove(&scopes.items[i - 1], &scopes.items[i], (scopes.count - i) * sizeof *scopes.items);
            scopes.count--;
            return true;
        }
    }
    return false;
}

static void release_tensor(void *t) { fl_release(t); }

fl_tensor *fl_out(fl_tensor *t) { return fl_scope_own(t, release_tensor); }

fl_tensor *fl_keep(fl_tensor *t)
{
    if (!t || scopes.depth == 0)
        return t;
    /* The scope's reference becomes the caller's; a tensor made outside the innermost
     * scope gets a reference of its own. */
    return fl_scope_disown(t) ? t : fl_retain(t);
}

fl_tensor *fl_scope_return(fl_scope scope, fl_tensor *result)
{
    fl_keep(result);
    fl_scope_end(scope);
    return fl_out(result);
}

/* ---- introspection ---- */

fl_dtype fl_dtype_of(const fl_tensor *t) { return t ? t->dtype : FL_F32; }
int fl_ndim(const fl_tensor *t) { return t ? t->ndim : 0; }
const int64_t *fl_shape(const fl_tensor *t) { return t ? t->shape : NULL; }
int64_t fl_numel(const fl_tensor *t) { return t ? t->numel : 0; }
const char *fl_backend_name(const fl_tensor *t) { return t ? t->backend->name : ""; }

int64_t fl_dim(const fl_tensor *t, int axis)
{
    int a;
    if (fl_null_args("fl_dim", 1, t) || !fl_normalize_axis("fl_dim", axis, t->ndim, &a))
        return -1;
    return t->shape[a];
}

/* ---- threads ---- */

static int num_threads;

void fl_set_num_threads(int n)
{
    if (n < 1 || n > FL_MAX_THREADS) {
        fl_error(FL_ERR_VALUE, "fl_set_num_threads", "the thread count must be 1 to %d, got %d", FL_MAX_THREADS, n);
        return;
    }
    num_threads = n;
}

int fl_num_threads(void)
{
    if (num_threads == 0) {
        int n = fl_config_current()->num_threads;
        if (n < 1)
            n = (int)sysconf(_SC_NPROCESSORS_ONLN);
        num_threads = n < 1 ? 1 : n > FL_MAX_THREADS ? FL_MAX_THREADS : n;
    }
    return num_threads;
}
