/*
 * How the spacing between tensors changes the speed of an operation on them: z = x + y
 * over arrays laid out at x, x + d and x + 2d, as a memory manager lays out three
 * tensors of one size carved one after another from a segment. Each spacing d gets a
 * region of its own from Flare's memory manager (so the huge pages the caching manager
 * asks for); the spacings' batches alternate in rounds, and each is reported as its
 * median per-round ratio to the first one's time. Repeating a spacing in the list shows
 * what its place (other physical memory) alone changes.
 *
 *   bench_layout [--threads N] [--rounds R] [--elements N] [SPACING ...]
 *
 * SPACING is in bytes, decimal or 0x hexadecimal, at least the array's size. The
 * default list compares 1e6 floats at the caching manager's 512-byte grain (0x3d0a00)
 * with its former 64 KiB grain (0x3e0000) and a 4 KiB one (0x3d1000).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flare/memory.h"
#include "flare/tensor.h"
#include "cli.h"
#include "timing.h"

#define MAX_LAYOUTS 16
#define BATCH_SECONDS 0.02

typedef struct layout {
    size_t spacing, bytes;
    char *region;
    fl_memory_manager *owner;
    double *times; /* seconds per operation, one per round */
} layout;

static void add(const layout *l, int64_t n, int threads)
{
    const float *restrict x = (const float *)l->region, *restrict y = (const float *)(l->region + l->spacing);
    float *restrict z = (float *)(l->region + 2 * l->spacing);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < n; i++)
        z[i] = x[i] + y[i];
}

static double time_batch(const layout *l, int64_t n, int threads, int64_t batch)
{
    double start = bench_now();
    for (int64_t i = 0; i < batch; i++)
        add(l, n, threads);
    return (bench_now() - start) / (double)batch;
}

int main(int argc, char **argv)
{
    int rounds = 41;
    int64_t elements = 1000000;
    layout layouts[MAX_LAYOUTS];
    int count = 0;
    static const struct option options[] = {
        {"threads", required_argument, NULL, 't'},
        {"rounds", required_argument, NULL, 'r'},
        {"elements", required_argument, NULL, 'e'},
        {0},
    };
    char usage[160];
    snprintf(usage, sizeof usage,
             "bench_layout [--threads N] [--rounds R (1-1000)] [--elements N] "
             "[SPACING (bytes, at least 4 * N) ...] (at most %d)",
             MAX_LAYOUTS);
    cli c = {.program = "bench_layout", .usage = usage, .options = options, .operands = MAX_LAYOUTS};
    for (int key; (key = cli_next(&c, argc, argv)) != -1;)
        switch (key) {
        case 't': fl_set_num_threads((int)cli_integer(&c, 1, 1024)); break;
        case 'r': rounds = (int)cli_integer(&c, 1, 1000); break;
        case 'e': elements = cli_integer(&c, 1, 1000000000); break;
        }
    for (; optind < argc; optind++)
        layouts[count++].spacing = (size_t)cli_integer_of(&c, "SPACING", argv[optind], 0, LLONG_MAX);
    if (count == 0) {
        const size_t defaults[] = {0x3d0a00, 0x3e0000, 0x3d1000, 0x3e0000, 0x3d0a00};
        for (; count < (int)(sizeof defaults / sizeof defaults[0]); count++)
            layouts[count].spacing = defaults[count];
    }
    size_t bytes = (size_t)elements * sizeof(float); /* elements <= 1e9 */
    for (int k = 0; k < count; k++) /* the region is 2d + bytes long */
        if (layouts[k].spacing < bytes || layouts[k].spacing > (SIZE_MAX - bytes) / 2)
            cli_fail(&c, "a spacing of %#zx does not fit %lld floats", layouts[k].spacing, (long long)elements);

    int threads = fl_num_threads();
    for (int k = 0; k < count; k++) {
        layout *l = &layouts[k];
        l->bytes = 2 * l->spacing + bytes;
        l->region = fl_memory_alloc(l->bytes, &l->owner);
        l->times = malloc((size_t)rounds * sizeof *l->times);
        if (!l->region || !l->times) {
            fprintf(stderr, "bench_layout: out of memory for spacing %#zx\n", l->spacing);
            return 1;
        }
        float *x = (float *)l->region, *y = (float *)(l->region + l->spacing);
        for (int64_t i = 0; i < elements; i++) {
            x[i] = (float)i;
            y[i] = 1.0f;
        }
        add(l, elements, threads); /* touches z */
    }
    int64_t batch = 1;
    for (double t = time_batch(&layouts[0], elements, threads, 1); t * (double)batch < BATCH_SECONDS;)
        batch *= 2;

    /* Round r starts at layout r mod count, and every other lap runs backwards, so that
     * no spacing always follows the same one. */
    for (int r = 0; r < rounds; r++)
        for (int j = 0; j < count; j++) {
            int k = (r + j) % count;
            if ((r / count) % 2)
                k = count - 1 - k;
            layouts[k].times[r] = time_batch(&layouts[k], elements, threads, batch);
        }

    printf("z = x + y over %lld floats at x, x + d, x + 2d; %d threads, %d rounds of %lld\n\n", (long long)elements,
           threads, rounds, (long long)batch);
    printf("%-12s %12s %14s\n", "spacing d", "time", "ratio to first");
    double *ratio = malloc((size_t)rounds * sizeof *ratio), ratio_median[MAX_LAYOUTS];
    if (!ratio) {
        fprintf(stderr, "bench_layout: out of memory\n");
        return 1;
    }
    for (int k = 0; k < count; k++) { /* before bench_median() sorts the times */
        for (int r = 0; r < rounds; r++)
            ratio[r] = layouts[k].times[r] / layouts[0].times[r];
        ratio_median[k] = bench_median(ratio, rounds);
    }
    free(ratio);
    for (int k = 0; k < count; k++)
        printf("%#-12zx %9.1f us %14.3f\n", layouts[k].spacing, bench_median(layouts[k].times, rounds) * 1e6,
               ratio_median[k]);
    for (int k = 0; k < count; k++) {
        fl_memory_free(layouts[k].owner, layouts[k].region, layouts[k].bytes);
        free(layouts[k].times);
    }
    return 0;
}
