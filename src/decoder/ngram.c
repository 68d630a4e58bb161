/* Word n-gram language models read from ARPA files: a vocabulary hashed by spelling,
 * and per order the n-grams' word ids in one array with a hash table of indices, so
 * that scoring a word is a few lookups. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flare/decoder.h"
#include "flare/extension.h"
#include "hash.h"

typedef struct {
    int64_t count;
    int32_t *words; /* count * order ids */
    float *prob;    /* log10 */
    float *backoff; /* log10; 0 where the file gives none */
    uint32_t *slots; /* index + 1, 0 empty; a power of two of them */
    uint64_t mask;
} ngram_table;

struct fl_ngram {
    int order;
    ngram_table tables[FL_NGRAM_MAX_ORDER]; /* tables[n - 1]: the n-grams */
    char **vocab;
    uint32_t *vocab_slots;
    uint64_t vocab_mask;
    int32_t bos, eos, unk;
};

static uint64_t table_capacity(int64_t count)
{
    uint64_t cap = 16;
    while (cap < (uint64_t)count * 2)
        cap <<= 1;
    return cap;
}

/* The index of the n-gram ids[0..n) in the n-grams of order n, or -1. */
static int64_t find(const fl_ngram *lm, const int32_t *ids, int n)
{
    const ngram_table *t = &lm->tables[n - 1];
    if (n == 1)
        return ids[0] >= 0 && ids[0] < t->count ? ids[0] : -1;
    if (!t->slots)
        return -1;
    for (uint64_t i = decoder_hash_ids(ids, n) & t->mask;; i = (i + 1) & t->mask) {
        uint32_t s = t->slots[i];
        if (!s)
            return -1;
        if (!memcmp(t->words + (int64_t)(s - 1) * n, ids, (size_t)n * sizeof *ids))
            return s - 1;
    }
}

/* Inserts n-gram `index` of order n (its ids already stored); false if it is there. */
static bool insert(fl_ngram *lm, int n, int64_t index)
{
    ngram_table *t = &lm->tables[n - 1];
    const int32_t *ids = t->words + index * n;
    for (uint64_t i = decoder_hash_ids(ids, n) & t->mask;; i = (i + 1) & t->mask) {
        uint32_t s = t->slots[i];
        if (!s) {
            t->slots[i] = (uint32_t)(index + 1);
            return true;
        }
        if (!memcmp(t->words + (int64_t)(s - 1) * n, ids, (size_t)n * sizeof *ids))
            return false;
    }
}

int32_t fl_ngram_word_id(const fl_ngram *lm, const char *word)
{
    if (!lm || !word || !lm->vocab_slots)
        return -1;
    for (uint64_t i = decoder_hash_string(word, strlen(word)) & lm->vocab_mask;; i = (i + 1) & lm->vocab_mask) {
        uint32_t s = lm->vocab_slots[i];
        if (!s)
            return -1;
        if (!strcmp(lm->vocab[s - 1], word))
            return (int32_t)(s - 1);
    }
}

void fl_ngram_free(fl_ngram *lm)
{
    if (!lm)
        return;
    for (int n = 0; n < FL_NGRAM_MAX_ORDER; n++) {
        free(lm->tables[n].words);
        free(lm->tables[n].prob);
        free(lm->tables[n].backoff);
        free(lm->tables[n].slots);
    }
    if (lm->vocab)
        for (int64_t i = 0; i < lm->tables[0].count; i++)
            free(lm->vocab[i]);
    free(lm->vocab);
    free(lm->vocab_slots);
    free(lm);
}

/* ---- the ARPA reader ----------------------------------------------------------------- */

typedef struct {
    const char *path;
    char *data;
    size_t size, pos;
    int64_t line; /* the number of the line last read, from 1 */
    char *text;   /* that line, NUL-terminated in place, trailing spaces and \r removed */
} reader;

/* The next line, or NULL at the end of the file. */
static char *next_line(reader *r)
{
    if (r->pos >= r->size)
        return NULL;
    char *start = r->data + r->pos;
    char *end = memchr(start, '\n', r->size - r->pos);
    size_t len = end ? (size_t)(end - start) : r->size - r->pos;
    r->pos += len + (end != NULL);
    while (len > 0 && (start[len - 1] == '\r' || start[len - 1] == ' ' || start[len - 1] == '\t'))
        len--;
    start[len] = '\0';
    r->line++;
    r->text = start;
    return start;
}

/* The next line that is not blank, or NULL at the end of the file. */
static char *next_nonblank(reader *r)
{
    char *line;
    while ((line = next_line(r)))
        if (line[strspn(line, " \t")])
            return line;
    return NULL;
}

static fl_status bad(const reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static fl_status bad(const reader *r, const char *fmt, ...)
{
    char message[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    if (r->line > 0)
        fl_error(FL_ERR_VALUE, "fl_ngram_load_arpa", "%s, line %lld: %s", r->path, (long long)r->line, message);
    else
        fl_error(FL_ERR_VALUE, "fl_ngram_load_arpa", "%s: %s", r->path, message);
    return FL_ERR_VALUE;
}

/* Splits line into fields separated by spaces and tabs, at most max; returns how many
 * there are, max + 1 if more. */
static int split(char *line, char **fields, int max)
{
    int n = 0;
    char *p = line;
    for (;;) {
        p += strspn(p, " \t");
        if (!*p)
            return n;
        if (n == max)
            return max + 1;
        fields[n++] = p;
        p += strcspn(p, " \t");
        if (*p)
            *p++ = '\0';
    }
}

static bool parse_number(const char *s, float *out)
{
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    /* -inf (a zero probability) is a number; +inf, NaN and what a float cannot hold
     * are not. */
    if (end == s || *end || isnan(v) || (fabs(v) > FLT_MAX && v != -INFINITY))
        return false;
    *out = (float)v;
    return true;
}

/* "ngram N=COUNT" */
static fl_status parse_count(reader *r, char *line, int *order, int64_t *count)
{
    char *fields[3];
    int n = split(line, fields, 2);
    if (n != 2 || strcmp(fields[0], "ngram"))
        return bad(r, "expected \"ngram N=COUNT\" in the \\data\\ header, found \"%.60s\"", r->text);
    char *eq = strchr(fields[1], '=');
    if (!eq)
        return bad(r, "expected \"ngram N=COUNT\" in the \\data\\ header, found \"ngram %.60s\"", fields[1]);
    *eq = '\0';
    char *end;
    errno = 0;
    long long o = strtoll(fields[1], &end, 10);
    if (end == fields[1] || *end || errno)
        return bad(r, "malformed n-gram order \"%.30s\"", fields[1]);
    if (o < 1 || o > FL_NGRAM_MAX_ORDER)
        return bad(r, "n-gram order %lld is not in [1, %d]", o, FL_NGRAM_MAX_ORDER);
    errno = 0;
    long long c = strtoll(eq + 1, &end, 10);
    if (end == eq + 1 || *end || errno || c < 0)
        return bad(r, "malformed count \"%.30s\" of the %lld-grams", eq + 1, o);
    /* Each n-gram takes a line of at least 4 bytes: a count beyond that is a lie that
     * must not become an allocation. */
    if ((unsigned long long)c > r->size / 4 + 1)
        return bad(r, "%lld %lld-grams declared in a file of %zu bytes", c, o, r->size);
    *order = (int)o;
    *count = c;
    return FL_OK;
}

/* "\N-grams:" -> N, or 0 if line is not such a header. */
static int section_order(const char *line)
{
    if (line[0] != '\\')
        return 0;
    char *end;
    long v = strtol(line + 1, &end, 10);
    if (end == line + 1 || strcmp(end, "-grams:") || v < 1 || v > 1000000)
        return 0;
    return (int)v;
}

static fl_status read_ngram(reader *r, fl_ngram *lm, int n, int64_t index, char *line)
{
    char shown[64]; /* the line as read, for messages: split cuts it */
    snprintf(shown, sizeof shown, "%s", line);
    char *fields[FL_NGRAM_MAX_ORDER + 2];
    int nf = split(line, fields, n + 2);
    bool top = n == lm->order;
    if (nf < n + 1 || nf > n + 1 + !top)
        return bad(r, "a %d-gram line has a log10 probability, %d word%s%s; found %d field%s in \"%.60s\"", n, n,
                   n == 1 ? "" : "s", top ? "" : " and an optional backoff weight", nf > n + 2 ? n + 3 : nf,
                   nf == 1 ? "" : "s", shown);
    ngram_table *t = &lm->tables[n - 1];
    float prob, backoff = 0.0f;
    if (!parse_number(fields[0], &prob))
        return bad(r, "malformed log10 probability \"%.30s\"", fields[0]);
    if (nf == n + 2 && !parse_number(fields[n + 1], &backoff))
        return bad(r, "malformed log10 backoff weight \"%.30s\"", fields[n + 1]);
    t->prob[index] = prob;
    t->backoff[index] = backoff;
    int32_t *ids = t->words + index * n;
    if (n == 1) {
        size_t len = strlen(fields[1]);
        char *word = malloc(len + 1);
        if (!word)
            return fl_error(FL_ERR_MEMORY, "fl_ngram_load_arpa", "out of memory"), FL_ERR_MEMORY;
        memcpy(word, fields[1], len + 1);
        lm->vocab[index] = word;
        ids[0] = (int32_t)index;
        for (uint64_t i = decoder_hash_string(word, strlen(word)) & lm->vocab_mask;; i = (i + 1) & lm->vocab_mask) {
            uint32_t s = lm->vocab_slots[i];
            if (!s) {
                lm->vocab_slots[i] = (uint32_t)(index + 1);
                break;
            }
            if (!strcmp(lm->vocab[s - 1], word))
                return bad(r, "the 1-gram \"%.60s\" is given twice", word);
        }
        return FL_OK;
    }
    for (int i = 0; i < n; i++) {
        ids[i] = fl_ngram_word_id(lm, fields[1 + i]);
        if (ids[i] < 0)
            return bad(r, "the word \"%.60s\" is not a 1-gram", fields[1 + i]);
    }
    if (find(lm, ids, n - 1) < 0)
        return bad(r, "the context of this %d-gram (its first %d word%s) is not a %d-gram of the file", n, n - 1,
                   n == 2 ? "" : "s", n - 1);
    if (!insert(lm, n, index))
        return bad(r, "this %d-gram is given twice", n);
    return FL_OK;
}

static fl_status read_arpa(reader *r, fl_ngram *lm)
{
    char *line = next_nonblank(r);
    if (!line || strcmp(line, "\\data\\"))
        return bad(r, "expected the \\data\\ header%s", line ? "" : ", found an empty file");
    int64_t counts[FL_NGRAM_MAX_ORDER] = {0};
    int order = 0;
    while ((line = next_line(r)) && line[strspn(line, " \t")]) {
        int o = 0;
        int64_t c = 0;
        fl_status s = parse_count(r, line, &o, &c);
        if (s)
            return s;
        if (o != order + 1)
            return bad(r, "the \\data\\ header gives ngram %d after ngram %d; orders go 1, 2, 3, ...", o, order);
        order = o;
        counts[o - 1] = c;
    }
    if (order == 0)
        return bad(r, "the \\data\\ header declares no n-gram counts");
    if (counts[0] < 1 || counts[0] > INT32_MAX - 1)
        return bad(r, "the \\data\\ header declares %lld 1-grams", (long long)counts[0]);
    lm->order = order;
    for (int n = 1; n <= order; n++) {
        ngram_table *t = &lm->tables[n - 1];
        int64_t c = counts[n - 1];
        if (c > (int64_t)UINT32_MAX / 2)
            return bad(r, "%lld %d-grams are more than this reader holds", (long long)c, n);
        t->count = c;
        t->words = malloc((size_t)(c ? c : 1) * (size_t)n * sizeof *t->words);
        t->prob = malloc((size_t)(c ? c : 1) * sizeof *t->prob);
        t->backoff = malloc((size_t)(c ? c : 1) * sizeof *t->backoff);
        if (n > 1) {
            t->mask = table_capacity(c) - 1;
            t->slots = calloc(t->mask + 1, sizeof *t->slots);
        }
        if (!t->words || !t->prob || !t->backoff || (n > 1 && !t->slots))
            return fl_error(FL_ERR_MEMORY, "fl_ngram_load_arpa", "out of memory for %lld %d-grams", (long long)c, n),
                   FL_ERR_MEMORY;
    }
    lm->vocab = calloc((size_t)counts[0], sizeof *lm->vocab);
    lm->vocab_mask = table_capacity(counts[0]) - 1;
    lm->vocab_slots = calloc(lm->vocab_mask + 1, sizeof *lm->vocab_slots);
    if (!lm->vocab || !lm->vocab_slots)
        return fl_error(FL_ERR_MEMORY, "fl_ngram_load_arpa", "out of memory"), FL_ERR_MEMORY;

    line = next_nonblank(r);
    for (int n = 1; n <= order; n++) {
        if (!line)
            return bad(r, "the file ends before the \\%d-grams: section", n);
        int so = section_order(line);
        if (so != n) {
            if (so > order)
                return bad(r, "a \\%d-grams: section, but the \\data\\ header declares orders up to %d", so, order);
            return bad(r, "expected the \\%d-grams: section, found \"%.60s\"", n, line);
        }
        int64_t i = 0;
        while ((line = next_nonblank(r)) && line[0] != '\\') {
            if (i == counts[n - 1])
                return bad(r, "more %d-grams than the %lld the \\data\\ header declares", n, (long long)counts[n - 1]);
            fl_status s = read_ngram(r, lm, n, i, line);
            if (s)
                return s;
            i++;
        }
        if (i != counts[n - 1])
            return bad(r, "%lld %d-grams where the \\data\\ header declares %lld", (long long)i, n,
                       (long long)counts[n - 1]);
    }
    if (!line)
        return bad(r, "the file ends without \\end\\");
    if (strcmp(line, "\\end\\")) {
        int so = section_order(line);
        if (so)
            return bad(r, "a \\%d-grams: section, but the \\data\\ header declares orders up to %d", so, order);
        return bad(r, "expected \\end\\, found \"%.60s\"", line);
    }
    lm->bos = fl_ngram_word_id(lm, "<s>");
    lm->eos = fl_ngram_word_id(lm, "</s>");
    lm->unk = fl_ngram_word_id(lm, "<unk>");
    r->line = 0;
    if (lm->bos < 0 || lm->eos < 0)
        return bad(r, "the 1-grams lack %s", lm->bos < 0 ? "<s>" : "</s>");
    return FL_OK;
}

fl_status fl_ngram_load_arpa(const char *path, fl_ngram **out)
{
    if (out)
        *out = NULL;
    if (!path || !out)
        return fl_error(FL_ERR_NULL, "fl_ngram_load_arpa", "%s is NULL", path ? "out" : "path"), FL_ERR_NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return fl_error(FL_ERR_IO, "fl_ngram_load_arpa", "cannot open %s: %s", path, strerror(errno)), FL_ERR_IO;
    reader r = {.path = path};
    size_t cap = 0;
    fl_status status = FL_OK;
    for (;;) {
        if (r.size == cap) {
            cap = cap ? cap * 2 : 1 << 16;
            char *grown = realloc(r.data, cap + 1);
            if (!grown) {
                status = FL_ERR_MEMORY;
                fl_error(status, "fl_ngram_load_arpa", "out of memory reading %s", path);
                break;
            }
            r.data = grown;
        }
        size_t got = fread(r.data + r.size, 1, cap - r.size, f);
        r.size += got;
        if (got == 0) {
            if (ferror(f)) {
                status = FL_ERR_IO;
                fl_error(status, "fl_ngram_load_arpa", "cannot read %s", path);
            }
            break;
        }
    }
    fclose(f);
    fl_ngram *lm = NULL;
    if (status == FL_OK) {
        lm = calloc(1, sizeof *lm);
        if (!lm) {
            status = FL_ERR_MEMORY;
            fl_error(status, "fl_ngram_load_arpa", "out of memory");
        } else {
            status = read_arpa(&r, lm);
        }
    }
    free(r.data);
    if (status) {
        fl_ngram_free(lm);
        return status;
    }
    *out = lm;
    return FL_OK;
}

/* ---- queries ------------------------------------------------------------------------- */

int fl_ngram_order(const fl_ngram *lm) { return lm ? lm->order : 0; }

int64_t fl_ngram_count(const fl_ngram *lm, int order)
{
    return lm && order >= 1 && order <= lm->order ? lm->tables[order - 1].count : 0;
}

int64_t fl_ngram_vocab_size(const fl_ngram *lm) { return lm ? lm->tables[0].count : 0; }

const char *fl_ngram_word(const fl_ngram *lm, int32_t id)
{
    return lm && id >= 0 && id < lm->tables[0].count ? lm->vocab[id] : NULL;
}

int32_t fl_ngram_unk(const fl_ngram *lm) { return lm ? lm->unk : -1; }

void fl_ngram_null_state(fl_ngram_state *state) { memset(state, 0, sizeof *state); }

void fl_ngram_begin_state(const fl_ngram *lm, fl_ngram_state *state)
{
    fl_ngram_null_state(state);
    if (lm && lm->order > 1) {
        state->length = 1;
        state->words[0] = lm->bos;
    }
}

int fl_ngram_state_equal(const fl_ngram_state *a, const fl_ngram_state *b)
{
    if (a->length != b->length || a->length < 0 || a->length > FL_NGRAM_MAX_ORDER - 1)
        return a->length == b->length;
    return !memcmp(a->words, b->words, (size_t)a->length * sizeof a->words[0]);
}

double fl_ngram_score(const fl_ngram *lm, const fl_ngram_state *in, int32_t word, fl_ngram_state *out)
{
    if (!lm)
        return -INFINITY;
    if (word < 0 || word >= lm->tables[0].count)
        word = lm->unk;
    if (word < 0) {
        fl_ngram_null_state(out);
        return -100.0;
    }
    /* history + word, the history cut to order - 1 words (and a state not made by
     * this API to what it can hold) */
    int32_t ids[FL_NGRAM_MAX_ORDER];
    int have = in->length < 0 ? 0 : in->length > FL_NGRAM_MAX_ORDER - 1 ? FL_NGRAM_MAX_ORDER - 1 : in->length;
    int len = have < lm->order - 1 ? have : lm->order - 1;
    memcpy(ids, in->words + (have - len), (size_t)len * sizeof *ids);
    ids[len] = word;
    /* The longest n-gram "context-suffix word"; every longer context in the file adds
     * its backoff weight. */
    double score = 0.0;
    int k = len;
    for (; k > 0; k--) {
        int64_t i = find(lm, ids + len - k, k + 1);
        if (i >= 0)
            break;
        int64_t c = find(lm, ids + len - k, k);
        if (c >= 0)
            score += lm->tables[k - 1].backoff[c];
    }
    int64_t i = k > 0 ? find(lm, ids + len - k, k + 1) : word;
    score += lm->tables[k].prob[i];
    /* The state: the longest suffix of history + word that is an n-gram, at most
     * order - 1 words. */
    int keep = len + 1 < lm->order - 1 ? len + 1 : lm->order - 1;
    while (keep > 0 && find(lm, ids + len + 1 - keep, keep) < 0)
        keep--;
    fl_ngram_state next;
    next.length = keep;
    memcpy(next.words, ids + len + 1 - keep, (size_t)keep * sizeof *ids);
    memset(next.words + keep, 0, sizeof next.words - (size_t)keep * sizeof *ids);
    *out = next;
    return score;
}

double fl_ngram_sentence_log10(const fl_ngram *lm, const int32_t *words, size_t n)
{
    if (!lm)
        return -INFINITY;
    fl_ngram_state s;
    fl_ngram_begin_state(lm, &s);
    double total = 0.0;
    for (size_t i = 0; i < n; i++)
        total += fl_ngram_score(lm, &s, words[i], &s);
    return total + fl_ngram_score(lm, &s, lm->eos, &s);
}

fl_status fl_ngram_evaluate(const fl_ngram *lm, const void *text, size_t size, fl_ngram_stats *stats)
{
    if (!lm || !stats || (!text && size))
        return fl_error(FL_ERR_NULL, "fl_ngram_evaluate", "%s is NULL", !lm ? "lm" : !stats ? "stats" : "text"),
               FL_ERR_NULL;
    memset(stats, 0, sizeof *stats);
    const char *p = text, *end = p + size;
    double oov_log10 = 0.0;
    char word[1024];
    fl_ngram_state s;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol)
            eol = end;
        fl_ngram_begin_state(lm, &s);
        while (p < eol) {
            while (p < eol && (*p == ' ' || *p == '\t' || *p == '\r'))
                p++;
            const char *w = p;
            while (p < eol && *p != ' ' && *p != '\t' && *p != '\r')
                p++;
            if (p == w)
                break;
            size_t len = (size_t)(p - w);
            int32_t id = -1;
            /* A word longer than the buffer is in no vocabulary this reader made. */
            if (len < sizeof word) {
                memcpy(word, w, len);
                word[len] = '\0';
                id = fl_ngram_word_id(lm, word);
            }
            double score = fl_ngram_score(lm, &s, id, &s);
            stats->words++;
            stats->log10_prob += score;
            if (id < 0 || id == lm->unk) {
                stats->oov++;
                oov_log10 += score;
            }
        }
        stats->log10_prob += fl_ngram_score(lm, &s, lm->eos, &s);
        stats->sentences++;
        p = eol + 1;
    }
    int64_t tokens = stats->words + stats->sentences;
    stats->perplexity = tokens ? pow(10.0, -stats->log10_prob / (double)tokens) : 1.0;
    int64_t known = tokens - stats->oov;
    stats->perplexity_without_oov = known ? pow(10.0, -(stats->log10_prob - oov_log10) / (double)known) : 1.0;
    return FL_OK;
}
