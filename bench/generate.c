/*
 * KV-cached greedy generation with the GPT of models/gpt.c: the prompt fed at once
 * (prefill), then one token per step through the cache (decode), each timed apart.
 *
 *     bench_generate --weights FILE --prompt FILE [--batch N] [--new G] [--warmup W]
 *                    [--runs R] [--threads T] [--backend NAME]
 *
 * The weights are a state dict in safetensors (bench/generate_torch.py writes it from
 * PyTorch's twin of the model, bench/torch/gpt.py) whose metadata gives the
 * configuration (vocab, context, layers, heads, embed), so both sides run one model;
 * the prompt file holds "prompt", i64 [N', P], of which the first N rows are fed.
 * Each run makes a new cache, feeds the prompt and picks the first new token (the
 * prefill), then feeds each picked token for the remaining G - 1 (the decode); the
 * tokens are read back to the host every step, as a program printing them would. The
 * warm-up's tokens must equal gpt_generate's on the same prompt, so the loop timed is
 * the library's greedy decoding. Prints one JSON line: median prefill and decode
 * seconds, decode tokens per second (N (G - 1) / decode seconds) and the new tokens.
 * With FLARE_PROFILE=1 the profile printed at exit covers the timed runs only.
 * bench/run_generate.py runs it alternately with PyTorch and compares the tokens.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flare/extension.h"
#include "flare/io.h"
#include "flare/nn.h"
#include "flare/profile.h"
#include "flare/tensor.h"
#include "flare/tensor_map.h"
#include "cli.h"
#include "models.h"
#include "timing.h"

typedef struct options {
    const char *weights, *prompt;
    int64_t batch, new_tokens;
    int warmup, runs, threads;
} options;

static void parse_args(int argc, char **argv, options *o)
{
    *o = (options){.batch = 1, .new_tokens = 32, .warmup = 1, .runs = 3};
    enum { WEIGHTS = 256, PROMPT, BATCH, NEW, WARMUP, RUNS, THREADS, BACKEND };
    static const struct option long_options[] = {
        {"weights", required_argument, NULL, WEIGHTS}, {"prompt", required_argument, NULL, PROMPT},
        {"batch", required_argument, NULL, BATCH},     {"new", required_argument, NULL, NEW},
        {"warmup", required_argument, NULL, WARMUP},   {"runs", required_argument, NULL, RUNS},
        {"threads", required_argument, NULL, THREADS}, {"backend", required_argument, NULL, BACKEND},
        {0},
    };
    cli c = {.program = "bench_generate",
             .usage = "bench_generate --weights FILE --prompt FILE [--batch N] [--new G] [--warmup W] [--runs R]\n"
                      "                      [--threads T] [--backend NAME]\n"
                      "       " CLI_BACKEND_HELP,
             .options = long_options};
    for (int key; (key = cli_next(&c, argc, argv)) != -1;)
        switch (key) {
        case WEIGHTS: o->weights = optarg; break;
        case PROMPT: o->prompt = optarg; break;
        case BATCH: o->batch = cli_integer(&c, 1, 1 << 16); break;
        case NEW: o->new_tokens = cli_integer(&c, 1, 1 << 20); break;
        case WARMUP: o->warmup = (int)cli_integer(&c, 1, 1000); break;
        case RUNS: o->runs = (int)cli_integer(&c, 1, 1000); break;
        case THREADS: o->threads = (int)cli_integer(&c, 1, 1024); break;
        case BACKEND: cli_backend(&c); break;
        }
    if (!o->weights || !o->prompt)
        cli_fail(&c, "needs --weights FILE and --prompt FILE (bench/generate_torch.py --write writes them)");
}

static int fail(const char *what)
{
    fprintf(stderr, "bench_generate: %s: %s\n", what, fl_last_error());
    return 1;
}

/* A whole number of the weights' metadata, or -1 (and a message) if it is missing. */
static int64_t metadata_integer(const fl_tensor_map *map, const char *path, const char *key)
{
    const char *text = fl_tensor_map_metadata(map, key);
    char *end = NULL;
    long long value = text ? strtoll(text, &end, 10) : -1;
    if (!text || end == text || *end || value < 1) {
        fprintf(stderr, "bench_generate: %s: the metadata has no positive integer \"%s\" (got %s)\n", path, key,
                text ? text : "nothing");
        return -1;
    }
    return value;
}

/* The greedy next tokens of logits [N, V] as i64 [N, 1], copied into row-major ids
 * [N, stride] at column col. */
static fl_tensor *pick(const fl_tensor *logits, int64_t *ids, int64_t stride, int64_t col, int64_t *host)
{
    if (!logits)
        return NULL;
    int64_t n = fl_dim(logits, 0);
    fl_tensor *next = fl_reshape(fl_argmax(logits, 1, false), FL_SHAPE(n, 1));
    if (!next || fl_to_host(next, host, (size_t)n * sizeof *host) != FL_OK)
        return NULL;
    for (int64_t i = 0; i < n; i++)
        ids[i * stride + col] = host[i];
    return next;
}

/* One generation: the new tokens into ids [N, G], the two phases' seconds. */
static bool generate(fl_module *model, const fl_tensor *prompt, int64_t g, int64_t *ids, double *prefill,
                     double *decode)
{
    int64_t n = fl_dim(prompt, 0);
    int64_t *host = malloc((size_t)n * sizeof *host);
    gpt_cache *cache = host ? gpt_cache_new(model, n) : NULL;
    bool ok = cache != NULL;
    fl_scope outer = fl_scope_begin();
    double start = bench_now();
    fl_tensor *next = ok ? pick(gpt_cache_feed(cache, prompt), ids, g, 0, host) : NULL;
    double fed = bench_now();
    /* The step's token is the only tensor carried to the next step; a scope per step
     * frees the rest. */
    next = next ? fl_keep(next) : NULL;
    for (int64_t step = 1; step < g && next; step++) {
        fl_scope inner = fl_scope_begin();
        fl_tensor *following = pick(gpt_cache_feed(cache, next), ids, g, step, host);
        following = following ? fl_keep(following) : NULL;
        fl_scope_end(inner);
        fl_release(next);
        next = following;
    }
    double done = bench_now();
    ok = next != NULL;
    fl_release(next);
    fl_scope_end(outer);
    gpt_cache_free(cache);
    free(host);
    *prefill = fed - start;
    *decode = done - fed;
    return ok;
}

int main(int argc, char **argv)
{
    options o;
    parse_args(argc, argv, &o);
    if (o.threads)
        fl_set_num_threads(o.threads);

    fl_tensor_map *weights = NULL, *prompts = NULL;
    if (fl_load_safetensors(o.weights, &weights) != FL_OK)
        return fail("reading the weights");
    gpt_config config = {0};
    config.vocab = metadata_integer(weights, o.weights, "vocab");
    config.context = metadata_integer(weights, o.weights, "context");
    config.layers = metadata_integer(weights, o.weights, "layers");
    config.heads = metadata_integer(weights, o.weights, "heads");
    config.embed = metadata_integer(weights, o.weights, "embed");
    if (config.vocab < 0 || config.context < 0 || config.layers < 0 || config.heads < 0 || config.embed < 0)
        return 1;
    fl_module *model = gpt_new(&config);
    if (!model || fl_module_load_state_dict(model, weights, true) != FL_OK)
        return fail(o.weights);
    fl_tensor_map_free(weights);
    fl_module_train(model, false);

    if (fl_load_safetensors(o.prompt, &prompts) != FL_OK)
        return fail("reading the prompt");
    const fl_tensor *all = fl_tensor_map_get(prompts, "prompt");
    if (!all)
        return fail(o.prompt);
    if (fl_dtype_of(all) != FL_I64 || fl_ndim(all) != 2 || fl_dim(all, 0) < o.batch) {
        char d[FL_DESC_SIZE];
        fprintf(stderr, "bench_generate: %s: \"prompt\" must be i64 [N, P] with N >= --batch %" PRId64 ", got %s\n",
                o.prompt, o.batch, fl_describe(all, d));
        return 1;
    }
    int64_t p = fl_dim(all, 1), g = o.new_tokens, n = o.batch;
    /* Read onto the default backend (--backend); a contiguous tensor of its own. */
    fl_tensor *prompt = fl_keep(fl_copy(fl_index(all, FL_INDEX(FL_RANGE(0, n)))));
    fl_tensor_map_free(prompts);
    if (!prompt)
        return fail("the prompt");

    int64_t *ids = malloc((size_t)(n * g) * sizeof *ids), *expected = malloc((size_t)(n * (p + g)) * sizeof *ids);
    double *prefill = malloc((size_t)o.runs * sizeof *prefill), *decode = malloc((size_t)o.runs * sizeof *decode);
    if (!ids || !expected || !prefill || !decode)
        return fail("out of memory");
    double ignored[2];
    for (int i = 0; i < o.warmup; i++)
        if (!generate(model, prompt, g, ids, &ignored[0], &ignored[1]))
            return fail("generating");
    /* The loop timed is gpt_generate's greedy decoding: the same tokens. */
    fl_scope scope = fl_scope_begin();
    fl_tensor *whole = gpt_generate(model, prompt, g, &(gpt_sampling){.temperature = 0});
    if (!whole || fl_to_host(whole, expected, (size_t)(n * (p + g)) * sizeof *expected) != FL_OK)
        return fail("gpt_generate");
    fl_scope_end(scope);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < g; j++)
            if (ids[i * g + j] != expected[i * (p + g) + p + j]) {
                fprintf(stderr, "bench_generate: row %" PRId64 ", new token %" PRId64 ": the cache loop picked %" PRId64
                        ", gpt_generate %" PRId64 "\n", i, j, ids[i * g + j], expected[i * (p + g) + p + j]);
                return 1;
            }
    fl_profile_reset(); /* FLARE_PROFILE=1: the table covers the timed runs only */
    for (int i = 0; i < o.runs; i++)
        if (!generate(model, prompt, g, ids, &prefill[i], &decode[i]))
            return fail("generating");

    double prefill_s = bench_median(prefill, o.runs), decode_s = bench_median(decode, o.runs);
    printf("{\"backend\": \"%s\", \"threads\": %d, \"batch\": %" PRId64 ", \"prompt\": %" PRId64 ", \"new\": %" PRId64
           ", \"warmup\": %d, \"runs\": %d, \"prefill_s\": %.6f, \"decode_s\": %.6f, \"prefill_tok_s\": %.3f, "
           "\"decode_tok_s\": %.3f, \"tokens\": [",
           fl_backend_name(prompt), fl_num_threads(), n, p, g, o.warmup, o.runs, prefill_s, decode_s,
           (double)(n * p) / prefill_s, g > 1 ? (double)(n * (g - 1)) / decode_s : 0.0);
    for (int64_t i = 0; i < n; i++) {
        printf("%s[", i ? ", " : "");
        for (int64_t j = 0; j < g; j++)
            printf("%s%" PRId64, j ? ", " : "", ids[i * g + j]);
        printf("]");
    }
    printf("]}\n");
    free(ids);
    free(expected);
    free(prefill);
    free(decode);
    fl_release(prompt);
    fl_module_release(model);
    return 0;
}
