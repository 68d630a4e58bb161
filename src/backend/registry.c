/* The registry of tensor backends, and the list of primitives for introspection. */
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "flare/backend.h"
#include "flare/extension.h"

#include "flare/config.h"

/* Every operation entry, from the one list in backend.h. */
#define NAME_OF(version, name, params) #name,
#define VERSION_OF(version, name, params) version,
#define END_OF(version, name, params) offsetof(fl_backend, name) + sizeof(void *),
static const char *const primitive_names[] = {FL_BACKEND_OPERATIONS(NAME_OF)};
static const unsigned char primitive_versions[] = {FL_BACKEND_OPERATIONS(VERSION_OF)};
static const size_t primitive_ends[] = {FL_BACKEND_OPERATIONS(END_OF)};
#define PRIMITIVE_COUNT ((int)(sizeof primitive_names / sizeof primitive_names[0]))

int fl_backend_primitive_count(void) { return PRIMITIVE_COUNT; }

const char *fl_backend_primitive_name(int i) { return i >= 0 && i < PRIMITIVE_COUNT ? primitive_names[i] : NULL; }

int fl_backend_primitive_version(int i) { return i >= 0 && i < PRIMITIVE_COUNT ? primitive_versions[i] : 0; }

size_t fl_backend_size(int version)
{
    if (version < 1 || version > FL_BACKEND_VERSION)
        return 0;
    size_t size = 0;
    for (int i = 0; i < PRIMITIVE_COUNT; i++)
        if (primitive_versions[i] <= version)
            size = primitive_ends[i];
    return size;
}

/* A registered name owns a table in place, which tensors made on it point to and
 * which lives as long as the process. Registering the name again writes the new
 * entries into it one by one, each store atomic, so a thread calling through it
 * meanwhile gets the old entry or the new one, both valid for its tensors: a
 * replacement must release storage as the table it replaces does (be derived from
 * it). What the name held before is kept as a snapshot, which becomes the new
 * table's base, so a wrapper's self->base is the entry it replaced, never itself. */
#define MAX_BACKENDS 16

static fl_backend *slots[MAX_BACKENDS];
static int slot_count;
/* The default backend's table: a slot's, whose address never changes, so readers
 * take it without the lock (tensors are made on it at every call). */
static const fl_backend *default_table;
static pthread_once_t builtins_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;

/* Every snapshot, kept for the life of the process: a wrapper's base may point to
 * one long after its name was registered again. */
typedef struct snapshot {
    fl_backend table;
    struct snapshot *next;
} snapshot;
static snapshot *snapshots;

static int slot_named(const char *name)
{
    for (int i = 0; i < slot_count; i++)
        if (strcmp(slots[i]->name, name) == 0)
            return i;
    return -1;
}

/* Checks table against the contract and returns a full-size copy (later entries
 * NULL) whose name is *name, a copy the caller owns; or NULL after recording why. */
static fl_backend *checked_copy(const fl_backend *table, char **name)
{
    const char *fn = "fl_backend_register";
    if (!table || !table->name || !*table->name)
        return fl_error(FL_ERR_NULL, fn, "the table or its name is NULL or empty");
    if (table->version < 1 || table->version > FL_BACKEND_VERSION)
        return fl_error(FL_ERR_VALUE, fn,
                         "backend '%s' was written against version %d of fl_backend; this library knows "
                         "versions 1 to %d",
                         table->name, table->version, FL_BACKEND_VERSION);
    size_t expected = fl_backend_size(table->version);
    if (table->table_size != expected)
        return fl_error(FL_ERR_VALUE, fn,
                         "backend '%s' says version %d with a table of %zu bytes, but version %d has %zu: it "
                         "was compiled against a different backend.h",
                         table->name, table->version, table->table_size, table->version, expected);
    if (!table->release)
        return fl_error(FL_ERR_VALUE, fn, "backend '%s' has no release entry", table->name);
    fl_backend *copy = calloc(1, sizeof *copy);
    *name = strdup(table->name);
    if (!copy || !*name) {
        free(copy);
        free(*name);
        return fl_error(FL_ERR_MEMORY, fn, "no memory for a copy of backend '%s'", table->name);
    }
    memcpy(copy, table, table->table_size);
    copy->version = FL_BACKEND_VERSION;
    copy->table_size = sizeof *copy;
    copy->name = *name; /* the copy outlives the caller's string */
    return copy;
}

/* Writes copy's entries into the registered table t, each pointer atomically. */
static void write_entries(fl_backend *t, const fl_backend *copy)
{
    void **to = (void **)&t->state, *const *from = (void *const *)&copy->state;
    size_t count = (sizeof *t - offsetof(fl_backend, state)) / sizeof(void *);
    _Static_assert(offsetof(fl_backend, state) % sizeof(void *) == 0 && sizeof(fl_backend) % sizeof(void *) == 0,
                   "every field after name is a pointer");
    for (size_t i = 0; i < count; i++)
        __atomic_store_n(&to[i], from[i], __ATOMIC_RELEASE);
}

static fl_status register_table(const fl_backend *table)
{
    const char *fn = "fl_backend_register";
    char *name = NULL;
    fl_backend *copy = checked_copy(table, &name);
    if (!copy)
        return fl_last_status();
    fl_status status = FL_OK;
    pthread_mutex_lock(&registry_lock);
    int i = slot_named(copy->name);
    if (i < 0) {
        if (slot_count < MAX_BACKENDS) {
            slots[slot_count] = copy;
            if (!default_table)
                __atomic_store_n(&default_table, copy, __ATOMIC_RELEASE);
            slot_count++;
            copy = NULL;
        } else {
            status = FL_ERR_MEMORY;
        }
    } else if (copy->release != slots[i]->release) {
        status = FL_ERR_VALUE;
    } else {
        snapshot *kept = malloc(sizeof *kept);
        if (kept) {
            kept->table = *slots[i];
            kept->next = snapshots;
            snapshots = kept;
            if (copy->base == slots[i])
                copy->base = &kept->table;
            write_entries(slots[i], copy);
        } else {
            status = FL_ERR_MEMORY;
        }
    }
    pthread_mutex_unlock(&registry_lock);
    if (status == FL_ERR_MEMORY)
        fl_error(status, fn, "cannot register backend '%s': out of memory or over %d names", copy->name,
                  MAX_BACKENDS);
    else if (status == FL_ERR_VALUE)
        fl_error(status, fn,
                  "backend '%s' is registered with another release entry: a replacement must be derived from "
                  "the table it replaces (fl_backend_derive), since tensors made on it keep their storage",
                  copy->name);
    if (copy) { /* not kept: refused, or its entries were written into the name's table */
        free(name);
        free(copy);
    }
    return status;
}

/* Runs inside pthread_once, so it must not call the public functions (which wait on
 * the same once). An unknown FLARE_BACKEND leaves cpu the default, with a warning. */
static void register_builtins(void)
{
    register_table(fl_cpu_backend());
    register_table(fl_lazy_backend());
    register_table(fl_opencl_backend());
    const char *name = fl_config_current()->backend;
    if (name && *name) {
        pthread_mutex_lock(&registry_lock);
        int i = slot_named(name);
        if (i >= 0)
            __atomic_store_n(&default_table, slots[i], __ATOMIC_RELEASE);
        pthread_mutex_unlock(&registry_lock);
        if (i < 0)
            fl_log_message(FL_LOG_WARNING, "FLARE_BACKEND names no registered backend ('%s'); using cpu", name);
    }
}

fl_status fl_backend_register(const fl_backend *table)
{
    pthread_once(&builtins_once, register_builtins);
    return register_table(table);
}

const fl_backend *fl_backend_find(const char *name)
{
    pthread_once(&builtins_once, register_builtins);
    if (!name)
        return NULL;
    pthread_mutex_lock(&registry_lock);
    int i = slot_named(name);
    const fl_backend *found = i >= 0 ? slots[i] : NULL;
    pthread_mutex_unlock(&registry_lock);
    return found;
}

const fl_backend *fl_default_backend(void)
{
    pthread_once(&builtins_once, register_builtins);
    return __atomic_load_n(&default_table, __ATOMIC_ACQUIRE);
}

fl_status fl_set_default_backend(const char *name)
{
    pthread_once(&builtins_once, register_builtins);
    pthread_mutex_lock(&registry_lock);
    int i = name ? slot_named(name) : -1;
    if (i >= 0)
        __atomic_store_n(&default_table, slots[i], __ATOMIC_RELEASE);
    pthread_mutex_unlock(&registry_lock);
    if (i < 0) {
        fl_error(FL_ERR_VALUE, "fl_set_default_backend", "no backend named '%s' is registered",
                  name ? name : "(null)");
        return FL_ERR_VALUE;
    }
    return FL_OK;
}

void fl_backend_derive(fl_backend *out, const fl_backend *base, const char *name)
{
    *out = *base;
    out->version = FL_BACKEND_VERSION;
    out->table_size = sizeof *out;
    out->name = name;
    out->base = base;
    out->user = NULL;
}
