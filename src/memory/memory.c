/* The current memory manager, the telemetry hook, and the operation attribution. */
#include <pthread.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "flare/memory.h"
#include "flare/extension.h" /* errors are recorded as everywhere else */
#include "flare/config.h"

static fl_memory_manager *current;
/* The manager made at start-up. It lives as long as the process: blocks it handed out
 * may be freed at any time, even after another manager is installed, and this pointer
 * keeps its cache reachable (LeakSanitizer does not count it as a leak). */
static fl_memory_manager *initial;
static pthread_once_t initial_once = PTHREAD_ONCE_INIT;
static fl_memory_hook hook;
static void *hook_user;
static _Thread_local const char *operation = "";

static void make_initial_manager(void)
{
    /* config.c resolved the setting to "caching" or "plain", warning about others */
    if (strcmp(fl_config_current()->memory, "plain") == 0) {
        initial = fl_memory_plain();
    } else {
        initial = fl_memory_caching(SIZE_MAX, SIZE_MAX);
        if (!initial)
            initial = fl_memory_plain();
    }
    fl_memory_manager *none = NULL; /* unless fl_memory_set_manager came first */
    __atomic_compare_exchange_n(&current, &none, initial, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

fl_memory_manager *fl_memory_manager_current(void)
{
    fl_memory_manager *m = __atomic_load_n(&current, __ATOMIC_ACQUIRE);
    if (__builtin_expect(m != NULL, 1))
        return m;
    pthread_once(&initial_once, make_initial_manager);
    return __atomic_load_n(&current, __ATOMIC_ACQUIRE);
}

#define NAME_OF(version, type, name, params) #name,
#define END_OF(version, type, name, params) offsetof(fl_memory_manager, name) + sizeof(void *),
#define VERSION_OF(version, type, name, params) version,
static const char *const entry_names[] = {FL_MEMORY_ENTRIES(NAME_OF)};
static const size_t entry_ends[] = {FL_MEMORY_ENTRIES(END_OF)};
static const unsigned char entry_versions[] = {FL_MEMORY_ENTRIES(VERSION_OF)};
#define ENTRY_COUNT ((int)(sizeof entry_names / sizeof entry_names[0]))

const char *fl_memory_entry_name(int i) { return i >= 0 && i < ENTRY_COUNT ? entry_names[i] : NULL; }

size_t fl_memory_manager_size(int version)
{
    if (version < 1 || version > FL_MEMORY_VERSION)
        return 0;
    size_t size = 0;
    for (int i = 0; i < ENTRY_COUNT; i++)
        if (entry_versions[i] <= version)
            size = entry_ends[i];
    return size;
}

fl_status fl_memory_set_manager(fl_memory_manager *m)
{
    const char *fn = "fl_memory_set_manager";
    if (!m || !m->name) {
        fl_error(FL_ERR_NULL, fn, "the manager or its name is NULL");
        return FL_ERR_NULL;
    }
    size_t expected = fl_memory_manager_size(m->version);
    if (!expected || m->table_size != expected) {
        fl_error(FL_ERR_VALUE, fn,
                  "manager '%s' says version %d with a table of %zu bytes; this library knows versions 1 to %d "
                  "(version %d has %zu): it was compiled against a different memory.h",
                  m->name, m->version, m->table_size, FL_MEMORY_VERSION, m->version, expected);
        return FL_ERR_VALUE;
    }
    if (!m->alloc || !m->free || !m->stats) {
        fl_error(FL_ERR_VALUE, fn, "manager '%s' lacks alloc, free or stats", m->name);
        return FL_ERR_VALUE;
    }
    pthread_once(&initial_once, make_initial_manager);
    __atomic_store_n(&current, m, __ATOMIC_RELEASE);
    return FL_OK;
}

fl_status fl_memory_manager_destroy(fl_memory_manager *m)
{
    const char *fn = "fl_memory_manager_destroy";
    if (!m) {
        fl_error(FL_ERR_NULL, fn, "the manager is NULL");
        return FL_ERR_NULL;
    }
    pthread_once(&initial_once, make_initial_manager);
    fl_memory_stats stats = {0};
    m->stats(m, &stats);
    const char *why = m == __atomic_load_n(&current, __ATOMIC_ACQUIRE) ? "it is the current manager"
                      : m == initial                                   ? "it is the manager made at start-up"
                      : stats.in_use                                   ? "blocks it handed out are in use"
                                                                       : NULL;
    if (why) {
        fl_error(FL_ERR_VALUE, fn, "cannot destroy manager '%s': %s (%zu bytes in use)", m->name, why,
                  stats.in_use);
        return FL_ERR_VALUE;
    }
    if (m->destroy)
        m->destroy(m);
    return FL_OK;
}

/* The hook and its argument are two words, swapped without a lock: a thread that is
 * reporting while the hook changes may pair the new hook with the old argument (or the
 * reverse) once. Change hooks while no other thread allocates. */
void fl_memory_set_hook(fl_memory_hook h, void *user)
{
    __atomic_store_n(&hook_user, user, __ATOMIC_RELAXED);
    __atomic_store_n(&hook, h, __ATOMIC_RELEASE);
}

void fl_memory_set_operation(const char *name) { operation = name ? name : ""; }
const char *fl_memory_operation(void) { return operation; }

static void report(fl_memory_event_kind kind, fl_memory_manager *m, const void *ptr, size_t bytes)
{
    fl_memory_hook h = __atomic_load_n(&hook, __ATOMIC_ACQUIRE);
    if (h) {
        fl_memory_event event = {kind, ptr, bytes, operation, m->name};
        h(&event, __atomic_load_n(&hook_user, __ATOMIC_RELAXED));
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

void *fl_memory_alloc_from(fl_memory_manager *m, size_t bytes)
{
    void *p = m->alloc(m, bytes);
    if (p)
        report(FL_MEMORY_ALLOC, m, p, bytes);
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
