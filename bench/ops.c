/*
 * The operator benchmark, Flare's side. bench/ops_torch.py runs the same cases in
 * PyTorch with the same timing method, and bench/run_ops.py runs the two side by side
 * and prints the table (docs/BENCHMARKS.md explains the method).
 *
 *   bench_ops [--threads N] [--filter REGEX] [--min-time S] [--repeats R] [--list] [--serve]
 *
 * Each case prints one JSON line,
 *   {"name": "add_1e6", "seconds": 1.2e-04, "fastest": 1.1e-04, "iterations": 512, "repeats": 5}
 * where seconds is the median time of one operation over the repeats and fastest the
 * smallest; a case whose operation fails
 * prints "seconds": null and the error instead. With --serve the program first prints
 * {"cases": [...], "threads": N}, then answers requests on stdin (see answer()), so
 * that a driver can alternate its timed batches with PyTorch's one by one.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flare/tensor.h"
#include "cli.h"
#include "timing.h"

/* ---- the cases ---------------------------------------------------------------- */

static const fl_conv_params conv3x3 = {.padding = {1, 1}};
static const int64_t conv_x_shape[4] = {8, 64, 56, 56};
static const int64_t conv_w_shape[4] = {64, 64, 3, 3};
static const fl_pool_params maxpool2x2 = {.kind = FL_POOL_MAX, .kernel = {2, 2}, .stride = {2, 2}};

static fl_tensor *run_matmul(fl_tensor *const *in) { return fl_matmul(in[0], in[1]); }
/* A linear layer's product, x W^T with W [out, in] as the layer stores it. */
static fl_tensor *run_linear(fl_tensor *const *in)
{
    fl_tensor *w_t = fl_transpose(in[1], 0, 1), *y = fl_matmul(in[0], w_t);
    fl_release(w_t);
    return y;
}
/* A linear layer with its bias: x W^T + b in one call. */
static fl_tensor *run_linear_bias(fl_tensor *const *in) { return fl_linear(in[0], in[1], in[2]); }
/* A linear layer's weight gradient, dY^T x with dY [rows, out] and x [rows, in]. */
static fl_tensor *run_weight_grad(fl_tensor *const *in)
{
    fl_tensor *dy_t = fl_transpose(in[0], 0, 1), *dw = fl_matmul(dy_t, in[1]);
    fl_release(dy_t);
    return dw;
}
static fl_tensor *run_add(fl_tensor *const *in) { return fl_add(in[0], in[1]); }
static fl_tensor *run_mul(fl_tensor *const *in) { return fl_mul(in[0], in[1]); }
static fl_tensor *run_exp(fl_tensor *const *in) { return fl_exp(in[0]); }
static fl_tensor *run_sum_dim0(fl_tensor *const *in) { return fl_sum(in[0], FL_AXES(0), false); }
static fl_tensor *run_sum_dim1(fl_tensor *const *in) { return fl_sum(in[0], FL_AXES(1), false); }
static fl_tensor *run_softmax(fl_tensor *const *in) { return fl_softmax(in[0], -1); }
static fl_tensor *run_conv_forward(fl_tensor *const *in) { return fl_conv2d(in[0], in[1], &conv3x3); }

/* in: dy, weight */
static fl_tensor *run_conv_backward_input(fl_tensor *const *in)
{
    return fl_conv2d_backward_input(in[0], in[1], conv_x_shape, &conv3x3);
}

/* in: x, dy */
static fl_tensor *run_conv_backward_weight(fl_tensor *const *in)
{
    return fl_conv2d_backward_weight(in[0], in[1], conv_w_shape, &conv3x3);
}

static fl_tensor *run_pool_forward(fl_tensor *const *in) { return fl_pool2d(in[0], &maxpool2x2); }

/* in: dy, x. Flare's backward finds each window's maximum again from x; PyTorch's
 * reads the indices its forward saved (see ops_torch.py). */
static fl_tensor *run_pool_backward(fl_tensor *const *in) { return fl_pool2d_backward(in[0], in[1], &maxpool2x2); }

#define MAX_INPUTS 3

typedef struct input_shape {
    int ndim;
    int64_t dims[4];
} input_shape;

typedef struct bench_case {
    const char *name;
    fl_tensor *(*run)(fl_tensor *const *in); /* one operation; returns a new tensor */
    input_shape inputs[MAX_INPUTS];          /* N(0, 1) inputs; ndim 0 marks an absent one */
    int64_t iterations;                      /* a fixed loop count, or 0 to calibrate */
} bench_case;

/* A case whose inputs are the listed shapes. */
#define CASE(name_, run_, ...) {.name = name_, .run = run_, .inputs = {__VA_ARGS__}}
#define VECTOR(n) {1, {n}}
#define MATRIX(m, n) {2, {m, n}}
#define NCHW(n, c, h, w) {4, {n, c, h, w}}

static const bench_case cases[] = {
    CASE("sgemm_1024", run_matmul, MATRIX(1024, 1024), MATRIX(1024, 1024)),
    CASE("sgemm_2048", run_matmul, MATRIX(2048, 2048), MATRIX(2048, 2048)),
    /* x [rows, in] W^T, W [out, in]: a small layer's, a token's, a prompt's and a batch's
     * worth of rows; and x W with W stored [in, out], for the untransposed speed */
    CASE("linear_32x32x32", run_linear, MATRIX(32, 32), MATRIX(32, 32)),
    CASE("linear_8x512x2048", run_linear, MATRIX(8, 512), MATRIX(2048, 512)),
    CASE("linear_64x512x2048", run_linear, MATRIX(64, 512), MATRIX(2048, 512)),
    CASE("linear_64x2048x512", run_linear, MATRIX(64, 2048), MATRIX(512, 2048)),
    CASE("linear_1024x2048x512", run_linear, MATRIX(1024, 2048), MATRIX(512, 2048)),
    CASE("matmul_64x512x2048", run_matmul, MATRIX(64, 512), MATRIX(512, 2048)),
    CASE("matmul_64x2048x512", run_matmul, MATRIX(64, 2048), MATRIX(2048, 512)),
    CASE("matmul_1024x2048x512", run_matmul, MATRIX(1024, 2048), MATRIX(2048, 512)),
    /* the LSTM language model's (bench-models, 35 steps of 20): its head over 2000
     * words and a layer's gate projection, each forward and its input gradient */
    CASE("linear_700x256x2000", run_linear, MATRIX(700, 256), MATRIX(2000, 256)),
    CASE("linear_700x256x1024", run_linear, MATRIX(700, 256), MATRIX(1024, 256)),
    /* with the bias: the LSTM language model's head, and the GPT row's feed-forward
     * pair (8 sequences of 512 tokens, width 512) */
    CASE("linear_bias_700x256x2000", run_linear_bias, MATRIX(700, 256), MATRIX(2000, 256), VECTOR(2000)),
    CASE("linear_bias_4096x512x2048", run_linear_bias, MATRIX(4096, 512), MATRIX(2048, 512), VECTOR(2048)),
    CASE("linear_bias_4096x2048x512", run_linear_bias, MATRIX(4096, 2048), MATRIX(512, 2048), VECTOR(512)),
    CASE("matmul_700x2000x256", run_matmul, MATRIX(700, 2000), MATRIX(2000, 256)),
    CASE("matmul_700x1024x256", run_matmul, MATRIX(700, 1024), MATRIX(1024, 256)),
    /* dY^T x, named out x rows x in: the LSTM language model's gate weights and head
     * (35 steps of 20), the gates' with 1000 outputs (dY's rows not a multiple of 4
     * KiB apart), a transformer's attention projections (1024 tokens), and two that
     * stay with sgemm, fewer outputs than 512 and more inputs than 512 */
    CASE("weight_grad_1024x700x256", run_weight_grad, MATRIX(700, 1024), MATRIX(700, 256)),
    CASE("weight_grad_1000x700x256", run_weight_grad, MATRIX(700, 1000), MATRIX(700, 256)),
    CASE("weight_grad_2000x700x256", run_weight_grad, MATRIX(700, 2000), MATRIX(700, 256)),
    CASE("weight_grad_1536x1024x512", run_weight_grad, MATRIX(1024, 1536), MATRIX(1024, 512)),
    CASE("weight_grad_256x2048x256", run_weight_grad, MATRIX(2048, 256), MATRIX(2048, 256)),
    CASE("weight_grad_512x1024x2048", run_weight_grad, MATRIX(1024, 512), MATRIX(1024, 2048)),
    CASE("add_1e6", run_add, VECTOR(1000000), VECTOR(1000000)),
    CASE("add_1e7", run_add, VECTOR(10000000), VECTOR(10000000)),
    CASE("mul_1e6", run_mul, VECTOR(1000000), VECTOR(1000000)),
    CASE("mul_1e7", run_mul, VECTOR(10000000), VECTOR(10000000)),
    CASE("exp_1e6", run_exp, VECTOR(1000000)),
    CASE("exp_1e7", run_exp, VECTOR(10000000)),
    CASE("sum_dim1_4096x4096", run_sum_dim1, MATRIX(4096, 4096)),
    CASE("sum_dim0_4096x4096", run_sum_dim0, MATRIX(4096, 4096)),
    CASE("softmax_8192x1000", run_softmax, MATRIX(8192, 1000)),
    CASE("conv3x3_fwd_8x64x56x56", run_conv_forward, NCHW(8, 64, 56, 56), NCHW(64, 64, 3, 3)),
    CASE("conv3x3_bwd_input_8x64x56x56", run_conv_backward_input, NCHW(8, 64, 56, 56),
         NCHW(64, 64, 3, 3)),
    CASE("conv3x3_bwd_weight_8x64x56x56", run_conv_backward_weight,
         NCHW(8, 64, 56, 56), NCHW(8, 64, 56, 56)),
    CASE("maxpool2x2_fwd_8x64x112x112", run_pool_forward, NCHW(8, 64, 112, 112)),
    CASE("maxpool2x2_bwd_8x64x112x112", run_pool_backward, NCHW(8, 64, 56, 56),
         NCHW(8, 64, 112, 112)),
    /* The fixed cost of one operation: a result made and released around no work;
     * once calibrated as every case, once over a fixed million-iteration loop. */
    CASE("overhead_add_4", run_add, VECTOR(4), VECTOR(4)),
    {.name = "overhead_add_4_loop1e6", .run = run_add, .inputs = {VECTOR(4), VECTOR(4)}, .iterations = 1000000},
};

#define CASE_COUNT (int)(sizeof cases / sizeof cases[0])

/* ---- timing --------------------------------------------------------------------- */

typedef struct options {
    double min_time; /* seconds of timed runs per case, split into the repeats */
    int repeats;     /* timed batches; the result is their median */
} options;

/* Slow operations get fewer repeats (at least one) so that a case stays within this. */
#define MAX_CASE_TIME 4.0
#define MAX_REPEATS 1000

typedef struct measurement {
    double seconds; /* median time of one operation; NAN after an error */
    double fastest; /* the fastest repeat's time per operation */
    int64_t iterations;
    int repeats;
} measurement;

/* Runs the operation n times; returns the elapsed seconds, or -1 if it failed. */
static double time_batch(const bench_case *c, fl_tensor *const *in, int64_t n)
{
    double start = bench_now();
    for (int64_t i = 0; i < n; i++) {
        fl_tensor *y = c->run(in);
        bool failed = !y || fl_eval(y) != FL_OK;
        fl_release(y);
        if (failed)
            return -1;
    }
    return bench_now() - start;
}

/* A case's batch: iterations per timed batch, and how many batches to time. */
typedef struct plan {
    int64_t iterations;
    int repeats;
} plan;

/* One warm-up run; then a batch size n that takes min_time / repeats (grown until a
 * batch takes half of that, so that tiny operations are timed over many runs), and as
 * many repeats as fit in MAX_CASE_TIME. Returns false if the operation failed.
 * ops_torch.py plans exactly the same way. */
static bool plan_case(const bench_case *c, fl_tensor *const *in, const options *o, plan *p)
{
    if (time_batch(c, in, 1) < 0)
        return false;
    double batch_time = o->min_time / o->repeats;
    int64_t n = c->iterations;
    double t;
    if (n == 0) {
        n = 1;
        while ((t = time_batch(c, in, n)) < batch_time / 2) {
            if (t < 0)
                return false;
            n = t < batch_time / 100 ? 10 * n : (int64_t)ceil(n * batch_time / t);
        }
        double per_operation = t / (double)n;
        n = (int64_t)ceil(batch_time / per_operation);
        t = per_operation * (double)n;
    } else if ((t = time_batch(c, in, n)) < 0) {
        return false;
    }
    p->iterations = n;
    p->repeats = (int)fmax(1, fmin(o->repeats, floor(MAX_CASE_TIME / t)));
    return true;
}

/* The median over the planned repeats of the time per operation. */
static measurement measure(const bench_case *c, fl_tensor *const *in, const options *o)
{
    measurement m = {NAN, NAN, 0, 0};
    plan p;
    if (!plan_case(c, in, o, &p))
        return m;
    double *samples = malloc((size_t)p.repeats * sizeof *samples);
    if (!samples) {
        fprintf(stderr, "bench_ops: out of memory for %d repeats\n", p.repeats);
        return m;
    }
    for (int r = 0; r < p.repeats; r++) {
        double elapsed = time_batch(c, in, p.iterations);
        if (elapsed < 0) {
            free(samples);
            return m;
        }
        samples[r] = elapsed / (double)p.iterations;
    }
    m.seconds = bench_median(samples, p.repeats); /* sorts them */
    m.fastest = samples[0];
    free(samples);
    m.iterations = p.iterations;
    m.repeats = p.repeats;
    return m;
}

/* ---- output ------------------------------------------------------------------------ */

static void print_json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

static void print_error(const char *name, const char *message)
{
    printf("{\"name\": ");
    print_json_string(name);
    printf(", \"seconds\": null, \"error\": ");
    print_json_string(message);
    printf("}\n");
}

/* A case's N(0, 1) inputs, the same for every run of it (seed 0). */
/* false, with the error set, if an input could not be made (out of memory). */
static bool make_inputs(const bench_case *c, fl_tensor **in)
{
    fl_manual_seed(0);
    bool made = true;
    for (int i = 0; i < MAX_INPUTS; i++) {
        in[i] = c->inputs[i].ndim ? fl_randn(FL_F32, c->inputs[i].ndim, c->inputs[i].dims) : NULL;
        made &= in[i] || !c->inputs[i].ndim;
    }
    return made;
}

static void run_case(const bench_case *c, const options *o)
{
    fl_tensor *in[MAX_INPUTS];
    fl_clear_error();
    measurement m = make_inputs(c, in) ? measure(c, in, o) : (measurement){NAN, NAN, 0, 0};
    if (isnan(m.seconds)) {
        print_error(c->name, fl_last_error());
    } else {
        printf("{\"name\": ");
        print_json_string(c->name);
        printf(", \"seconds\": %.6e, \"fastest\": %.6e, \"iterations\": %lld, \"repeats\": %d}\n", m.seconds,
               m.fastest, (long long)m.iterations, m.repeats);
    }
    for (int i = 0; i < MAX_INPUTS; i++)
        fl_release(in[i]);
}

static const bench_case *find_case(const char *name)
{
    for (int i = 0; i < CASE_COUNT; i++)
        if (strcmp(cases[i].name, name) == 0)
            return &cases[i];
    return NULL;
}

/* One request of the serve protocol:
 *   plan NAME      -> {"name", "iterations", "repeats"}: the case's batch, planned
 *   time NAME N    -> {"name", "seconds"}: one batch of N runs, time per operation
 * A case's inputs are made once and kept until another case is named, so that a
 * driver can alternate single batches of the two programs. */
typedef struct loaded_case {
    const bench_case *c;
    fl_tensor *in[MAX_INPUTS];
} loaded_case;

static void unload(loaded_case *l)
{
    for (int i = 0; i < MAX_INPUTS; i++)
        fl_release(l->in[i]);
    *l = (loaded_case){0};
}

static void answer(const char *request, const options *o, loaded_case *l)
{
    char verb[8], name[128];
    long long n = 0;
    int end = 0; /* where the request's words ended: anything after them is an error */
    bool planning = sscanf(request, "plan %127s %n", name, &end) == 1 && request[end] == '\0';
    bool timing = !planning && sscanf(request, "%7s %127s %lld %n", verb, name, &n, &end) == 3 &&
                  strcmp(verb, "time") == 0 && n > 0 && request[end] == '\0';
    if (!planning && !timing) {
        print_error(request, "expected 'plan NAME' or 'time NAME ITERATIONS'");
        return;
    }
    const bench_case *c = find_case(name);
    if (!c) {
        print_error(name, "no such case");
        return;
    }
    fl_clear_error();
    if (c != l->c) {
        unload(l);
        if (!make_inputs(c, l->in)) {
            print_error(name, fl_last_error());
            unload(l);
            return;
        }
        l->c = c;
    }
    plan p;
    double elapsed = 0;
    if (planning ? !plan_case(c, l->in, o, &p) : (elapsed = time_batch(c, l->in, n)) < 0) {
        print_error(name, fl_last_error());
        return;
    }
    printf("{\"name\": ");
    print_json_string(name);
    if (planning)
        printf(", \"iterations\": %lld, \"repeats\": %d}\n", (long long)p.iterations, p.repeats);
    else
        printf(", \"seconds\": %.6e}\n", elapsed / (double)n);
}

/* Announces the selected cases, then answers the requests on stdin, one per line. */
static void serve(const bool *selected, const options *o)
{
    printf("{\"cases\": [");
    for (int i = 0, first = 1; i < CASE_COUNT; i++) {
        if (!selected[i])
            continue;
        printf(first ? "" : ", ");
        print_json_string(cases[i].name);
        first = 0;
    }
    printf("], \"threads\": %d}\n", fl_num_threads());
    fflush(stdout);

    loaded_case loaded = {0};
    char line[256];
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\r\n")] = '\0';
        answer(line, o, &loaded);
        fflush(stdout);
    }
    unload(&loaded);
}

int main(int argc, char **argv)
{
    options o = {.min_time = 0.3, .repeats = 5};
    const char *filter = NULL;
    bool list = false, serving = false;
    static const struct option long_options[] = {
        {"threads", required_argument, NULL, 't'},
        {"filter", required_argument, NULL, 'f'},
        {"min-time", required_argument, NULL, 'm'},
        {"repeats", required_argument, NULL, 'r'},
        {"list", no_argument, NULL, 'l'},
        {"serve", no_argument, NULL, 's'},
        {0},
    };
    cli c = {.program = "bench_ops",
             .usage = "bench_ops [--threads N] [--filter REGEX] [--min-time SECONDS] [--repeats R] [--list] [--serve]",
             .options = long_options};
    for (int key; (key = cli_next(&c, argc, argv)) != -1;)
        switch (key) {
        case 't': fl_set_num_threads((int)cli_integer(&c, 1, 1024)); break;
        case 'f': filter = optarg; break;
        case 'm': o.min_time = cli_number(&c, 1e-6, 3600); break;
        case 'r': o.repeats = (int)cli_integer(&c, 1, MAX_REPEATS); break;
        case 'l': list = true; break;
        case 's': serving = true; break;
        }

    bool selected[CASE_COUNT];
    regex_t pattern;
    if (filter && regcomp(&pattern, filter, REG_EXTENDED | REG_NOSUB) != 0) {
        cli_fail(&c, "bad --filter pattern '%s'", filter);
    }
    for (int i = 0; i < CASE_COUNT; i++)
        selected[i] = !filter || regexec(&pattern, cases[i].name, 0, NULL, 0) == 0;
    if (filter)
        regfree(&pattern);

    if (serving) {
        serve(selected, &o);
        return 0;
    }
    for (int i = 0; i < CASE_COUNT; i++) {
        if (!selected[i])
            continue;
        if (list)
            puts(cases[i].name);
        else
            run_case(&cases[i], &o);
        fflush(stdout);
    }
    return 0;
}
