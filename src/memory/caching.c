/*
 * The caching memory manager: the design of PyTorch's CUDACachingAllocator, for host
 * memory. Memory is obtained from the system in segments; a segment is carved into
 * blocks; a freed block is kept, merged with free neighbours of its segment, and
 * handed out again, whole or split.
 *
 * Rules (each one a constant or a test below):
 *  - Requests are rounded up to 512 bytes. Those up to SMALL_REQUEST_LIMIT (1 MiB) are
 *    served by the small pool, from 2 MiB segments; larger ones by the large pool. The
 *    pools never lend to each other, so small, short-lived tensors cannot cut up the
 *    blocks that large ones need.
 *  - The grain is fine on purpose. Tensors of one size carved one after another from a
 *    segment sit the rounded size apart, and some spacings are slow: a coarse grain
 *    such as 64 KiB puts tensors of 1e6 floats 0x3e0000 bytes apart, where an add over
 *    them is measurably slower than at their 512-byte spacing (docs/BENCHMARKS.md,
 *    `make bench-layout`). Which spacings are slow depends on how the machine maps
 *    addresses to cache slices and memory channels, which no allocator can know; a
 *    fine grain at least does not make round sizes rounder. Segments keep a 64 KiB
 *    grain (SEGMENT_GRAIN).
 *  - A request takes the smallest fitting free block of its pool (best fit; exact-size
 *    bins below 1 MiB, eight bins per power of two above).
 *  - Small-pool blocks are always split when the rest is at least 512 bytes.
 *    Large-pool blocks are split when the rest is itself a large block (over 1 MiB) and
 *    the block is at most max_split_bytes. A block above max_split_bytes is never split:
 *    it is handed out whole, and only to a request that is itself above max_split_bytes
 *    and leaves at most 20 MiB of it unused (PyTorch's rule). This is the fragmentation
 *    limit studied in the Flashlight paper (section 5.2): large blocks stay whole, for
 *    large requests, so that smaller tensors cannot pin them and, once free, they can
 *    go back to the system under a cache limit.
 *  - A new large segment is 20 MiB for requests under 10 MiB (so that several share
 *    it), else the request rounded up to 2 MiB; never above max_split_bytes unless the
 *    request itself is, so that new segments stay splittable.
 *  - Segments come from mmap, aligned to 2 MiB and marked for transparent huge pages
 *    (where the kernel offers them): a tensor of tens of megabytes then needs a few
 *    dozen TLB entries instead of thousands, which passes that stream from memory
 *    measure (docs/ARCHITECTURE.md, "The memory manager").
 *  - Freed blocks merge with free neighbours in their segment. A segment that is wholly
 *    free is "idle": idle segments go back to the system, oldest first, whenever cached
 *    bytes exceed cache_limit_bytes, on trim, and when the system refuses a new segment.
 *
 * One lock guards everything, since tensors are freed from data-loader threads as well
 * as the main one. It is a spinlock that yields the processor when it must wait long:
 * the critical sections are a few dozen instructions, and taking a pthread mutex costs
 * two atomic read-modify-writes where this costs one (a third of an alloc + free pair).
 */
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "flare/memory.h"
#include "flare/config.h"

/* Under AddressSanitizer, memory outside live blocks (free blocks, and each block's
 * rounding beyond the bytes asked for) is poisoned, so an overrun of a tensor is
 * reported even though its neighbours come from the same segment. */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POISON(c, p, n) ((c)->host ? ASAN_POISON_MEMORY_REGION(p, n) : (void)0)
#define UNPOISON(c, p, n) ((c)->host ? ASAN_UNPOISON_MEMORY_REGION(p, n) : (void)0)
#else
#define POISON(c, p, n) ((void)(c), (void)(p), (void)(n))
#define UNPOISON(c, p, n) ((void)(c), (void)(p), (void)(n))
#endif

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

#define GRAIN (512 * (size_t)1)
#define SMALL_REQUEST_LIMIT (1 * MiB)
#define SMALL_SEGMENT (2 * MiB)
#define SEGMENT_GRAIN (64 * KiB) /* a multiple of every page size */
#define LARGE_SEGMENT (20 * MiB)
#define LARGE_SHARED_BELOW (10 * MiB)
#define LARGE_ROUND (2 * MiB)
#define HUGE_PAGE (2 * MiB) /* x86-64's and arm64's (4 KiB granule) */

/* Bins: one per 512-byte size up to 1 MiB, then SUB_BINS per power of two. */
#define EXACT_BINS (SMALL_REQUEST_LIMIT / GRAIN)
#define SUB_BITS 3
#define SUB_BINS (1u << SUB_BITS)
#define FIRST_LOG 20 /* log2(SMALL_REQUEST_LIMIT) */
#define BIN_COUNT (EXACT_BINS + (64 - FIRST_LOG) * SUB_BINS)
#define BIN_WORDS ((BIN_COUNT + 63) / 64)
_Static_assert(BIN_WORDS <= 64, "one summary word must cover the bitmap");

typedef struct pool pool;

typedef struct block {
    char *ptr;
    size_t size;
    struct block *prev, *next;           /* neighbours in the segment, by address */
    struct block *free_prev, *free_next; /* the bin's list (or the spare list) */
    struct block *idle_prev, *idle_next; /* the idle-segment list, when a whole free segment */
    pool *pool;
    bool allocated;
} block;

struct pool {
    block *bins[BIN_COUNT];
    uint64_t nonempty[BIN_WORDS]; /* bit b: bins[b] has a block */
    uint64_t summary;             /* bit w: nonempty[w] != 0 */
};

/* Allocated blocks by address: open addressing, linear probing, backward-shift deletion. */
typedef struct slot {
    uintptr_t key;
    block *block;
} slot;

typedef struct block_chunk {
    struct block_chunk *next;
    block blocks[63];
} block_chunk;

typedef struct caching {
    bool locked;
    fl_memory_segments source; /* where segments come from */
    bool host;                 /* the segments are host memory (the default source) */
    size_t max_split, cache_limit;
    pool small, large;
    block *idle_first, *idle_last; /* whole free segments, oldest first */
    slot *table;
    size_t table_mask, table_count;
    block *spare;         /* recycled block records */
    block_chunk *chunks;  /* where block records live */
    size_t in_use, peak, cached, reserved;
    uint64_t allocations, frees, cache_hits, system_allocations;
} caching;

static void lock(caching *c)
{
    while (__atomic_exchange_n(&c->locked, true, __ATOMIC_ACQUIRE))
        for (int spins = 0; __atomic_load_n(&c->locked, __ATOMIC_RELAXED); spins++)
            if (spins >= 100)
                sched_yield(); /* the holder may have been preempted */
}

static void unlock(caching *c) { __atomic_store_n(&c->locked, false, __ATOMIC_RELEASE); }

static size_t round_up(size_t n, size_t grain) { return (n + grain - 1) / grain * grain; }

/* ---- bins ---- */

static unsigned bin_index(size_t size)
{
    if (size <= SMALL_REQUEST_LIMIT)
        return (unsigned)((size - 1) / GRAIN);
    unsigned log = 63u - (unsigned)__builtin_clzll(size);
    unsigned sub = (unsigned)(size >> (log - SUB_BITS)) & (SUB_BINS - 1);
    return (unsigned)EXACT_BINS + (log - FIRST_LOG) * SUB_BINS + sub;
}

/* The smallest size that bin_index maps to bin (a lower bound on its blocks). */
static size_t bin_floor(unsigned bin)
{
    if (bin < EXACT_BINS)
        return (bin + 1) * GRAIN;
    unsigned log = (bin - (unsigned)EXACT_BINS) / SUB_BINS + FIRST_LOG;
    unsigned sub = (bin - (unsigned)EXACT_BINS) % SUB_BINS;
    return (size_t)(SUB_BINS + sub) << (log - SUB_BITS);
}

/* The first non-empty bin at or after `from`, or BIN_COUNT. */
static unsigned next_nonempty(const pool *p, unsigned from)
{
    if (from >= BIN_COUNT)
        return BIN_COUNT;
    unsigned word = from / 64;
    uint64_t bits = p->nonempty[word] & (~(uint64_t)0 << (from % 64));
    if (!bits) {
        uint64_t words = word + 1 < 64 ? p->summary & (~(uint64_t)0 << (word + 1)) : 0;
        if (!words)
            return BIN_COUNT;
        word = (unsigned)__builtin_ctzll(words);
        bits = p->nonempty[word];
    }
    return word * 64 + (unsigned)__builtin_ctzll(bits);
}

static bool is_whole_segment(const block *b) { return !b->prev && !b->next; }

static void pool_insert(caching *c, block *b)
{
    pool *p = b->pool;
    unsigned bin = bin_index(b->size);
    b->free_prev = NULL;
    b->free_next = p->bins[bin];
    if (b->free_next)
        b->free_next->free_prev = b;
    p->bins[bin] = b;
    p->nonempty[bin / 64] |= (uint64_t)1 << (bin % 64);
    p->summary |= (uint64_t)1 << (bin / 64);
    if (is_whole_segment(b)) {
        b->idle_prev = c->idle_last;
        b->idle_next = NULL;
        *(c->idle_last ? &c->idle_last->idle_next : &c->idle_first) = b;
        c->idle_last = b;
    }
}

static void pool_remove(caching *c, block *b)
{
    pool *p = b->pool;
    unsigned bin = bin_index(b->size);
    if (b->free_next)
        b->free_next->free_prev = b->free_prev;
    if (b->free_prev)
        b->free_prev->free_next = b->free_next;
    else if (!(p->bins[bin] = b->free_next)) {
        p->nonempty[bin / 64] &= ~((uint64_t)1 << (bin % 64));
        if (!p->nonempty[bin / 64])
            p->summary &= ~((uint64_t)1 << (bin / 64));
    }
    if (is_whole_segment(b)) {
        *(b->idle_prev ? &b->idle_prev->idle_next : &c->idle_first) = b->idle_next;
        *(b->idle_next ? &b->idle_next->idle_prev : &c->idle_last) = b->idle_prev;
    }
}

/* How much of a block above the split limit a request may leave unused. */
static size_t whole_block_slack(size_t size, size_t max_split) { return size > max_split ? LARGE_SEGMENT : 0; }

static bool fits(const block *b, size_t size, size_t max_split)
{
    return b->size >= size && (b->size <= max_split || b->size - size <= whole_block_slack(size, max_split));
}

/* Takes the best-fitting usable free block out of the pool, or returns NULL. */
static block *pool_take(caching *c, pool *p, size_t size, size_t max_split)
{
    /* Past `reach` every block is both unsplittable and too big to hand out whole. */
    size_t whole = size + whole_block_slack(size, max_split);
    size_t reach = whole > max_split ? whole : max_split;
    for (unsigned bin = next_nonempty(p, bin_index(size)); bin < BIN_COUNT; bin = next_nonempty(p, bin + 1)) {
        if (bin_floor(bin) > reach)
            break;
        block *best = NULL;
        for (block *b = p->bins[bin]; b; b = b->free_next) {
            if (fits(b, size, max_split) && (!best || b->size < best->size)) {
                best = b;
                if (bin < EXACT_BINS || b->size == size)
                    break; /* nothing in this bin fits better */
            }
        }
        if (best) {
            pool_remove(c, best);
            return best;
        }
    }
    return NULL;
}

/* ---- block records ---- */

static block *record_new(caching *c)
{
    if (!c->spare) {
        block_chunk *chunk = malloc(sizeof *chunk);
        if (!chunk)
            return NULL;
        chunk->next = c->chunks;
        c->chunks = chunk;
        for (size_t i = 0; i < sizeof chunk->blocks / sizeof chunk->blocks[0]; i++) {
            chunk->blocks[i].free_next = c->spare;
            c->spare = &chunk->blocks[i];
        }
    }
    block *b = c->spare;
    c->spare = b->free_next;
    return b;
}

static void record_recycle(caching *c, block *b)
{
    b->free_next = c->spare;
    c->spare = b;
}

/* ---- the table of allocated blocks ---- */

static size_t table_home(const caching *c, uintptr_t key)
{
    return (size_t)(((key >> 6) * UINT64_C(0x9E3779B97F4A7C15)) >> 32) & c->table_mask;
}

static bool table_grow(caching *c)
{
    size_t capacity = c->table ? 2 * (c->table_mask + 1) : 256;
    slot *fresh = calloc(capacity, sizeof *fresh), *old = c->table;
    if (!fresh)
        return false;
    size_t old_capacity = old ? c->table_mask + 1 : 0;
    c->table = fresh;
    c->table_mask = capacity - 1;
    for (size_t i = 0; i < old_capacity; i++) {
        if (!old[i].key)
            continue;
        size_t j = table_home(c, old[i].key);
        while (fresh[j].key)
            j = (j + 1) & c->table_mask;
        fresh[j] = old[i];
    }
    free(old);
    return true;
}

/* Makes room for one more entry, so that the next table_insert cannot fail. */
static bool table_reserve(caching *c)
{
    return (c->table && 2 * (c->table_count + 1) <= c->table_mask + 1) || table_grow(c);
}

static void table_insert(caching *c, block *b)
{
    uintptr_t key = (uintptr_t)b->ptr;
    size_t i = table_home(c, key);
    while (c->table[i].key)
        i = (i + 1) & c->table_mask;
    c->table[i] = (slot){key, b};
    c->table_count++;
}

static block *table_remove(caching *c, const void *ptr)
{
    uintptr_t key = (uintptr_t)ptr;
    if (!c->table || !key)
        return NULL;
    size_t i = table_home(c, key);
    while (c->table[i].key != key) {
        if (!c->table[i].key)
            return NULL;
        i = (i + 1) & c->table_mask;
    }
    block *found = c->table[i].block;
    /* Backward shift: move later entries of the probe run into the hole. */
    for (size_t j = (i + 1) & c->table_mask; c->table[j].key; j = (j + 1) & c->table_mask) {
        size_t home = table_home(c, c->table[j].key);
        if (((j - home) & c->table_mask) >= ((j - i) & c->table_mask)) {
            c->table[i] = c->table[j];
            i = j;
        }
    }
    c->table[i] = (slot){0, NULL};
    c->table_count--;
    return found;
}

/* ---- segments ---- */

static size_t large_segment_size(size_t size, size_t max_split)
{
    if (size > max_split) /* handed out whole: room beyond the request would be wasted */
        return round_up(size, SEGMENT_GRAIN);
    size_t segment = size < LARGE_SHARED_BELOW ? LARGE_SEGMENT : round_up(size, LARGE_ROUND);
    if (segment > max_split) /* max_split is a multiple of SEGMENT_GRAIN (fl_memory_caching) */
        segment = max_split;
    return segment;
}

/* bytes of fresh memory at a HUGE_PAGE boundary, or NULL. Over-allocating by a huge
 * page and unmapping the ends costs only address space. bytes is a multiple of
 * SEGMENT_GRAIN, so of the page size. */
static void *system_map(void *user, size_t bytes)
{
    (void)user;
    size_t span = bytes + HUGE_PAGE;
    char *raw = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    char *memory = (char *)round_up((uintptr_t)raw, HUGE_PAGE);
    size_t head = (size_t)(memory - raw), tail = span - head - bytes;
    if (head)
        munmap(raw, head);
    if (tail)
        munmap(memory + bytes, tail);
#ifdef MADV_HUGEPAGE
    madvise(memory, bytes, MADV_HUGEPAGE); /* advice: without huge pages it still works */
#endif
    return memory;
}

static void system_unmap(void *user, void *memory, size_t bytes)
{
    (void)user;
    munmap(memory, bytes);
}

static void segment_release(caching *c, block *b)
{
    pool_remove(c, b);
    c->cached -= b->size;
    c->reserved -= b->size;
    UNPOISON(c, b->ptr, b->size); /* the addresses may come back from another mmap */
    c->source.unmap(c->source.user, b->ptr, b->size);
    record_recycle(c, b);
}

/* Returns idle segments to the system, oldest first, until cached <= limit. */
static void release_idle(caching *c, size_t limit)
{
    while (c->cached > limit && c->idle_first)
        segment_release(c, c->idle_first);
}

static block *segment_new(caching *c, pool *p, size_t bytes)
{
    block *b = record_new(c);
    if (!b)
        return NULL;
    char *memory = c->source.map(c->source.user, bytes);
    if (!memory) {
        release_idle(c, 0); /* what is cached may be what the system is missing */
        memory = c->source.map(c->source.user, bytes);
    }
    if (!memory) {
        record_recycle(c, b);
        return NULL;
    }
    POISON(c, memory, bytes);
    *b = (block){.ptr = memory, .size = bytes, .pool = p};
    c->reserved += bytes;
    c->system_allocations++;
    return b;
}

/* Cuts b down to size; the rest becomes a free block after it. */
static void split(caching *c, block *b, size_t size)
{
    block *rest = record_new(c);
    if (!rest)
        return; /* keep the whole block: wasteful but correct */
    *rest = (block){.ptr = b->ptr + size, .size = b->size - size, .prev = b, .next = b->next, .pool = b->pool};
    if (b->next)
        b->next->prev = rest;
    b->next = rest;
    b->size = size;
    pool_insert(c, rest);
    c->cached += rest->size;
}

static bool should_split(const caching *c, const block *b, size_t size)
{
    size_t rest = b->size - size;
    if (b->pool == &c->small)
        return rest >= GRAIN;
    return b->size <= c->max_split && rest > SMALL_REQUEST_LIMIT;
}

/* Absorbs next, the block after b, into b; neither may be in a pool. */
static void absorb_next(caching *c, block *b, block *next)
{
    b->size += next->size;
    b->next = next->next;
    if (b->next)
        b->next->prev = b;
    record_recycle(c, next);
}

/* ---- the manager ---- */

static void *caching_alloc(fl_memory_manager *m, size_t bytes)
{
    caching *c = m->state;
    if (bytes > SIZE_MAX / 2)
        return NULL; /* no system has it, and rounding would overflow */
    bool small = bytes <= SMALL_REQUEST_LIMIT;
    size_t size = round_up(bytes ? bytes : 1, GRAIN);
    lock(c);
    pool *p = small ? &c->small : &c->large;
    size_t max_split = small ? SIZE_MAX : c->max_split;
    block *b = NULL;
    if (table_reserve(c)) {
        b = pool_take(c, p, size, max_split);
        if (b) {
            c->cached -= b->size;
            c->cache_hits++;
        } else {
            b = segment_new(c, p, small ? SMALL_SEGMENT : large_segment_size(size, max_split));
        }
    }
    if (!b) {
        unlock(c);
        return NULL;
    }
    if (should_split(c, b, size))
        split(c, b, size);
    table_insert(c, b);
    b->allocated = true;
    c->in_use += b->size;
    if (c->in_use > c->peak)
        c->peak = c->in_use;
    c->allocations++;
    UNPOISON(c, b->ptr, bytes);
    unlock(c);
    return b->ptr;
}

static void caching_free(fl_memory_manager *m, void *ptr, size_t bytes)
{
    caching *c = m->state;
    lock(c);
    block *b = table_remove(c, ptr);
    if (!b) {
        unlock(c);
        fl_log_message(FL_LOG_ERROR, "caching memory manager: %p (%zu bytes) was not allocated by it; ignored", ptr, bytes);
        return;
    }
    b->allocated = false;
    POISON(c, b->ptr, b->size);
    c->in_use -= b->size;
    c->cached += b->size;
    c->frees++;
    if (b->next && !b->next->allocated) {
        pool_remove(c, b->next);
        absorb_next(c, b, b->next);
    }
    if (b->prev && !b->prev->allocated) {
        block *prev = b->prev;
        pool_remove(c, prev);
        absorb_next(c, prev, b);
        b = prev;
    }
    pool_insert(c, b);
    if (c->cached > c->cache_limit)
        release_idle(c, c->cache_limit);
    unlock(c);
}

static size_t largest_free_block(const pool *p)
{
    if (!p->summary)
        return 0;
    unsigned word = 63u - (unsigned)__builtin_clzll(p->summary);
    unsigned last = word * 64 + 63u - (unsigned)__builtin_clzll(p->nonempty[word]);
    size_t largest = 0;
    for (const block *b = p->bins[last]; b; b = b->free_next)
        largest = b->size > largest ? b->size : largest;
    return largest;
}

static void caching_stats(fl_memory_manager *m, fl_memory_stats *out)
{
    caching *c = m->state;
    lock(c);
    size_t small = largest_free_block(&c->small), large = largest_free_block(&c->large);
    size_t largest = small > large ? small : large;
    *out = (fl_memory_stats){
        .in_use = c->in_use,
        .peak_in_use = c->peak,
        .cached = c->cached,
        .reserved = c->reserved,
        .allocations = c->allocations,
        .frees = c->frees,
        .cache_hits = c->cache_hits,
        .system_allocations = c->system_allocations,
        .fragmentation = c->cached ? 1.0 - (double)largest / (double)c->cached : 0.0,
    };
    unlock(c);
}

static void caching_trim(fl_memory_manager *m)
{
    caching *c = m->state;
    lock(c);
    release_idle(c, 0);
    unlock(c);
}

static void caching_destroy(fl_memory_manager *m)
{
    caching *c = m->state;
    lock(c);
    release_idle(c, 0);
    size_t live = c->in_use;
    unlock(c);
    if (live) {
        /* Freeing the rest would pull memory from under live tensors; keeping the
         * manager lets their frees still land. */
        fl_log_message(FL_LOG_WARNING, "caching memory manager destroyed with %zu bytes in use; kept alive", live);
        return;
    }
    while (c->chunks) {
        block_chunk *next = c->chunks->next;
        free(c->chunks);
        c->chunks = next;
    }
    free(c->table);
    free(c);
    free(m);
}

fl_memory_manager *fl_memory_caching_over(const fl_memory_segments *source, const char *name,
                                          size_t max_split_bytes, size_t cache_limit_bytes)
{
    if (!source || !source->map || !source->unmap)
        return NULL;
    fl_memory_manager *m = malloc(sizeof *m);
    caching *c = calloc(1, sizeof *c);
    if (!m || !c) {
        free(m);
        free(c);
        return NULL;
    }
    c->source = *source;
    c->host = source->map == system_map;
    c->max_split = max_split_bytes / SEGMENT_GRAIN * SEGMENT_GRAIN; /* so a segment can be exactly that */
    c->cache_limit = cache_limit_bytes;
    *m = (fl_memory_manager){
        .version = FL_MEMORY_VERSION,
        .table_size = sizeof(fl_memory_manager),
        .name = name ? name : "caching",
        .state = c,
        .alloc = caching_alloc,
        .free = caching_free,
        .stats = caching_stats,
        .trim = caching_trim,
        .destroy = caching_destroy,
    };
    return m;
}

fl_memory_manager *fl_memory_caching(size_t max_split_bytes, size_t cache_limit_bytes)
{
    fl_memory_segments host = {.map = system_map, .unmap = system_unmap};
    return fl_memory_caching_over(&host, "caching", max_split_bytes, cache_limit_bytes);
}
