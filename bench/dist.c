/*
 * All-reduce through Flare against MPI itself, on the same bytes: Flare's fl_all_reduce
 * (a new result tensor, MPI_Iallreduce polled under the fault timeout) against a raw
 * MPI_Allreduce between preallocated buffers, and, to separate the cost of the
 * non-blocking form from Flare's own, a raw MPI_Iallreduce + MPI_Wait. Run under
 * mpirun (make bench-dist):
 *
 *     mpirun -np 2 build/bench_dist [--min-time 0.05] [--repeats 7] [--out FILE]
 *
 * Sizes go from 4 KB to 64 MB of f32. The three ways take turns batch by batch, so
 * that the machine's other load weighs on all alike; each batch runs at least
 * min-time seconds, and a row keeps the median batch (per all-reduce, slowest rank).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flare/distributed.h"
#include "cli.h"
#include "timing.h"

enum { FLARE, RAW_BLOCKING, RAW_NONBLOCKING, WAYS };
static const char *const way_names[WAYS] = {"flare", "mpi", "mpi_nonblocking"};

/* Seconds per all-reduce over a batch of iterations, the slowest rank's. */
static double batch(int way, fl_tensor *x, float *send, float *recv, int count, long iterations)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double start = bench_now();
    for (long i = 0; i < iterations; i++) {
        if (way == FLARE) {
            fl_tensor *y = fl_all_reduce(x, FL_DIST_SUM);
            if (!y) {
                fprintf(stderr, "bench_dist: %s\n", fl_last_error());
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            fl_release(y);
        } else if (way == RAW_BLOCKING) {
            MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        } else {
            MPI_Request request;
            MPI_Iallreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &request);
            MPI_Wait(&request, MPI_STATUS_IGNORE);
        }
    }
    double seconds = (bench_now() - start) / (double)iterations, slowest;
    MPI_Allreduce(&seconds, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest;
}

int main(int argc, char **argv)
{
    double min_time = 0.05;
    int repeats = 7;
    const char *out_path = NULL;
    static const struct option options[] = {
        {"min-time", required_argument, NULL, 'm'},
        {"repeats", required_argument, NULL, 'r'},
        {"out", required_argument, NULL, 'o'},
        {0},
    };
    cli c = {.program = "bench_dist", .usage = "mpirun -np N bench_dist [--min-time S] [--repeats N] [--out FILE]",
             .options = options};
    for (int key; (key = cli_next(&c, argc, argv)) != -1;)
        switch (key) {
        case 'm': min_time = cli_number(&c, 1e-6, 3600); break;
        case 'r': repeats = (int)cli_integer(&c, 1, 64); break;
        case 'o': out_path = optarg; break;
        }
    setvbuf(stdout, NULL, _IOLBF, 0); /* rows as they come, also into a pipe */
    if (fl_distributed_init("mpi") != FL_OK) {
        fprintf(stderr, "bench_dist: %s\n", fl_last_error());
        return 1;
    }
    int rank = fl_distributed_rank(), size = fl_distributed_size();
    FILE *out = NULL;
    if (rank == 0 && out_path && !(out = fopen(out_path, "w"))) {
        fprintf(stderr, "bench_dist: cannot write %s\n", out_path);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (out)
        fprintf(out, "{\n  \"ranks\": %d,\n  \"dtype\": \"f32\",\n  \"method\": {\"min_time_s\": %g, \"repeats\": %d, "
                     "\"statistic\": \"median\", \"order\": \"batch by batch, the three ways in turn\"},\n  \"rows\": [",
                size, min_time, repeats);
    if (rank == 0)
        printf("%-22s %12s %12s %12s %8s\n", "all_reduce (2 ranks)", "flare", "mpi", "mpi_nonblk", "ratio");

    for (int64_t bytes = 4 << 10; bytes <= 64 << 20; bytes *= 4) {
        int count = (int)(bytes / (int64_t)sizeof(float));
        fl_tensor *x = fl_full(rank + 1, FL_F32, 1, (int64_t[]){count});
        float *send = malloc((size_t)bytes), *recv = malloc((size_t)bytes);
        for (int i = 0; i < count; i++)
            send[i] = (float)(rank + 1);
        /* Warm up every way (pages, connections), and size the batches from the raw time. */
        for (int way = 0; way < WAYS; way++)
            batch(way, x, send, recv, count, 2);
        double once = batch(RAW_BLOCKING, x, send, recv, count, 3);
        long iterations = (long)(min_time / (once > 1e-7 ? once : 1e-7)) + 1;
        double times[WAYS][64];
        for (int r = 0; r < repeats; r++)
            for (int k = 0; k < WAYS; k++) {
                int way = (k + r) % WAYS;
                times[way][r] = batch(way, x, send, recv, count, iterations);
            }
        double median[WAYS], fastest[WAYS];
        for (int way = 0; way < WAYS; way++) {
            qsort(times[way], (size_t)repeats, sizeof(double), bench_compare_doubles);
            median[way] = times[way][repeats / 2];
            fastest[way] = times[way][0];
        }
        char name[64];
        if (bytes >= 1 << 20)
            snprintf(name, sizeof name, "all_reduce f32 %lld MB", (long long)(bytes >> 20));
        else
            snprintf(name, sizeof name, "all_reduce f32 %lld KB", (long long)(bytes >> 10));
        double ratio = median[FLARE] / median[RAW_BLOCKING];
        if (rank == 0)
            printf("%-22s %10.1f us %10.1f us %10.1f us %8.3f\n", name, 1e6 * median[FLARE], 1e6 * median[RAW_BLOCKING],
                   1e6 * median[RAW_NONBLOCKING], ratio);
        if (out) {
            fprintf(out, "%s\n    {\"name\": \"%s\", \"bytes\": %lld", bytes == 4 << 10 ? "" : ",", name, (long long)bytes);
            for (int way = 0; way < WAYS; way++)
                fprintf(out, ", \"%s_s\": %.9g, \"%s_fastest_s\": %.9g", way_names[way], median[way], way_names[way],
                        fastest[way]);
            fprintf(out, ", \"ratio\": %.4f, \"overhead_percent\": %.2f}", ratio, 100 * (ratio - 1));
        }
        fl_release(x);
        free(send);
        free(recv);
    }
    if (out) {
        fprintf(out, "\n  ]\n}\n");
        fclose(out);
        printf("wrote %s\n", out_path);
    }
    fl_distributed_shutdown();
    return 0;
}
