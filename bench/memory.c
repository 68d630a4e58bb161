/*
 * The cost of an uncontended alloc + free pair (a cache hit) in each memory manager,
 * next to glibc's malloc and aligned_alloc. Usage: bench_memory [BYTES [PAIRS]]
 */
#include <stdio.h>
#include <stdlib.h>

#include "flare/memory.h"
#include "cli.h"
#include "timing.h"

/* Keeps the compiler from dropping an allocation it can see is unused. */
static void use(void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

static double manager_pair_ns(fl_memory_manager *m, size_t bytes, long pairs)
{
    double start = bench_now();
    for (long i = 0; i < pairs; i++) {
        void *p = m->alloc(m, bytes);
        use(p);
        m->free(m, p, bytes);
    }
    return (bench_now() - start) / pairs * 1e9;
}

static double front_door_pair_ns(size_t bytes, long pairs)
{
    double start = bench_now();
    for (long i = 0; i < pairs; i++) {
        fl_memory_manager *owner;
        void *p = fl_memory_alloc(bytes, &owner);
        use(p);
        fl_memory_free(owner, p, bytes);
    }
    return (bench_now() - start) / pairs * 1e9;
}

static double malloc_pair_ns(size_t bytes, long pairs, int aligned)
{
    double start = bench_now();
    for (long i = 0; i < pairs; i++) {
        void *p = aligned ? aligned_alloc(FL_MEMORY_ALIGNMENT, (bytes + 63) & ~(size_t)63) : malloc(bytes);
        use(p);
        free(p);
    }
    return (bench_now() - start) / pairs * 1e9;
}

int main(int argc, char **argv)
{
    static const struct option options[] = {{0}};
    cli c = {.program = "bench_memory", .usage = "bench_memory [BYTES [PAIRS]]", .options = options, .operands = 2};
    while (cli_next(&c, argc, argv) != -1)
        ;
    size_t bytes = optind < argc ? (size_t)cli_integer_of(&c, "BYTES", argv[optind], 1, 1 << 30) : 16;
    long pairs = optind + 1 < argc ? (long)cli_integer_of(&c, "PAIRS", argv[optind + 1], 1, 1000000000) : 5000000;
    fl_memory_manager *caching = fl_memory_caching(SIZE_MAX, SIZE_MAX);
    fl_memory_set_manager(caching);
    for (int rep = 0; rep < 3; rep++)
        printf("%zu bytes, ns per alloc+free pair: caching %.1f  fl_memory_alloc/free (caching) %.1f  "
               "plain %.1f  malloc %.1f  aligned_alloc %.1f\n",
               bytes, manager_pair_ns(caching, bytes, pairs), front_door_pair_ns(bytes, pairs),
               manager_pair_ns(fl_memory_plain(), bytes, pairs), malloc_pair_ns(bytes, pairs, 0),
               malloc_pair_ns(bytes, pairs, 1));
    fl_memory_set_manager(fl_memory_plain());
    caching->destroy(caching);
    return 0;
}
