/*
 * Where the time goes: a per-operation profile of every backend primitive called
 * through the tensor layer (and of the fused kernels), for whichever backend runs.
 *
 * Turned on by FLARE_PROFILE=1 (docs/CONFIG.md; the table is then printed to
 * stderr when the process exits) or by fl_profile_enable. Times are exclusive: an
 * operation that runs another one inside (a lazy backend's matmul computing its
 * pending operands in a fused pass) is charged only for the rest, and the inner one
 * appears under its own name. A backend may name its own inner work with
 * fl_profile_push/fl_profile_pop. Off, the cost is one predictable branch per
 * primitive.
 *
 * The clock is per thread: a primitive is timed on the thread that called it, from
 * its call to its return, including any time that thread waits for others.
 */
#ifndef FLARE_PROFILE_H
#define FLARE_PROFILE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

void fl_profile_enable(bool on);
bool fl_profile_enabled(void);

/* Forgets everything recorded so far (after a warm-up, say). */
void fl_profile_reset(void);

/* Starts and ends an operation named by a string that outlives the profile (a
 * literal). Pairs nest, per thread, up to 16 deep; deeper ones are not timed. */
void fl_profile_push(const char *name);
void fl_profile_pop(void);

typedef struct fl_profile_entry {
    const char *name;
    uint64_t calls;
    double seconds; /* exclusive */
} fl_profile_entry;

/* Copies up to capacity entries, longest total first; returns how many exist. */
int fl_profile_entries(fl_profile_entry *out, int capacity);

/* Prints the table: each operation's calls, total and mean time, and share of the
 * time recorded, plus the wall time since the profile was reset, the rest of which
 * ran outside any primitive (the caller's own work, the framework's bookkeeping). */
void fl_profile_print(FILE *f);

/* The lazy backend's memory traffic since the last reset, in bytes: what its fused
 * passes read and wrote, and what the same operations would have read and written one
 * at a time (every operation reading its operands and writing its result). */
typedef struct fl_lazy_traffic {
    uint64_t fused_read, fused_written;
    uint64_t unfused_read, unfused_written;
    uint64_t passes, operations; /* fused passes run, operations they computed */
    uint64_t recomputed;         /* of those operations, ones an earlier pass had computed */
} fl_lazy_traffic;

fl_lazy_traffic fl_lazy_traffic_get(void);
void fl_lazy_traffic_reset(void);

#ifdef __cplusplus
}
#endif

#endif
