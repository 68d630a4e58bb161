/*
 * embed: sentence embeddings and semantic search with a pretrained BERT-family
 * checkpoint in the Hugging Face layout (models/hf_bert.c).
 *
 *   embed --corpus FILE [--top K] [--batch N] [--save FILE] [--threads T] [--time]
 *         [--backend NAME] DIR [QUERY ...]
 *
 * DIR is a checkpoint directory as transformers saves it and the hub publishes it
 * (config.json, model.safetensors, tokenizer.json): BERT, RoBERTa, XLM-R, CamemBERT,
 * DistilBERT, ALBERT or ELECTRA. Every non-empty line of the corpus (standard input
 * for "-") is a text; each is tokenized with [CLS]/[SEP] (or the model's own
 * template), run through the encoder in batches padded to their longest text, and
 * mean-pooled over its tokens: the embedding sentence-transformers computes for
 * models such as all-MiniLM-L6-v2. For each QUERY the program prints the K corpus
 * texts of largest cosine similarity, best first; --save writes the corpus's
 * embeddings [texts, hidden] to a safetensors file (under "embeddings", written to a
 * temporary and renamed).
 *
 * A text longer than the model's positions is refused, naming its line; nothing is
 * cut short silently.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flare/autograd.h"
#include "flare/io.h"
#include "flare/tensor.h"
#include "flare/tensor_map.h"
#include "flare/text.h"
#include "cli.h"
#include "input.h"
#include "models.h"

typedef struct options {
    const char *corpus, *save, *dir;
    int64_t top, batch;
    int threads;
    bool time;
    char **queries;
    int query_count;
} options;

static const char usage[] = "embed --corpus FILE [--top K] [--batch N] [--save FILE] [--threads T] [--time]\n"
                            "             [--backend NAME] DIR [QUERY ...]\n"
                            "  DIR: a BERT-family checkpoint directory (config.json, model.safetensors,\n"
                            "       tokenizer.json); FILE: one text a line, - for standard input\n"
                            "  --top K: the K nearest corpus texts of each QUERY (default 5)\n"
                            "  --batch N: texts run together (default 32)\n"
                            "  --save FILE: the corpus's embeddings, safetensors [texts, hidden]\n"
                            "  --threads T: threads (default FLARE_NUM_THREADS, else the cores)\n"
                            "  --time: print the corpus's texts, tokens and seconds on stderr\n"
                            "  " CLI_BACKEND_HELP;

static void parse_args(int argc, char **argv, options *o)
{
    *o = (options){.top = 5, .batch = 32};
    enum { CORPUS = 256, TOP, BATCH, SAVE, THREADS, TIME, BACKEND };
    static const struct option long_options[] = {
        {"corpus", required_argument, NULL, CORPUS}, {"top", required_argument, NULL, TOP},
        {"batch", required_argument, NULL, BATCH},   {"save", required_argument, NULL, SAVE},
        {"threads", required_argument, NULL, THREADS}, {"time", no_argument, NULL, TIME},
        {"backend", required_argument, NULL, BACKEND},
        {NULL, 0, NULL, 0},
    };
    cli c = {.program = "embed", .usage = usage, .options = long_options, .operands = 1 << 20};
    for (int key; (key = cli_next(&c, argc, argv)) != -1;)
        switch (key) {
        case CORPUS: o->corpus = optarg; break;
        case TOP: o->top = cli_integer(&c, 1, 1000000); break;
        case BATCH: o->batch = cli_integer(&c, 1, 4096); break;
        case SAVE: o->save = optarg; break;
        case THREADS: o->threads = (int)cli_integer(&c, 1, 1024); break;
        case TIME: o->time = true; break;
        case BACKEND: cli_backend(&c); break;
        }
    if (optind >= argc)
        cli_fail(&c, "no checkpoint directory");
    if (!o->corpus)
        cli_fail(&c, "no --corpus");
    o->dir = argv[optind];
    o->queries = argv + optind + 1;
    o->query_count = argc - optind - 1;
    if (o->query_count == 0 && !o->save)
        cli_fail(&c, "nothing to do: give a QUERY or --save");
}

/* The corpus's texts: its non-empty lines, each NUL-terminated inside *buffer, with
 * the line number of each; exits on an unreadable or empty corpus. */
typedef struct corpus {
    char *buffer;
    char **texts;
    int64_t *lines;
    int64_t count;
} corpus;

static void *allocate(size_t count, size_t size)
{
    void *p = count ? calloc(count, size) : NULL;
    if (count && !p) {
        fprintf(stderr, "embed: no memory for %zu values of %zu bytes\n", count, size);
        exit(1);
    }
    return p;
}

static corpus read_corpus(const char *path)
{
    corpus c = {0};
    size_t size = 0;
    bool from_stdin = strcmp(path, "-") == 0;
    char *data = input_read_all(path, &size);
    if (!data) {
        fprintf(stderr, "embed: cannot read the corpus %s\n", from_stdin ? "from standard input" : path);
        exit(1);
    }
    int64_t capacity = 1;
    for (size_t i = 0; i < size; i++)
        capacity += data[i] == '\n';
    c.texts = allocate((size_t)capacity, sizeof *c.texts);
    c.lines = allocate((size_t)capacity, sizeof *c.lines);
    /* each line NUL-terminated in place; the last may end with the file's NUL */
    int64_t line = 1;
    for (char *start = data, *stop = data + size, *end; start < stop; start = end + 1, line++) {
        end = memchr(start, '\n', (size_t)(stop - start));
        end = end ? end : stop;
        *end = 0;
        if (end > start && end[-1] == '\r')
            end[-1] = 0;
        if (*start) {
            c.texts[c.count] = start;
            c.lines[c.count++] = line;
        }
    }
    if (c.count == 0) {
        fprintf(stderr, "embed: the corpus %s holds no text\n", from_stdin ? "on standard input" : path);
        exit(1);
    }
    c.buffer = data;
    return c;
}

/* The positions a text may fill: RoBERTa's start after its padding id. */
static int64_t longest_text(const hf_bert_config *config)
{
    return config->padding_id >= 0 ? config->max_positions - config->padding_id - 1 : config->max_positions;
}

static _Noreturn void fail(const char *what)
{
    fprintf(stderr, "embed: %s: %s\n", what, fl_last_error());
    exit(1);
}

/* Indices by a score, to sort best first (ties by index): the texts by their lengths,
 * the corpus by its similarity to a query. */
typedef struct ranked {
    double score;
    int64_t index;
} ranked;

static int by_score(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    return x->score < y->score ? 1 : x->score > y->score ? -1 : (x->index > y->index) - (x->index < y->index);
}

/* The embeddings of texts[0..count) into out [count, hidden], batch texts at a time,
 * the texts of similar lengths together (longest first, as sentence-transformers
 * orders them), so that a batch pads little; returns the tokens. Messages name a
 * corpus text by its line of source (lines), a query by its place. */
static int64_t embed_texts(fl_module *model, const hf_bert_config *config, const fl_tokenizer *tok, char **texts,
                           int64_t count, int64_t batch, const char *source, const int64_t *lines, float *out)
{
    int64_t limit = longest_text(config), tokens = 0, hidden = config->hidden;
    int64_t **ids = allocate((size_t)count, sizeof *ids);
    size_t *lengths = allocate((size_t)count, sizeof *lengths);
    ranked *order = allocate((size_t)count, sizeof *order);
    for (int64_t i = 0; i < count; i++) {
        int64_t *types = NULL;
        if (fl_tokenizer_encode_special(tok, texts[i], strlen(texts[i]), NULL, 0, &ids[i], &types, &lengths[i]) !=
            FL_OK)
            fail(lines ? "tokenizing the corpus" : "tokenizing a query");
        free(types);
        if ((int64_t)lengths[i] > limit) {
            if (lines)
                fprintf(stderr, "embed: %s, line %lld: %zu tokens; the model takes at most %lld\n", source,
                        (long long)lines[i], lengths[i], (long long)limit);
            else
                fprintf(stderr, "embed: QUERY %lld: %zu tokens; the model takes at most %lld\n", (long long)(i + 1),
                        lengths[i], (long long)limit);
            exit(1);
        }
        tokens += (int64_t)lengths[i];
        order[i] = (ranked){(double)lengths[i], i};
    }
    qsort(order, (size_t)count, sizeof *order, by_score);

    /* Padded on the right with the tokenizer's padding id where it has one. */
    int64_t pad = config->padding_id >= 0 ? config->padding_id : 0, widest = count ? (int64_t)lengths[order[0].index] : 0;
    int64_t *batch_ids = allocate((size_t)(batch * widest), sizeof *batch_ids);
    int64_t *mask = allocate((size_t)(batch * widest), sizeof *mask);
    float *pooled_rows = allocate((size_t)(batch * hidden), sizeof *pooled_rows);
    for (int64_t first = 0; first < count; first += batch) {
        int64_t rows = count - first < batch ? count - first : batch, width = (int64_t)lengths[order[first].index];
        for (int64_t r = 0; r < rows; r++)
            for (int64_t k = 0; k < width; k++) {
                int64_t i = order[first + r].index;
                bool token = k < (int64_t)lengths[i];
                batch_ids[r * width + k] = token ? ids[i][k] : pad;
                mask[r * width + k] = token;
            }
        fl_scope scope = fl_scope_begin();
        fl_tensor *id_tensor = fl_from_data(batch_ids, FL_I64, FL_SHAPE(rows, width));
        fl_tensor *mask_tensor = fl_from_data(mask, FL_I64, FL_SHAPE(rows, width));
        fl_variable *states = id_tensor && mask_tensor ? hf_bert_forward(model, id_tensor, NULL, mask_tensor) : NULL;
        fl_tensor *pooled = states ? hf_bert_mean_pool(fl_v_value(states), mask_tensor) : NULL;
        if (!pooled || fl_to_host(pooled, pooled_rows, (size_t)(rows * hidden) * sizeof *pooled_rows) != FL_OK)
            fail("running the encoder");
        fl_scope_end(scope);
        for (int64_t r = 0; r < rows; r++)
            memcpy(out + order[first + r].index * hidden, pooled_rows + r * hidden, (size_t)hidden * sizeof *out);
    }
    for (int64_t i = 0; i < count; i++)
        free(ids[i]);
    free(ids);
    free(order);
    free(lengths);
    free(batch_ids);
    free(mask);
    free(pooled_rows);
    return tokens;
}

static double norm_of(const float *v, int64_t n)
{
    double sum = 0;
    for (int64_t k = 0; k < n; k++)
        sum += (double)v[k] * v[k];
    return sqrt(sum);
}

static void save_embeddings(const char *path, const float *embeddings, int64_t count, int64_t hidden,
                            const char *dir)
{
    fl_tensor_map *map = fl_tensor_map_create();
    fl_tensor *t = fl_from_data(embeddings, FL_F32, FL_SHAPE(count, hidden));
    if (!map || !t || fl_tensor_map_set(map, "embeddings", t) != FL_OK ||
        fl_tensor_map_set_metadata(map, "model", dir) != FL_OK ||
        fl_tensor_map_set_metadata(map, "pooling", "mean") != FL_OK || fl_save_safetensors(path, map) != FL_OK)
        fail(path);
    fl_release(t);
    fl_tensor_map_free(map);
}

int main(int argc, char **argv)
{
    options o;
    parse_args(argc, argv, &o);
    if (o.threads)
        fl_set_num_threads(o.threads);
    corpus c = read_corpus(o.corpus);
    fl_module *model = NULL;
    hf_bert_config config;
    if (hf_load_bert(o.dir, &model, &config) != FL_OK)
        fail("loading the checkpoint");
    char path[4096];
    if (snprintf(path, sizeof path, "%s/tokenizer.json", o.dir) >= (int)sizeof path) {
        fprintf(stderr, "embed: the directory's name is too long\n");
        return 1;
    }
    fl_tokenizer *tok = NULL;
    if (fl_tokenizer_load(path, &tok) != FL_OK)
        fail("loading the tokenizer");
    fl_set_grad_enabled(false);

    int64_t hidden = config.hidden;
    float *corpus_embeddings = allocate((size_t)(c.count * hidden), sizeof *corpus_embeddings);
    float *query_embeddings = allocate((size_t)(o.query_count * hidden), sizeof *query_embeddings);
    const char *source = strcmp(o.corpus, "-") == 0 ? "standard input" : o.corpus;
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    int64_t tokens = embed_texts(model, &config, tok, c.texts, c.count, o.batch, source, c.lines, corpus_embeddings);
    clock_gettime(CLOCK_MONOTONIC, &end);
    double seconds = (double)(end.tv_sec - start.tv_sec) + 1e-9 * (double)(end.tv_nsec - start.tv_nsec);
    if (o.time)
        fprintf(stderr, "embed: %lld texts, %lld tokens in %.3f s (%.1f texts a second, %d threads)\n",
                (long long)c.count, (long long)tokens, seconds, (double)c.count / seconds, fl_num_threads());
    embed_texts(model, &config, tok, o.queries, o.query_count, o.batch, NULL, NULL, query_embeddings);
    if (o.save)
        save_embeddings(o.save, corpus_embeddings, c.count, hidden, o.dir);

    int64_t top = o.top < c.count ? o.top : c.count;
    ranked *order = allocate((size_t)c.count, sizeof *order);
    double *norms = allocate((size_t)c.count, sizeof *norms);
    for (int64_t i = 0; o.query_count && i < c.count; i++)
        norms[i] = norm_of(corpus_embeddings + i * hidden, hidden);
    for (int q = 0; q < o.query_count; q++) {
        const float *query = query_embeddings + q * hidden;
        double query_norm = norm_of(query, hidden);
        for (int64_t i = 0; i < c.count; i++) {
            const float *text = corpus_embeddings + i * hidden;
            double dot = 0;
            for (int64_t k = 0; k < hidden; k++)
                dot += (double)query[k] * text[k];
            order[i] = (ranked){dot / (query_norm * norms[i]), i};
        }
        qsort(order, (size_t)c.count, sizeof *order, by_score);
        printf("%s%s\n", q ? "\n" : "", o.queries[q]);
        for (int64_t k = 0; k < top; k++)
            printf("  %.4f  line %lld: %s\n", order[k].score, (long long)c.lines[order[k].index],
                   c.texts[order[k].index]);
    }
    free(order);
    free(norms);
    free(corpus_embeddings);
    free(query_embeddings);
    fl_tokenizer_free(tok);
    fl_module_release(model);
    free(c.texts);
    free(c.lines);
    free(c.buffer);
    return 0;
}
