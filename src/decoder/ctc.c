/* CTC decoding: best path, and the lexicon beam search with a word language model
 * (wav2letter's LexiconDecoder, Viterbi scores). */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "flare/extension.h"
#include "lexicon.h"

static fl_status no_memory(const char *fn) { return fl_error(FL_ERR_MEMORY, fn, "out of memory"), FL_ERR_MEMORY; }

void fl_ctc_result_free(fl_ctc_result *result)
{
    if (!result)
        return;
    free(result->ids);
    result->ids = NULL;
    result->count = 0;
}

/* Copies a [frames, tokens] float tensor to the host as f32. */
static fl_status host_emissions(const char *fn, const fl_tensor *emissions, float **out, int64_t *frames,
                                int64_t *tokens)
{
    *out = NULL;
    if (!emissions)
        return fl_error(FL_ERR_NULL, fn, "emissions is NULL"), FL_ERR_NULL;
    char d[FL_DESC_SIZE];
    fl_dtype dtype = fl_dtype_of(emissions);
    if (fl_ndim(emissions) != 2)
        return fl_error(FL_ERR_SHAPE, fn, "emissions %s: expected [frames, tokens]", fl_describe(emissions, d)),
               FL_ERR_SHAPE;
    if (dtype != FL_F16 && dtype != FL_BF16 && dtype != FL_F32 && dtype != FL_F64)
        return fl_error(FL_ERR_DTYPE, fn, "emissions %s: expected a float dtype", fl_describe(emissions, d)),
               FL_ERR_DTYPE;
    *frames = fl_dim(emissions, 0);
    *tokens = fl_dim(emissions, 1);
    size_t bytes = (size_t)fl_numel(emissions) * sizeof(float);
    float *host = malloc(bytes ? bytes : 1);
    if (!host)
        return no_memory(fn);
    fl_scope scope = fl_scope_begin();
    const fl_tensor *f32 = dtype == FL_F32 ? emissions : fl_cast(emissions, FL_F32);
    fl_status status = f32 ? fl_to_host(f32, host, bytes) : fl_last_status();
    fl_scope_end(scope);
    if (status) {
        free(host);
        return status;
    }
    *out = host;
    return FL_OK;
}

static fl_status check_emissions(const char *fn, const float *emissions, int64_t frames, int64_t tokens)
{
    if (!emissions && frames > 0)
        return fl_error(FL_ERR_NULL, fn, "emissions is NULL"), FL_ERR_NULL;
    if (frames < 0 || tokens < 1 || (frames > 0 && tokens > INT64_MAX / frames))
        return fl_error(FL_ERR_SHAPE, fn, "emissions of %lld frames and %lld tokens", (long long)frames,
                        (long long)tokens),
               FL_ERR_SHAPE;
    for (int64_t i = 0; i < frames * tokens; i++)
        if (isnan(emissions[i]) || emissions[i] == INFINITY)
            return fl_error(FL_ERR_VALUE, fn, "emissions hold %s at frame %lld, token %lld; log-probabilities are "
                            "numbers or -inf", isnan(emissions[i]) ? "NaN" : "+inf", (long long)(i / tokens),
                            (long long)(i % tokens)),
                   FL_ERR_VALUE;
    return FL_OK;
}

fl_status fl_ctc_greedy(const float *emissions, int64_t frames, int64_t tokens, int64_t blank, fl_ctc_result *result)
{
    static const char fn[] = "fl_ctc_greedy";
    if (!result)
        return fl_error(FL_ERR_NULL, fn, "result is NULL"), FL_ERR_NULL;
    memset(result, 0, sizeof *result);
    fl_status status = check_emissions(fn, emissions, frames, tokens);
    if (status)
        return status;
    if (blank < 0 || blank >= tokens)
        return fl_error(FL_ERR_VALUE, fn, "blank %lld is not a token of [0, %lld)", (long long)blank,
                        (long long)tokens),
               FL_ERR_VALUE;
    int64_t *ids = malloc((size_t)(frames ? frames : 1) * sizeof *ids);
    if (!ids)
        return no_memory(fn);
    int64_t count = 0, prev = -1;
    double score = 0.0;
    for (int64_t t = 0; t < frames; t++) {
        const float *e = emissions + t * tokens;
        int64_t best = 0;
        for (int64_t k = 1; k < tokens; k++)
            if (e[k] > e[best])
                best = k;
        score += e[best];
        if (best != prev && best != blank)
            ids[count++] = best;
        prev = best;
    }
    if (count == 0) {
        free(ids);
        ids = NULL;
    }
    result->ids = ids;
    result->count = count;
    result->score = score;
    return FL_OK;
}

fl_status fl_ctc_greedy_tensor(const fl_tensor *emissions, int64_t blank, fl_ctc_result *result)
{
    float *host;
    int64_t frames, tokens;
    if (result)
        memset(result, 0, sizeof *result);
    fl_status status = host_emissions("fl_ctc_greedy_tensor", emissions, &host, &frames, &tokens);
    if (status)
        return status;
    status = fl_ctc_greedy(host, frames, tokens, blank, result);
    free(host);
    return status;
}

void fl_ctc_beam_options_default(fl_ctc_beam_options *options)
{
    memset(options, 0, sizeof *options);
    options->beam_size = 100;
    options->beam_threshold = 25.0;
    options->lm_weight = 1.0;
    options->blank = 0;
    options->silence = -1;
    options->smearing = 1;
}

/* ---- the beam search ------------------------------------------------------------------- */

/* The words of a hypothesis, as a list shared by its descendants. */
typedef struct {
    int64_t word;
    int64_t parent; /* -1 at the start */
} history;

typedef struct {
    double score;
    fl_ngram_state lm;
    int32_t node;
    int64_t prev;    /* the last token of the path, -1 before the first frame */
    int64_t history; /* index into the history list, -1 for no words */
} hypothesis;

typedef struct {
    hypothesis *items;
    int64_t count, cap;
} hypotheses;

typedef struct {
    const fl_lexicon *lex;
    const fl_ngram *lm;
    const fl_ctc_beam_options *opt;
    int32_t *lm_ids; /* the language model's id of each lexicon word */
    double *offset;  /* per trie node: the look-ahead a hypothesis there carries (see below) */
    history *hist;
    int64_t hist_count, hist_cap;
    double best; /* the best candidate of the frame so far */
} search;

static bool push(hypotheses *h, const hypothesis *x)
{
    if (h->count == h->cap) {
        int64_t cap = h->cap ? h->cap * 2 : 256;
        hypothesis *items = realloc(h->items, (size_t)cap * sizeof *items);
        if (!items)
            return false;
        h->items = items;
        h->cap = cap;
    }
    h->items[h->count++] = *x;
    return true;
}

/* Adds a candidate unless it is out of the beam already. */
static bool candidate(search *s, hypotheses *next, const hypothesis *x)
{
    if (x->score < s->best - s->opt->beam_threshold)
        return true;
    if (x->score > s->best)
        s->best = x->score;
    return push(next, x);
}

static int compare_state(const hypothesis *a, const hypothesis *b)
{
    if (a->node != b->node)
        return a->node < b->node ? -1 : 1;
    if (a->prev != b->prev)
        return a->prev < b->prev ? -1 : 1;
    if (a->lm.length != b->lm.length)
        return a->lm.length < b->lm.length ? -1 : 1;
    return memcmp(a->lm.words, b->lm.words, (size_t)a->lm.length * sizeof a->lm.words[0]);
}

/* Same state together, best first within a state. */
static int by_state(const void *pa, const void *pb)
{
    const hypothesis *a = pa, *b = pb;
    int c = compare_state(a, b);
    if (c)
        return c;
    return a->score > b->score ? -1 : a->score < b->score;
}

static int by_score(const void *pa, const void *pb)
{
    const hypothesis *a = pa, *b = pb;
    if (a->score != b->score)
        return a->score > b->score ? -1 : 1;
    return compare_state(a, b);
}

/* Merges candidates of one state, then keeps the beam. */
static void prune(search *s, hypotheses *h)
{
    if (h->count == 0)
        return;
    qsort(h->items, (size_t)h->count, sizeof *h->items, by_state);
    int64_t kept = 0;
    for (int64_t i = 0; i < h->count; i++)
        if (kept == 0 || compare_state(&h->items[kept - 1], &h->items[i]))
            h->items[kept++] = h->items[i];
    qsort(h->items, (size_t)kept, sizeof *h->items, by_score);
    double floor = h->items[0].score - s->opt->beam_threshold;
    int64_t n = 0;
    while (n < kept && n < s->opt->beam_size && h->items[n].score >= floor)
        n++;
    h->count = n;
}

/* ln p(word | state) times the weight, and the state after it. */
static double lm_term(const search *s, const fl_ngram_state *in, int32_t lm_word, fl_ngram_state *out)
{
    if (!s->lm) {
        *out = *in;
        return 0.0;
    }
    return s->opt->lm_weight * M_LN10 * fl_ngram_score(s->lm, in, lm_word, out);
}

/* Extends h by each token of the frame's list (all tokens, or the best
 * beam_size_token of them). */
static fl_status expand(search *s, const hypothesis *h, const float *e, const int64_t *list, int64_t count,
                        hypotheses *next)
{
    const fl_ctc_beam_options *o = s->opt;
    const fl_lexicon *lex = s->lex;
    for (int64_t j = 0; j < count; j++) {
        int64_t k = list[j];
        double base = h->score + e[k];
        if (base < s->best - o->beam_threshold)
            continue;
        hypothesis x = *h;
        x.score = base;
        x.prev = k;
        if (k == o->blank || k == h->prev) {
            /* a blank, or the last token again (collapsed): the same place */
            if (!candidate(s, next, &x))
                return no_memory("fl_ctc_beam_search");
            continue;
        }
        if (h->node == 0 && k == o->silence) {
            x.score = base + o->silence_score;
            if (!candidate(s, next, &x))
                return no_memory("fl_ctc_beam_search");
        }
        int32_t child = lexicon_child(lex, h->node, k);
        if (child < 0)
            continue;
        const lexicon_node *c = &lex->nodes[child];
        double here = s->offset ? s->offset[h->node] : 0.0;
        if (c->child_count > 0) {
            x = *h;
            x.score = base + (s->offset ? s->offset[child] : 0.0) - here;
            x.prev = k;
            x.node = child;
            if (!candidate(s, next, &x))
                return no_memory("fl_ctc_beam_search");
        }
        for (int32_t i = 0; i < c->word_count; i++) {
            int64_t w = c->words[i];
            x = *h;
            x.prev = k;
            x.node = 0;
            x.score = base - here + lm_term(s, &h->lm, s->lm_ids[w], &x.lm) + o->word_score;
            if (x.score < s->best - o->beam_threshold)
                continue;
            if (s->hist_count == s->hist_cap) {
                int64_t cap = s->hist_cap ? s->hist_cap * 2 : 1024;
                history *grown = realloc(s->hist, (size_t)cap * sizeof *grown);
                if (!grown)
                    return no_memory("fl_ctc_beam_search");
                s->hist = grown;
                s->hist_cap = cap;
            }
            s->hist[s->hist_count] = (history){.word = w, .parent = h->history};
            x.history = s->hist_count++;
            if (!candidate(s, next, &x))
                return no_memory("fl_ctc_beam_search");
        }
    }
    return FL_OK;
}

/* Moves the n tokens of highest emission to the front of list (ties to the lower
 * id): a partial selection sort, as n is small where it is used. */
static void best_tokens(const float *e, int64_t *list, int64_t tokens, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        int64_t best = i;
        for (int64_t j = i + 1; j < tokens; j++)
            if (e[list[j]] > e[list[best]] || (e[list[j]] == e[list[best]] && list[j] < list[best]))
                best = j;
        int64_t x = list[i];
        list[i] = list[best];
        list[best] = x;
    }
}

static fl_status check_options(const char *fn, const fl_ctc_beam_options *o, int64_t tokens)
{
    if (o->blank < 0 || o->blank >= tokens)
        return fl_error(FL_ERR_VALUE, fn, "blank %lld is not a token of [0, %lld)", (long long)o->blank,
                        (long long)tokens),
               FL_ERR_VALUE;
    if (o->silence != -1 && (o->silence < 0 || o->silence >= tokens || o->silence == o->blank))
        return fl_error(FL_ERR_VALUE, fn, "silence %lld must be -1 or a token of [0, %lld) other than the blank",
                        (long long)o->silence, (long long)tokens),
               FL_ERR_VALUE;
    if (o->beam_size < 1)
        return fl_error(FL_ERR_VALUE, fn, "beam_size %lld must be at least 1", (long long)o->beam_size),
               FL_ERR_VALUE;
    if (o->beam_size_token < 0)
        return fl_error(FL_ERR_VALUE, fn, "beam_size_token %lld must be 0 (every token) or more",
                        (long long)o->beam_size_token),
               FL_ERR_VALUE;
    if (!(o->beam_threshold >= 0))
        return fl_error(FL_ERR_VALUE, fn, "beam_threshold %g must be at least 0", o->beam_threshold), FL_ERR_VALUE;
    if (!isfinite(o->lm_weight) || !isfinite(o->word_score) || !isfinite(o->silence_score))
        return fl_error(FL_ERR_VALUE, fn, "lm_weight %g, word_score %g and silence_score %g must be finite",
                        o->lm_weight, o->word_score, o->silence_score),
               FL_ERR_VALUE;
    return FL_OK;
}

fl_status fl_ctc_beam_search(const float *emissions, int64_t frames, int64_t tokens, const fl_lexicon *lex,
                             const fl_ngram *lm, const fl_ctc_beam_options *options, fl_ctc_result *result)
{
    static const char fn[] = "fl_ctc_beam_search";
    if (!result || !lex)
        return fl_error(FL_ERR_NULL, fn, "%s is NULL", !result ? "result" : "lex"), FL_ERR_NULL;
    memset(result, 0, sizeof *result);
    fl_ctc_beam_options defaults;
    if (!options) {
        fl_ctc_beam_options_default(&defaults);
        options = &defaults;
    }
    fl_status status = check_emissions(fn, emissions, frames, tokens);
    if (status)
        return status;
    if (tokens != lex->tokens)
        return fl_error(FL_ERR_SHAPE, fn, "emissions of %lld tokens, a lexicon of %lld", (long long)tokens,
                        (long long)lex->tokens),
               FL_ERR_SHAPE;
    if ((status = check_options(fn, options, tokens)))
        return status;

    search s = {.lex = lex, .lm = lm, .opt = options};
    hypotheses beam = {0}, next = {0};
    s.lm_ids = malloc((size_t)(lex->word_count ? lex->word_count : 1) * sizeof *s.lm_ids);
    if (!s.lm_ids)
        return no_memory(fn);
    status = FL_OK;
    for (int64_t w = 0; w < lex->word_count; w++)
        s.lm_ids[w] = lm ? fl_ngram_word_id(lm, lex->words[w]) : -1;
    /* Look-ahead (wav2letter's max smearing): a hypothesis inside a word carries the
     * best weighted unigram score of the words its node leads to, less the best of
     * all, and trades it for the word's real score as the word ends. Hypotheses that
     * have not paid for a word yet then do not crowd out those that have; at a word
     * boundary, and so in the result, the offset is 0. */
    if (lm && options->smearing && status == FL_OK) {
        s.offset = malloc((size_t)lex->node_count * sizeof *s.offset);
        if (!s.offset)
            status = no_memory(fn);
        /* children have larger indices than their parents */
        for (int64_t i = lex->node_count - 1; i >= 0 && status == FL_OK; i--) {
            const lexicon_node *n = &lex->nodes[i];
            double best = -INFINITY;
            for (int32_t k = 0; k < n->word_count; k++) {
                fl_ngram_state null, out;
                fl_ngram_null_state(&null);
                double v = lm_term(&s, &null, s.lm_ids[n->words[k]], &out);
                best = v > best ? v : best;
            }
            for (int32_t k = 0; k < n->child_count; k++)
                best = s.offset[n->children[k].node] > best ? s.offset[n->children[k].node] : best;
            s.offset[i] = best;
        }
        /* Words the LM gives probability 0 have no look-ahead to offer: a subtree of
         * only those carries none, and a lexicon of only those gets no smearing. */
        if (status == FL_OK && !isfinite(s.offset[0])) {
            free(s.offset);
            s.offset = NULL;
        }
        for (int64_t i = 1; s.offset && i < lex->node_count; i++)
            s.offset[i] = isfinite(s.offset[i]) ? s.offset[i] - s.offset[0] : 0.0;
        if (s.offset)
            s.offset[0] = 0.0;
    }
    hypothesis start = {.score = 0.0, .node = 0, .prev = -1, .history = -1};
    if (lm)
        fl_ngram_begin_state(lm, &start.lm);
    else
        fl_ngram_null_state(&start.lm);
    if (status == FL_OK && !push(&beam, &start))
        status = no_memory(fn);
    int64_t per_frame = options->beam_size_token > 0 && options->beam_size_token < tokens ? options->beam_size_token
                                                                                             : tokens;
    int64_t *list = status == FL_OK ? malloc((size_t)tokens * sizeof *list) : NULL;
    if (status == FL_OK && !list)
        status = no_memory(fn);
    for (int64_t t = 0; t < frames && status == FL_OK; t++) {
        const float *e = emissions + t * tokens;
        for (int64_t k = 0; k < tokens; k++)
            list[k] = k;
        if (per_frame < tokens)
            best_tokens(e, list, tokens, per_frame);
        next.count = 0;
        s.best = -INFINITY;
        for (int64_t i = 0; i < beam.count && status == FL_OK; i++)
            status = expand(&s, &beam.items[i], e, list, per_frame, &next);
        prune(&s, &next);
        hypotheses swap = beam;
        beam = next;
        next = swap;
    }
    /* the end: a word boundary, and </s> */
    int64_t best = -1;
    double best_score = -INFINITY;
    for (int64_t i = 0; i < beam.count && status == FL_OK; i++) {
        hypothesis *h = &beam.items[i];
        if (h->node != 0)
            continue;
        fl_ngram_state end;
        double score = h->score + (lm ? lm_term(&s, &h->lm, fl_ngram_word_id(lm, "</s>"), &end) : 0.0);
        if (best < 0 || score > best_score)
            best = i, best_score = score;
    }
    if (status == FL_OK && best < 0) {
        fl_error(FL_ERR_VALUE, fn, "no hypothesis of the beam ends at a word boundary after %lld frames",
                 (long long)frames);
        status = FL_ERR_VALUE;
    }
    if (status == FL_OK) {
        int64_t count = 0;
        for (int64_t j = beam.items[best].history; j >= 0; j = s.hist[j].parent)
            count++;
        int64_t *ids = count ? malloc((size_t)count * sizeof *ids) : NULL;
        if (count && !ids) {
            status = no_memory(fn);
        } else {
            int64_t i = count;
            for (int64_t j = beam.items[best].history; j >= 0; j = s.hist[j].parent)
                ids[--i] = s.hist[j].word;
            result->ids = ids;
            result->count = count;
            result->score = best_score;
        }
    }
    free(beam.items), free(next.items), free(s.hist), free(s.lm_ids), free(s.offset), free(list);
    return status;
}

fl_status fl_ctc_beam_search_tensor(const fl_tensor *emissions, const fl_lexicon *lex, const fl_ngram *lm,
                                    const fl_ctc_beam_options *options, fl_ctc_result *result)
{
    float *host;
    int64_t frames, tokens;
    if (result)
        memset(result, 0, sizeof *result);
    fl_status status = host_emissions("fl_ctc_beam_search_tensor", emissions, &host, &frames, &tokens);
    if (status)
        return status;
    status = fl_ctc_beam_search(host, frames, tokens, lex, lm, options, result);
    free(host);
    return status;
}
