/* The plain memory manager: aligned malloc and free, with counters. */
#include <stdlib.h>
#include <string.h>

#include "flare/memory.h"

typedef struct plain_state {
    size_t in_use, peak;
    uint64_t allocations, frees;
} plain_state;

static void *plain_alloc(fl_memory_manager *m, size_t bytes)
{
    plain_state *s = m->state;
    size_t rounded = (bytes + FL_MEMORY_ALIGNMENT - 1) & ~(size_t)(FL_MEMORY_ALIGNMENT - 1);
    void *p = aligned_alloc(FL_MEMORY_ALIGNMENT, rounded ? rounded : FL_MEMORY_ALIGNMENT);
    if (!p)
        return NULL;
    size_t now = __atomic_add_fetch(&s->in_use, bytes, __ATOMIC_RELAXED);
    size_t peak = __atomic_load_n(&s->peak, __ATOMIC_RELAXED);
    while (now > peak && !__atomic_compare_exchange_n(&s->peak, &peak, now, true, __ATOMIC_RELAXED,
                                                      __ATOMIC_RELAXED))
        ;
    __atomic_add_fetch(&s->allocations, 1, __ATOMIC_RELAXED);
    return p;
}

static void plain_free(fl_memory_manager *m, void *ptr, size_t bytes)
{
    plain_state *s = m->state;
    free(ptr);
    __atomic_sub_fetch(&s->in_use, bytes, __ATOMIC_RELAXED);
    __atomic_add_fetch(&s->frees, 1, __ATOMIC_RELAXED);
}

static void plain_stats(fl_memory_manager *m, fl_memory_stats *out)
{
    plain_state *s = m->state;
    memset(out, 0, sizeof *out);
    out->in_use = __atomic_load_n(&s->in_use, __ATOMIC_RELAXED);
    out->peak_in_use = __atomic_load_n(&s->peak, __ATOMIC_RELAXED);
    out->reserved = out->in_use;
    out->allocations = __atomic_load_n(&s->allocations, __ATOMIC_RELAXED);
    out->frees = __atomic_load_n(&s->frees, __ATOMIC_RELAXED);
    out->system_allocations = out->allocations;
}

static void plain_trim(fl_memory_manager *m) { (void)m; }
static void plain_destroy(fl_memory_manager *m) { (void)m; /* a process-wide singleton */ }

fl_memory_manager *fl_memory_plain(void)
{
    static plain_state state;
    static fl_memory_manager manager = {
        .version = FL_MEMORY_VERSION,
        .table_size = sizeof(fl_memory_manager),
        .name = "plain",
        .state = &state,
        .alloc = plain_alloc,
        .free = plain_free,
        .stats = plain_stats,
        .trim = plain_trim,
        .destroy = plain_destroy,
    };
    return &manager;
}
