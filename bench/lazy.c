/*
 * The lazy backend against the eager cpu backend, on memory-bound work where fusing
 * pays: gelu(x * w + b), a LayerNorm forward and one Adam update, written out as a
 * user would and as fl_adam's step. Every case is the same model code on both
 * backends (only the default backend changes); the timing includes materializing the
 * results (fl_eval), as reading them would.
 *
 *     bench_lazy [--repeats R]
 *
 * Prints one JSON line per case and backend: {"name", "backend", "seconds" (median),
 * "fastest"}, and for the lazy backend the memory traffic of one run, fused and as
 * the same operations would move it one at a time. bench/run_lazy.py runs this next
 * to PyTorch (bench/lazy_torch.py) and writes build/bench-lazy.json.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flare/autograd.h"
#include "flare/backend.h"
#include "flare/extension.h"
#include "flare/optim.h"
#include "flare/profile.h"
#include "flare/tensor.h"
#include "cli.h"
#include "timing.h"

/* 1e7 floats as rows of 1024 features. */
#define ROWS 9766
#define FEATURES 1024
#define PARAMETERS 10000000

/* ---- the cases: model code as a user writes it ---- */

typedef struct state {
    fl_tensor *x, *w, *b;       /* gelu and LayerNorm */
    fl_tensor *p, *g, *m, *v;   /* Adam */
    int step;
    fl_variable *param;         /* fl_adam's parameter, made by its first step */
    fl_optimizer *adam;
} state;

/* gelu with erf, as torch.nn.functional.gelu: 0.5 x (1 + erf(x / sqrt 2)). */
static fl_tensor *gelu(const fl_tensor *x)
{
    return fl_mul(fl_mul_scalar(x, 0.5), fl_add_scalar(fl_erf(fl_mul_scalar(x, M_SQRT1_2)), 1));
}

static fl_tensor *gelu_case(state *s)
{
    return gelu(fl_add(fl_mul(s->x, s->w), s->b));
}

static fl_tensor *layer_norm_case(state *s)
{
    const int last[] = {-1};
    fl_tensor *mean = fl_mean(s->x, last, 1, true);
    fl_tensor *centered = fl_sub(s->x, mean);
    fl_tensor *var = fl_mean(fl_mul(centered, centered), last, 1, true);
    fl_tensor *normalized = fl_mul(centered, fl_rsqrt(fl_add_scalar(var, 1e-5)));
    return fl_add(fl_mul(normalized, s->w), s->b);
}

/* torch.optim.Adam's update (no weight decay, not amsgrad), with bias correction. */
static fl_tensor *adam_case(state *s)
{
    const double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
    int t = ++s->step;
    fl_tensor *m = fl_add(fl_mul_scalar(s->m, beta1), fl_mul_scalar(s->g, 1 - beta1));
    fl_tensor *v = fl_add(fl_mul_scalar(s->v, beta2), fl_mul_scalar(fl_mul(s->g, s->g), 1 - beta2));
    double correction1 = 1 - pow(beta1, t), correction2 = 1 - pow(beta2, t);
    fl_tensor *denom = fl_add_scalar(fl_div_scalar(fl_sqrt(v), sqrt(correction2)), eps);
    fl_tensor *p = fl_sub(s->p, fl_mul_scalar(fl_div(m, denom), lr / correction1));
    /* The optimizer keeps the new state; the old is released. */
    fl_release(s->m);
    fl_release(s->v);
    fl_release(s->p);
    s->m = fl_keep(m);
    s->v = fl_keep(v);
    s->p = fl_keep(p);
    return p;
}

/* The same update through the optimizer: fl_adam over one parameter of 10M floats,
 * its gradient set, one step; the result is the parameter's new value. After the
 * first step the cpu backend writes the value and both moments in place
 * (backend.h, adam_update); the lazy backend fuses the composition. */
static fl_tensor *optimizer_case(state *s)
{
    if (!s->adam) {
        s->param = fl_v_keep(fl_v_new(s->p, true)); /* outlives the run's scope */
        s->adam = fl_adam(&s->param, 1, &(fl_adam_options){.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8});
    }
    if (!s->adam || fl_v_set_grad(s->param, s->g) != FL_OK || fl_optimizer_step(s->adam) != FL_OK)
        return NULL;
    return fl_out(fl_retain(fl_v_value(s->param)));
}

typedef struct bench_case {
    const char *name;
    fl_tensor *(*run)(state *);
} bench_case;

static const bench_case cases[] = {
    {"gelu(x*w+b) [9766,1024]", gelu_case},
    {"layer_norm [9766,1024]", layer_norm_case},
    {"adam step 10M", adam_case},
    {"fl_adam step 10M", optimizer_case},
};

static void setup(state *s, const char *backend)
{
    fl_set_default_backend(backend);
    fl_manual_seed(0);
    s->x = fl_randn(FL_F32, 2, (const int64_t[]){ROWS, FEATURES});
    s->w = fl_randn(FL_F32, 1, (const int64_t[]){FEATURES});
    s->b = fl_randn(FL_F32, 1, (const int64_t[]){FEATURES});
    s->p = fl_randn(FL_F32, 1, (const int64_t[]){PARAMETERS});
    s->g = fl_randn(FL_F32, 1, (const int64_t[]){PARAMETERS});
    s->m = fl_zeros(FL_F32, 1, (const int64_t[]){PARAMETERS});
    s->v = fl_zeros(FL_F32, 1, (const int64_t[]){PARAMETERS});
    fl_tensor *all[] = {s->x, s->w, s->b, s->p, s->g, s->m, s->v};
    for (int i = 0; i < 7; i++)
        fl_eval(all[i]);
    s->step = 0;
    s->param = NULL;
    s->adam = NULL;
}

static void teardown(state *s)
{
    fl_tensor *all[] = {s->x, s->w, s->b, s->p, s->g, s->m, s->v};
    for (int i = 0; i < 7; i++)
        fl_release(all[i]);
    fl_optimizer_free(s->adam);
    fl_v_release(s->param);
}

/* One timed run: the model code in a scope, then its results materialized. */
static double run_once(const bench_case *c, state *s)
{
    double start = bench_now();
    fl_scope scope = fl_scope_begin();
    fl_tensor *y = fl_keep(c->run(s));
    fl_scope_end(scope);
    fl_eval(y);
    if (s->step) { /* the optimizer's state is materialized too, as a training loop would */
        fl_eval(s->m);
        fl_eval(s->v);
    }
    double seconds = bench_now() - start;
    fl_release(y);
    return seconds;
}

int main(int argc, char **argv)
{
    int repeats = 10;
    static const struct option options[] = {{"repeats", required_argument, NULL, 'r'}, {0}};
    cli command = {.program = "bench_lazy", .usage = "bench_lazy [--repeats R]", .options = options};
    for (int key; (key = cli_next(&command, argc, argv)) != -1;)
        repeats = (int)cli_integer(&command, 1, 10000);
    const char *backends[] = {"cpu", "lazy"};
    double *times = malloc((size_t)repeats * sizeof *times);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int k = 0; k < 2; k++) {
            state s;
            setup(&s, backends[k]);
            run_once(&cases[c], &s); /* warm-up: first touch of the output buffers */
            fl_lazy_traffic_reset();
            for (int r = 0; r < repeats; r++)
                times[r] = run_once(&cases[c], &s);
            fl_lazy_traffic traffic = fl_lazy_traffic_get();
            if (fl_last_status() != FL_OK) {
                printf("{\"name\": \"%s\", \"backend\": \"%s\", \"seconds\": null, \"error\": \"%s\"}\n",
                       cases[c].name, backends[k], fl_last_error());
                fl_clear_error();
                teardown(&s);
                continue;
            }
            qsort(times, (size_t)repeats, sizeof *times, bench_compare_doubles);
            printf("{\"name\": \"%s\", \"backend\": \"%s\", \"seconds\": %.6g, \"fastest\": %.6g", cases[c].name,
                   backends[k], times[repeats / 2], times[0]);
            if (k == 1)
                printf(", \"traffic\": {\"fused_read\": %llu, \"fused_written\": %llu, \"unfused_read\": %llu, "
                       "\"unfused_written\": %llu, \"passes\": %llu, \"operations\": %llu}",
                       (unsigned long long)(traffic.fused_read / repeats),
                       (unsigned long long)(traffic.fused_written / repeats),
                       (unsigned long long)(traffic.unfused_read / repeats),
                       (unsigned long long)(traffic.unfused_written / repeats),
                       (unsigned long long)(traffic.passes / repeats),
                       (unsigned long long)(traffic.operations / repeats));
            printf("}\n");
            fflush(stdout);
            teardown(&s);
        }
    free(times);
    return 0;
}
