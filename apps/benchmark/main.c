/*
 * The model benchmark of the Flashlight paper (Table 3) in Flare: warm-up iterations,
 * then timed iterations of a training step (a batch of random data made in memory,
 * forward, backward, an SGD step with momentum), reporting seconds per iteration
 * (median and spread), samples per second, peak resident memory and the achieved
 * GFLOP/s as a fraction of the machine's sgemm peak. bench/torch/harness.py does the
 * same in PyTorch; bench/run_models.py runs both (make bench-models).
 *
 *     benchmark --model NAME [--size tiny|cpu|paper] [--batch B] [--warmup N] [--iters N]
 *               [--threads T] [--lr LR] [--seed S] [--peak-gflops G] [--json] [--distributed]
 *               [--backend NAME]
 *     benchmark --model NAME --against BACKEND [...]
 *     benchmark --model NAME --serve [...]
 *     benchmark --model NAME --train-check STEPS [--size tiny] ...
 *     benchmark --sgemm-peak [--threads T]
 *     benchmark --list
 *
 * --backend NAME trains on that backend (FLARE_BACKEND's default otherwise).
 *
 * --against trains a second copy of the model (the same initial weights) on another
 * backend in the same process, alternating steps between the two (and which goes
 * first), and reports each one's times and, step by step, the ratio of the first's
 * time to the second's: both then run under the same load, which on a shared machine
 * drifts by more than the few percent two backends differ by (bench/run_lazy.py).
 *
 * --serve keeps the process running for a driver that alternates it with another
 * program (bench/run_models.py alternates it with PyTorch's harness): after the warm-up
 * it prints a JSON line, then answers each request line "steps N" by timing N training
 * steps and printing {"seconds": their median}; at the end of its input it prints the
 * usual JSON report over every step it timed. Both programs stay in memory, and their
 * batches of steps take turns, so a busy spell of a shared host weighs on both alike.
 *
 * --train-check trains on one fixed batch (memorizing it) and prints the loss as it
 * goes, failing unless the mean of the last five losses is under 3/4 of the first. --sgemm-peak prints the
 * GFLOP/s of a 2048^3 f32 matmul, the peak the fractions are taken of.
 *
 * --distributed trains data-parallel under mpirun (include/flare/distributed.h, as
 * apps/mnist does): rank 0's initial parameters are broadcast, every rank makes its own
 * random batch of B samples (so R x B per step), gradients are averaged across ranks
 * between backward and the optimizer's step (timed as "sync"), and an iteration's time
 * is the slowest rank's. The sgemm peak is the sum of the ranks' (each measures its
 * own, all at once, as they train; --peak-gflops gives one rank's). Only rank 0 prints.
 * At the end the ranks compare their parameters element by element and fail unless
 * all are identical, as data-parallel training promises (buffers such as batch norm's
 * running statistics stay each rank's own, as with PyTorch's
 * DistributedDataParallel(broadcast_buffers=False)).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "flare/backend.h"
#include "flare/distributed.h"
#include "flare/optim.h"
#include "flare/profile.h"
#include "cli.h"
#include "models.h"

typedef struct options {
    const char *model;
    const char *against; /* a second backend, trained alongside step for step */
    model_size size;
    int64_t batch;
    int warmup, iters, threads, train_check;
    double lr, momentum, peak_gflops;
    uint64_t seed;
    bool json, sgemm_peak, list, distributed, serve;
} options;

static const char *const size_names[MODEL_SIZES] = {"tiny", "cpu", "paper"};

static void parse_args(int argc, char **argv, options *o)
{
    *o = (options){.size = MODEL_CPU, .warmup = 2, .iters = 10, .lr = 0.01, .momentum = 0.9, .seed = 1};
    enum { MODEL = 256, AGAINST, SIZE, BATCH, WARMUP, ITERS, THREADS, TRAIN_CHECK, LR, SEED, PEAK_GFLOPS, JSON,
           SGEMM_PEAK, LIST, DISTRIBUTED, BACKEND, SERVE };
    static const struct option long_options[] = {
        {"model", required_argument, NULL, MODEL},
        {"against", required_argument, NULL, AGAINST},
        {"size", required_argument, NULL, SIZE},
        {"batch", required_argument, NULL, BATCH},
        {"warmup", required_argument, NULL, WARMUP},
        {"iters", required_argument, NULL, ITERS},
        {"threads", required_argument, NULL, THREADS},
        {"train-check", required_argument, NULL, TRAIN_CHECK},
        {"lr", required_argument, NULL, LR},
        {"seed", required_argument, NULL, SEED},
        {"peak-gflops", required_argument, NULL, PEAK_GFLOPS},
        {"json", no_argument, NULL, JSON},
        {"sgemm-peak", no_argument, NULL, SGEMM_PEAK},
        {"list", no_argument, NULL, LIST},
        {"distributed", no_argument, NULL, DISTRIBUTED},
        {"backend", required_argument, NULL, BACKEND},
        {"serve", no_argument, NULL, SERVE},
        {0},
    };
    cli c = {.program = "benchmark",
             .usage = "benchmark --model NAME [--size tiny|cpu|paper] [--batch B] [--warmup N] [--iters N]\n"
                      "                 [--threads T] [--lr LR] [--seed S] [--peak-gflops G] [--json] [--distributed]\n"
                      "                 [--backend NAME]\n"
                      "       benchmark --model NAME --against BACKEND [...]\n"
                      "       benchmark --model NAME --serve [...]\n"
                      "       benchmark --model NAME --train-check STEPS [...]\n"
                      "       benchmark --sgemm-peak [--threads T]\n"
                      "       benchmark --list\n"
                      "       " CLI_BACKEND_HELP,
             .options = long_options};
    for (int key; (key = cli_next(&c, argc, argv)) != -1;)
        switch (key) {
        case MODEL: o->model = optarg; break;
        case AGAINST: o->against = optarg; break;
        case SIZE: {
            int s = 0;
            while (s < MODEL_SIZES && strcmp(size_names[s], optarg) != 0)
                s++;
            if (s == MODEL_SIZES)
                cli_fail(&c, "--size is tiny, cpu or paper, not '%s'", optarg);
            o->size = (model_size)s;
            break;
        }
        case BATCH: o->batch = cli_integer(&c, 1, 1 << 20); break;
        case WARMUP: o->warmup = (int)cli_integer(&c, 0, 1000); break;
        case ITERS: o->iters = (int)cli_integer(&c, 1, 100000); break;
        case THREADS: o->threads = (int)cli_integer(&c, 1, 1024); break;
        case TRAIN_CHECK: o->train_check = (int)cli_integer(&c, 1, 1000000); break;
        case LR: o->lr = cli_number(&c, 0, 100); break;
        case SEED: o->seed = (uint64_t)cli_integer(&c, 0, (long long)1e15); break;
        case PEAK_GFLOPS: o->peak_gflops = cli_number(&c, 1e-3, 1e9); break;
        case JSON: o->json = true; break;
        case SGEMM_PEAK: o->sgemm_peak = true; break;
        case LIST: o->list = true; break;
        case DISTRIBUTED: o->distributed = true; break;
        case BACKEND: cli_backend(&c); break;
        case SERVE: o->serve = o->json = true; break;
        }
    if (!o->model && !o->sgemm_peak && !o->list)
        cli_fail(&c, "which model? (--model NAME; --list names them)");
    if (o->against && (o->distributed || o->train_check || o->serve))
        cli_fail(&c, "--against times training steps in one process; not with --%s",
                 o->distributed ? "distributed" : o->train_check ? "train-check" : "serve");
    if (o->serve && (o->distributed || o->train_check))
        cli_fail(&c, "--serve times training steps on request; not with --%s",
                 o->distributed ? "distributed" : "train-check");
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Bytes; Linux reports ru_maxrss in KiB. */
static int64_t peak_rss(void)
{
    struct rusage usage;
    return getrusage(RUSAGE_SELF, &usage) == 0 ? (int64_t)usage.ru_maxrss * 1024 : -1;
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *values, int count)
{
    qsort(values, (size_t)count, sizeof *values, compare_doubles);
    return count % 2 ? values[count / 2] : 0.5 * (values[count / 2 - 1] + values[count / 2]);
}

/* The best of five 2048^3 f32 matmuls, in GFLOP/s, after one to warm up. Each is timed
 * until one of its values is read: a backend that defers or enqueues its work (lazy,
 * opencl) has not done it when fl_matmul returns. */
static double sgemm_peak(void)
{
    enum { N = 2048, REPEATS = 5 };
    fl_scope scope = fl_scope_begin();
    fl_tensor *a = fl_randn(FL_F32, FL_SHAPE(N, N)), *b = fl_randn(FL_F32, FL_SHAPE(N, N));
    double best = INFINITY;
    for (int r = 0; r <= REPEATS; r++) {
        fl_scope inner = fl_scope_begin();
        double start = now();
        fl_tensor *c = fl_matmul(a, b);
        bool done = c && !isnan(fl_item(fl_index(c, FL_INDEX(FL_AT(0), FL_AT(0)))));
        double seconds = now() - start;
        if (!done) {
            best = NAN;
            r = REPEATS;
        } else if (r > 0 && seconds < best) {
            best = seconds;
        }
        fl_scope_end(inner);
    }
    fl_scope_end(scope);
    return 2.0 * N * N * N / best / 1e9;
}

/* The phases of one training step, in seconds; sync is the wait for the averaged
 * gradients (0 in one process). */
typedef struct step_times {
    double data, forward, backward, sync, step, total;
} step_times;

/* One training step, in a scope of its own, on a fresh random batch or (fixed_input
 * not NULL) on the one given; *loss (if not NULL) receives the loss before the step. */
static fl_status train_step(const benchmark_model *bm, fl_module *model, fl_optimizer *opt, fl_data_parallel *dp,
                            const options *o, int64_t batch, const fl_tensor *fixed_input,
                            const fl_tensor *fixed_target, step_times *t, double *loss)
{
    fl_scope scope = fl_scope_begin();
    double start = now();
    const fl_tensor *input = fixed_input, *target = fixed_target;
    fl_tensor *fresh_input, *fresh_target;
    fl_status status = FL_OK;
    if (!fixed_input) {
        status = bm->make_batch(o->size, batch, &fresh_input, &fresh_target);
        input = fresh_input;
        target = fresh_target;
    }
    double data_done = now();
    fl_variable *l = status == FL_OK ? bm->loss(model, input, target) : NULL;
    double forward_done = now();
    if (status == FL_OK)
        status = l ? fl_v_backward(l, NULL, false) : fl_last_status();
    double backward_done = now();
    if (status == FL_OK && dp)
        status = fl_data_parallel_sync(dp);
    double sync_done = now();
    if (status == FL_OK)
        status = fl_optimizer_step(opt);
    fl_optimizer_zero_grad(opt);
    double end = now();
    if (status == FL_OK && loss)
        *loss = fl_item(fl_v_value(l));
    fl_scope_end(scope);
    *t = (step_times){data_done - start,         forward_done - data_done, backward_done - forward_done,
                      sync_done - backward_done, end - sync_done,         end - start};
    return status;
}

static int fail(const char *what)
{
    if (fl_distributed_size() > 1)
        fprintf(stderr, "benchmark (rank %d): %s: %s\n", fl_distributed_rank(), what, fl_last_error());
    else
        fprintf(stderr, "benchmark: %s: %s\n", what, fl_last_error());
    return 1;
}

/* Memorizes one fixed batch: the mean loss of the last five steps must fall under
 * three quarters of the first (tests/test_models.c checks the same). */
static int train_check(const benchmark_model *bm, fl_module *model, fl_optimizer *opt, fl_data_parallel *dp,
                       const options *o, int64_t batch)
{
    fl_tensor *input, *target;
    fl_scope scope = fl_scope_begin();
    if (bm->make_batch(o->size, batch, &input, &target) != FL_OK)
        return fl_scope_end(scope), fail("making the batch");
    enum { LAST = 5 };
    bool leader = fl_distributed_rank() == 0;
    double first = NAN, last = 0;
    int status = 0, tail = o->train_check < LAST ? o->train_check : LAST;
    for (int s = 0; s < o->train_check && status == 0; s++) {
        step_times t;
        double loss = NAN;
        if (train_step(bm, model, opt, dp, o, batch, input, target, &t, &loss) != FL_OK)
            status = fail("training");
        if (s == 0)
            first = loss;
        if (s >= o->train_check - tail)
            last += loss / tail;
        if (status == 0 && leader && (s % 10 == 0 || s == o->train_check - 1))
            printf("step %d: loss %.5f\n", s, loss);
    }
    fl_scope_end(scope);
    if (status)
        return status;
    bool decreased = last < 0.75 * first;
    if (leader)
        printf("%s: loss %.5f -> %.5f (mean of the last %d) in %d steps: %s\n", bm->name, first, last, tail,
               o->train_check, decreased ? "decreasing" : "NOT decreasing");
    return decreased ? 0 : 1;
}

/* The slowest rank's time for each phase of each iteration, in place (a no-op in one
 * process): the ranks wait for each other in every sync, so the job runs at that pace. */
static fl_status slowest_rank_times(step_times *times, int iters)
{
    if (fl_distributed_size() == 1)
        return FL_OK;
    enum { PHASES = sizeof(step_times) / sizeof(double) };
    fl_scope scope = fl_scope_begin();
    fl_tensor *slowest = fl_all_reduce(fl_from_data(times, FL_F64, FL_SHAPE((int64_t)iters * PHASES)), FL_DIST_MAX);
    fl_status status = slowest ? fl_to_host(slowest, times, (size_t)iters * sizeof *times) : fl_last_status();
    fl_scope_end(scope);
    return status;
}

/* Data-parallel training keeps every rank's parameters identical, bit for bit (each
 * applies the same averaged gradient); true if they are. */
static bool ranks_agree(const fl_parameters *params, fl_status *status)
{
    fl_scope scope = fl_scope_begin();
    const fl_tensor **values = calloc(params->count, sizeof *values);
    fl_tensor **highest = calloc(params->count, sizeof *highest), **lowest = calloc(params->count, sizeof *lowest);
    *status = values && highest && lowest ? FL_OK : FL_ERR_MEMORY;
    for (size_t i = 0; *status == FL_OK && i < params->count; i++)
        values[i] = fl_v_value(params->items[i]);
    if (*status == FL_OK)
        *status = fl_all_reduce_many(values, (int)params->count, FL_DIST_MAX, 0, highest);
    if (*status == FL_OK)
        *status = fl_all_reduce_many(values, (int)params->count, FL_DIST_MIN, 0, lowest);
    bool agree = *status == FL_OK;
    for (size_t i = 0; agree && i < params->count; i++) {
        fl_tensor *same = fl_all(fl_eq(highest[i], lowest[i]), FL_ALL_AXES, false);
        agree = same && fl_item(same) != 0;
        if (!agree && fl_distributed_rank() == 0)
            fprintf(stderr, "benchmark: parameter %s differs between ranks\n", params->names[i]);
    }
    free(values);
    free(highest);
    free(lowest);
    fl_scope_end(scope);
    return agree;
}

/* A copy of the model in training on one backend, and its timed steps. */
typedef struct trainee {
    const char *backend;
    fl_module *model;
    fl_parameters *params;
    fl_optimizer *opt;
    step_times *times;
} trainee;

/* Builds the model on the named backend (made the default backend) from the seed, so
 * that every trainee starts from the same weights. */
static bool trainee_init(trainee *t, const benchmark_model *bm, const options *o, const char *backend)
{
    *t = (trainee){.backend = backend};
    if (fl_set_default_backend(backend) != FL_OK)
        return false;
    fl_manual_seed(o->seed);
    t->model = bm->build(o->size);
    t->params = t->model ? fl_module_parameters(t->model) : NULL;
    t->opt = t->params ? fl_sgd(t->params->items, t->params->count,
                                &(fl_sgd_options){.lr = o->lr, .momentum = o->momentum})
                       : NULL;
    t->times = calloc((size_t)o->iters, sizeof *t->times);
    return t->opt && t->times;
}

static void trainee_free(trainee *t)
{
    fl_optimizer_free(t->opt);
    fl_parameters_free(t->params);
    fl_module_release(t->model);
    free(t->times);
}

/* Prints one trainee's median step (and its phases), as text or a JSON line. */
static void report(const benchmark_model *bm, const options *o, const trainee *t, int count, int64_t batch,
                   int64_t parameter_count, double peak)
{
    int ranks = fl_distributed_size();
    double *column = calloc((size_t)o->iters, sizeof *column);
    if (!column) {
        fprintf(stderr, "benchmark: no memory to report %d steps\n", o->iters);
        return;
    }
    step_times med;
#define MEDIAN_OF(field) \
    do { \
        for (int i = 0; i < o->iters; i++) \
            column[i] = t->times[i].field; \
        med.field = median(column, o->iters); \
    } while (0)
    MEDIAN_OF(data);
    MEDIAN_OF(forward);
    MEDIAN_OF(backward);
    MEDIAN_OF(sync);
    MEDIAN_OF(step);
    MEDIAN_OF(total); /* last: column stays sorted by total */
#undef MEDIAN_OF
    double fastest = column[0], slowest = column[o->iters - 1];
    free(column);
    int64_t samples = batch * ranks;
    double flops = bm->flops_per_sample(o->size) * (double)samples;
    double gflops = flops / med.total / 1e9;
    if (o->json) {
        printf("{\"name\": \"%s\", \"backend\": \"%s\", \"size\": \"%s\", \"params\": %" PRId64 ", \"batch\": %" PRId64
               ", \"threads\": %d, \"ranks\": %d, \"warmup\": %d, \"iters\": %d, \"seconds\": %.6f, "
               "\"fastest\": %.6f, \"slowest\": %.6f, \"data_s\": %.6f, \"forward_s\": %.6f, "
               "\"backward_s\": %.6f, \"sync_s\": %.6f, \"step_s\": %.6f, \"samples_per_s\": %.3f, "
               "\"peak_rss\": %" PRId64 ", \"flops_per_iter\": %.6g, \"gflops\": %.3f, "
               "\"sgemm_gflops\": %.3f, \"peak_fraction\": %.4f}\n",
               bm->name, t->backend, size_names[o->size], parameter_count, batch, fl_num_threads(), ranks, o->warmup,
               o->iters, med.total, fastest, slowest, med.data, med.forward, med.backward, med.sync, med.step,
               (double)samples / med.total, peak_rss(), flops, gflops, peak, gflops / peak);
        return;
    }
    if (count > 1)
        printf("%s backend: ", t->backend);
    printf("%d iterations after %d of warm-up: median %.4f s (fastest %.4f, slowest %.4f)%s\n", o->iters, o->warmup,
           med.total, fastest, slowest, ranks > 1 ? ", the slowest rank's" : "");
    printf("  data %.4f s, forward %.4f s, backward %.4f s, ", med.data, med.forward, med.backward);
    if (o->distributed)
        printf("gradient sync %.4f s, ", med.sync);
    printf("optimizer %.4f s\n", med.step);
    printf("  %.2f samples/s, peak RSS %.1f MiB%s, %.2f GFLOP/s = %.1f%% of the sgemm peak (%.2f)\n",
           (double)samples / med.total, (double)peak_rss() / (1 << 20),
           ranks > 1 ? " (rank 0)" : count > 1 ? " (the process's)" : "", gflops, 100 * gflops / peak, peak);
}

/* With --against: each step's time on the first backend over the second's, their
 * median, and how many steps the second was faster in. */
static void report_pairs(const benchmark_model *bm, const options *o, const trainee *t)
{
    double *ratio = calloc((size_t)o->iters, sizeof *ratio), *sorted = calloc((size_t)o->iters, sizeof *sorted);
    if (!ratio || !sorted) {
        fprintf(stderr, "benchmark: no memory to compare %d steps\n", o->iters);
        free(ratio);
        free(sorted);
        return;
    }
    int faster = 0;
    for (int i = 0; i < o->iters; i++) {
        ratio[i] = sorted[i] = t[0].times[i].total / t[1].times[i].total;
        faster += ratio[i] > 1;
    }
    double mid = median(sorted, o->iters);
    if (o->json) {
        printf("{\"name\": \"%s\", \"pair\": [\"%s\", \"%s\"], \"median_ratio\": %.4f, \"second_faster\": %d, "
               "\"ratios\": [",
               bm->name, t[0].backend, t[1].backend, mid, faster);
        for (int i = 0; i < o->iters; i++)
            printf("%s%.4f", i ? ", " : "", ratio[i]);
        printf("]}\n");
    } else {
        printf("step by step, %s time / %s time: median %.3f; %s faster in %d of %d steps\n", t[0].backend,
               t[1].backend, mid, t[1].backend, faster, o->iters);
    }
    free(ratio);
    free(sorted);
}

/* The warm-up and o->iters timed steps of each trainee (alternating which goes first),
 * then the leader's report. */
static int timed_steps(const benchmark_model *bm, const options *o, trainee *trainees, int count,
                       fl_data_parallel *dp, int64_t batch, int64_t parameter_count, double peak)
{
    for (int i = 0; i < o->warmup + o->iters; i++) {
        if (i == o->warmup) { /* FLARE_PROFILE=1: profile the timed steps only */
            fl_profile_reset();
            fl_lazy_traffic_reset();
        }
        for (int k = 0; k < count; k++) {
            trainee *t = &trainees[(i + k) % count]; /* who goes first alternates */
            step_times times;
            fl_set_default_backend(t->backend);
            if (train_step(bm, t->model, t->opt, dp, o, batch, NULL, NULL, &times, NULL) != FL_OK)
                return fail("training");
            if (i >= o->warmup)
                t->times[i - o->warmup] = times;
        }
    }
    if (slowest_rank_times(trainees[0].times, o->iters) != FL_OK)
        return fail("gathering the ranks' times");
    if (fl_distributed_rank() != 0)
        return 0;
    for (int k = 0; k < count; k++)
        report(bm, o, &trainees[k], count, batch, parameter_count, peak);
    if (count == 2)
        report_pairs(bm, o, trainees);
    fl_lazy_traffic t = fl_lazy_traffic_get();
    if (t.passes > 0 && !o->json) /* the lazy backend: what its fused passes moved, a step's share */
        printf("  lazy fused passes: %.1f a step, %.1f MB read and %.1f MB written a step "
               "(%.1f and %.1f MB one operation at a time)\n",
               (double)t.passes / o->iters, t.fused_read / 1e6 / o->iters, t.fused_written / 1e6 / o->iters,
               t.unfused_read / 1e6 / o->iters, t.unfused_written / 1e6 / o->iters);
    return 0;
}

/* --serve: the warm-up, a JSON line to say it is done, then "steps N" requests until
 * the input ends, and the report over every step timed. */
static int serve(const benchmark_model *bm, options *o, trainee *t, int64_t batch, int64_t parameter_count,
                 double peak)
{
    enum { MOST_STEPS = 100000 };
    step_times warm;
    for (int i = 0; i < o->warmup; i++)
        if (train_step(bm, t->model, t->opt, NULL, o, batch, NULL, NULL, &warm, NULL) != FL_OK)
            return fail("training");
    fl_profile_reset(); /* FLARE_PROFILE=1: profile the timed steps only */
    printf("{\"name\": \"%s\", \"params\": %" PRId64 ", \"batch\": %" PRId64 ", \"threads\": %d, \"warmup\": %d}\n",
           bm->name, parameter_count, batch, fl_num_threads(), o->warmup);
    fflush(stdout);
    int timed = 0, capacity = o->iters;
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        int steps;
        char extra;
        if (sscanf(line, "steps %d %c", &steps, &extra) != 1 || steps < 1 || steps > MOST_STEPS - timed) {
            printf("{\"error\": \"expected a line 'steps N', N from 1 to %d\"}\n", MOST_STEPS - timed);
            fflush(stdout);
            continue;
        }
        double *totals = malloc((size_t)steps * sizeof *totals);
        if (timed + steps > capacity) {
            int grown = timed + steps > 2 * capacity ? timed + steps : 2 * capacity;
            step_times *more = realloc(t->times, (size_t)grown * sizeof *more);
            if (more) {
                t->times = more;
                capacity = grown;
            }
        }
        if (!totals || timed + steps > capacity) {
            free(totals);
            fprintf(stderr, "benchmark: no memory for the times of %d more steps\n", steps);
            return 1;
        }
        for (int k = 0; k < steps; k++) {
            if (train_step(bm, t->model, t->opt, NULL, o, batch, NULL, NULL, &t->times[timed + k], NULL) != FL_OK) {
                free(totals);
                return fail("training");
            }
            totals[k] = t->times[timed + k].total;
        }
        timed += steps;
        printf("{\"seconds\": %.6f, \"steps\": %d}\n", median(totals, steps), steps);
        fflush(stdout);
        free(totals);
    }
    if (timed == 0) {
        fprintf(stderr, "benchmark: --serve: the input ended before any 'steps N' request\n");
        return 1;
    }
    o->iters = timed;
    report(bm, o, t, 1, batch, parameter_count, peak);
    return 0;
}

int main(int argc, char **argv)
{
    options o;
    parse_args(argc, argv, &o);
    if (o.threads)
        fl_set_num_threads(o.threads);
    if (o.distributed && fl_distributed_init(NULL) != FL_OK)
        return fail("starting the distributed job");
    int rank = fl_distributed_rank(), ranks = fl_distributed_size();
    bool leader = rank == 0;
    fl_manual_seed(o.seed);
    if (o.list) {
        for (int i = 0; leader && benchmark_models[i]; i++)
            printf("%s\n", benchmark_models[i]->name);
        fl_distributed_shutdown();
        return 0;
    }
    if (o.sgemm_peak) {
        double peak = sgemm_peak();
        if (isnan(peak))
            return fail("the sgemm peak");
        if (leader)
            printf(o.json ? "{\"sgemm_gflops\": %.2f, \"threads\": %d}\n" : "sgemm peak: %.2f GFLOP/s (%d threads)\n",
                   peak, fl_num_threads());
        fl_distributed_shutdown();
        return 0;
    }
    const benchmark_model *bm = benchmark_model_find(o.model);
    if (!bm) {
        fprintf(stderr, "benchmark: no model '%s'; there are:", o.model);
        for (int i = 0; benchmark_models[i]; i++)
            fprintf(stderr, " %s", benchmark_models[i]->name);
        fprintf(stderr, "\n");
        return 2;
    }
    int64_t batch = o.batch ? o.batch : bm->batch[o.size];

    trainee trainees[2];
    int count = o.against ? 2 : 1;
    const char *backends[2] = {fl_default_backend()->name, o.against};
    for (int k = 0; k < count; k++)
        if (!trainee_init(&trainees[k], bm, &o, backends[k])) {
            for (int j = 0; j <= k; j++)
                trainee_free(&trainees[j]);
            return fail("building the model");
        }
    fl_module *model = trainees[0].model;
    fl_optimizer *opt = trainees[0].opt;
    /* Rank 0's parameters on every rank; then each rank draws its own batches. */
    fl_data_parallel *dp = NULL;
    if (o.distributed) {
        if (!(dp = fl_data_parallel_new(model, 0)))
            return fail("setting up data-parallel training");
        fl_manual_seed(o.seed + (uint64_t)rank);
    }
    int64_t parameter_count = fl_module_parameter_count(model);
    if (!o.json && leader) {
        printf("%s (%s): %" PRId64 " parameters, batch %" PRId64 ", %d threads", bm->name, size_names[o.size],
               parameter_count, batch, fl_num_threads());
        if (o.distributed)
            printf(", data-parallel over %d process%s (%" PRId64 " samples per step)", ranks, ranks > 1 ? "es" : "",
                   batch * ranks);
        if (o.against)
            printf(", on the %s and %s backends step by step", backends[0], backends[1]);
        else
            printf(", on the %s backend", backends[0]);
        printf("\n");
    }

    int status = 0;
    if (o.train_check) {
        status = train_check(bm, model, opt, dp, &o, batch);
    } else {
        /* Every rank measures its peak at once, as they will compute at once: the job's
         * peak is their sum, against the work of all ranks. */
        double peak = o.peak_gflops ? o.peak_gflops : sgemm_peak();
        if (ranks > 1) {
            fl_scope scope = fl_scope_begin();
            peak = fl_item(fl_all_reduce(fl_scalar(peak, FL_F64), FL_DIST_SUM));
            fl_scope_end(scope);
            if (isnan(peak))
                status = fail("adding up the ranks' peaks");
        }
        if (status == 0)
            status = o.serve ? serve(bm, &o, &trainees[0], batch, parameter_count, peak)
                             : timed_steps(bm, &o, trainees, count, dp, batch, parameter_count, peak);
    }
    if (status == 0 && o.distributed) {
        fl_status agreement;
        if (!ranks_agree(trainees[0].params, &agreement))
            status = agreement != FL_OK ? fail("comparing the ranks' parameters") : 1;
        else if (leader && !o.json && ranks > 1)
            printf("parameters identical on all %d ranks\n", ranks);
    }
    fl_data_parallel_free(dp);
    for (int k = 0; k < count; k++)
        trainee_free(&trainees[k]);
    fl_distributed_shutdown();
    return status;
}
