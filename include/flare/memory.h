/*
 * The memory manager interface: a table of function pointers through which backends
 * allocate tensor storage, swappable at run time. Flare ships two managers:
 *
 *  - "plain": aligned malloc and free, nothing kept;
 *  - "caching": freed blocks are kept in size buckets and reused; a request is served
 *    from a larger cached block by splitting it, except that blocks above a tunable
 *    limit (max_split_bytes) are never split, which bounds fragmentation, as studied
 *    in the Flashlight paper (section 5.2).
 *
 * Every allocation and release can be reported to a telemetry hook together with the
 * tensor operation that caused it.
 */
#ifndef FLARE_MEMORY_H
#define FLARE_MEMORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "flare/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every block is aligned to this many bytes (an AVX-512 vector, a cache line). */
#define FL_MEMORY_ALIGNMENT 64

typedef struct fl_memory_stats {
    size_t in_use;         /* bytes handed out and not yet freed (caching: whole blocks,
                              requests rounded up to 512 bytes) */
    size_t peak_in_use;    /* the high-water mark of in_use */
    size_t cached;         /* bytes held by the manager and free for reuse */
    size_t reserved;       /* bytes obtained from the system: in_use + cached */
    uint64_t allocations;  /* calls to alloc */
    uint64_t frees;        /* calls to free */
    uint64_t cache_hits;   /* allocations served from the cache */
    uint64_t system_allocations; /* allocations that went to the system */
    /* 1 - (largest cached block / cached): 0 when the cache is one block or empty. */
    double fragmentation;
} fl_memory_stats;

typedef struct fl_memory_manager fl_memory_manager;

struct fl_memory_manager {
    const char *name;
    void *state;
    /* Returns FL_MEMORY_ALIGNMENT-aligned memory of at least bytes, or NULL. */
    void *(*alloc)(fl_memory_manager *m, size_t bytes);
    /* bytes is the size given to alloc. */
    void (*free)(fl_memory_manager *m, void *ptr, size_t bytes);
    void (*stats)(fl_memory_manager *m, fl_memory_stats *out);
    /* Returns cached memory to the system. */
    void (*trim)(fl_memory_manager *m);
    /* Releases the manager itself; called once, after its last block is freed. */
    void (*destroy)(fl_memory_manager *m);
};

fl_memory_manager *fl_memory_plain(void);
/* max_split_bytes (rounded down to 64 KiB): blocks of the large pool (requests over
 * 1 MiB) larger than this are never split; they are handed out whole, only to
 * requests over max_split_bytes that leave at most 20 MiB of them unused (SIZE_MAX
 * splits everything, as PyTorch does by default). cache_limit_bytes: when cached bytes exceed it, wholly free segments go
 * back to the system, oldest first (SIZE_MAX keeps everything; free space inside a
 * segment that is partly in use cannot be returned). NULL if out of memory. Its
 * destroy keeps the manager, logging a warning (flare/config.h), while blocks are in use.
 * The rules in full: src/memory/caching.c. */
fl_memory_manager *fl_memory_caching(size_t max_split_bytes, size_t cache_limit_bytes);

/* The manager new allocations go through; initially the caching one (unlimited
 * splitting and cache), or the one FLARE_MEMORY names ("plain" or "caching"), made
 * once and kept for the life of the process (never destroy it). Blocks are always
 * freed through the manager that allocated them, so switching is safe at any time. */
void fl_memory_set_manager(fl_memory_manager *m);
fl_memory_manager *fl_memory_manager_current(void);

/* What backends call. Both report to the telemetry hook. */
void *fl_memory_alloc(size_t bytes, fl_memory_manager **owner);
void fl_memory_free(fl_memory_manager *owner, void *ptr, size_t bytes);

void fl_memory_stats_get(fl_memory_stats *out); /* of the current manager */

typedef enum fl_memory_event_kind { FL_MEMORY_ALLOC, FL_MEMORY_FREE } fl_memory_event_kind;

typedef struct fl_memory_event {
    fl_memory_event_kind kind;
    const void *ptr;
    size_t bytes;
    const char *operation; /* the tensor operation in progress ("add", "conv2d", ...) or "" */
    const char *manager;
} fl_memory_event;

typedef void (*fl_memory_hook)(const fl_memory_event *event, void *user);
/* One hook at a time; NULL removes it. The hook may run on any thread. */
void fl_memory_set_hook(fl_memory_hook hook, void *user);

/* The operation that allocations on this thread are attributed to. The tensor layer
 * sets it around every dispatch; other layers may set it too ("optimizer step"). */
void fl_memory_set_operation(const char *name);
const char *fl_memory_operation(void);

#ifdef __cplusplus
}
#endif

#endif
