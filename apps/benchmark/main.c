/*
 * The model benchmark of the Flashlight paper (Table 3) in Flare: warm-up iterations,
 * then timed iterations of a training step (a batch of random data made in memory,
 * forward, backward, an SGD step with momentum), reporting seconds per iteration
 * (median and spread), samples per second, peak resident memory and the achieved
 * GFLOP/s as a fraction of the machine's sgemm peak. bench/torch/harness.py does the
 * same in PyTorch; bench/run_models.py runs both (make bench-models).
 *
 *     benchmark --model NAME [--size tiny|cpu|paper] [--batch B] [--warmup N] [--iters N]
 *               [--threads T] [--lr LR] [--seed S] [--peak-gflops G] [--json]
 *     benchmark --model NAME --train-check STEPS [--size tiny] ...
 *     benchmark --sgemm-peak [--threads T]
 *     benchmark --list
 *
 * --train-check trains on one fixed batch (memorizing it) and prints the loss as it
 * goes, failing unless the mean of the last five losses is under 3/4 of the first. --sgemm-peak prints the
 * GFLOP/s of a 2048^3 f32 matmul, the peak the fractions are taken of.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "flare/optim.h"
#include "models.h"

typedef struct options {
    const char *model;
    model_size size;
    int64_t batch;
    int warmup, iters, threads, train_check;
    double lr, momentum, peak_gflops;
    uint64_t seed;
    bool json, sgemm_peak, list;
} options;

static const char *const size_names[MODEL_SIZES] = {"tiny", "cpu", "paper"};

static void usage(FILE *out)
{
    fprintf(out, "usage: benchmark --model NAME [--size tiny|cpu|paper] [--batch B] [--warmup N] [--iters N]\n"
                 "                 [--threads T] [--lr LR] [--seed S] [--peak-gflops G] [--json]\n"
                 "       benchmark --model NAME --train-check STEPS [...]\n"
                 "       benchmark --sgemm-peak [--threads T]\n"
                 "       benchmark --list\n");
}

static bool parse_number(const char *flag, const char *text, double low, double high, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !(v >= low && v <= high)) {
        fprintf(stderr, "benchmark: %s wants a number in [%g, %g], not '%s'\n", flag, low, high, text);
        return false;
    }
    *out = v;
    return true;
}

static bool parse_args(int argc, char **argv, options *o)
{
    *o = (options){.size = MODEL_CPU, .warmup = 2, .iters = 10, .lr = 0.01, .momentum = 0.9, .seed = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        double v;
#define NUMBER(flag, low, high, target) \
    if (strcmp(a, flag) == 0) { \
        if (!value || !parse_number(flag, value, low, high, &v)) \
            return value ? false : (fprintf(stderr, "benchmark: %s needs a value\n", flag), false); \
        target = v; \
        i++; \
        continue; \
    }
        NUMBER("--batch", 1, 1 << 20, o->batch)
        NUMBER("--warmup", 0, 1000, o->warmup)
        NUMBER("--iters", 1, 100000, o->iters)
        NUMBER("--threads", 1, 1024, o->threads)
        NUMBER("--train-check", 1, 1e6, o->train_check)
        NUMBER("--lr", 0, 100, o->lr)
        NUMBER("--seed", 0, 1e15, o->seed)
        NUMBER("--peak-gflops", 1e-3, 1e9, o->peak_gflops)
#undef NUMBER
        if (strcmp(a, "--model") == 0 && value) {
            o->model = argv[++i];
        } else if (strcmp(a, "--size") == 0 && value) {
            int s = 0;
            while (s < MODEL_SIZES && strcmp(size_names[s], value) != 0)
                s++;
            if (s == MODEL_SIZES)
                return fprintf(stderr, "benchmark: --size is tiny, cpu or paper, not '%s'\n", value), false;
            o->size = (model_size)s;
            i++;
        } else if (strcmp(a, "--json") == 0) {
            o->json = true;
        } else if (strcmp(a, "--sgemm-peak") == 0) {
            o->sgemm_peak = true;
        } else if (strcmp(a, "--list") == 0) {
            o->list = true;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            exit(0);
        } else {
            fprintf(stderr, "benchmark: unknown argument or missing value: '%s'\n", a);
            usage(stderr);
            return false;
        }
    }
    if (!o->model && !o->sgemm_peak && !o->list)
        return fprintf(stderr, "benchmark: which model? (--model NAME; --list names them)\n"), false;
    return true;
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

/* The best of five 2048^3 f32 matmuls, in GFLOP/s, after one to warm up. */
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
        double seconds = now() - start;
        if (!c) {
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

/* The phases of one training step, in seconds. */
typedef struct step_times {
    double data, forward, backward, step, total;
} step_times;

/* One training step, in a scope of its own, on a fresh random batch or (fixed_input
 * not NULL) on the one given; *loss (if not NULL) receives the loss before the step. */
static fl_status train_step(const benchmark_model *bm, fl_module *model, fl_optimizer *opt, const options *o,
                            int64_t batch, const fl_tensor *fixed_input, const fl_tensor *fixed_target,
                            step_times *t, double *loss)
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
    if (status == FL_OK)
        status = fl_optimizer_step(opt);
    fl_optimizer_zero_grad(opt);
    double end = now();
    if (status == FL_OK && loss)
        *loss = fl_item(fl_v_value(l));
    fl_scope_end(scope);
    *t = (step_times){data_done - start, forward_done - data_done, backward_done - forward_done, end - backward_done,
                      end - start};
    return status;
}

static int fail(const char *what)
{
    fprintf(stderr, "benchmark: %s: %s\n", what, fl_last_error());
    return 1;
}

/* Memorizes one fixed batch: the mean loss of the last five steps must fall under
 * three quarters of the first (tests/test_models.c checks the same). */
static int train_check(const benchmark_model *bm, fl_module *model, fl_optimizer *opt, const options *o,
                       int64_t batch)
{
    fl_tensor *input, *target;
    fl_scope scope = fl_scope_begin();
    if (bm->make_batch(o->size, batch, &input, &target) != FL_OK)
        return fl_scope_end(scope), fail("making the batch");
    enum { LAST = 5 };
    double first = NAN, last = 0;
    int status = 0, tail = o->train_check < LAST ? o->train_check : LAST;
    for (int s = 0; s < o->train_check && status == 0; s++) {
        step_times t;
        double loss = NAN;
        if (train_step(bm, model, opt, o, batch, input, target, &t, &loss) != FL_OK)
            status = fail("training");
        if (s == 0)
            first = loss;
        if (s >= o->train_check - tail)
            last += loss / tail;
        if (status == 0 && (s % 10 == 0 || s == o->train_check - 1))
            printf("step %d: loss %.5f\n", s, loss);
    }
    fl_scope_end(scope);
    if (status)
        return status;
    bool decreased = last < 0.75 * first;
    printf("%s: loss %.5f -> %.5f (mean of the last %d) in %d steps: %s\n", bm->name, first, last, tail,
           o->train_check,
           decreased ? "decreasing" : "NOT decreasing");
    return decreased ? 0 : 1;
}

int main(int argc, char **argv)
{
    options o;
    if (!parse_args(argc, argv, &o))
        return 2;
    if (o.threads)
        fl_set_num_threads(o.threads);
    fl_manual_seed(o.seed);
    if (o.list) {
        for (int i = 0; benchmark_models[i]; i++)
            printf("%s\n", benchmark_models[i]->name);
        return 0;
    }
    if (o.sgemm_peak) {
        double peak = sgemm_peak();
        if (isnan(peak))
            return fail("the sgemm peak");
        printf(o.json ? "{\"sgemm_gflops\": %.2f, \"threads\": %d}\n" : "sgemm peak: %.2f GFLOP/s (%d threads)\n",
               peak, fl_num_threads());
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

    fl_module *model = bm->build(o.size);
    fl_parameters *params = model ? fl_module_parameters(model) : NULL;
    fl_optimizer *opt = params ? fl_sgd(params->items, params->count,
                                        &(fl_sgd_options){.lr = o.lr, .momentum = o.momentum})
                               : NULL;
    if (!opt)
        return fail("building the model");
    int64_t parameter_count = fl_module_parameter_count(model);
    if (!o.json)
        printf("%s (%s): %" PRId64 " parameters, batch %" PRId64 ", %d threads\n", bm->name, size_names[o.size],
               parameter_count, batch, fl_num_threads());

    int status = 0;
    if (o.train_check) {
        status = train_check(bm, model, opt, &o, batch);
    } else {
        double peak = o.peak_gflops ? o.peak_gflops : sgemm_peak();
        step_times *times = calloc((size_t)o.iters, sizeof *times);
        double *column = calloc((size_t)o.iters, sizeof *column);
        for (int i = 0; i < o.warmup + o.iters && status == 0; i++) {
            step_times t;
            if (train_step(bm, model, opt, &o, batch, NULL, NULL, &t, NULL) != FL_OK)
                status = fail("training");
            else if (i >= o.warmup)
                times[i - o.warmup] = t;
        }
        if (status == 0) {
            step_times med;
#define MEDIAN_OF(field) \
    do { \
        for (int i = 0; i < o.iters; i++) \
            column[i] = times[i].field; \
        med.field = median(column, o.iters); \
    } while (0)
            MEDIAN_OF(data);
            MEDIAN_OF(forward);
            MEDIAN_OF(backward);
            MEDIAN_OF(step);
            MEDIAN_OF(total); /* last: column stays sorted by total */
#undef MEDIAN_OF
            double fastest = column[0], slowest = column[o.iters - 1];
            double flops = bm->flops_per_sample(o.size) * (double)batch;
            double gflops = flops / med.total / 1e9;
            if (o.json) {
                printf("{\"name\": \"%s\", \"size\": \"%s\", \"params\": %" PRId64 ", \"batch\": %" PRId64
                       ", \"threads\": %d, \"warmup\": %d, \"iters\": %d, \"seconds\": %.6f, \"fastest\": %.6f, "
                       "\"slowest\": %.6f, \"data_s\": %.6f, \"forward_s\": %.6f, \"backward_s\": %.6f, "
                       "\"step_s\": %.6f, \"samples_per_s\": %.3f, \"peak_rss\": %" PRId64
                       ", \"flops_per_iter\": %.6g, \"gflops\": %.3f, \"sgemm_gflops\": %.3f, "
                       "\"peak_fraction\": %.4f}\n",
                       bm->name, size_names[o.size], parameter_count, batch, fl_num_threads(), o.warmup, o.iters,
                       med.total, fastest, slowest, med.data, med.forward, med.backward, med.step,
                       (double)batch / med.total, peak_rss(), flops, gflops, peak, gflops / peak);
            } else {
                printf("%d iterations after %d of warm-up: median %.4f s (fastest %.4f, slowest %.4f)\n", o.iters,
                       o.warmup, med.total, fastest, slowest);
                printf("  data %.4f s, forward %.4f s, backward %.4f s, optimizer %.4f s\n", med.data, med.forward,
                       med.backward, med.step);
                printf("  %.2f samples/s, peak RSS %.1f MiB, %.2f GFLOP/s = %.1f%% of the sgemm peak (%.2f)\n",
                       (double)batch / med.total, (double)peak_rss() / (1 << 20), gflops, 100 * gflops / peak, peak);
            }
        }
        free(times);
        free(column);
    }
    fl_optimizer_free(opt);
    fl_parameters_free(params);
    fl_module_release(model);
    return status;
}
