/*
 * The operation profile (flare/profile.h). Each thread keeps a stack of open
 * operations with their start times and the time their inner operations took; a
 * closed operation adds its own (exclusive) time to a shared table under a lock,
 * which is taken only while profiling.
 *
 * A primitive's frame is opened by the tensor layer's dispatch and closed when its
 * result is checked. Primitives do not nest through the tensor layer, so a primitive
 * frame still open when the next primitive starts was left by an error path that
 * returned early, and is dropped.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flare/profile.h"
#include "config.h"
#include "internal.h"

#define MAX_OPERATIONS 256
#define MAX_DEPTH 16

typedef struct frame {
    const char *name;
    double start, inner;
    bool primitive;
} frame;

static int enabled = -1; /* -1 until the settings are read (FLARE_PROFILE) */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static fl_profile_entry table[MAX_OPERATIONS];
static int used;
static double since;

static _Thread_local frame stack[MAX_DEPTH];
static _Thread_local int depth;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void print_at_exit(void) { fl_profile_print(stderr); }

/* The report at exit is what FLARE_PROFILE asks for, so the handler is installed
 * only then. It reads the table under its lock, so threads still
 * running operations as the process exits do no harm. An explicit fl_profile_enable
 * that came first wins over the setting. */
void fl__profile_configure(bool on)
{
    int unset = -1;
    if (__atomic_compare_exchange_n(&enabled, &unset, 0, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED) && on) {
        fl_profile_enable(true);
        atexit(print_at_exit);
    }
}

void fl_profile_enable(bool on)
{
    pthread_mutex_lock(&lock);
    if (on && __atomic_load_n(&enabled, __ATOMIC_RELAXED) <= 0)
        since = now();
    __atomic_store_n(&enabled, (int)on, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&lock);
}

bool fl_profile_enabled(void)
{
    int on = __atomic_load_n(&enabled, __ATOMIC_RELAXED);
    if (__builtin_expect(on < 0, 0)) {
        fl_config_current();
        on = __atomic_load_n(&enabled, __ATOMIC_RELAXED);
    }
    return on > 0;
}

void fl_profile_reset(void)
{
    pthread_mutex_lock(&lock);
    used = 0;
    since = now();
    pthread_mutex_unlock(&lock);
}

static void record(const char *name, double seconds)
{
    pthread_mutex_lock(&lock);
    /* Names are literals: the same pointer, found first; the same text from another
     * object file, second. */
    int i = 0;
    while (i < used && table[i].name != name)
        i++;
    if (i == used)
        for (i = 0; i < used && strcmp(table[i].name, name) != 0;)
            i++;
    if (i == used && used < MAX_OPERATIONS)
        table[used++] = (fl_profile_entry){.name = name};
    if (i < used) {
        table[i].calls++;
        table[i].seconds += seconds;
    }
    pthread_mutex_unlock(&lock);
}

static void push(const char *name, bool primitive)
{
    if (depth < MAX_DEPTH)
        stack[depth] = (frame){.name = name, .start = now(), .primitive = primitive};
    depth++;
}

static void pop(void)
{
    if (depth == 0)
        return;
    depth--;
    if (depth >= MAX_DEPTH)
        return;
    double elapsed = now() - stack[depth].start;
    record(stack[depth].name, elapsed - stack[depth].inner);
    if (depth > 0 && depth <= MAX_DEPTH)
        stack[depth - 1].inner += elapsed;
}

void fl_profile_push(const char *name)
{
    if (fl_profile_enabled())
        push(name ? name : "?", false);
}

void fl_profile_pop(void)
{
    if (fl_profile_enabled())
        pop();
}

void fl__profile_begin(const char *primitive)
{
    if (!fl_profile_enabled())
        return;
    if (depth > 0 && depth <= MAX_DEPTH && stack[depth - 1].primitive)
        depth--; /* left open by an error path */
    push(primitive, true);
}

void fl__profile_end(void)
{
    if (fl_profile_enabled() && depth > 0 && depth <= MAX_DEPTH && stack[depth - 1].primitive)
        pop();
}

static int longer_first(const void *a, const void *b)
{
    double x = ((const fl_profile_entry *)a)->seconds, y = ((const fl_profile_entry *)b)->seconds;
    return (x < y) - (x > y);
}

int fl_profile_entries(fl_profile_entry *out, int capacity)
{
    pthread_mutex_lock(&lock);
    fl_profile_entry sorted[MAX_OPERATIONS];
    int n = used;
    memcpy(sorted, table, (size_t)n * sizeof *sorted);
    pthread_mutex_unlock(&lock);
    qsort(sorted, (size_t)n, sizeof *sorted, longer_first);
    if (out && capacity > 0)
        memcpy(out, sorted, (size_t)(n < capacity ? n : capacity) * sizeof *out);
    return n;
}

void fl_profile_print(FILE *f)
{
    fl_profile_entry entries[MAX_OPERATIONS];
    int n = fl_profile_entries(entries, MAX_OPERATIONS);
    double total = 0, wall = now() - since;
    for (int i = 0; i < n; i++)
        total += entries[i].seconds;
    fprintf(f, "flare profile: %.3f s in operations of %.3f s wall since the last reset\n", total, wall);
    fprintf(f, "%-28s %10s %12s %12s %7s\n", "operation", "calls", "total ms", "mean us", "share");
    for (int i = 0; i < n; i++)
        fprintf(f, "%-28s %10llu %12.3f %12.2f %6.1f%%\n", entries[i].name, (unsigned long long)entries[i].calls,
                entries[i].seconds * 1e3, entries[i].seconds / (double)entries[i].calls * 1e6,
                total > 0 ? 100 * entries[i].seconds / total : 0.0);
}
