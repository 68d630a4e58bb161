/* The current memory manager, the telemetry hook, and the operation attribution. */
#include <stdlib.h>
#include <string.h>

#include "flare/memory.h"

static fl_memory_manager *current;
static fl_memory_hook hook;
static void *hook_user;
static _Thread_local const char *operation = "";

static fl_memory_manager *initial_manager(void)
{
    const char *name = getenv("FLARE_MEMORY");
    if (name && strcmp(name, "plain") == 0)
        return fl_memory_plain();
    return fl_memory_plain(); /* the caching manager becomes the default once written */
}

fl_memory_manager *fl_memory_manager_current(void)
{
    fl_memory_manager *m = __atomic_load_n(&current, __ATOMIC_ACQUIRE);
    if (!m) {
        fl_memory_manager *fresh = initial_manager(), *expected = NULL;
        if (__atomic_compare_exchange_n(&current, &expected, fresh, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            m = fresh;
        else {
            fresh->destroy(fresh); /* another thread installed one first */
            m = expected;
        }
    }
    return m;
}

void fl_memory_set_manager(fl_memory_manager *m)
{
    if (m)
        __atomic_store_n(&current, m, __ATOMIC_RELEASE);
}

void fl_memory_set_hook(fl_memory_hook h, void *user)
{
    hook_user = user;
    __atomic_store_n(&hook, h, __ATOMIC_RELEASE);
}

void fl_memory_set_operation(const char *name) { operation = name ? name : ""; }
const char *fl_memory_operation(void) { return operation; }

static void report(fl_memory_event_kind kind, fl_memory_manager *m, const void *ptr, size_t bytes)
{
    fl_memory_hook h = __atomic_load_n(&hook, __ATOMIC_ACQUIRE);
    if (h) {
        fl_memory_event event = {kind, ptr, bytes, operation, m->name};
        h(&event, hook_user);
    }
}

void *fl_memory_alloc(size_t bytes, fl_memory_manager **owner)
{
    fl_memory_manager *m = fl_memory_manager_current();
    void *p = m->alloc(m, bytes);
    if (p)
        report(FL_MEMORY_ALLOC, m, p, bytes);
    *owner = m;
    return p;
}

void fl_memory_free(fl_memory_manager *owner, void *ptr, size_t bytes)
{
    if (!ptr)
        return;
    report(FL_MEMORY_FREE, owner, ptr, bytes);
    owner->free(owner, ptr, bytes);
}

void fl_memory_stats_get(fl_memory_stats *out)
{
    fl_memory_manager *m = fl_memory_manager_current();
    memset(out, 0, sizeof *out);
    m->stats(m, out);
}
