/*
 * Flare's memory-bound operations against the bare OpenMP loop a C programmer would
 * write for each: the same threads and the same memory manager, batch against batch in
 * one process; it prints the ratio and the bandwidth both reach. A ratio of about 1
 * says Flare's dispatch, allocation and kernel cost nothing over that loop; it does not
 * say that no loop can be faster. Both sides take their memory from the same manager,
 * so a layout that slows both is invisible here (docs/BENCHMARKS.md, "Where the data
 * lies": it once kept both behind PyTorch on add and mul).
 *
 *   bench_ceiling [--threads N] [--rounds R] [--min-time S]
 *
 * Rounds alternate which side goes first; each side's time is its median round.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flare/memory.h"
#include "flare/tensor.h"
#include "cli.h"
#include "timing.h"

/* The bare loops, on plain float arrays. Each allocates its result from the memory
 * manager and frees it, as the Flare operation does. */
typedef struct arrays {
    const float *x, *y;
    int64_t rows, cols; /* x is rows x cols (a vector: 1 x n); y, if used, the same */
} arrays;

static float *result(size_t count, fl_memory_manager **owner)
{
    return fl_memory_alloc(count * sizeof(float), owner);
}

/* z = x OP y over the whole vector. */
#define BARE_ELEMENTWISE(name, OP)                                            \
    static void name(const arrays *a)                                         \
    {                                                                         \
        fl_memory_manager *owner;                                             \
        int64_t n = a->rows * a->cols;                                        \
        float *restrict z = result((size_t)n, &owner);                        \
        if (!z)                                                               \
            return;                                                           \
        const float *restrict x = a->x, *restrict y = a->y;                   \
        int threads = fl_num_threads();                                       \
        _Pragma("omp parallel for num_threads(threads) schedule(static)")     \
        for (int64_t i = 0; i < n; i++)                                       \
            z[i] = x[i] OP y[i];                                              \
        fl_memory_free(owner, z, (size_t)n * sizeof(float));                  \
    }

BARE_ELEMENTWISE(bare_add, +)
BARE_ELEMENTWISE(bare_mul, *)

static void bare_row_sums(const arrays *a)
{
    fl_memory_manager *owner;
    float *z = result((size_t)a->rows, &owner);
    if (!z)
        return;
    int threads = fl_num_threads();
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < a->rows; r++) {
        const float *row = a->x + r * a->cols;
        float s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < a->cols; i++)
            s += row[i];
        z[r] = s;
    }
    fl_memory_free(owner, z, (size_t)a->rows * sizeof(float));
}

static fl_tensor *flare_add(fl_tensor *const *in) { return fl_add(in[0], in[1]); }
static fl_tensor *flare_mul(fl_tensor *const *in) { return fl_mul(in[0], in[1]); }
static fl_tensor *flare_row_sums(fl_tensor *const *in) { return fl_sum(in[0], FL_AXES(1), false); }

typedef struct ceiling_case {
    const char *name; /* as in bench/ops.c */
    fl_tensor *(*flare)(fl_tensor *const *in);
    void (*bare)(const arrays *a);
    int64_t rows, cols;
    int inputs;
    int bytes_per_element; /* moved to or from memory per element of x */
} ceiling_case;

static const ceiling_case cases[] = {
    {"add_1e6", flare_add, bare_add, 1, 1000000, 2, 12},
    {"mul_1e6", flare_mul, bare_mul, 1, 1000000, 2, 12},
    {"add_1e7", flare_add, bare_add, 1, 10000000, 2, 12},
    {"sum_dim1_4096x4096", flare_row_sums, bare_row_sums, 4096, 4096, 1, 4},
};

/* Seconds per operation over a batch of n; negative if Flare's operation failed. */
static double time_flare(const ceiling_case *c, fl_tensor *const *in, int64_t n)
{
    double start = bench_now();
    for (int64_t i = 0; i < n; i++) {
        fl_tensor *y = c->flare(in);
        if (!y)
            return -1;
        fl_release(y);
    }
    return (bench_now() - start) / (double)n;
}

static double time_bare(const ceiling_case *c, const arrays *a, int64_t n)
{
    double start = bench_now();
    for (int64_t i = 0; i < n; i++)
        c->bare(a);
    return (bench_now() - start) / (double)n;
}

/* A copy of t's values in memory from the manager, for the bare loop. */
static float *host_copy(const fl_tensor *t, size_t count, fl_memory_manager **owner)
{
    float *p = fl_memory_alloc(count * sizeof(float), owner);
    if (p && fl_to_host(t, p, count * sizeof(float)) != FL_OK) {
        fl_memory_free(*owner, p, count * sizeof(float));
        return NULL;
    }
    return p;
}

/* Times the case in paired rounds and prints its row; false if Flare's operation failed. */
static bool compare(const ceiling_case *c, fl_tensor *const *in, const arrays *a, int rounds, double min_time)
{
    /* The batch that takes min_time / rounds on Flare, after a warm-up of each side. */
    time_bare(c, a, 1);
    double t = time_flare(c, in, 1);
    if (t < 0)
        return false;
    int64_t n = 1;
    while ((t = time_flare(c, in, n)) >= 0 && t * (double)n < min_time / rounds / 10)
        n *= 10;
    if (t < 0)
        return false;
    n = (int64_t)ceil(min_time / rounds / t);

    double *times = malloc(3 * (size_t)rounds * sizeof *times);
    if (!times) {
        fprintf(stderr, "bench_ceiling: out of memory for %d rounds\n", rounds);
        return false;
    }
    double *flare = times, *bare = times + rounds, *ratio = times + 2 * rounds;
    int flare_faster = 0;
    for (int r = 0; r < rounds; r++) {
        if (r % 2 == 0) {
            flare[r] = time_flare(c, in, n);
            bare[r] = time_bare(c, a, n);
        } else {
            bare[r] = time_bare(c, a, n);
            flare[r] = time_flare(c, in, n);
        }
        if (flare[r] < 0) {
            free(times);
            return false;
        }
        ratio[r] = flare[r] / bare[r];
        flare_faster += ratio[r] < 1;
    }
    double f = bench_median(flare, rounds), b = bench_median(bare, rounds);
    double bytes = (double)(a->rows * a->cols) * c->bytes_per_element;
    printf("%-20s %9.1f us %9.1f us %10.3f %10.3f %6d of %-3d %7.0f %7.0f\n", c->name, f * 1e6, b * 1e6, f / b,
           bench_median(ratio, rounds), flare_faster, rounds, bytes / f * 1e-9, bytes / b * 1e-9);
    free(times);
    return true;
}

static int run_case(const ceiling_case *c, int rounds, double min_time)
{
    size_t count = (size_t)(c->rows * c->cols);
    fl_manual_seed(0);
    fl_tensor *in[2] = {NULL, NULL};
    float *copies[2] = {NULL, NULL};
    fl_memory_manager *owners[2] = {NULL, NULL};
    bool ready = true;
    for (int i = 0; i < c->inputs && ready; i++) {
        in[i] = c->rows == 1 ? fl_randn(FL_F32, 1, (int64_t[]){c->cols})
                             : fl_randn(FL_F32, 2, (int64_t[]){c->rows, c->cols});
        copies[i] = in[i] ? host_copy(in[i], count, &owners[i]) : NULL;
        ready = copies[i] != NULL;
    }
    arrays a = {copies[0], copies[1], c->rows, c->cols};
    bool ok = ready && compare(c, in, &a, rounds, min_time);
    if (!ok)
        fprintf(stderr, "bench_ceiling: %s: %s\n", c->name, fl_last_status() ? fl_last_error() : "out of memory");
    for (int i = 0; i < 2; i++) {
        fl_release(in[i]);
        if (copies[i])
            fl_memory_free(owners[i], copies[i], count * sizeof(float));
    }
    return !ok;
}

int main(int argc, char **argv)
{
    int rounds = 15;
    double min_time = 0.5;
    static const struct option options[] = {
        {"threads", required_argument, NULL, 't'},
        {"rounds", required_argument, NULL, 'r'},
        {"min-time", required_argument, NULL, 'm'},
        {0},
    };
    cli c = {.program = "bench_ceiling",
             .usage = "bench_ceiling [--threads N] [--rounds R (1-1000)] [--min-time SECONDS]",
             .options = options};
    for (int key; (key = cli_next(&c, argc, argv)) != -1;)
        switch (key) {
        case 't': fl_set_num_threads((int)cli_integer(&c, 1, 1024)); break;
        case 'r': rounds = (int)cli_integer(&c, 1, 1000); break;
        case 'm': min_time = cli_number(&c, 1e-3, 3600); break;
        }
    printf("%d threads, %d rounds; time per operation (median round) and bandwidth in GB/s\n\n", fl_num_threads(),
           rounds);
    printf("%-20s %12s %12s %10s %10s %12s %7s %7s\n", "case", "Flare", "bare loop", "ratio", "per round",
           "Flare faster", "Flare", "bare");
    int failed = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        failed |= run_case(&cases[i], rounds, min_time);
    return failed;
}
