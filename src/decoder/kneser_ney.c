/* Interpolated modified Kneser-Ney estimation (Chen & Goodman 1998, section 3.5 and
 * 4.1.6; the form KenLM's lmplz writes), from counts to an ARPA file.
 *
 * For an n-gram g = h w of order n:
 *   a(g)  the adjusted count: the raw count at the highest order and for n-grams that
 *         begin with <s> (nothing precedes them), else the number of distinct words v
 *         with "v g" seen (the continuation count);
 *   D_n(c) the discount of order n for adjusted count c: D1, D2, D3+ from the counts of
 *         counts t_k of order n, Y = t1 / (t1 + 2 t2), D_k = k - (k + 1) Y t_{k+1} / t_k;
 *   p(w | h) = (a(h w) - D_n(a(h w))) / S(h) + gamma(h) p(w | h'),
 *         S(h) = sum over w of a(h w), gamma(h) = (D1 N1(h) + D2 N2(h) + D3+ N3+(h)) / S(h),
 *         N_k(h) the number of words w with a(h w) = k (3+: at least 3), h' = h less its
 *         first word; at order 1, p(w) = (a(w) - D_1(a(w))) / S + gamma / |V| with |V|
 *         the vocabulary but <s>, so <unk> (never seen) gets gamma / |V|.
 * The ARPA file stores p(w | h) for every n-gram seen and gamma(h) as the backoff
 * weight of each context: p(w | h) of an unseen h w is then gamma(h) p(w | h'), exactly
 * the interpolated value. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flare/decoder.h"
#include "flare/extension.h"
#include "hash.h"

static const char FN[] = "fl_ngram_build_arpa";

enum { UNK = 0, BOS = 1, EOS = 2 };

typedef struct {
    int n;
    int64_t count, cap;
    int32_t *keys;   /* count * n ids */
    int64_t *raw;    /* raw counts */
    int64_t *adj;    /* adjusted counts */
    uint32_t *slots; /* index + 1 */
    uint64_t mask;
    /* as a context of the next order: the sum of its extensions' adjusted counts, and
     * how many have adjusted count 1, 2 and 3 or more */
    int64_t *sum, (*nk)[3];
    double *prob;  /* log10 of the interpolated probability */
    double *gamma; /* the interpolation weight as a context; 1 (no mass moved) if none */
} grams;

static void grams_free(grams *g)
{
    free(g->keys), free(g->raw), free(g->adj), free(g->slots), free(g->sum), free(g->nk), free(g->prob);
    free(g->gamma);
}

static bool grams_grow(grams *g)
{
    int64_t cap = g->cap ? g->cap * 2 : 1024;
    int32_t *keys = realloc(g->keys, (size_t)cap * (size_t)g->n * sizeof *keys);
    if (!keys)
        return false;
    g->keys = keys;
    int64_t *raw = realloc(g->raw, (size_t)cap * sizeof *raw);
    if (!raw)
        return false;
    g->raw = raw;
    free(g->slots);
    g->mask = (uint64_t)cap * 2 - 1;
    g->slots = calloc(g->mask + 1, sizeof *g->slots);
    if (!g->slots)
        return false;
    g->cap = cap;
    for (int64_t i = 0; i < g->count; i++) {
        uint64_t s = decoder_hash_ids(g->keys + i * g->n, g->n) & g->mask;
        while (g->slots[s])
            s = (s + 1) & g->mask;
        g->slots[s] = (uint32_t)(i + 1);
    }
    return true;
}

static int64_t grams_find(const grams *g, const int32_t *ids)
{
    if (!g->slots)
        return -1;
    for (uint64_t s = decoder_hash_ids(ids, g->n) & g->mask;; s = (s + 1) & g->mask) {
        uint32_t v = g->slots[s];
        if (!v)
            return -1;
        if (!memcmp(g->keys + (int64_t)(v - 1) * g->n, ids, (size_t)g->n * sizeof *ids))
            return v - 1;
    }
}

/* Counts one occurrence; false when out of memory. */
static bool grams_add(grams *g, const int32_t *ids)
{
    int64_t i = grams_find(g, ids);
    if (i >= 0) {
        g->raw[i]++;
        return true;
    }
    if (g->count == g->cap) {
        if (g->cap >= (int64_t)UINT32_MAX / 4 || !grams_grow(g))
            return false;
    }
    i = g->count++;
    memcpy(g->keys + i * g->n, ids, (size_t)g->n * sizeof *ids);
    g->raw[i] = 1;
    uint64_t s = decoder_hash_ids(ids, g->n) & g->mask;
    while (g->slots[s])
        s = (s + 1) & g->mask;
    g->slots[s] = (uint32_t)(i + 1);
    return true;
}

typedef struct {
    char **words;
    int64_t count, cap;
    uint32_t *slots;
    uint64_t mask;
} vocab;

static void vocab_free(vocab *v)
{
    for (int64_t i = 0; i < v->count; i++)
        free(v->words[i]);
    free(v->words), free(v->slots);
}

/* The id of the word s[0..len), added if new; -1 when out of memory. */
static int32_t vocab_id(vocab *v, const char *s, size_t len)
{
    if (v->slots)
        for (uint64_t i = decoder_hash_string(s, len) & v->mask;; i = (i + 1) & v->mask) {
            uint32_t k = v->slots[i];
            if (!k)
                break;
            if (strlen(v->words[k - 1]) == len && !memcmp(v->words[k - 1], s, len))
                return (int32_t)(k - 1);
        }
    if (v->count == v->cap) {
        if (v->cap >= INT32_MAX / 4)
            return -1;
        int64_t cap = v->cap ? v->cap * 2 : 1024;
        char **words = realloc(v->words, (size_t)cap * sizeof *words);
        if (!words)
            return -1;
        v->words = words;
        free(v->slots);
        v->mask = (uint64_t)cap * 2 - 1;
        v->slots = calloc(v->mask + 1, sizeof *v->slots);
        if (!v->slots)
            return -1;
        v->cap = cap;
        for (int64_t i = 0; i < v->count; i++) {
            uint64_t k = decoder_hash_string(v->words[i], strlen(v->words[i])) & v->mask;
            while (v->slots[k])
                k = (k + 1) & v->mask;
            v->slots[k] = (uint32_t)(i + 1);
        }
    }
    char *w = malloc(len + 1);
    if (!w)
        return -1;
    memcpy(w, s, len);
    w[len] = '\0';
    int64_t id = v->count++;
    v->words[id] = w;
    uint64_t k = decoder_hash_string(s, len) & v->mask;
    while (v->slots[k])
        k = (k + 1) & v->mask;
    v->slots[k] = (uint32_t)(id + 1);
    return (int32_t)id;
}

void fl_ngram_build_options_default(fl_ngram_build_options *options)
{
    memset(options, 0, sizeof *options);
    options->order = 3;
}

typedef struct {
    vocab v;
    grams g[FL_NGRAM_MAX_ORDER];
    int order;
    double discount[FL_NGRAM_MAX_ORDER][4]; /* [n - 1][c]: D_n(c) for c = 1, 2, 3+ (0 unused) */
} model;

static void model_free(model *m)
{
    vocab_free(&m->v);
    for (int n = 0; n < FL_NGRAM_MAX_ORDER; n++)
        grams_free(&m->g[n]);
}

static fl_status out_of_memory(void) { return fl_error(FL_ERR_MEMORY, FN, "out of memory"), FL_ERR_MEMORY; }

/* Counts every n-gram of every sentence, padded with <s> and </s>. */
static fl_status count(model *m, const char *text, size_t size)
{
    if (vocab_id(&m->v, "<unk>", 5) != UNK || vocab_id(&m->v, "<s>", 3) != BOS || vocab_id(&m->v, "</s>", 4) != EOS)
        return out_of_memory();
    int32_t *sentence = NULL;
    size_t cap = 0;
    const char *p = text, *end = text + size;
    int64_t line = 0;
    fl_status status = FL_OK;
    while (p < end && status == FL_OK) {
        line++;
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol)
            eol = end;
        size_t len = 0;
        for (;;) {
            if (len + 2 > cap) {
                cap = cap ? cap * 2 : 256;
                int32_t *grown = realloc(sentence, cap * sizeof *grown);
                if (!grown) {
                    status = out_of_memory();
                    break;
                }
                sentence = grown;
            }
            if (len == 0)
                sentence[len++] = BOS;
            while (p < eol && (*p == ' ' || *p == '\t' || *p == '\r'))
                p++;
            const char *w = p;
            while (p < eol && *p != ' ' && *p != '\t' && *p != '\r')
                p++;
            if (p == w)
                break;
            size_t wl = (size_t)(p - w);
            if (memchr(w, '\0', wl)) {
                fl_error(FL_ERR_VALUE, FN, "line %lld of the text holds a NUL byte, which no ARPA word can",
                         (long long)line);
                status = FL_ERR_VALUE;
                break;
            }
            if ((wl == 3 && !memcmp(w, "<s>", 3)) || (wl == 4 && !memcmp(w, "</s>", 4))) {
                fl_error(FL_ERR_VALUE, FN, "line %lld of the text holds %.*s, which marks sentences",
                         (long long)line, (int)wl, w);
                status = FL_ERR_VALUE;
                break;
            }
            int32_t id = vocab_id(&m->v, w, wl);
            if (id < 0) {
                status = out_of_memory();
                break;
            }
            sentence[len++] = id;
        }
        if (status)
            break;
        sentence[len++] = EOS;
        for (size_t i = 0; i < len; i++)
            for (int n = 1; n <= m->order && i + n <= len; n++)
                if (!grams_add(&m->g[n - 1], sentence + i)) {
                    status = out_of_memory();
                    break;
                }
        p = eol + 1;
    }
    free(sentence);
    /* <unk> is in the vocabulary whether or not the text has it: unseen, its count is 0 */
    if (status == FL_OK && grams_find(&m->g[0], (const int32_t[]){UNK}) < 0) {
        if (!grams_add(&m->g[0], (const int32_t[]){UNK}))
            return out_of_memory();
        m->g[0].raw[m->g[0].count - 1] = 0;
    }
    return status;
}

static fl_status estimate(model *m, const fl_ngram_build_options *options)
{
    int N = m->order;
    for (int n = 1; n <= N; n++) {
        grams *g = &m->g[n - 1];
        int64_t c = g->count ? g->count : 1;
        g->adj = calloc((size_t)c, sizeof *g->adj);
        g->sum = calloc((size_t)c, sizeof *g->sum);
        g->nk = calloc((size_t)c, sizeof *g->nk);
        g->prob = calloc((size_t)c, sizeof *g->prob);
        g->gamma = malloc((size_t)c * sizeof *g->gamma);
        if (!g->adj || !g->sum || !g->nk || !g->prob || !g->gamma)
            return out_of_memory();
    }
    /* adjusted counts */
    for (int n = 1; n <= N; n++) {
        grams *g = &m->g[n - 1];
        for (int64_t i = 0; i < g->count; i++)
            if (n == N || g->keys[i * n] == BOS)
                g->adj[i] = g->raw[i];
        if (n < N) {
            const grams *up = &m->g[n];
            for (int64_t i = 0; i < up->count; i++) {
                int64_t j = grams_find(g, up->keys + i * (n + 1) + 1);
                if (j >= 0 && g->keys[j * n] != BOS)
                    g->adj[j]++;
            }
        }
    }
    /* discounts from the counts of adjusted counts (<s> alone is never predicted) */
    for (int n = 1; n <= N; n++) {
        const grams *g = &m->g[n - 1];
        int64_t t[5] = {0};
        for (int64_t i = 0; i < g->count; i++)
            if (g->adj[i] >= 1 && g->adj[i] <= 4 && !(n == 1 && g->keys[i] == BOS))
                t[g->adj[i]]++;
        double *d = m->discount[n - 1];
        bool ok = t[1] && t[2] && t[3] && t[4];
        if (ok) {
            double y = (double)t[1] / (double)(t[1] + 2 * t[2]);
            for (int k = 1; k <= 3; k++) {
                d[k] = k - (k + 1) * y * (double)t[k + 1] / (double)t[k];
                if (!(d[k] > 0 && d[k] < k + 1))
                    ok = false;
            }
        }
        if (!ok) {
            if (!options->discount_fallback)
                return fl_error(FL_ERR_VALUE, FN,
                                "the text is too small for order %d: its %d-grams seen once, twice, three and four "
                                "times (after Kneser-Ney adjustment) number %lld, %lld, %lld, %lld, which give no "
                                "discounts in range; set discount_fallback for 0.5, 1, 1.5",
                                N, n, (long long)t[1], (long long)t[2], (long long)t[3], (long long)t[4]),
                       FL_ERR_VALUE;
            d[1] = 0.5, d[2] = 1.0, d[3] = 1.5;
        }
    }
    /* context statistics: S(h) and N1, N2, N3+ of each context of order n - 1 */
    int64_t root_sum = 0, root_nk[3] = {0};
    for (int n = 1; n <= N; n++) {
        const grams *g = &m->g[n - 1];
        for (int64_t i = 0; i < g->count; i++) {
            if (n == 1 && g->keys[i] == BOS)
                continue;
            int64_t a = g->adj[i], *sum, *nk;
            if (a == 0) /* <unk> unseen */
                continue;
            if (n == 1) {
                sum = &root_sum, nk = root_nk;
            } else {
                grams *ctx = &m->g[n - 2];
                int64_t j = grams_find(ctx, g->keys + i * n);
                if (j < 0)
                    return fl_error(FL_ERR_VALUE, FN, "internal: a %d-gram without its context", n), FL_ERR_VALUE;
                sum = &ctx->sum[j], nk = ctx->nk[j];
            }
            *sum += a;
            nk[a >= 3 ? 2 : a - 1]++;
        }
    }
    /* interpolated probabilities, lowest order first */
    int64_t vocab_size = m->v.count - 1; /* all but <s> */
    for (int n = 1; n <= N; n++) {
        grams *g = &m->g[n - 1];
        const double *d = m->discount[n - 1];
        if (n < N)
            for (int64_t i = 0; i < g->count; i++)
                g->gamma[i] = 1.0;
        double root_gamma = 0.0;
        if (n == 1)
            root_gamma = root_sum ? (d[1] * root_nk[0] + d[2] * root_nk[1] + d[3] * root_nk[2]) / (double)root_sum
                                  : 1.0;
        for (int64_t i = 0; i < g->count; i++) {
            const int32_t *ids = g->keys + i * n;
            if (n == 1 && ids[0] == BOS)
                continue;
            int64_t a = g->adj[i];
            double discounted = a - d[a >= 3 ? 3 : a];
            double p;
            if (n == 1) {
                p = (root_sum ? discounted / (double)root_sum : 0.0) + root_gamma / (double)vocab_size;
            } else {
                grams *ctx = &m->g[n - 2];
                int64_t j = grams_find(ctx, ids);
                const int64_t *nk = ctx->nk[j];
                double s = (double)ctx->sum[j];
                double gamma = (d[1] * nk[0] + d[2] * nk[1] + d[3] * nk[2]) / s;
                ctx->gamma[j] = gamma;
                int64_t lower = grams_find(&m->g[n - 2], ids + 1);
                if (lower < 0)
                    return fl_error(FL_ERR_VALUE, FN, "internal: a %d-gram without its suffix", n), FL_ERR_VALUE;
                p = discounted / s + gamma * pow(10.0, m->g[n - 2].prob[lower]);
            }
            g->prob[i] = log10(p);
        }
    }
    return FL_OK;
}

static void write_ngram(FILE *f, const model *m, int n, int64_t i)
{
    const grams *g = &m->g[n - 1];
    const int32_t *ids = g->keys + i * n;
    if (n == 1 && ids[0] == BOS)
        fputs("-99", f);
    else
        fprintf(f, "%.9g", g->prob[i]);
    for (int k = 0; k < n; k++)
        fprintf(f, "%c%s", k ? ' ' : '\t', m->v.words[ids[k]]);
    if (n < m->order && g->gamma[i] != 1.0)
        fprintf(f, "\t%.9g", log10(g->gamma[i]));
    fputc('\n', f);
}

static fl_status write_arpa(const model *m, const char *path)
{
    size_t size = strlen(path) + 64;
    char *tmp = malloc(size);
    if (!tmp)
        return out_of_memory();
    int fd = fl_temporary_file(path, tmp, size);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        fl_error(FL_ERR_IO, FN, "cannot create %s: %s", tmp, strerror(errno));
        if (fd >= 0)
            close(fd), unlink(tmp);
        free(tmp);
        return FL_ERR_IO;
    }
    fputs("\\data\\\n", f);
    for (int n = 1; n <= m->order; n++)
        fprintf(f, "ngram %d=%lld\n", n, (long long)m->g[n - 1].count);
    for (int n = 1; n <= m->order; n++) {
        fprintf(f, "\n\\%d-grams:\n", n);
        if (n == 1) {
            /* the vocabulary in id order, so that a reader numbers it as it was built */
            const grams *g = &m->g[0];
            for (int32_t id = 0; id < m->v.count; id++)
                write_ngram(f, m, 1, grams_find(g, &id));
        } else {
            for (int64_t i = 0; i < m->g[n - 1].count; i++)
                write_ngram(f, m, n, i);
        }
    }
    fputs("\n\\end\\\n", f);
    bool failed = ferror(f) != 0;
    failed |= fflush(f) != 0 || fsync(fileno(f)) != 0;
    failed |= fclose(f) != 0;
    if (failed || rename(tmp, path) != 0) {
        fl_error(FL_ERR_IO, FN, "cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
        free(tmp);
        return FL_ERR_IO;
    }
    free(tmp);
    return FL_OK;
}

fl_status fl_ngram_build_arpa(const void *text, size_t size, const fl_ngram_build_options *options, const char *path)
{
    if ((!text && size) || !path)
        return fl_error(FL_ERR_NULL, FN, "%s is NULL", path ? "text" : "path"), FL_ERR_NULL;
    fl_ngram_build_options defaults;
    if (!options) {
        fl_ngram_build_options_default(&defaults);
        options = &defaults;
    }
    if (options->order < 1 || options->order > FL_NGRAM_MAX_ORDER)
        return fl_error(FL_ERR_VALUE, FN, "order %d is not in [1, %d]", options->order, FL_NGRAM_MAX_ORDER),
               FL_ERR_VALUE;
    model m = {.order = options->order};
    for (int n = 1; n <= FL_NGRAM_MAX_ORDER; n++)
        m.g[n - 1].n = n;
    fl_status status = count(&m, text, size);
    if (status == FL_OK)
        status = estimate(&m, options);
    if (status == FL_OK)
        status = write_arpa(&m, path);
    model_free(&m);
    return status;
}
