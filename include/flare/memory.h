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

/* Every entry of the table, in table order: X(version, return type, name, parameters),
 * one list that makes the struct and the names. Each entry receives the manager (m)
 * first. Entries are appended, never reordered; the library reads an entry only if
 * the manager's version is at least the entry's.
 *
 * Thread safety: alloc, free, stats and trim are called concurrently from any thread
 * (data loaders make and free tensors on worker threads, and a tensor is freed by
 * whichever thread drops its last reference), so a manager synchronizes itself.
 * destroy is called once, by fl_memory_manager_destroy, never by the library on its
 * own. */
#define FL_MEMORY_ENTRIES(X)                                                                      \
    /* FL_MEMORY_ALIGNMENT-aligned memory of at least bytes, or NULL. */                        \
    X(1, void *, alloc, (fl_memory_manager * m, size_t bytes))                                    \
    /* bytes is the size given to alloc. */                                                     \
    X(1, void, free, (fl_memory_manager * m, void *ptr, size_t bytes))                            \
    X(1, void, stats, (fl_memory_manager * m, fl_memory_stats *out))                              \
    /* Returns cached memory to the system. */                                                  \
    X(1, void, trim, (fl_memory_manager * m))                                                     \
    /* Releases the manager itself, once no block it handed out is in use. */                  \
    X(1, void, destroy, (fl_memory_manager * m))

/* The version of struct fl_memory_manager this header declares. */
#define FL_MEMORY_VERSION 1

#define FL__MEMORY_ENTRY(version, type, name, params) type(*name) params;

struct fl_memory_manager {
    /* What the manager was written against: FL_MEMORY_VERSION and
     * sizeof(fl_memory_manager) of that header, checked by fl_memory_set_manager. */
    int version;
    size_t table_size;
    const char *name;
    void *state;
    FL_MEMORY_ENTRIES(FL__MEMORY_ENTRY)
};

/* sizeof(fl_memory_manager) as version declared it, or 0 for a version that does not
 * exist. */
size_t fl_memory_manager_size(int version);
/* The name of entry i, in table order, or NULL past the end. */
const char *fl_memory_entry_name(int i);

fl_memory_manager *fl_memory_plain(void);
/* max_split_bytes (rounded down to 64 KiB): blocks of the large pool (requests over
 * 1 MiB) larger than this are never split; they are handed out whole, only to
 * requests over max_split_bytes that leave at most 20 MiB of them unused (SIZE_MAX
 * splits everything, as PyTorch does by default). cache_limit_bytes: when cached bytes exceed it, wholly free segments go
 * back to the system, oldest first (SIZE_MAX keeps everything; free space inside a
 * segment that is partly in use cannot be returned). NULL if out of memory. The
 * rules in full: src/memory/caching.c. */
fl_memory_manager *fl_memory_caching(size_t max_split_bytes, size_t cache_limit_bytes);

/* Where a caching manager gets its segments: map returns bytes (a multiple of 64 KiB)
 * of fresh memory aligned to FL_MEMORY_ALIGNMENT, or NULL; unmap gives a segment back.
 * For memory the host cannot address (a device's), map returns an address in a range
 * the source reserves, which stands for a place in the device's memory: the manager
 * only does arithmetic on addresses and never touches them. The default source of
 * fl_memory_caching is the host's (mmap). */
typedef struct fl_memory_segments {
    void *(*map)(void *user, size_t bytes);
    void (*unmap)(void *user, void *segment, size_t bytes);
    void *user;
} fl_memory_segments;
/* A caching manager, as fl_memory_caching, over the segments of source (copied),
 * reported under name (kept, not copied). NULL if out of memory or source lacks an
 * entry. Device backends make their allocators this way, so that device memory has
 * the caching rules, statistics and telemetry of host memory. */
fl_memory_manager *fl_memory_caching_over(const fl_memory_segments *source, const char *name,
                                          size_t max_split_bytes, size_t cache_limit_bytes);

/* The manager new allocations go through; initially the caching one (unlimited
 * splitting and cache), or the one FLARE_MEMORY names ("plain" or "caching"), made
 * once and kept for the life of the process. Blocks are always freed through the
 * manager that allocated them, so switching is safe at any time. A manager whose
 * version or size does not match, or without alloc, free or stats, is refused with
 * a message. */
fl_status fl_memory_set_manager(fl_memory_manager *m);
fl_memory_manager *fl_memory_manager_current(void);
/* Calls m's destroy: refused (FL_ERR_VALUE, with a message) while m is the current
 * manager, is the one made at start-up, or has bytes in use by its own statistics. */
fl_status fl_memory_manager_destroy(fl_memory_manager *m);

/* What backends call. Both report to the telemetry hook. */
void *fl_memory_alloc(size_t bytes, fl_memory_manager **owner);
/* An allocation from m itself rather than the current manager (a device backend's
 * own), reported to the hook like the others; free it with fl_memory_free(m, ...). */
void *fl_memory_alloc_from(fl_memory_manager *m, size_t bytes);
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
