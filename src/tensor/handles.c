/*
 * Checked handles (FLARE_CHECK_HANDLES): a handle released for the last time is kept,
 * poisoned, instead of being freed, and every later use through an argument check
 * (fl_null_args, fl_handle_released) fails with FL_ERR_RELEASED and says what released
 * it. The last QUARANTINE handles are kept; an older one is freed to bound the memory,
 * and a use of it is no longer caught (AddressSanitizer still catches it).
 *
 * Off, the cost is one predictable branch where a handle is freed or checked.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "internal.h"

#define QUARANTINE (1 << 14) /* handles kept poisoned, a power of two */
#define BUCKETS (1 << 14)

typedef struct retired {
    const void *handle; /* NULL: a free slot */
    void (*free_fn)(void *handle);
    const char *kind;
    char by[160]; /* what released it */
    int32_t next; /* the next slot in its bucket, -1 at the end */
} retired;

bool fl__handles_on;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static retired *ring;     /* QUARANTINE slots, the oldest at ring[oldest] once full */
static int32_t *buckets;  /* BUCKETS chains of slots, by handle address */
static uint32_t oldest;   /* the slot the next retirement takes */

/* What is releasing handles on this thread: fl_scope_end sets it for its releases. */
static _Thread_local const char *releasing_scope;
static _Thread_local int64_t releasing_serial;
static _Thread_local int releasing_depth;

void fl__handles_configure(bool on) { __atomic_store_n(&fl__handles_on, on, __ATOMIC_RELAXED); }

bool fl_handles_checked(void)
{
    fl_config_current(); /* the setting, read if nothing has read it yet */
    return fl__checked();
}

void fl__handles_scope_ending(int64_t serial, int depth, bool ending)
{
    releasing_scope = ending ? "fl_scope_end" : NULL;
    releasing_serial = serial;
    releasing_depth = depth;
}

static uint32_t bucket_of(const void *handle)
{
    uint64_t h = (uint64_t)(uintptr_t)handle * 0x9E3779B97F4A7C15u;
    return (uint32_t)(h >> 50) & (BUCKETS - 1);
}

/* Under lock: the slot holding handle, or -1. */
static int32_t find(const void *handle)
{
    for (int32_t i = buckets[bucket_of(handle)]; i >= 0; i = ring[i].next)
        if (ring[i].handle == handle)
            return i;
    return -1;
}

/* Under lock: frees the handle in slot i and unlinks it. */
static void evict(int32_t i)
{
    int32_t *link = &buckets[bucket_of(ring[i].handle)];
    while (*link != i)
        link = &ring[*link].next;
    *link = ring[i].next;
    ring[i].free_fn((void *)(uintptr_t)ring[i].handle);
    ring[i].handle = NULL;
}

void fl_handle_retire(void *handle, const char *kind, const char *by, void (*free_fn)(void *handle))
{
    if (!handle)
        return;
    if (!fl__checked()) {
        free_fn(handle);
        return;
    }
    pthread_mutex_lock(&lock);
    if (!ring) {
        ring = calloc(QUARANTINE, sizeof *ring);
        buckets = malloc(BUCKETS * sizeof *buckets);
        if (!ring || !buckets) { /* no quarantine: the handle is freed as usual */
            free(ring);
            free(buckets);
            ring = NULL;
            buckets = NULL;
            pthread_mutex_unlock(&lock);
            free_fn(handle);
            return;
        }
        memset(buckets, 0xff, BUCKETS * sizeof *buckets); /* every chain empty (-1) */
    }
    int32_t i = (int32_t)oldest;
    oldest = (oldest + 1) & (QUARANTINE - 1);
    if (ring[i].handle)
        evict(i);
    retired *r = &ring[i];
    r->handle = handle;
    r->free_fn = free_fn;
    r->kind = kind;
    if (releasing_scope)
        snprintf(r->by, sizeof r->by, "fl_scope_end (the scope at depth %d, opened by call %lld of fl_scope_begin on its thread)",
                 releasing_depth, (long long)releasing_serial);
    else
        snprintf(r->by, sizeof r->by, "%s", by);
    uint32_t b = bucket_of(handle);
    r->next = buckets[b];
    buckets[b] = i;
    pthread_mutex_unlock(&lock);
}

bool fl_handle_released(const char *fn, const void *handle)
{
    if (!handle || !fl__checked())
        return false;
    pthread_mutex_lock(&lock);
    int32_t i = ring ? find(handle) : -1;
    char message[256];
    if (i >= 0)
        snprintf(message, sizeof message, "a %s used after its last reference was released by %s", ring[i].kind,
                 ring[i].by);
    pthread_mutex_unlock(&lock);
    if (i < 0)
        return false;
    fl_error(FL_ERR_RELEASED, fn, "%s", message);
    return true;
}
