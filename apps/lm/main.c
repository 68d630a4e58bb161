/*
 * A GPT-style causal language model (models/gpt.c) trained on English text: by
 * default the fortunes of Debian's `fortunes` package (every file of
 * /usr/share/games/fortunes without an extension, in name order, the "%" lines that
 * separate the fortunes removed), or any text file given with --data.
 *
 *     lm [--data FILE] [--vocab N | --tokenizer tokenizer.json] [--context N] [--layers N]
 *        [--heads N] [--embed N] [--dropout P] [--epochs N] [--stop-after N] [--batch B]
 *        [--lr LR] [--train-limit N] [--seed S] [--threads T] [--json FILE] [--save FILE]
 *        [--load FILE] [--generate PROMPT] [--tokens N] [--temperature T] [--top-k K]
 *        [--top-p P] [--quiet] [--backend NAME]
 *
 * The text is tokenized by a byte-level BPE tokenizer learned from it (--vocab ids) or
 * read from a Hugging Face tokenizer.json, cut into windows of --context tokens side
 * by side, and the windows split once, from --seed, into 90% for training and 10% for
 * validation (fl_random_split). Training is AdamW with a cosine learning rate and the
 * gradient norm clipped to 1; each epoch reports the training and validation loss
 * (mean cross entropy per token, in nats) and perplexity (its exponential).
 *
 * --save writes a checkpoint after every epoch, holding the model's shape and a
 * fingerprint of the tokenizer in its metadata; --load resumes from one (its shape
 * replaces --context, --layers, --heads, --embed and --dropout) and trains on to
 * --epochs, or trains nothing when --epochs is not given, on the split of the seed it
 * was saved with (--seed then seeds the sampling alone), continuing exactly as if the
 * run had not stopped; --stop-after N ends a run after epoch N of --epochs, as an
 * interruption would. The tokenizer is not stored:
 * the same --data and --vocab learn it again (BPE training is deterministic), or the
 * same --tokenizer reads it; another one is refused. --generate PROMPT prints the
 * prompt continued by --tokens tokens (fewer if the context ends first), sampled with
 * --temperature, --top-k and --top-p from --seed (temperature 0: greedy).
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "flare/autograd.h"
#include "flare/backend.h"
#include "flare/data.h"
#include "flare/io.h"
#include "flare/meter.h"
#include "flare/nn.h"
#include "flare/optim.h"
#include "flare/tensor.h"
#include "flare/tensor_map.h"
#include "flare/text.h"
#include "cli.h"
#include "models.h"
#include "output.h"

#define FORTUNES_DIR "/usr/share/games/fortunes"
#define EVAL_BATCH 32

typedef struct options {
    const char *data, *tokenizer, *json, *save, *load, *prompt;
    int epochs, stop_after, threads;
    bool epochs_given, quiet;
    int64_t vocab, batch, train_limit, tokens, top_k;
    gpt_config model;
    double lr, temperature, top_p;
    uint64_t seed;
} options;

static void parse_args(int argc, char **argv, options *o)
{
    *o = (options){.vocab = 512, .epochs = 1, .batch = 16, .lr = 3e-3, .seed = 1, .tokens = 64, .temperature = 0.8,
                   .model = {.context = 64, .layers = 2, .heads = 4, .embed = 128, .dropout = 0.1}};
    enum { DATA = 256, TOKENIZER, VOCAB, CONTEXT, LAYERS, HEADS, EMBED, DROPOUT, EPOCHS, STOP_AFTER, BATCH, LR, TRAIN_LIMIT,
           SEED, THREADS, JSON, SAVE, LOAD, GENERATE, TOKENS, TEMPERATURE, TOP_K, TOP_P, QUIET, BACKEND };
    static const struct option long_options[] = {
        {"data", required_argument, NULL, DATA},
        {"tokenizer", required_argument, NULL, TOKENIZER},
        {"vocab", required_argument, NULL, VOCAB},
        {"context", required_argument, NULL, CONTEXT},
        {"layers", required_argument, NULL, LAYERS},
        {"heads", required_argument, NULL, HEADS},
        {"embed", required_argument, NULL, EMBED},
        {"dropout", required_argument, NULL, DROPOUT},
        {"epochs", required_argument, NULL, EPOCHS},
        {"stop-after", required_argument, NULL, STOP_AFTER},
        {"batch", required_argument, NULL, BATCH},
        {"lr", required_argument, NULL, LR},
        {"train-limit", required_argument, NULL, TRAIN_LIMIT},
        {"seed", required_argument, NULL, SEED},
        {"threads", required_argument, NULL, THREADS},
        {"json", required_argument, NULL, JSON},
        {"save", required_argument, NULL, SAVE},
        {"load", required_argument, NULL, LOAD},
        {"generate", required_argument, NULL, GENERATE},
        {"tokens", required_argument, NULL, TOKENS},
        {"temperature", required_argument, NULL, TEMPERATURE},
        {"top-k", required_argument, NULL, TOP_K},
        {"top-p", required_argument, NULL, TOP_P},
        {"quiet", no_argument, NULL, QUIET},
        {"backend", required_argument, NULL, BACKEND},
        {0},
    };
    cli c = {.program = "lm",
             .usage = "lm [--data FILE] [--vocab N | --tokenizer tokenizer.json] [--context N] [--layers N]\n"
                      "          [--heads N] [--embed N] [--dropout P] [--epochs N] [--stop-after N] [--batch B]\n"
                      "          [--lr LR] [--train-limit N] [--seed S] [--threads T] [--json FILE] [--save FILE]\n"
                      "          [--load FILE] [--generate PROMPT] [--tokens N] [--temperature T] [--top-k K]\n"
                      "          [--top-p P] [--quiet] [--backend NAME]\n"
                      "       --data FILE: the text to learn (default: the fortunes in " FORTUNES_DIR ")\n"
                      "       --train-limit N: train on at most N windows of --context tokens per epoch\n"
                      "       --load FILE: resume from a checkpoint; without --epochs, train nothing\n"
                      "       --stop-after N: end the run after epoch N of --epochs, as an interruption would\n"
                      "       " CLI_BACKEND_HELP,
             .options = long_options};
    bool vocab_given = false;
    for (int key; (key = cli_next(&c, argc, argv)) != -1;)
        switch (key) {
        case DATA: o->data = optarg; break;
        case TOKENIZER: o->tokenizer = optarg; break;
        case VOCAB: o->vocab = cli_integer(&c, 256, 1 << 20), vocab_given = true; break;
        case CONTEXT: o->model.context = cli_integer(&c, 1, 1 << 16); break;
        case LAYERS: o->model.layers = cli_integer(&c, 1, 256); break;
        case HEADS: o->model.heads = cli_integer(&c, 1, 256); break;
        case EMBED: o->model.embed = cli_integer(&c, 1, 1 << 16); break;
        case DROPOUT: o->model.dropout = cli_number(&c, 0, 0.99); break;
        case EPOCHS: o->epochs = (int)cli_integer(&c, 0, 100000), o->epochs_given = true; break;
        case STOP_AFTER: o->stop_after = (int)cli_integer(&c, 1, 100000); break;
        case BATCH: o->batch = cli_integer(&c, 1, 1 << 20); break;
        case LR: o->lr = cli_number(&c, 0, 100); break;
        case TRAIN_LIMIT: o->train_limit = cli_integer(&c, 1, (long long)1e12); break;
        case SEED: o->seed = (uint64_t)cli_integer(&c, 0, (long long)1e15); break;
        case THREADS: o->threads = (int)cli_integer(&c, 1, 1024); break;
        case JSON: o->json = optarg; break;
        case SAVE: o->save = optarg; break;
        case LOAD: o->load = optarg; break;
        case GENERATE: o->prompt = optarg; break;
        case TOKENS: o->tokens = cli_integer(&c, 0, 1 << 20); break;
        case TEMPERATURE: o->temperature = cli_number(&c, 0, 100); break;
        case TOP_K: o->top_k = cli_integer(&c, 0, 1 << 20); break;
        case TOP_P: o->top_p = cli_number(&c, 0, 1); break;
        case QUIET: o->quiet = true; break;
        case BACKEND: cli_backend(&c); break;
        }
    if (o->tokenizer && vocab_given)
        cli_fail(&c, "--vocab sizes a tokenizer learned from the text; --tokenizer reads one");
    if (o->model.embed % o->model.heads)
        cli_fail(&c, "--embed %" PRId64 " is not divisible by --heads %" PRId64, o->model.embed, o->model.heads);
    if (o->load && !o->epochs_given)
        o->epochs = 0;
}

/* ---- the corpus ---- */

typedef struct text {
    char *bytes;
    size_t size, capacity;
} text;

static bool text_append(text *t, const char *bytes, size_t size)
{
    if (t->size + size + 1 > t->capacity) {
        size_t capacity = t->capacity ? t->capacity : 1 << 16;
        while (capacity < t->size + size + 1)
            capacity *= 2;
        char *grown = realloc(t->bytes, capacity);
        if (!grown)
            return false;
        t->bytes = grown, t->capacity = capacity;
    }
    memcpy(t->bytes + t->size, bytes, size);
    t->size += size;
    t->bytes[t->size] = '\0';
    return true;
}

/* Appends the file at path; with fortune, without its "%" separator lines. */
static int read_file(const char *path, bool fortune, text *t)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return fprintf(stderr, "lm: cannot read %s: %s\n", path, strerror(errno)), 1;
    char *line = NULL;
    size_t capacity = 0;
    ssize_t n;
    int status = 0;
    while (status == 0 && (n = getline(&line, &capacity, f)) != -1)
        if (!(fortune && (strcmp(line, "%\n") == 0 || strcmp(line, "%") == 0)) && !text_append(t, line, (size_t)n))
            status = (fprintf(stderr, "lm: out of memory reading %s\n", path), 1);
    if (status == 0 && ferror(f))
        status = (fprintf(stderr, "lm: cannot read %s: %s\n", path, strerror(errno)), 1);
    free(line);
    fclose(f);
    return status;
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The fortune files: the regular files of FORTUNES_DIR without a '.' in their names
 * (the others are strfile's indexes and links to them). */
static int read_fortunes(text *t)
{
    DIR *dir = opendir(FORTUNES_DIR);
    if (!dir)
        return fprintf(stderr, "lm: cannot read %s: %s (make deps installs the fortunes package; or give --data FILE)\n",
                       FORTUNES_DIR, strerror(errno)),
               1;
    char **names = NULL;
    size_t count = 0;
    int status = 0;
    for (struct dirent *e; status == 0 && (e = readdir(dir));) {
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", FORTUNES_DIR, e->d_name);
        if (strchr(e->d_name, '.') || stat(path, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        char **grown = realloc(names, (count + 1) * sizeof *names);
        if (!grown || !(grown[count] = strdup(e->d_name)))
            status = (fprintf(stderr, "lm: out of memory\n"), 1);
        if (grown)
            names = grown, count += status == 0;
    }
    closedir(dir);
    if (names)
        qsort(names, count, sizeof *names, compare_names);
    for (size_t i = 0; i < count; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", FORTUNES_DIR, names[i]);
        if (status == 0)
            status = read_file(path, true, t);
        free(names[i]);
    }
    free(names);
    return status;
}

/* FNV-1a over every id's spelling: two tokenizers with the same fingerprint map text
 * to the same ids, in all likelihood. Printed as 16 hex digits. */
static void tokenizer_fingerprint(const fl_tokenizer *tok, char out[17])
{
    uint64_t h = 0xcbf29ce484222325u;
    for (int64_t id = 0; id < fl_tokenizer_vocab_size(tok); id++) {
        const char *s = fl_tokenizer_id_to_token(tok, id);
        for (const char *c = s ? s : ""; ; c++) {
            h = (h ^ (unsigned char)*c) * 0x100000001b3u;
            if (!*c)
                break;
        }
    }
    snprintf(out, 17, "%016" PRIx64, h);
}

/* ---- checkpoint metadata ---- */

/* The model's shape and epoch from a checkpoint that this program saved. */
static int read_checkpoint_header(const char *path, int epochs, gpt_config *config, int *epoch, char fingerprint[17],
                                  uint64_t *split_seed)
{
    fl_tensor_map *map = NULL;
    if (fl_load_safetensors(path, &map) != FL_OK)
        return fprintf(stderr, "lm: loading the checkpoint: %s\n", fl_last_error()), 1;
    int64_t e = 0, seed = 0;
    const char *dropout = fl_tensor_map_metadata(map, "dropout");
    const char *fp = fl_tensor_map_metadata(map, "tokenizer");
    char *end = NULL;
    double p = dropout ? strtod(dropout, &end) : -1;
    bool ok = cli_metadata_integer(map, "vocab", 1, 1 << 20, &config->vocab) &&
              cli_metadata_integer(map, "context", 1, 1 << 16, &config->context) &&
              cli_metadata_integer(map, "layers", 1, 256, &config->layers) &&
              cli_metadata_integer(map, "heads", 1, 256, &config->heads) &&
              cli_metadata_integer(map, "embed", 1, 1 << 16, &config->embed) &&
              cli_metadata_integer(map, "epoch", 0, 100000, &e) &&
              cli_metadata_integer(map, "seed", 0, (int64_t)1e15, &seed) &&
              dropout && *dropout && !*end && p >= 0 && p < 1 && fp && strlen(fp) == 16;
    if (ok) {
        config->dropout = p;
        *split_seed = (uint64_t)seed;
        memcpy(fingerprint, fp, 17);
    }
    fl_tensor_map_free(map);
    if (!ok)
        return fprintf(stderr,
                       "lm: %s: not a checkpoint of lm (its metadata lacks a valid vocab, context, layers, heads, "
                       "embed, dropout, tokenizer, seed or epoch)\n",
                       path),
               1;
    if (e > epochs && epochs > 0)
        return fprintf(stderr, "lm: %s was saved after epoch %" PRId64 ", past --epochs %d\n", path, e, epochs), 1;
    *epoch = (int)e;
    return 0;
}

/* ---- evaluation ---- */

/* Mean cross entropy per token of logits [N, L, V] against targets [N, L]. */
static fl_variable *lm_loss(fl_module *model, const fl_sample *s)
{
    int64_t n = fl_dim(s->fields[0], 0) * fl_dim(s->fields[0], 1);
    fl_variable *logits = fl_module_forward(model, fl_v_new(s->fields[0], false));
    if (!logits)
        return NULL;
    int64_t vocab = fl_dim(fl_v_value(logits), 2);
    return fl_nn_cross_entropy(fl_v_reshape(logits, 2, (int64_t[]){n, vocab}), fl_reshape(s->fields[1], 1, &n),
                               NULL);
}

static fl_status evaluate(fl_module *model, fl_dataset *data, double *loss)
{
    fl_average_meter meter = {0};
    fl_module_train(model, false);
    bool was = fl_set_grad_enabled(false);
    fl_status status = FL_OK;
    for (int64_t b = 0; status == FL_OK && b < fl_dataset_size(data); b++) {
        fl_scope scope = fl_scope_begin();
        fl_sample s;
        status = fl_dataset_get(data, b, &s);
        fl_variable *l = status == FL_OK ? lm_loss(model, &s) : NULL;
        if (status == FL_OK && !l)
            status = fl_last_status();
        if (status == FL_OK)
            fl_average_meter_add(&meter, fl_item(fl_v_value(l)), (double)fl_numel(s.fields[1]));
        fl_scope_end(scope);
    }
    fl_set_grad_enabled(was);
    fl_module_train(model, true);
    *loss = fl_average_meter_value(&meter);
    return status;
}

/* ---- progress and results ---- */

typedef struct epoch_result {
    double seconds, train_loss, val_loss, tokens_per_second;
} epoch_result;

/* The length of the valid UTF-8 character at c (1 to 4), or 0 if it is not one. */
static int utf8_length(const unsigned char *c)
{
    int n = *c < 0x80 ? 1 : *c >= 0xc2 && *c <= 0xdf ? 2 : *c >= 0xe0 && *c <= 0xef ? 3 : *c >= 0xf0 && *c <= 0xf4 ? 4 : 0;
    /* Overlong forms, surrogates and code points past U+10FFFF. */
    if ((*c == 0xe0 && c[1] < 0xa0) || (*c == 0xed && c[1] >= 0xa0) || (*c == 0xf0 && c[1] < 0x90) ||
        (*c == 0xf4 && c[1] >= 0x90))
        return 0;
    for (int i = 1; i < n; i++)
        if ((c[i] & 0xc0) != 0x80)
            return 0;
    return n;
}

/* s as a JSON string. A sampled text may hold bytes that are not UTF-8 (a character
 * cut between tokens); each becomes U+FFFD, so that the file stays valid JSON. */
static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)s; *c;) {
        int n = utf8_length(c);
        if (n == 0)
            fputs("\\ufffd", f);
        else if (*c == '"' || *c == '\\')
            fprintf(f, "\\%c", *c);
        else if (*c < 0x20)
            fprintf(f, "\\u%04x", *c);
        else
            fwrite(c, 1, (size_t)n, f);
        c += n ? n : 1;
    }
    fputc('"', f);
}

typedef struct run_info {
    gpt_config config;
    int64_t parameters, train_windows, val_windows;
    const char *sample; /* NULL without --generate */
} run_info;

/* Writes the metrics as JSON, atomically (output.h). */
static int write_json(const options *o, const run_info *info, const epoch_result *epochs, int first, int count)
{
    output_file out;
    if (!output_open(&out, "lm", o->json))
        return 1;
    FILE *f = out.f;
    fprintf(f, "{\n  \"data\": ");
    json_string(f, o->data ? o->data : FORTUNES_DIR);
    fprintf(f, ",\n  \"backend\": \"%s\",\n  \"threads\": %d,\n  \"vocab\": %" PRId64 ",\n  \"context\": %" PRId64
               ",\n  \"layers\": %" PRId64 ",\n  \"heads\": %" PRId64 ",\n  \"embed\": %" PRId64
               ",\n  \"parameters\": %" PRId64 ",\n  \"batch\": %" PRId64 ",\n  \"train_windows\": %" PRId64
               ",\n  \"val_windows\": %" PRId64 ",\n  \"epochs\": [",
            fl_default_backend()->name, fl_num_threads(), info->config.vocab, info->config.context, info->config.layers,
            info->config.heads, info->config.embed, info->parameters, o->batch, info->train_windows, info->val_windows);
    for (int e = 0; e < count; e++) {
        const epoch_result *r = &epochs[e];
        fprintf(f,
                "%s\n    {\"epoch\": %d, \"seconds\": %.4f, \"tokens_per_second\": %.1f, \"train_loss\": %.6f, "
                "\"train_perplexity\": %.4f, \"val_loss\": %.6f, \"val_perplexity\": %.4f}",
                e ? "," : "", first + e + 1, r->seconds, r->tokens_per_second, r->train_loss, exp(r->train_loss),
                r->val_loss, exp(r->val_loss));
    }
    fprintf(f, "\n  ]");
    if (info->sample) {
        fprintf(f, ",\n  \"prompt\": ");
        json_string(f, o->prompt);
        fprintf(f, ",\n  \"sample\": ");
        json_string(f, info->sample);
    }
    fprintf(f, "\n}\n");
    return output_close(&out, true);
}

static int fail(const char *what)
{
    fprintf(stderr, "lm: %s: %s\n", what, fl_last_error());
    return 1;
}

/* The prompt continued by up to o->tokens tokens, decoded into *out (free() it). */
static int generate(const options *o, fl_module *model, const fl_tokenizer *tok, const int64_t *prompt,
                    int64_t prompt_count, int64_t context, char **out)
{
    int64_t new_tokens = o->tokens < context - prompt_count + 1 ? o->tokens : context - prompt_count + 1;
    int status = 0;
    fl_scope scope = fl_scope_begin();
    fl_tensor *p = fl_from_data(prompt, FL_I64, 2, (int64_t[]){1, prompt_count});
    fl_tensor *ids = p ? gpt_generate(model, p, new_tokens,
                                      &(gpt_sampling){.temperature = o->temperature, .top_k = o->top_k,
                                                      .top_p = o->top_p, .seed = o->seed})
                       : NULL;
    int64_t total = prompt_count + new_tokens;
    int64_t *host = malloc((size_t)total * sizeof *host);
    size_t size;
    if (!ids || !host || fl_to_host(ids, host, (size_t)total * sizeof *host) != FL_OK ||
        fl_tokenizer_decode(tok, host, (size_t)total, out, &size) != FL_OK)
        status = fail("generating");
    free(host);
    fl_scope_end(scope);
    return status;
}

int main(int argc, char **argv)
{
    options o;
    parse_args(argc, argv, &o);
    if (o.threads)
        fl_set_num_threads(o.threads);
    fl_manual_seed(o.seed);

    /* Every exit past this point goes through finish, which releases what was made. */
    int status = 0, done = 0, first_epoch = 0;
    text corpus = {0};
    fl_tokenizer *tok = NULL;
    int64_t *ids = NULL, *prompt = NULL;
    size_t id_count = 0, prompt_count = 0;
    fl_tensor *tokens = NULL;
    fl_dataset *parts[2] = {NULL, NULL}, *train = NULL, *validation = NULL;
    fl_module *model = NULL;
    fl_parameters *params = NULL;
    fl_optimizer *opt = NULL;
    epoch_result *results = NULL;
    char *sample = NULL;
    char fingerprint[17], saved_fingerprint[17];
    /* The seed of the split and of the shuffles: a resumed run keeps its checkpoint's. */
    uint64_t split_seed = o.seed;

    status = o.data ? read_file(o.data, false, &corpus) : read_fortunes(&corpus);
    if (status)
        goto finish;
    if (corpus.size == 0) {
        fprintf(stderr, "lm: %s: the corpus is empty\n", o.data ? o.data : FORTUNES_DIR);
        status = 1;
        goto finish;
    }
    fl_timer_meter timer = {0};
    fl_timer_meter_start(&timer);
    if (o.tokenizer ? fl_tokenizer_load(o.tokenizer, &tok) != FL_OK
                    : fl_tokenizer_train_bpe(corpus.bytes, corpus.size, o.vocab, 2, &tok) != FL_OK) {
        status = fail(o.tokenizer ? "reading the tokenizer" : "learning the tokenizer");
        goto finish;
    }
    if (fl_tokenizer_encode(tok, corpus.bytes, corpus.size, &ids, &id_count) != FL_OK) {
        status = fail("tokenizing the corpus");
        goto finish;
    }
    fl_timer_meter_stop(&timer);
    tokenizer_fingerprint(tok, fingerprint);
    o.model.vocab = fl_tokenizer_vocab_size(tok);

    if (o.load) {
        if ((status = read_checkpoint_header(o.load, o.epochs, &o.model, &first_epoch, saved_fingerprint, &split_seed)))
            goto finish;
        if (strcmp(fingerprint, saved_fingerprint) != 0 || o.model.vocab != fl_tokenizer_vocab_size(tok)) {
            fprintf(stderr,
                    "lm: %s was trained with another tokenizer (%" PRId64 " ids, fingerprint %s) than this one (%" PRId64
                    " ids, fingerprint %s): give the same --data and --vocab, or the same --tokenizer\n",
                    o.load, o.model.vocab, saved_fingerprint, fl_tokenizer_vocab_size(tok), fingerprint);
            status = 1;
            goto finish;
        }
    }
    int64_t context = o.model.context;
    if (o.prompt) {
        if (fl_tokenizer_encode(tok, o.prompt, strlen(o.prompt), &prompt, &prompt_count) != FL_OK) {
            status = fail("tokenizing the prompt");
            goto finish;
        }
        if (prompt_count == 0 || (int64_t)prompt_count > context) {
            fprintf(stderr, "lm: --generate: the prompt is %zu tokens; it must be 1 to the context's %" PRId64 "\n",
                    prompt_count, context);
            status = 1;
            goto finish;
        }
    }
    /* Windows side by side need context + 1 tokens each but the last, which shares one. */
    int64_t windows = id_count > (size_t)context ? ((int64_t)id_count - context - 1) / context + 1 : 0;
    if (windows < 2) {
        fprintf(stderr,
                "lm: %s: the corpus is %zu tokens, too short for a training and a validation window of %" PRId64
                " tokens\n",
                o.data ? o.data : FORTUNES_DIR, id_count, context);
        status = 1;
        goto finish;
    }
    int64_t val_windows = windows / 10 > 0 ? windows / 10 : 1;
    int64_t train_windows = windows - val_windows;
    tokens = fl_from_data(ids, FL_I64, 1, (int64_t[]){(int64_t)id_count});
    fl_dataset *all = tokens ? fl_token_dataset(tokens, context, context) : NULL;
    if (!all || fl_random_split(all, (int64_t[]){train_windows, val_windows}, 2, split_seed, parts) != FL_OK) {
        status = fail("splitting the corpus");
        goto finish;
    }
    fl_dataset *train_part = parts[0];
    parts[0] = NULL;
    if (o.train_limit && o.train_limit < train_windows)
        train_part = fl_span_dataset(train_part, 0, train_windows = o.train_limit);
    /* Reshuffled every epoch from (seed, epoch), so a resumed run sees the same batches. */
    train = fl_batch_dataset(fl_shuffle_dataset(train_part, split_seed), o.batch, false, NULL, NULL);
    validation = fl_batch_dataset(parts[1], EVAL_BATCH, false, NULL, NULL);
    parts[1] = NULL;
    model = gpt_new(&o.model);
    params = model ? fl_module_parameters(model) : NULL;
    fl_adam_options adam = FL_ADAMW_DEFAULTS;
    adam.lr = o.lr;
    opt = params ? fl_adamw(params->items, params->count, &adam) : NULL;
    results = calloc((size_t)(o.epochs > 0 ? o.epochs : 1), sizeof *results);
    if (!train || !validation || !opt || !results) {
        status = fail("setting up");
        goto finish;
    }
    if (!o.quiet)
        printf("GPT: %" PRId64 " parameters (%" PRId64 " layers, %" PRId64 " heads, %" PRId64 " features, context %" PRId64
               "); %zu bytes of text, %zu tokens of a %" PRId64 "-id BPE vocabulary (%.1f s); %" PRId64
               " training and %" PRId64 " validation windows, batch %" PRId64 ", %d threads, on the %s backend\n",
               fl_module_parameter_count(model), o.model.layers, o.model.heads, o.model.embed, context, corpus.size,
               id_count, o.model.vocab, fl_timer_meter_value(&timer), train_windows, val_windows, o.batch,
               fl_num_threads(), fl_default_backend()->name);
    if (o.load) {
        if (fl_checkpoint_load(o.load, model, opt, NULL) != FL_OK) {
            status = fail("loading the checkpoint");
            goto finish;
        }
        if (!o.quiet)
            printf("resumed from %s after epoch %d\n", o.load, first_epoch);
    }

    int last_epoch = o.stop_after && o.stop_after < o.epochs ? o.stop_after : o.epochs;
    for (int epoch = first_epoch; epoch < last_epoch && status == 0; epoch++, done++) {
        fl_dataset_set_epoch(train, epoch);
        fl_average_meter train_loss = {0};
        fl_timer_meter epoch_timer = {0};
        fl_timer_meter_start(&epoch_timer);
        int64_t count = fl_dataset_size(train);
        for (int64_t b = 0; b < count && status == 0; b++) {
            fl_optimizer_set_lr(opt, fl_lr_cosine(o.lr, (int64_t)epoch * count + b, (int64_t)o.epochs * count, 0));
            fl_scope scope = fl_scope_begin();
            fl_sample s;
            if (fl_dataset_get(train, b, &s) != FL_OK) {
                status = fail("reading a batch");
            } else {
                fl_variable *loss = lm_loss(model, &s);
                if (!loss || fl_v_backward(loss, NULL, false) != FL_OK)
                    status = fail("training");
                else {
                    fl_clip_grad_norm(params->items, params->count, 1.0, 2.0);
                    if (fl_optimizer_step(opt) != FL_OK)
                        status = fail("training");
                }
                fl_optimizer_zero_grad(opt);
                if (status == 0) {
                    int64_t n = fl_numel(s.fields[1]);
                    fl_average_meter_add(&train_loss, fl_item(fl_v_value(loss)), (double)n);
                    fl_timer_meter_add_samples(&epoch_timer, n);
                    if (!o.quiet)
                        output_progress(epoch + 1, b + 1, count, fl_average_meter_value(&train_loss),
                                        1.0 / fl_timer_meter_per_sample(&epoch_timer), "tokens");
                }
            }
            fl_scope_end(scope);
        }
        fl_timer_meter_stop(&epoch_timer);
        epoch_result *r = &results[done];
        r->seconds = fl_timer_meter_value(&epoch_timer);
        r->train_loss = fl_average_meter_value(&train_loss);
        r->tokens_per_second = 1.0 / fl_timer_meter_per_sample(&epoch_timer);
        if (status == 0 && evaluate(model, validation, &r->val_loss) != FL_OK)
            status = fail("validating");
        if (status == 0 && !o.quiet) {
            printf("epoch %d: %.1f s (%.0f tokens/s), train loss %.4f (perplexity %.2f), validation loss %.4f "
                   "(perplexity %.2f)\n",
                   epoch + 1, r->seconds, r->tokens_per_second, r->train_loss, exp(r->train_loss), r->val_loss,
                   exp(r->val_loss));
            fflush(stdout);
        }
        char epoch_text[16], seed_text[24], vocab[24], ctx[24], layers[24], heads[24], embed[24], dropout[32];
        snprintf(epoch_text, sizeof epoch_text, "%d", epoch + 1);
        snprintf(seed_text, sizeof seed_text, "%" PRIu64, split_seed);
        snprintf(vocab, sizeof vocab, "%" PRId64, o.model.vocab);
        snprintf(ctx, sizeof ctx, "%" PRId64, o.model.context);
        snprintf(layers, sizeof layers, "%" PRId64, o.model.layers);
        snprintf(heads, sizeof heads, "%" PRId64, o.model.heads);
        snprintf(embed, sizeof embed, "%" PRId64, o.model.embed);
        snprintf(dropout, sizeof dropout, "%.17g", o.model.dropout);
        const char *metadata[] = {"epoch", epoch_text, "seed", seed_text, "vocab", vocab, "context", ctx, "layers", layers,
                                  "heads", heads, "embed", embed, "dropout", dropout, "tokenizer", fingerprint, NULL};
        if (status == 0 && o.save && fl_checkpoint_save(o.save, model, opt, metadata) != FL_OK)
            status = fail("saving the checkpoint");
    }
    if (status == 0 && done == 0 && !o.prompt) {
        double val_loss;
        if (evaluate(model, validation, &val_loss) != FL_OK)
            status = fail("validating");
        else
            printf("validation loss %.4f (perplexity %.2f)\n", val_loss, exp(val_loss));
    }
    if (status == 0 && o.prompt && (status = generate(&o, model, tok, prompt, (int64_t)prompt_count, context, &sample)) == 0)
        printf("%s\n", sample);
    if (status == 0 && o.json)
        status = write_json(&o,
                            &(run_info){.config = o.model, .parameters = fl_module_parameter_count(model),
                                        .train_windows = train_windows, .val_windows = val_windows, .sample = sample},
                            results, first_epoch, done);

finish:
    free(sample);
    free(results);
    fl_optimizer_free(opt);
    fl_parameters_free(params);
    fl_module_release(model);
    fl_dataset_release(train);
    fl_dataset_release(validation);
    fl_dataset_release(parts[0]);
    fl_dataset_release(parts[1]);
    fl_release(tokens);
    free(prompt);
    free(ids);
    fl_tokenizer_free(tok);
    free(corpus.bytes);
    return status;
}
