/*
 * Tokenizers (include/flare/text.h): the vocabulary and merge tables, GPT-2's
 * pre-tokenization and byte-level BPE, SentencePiece's BPE over characters with byte
 * fallback and its Unigram model (unigram.c segments), BERT's normalizer and
 * WordPiece, the BPE trainer, and tokenizer.json.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "flare/extension.h"
#include "flare/text.h"
#include "charsmap.h"
#include "template.h"
#include "unicode.h"
#include "unigram.h"

/* MODEL_BPE is byte-level BPE (GPT-2's); MODEL_CHARACTER_BPE merges characters, with
 * byte tokens "<0xHH>" for those the vocabulary lacks (SentencePiece's, as Llama 2's
 * and Mistral's tokenizer.json hold it); MODEL_UNIGRAM is SentencePiece's other model
 * (T5's, ALBERT's, XLM-R's), which shares character BPE's normalizer, pre-tokenizer,
 * decoder and byte tokens. */
enum { MODEL_BPE, MODEL_WORDPIECE, MODEL_CHARACTER_BPE, MODEL_UNIGRAM };

/* One step of a normalizer or decoder of tokenizer.json: a string edit, a Unicode
 * normalization form (EDIT_FORM), a per-character edit (EDIT_STRIP_ACCENTS drops marks,
 * EDIT_LOWERCASE), white space trimmed (EDIT_TRIM), or SentencePiece's character map
 * (EDIT_PRECOMPILED). */
enum { EDIT_PREPEND, EDIT_REPLACE, EDIT_REPLACE_RUNS, EDIT_PRECOMPILED, EDIT_FORM, EDIT_STRIP_ACCENTS, EDIT_LOWERCASE,
       EDIT_TRIM, EDIT_BYTE_FALLBACK, EDIT_FUSE, EDIT_STRIP, EDIT_METASPACE };

typedef struct text_edit {
    int kind;
    char *from, *to; /* Replace: from -> to; Replace runs: from (the character) -> to; Prepend: to;
                      * Strip: from (the character); Metaspace: from */
    size_t from_len, to_len;
    int64_t start, stop; /* Strip: copies removed at each end; Metaspace: start 1 if the first token loses
                          * its replacements (the encoder put one before the text); Replace runs: start,
                          * the fewest copies a run replaced has; Form: start, the text_form; Trim:
                          * start and stop 1 where white space goes from the start and the end */
    text_charsmap *charsmap; /* Precompiled */
} text_edit;

enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER };

typedef struct token {
    char *text;           /* as tokenizer.json spells it; NULL for an id without a token */
    size_t len;
    unsigned char *bytes; /* what it decodes to (byte-level BPE) */
    size_t nbytes;
    bool added;
    /* Added tokens: whitespace taken with the token on its left (lstrip) or right
     * (rstrip); matched in the normalized text, as its own content normalized
     * (character BPE: the normalizer can change it), rather than in the raw text */
    bool lstrip, rstrip, normalized;
    char *norm_text;
    size_t norm_len;
} token;

typedef struct pair_slot {
    int64_t a, b;  /* a < 0: empty */
    int64_t value; /* rank (merge table) or count (trainer) */
    int64_t merged;
} pair_slot;

typedef struct pair_table {
    pair_slot *slots;
    size_t mask;
} pair_table;

struct fl_tokenizer {
    int model;
    token *tokens;
    int64_t count;
    int64_t *slots; /* open addressing on the spelling: id + 1, 0 empty */
    size_t mask;
    pair_table merges;
    int64_t byte_id[256]; /* -1: a byte valid UTF-8 never holds, absent from the vocabulary */
    bool bytes_missing;
    bool add_prefix_space, ignore_merges;
    int digits; /* 0: GPT-2's pieces; else Llama 3's, with runs of at most this many digits */
    int64_t *added; /* ids of the added tokens, matched in the raw text */
    size_t nadded;
    /* The bytes an added token starts with, of those matched in the raw text [0] and
     * in normalized text [1]: every other position is passed over at once. */
    bool added_starts[2][256];
    /* WordPiece */
    int64_t unk;
    char *prefix;
    size_t prefix_len;
    int64_t max_chars;
    size_t longest; /* characters of the longest token: no longer piece is looked up */
    bool bert_normalizer, clean_text, chinese_chars, strip_accents, lowercase;
    /* Character BPE: byte_id holds the byte tokens' ids, unk the unknown token's (-1:
     * none) */
    bool byte_fallback, fuse_unk;
    text_edit *normalizer, *decoder;
    size_t nnormalizer, ndecoder;
    char *metaspace; /* the Metaspace pre-tokenizer's replacement ("\u2581"); NULL: none */
    size_t metaspace_len;
    int prepend_scheme;
    bool metaspace_split;
    bool whitespace_split; /* a WhitespaceSplit before the Metaspace (T5's, XLM-R's) */
    text_template *post; /* tokenizer.json's post_processor; NULL: none */
    text_unigram *unigram; /* Unigram: the pieces' trie and scores */
};

/* ---- growing buffers ------------------------------------------------------------- */

typedef struct ids {
    int64_t *v;
    size_t n, cap;
} ids;

static bool push_id(ids *s, int64_t id)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        int64_t *v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return false;
        s->v = v, s->cap = cap;
    }
    s->v[s->n++] = id;
    return true;
}

typedef struct bytes {
    unsigned char *v;
    size_t n, cap;
} bytes;

static bool push_bytes(bytes *s, const void *p, size_t n)
{
    if (s->n + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 64;
        while (s->n + n + 1 > cap)
            cap *= 2;
        unsigned char *v = realloc(s->v, cap);
        if (!v)
            return false;
        s->v = v, s->cap = cap;
    }
    if (n)
        memcpy(s->v + s->n, p, n);
    s->n += n;
    s->v[s->n] = 0;
    return true;
}

static bool push_cp(bytes *s, uint32_t cp)
{
    unsigned char u[4];
    return push_bytes(s, u, text_utf8_put(cp, u));
}

/* ---- GPT-2's bytes as characters ---------------------------------------------------- */

/* The printable Latin-1 bytes stand for themselves; the others (controls, space,
 * DEL, NBSP, soft hyphen) take the code points from 256 up, in byte order, so every
 * byte is a visible character in tokenizer.json. */
static uint32_t byte_char(unsigned b)
{
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)
        return b;
    if (b < 33)
        return 256 + b;
    return b <= 160 ? 256 + 33 + (b - 127) : 256 + 67; /* 127..160, then 173 */
}

/* The byte cp stands for, or -1. */
static int char_byte(int32_t cp)
{
    if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255))
        return cp;
    if (cp < 256 || cp > 256 + 67)
        return -1;
    int32_t n = cp - 256;
    return n < 33 ? n : n < 67 ? 127 + (n - 33) : 173;
}

/* ---- the vocabulary ---------------------------------------------------------------- */

static uint64_t hash_bytes(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 1099511628211ull;
    return h;
}

static int64_t lookup(const fl_tokenizer *tok, const void *text, size_t len)
{
    if (!tok->slots)
        return -1;
    for (size_t i = hash_bytes(text, len) & tok->mask;; i = (i + 1) & tok->mask) {
        int64_t s = tok->slots[i];
        if (!s)
            return -1;
        const token *t = &tok->tokens[s - 1];
        if (t->len == len && memcmp(t->text, text, len) == 0)
            return s - 1;
    }
}

/* Indexes every token by its spelling; false if out of memory. The first id of a
 * spelling given twice wins (the loader refuses duplicates before). */
static bool index_vocab(fl_tokenizer *tok)
{
    size_t size = 16;
    while (size < 2 * (size_t)tok->count + 2)
        size *= 2;
    free(tok->slots);
    tok->slots = calloc(size, sizeof *tok->slots);
    if (!tok->slots)
        return false;
    tok->mask = size - 1;
    for (int64_t id = 0; id < tok->count; id++) {
        const token *t = &tok->tokens[id];
        if (!t->text || lookup(tok, t->text, t->len) >= 0)
            continue;
        size_t i = hash_bytes(t->text, t->len) & tok->mask;
        while (tok->slots[i])
            i = (i + 1) & tok->mask;
        tok->slots[i] = id + 1;
    }
    return true;
}

/* What a byte-level token decodes to: each character's byte; a character that
 * stands for no byte (in an added token such as "<|endoftext|>" all do, but a file
 * may hold others) decodes to its own UTF-8. */
static bool set_token_bytes(token *t)
{
    bytes out = {0};
    for (size_t i = 0; i < t->len;) {
        size_t n;
        int32_t cp = text_utf8_next((const unsigned char *)t->text + i, t->len - i, &n);
        int b = t->added ? -1 : char_byte(cp);
        unsigned char c = (unsigned char)b;
        if (!(b >= 0 ? push_bytes(&out, &c, 1) : push_bytes(&out, t->text + i, n))) {
            free(out.v);
            return false;
        }
        i += n;
    }
    if (!out.v && !push_bytes(&out, "", 0))
        return false;
    t->bytes = out.v, t->nbytes = out.n;
    return true;
}

/* ---- pair tables (merges, and the trainer's counts) ---------------------------------- */

static size_t hash_pair(int64_t a, int64_t b)
{
    uint64_t h = (uint64_t)a * 0x9E3779B97F4A7C15ull ^ ((uint64_t)b + 0x632BE59BD9B4E019ull) * 0xC2B2AE3D27D4EB4Full;
    return (size_t)(h ^ (h >> 29));
}

static bool pairs_init(pair_table *t, size_t capacity)
{
    size_t size = 16;
    while (size < 2 * capacity + 2)
        size *= 2;
    t->slots = malloc(size * sizeof *t->slots);
    if (!t->slots)
        return false;
    t->mask = size - 1;
    for (size_t i = 0; i < size; i++)
        t->slots[i].a = -1;
    return true;
}

/* The slot of (a, b): the pair's, or the empty one where it would go. */
static pair_slot *pairs_find(const pair_table *t, int64_t a, int64_t b)
{
    for (size_t i = hash_pair(a, b) & t->mask;; i = (i + 1) & t->mask) {
        pair_slot *s = &t->slots[i];
        if (s->a < 0 || (s->a == a && s->b == b))
            return s;
    }
}

/* ---- errors ---------------------------------------------------------------------- */

static const char *const load_fn = "fl_tokenizer_load";

static fl_status load_error(fl_status status, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static fl_status load_error(fl_status status, const char *path, const char *fmt, ...)
{
    char message[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    fl_error(status, load_fn, "'%s': %s", path, message);
    return status;
}

void fl_tokenizer_free(fl_tokenizer *tok)
{
    if (!tok)
        return;
    for (int64_t i = 0; tok->tokens && i < tok->count; i++) {
        free(tok->tokens[i].text);
        free(tok->tokens[i].bytes);
        free(tok->tokens[i].norm_text);
    }
    free(tok->tokens);
    free(tok->slots);
    free(tok->merges.slots);
    free(tok->added);
    free(tok->prefix);
    text_edit *lists[2] = {tok->normalizer, tok->decoder};
    size_t counts[2] = {tok->nnormalizer, tok->ndecoder};
    for (int k = 0; k < 2; k++) {
        for (size_t i = 0; i < counts[k]; i++) {
            free(lists[k][i].from), free(lists[k][i].to);
            text_charsmap_free(lists[k][i].charsmap);
        }
        free(lists[k]);
    }
    free(tok->metaspace);
    text_template_free(tok->post);
    text_unigram_free(tok->unigram);
    free(tok);
}

int64_t fl_tokenizer_vocab_size(const fl_tokenizer *tok) { return tok ? tok->count : 0; }

int64_t fl_tokenizer_token_to_id(const fl_tokenizer *tok, const char *text)
{
    return tok && text ? lookup(tok, text, strlen(text)) : -1;
}

const char *fl_tokenizer_id_to_token(const fl_tokenizer *tok, int64_t id)
{
    return tok && id >= 0 && id < tok->count ? tok->tokens[id].text : NULL;
}

/* ---- GPT-2's pre-tokenization ------------------------------------------------------ */

typedef struct chars {
    int32_t *cp;   /* code point, -1 for a byte outside valid UTF-8 */
    size_t *at;    /* byte offset of each character, and the end at [n] */
    size_t n;
} chars;

static bool split_chars(const unsigned char *s, size_t size, chars *c)
{
    c->cp = malloc((size + 1) * sizeof *c->cp);
    c->at = malloc((size + 1) * sizeof *c->at);
    c->n = 0;
    if (!c->cp || !c->at) {
        free(c->cp), free(c->at);
        return false;
    }
    for (size_t i = 0; i < size;) {
        size_t len;
        c->at[c->n] = i;
        c->cp[c->n++] = text_utf8_next(s + i, size - i, &len);
        i += len;
    }
    c->at[c->n] = size;
    return true;
}

enum { CLASS_SPACE, CLASS_LETTER, CLASS_NUMBER, CLASS_OTHER };

static int class_of(int32_t cp)
{
    if (text_is_whitespace(cp))
        return CLASS_SPACE;
    if (text_is_letter(cp))
        return CLASS_LETTER;
    if (text_is_number(cp))
        return CLASS_NUMBER;
    return CLASS_OTHER;
}

/* The end (a character index) of the regex's match at character i: the
 * alternatives are tried in order, each as greedy as a backtracking engine makes it. */
static size_t gpt2_match(const chars *c, size_t i)
{
    const int32_t *cp = c->cp;
    size_t n = c->n;
    if (cp[i] == '\'' && i + 1 < n) {
        int32_t x = cp[i + 1], y = i + 2 < n ? cp[i + 2] : 0;
        if (x == 's' || x == 't' || x == 'm' || x == 'd')
            return i + 2;
        if ((x == 'r' && y == 'e') || (x == 'v' && y == 'e') || (x == 'l' && y == 'l'))
            return i + 3;
    }
    size_t j = i;
    if (cp[i] == ' ' && i + 1 < n && class_of(cp[i + 1]) != CLASS_SPACE)
        j = i + 1;
    int k = class_of(cp[j]);
    if (k != CLASS_SPACE) { /* ' ?\p{L}+', ' ?\p{N}+' or ' ?[^\s\p{L}\p{N}]+' */
        while (j < n && class_of(cp[j]) == k)
            j++;
        return j;
    }
    size_t end = i;
    while (end < n && class_of(cp[end]) == CLASS_SPACE)
        end++;
    if (end == n || end - i == 1) /* '\s+(?!\S)' to the end, or '\s+' */
        return end;
    return end - 1; /* '\s+(?!\S)' backs off one, leaving it to prefix the next piece */
}

/* The Split regex of Llama 3's tokenizer.json, and Qwen2's (which has \p{N} where
 * Llama 3 has \p{N}{1,3}); pieces of no other regex are cut. */
static const char llama3_regex[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                                   "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char qwen2_regex[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                                  "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static bool is_newline(int32_t cp) { return cp == '\r' || cp == '\n'; }

/* cp as (?i) matches the contractions' letters: ASCII folded, and the long s. */
static int32_t folded(int32_t cp) { return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp == 0x17F ? 's' : cp; }

/* The end of llama3_regex's match at character i, with runs of at most `digits`
 * digits, as gpt2_match reads GPT-2's. */
static size_t llama3_match(const chars *c, size_t i, int digits)
{
    const int32_t *cp = c->cp;
    size_t n = c->n, j;
    if (cp[i] == '\'' && i + 1 < n) { /* (?i:'s|'t|'re|'ve|'m|'ll|'d) */
        int32_t x = folded(cp[i + 1]), y = i + 2 < n ? folded(cp[i + 2]) : 0;
        if (x == 's' || x == 't' || x == 'm' || x == 'd')
            return i + 2;
        if ((x == 'r' && y == 'e') || (x == 'v' && y == 'e') || (x == 'l' && y == 'l'))
            return i + 3;
    }
    int k = class_of(cp[i]);
    j = k != CLASS_LETTER && k != CLASS_NUMBER && !is_newline(cp[i]) ? i + 1 : i;
    if (j < n && class_of(cp[j]) == CLASS_LETTER) { /* [^\r\n\p{L}\p{N}]?\p{L}+ */
        while (j < n && class_of(cp[j]) == CLASS_LETTER)
            j++;
        return j;
    }
    if (k == CLASS_NUMBER) { /* \p{N}{1,digits} */
        for (j = i; j < n && j - i < (size_t)digits && class_of(cp[j]) == CLASS_NUMBER;)
            j++;
        return j;
    }
    j = cp[i] == ' ' && i + 1 < n && class_of(cp[i + 1]) == CLASS_OTHER ? i + 1 : i;
    if (class_of(cp[j]) == CLASS_OTHER) { /* ' ?[^\s\p{L}\p{N}]+[\r\n]*' */
        while (j < n && class_of(cp[j]) == CLASS_OTHER)
            j++;
        while (j < n && is_newline(cp[j]))
            j++;
        return j;
    }
    size_t end = i, newline_end = 0;
    for (; end < n && class_of(cp[end]) == CLASS_SPACE; end++)
        if (is_newline(cp[end]))
            newline_end = end + 1;
    if (newline_end) /* \s*[\r\n]+: to the run's last line break */
        return newline_end;
    if (end == n || end - i == 1) /* \s+(?!\S) to the end, or \s+ */
        return end;
    return end - 1;
}

/* The end of the pre-tokenizer's piece at character i. */
static size_t piece_end(const fl_tokenizer *tok, const chars *c, size_t i)
{
    return tok->digits ? llama3_match(c, i, tok->digits) : gpt2_match(c, i);
}

/* ---- byte-level BPE ---------------------------------------------------------------- */

/* A candidate merge of the symbols at pos and the next one, valid while they still
 * hold a and b. */
typedef struct candidate {
    int64_t rank, a, b, merged;
    size_t pos;
} candidate;

static bool candidate_before(const candidate *x, const candidate *y)
{
    return x->rank < y->rank || (x->rank == y->rank && x->pos < y->pos);
}

static void heap_push(candidate *heap, size_t *n, candidate c)
{
    size_t i = (*n)++;
    while (i > 0 && candidate_before(&c, &heap[(i - 1) / 2])) {
        heap[i] = heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    heap[i] = c;
}

static candidate heap_pop(candidate *heap, size_t *n)
{
    candidate top = heap[0], last = heap[--*n];
    size_t i = 0;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= *n)
            break;
        if (child + 1 < *n && candidate_before(&heap[child + 1], &heap[child]))
            child++;
        if (!candidate_before(&heap[child], &last))
            break;
        heap[i] = heap[child];
        i = child;
    }
    if (*n)
        heap[i] = last;
    return top;
}

static void push_pair(const fl_tokenizer *tok, candidate *heap, size_t *n, const int64_t *sym, size_t left,
                      size_t right)
{
    const pair_slot *s = pairs_find(&tok->merges, sym[left], sym[right]);
    if (s->a >= 0)
        heap_push(heap, n, (candidate){s->value, s->a, s->b, s->merged, left});
}

/* Applies the merges to symbols[0..n), lowest rank first (leftmost among equals),
 * in O(n log n): the symbols are a linked list, the adjacent pairs that have a merge
 * a heap, and a pair whose symbols changed since it was pushed is skipped. Returns
 * the new count, the symbols packed to the front; false if out of memory. */
static bool bpe_merge(const fl_tokenizer *tok, int64_t *sym, size_t *count)
{
    size_t n = *count, nheap = 0;
    if (n < 2)
        return true;
    size_t *next = malloc(n * sizeof *next), *prev = malloc(n * sizeof *prev);
    /* Each merge pushes at most two pairs: n - 1 first, and 2 per merge after. */
    candidate *heap = malloc(3 * n * sizeof *heap);
    if (!next || !prev || !heap) {
        free(next), free(prev), free(heap);
        return false;
    }
    for (size_t i = 0; i < n; i++)
        next[i] = i + 1, prev[i] = i - 1; /* prev[0] wraps to SIZE_MAX: none */
    for (size_t i = 0; i + 1 < n; i++)
        push_pair(tok, heap, &nheap, sym, i, i + 1);
    while (nheap) {
        candidate c = heap_pop(heap, &nheap);
        size_t right = next[c.pos];
        if (sym[c.pos] != c.a || right >= n || sym[right] != c.b)
            continue;
        sym[c.pos] = c.merged;
        sym[right] = -1;
        next[c.pos] = next[right];
        if (next[right] < n)
            prev[next[right]] = c.pos;
        if (prev[c.pos] < n)
            push_pair(tok, heap, &nheap, sym, prev[c.pos], c.pos);
        if (next[c.pos] < n)
            push_pair(tok, heap, &nheap, sym, c.pos, next[c.pos]);
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i = next[i])
        sym[k++] = sym[i];
    *count = k;
    free(next), free(prev), free(heap);
    return true;
}

/* size bytes of text in a normalization form, malloc'd, into *out and *out_size; a
 * byte that is not part of valid UTF-8 stays as it is. */
static bool form_bytes(const unsigned char *s, size_t size, text_form form, unsigned char **out, size_t *out_size)
{
    *out = NULL;
    if (size > SIZE_MAX / (4 * TEXT_FORM_GROWTH(form) * sizeof(int32_t)))
        return false;
    int32_t *cp = malloc(size * sizeof *cp + 1), *normal = NULL;
    size_t n = 0;
    for (size_t i = 0, len; cp && i < size; i += len) {
        int32_t c = text_utf8_next(s + i, size - i, &len);
        cp[n++] = c < 0 ? -1 - (int32_t)s[i] : c; /* negative: the byte itself, kept */
    }
    if (cp)
        normal = malloc(text_decomposed_length(cp, n, form) * sizeof *normal + 1);
    size_t m = cp && normal ? text_normalize(cp, n, normal, form) : 0;
    if (cp && normal && (*out = malloc(4 * m + 1))) {
        size_t w = 0;
        for (size_t k = 0; k < m; k++)
            w += normal[k] < 0 ? ((*out)[w] = (unsigned char)(-1 - normal[k]), 1)
                               : text_utf8_put((uint32_t)normal[k], *out + w);
        *out_size = w;
    }
    free(cp), free(normal);
    return *out != NULL;
}

/* Byte-level BPE of size bytes of (normalized) text: GPT-2's pieces, each merged. */
static bool bpe_pieces(const fl_tokenizer *tok, const unsigned char *s, size_t size, ids *out)
{
    unsigned char *copy = NULL;
    if (tok->add_prefix_space && size && s[0] != ' ') {
        if (!(copy = malloc(size + 1)))
            return false;
        copy[0] = ' ';
        memcpy(copy + 1, s, size);
        s = copy, size++;
    }
    chars c;
    int64_t *symbols = malloc((size + 1) * sizeof *symbols);
    bytes spelled = {0};
    bool ok = symbols && split_chars(s, size, &c);
    if (!ok) {
        free(copy), free(symbols);
        return false;
    }
    for (size_t i = 0; ok && i < c.n;) {
        size_t end = piece_end(tok, &c, i);
        const unsigned char *piece = s + c.at[i];
        size_t len = c.at[end] - c.at[i];
        int64_t whole = -1;
        if (tok->ignore_merges) {
            spelled.n = 0;
            for (size_t b = 0; ok && b < len; b++)
                ok = push_cp(&spelled, byte_char(piece[b]));
            whole = ok ? lookup(tok, spelled.v, spelled.n) : -1;
        }
        if (whole >= 0) {
            ok = push_id(out, whole);
        } else {
            for (size_t b = 0; b < len; b++)
                symbols[b] = tok->byte_id[piece[b]];
            size_t n = len;
            ok = bpe_merge(tok, symbols, &n);
            for (size_t k = 0; ok && k < n; k++)
                ok = push_id(out, symbols[k]);
        }
        i = end;
    }
    free(c.cp), free(c.at), free(symbols), free(copy), free(spelled.v);
    return ok;
}

/* Whether the bytes are all ASCII, which NFC leaves as they are. */
static bool is_ascii(const unsigned char *s, size_t size)
{
    for (size_t i = 0; i < size; i++)
        if (s[i] >= 0x80)
            return false;
    return true;
}

static bool file_normalize(const fl_tokenizer *tok, const unsigned char *s, size_t size, bytes *text);

/* Byte-level BPE of a segment, behind the file's normalization forms (GPT-NeoX's NFC;
 * load_bpe admits no other step), which leave ASCII as it is: most segments are read
 * in place, without a copy. */
static bool bpe_segment(const fl_tokenizer *tok, const unsigned char *s, size_t size, ids *out)
{
    if (!tok->nnormalizer || is_ascii(s, size))
        return bpe_pieces(tok, s, size, out);
    bytes normalized = {0};
    bool ok = file_normalize(tok, s, size, &normalized) && bpe_pieces(tok, normalized.v, normalized.n, out);
    free(normalized.v);
    return ok;
}

/* ---- added tokens ---------------------------------------------------------------- */

/* The start of the whitespace just before s[at] (not before from). */
static size_t whitespace_before(const unsigned char *s, size_t from, size_t at)
{
    size_t start = from;
    for (size_t i = from, len; i < at; i += len)
        if (!text_is_whitespace(text_utf8_next(s + i, at - i, &len)))
            start = i + len;
    return start;
}

/* The end of the whitespace that starts at s[at]. */
static size_t whitespace_after(const unsigned char *s, size_t size, size_t at)
{
    size_t len;
    while (at < size && text_is_whitespace(text_utf8_next(s + at, size - at, &len)))
        at += len;
    return at;
}

/* The text an added token is matched as (*len bytes), and whether in normalized text
 * (character BPE's tokens marked normalized, as their content normalized) or in the
 * raw text. */
static const char *added_text(const fl_tokenizer *tok, const token *t, size_t *len, bool *in_normalized)
{
    *in_normalized = (tok->model == MODEL_CHARACTER_BPE || tok->model == MODEL_UNIGRAM) && t->normalized;
    *len = *in_normalized ? t->norm_len : t->len;
    return *in_normalized ? t->norm_text : t->text;
}

/* The leftmost added token in s[from, size), the longest there (the first listed
 * among equals), of those matched in normalized text (normalized) or of those
 * matched in the raw text: its id and the span it takes, [start, stop), with the
 * whitespace it strips (not before from). */
static bool added_match(const fl_tokenizer *tok, const unsigned char *s, size_t size, size_t from, bool normalized,
                        size_t *start, size_t *stop, int64_t *id)
{
    for (size_t i = from; i < size; i++) {
        if (!tok->added_starts[normalized][s[i]])
            continue;
        int64_t best = -1;
        size_t best_len = 0;
        for (size_t k = 0; k < tok->nadded; k++) {
            size_t len;
            bool in_normalized;
            const char *text = added_text(tok, &tok->tokens[tok->added[k]], &len, &in_normalized);
            if (in_normalized == normalized && len > best_len && len <= size - i && memcmp(s + i, text, len) == 0)
                best = tok->added[k], best_len = len;
        }
        if (best >= 0) {
            const token *t = &tok->tokens[best];
            *start = t->lstrip ? whitespace_before(s, from, i) : i;
            *stop = t->rstrip ? whitespace_after(s, size, i + best_len) : i + best_len;
            *id = best;
            return true;
        }
    }
    return false;
}

/* ---- SentencePiece's BPE over characters --------------------------------------------- */

/* out = s with every occurrence of from (not empty) replaced by to, left to right; the
 * text between occurrences is copied a run at a time. */
static bool replace_all(bytes *out, const unsigned char *s, size_t size, const char *from, size_t from_len,
                        const char *to, size_t to_len)
{
    out->n = 0;
    bool ok = push_bytes(out, "", 0);
    size_t copied = 0; /* s[0, copied) is in out */
    for (size_t i = 0; ok && from_len && i + from_len <= size;) {
        const unsigned char *hit = memchr(s + i, from[0], size - from_len + 1 - i);
        if (!hit)
            break;
        i = (size_t)(hit - s);
        if (memcmp(hit, from, from_len) != 0) {
            i++;
            continue;
        }
        ok = push_bytes(out, s + copied, i - copied) && push_bytes(out, to, to_len);
        copied = i += from_len;
    }
    return ok && push_bytes(out, s + copied, size - copied);
}

/* Each run of at least e->start copies of e->from in s made e->to, into *out; the
 * text between runs is copied a run at a time, as replace_all's. */
static bool replace_runs(bytes *out, const unsigned char *s, size_t size, const text_edit *e)
{
    bool ok = push_bytes(out, "", 0);
    size_t copied = 0; /* s[0, copied) is in out */
    for (size_t i = 0; ok && i < size;) {
        const unsigned char *hit = memchr(s + i, e->from[0], size - i);
        if (!hit)
            break;
        size_t run = 0, at = (size_t)(hit - s);
        i = at;
        while (at + e->from_len <= size && memcmp(s + at, e->from, e->from_len) == 0)
            at += e->from_len, run++;
        if (run >= (size_t)e->start) {
            ok = push_bytes(out, s + copied, i - copied) && push_bytes(out, e->to, e->to_len);
            copied = at;
        }
        i = run ? at : i + 1;
    }
    return ok && push_bytes(out, s + copied, size - copied);
}

/* StripAccents (drop every mark, \p{M}) or Lowercase (each character's lowercase, as
 * Rust's char::to_lowercase) of s, into *out; a byte that is not part of valid UTF-8
 * stays as it is. The text between the characters that change is copied a run at a
 * time. */
static bool edit_characters(bytes *out, const unsigned char *s, size_t size, int kind)
{
    bool ok = push_bytes(out, "", 0), lower = kind == EDIT_LOWERCASE;
    size_t copied = 0; /* s[0, copied) is in out */
    for (size_t i = 0, len; ok && i < size; i += len) {
        len = 1;
        if (s[i] < 0x80 && !(lower && s[i] >= 'A' && s[i] <= 'Z'))
            continue; /* ASCII has no marks, and only capitals change case */
        int32_t cp = s[i] < 0x80 ? s[i] : text_utf8_next(s + i, size - i, &len);
        uint32_t to[4];
        int count = cp < 0 ? -1 : lower ? text_lowercase_of(cp, to) : text_is_mark(cp) ? 0 : -1;
        if (count < 0 || (count == 1 && to[0] == (uint32_t)cp))
            continue; /* kept as it is */
        ok = push_bytes(out, s + copied, i - copied);
        for (int k = 0; ok && k < count; k++) {
            unsigned char utf8[4];
            ok = push_bytes(out, utf8, text_utf8_put(to[k], utf8));
        }
        copied = i + len;
    }
    return ok && push_bytes(out, s + copied, size - copied);
}

/* s without its white space at the start (e->start) and the end (e->stop), into *out. */
static bool trim(bytes *out, const unsigned char *s, size_t size, const text_edit *e)
{
    size_t first = 0, end = 0, len;
    for (size_t i = 0; i < size; i += len)
        if (!text_is_whitespace(text_utf8_next(s + i, size - i, &len))) {
            if (end == 0)
                first = i;
            end = i + len;
        }
    if (end == 0) /* all white space */
        first = e->start ? size : 0, end = e->stop ? 0 : size;
    first = e->start ? first : 0, end = e->stop ? end : size;
    return push_bytes(out, s + first, end > first ? end - first : 0);
}

/* The file's normalizer steps (Prepend, Replace, Precompiled, the forms, StripAccents,
 * Lowercase, Strip) applied to s, into *text. */
static bool file_normalize(const fl_tokenizer *tok, const unsigned char *s, size_t size, bytes *text)
{
    bytes work = {0};
    text->n = 0;
    bool ok = push_bytes(text, s, size);
    for (size_t k = 0; ok && k < tok->nnormalizer; k++) {
        const text_edit *e = &tok->normalizer[k];
        if (e->kind == EDIT_PREPEND && !text->n)
            continue; /* Prepend leaves empty text empty */
        work.n = 0;
        if (e->kind == EDIT_PRECOMPILED || (e->kind == EDIT_FORM && !is_ascii(text->v, text->n))) {
            /* the output becomes the work buffer, not a copy of it */
            unsigned char *mapped;
            size_t n;
            ok = e->kind == EDIT_PRECOMPILED ? text_charsmap_normalize(e->charsmap, text->v, text->n, &mapped, &n)
                                             : form_bytes(text->v, text->n, (text_form)e->start, &mapped, &n);
            if (ok) {
                free(work.v);
                work = (bytes){mapped, n, n + 1};
            }
        } else if (e->kind == EDIT_FORM) {
            continue; /* every form leaves ASCII as it is */
        } else if (e->kind == EDIT_STRIP_ACCENTS || e->kind == EDIT_LOWERCASE) {
            ok = edit_characters(&work, text->v, text->n, e->kind);
        } else {
            ok = e->kind == EDIT_PREPEND ? push_bytes(&work, e->to, e->to_len) && push_bytes(&work, text->v, text->n)
                 : e->kind == EDIT_REPLACE_RUNS ? replace_runs(&work, text->v, text->n, e)
                 : e->kind == EDIT_TRIM
                     ? trim(&work, text->v, text->n, e)
                     : replace_all(&work, text->v, text->n, e->from, e->from_len, e->to, e->to_len);
        }
        bytes swap = *text;
        *text = work, work = swap;
    }
    free(work.v);
    return ok;
}

/* The Metaspace pre-tokenizer: spaces made its replacement, and the replacement put
 * before text that starts the input (PREPEND_FIRST) or any text (PREPEND_ALWAYS) not
 * already starting with it; into *text. */
static bool metaspace_text(const fl_tokenizer *tok, const unsigned char *s, size_t size, bool starts_text,
                           bytes *text)
{
    size_t mark = tok->metaspace_len;
    bool ok = replace_all(text, s, size, " ", 1, tok->metaspace, mark);
    bool prepend = tok->prepend_scheme == PREPEND_ALWAYS || (tok->prepend_scheme == PREPEND_FIRST && starts_text);
    bool marked = text->n >= mark && memcmp(text->v, tok->metaspace, mark) == 0;
    if (ok && prepend && !marked && (ok = push_bytes(text, tok->metaspace, mark))) {
        memmove(text->v + mark, text->v, text->n - mark);
        memcpy(text->v, tok->metaspace, mark);
    }
    return ok;
}

/* One piece: its characters' tokens (a character the vocabulary lacks as its bytes'
 * tokens with byte fallback, else the unknown token, a run of them one token with
 * fuse_unk), merged. False if out of memory; *unknown is set to the offset in the
 * piece of a character with no token when there is no unknown token either. */
static bool character_bpe_piece(const fl_tokenizer *tok, const unsigned char *s, size_t size, ids *out,
                                int64_t *symbols, size_t *unknown)
{
    int64_t whole = tok->ignore_merges ? lookup(tok, s, size) : -1;
    if (whole >= 0)
        return push_id(out, whole);
    size_t n = 0;
    bool last_unknown = false;
    for (size_t i = 0, len; i < size; i += len) {
        text_utf8_next(s + i, size - i, &len);
        int64_t id = lookup(tok, s + i, len);
        bool bytes_known = tok->byte_fallback;
        for (size_t b = 0; id < 0 && bytes_known && b < len; b++)
            bytes_known = tok->byte_id[s[i + b]] >= 0;
        if (id >= 0 || bytes_known) {
            if (id >= 0)
                symbols[n++] = id;
            else
                for (size_t b = 0; b < len; b++)
                    symbols[n++] = tok->byte_id[s[i + b]];
            last_unknown = false;
            continue;
        }
        if (tok->unk < 0) {
            *unknown = i;
            return true;
        }
        if (!(last_unknown && tok->fuse_unk))
            symbols[n++] = tok->unk;
        last_unknown = true;
    }
    bool ok = bpe_merge(tok, symbols, &n);
    for (size_t k = 0; ok && k < n; k++)
        ok = push_id(out, symbols[k]);
    return ok;
}

/* One piece through the Unigram model: its best segmentation, a run of unknown
 * characters as the token its text spells where there is one (the library looks the
 * fused text up), else as its bytes' tokens with byte fallback, else the unknown
 * token. *unknown as character_bpe_piece's. */
static bool unigram_piece(const fl_tokenizer *tok, const unsigned char *s, size_t size, ids *out, size_t *unknown)
{
    /* a piece has at most one token a byte: a word's fit on the stack */
    text_unigram_token word[64], *t = size <= 64 ? word : malloc(size * sizeof *t);
    size_t n;
    if (!t || !text_unigram_segment(tok->unigram, s, size, t, &n, unknown)) {
        if (t != word)
            free(t);
        return false;
    }
    bool ok = true;
    for (size_t k = 0; ok && k < n; k++) {
        const unsigned char *p = s + t[k].start;
        size_t len = t[k].end - t[k].start;
        int64_t id = t[k].id >= 0 ? t[k].id : lookup(tok, p, len);
        bool bytes_known = id < 0 && tok->byte_fallback;
        for (size_t b = 0; bytes_known && b < len; b++)
            bytes_known = tok->byte_id[p[b]] >= 0;
        for (size_t b = 0; bytes_known && ok && b < len; b++)
            ok = push_id(out, tok->byte_id[p[b]]);
        if (!bytes_known)
            ok = push_id(out, id >= 0 ? id : tok->unk);
    }
    if (t != word)
        free(t);
    return ok;
}

/* The first character of a text that has no token, no byte tokens and no unknown
 * token to stand for it. */
typedef struct uncovered {
    bool found;
    unsigned char utf8[4]; /* the character, or one byte outside valid UTF-8 */
    size_t len;
} uncovered;

/* One word (all of a run, without WhitespaceSplit): the Metaspace pre-tokenizer's
 * pieces, each through the model, until a character the vocabulary cannot cover,
 * which goes to *missing. spaced holds the Metaspace text, kept from word to word. */
static bool metaspace_word(const fl_tokenizer *tok, const unsigned char *s, size_t size, bool starts_text,
                           ids *out, uncovered *missing, bytes *spaced)
{
    bool ok = !tok->metaspace || metaspace_text(tok, s, size, starts_text, spaced);
    const unsigned char *text = tok->metaspace ? spaced->v : s;
    size_t n = tok->metaspace ? spaced->n : size;
    /* character BPE's symbols; the Unigram needs none */
    bool bpe = tok->model != MODEL_UNIGRAM;
    int64_t *symbols = ok && bpe ? malloc((n + 1) * sizeof *symbols) : NULL;
    size_t where = SIZE_MAX;
    ok = ok && (symbols || !bpe);
    /* Metaspace with split: a piece begins at each replacement (which it keeps). */
    for (size_t from = 0; ok && from < n && where == SIZE_MAX;) {
        size_t end = n;
        for (size_t i = from + 1; tok->metaspace && tok->metaspace_split && i + tok->metaspace_len <= n; i++)
            if (memcmp(text + i, tok->metaspace, tok->metaspace_len) == 0) {
                end = i;
                break;
            }
        ok = tok->model == MODEL_UNIGRAM ? unigram_piece(tok, text + from, end - from, out, &where)
                                         : character_bpe_piece(tok, text + from, end - from, out, symbols, &where);
        if (where != SIZE_MAX) {
            missing->found = true;
            text_utf8_next(text + from + where, n - from - where, &missing->len);
            memcpy(missing->utf8, text + from + where, missing->len);
        }
        from = end;
    }
    free(symbols);
    return ok;
}

/* A run of text the model takes whole (after the normalizer, between added tokens):
 * with WhitespaceSplit, each word between white space on its own (only a word at the
 * run's very start begins the text), else the whole run; missing as
 * metaspace_word's. */
static bool character_bpe_run(const fl_tokenizer *tok, const unsigned char *s, size_t size, bool starts_text,
                              ids *out, uncovered *missing)
{
    bytes spaced = {0};
    bool ok = true;
    if (!tok->whitespace_split) {
        ok = metaspace_word(tok, s, size, starts_text, out, missing, &spaced);
        free(spaced.v);
        return ok;
    }
    for (size_t i = 0, len, word = SIZE_MAX; ok && !missing->found && i <= size; i += len) {
        bool white = i == size || text_is_whitespace(text_utf8_next(s + i, size - i, &len));
        if (i == size)
            len = 1;
        if (!white && word == SIZE_MAX)
            word = i;
        if (white && word != SIZE_MAX) {
            ok = metaspace_word(tok, s + word, i - word, starts_text && word == 0, out, missing, &spaced);
            word = SIZE_MAX;
        }
    }
    free(spaced.v);
    return ok;
}

/* A segment between the added tokens matched in the raw text; starts_text: it begins
 * the text. Normalized, then split again at the added tokens matched in normalized
 * text, each run between them tokenized; missing as character_bpe_run's. */
static bool character_bpe_segment(const fl_tokenizer *tok, const unsigned char *s, size_t size, bool starts_text,
                                  ids *out, uncovered *missing)
{
    bytes normalized = {0}; /* where the file has a normalizer */
    bool ok = !tok->nnormalizer || file_normalize(tok, s, size, &normalized);
    const unsigned char *text = tok->nnormalizer ? normalized.v : s;
    size_t n = tok->nnormalizer ? normalized.n : size, from = 0, start = 0, stop = 0;
    int64_t id = -1;
    while (ok && !missing->found && from < n) {
        bool found = added_match(tok, text, n, from, true, &start, &stop, &id);
        size_t end = found ? start : n;
        if (end > from)
            ok = character_bpe_run(tok, text + from, end - from, starts_text && from == 0, out, missing);
        ok = ok && (!found || missing->found || push_id(out, id));
        from = found ? stop : n;
    }
    free(normalized.v);
    return ok;
}

/* ---- BERT's normalizer, pre-tokenizer and WordPiece --------------------------------- */

static bool is_chinese(int32_t cp)
{
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
           (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
           (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

static bool is_bert_punctuation(int32_t cp)
{
    return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) || (cp >= 123 && cp <= 126) ||
           text_is_punctuation(cp);
}

typedef struct cps {
    uint32_t *v;
    size_t n, cap;
} cps;

static bool push_u(cps *s, uint32_t cp)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        uint32_t *v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return false;
        s->v = v, s->cap = cap;
    }
    s->v[s->n++] = cp;
    return true;
}

/* BertNormalizer, in its order: clean the text, space out CJK ideographs, strip
 * accents (decompose, drop nonspacing marks), lowercase. */
static bool bert_normalize(const fl_tokenizer *tok, const unsigned char *s, size_t size, cps *out)
{
    cps a = {0};
    bool ok = true;
    for (size_t i = 0; ok && i < size;) {
        size_t len;
        int32_t cp = text_utf8_next(s + i, size - i, &len);
        i += len;
        if (cp < 0)
            cp = 0xFFFD;
        if (!tok->bert_normalizer) {
            ok = push_u(&a, (uint32_t)cp);
            continue;
        }
        if (tok->clean_text) {
            bool space = cp == '\t' || cp == '\n' || cp == '\r' || text_is_whitespace(cp);
            if (cp == 0 || cp == 0xFFFD || (!space && text_is_other(cp)))
                continue;
            if (space)
                cp = ' ';
        }
        if (tok->chinese_chars && is_chinese(cp))
            ok = push_u(&a, ' ') && push_u(&a, (uint32_t)cp) && push_u(&a, ' ');
        else
            ok = push_u(&a, (uint32_t)cp);
    }
    for (size_t i = 0; ok && i < a.n; i++) {
        uint32_t d[4], l[4];
        int nd = 1;
        d[0] = a.v[i];
        if (tok->bert_normalizer && tok->strip_accents)
            nd = text_decompose((int32_t)a.v[i], d);
        for (int k = 0; ok && k < nd; k++) {
            if (tok->bert_normalizer && tok->strip_accents && text_is_nonspacing_mark((int32_t)d[k]))
                continue;
            int nl = 1;
            l[0] = d[k];
            if (tok->bert_normalizer && tok->lowercase)
                nl = text_lowercase_of((int32_t)d[k], l);
            for (int m = 0; ok && m < nl; m++)
                ok = push_u(out, l[m]);
        }
    }
    free(a.v);
    return ok;
}

/* One word (code points w[0..n)) by WordPiece: the longest vocabulary prefix, then
 * the longest "##"-continuations; the unknown token if the word cannot be covered. */
static bool wordpiece_word(const fl_tokenizer *tok, const uint32_t *w, size_t n, ids *out, bytes *scratch)
{
    if ((int64_t)n > tok->max_chars)
        return push_id(out, tok->unk);
    size_t first = out->n;
    for (size_t start = 0; start < n;) {
        int64_t found = -1;
        size_t end = n - start > tok->longest ? start + tok->longest : n;
        for (; end > start; end--) {
            scratch->n = 0;
            if (start > 0 && !push_bytes(scratch, tok->prefix, tok->prefix_len))
                return false;
            for (size_t k = start; k < end; k++)
                if (!push_cp(scratch, w[k]))
                    return false;
            if ((found = lookup(tok, scratch->v, scratch->n)) >= 0)
                break;
        }
        if (found < 0) {
            out->n = first;
            return push_id(out, tok->unk);
        }
        if (!push_id(out, found))
            return false;
        start = end;
    }
    return true;
}

static bool wordpiece_segment(const fl_tokenizer *tok, const unsigned char *s, size_t size, ids *out)
{
    cps text = {0};
    bytes scratch = {0}, normalized = {0};
    bool ok = !tok->nnormalizer || file_normalize(tok, s, size, &normalized);
    ok = ok && bert_normalize(tok, tok->nnormalizer ? normalized.v : s, tok->nnormalizer ? normalized.n : size, &text);
    free(normalized.v);
    size_t start = 0;
    for (size_t i = 0; ok && i <= text.n; i++) {
        int32_t cp = i < text.n ? (int32_t)text.v[i] : ' ';
        bool space = text_is_whitespace(cp), punct = !space && is_bert_punctuation(cp);
        if (!space && !punct)
            continue;
        if (i > start)
            ok = wordpiece_word(tok, text.v + start, i - start, out, &scratch);
        if (ok && punct)
            ok = wordpiece_word(tok, text.v + i, 1, out, &scratch);
        start = i + 1;
    }
    free(text.v), free(scratch.v);
    return ok;
}

/* ---- encode and decode ------------------------------------------------------------- */

/* Tokenizes the segment of the text at offset `at` between added tokens into out:
 * FL_OK, else an error, set. */
static fl_status encode_segment(const fl_tokenizer *tok, const unsigned char *s, size_t size, size_t at, ids *out)
{
    static const char *const fn = "fl_tokenizer_encode";
    uncovered missing = {0};
    bool ok = !size || (tok->model == MODEL_BPE         ? bpe_segment(tok, s, size, out)
                        : tok->model == MODEL_WORDPIECE ? wordpiece_segment(tok, s, size, out)
                                                        : character_bpe_segment(tok, s, size, at == 0, out, &missing));
    if (!ok) {
        fl_error(FL_ERR_MEMORY, fn, "out of memory encoding %zu bytes", size);
        return FL_ERR_MEMORY;
    }
    if (missing.found) {
        int32_t cp = text_utf8_next(missing.utf8, missing.len, &(size_t){0});
        if (cp < 0)
            fl_error(FL_ERR_VALUE, fn, "byte 0x%02X in the text from offset %zu has no token, no byte token and "
                     "the vocabulary no unk_token", missing.utf8[0], at);
        else
            fl_error(FL_ERR_VALUE, fn, "character U+%04X '%.*s' in the text from offset %zu has no token, no byte "
                     "tokens and the vocabulary no unk_token", (unsigned)cp, (int)missing.len, missing.utf8, at);
        return FL_ERR_VALUE;
    }
    return FL_OK;
}

fl_status fl_tokenizer_encode(const fl_tokenizer *tok, const void *text, size_t size, int64_t **result,
                              size_t *count)
{
    static const char *const fn = "fl_tokenizer_encode";
    if (result)
        *result = NULL;
    if (count)
        *count = 0;
    if (!tok || (!text && size) || !result || !count) {
        fl_error(FL_ERR_NULL, fn, "%s is NULL", !tok ? "the tokenizer" : !result ? "ids" : !count ? "count" : "text");
        return FL_ERR_NULL;
    }
    const unsigned char *s = text;
    for (size_t i = 0; tok->model == MODEL_BPE && tok->bytes_missing && i < size; i++)
        if (tok->byte_id[s[i]] < 0) {
            fl_error(FL_ERR_VALUE, fn, "byte 0x%02X at offset %zu (not valid UTF-8) has no token in this vocabulary",
                     s[i], i);
            return FL_ERR_VALUE;
        }
    ids out = {0};
    fl_status st = FL_OK;
    for (size_t from = 0, start = 0, stop = 0; st == FL_OK;) {
        int64_t id = -1;
        bool found = added_match(tok, s, size, from, false, &start, &stop, &id);
        st = encode_segment(tok, s + from, (found ? start : size) - from, from, &out);
        if (!found || st != FL_OK)
            break;
        if (!push_id(&out, id)) {
            fl_error(FL_ERR_MEMORY, fn, "out of memory encoding %zu bytes", size);
            st = FL_ERR_MEMORY;
        }
        from = stop;
    }
    if (st != FL_OK) {
        free(out.v);
        return st;
    }
    *result = out.n ? out.v : NULL;
    if (!out.n)
        free(out.v);
    *count = out.n;
    return FL_OK;
}

fl_tensor *fl_tokenizer_encode_tensor(const fl_tokenizer *tok, const void *text, size_t size)
{
    int64_t *v;
    size_t n;
    if (fl_tokenizer_encode(tok, text, size, &v, &n) != FL_OK)
        return NULL;
    int64_t shape[1] = {(int64_t)n}, none = 0;
    fl_tensor *t = fl_from_data(n ? (const void *)v : (const void *)&none, FL_I64, 1, shape);
    free(v);
    return t;
}

fl_status fl_tokenizer_encode_special(const fl_tokenizer *tok, const void *text, size_t size, const void *pair,
                                      size_t pair_size, int64_t **out_ids, int64_t **type_ids, size_t *count)
{
    static const char *const fn = "fl_tokenizer_encode_special";
    if (out_ids)
        *out_ids = NULL;
    if (type_ids)
        *type_ids = NULL;
    if (count)
        *count = 0;
    if (!tok || (!text && size) || !out_ids || !count) {
        fl_error(FL_ERR_NULL, fn, "%s is NULL", !tok ? "the tokenizer" : !out_ids ? "ids" : !count ? "count" : "text");
        return FL_ERR_NULL;
    }
    int64_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    fl_status st = fl_tokenizer_encode(tok, text, size, &a, &na);
    if (st == FL_OK && pair)
        st = fl_tokenizer_encode(tok, pair, pair_size, &b, &nb);
    if (st == FL_OK)
        st = text_template_apply(tok->post, fn, a, na, b, pair != NULL, nb, out_ids, type_ids, count);
    free(a), free(b);
    return st;
}

/* The WordPiece decoder's cleanup of a token (with its leading space). */
static bool cleanup_append(bytes *out, const char *t, size_t len)
{
    static const char *const from[] = {" .", " ?", " !", " ,", " ' ", " n't", " 'm", " do not", " 's", " 've", " 're"};
    static const char *const to[] = {".", "?", "!", ",", "'", "n't", "'m", " don't", "'s", "'ve", "'re"};
    bytes cur = {0}, next = {0};
    bool ok = push_bytes(&cur, t, len);
    for (size_t r = 0; ok && r < sizeof from / sizeof *from; r++) {
        ok = replace_all(&next, cur.v, cur.n, from[r], strlen(from[r]), to[r], strlen(to[r]));
        bytes swap = cur;
        cur = next, next = swap;
    }
    ok = ok && push_bytes(out, cur.v, cur.n);
    free(cur.v), free(next.v);
    return ok;
}

/* The byte a byte-fallback token "<0xHH>" stands for, or -1. */
static int fallback_byte(const unsigned char *t, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    const char *hi = len == 6 && memcmp(t, "<0x", 3) == 0 && t[5] == '>' && t[3] ? strchr(hex, t[3]) : NULL;
    const char *lo = hi && t[4] ? strchr(hex, t[4]) : NULL;
    return lo ? (int)((hi - hex) * 16 + (lo - hex)) : -1;
}

/* One decoder step on one token's text *p, the i-th of the list (work: scratch). */
static bool decoder_step(const text_edit *e, size_t i, bytes *p, bytes *work)
{
    if (e->kind == EDIT_REPLACE || e->kind == EDIT_METASPACE) {
        /* Metaspace: the replacement is a space, and nothing in the first token where
         * the encoder put it before the text. */
        bool drop = e->kind == EDIT_METASPACE && i == 0 && e->start;
        const char *to = drop ? "" : e->kind == EDIT_REPLACE ? e->to : " ";
        size_t to_len = drop ? 0 : e->kind == EDIT_REPLACE ? e->to_len : 1;
        bool ok = replace_all(work, p->v, p->n, e->from, e->from_len, to, to_len);
        bytes swap = *p;
        *p = *work, *work = swap;
        return ok;
    }
    int b = e->kind == EDIT_BYTE_FALLBACK ? fallback_byte(p->v, p->n) : -1;
    if (b >= 0) {
        p->v[0] = (unsigned char)b, p->n = 1;
        p->v[1] = 0; /* still NUL-terminated, as push_bytes leaves it */
    } else if (e->kind == EDIT_STRIP) {
        size_t head = 0, tail = p->n;
        for (int64_t c = 0; c < e->start && tail - head >= e->from_len &&
                            memcmp(p->v + head, e->from, e->from_len) == 0; c++)
            head += e->from_len;
        for (int64_t c = 0; c < e->stop && tail - head >= e->from_len &&
                            memcmp(p->v + tail - e->from_len, e->from, e->from_len) == 0; c++)
            tail -= e->from_len;
        memmove(p->v, p->v + head, tail - head);
        p->n = tail - head;
        p->v[p->n] = 0;
    }
    return true;
}

/* Runs the decoder's steps over the tokens' spellings, as the tokenizers library's
 * decoders do (each step maps the list of strings), and joins what is left. Every step
 * before the first Fuse maps each token alone, so each token goes through them in turn
 * and is appended to out; the steps after it map the one string Fuse leaves, out
 * itself. Byte fallback tokens become their bytes, so decoding gives back the bytes
 * encoded where the library's lossy UTF-8 would put U+FFFD in place of invalid ones. */
static bool character_bpe_decode(const fl_tokenizer *tok, const int64_t *id, size_t count, bytes *out)
{
    size_t fuse = 0;
    while (fuse < tok->ndecoder && tok->decoder[fuse].kind != EDIT_FUSE)
        fuse++;
    bytes piece = {0}, work = {0};
    bool ok = true;
    for (size_t i = 0; ok && i < count; i++) {
        /* An added token matched in normalized text is its normalized content here, as
         * the library decodes it (Llama 2's "<s>" as "\u2581<s>", a space after the
         * decoder's Replace). */
        const token *t = &tok->tokens[id[i]];
        piece.n = 0;
        ok = t->norm_text ? push_bytes(&piece, t->norm_text, t->norm_len) : push_bytes(&piece, t->text, t->len);
        for (size_t k = 0; ok && k < fuse; k++)
            ok = decoder_step(&tok->decoder[k], i, &piece, &work);
        ok = ok && push_bytes(out, piece.v, piece.n);
    }
    for (size_t k = fuse + 1; ok && k < tok->ndecoder; k++)
        ok = decoder_step(&tok->decoder[k], 0, out, &work);
    free(piece.v), free(work.v);
    return ok;
}

fl_status fl_tokenizer_decode(const fl_tokenizer *tok, const int64_t *id, size_t count, char **text, size_t *size)
{
    static const char *const fn = "fl_tokenizer_decode";
    if (text)
        *text = NULL;
    if (size)
        *size = 0;
    if (!tok || (!id && count) || !text || !size) {
        fl_error(FL_ERR_NULL, fn, "%s is NULL", !tok ? "the tokenizer" : !text ? "text" : !size ? "size" : "ids");
        return FL_ERR_NULL;
    }
    for (size_t i = 0; i < count; i++)
        if (id[i] < 0 || id[i] >= tok->count || !tok->tokens[id[i]].text) {
            fl_error(FL_ERR_INDEX, fn, "id %lld at position %zu %s (vocabulary size %lld)", (long long)id[i], i,
                     id[i] < 0 || id[i] >= tok->count ? "is out of range" : "names no token", (long long)tok->count);
            return FL_ERR_INDEX;
        }
    bytes out = {0};
    bool ok = push_bytes(&out, "", 0);
    bool characters = tok->model == MODEL_CHARACTER_BPE || tok->model == MODEL_UNIGRAM;
    if (characters)
        ok = ok && character_bpe_decode(tok, id, count, &out);
    for (size_t i = 0; ok && !characters && i < count; i++) {
        const token *t = &tok->tokens[id[i]];
        if (tok->model == MODEL_BPE) {
            ok = push_bytes(&out, t->bytes, t->nbytes);
            continue;
        }
        bytes piece = {0};
        if (i > 0 && t->len >= tok->prefix_len && memcmp(t->text, tok->prefix, tok->prefix_len) == 0)
            ok = push_bytes(&piece, t->text + tok->prefix_len, t->len - tok->prefix_len);
        else
            ok = (i == 0 || push_bytes(&piece, " ", 1)) && push_bytes(&piece, t->text, t->len);
        ok = ok && cleanup_append(&out, (const char *)piece.v, piece.n);
        free(piece.v);
    }
    if (!ok) {
        free(out.v);
        fl_error(FL_ERR_MEMORY, fn, "out of memory decoding %zu ids", count);
        return FL_ERR_MEMORY;
    }
    *text = (char *)out.v;
    *size = out.n;
    return FL_OK;
}

/* ---- the trainer ------------------------------------------------------------------- */

static fl_tokenizer *byte_level_base(int64_t capacity)
{
    fl_tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok || !(tok->tokens = calloc((size_t)capacity, sizeof *tok->tokens))) {
        free(tok);
        return NULL;
    }
    tok->model = MODEL_BPE;
    /* Ids in the order of the bytes' characters, as the tokenizers trainer sorts its
     * alphabet. */
    unsigned order[256];
    for (unsigned b = 0; b < 256; b++)
        order[b] = b;
    for (unsigned i = 1; i < 256; i++)
        for (unsigned j = i; j > 0 && byte_char(order[j - 1]) > byte_char(order[j]); j--) {
            unsigned t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
    for (int64_t id = 0; id < 256; id++) {
        unsigned char u[4], b = (unsigned char)order[id];
        size_t n = text_utf8_put(byte_char(b), u);
        token *t = &tok->tokens[id];
        t->text = malloc(n + 1), t->bytes = malloc(1);
        tok->count = id + 1;
        if (!t->text || !t->bytes) {
            fl_tokenizer_free(tok);
            return NULL;
        }
        memcpy(t->text, u, n);
        t->text[n] = 0, t->len = n;
        t->bytes[0] = b, t->nbytes = 1;
        tok->byte_id[b] = id;
    }
    return tok;
}

typedef struct word {
    size_t at, len;  /* in the text */
    int64_t count;
    size_t first, n; /* its symbols */
} word;

/* The trainer's pairs: how often each adjacent pair occurs in the words (each word
 * weighted by its count), and which words hold it (a word may be listed more than
 * once, or no longer hold it: it is looked at again when the pair is merged). */
typedef struct tpair {
    int64_t a, b; /* a < 0: empty */
    int64_t count;
    size_t *words, nwords, cap;
    uint64_t stamp; /* the merge that last raised the count */
} tpair;

typedef struct trainer {
    tpair *slots;
    size_t mask, used;
    int64_t (*heap)[3]; /* count, a, b: a max-heap by count, then the smaller pair */
    size_t nheap, heap_cap;
} trainer;

static tpair *tpair_find(const trainer *t, int64_t a, int64_t b)
{
    for (size_t i = hash_pair(a, b) & t->mask;; i = (i + 1) & t->mask) {
        tpair *p = &t->slots[i];
        if (p->a < 0 || (p->a == a && p->b == b))
            return p;
    }
}

/* The pair (a, b), added (count 0) if new; NULL if out of memory. */
static tpair *tpair_get(trainer *t, int64_t a, int64_t b)
{
    tpair *p = tpair_find(t, a, b);
    if (p->a >= 0)
        return p;
    if (2 * (t->used + 1) > t->mask + 1) {
        size_t size = 2 * (t->mask + 1);
        tpair *old = t->slots, *slots = malloc(size * sizeof *slots);
        if (!slots)
            return NULL;
        for (size_t i = 0; i < size; i++)
            slots[i].a = -1;
        size_t old_size = t->mask + 1;
        t->slots = slots, t->mask = size - 1;
        for (size_t i = 0; i < old_size; i++)
            if (old[i].a >= 0)
                *tpair_find(t, old[i].a, old[i].b) = old[i];
        free(old);
        p = tpair_find(t, a, b);
    }
    *p = (tpair){a, b, 0, NULL, 0, 0, 0};
    t->used++;
    return p;
}

static bool heap_before(const int64_t *x, const int64_t *y)
{
    return x[0] > y[0] || (x[0] == y[0] && (x[1] < y[1] || (x[1] == y[1] && x[2] < y[2])));
}

static bool trainer_push(trainer *t, const tpair *p)
{
    if (t->nheap == t->heap_cap) {
        size_t cap = t->heap_cap ? 2 * t->heap_cap : 1024;
        int64_t(*heap)[3] = realloc(t->heap, cap * sizeof *heap);
        if (!heap)
            return false;
        t->heap = heap, t->heap_cap = cap;
    }
    int64_t e[3] = {p->count, p->a, p->b};
    size_t i = t->nheap++;
    while (i > 0 && heap_before(e, t->heap[(i - 1) / 2])) {
        memcpy(t->heap[i], t->heap[(i - 1) / 2], sizeof e);
        i = (i - 1) / 2;
    }
    memcpy(t->heap[i], e, sizeof e);
    return true;
}

static void trainer_pop(trainer *t, int64_t top[3])
{
    memcpy(top, t->heap[0], 3 * sizeof *top);
    int64_t *last = t->heap[--t->nheap];
    size_t i = 0;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= t->nheap)
            break;
        if (child + 1 < t->nheap && heap_before(t->heap[child + 1], t->heap[child]))
            child++;
        if (!heap_before(t->heap[child], last))
            break;
        memcpy(t->heap[i], t->heap[child], 3 * sizeof *top);
        i = child;
    }
    if (t->nheap)
        memmove(t->heap[i], last, 3 * sizeof *top);
}

/* Adds sign * the word's count to each of its pairs; listing the word under each when
 * adding, and stamping the pairs that hold the new token (to push once the merge is
 * done). */
static bool count_word(trainer *t, const int64_t *sym, const word *w, size_t index, int64_t sign, int64_t fresh,
                       uint64_t stamp, int64_t **raised, size_t *nraised, size_t *raised_cap)
{
    for (size_t k = 0; k + 1 < w->n; k++) {
        tpair *p = tpair_get(t, sym[k], sym[k + 1]);
        if (!p)
            return false;
        p->count += sign * w->count;
        if (sign < 0)
            continue;
        if (p->nwords == p->cap) {
            size_t cap = p->cap ? 2 * p->cap : 4;
            size_t *v = realloc(p->words, cap * sizeof *v);
            if (!v)
                return false;
            p->words = v, p->cap = cap;
        }
        p->words[p->nwords++] = index;
        if ((sym[k] == fresh || sym[k + 1] == fresh) && p->stamp != stamp) {
            p->stamp = stamp;
            if (*nraised == *raised_cap) {
                size_t cap = *raised_cap ? 2 * *raised_cap : 64;
                int64_t *v = realloc(*raised, 2 * cap * sizeof *v);
                if (!v)
                    return false;
                *raised = v, *raised_cap = cap;
            }
            /* Slots move when the table grows: the pair is found again later. */
            (*raised)[2 * *nraised] = sym[k], (*raised)[2 * *nraised + 1] = sym[k + 1];
            ++*nraised;
        }
    }
    return true;
}

/* Merges until vocab_size tokens: each time the pair of highest count (ties to the
 * smaller ids), found on a heap whose stale entries are only ever too high (merging
 * lowers the counts of existing pairs; only pairs with the new token rise, and those
 * are pushed after the merge), so the first entry whose count is current wins. */
static bool learn_merges(fl_tokenizer *tok, int64_t *symbols, word *words, size_t nwords, int64_t vocab_size,
                         int64_t min_frequency)
{
    trainer t = {0};
    size_t size = 1024, nraised = 0, raised_cap = 0;
    int64_t *raised = NULL;
    bool ok = (t.slots = malloc(size * sizeof *t.slots)) != NULL;
    if (ok) {
        t.mask = size - 1;
        for (size_t i = 0; i < size; i++)
            t.slots[i].a = -1;
    }
    for (size_t w = 0; ok && w < nwords; w++)
        ok = count_word(&t, symbols + words[w].first, &words[w], w, 1, -1, 0, &raised, &nraised, &raised_cap);
    for (size_t i = 0; ok && i <= t.mask; i++)
        if (t.slots[i].a >= 0)
            ok = trainer_push(&t, &t.slots[i]);
    int64_t rank = 0;
    uint64_t stamp = 0;
    while (ok && tok->count < vocab_size && t.nheap) {
        int64_t top[3];
        trainer_pop(&t, top);
        tpair *p = tpair_find(&t, top[1], top[2]);
        if (top[0] != p->count) {
            if (p->count > 0)
                ok = trainer_push(&t, p);
            continue;
        }
        if (p->count < min_frequency || p->count < 1)
            break;
        int64_t a = p->a, b = p->b, id = tok->count;
        const token *ta = &tok->tokens[a], *tb = &tok->tokens[b];
        token *nt = &tok->tokens[id];
        nt->text = malloc(ta->len + tb->len + 1), nt->bytes = malloc(ta->nbytes + tb->nbytes);
        tok->count++;
        if (!(ok = nt->text && nt->bytes))
            break;
        memcpy(nt->text, ta->text, ta->len);
        memcpy(nt->text + ta->len, tb->text, tb->len);
        nt->len = ta->len + tb->len, nt->text[nt->len] = 0;
        memcpy(nt->bytes, ta->bytes, ta->nbytes);
        memcpy(nt->bytes + ta->nbytes, tb->bytes, tb->nbytes);
        nt->nbytes = ta->nbytes + tb->nbytes;
        *pairs_find(&tok->merges, a, b) = (pair_slot){a, b, rank++, id};
        /* The words to change: taken from the pair, which counting may move. */
        size_t *holders = p->words, nholders = p->nwords;
        p->words = NULL, p->nwords = p->cap = 0;
        stamp++;
        nraised = 0;
        for (size_t h = 0; ok && h < nholders; h++) {
            word *w = &words[holders[h]];
            int64_t *sym = symbols + w->first;
            bool holds = false;
            for (size_t k = 0; !holds && k + 1 < w->n; k++)
                holds = sym[k] == a && sym[k + 1] == b;
            if (!holds) /* listed twice, or merged away already */
                continue;
            ok = count_word(&t, sym, w, holders[h], -1, id, stamp, &raised, &nraised, &raised_cap);
            size_t n = 0;
            for (size_t k = 0; k < w->n; k++) {
                if (k + 1 < w->n && sym[k] == a && sym[k + 1] == b) {
                    sym[n++] = id;
                    k++;
                } else {
                    sym[n++] = sym[k];
                }
            }
            w->n = n;
            ok = ok && count_word(&t, sym, w, holders[h], 1, id, stamp, &raised, &nraised, &raised_cap);
        }
        free(holders);
        for (size_t r = 0; ok && r < nraised; r++) {
            const tpair *q = tpair_find(&t, raised[2 * r], raised[2 * r + 1]);
            if (q->count > 0)
                ok = trainer_push(&t, q);
        }
    }
    for (size_t i = 0; t.slots && i <= t.mask; i++)
        if (t.slots[i].a >= 0)
            free(t.slots[i].words);
    free(t.slots), free(t.heap), free(raised);
    return ok;
}

fl_status fl_tokenizer_train_bpe(const void *text, size_t size, int64_t vocab_size, int64_t min_frequency,
                                 fl_tokenizer **out)
{
    static const char *const fn = "fl_tokenizer_train_bpe";
    if (out)
        *out = NULL;
    if (!out || (!text && size)) {
        fl_error(FL_ERR_NULL, fn, "%s is NULL", out ? "text" : "out");
        return FL_ERR_NULL;
    }
    if (vocab_size < 256 || min_frequency < 1) {
        fl_error(FL_ERR_VALUE, fn, "vocab_size %lld must be at least 256 and min_frequency %lld at least 1",
                 (long long)vocab_size, (long long)min_frequency);
        return FL_ERR_VALUE;
    }
    const unsigned char *s = text;
    fl_tokenizer *tok = byte_level_base(vocab_size);
    chars c = {0};
    word *words = NULL;
    size_t nwords = 0, *slots = NULL, mask = 0;
    int64_t *symbols = malloc((size + 1) * sizeof *symbols);
    bool ok = tok && symbols && split_chars(s, size, &c) && pairs_init(&tok->merges, (size_t)vocab_size);
    if (ok) {
        size_t cap = 16;
        while (cap < 2 * c.n + 2)
            cap *= 2;
        mask = cap - 1;
        ok = (slots = calloc(cap, sizeof *slots)) && (words = malloc((c.n + 1) * sizeof *words));
    }
    /* The distinct pieces of the text and how often each occurs. */
    size_t nsymbols = 0;
    for (size_t i = 0; ok && i < c.n;) {
        size_t end = gpt2_match(&c, i), at = c.at[i], len = c.at[end] - at;
        size_t h = hash_bytes(s + at, len) & mask;
        for (;; h = (h + 1) & mask) {
            if (!slots[h]) {
                words[nwords] = (word){at, len, 1, nsymbols, len};
                for (size_t b = 0; b < len; b++)
                    symbols[nsymbols++] = tok->byte_id[s[at + b]];
                slots[h] = ++nwords;
                break;
            }
            word *w = &words[slots[h] - 1];
            if (w->len == len && memcmp(s + w->at, s + at, len) == 0) {
                w->count++;
                break;
            }
        }
        i = end;
    }
    ok = ok && learn_merges(tok, symbols, words, nwords, vocab_size, min_frequency);
    ok = ok && index_vocab(tok);
    free(c.cp), free(c.at), free(words), free(slots), free(symbols);
    if (!ok) {
        fl_tokenizer_free(tok);
        fl_error(FL_ERR_MEMORY, fn, "out of memory training on %zu bytes", size);
        return FL_ERR_MEMORY;
    }
    *out = tok;
    return FL_OK;
}

/* ---- tokenizer.json ---------------------------------------------------------------- */

static bool json_flag(const json_t *object, const char *key, bool fallback)
{
    const json_t *v = json_object_get(object, key);
    return json_is_boolean(v) ? json_is_true(v) : fallback;
}

static const char *json_type_name(const json_t *object)
{
    const char *t = json_string_value(json_object_get(object, "type"));
    return t ? t : "(no type)";
}

/* Sets tokens[id] to text; the id must be free or hold the same text. */
static fl_status place_token(fl_tokenizer *tok, const char *path, const char *where, int64_t id, const char *text,
                             size_t len, bool added)
{
    if (id < 0 || id >= tok->count)
        return load_error(FL_ERR_VALUE, path, "%s: id %lld of '%s' is outside [0, %lld)", where, (long long)id, text,
                          (long long)tok->count);
    token *t = &tok->tokens[id];
    if (t->text) {
        if (!added || t->len != len || memcmp(t->text, text, len) != 0)
            return load_error(FL_ERR_VALUE, path, "%s: id %lld is given to both '%s' and '%s'", where, (long long)id,
                              t->text, text);
    } else {
        if (!(t->text = malloc(len + 1)))
            return load_error(FL_ERR_MEMORY, path, "out of memory");
        memcpy(t->text, text, len);
        t->text[len] = 0, t->len = len;
    }
    t->added = t->added || added;
    return FL_OK;
}

static fl_status load_merges(fl_tokenizer *tok, const char *path, const json_t *merges)
{
    if (!json_is_array(merges))
        return load_error(FL_ERR_VALUE, path, "model.merges is missing or not an array");
    if (!pairs_init(&tok->merges, json_array_size(merges)))
        return load_error(FL_ERR_MEMORY, path, "out of memory");
    size_t i;
    const json_t *m;
    bytes both = {0};
    json_array_foreach(merges, i, m) {
        const char *a = NULL, *b = NULL;
        size_t alen = 0, blen = 0;
        const char *whole = json_string_value(m);
        if (whole) { /* "a b" */
            const char *space = strchr(whole, ' ');
            if (space && !strchr(space + 1, ' '))
                a = whole, alen = (size_t)(space - whole), b = space + 1, blen = strlen(b);
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0)), alen = json_string_length(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1)), blen = json_string_length(json_array_get(m, 1));
        }
        if (!a) {
            free(both.v);
            return load_error(FL_ERR_VALUE, path, "model.merges[%zu] is not \"left right\" nor a pair of strings", i);
        }
        int64_t ia = lookup(tok, a, alen), ib = lookup(tok, b, blen), im = -1;
        both.n = 0;
        if (!push_bytes(&both, a, alen) || !push_bytes(&both, b, blen)) {
            free(both.v);
            return load_error(FL_ERR_MEMORY, path, "out of memory");
        }
        if (ia >= 0 && ib >= 0)
            im = lookup(tok, both.v, both.n);
        if (im < 0) {
            fl_status st = load_error(FL_ERR_VALUE, path, "model.merges[%zu]: '%.*s' is not in the vocabulary", i,
                                      (int)(ia < 0 ? alen : ib < 0 ? blen : both.n),
                                      ia < 0 ? a : ib < 0 ? b : (const char *)both.v);
            free(both.v);
            return st;
        }
        pair_slot *s = pairs_find(&tok->merges, ia, ib);
        if (s->a < 0) /* a pair listed twice keeps its first rank */
            *s = (pair_slot){ia, ib, (int64_t)i, im};
    }
    free(both.v);
    return FL_OK;
}

/* Llama 3's and Qwen2's pre-tokenizer: a Sequence of a Split by llama3_regex (or
 * qwen2_regex), each match a piece of its own, then ByteLevel without its regex. */
static fl_status load_split_sequence(fl_tokenizer *tok, const char *path, const json_t *pre)
{
    const json_t *list = json_object_get(pre, "pretokenizers");
    const json_t *split = json_array_get(list, 0), *level = json_array_get(list, 1);
    if (json_array_size(list) != 2 || !json_is_object(split) || strcmp(json_type_name(split), "Split") != 0 ||
        !json_is_object(level) || strcmp(json_type_name(level), "ByteLevel") != 0)
        return load_error(FL_ERR_VALUE, path,
                          "pre_tokenizer Sequence: only a Split then a ByteLevel (Llama 3's) is supported");
    const char *regex = json_string_value(json_object_get(json_object_get(split, "pattern"), "Regex"));
    const char *behavior = json_string_value(json_object_get(split, "behavior"));
    tok->digits = !regex ? 0 : strcmp(regex, llama3_regex) == 0 ? 3 : strcmp(regex, qwen2_regex) == 0 ? 1 : 0;
    if (!tok->digits)
        return load_error(FL_ERR_VALUE, path, "pre_tokenizer Split by %s%.80s%s: only Llama 3's and Qwen2's regex "
                          "are supported", regex ? "'" : "", regex ? regex : "no regex", regex ? "'" : "");
    if (!behavior || strcmp(behavior, "Isolated") != 0 || json_flag(split, "invert", false))
        return load_error(FL_ERR_VALUE, path, "pre_tokenizer Split: only behavior Isolated, not inverted, is "
                          "supported");
    return FL_OK;
}

/* The BPE model's options neither BPE here takes: dropout, and a prefix or suffix on
 * subwords. */
static fl_status bpe_options(const char *path, const json_t *model)
{
    const json_t *dropout = json_object_get(model, "dropout");
    if (json_is_number(dropout) && json_number_value(dropout) != 0)
        return load_error(FL_ERR_VALUE, path, "model.dropout %g: BPE dropout is not supported",
                          json_number_value(dropout));
    const char *fixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const char *v = json_string_value(json_object_get(model, fixes[i]));
        if (v && *v)
            return load_error(FL_ERR_VALUE, path, "model.%s '%s' is not supported by BPE", fixes[i], v);
    }
    return FL_OK;
}

/* The normalization form a normalizer's type names, or -1. */
static int form_named(const char *type)
{
    static const char *const names[] = {[TEXT_NFC] = "NFC", [TEXT_NFD] = "NFD", [TEXT_NFKC] = "NFKC",
                                        [TEXT_NFKD] = "NFKD"};
    for (int f = 0; f < (int)(sizeof names / sizeof *names); f++)
        if (strcmp(type, names[f]) == 0)
            return f;
    return -1;
}

static fl_status load_edits(const char *path, const char *what, const json_t *node, bool decoder, text_edit **list,
                            size_t *count);

/* The type of the first step of normalizer norm (one, or a Sequence) that is not a
 * normalization form; NULL if every step is one. */
static const char *not_a_form(const json_t *norm)
{
    const json_t *steps = json_object_get(norm, "normalizers");
    bool sequence = strcmp(json_type_name(norm), "Sequence") == 0 && json_is_array(steps);
    for (size_t i = 0; i < (sequence ? json_array_size(steps) : 1); i++) {
        const char *type = json_type_name(sequence ? json_array_get(steps, i) : norm);
        if (form_named(type) < 0)
            return type;
    }
    return NULL;
}

static fl_status load_bpe(fl_tokenizer *tok, const char *path, const json_t *root, const json_t *model)
{
    const json_t *pre = json_object_get(root, "pre_tokenizer"), *norm = json_object_get(root, "normalizer");
    if (json_is_object(pre) && strcmp(json_type_name(pre), "Sequence") == 0) {
        fl_status st = load_split_sequence(tok, path, pre);
        if (st != FL_OK)
            return st;
        pre = json_array_get(json_object_get(pre, "pretokenizers"), 1);
    } else if (strcmp(json_type_name(pre), "ByteLevel") != 0) {
        return load_error(FL_ERR_VALUE, path,
                          "BPE model with pre_tokenizer %s: only ByteLevel, Llama 3's Split and ByteLevel, Metaspace "
                          "or none is supported", json_type_name(pre));
    }
    /* Only the normalization forms, which leave the added tokens' ASCII as it is: the
     * library matches byte-level BPE's normalized added tokens after the normalizer,
     * Flare in the raw text. */
    if (norm && !json_is_null(norm)) {
        const char *other = json_is_object(norm) ? not_a_form(norm) : "(not an object)";
        if (other)
            return load_error(FL_ERR_VALUE, path,
                              "BPE model with normalizer %s: only NFC, NFD, NFKC, NFKD, a Sequence of them or none is "
                              "supported", other);
        fl_status st = load_edits(path, "normalizer", norm, false, &tok->normalizer, &tok->nnormalizer);
        if (st != FL_OK)
            return st;
    }
    if (json_flag(pre, "use_regex", true) == (tok->digits != 0))
        return load_error(FL_ERR_VALUE, path, "pre_tokenizer ByteLevel %s use_regex is not supported",
                          tok->digits ? "after a Split, with" : "without a Split before it, without");
    fl_status options = bpe_options(path, model);
    if (options != FL_OK)
        return options;
    if (json_flag(model, "byte_fallback", false))
        return load_error(FL_ERR_VALUE, path, "model.byte_fallback is not supported by byte-level BPE");
    tok->model = MODEL_BPE;
    tok->add_prefix_space = json_flag(pre, "add_prefix_space", false);
    tok->ignore_merges = json_flag(model, "ignore_merges", false);
    for (unsigned b = 0; b < 256; b++) {
        unsigned char u[5];
        size_t n = text_utf8_put(byte_char(b), u);
        /* GPT-NeoX's vocabulary leaves out the bytes valid UTF-8 never holds, which
         * the tokenizers library (given only valid text) never looks up. */
        bool never_in_utf8 = b == 0xC0 || b == 0xC1 || b >= 0xF5;
        if ((tok->byte_id[b] = lookup(tok, u, n)) < 0 && !never_in_utf8)
            return load_error(FL_ERR_VALUE, path, "model.vocab lacks '%.*s', the token of byte 0x%02X", (int)n, u, b);
        tok->bytes_missing |= tok->byte_id[b] < 0;
    }
    for (int64_t id = 0; id < tok->count; id++)
        if (tok->tokens[id].text && !set_token_bytes(&tok->tokens[id]))
            return load_error(FL_ERR_MEMORY, path, "out of memory");
    return load_merges(tok, path, json_object_get(model, "merges"));
}

/* ---- SentencePiece's BPE in tokenizer.json ---- */

/* A copy of a JSON string into *text, *len; false if it is not one (or out of memory,
 * which *oom tells). */
static bool json_text(const json_t *v, char **text, size_t *len, bool *oom)
{
    if (!json_is_string(v))
        return false;
    *len = json_string_length(v);
    if (!(*text = malloc(*len + 1)))
        return !(*oom = true);
    memcpy(*text, json_string_value(v), *len + 1);
    return true;
}

/* The prepend_scheme of a Metaspace (or its older add_prefix_space); -1 if unknown. */
static int prepend_scheme(const json_t *metaspace)
{
    const char *scheme = json_string_value(json_object_get(metaspace, "prepend_scheme"));
    if (!scheme)
        return json_flag(metaspace, "add_prefix_space", true) ? PREPEND_ALWAYS : PREPEND_NEVER;
    return strcmp(scheme, "always") == 0 ? PREPEND_ALWAYS
           : strcmp(scheme, "first") == 0 ? PREPEND_FIRST
           : strcmp(scheme, "never") == 0 ? PREPEND_NEVER
                                           : -1;
}

/* A regex Replace takes: runs of one character, "c{n,}" (T5's and XLM-R's " {2,}"),
 * the character into *from and n into *fewest. False for any other regex. */
static bool runs_regex(const char *regex, char **from, size_t *from_len, int64_t *fewest, bool *oom)
{
    size_t len, n = regex ? strlen(regex) : 0;
    if (!n || text_utf8_next((const unsigned char *)regex, n, &len) < 0 || strchr(".\\[](){}*+?|^$", regex[0]))
        return false;
    char *end;
    long count = regex[len] == '{' ? strtol(regex + len + 1, &end, 10) : 0;
    if (count < 1 || count > 1000 || end == regex + len + 1 || strcmp(end, ",}") != 0)
        return false;
    if (!(*from = malloc(len + 1)))
        return !(*oom = true);
    memcpy(*from, regex, len);
    (*from)[len] = 0, *from_len = len, *fewest = count;
    return true;
}


/* The steps of a normalizer (decoder false: Prepend, Replace of a string or of runs of
 * one character, Precompiled, a normalization form, StripAccents, Lowercase, Strip) or
 * decoder (Replace, ByteFallback, Fuse, Strip,
 * Metaspace), alone or in a Sequence, into *list, *count. */
static fl_status load_edits(const char *path, const char *what, const json_t *node, bool decoder, text_edit **list,
                            size_t *count)
{
    const char *type = json_type_name(node), *key = decoder ? "decoders" : "normalizers";
    const json_t *steps = strcmp(type, "Sequence") == 0 ? json_object_get(node, key) : NULL;
    if (strcmp(type, "Sequence") == 0 && !json_is_array(steps))
        return load_error(FL_ERR_VALUE, path, "%s Sequence has no \"%s\" array", what, key);
    size_t total = steps ? json_array_size(steps) : 1;
    if (!(*list = calloc(total + 1, sizeof **list)))
        return load_error(FL_ERR_MEMORY, path, "out of memory");
    for (size_t i = 0; i < total; i++) {
        const json_t *step = steps ? json_array_get(steps, i) : node;
        const char *kind = json_type_name(step);
        text_edit *e = &(*list)[(*count)++];
        bool oom = false, ok = false;
        const json_t *regex = json_object_get(json_object_get(step, "pattern"), "Regex");
        if (strcmp(kind, "Replace") == 0 && !decoder && regex) {
            e->kind = EDIT_REPLACE_RUNS;
            ok = runs_regex(json_string_value(regex), &e->from, &e->from_len, &e->start, &oom) &&
                 json_text(json_object_get(step, "content"), &e->to, &e->to_len, &oom);
        } else if (strcmp(kind, "Replace") == 0) {
            e->kind = EDIT_REPLACE;
            ok = json_text(json_object_get(json_object_get(step, "pattern"), "String"), &e->from, &e->from_len, &oom) &&
                 e->from_len && json_text(json_object_get(step, "content"), &e->to, &e->to_len, &oom);
        } else if (!decoder && strcmp(kind, "Precompiled") == 0) {
            const json_t *map = json_object_get(step, "precompiled_charsmap");
            const char *why = "is not a string";
            e->kind = EDIT_PRECOMPILED;
            e->charsmap = json_is_string(map) ? text_charsmap_new(json_string_value(map), json_string_length(map), &why)
                                              : NULL;
            if (!e->charsmap)
                return strcmp(why, "out of memory") == 0
                           ? load_error(FL_ERR_MEMORY, path, "out of memory")
                           : load_error(FL_ERR_VALUE, path, "%s Precompiled: precompiled_charsmap %s", what, why);
            ok = true;
        } else if (!decoder && (e->start = form_named(kind)) >= 0) {
            e->kind = EDIT_FORM;
            ok = true;
        } else if (!decoder && (strcmp(kind, "StripAccents") == 0 || strcmp(kind, "Lowercase") == 0)) {
            e->kind = kind[0] == 'S' ? EDIT_STRIP_ACCENTS : EDIT_LOWERCASE;
            ok = true;
        } else if (!decoder && strcmp(kind, "Strip") == 0) {
            const json_t *left = json_object_get(step, "strip_left"), *right = json_object_get(step, "strip_right");
            e->kind = EDIT_TRIM;
            ok = json_is_boolean(left) && json_is_boolean(right);
            e->start = json_is_true(left), e->stop = json_is_true(right);
        } else if (!decoder && strcmp(kind, "Prepend") == 0) {
            e->kind = EDIT_PREPEND;
            ok = json_text(json_object_get(step, "prepend"), &e->to, &e->to_len, &oom);
        } else if (decoder && (strcmp(kind, "ByteFallback") == 0 || strcmp(kind, "Fuse") == 0)) {
            e->kind = kind[0] == 'B' ? EDIT_BYTE_FALLBACK : EDIT_FUSE;
            ok = true;
        } else if (decoder && strcmp(kind, "Strip") == 0) {
            const json_t *start = json_object_get(step, "start"), *stop = json_object_get(step, "stop");
            e->kind = EDIT_STRIP;
            ok = json_text(json_object_get(step, "content"), &e->from, &e->from_len, &oom) && e->from_len &&
                 json_is_integer(start) && json_is_integer(stop) && json_integer_value(start) >= 0 &&
                 json_integer_value(stop) >= 0;
            e->start = json_integer_value(start), e->stop = json_integer_value(stop);
        } else if (decoder && strcmp(kind, "Metaspace") == 0) {
            int scheme = prepend_scheme(step);
            e->kind = EDIT_METASPACE;
            e->start = scheme != PREPEND_NEVER;
            ok = scheme >= 0 && json_text(json_object_get(step, "replacement"), &e->from, &e->from_len, &oom) &&
                 e->from_len;
        }
        if (oom)
            return load_error(FL_ERR_MEMORY, path, "out of memory");
        if (!ok)
            return load_error(FL_ERR_VALUE, path,
                              "%s %s%s%s: only %s%s are supported%s", what, kind,
                              steps ? " in a Sequence" : "", strcmp(kind, "Replace") == 0 ? " (of a regex?)" : "",
                              decoder ? "Replace of a string, ByteFallback, Fuse, Strip and Metaspace"
                                      : "Prepend, Precompiled, NFC, NFD, NFKC, NFKD, StripAccents, Lowercase, "
                                        "Strip, and Replace of a string or of runs of a character (\" {2,}\")",
                              steps ? "" : ", or a Sequence of them",
                              decoder ? " with SentencePiece's models" : " (or a BertNormalizer with WordPiece)");
    }
    return FL_OK;
}

/* The Metaspace of a pre-tokenizer that is one, a Sequence of one (DeBERTa-v2's), or a
 * Sequence of a WhitespaceSplit and one (*whitespace_split then set); NULL for any
 * other. */
static const json_t *metaspace_of(const json_t *pre, bool *whitespace_split)
{
    const json_t *list = json_object_get(pre, "pretokenizers");
    bool sequence = strcmp(json_type_name(pre), "Sequence") == 0;
    *whitespace_split = sequence && json_array_size(list) == 2 &&
                        strcmp(json_type_name(json_array_get(list, 0)), "WhitespaceSplit") == 0;
    if (*whitespace_split)
        pre = json_array_get(list, 1);
    else if (sequence && json_array_size(list) == 1)
        pre = json_array_get(list, 0);
    return json_is_object(pre) && strcmp(json_type_name(pre), "Metaspace") == 0 ? pre : NULL;
}

/* What SentencePiece's two models share: the normalizer's and decoder's edits, the
 * Metaspace pre-tokenizer, the byte tokens and the added tokens matched in normalized
 * text. */
static fl_status load_sentencepiece(fl_tokenizer *tok, const char *path, const json_t *root)
{
    const json_t *pre = json_object_get(root, "pre_tokenizer"), *norm = json_object_get(root, "normalizer");
    const json_t *dec = json_object_get(root, "decoder");
    fl_status st = FL_OK;
    if (json_is_object(norm))
        st = load_edits(path, "normalizer", norm, false, &tok->normalizer, &tok->nnormalizer);
    if (st == FL_OK && json_is_object(dec))
        st = load_edits(path, "decoder", dec, true, &tok->decoder, &tok->ndecoder);
    if (st != FL_OK)
        return st;
    pre = metaspace_of(pre, &tok->whitespace_split);
    if (json_is_object(pre)) { /* Metaspace: the caller let nothing else through */
        bool oom = false;
        tok->prepend_scheme = prepend_scheme(pre);
        tok->metaspace_split = json_flag(pre, "split", true);
        if (!json_text(json_object_get(pre, "replacement"), &tok->metaspace, &tok->metaspace_len, &oom) ||
            !tok->metaspace_len || tok->prepend_scheme < 0)
            return oom ? load_error(FL_ERR_MEMORY, path, "out of memory")
                       : load_error(FL_ERR_VALUE, path, "pre_tokenizer Metaspace needs a replacement and a "
                                    "prepend_scheme of always, first or never");
    }
    for (unsigned b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        tok->byte_id[b] = lookup(tok, name, 6);
    }
    /* An added token matched in normalized text is matched as its content normalized
     * (Llama 2's "<s>" as "\u2581<s>"); a file may list one token twice. */
    for (size_t i = 0; i < tok->nadded; i++) {
        token *t = &tok->tokens[tok->added[i]];
        bytes text = {0};
        if (t->norm_text)
            continue;
        if (t->normalized && !file_normalize(tok, (const unsigned char *)t->text, t->len, &text))
            return load_error(FL_ERR_MEMORY, path, "out of memory");
        t->norm_text = (char *)text.v, t->norm_len = text.n;
    }
    return FL_OK;
}

/* SentencePiece's BPE as Llama 2's and Mistral's tokenizer.json hold it: characters
 * (not bytes) merged, byte tokens "<0xHH>" for characters the vocabulary lacks
 * (byte_fallback), and load_sentencepiece's normalizer, pre-tokenizer and decoder. */
static fl_status load_character_bpe(fl_tokenizer *tok, const char *path, const json_t *root, const json_t *model)
{
    tok->model = MODEL_CHARACTER_BPE;
    fl_status st = load_sentencepiece(tok, path, root);
    if (st == FL_OK)
        st = bpe_options(path, model);
    if (st != FL_OK)
        return st;
    tok->byte_fallback = json_flag(model, "byte_fallback", false);
    tok->fuse_unk = json_flag(model, "fuse_unk", false);
    tok->ignore_merges = json_flag(model, "ignore_merges", false);
    const json_t *unk = json_object_get(model, "unk_token");
    tok->unk = json_is_string(unk) ? lookup(tok, json_string_value(unk), json_string_length(unk)) : -1;
    if (json_is_string(unk) && tok->unk < 0)
        return load_error(FL_ERR_VALUE, path, "model.unk_token '%s' is not in the vocabulary", json_string_value(unk));
    return load_merges(tok, path, json_object_get(model, "merges"));
}

/* model.vocab [[piece, score], ...] (the piece's id is its index) into the trie, with
 * unk_id (an index or null) and byte_fallback. */
static fl_status load_unigram(fl_tokenizer *tok, const char *path, const json_t *root, const json_t *model)
{
    tok->model = MODEL_UNIGRAM;
    fl_status st = load_sentencepiece(tok, path, root);
    if (st != FL_OK)
        return st;
    const json_t *vocab = json_object_get(model, "vocab"), *unk = json_object_get(model, "unk_id"), *v;
    json_int_t pieces = (json_int_t)json_array_size(vocab);
    if (unk && !json_is_null(unk) &&
        (!json_is_integer(unk) || json_integer_value(unk) < 0 || json_integer_value(unk) >= pieces))
        return load_error(FL_ERR_VALUE, path, "model.unk_id is not null or an index of model.vocab");
    tok->unk = json_is_integer(unk) ? json_integer_value(unk) : -1;
    tok->byte_fallback = json_flag(model, "byte_fallback", false);
    if (!(tok->unigram = text_unigram_new()))
        return load_error(FL_ERR_MEMORY, path, "out of memory");
    size_t i;
    json_array_foreach(vocab, i, v) {
        const token *t = &tok->tokens[i];
        if (!text_unigram_add(tok->unigram, t->text, t->len, (int64_t)i, json_number_value(json_array_get(v, 1))))
            return load_error(FL_ERR_MEMORY, path, "out of memory");
    }
    text_unigram_set_unknown(tok->unigram, tok->unk);
    return FL_OK;
}

static fl_status load_wordpiece(fl_tokenizer *tok, const char *path, const json_t *root, const json_t *model)
{
    const json_t *pre = json_object_get(root, "pre_tokenizer"), *norm = json_object_get(root, "normalizer");
    if (!json_is_object(pre) || strcmp(json_type_name(pre), "BertPreTokenizer") != 0)
        return load_error(FL_ERR_VALUE, path,
                          "WordPiece model with pre_tokenizer %s: only BertPreTokenizer is supported",
                          json_is_object(pre) ? json_type_name(pre) : "null");
    tok->model = MODEL_WORDPIECE;
    if (json_is_object(norm) && strcmp(json_type_name(norm), "BertNormalizer") != 0) {
        /* the edits of SentencePiece's models (NFD, Lowercase, StripAccents, ...) */
        fl_status st = load_edits(path, "normalizer", norm, false, &tok->normalizer, &tok->nnormalizer);
        if (st != FL_OK)
            return st;
    } else if (norm && !json_is_null(norm)) {
        if (!json_is_object(norm))
            return load_error(FL_ERR_VALUE, path, "normalizer is not an object");
        tok->bert_normalizer = true;
        tok->clean_text = json_flag(norm, "clean_text", true);
        tok->chinese_chars = json_flag(norm, "handle_chinese_chars", true);
        tok->lowercase = json_flag(norm, "lowercase", true);
        tok->strip_accents = json_flag(norm, "strip_accents", tok->lowercase);
    }
    const json_t *unk = json_object_get(model, "unk_token");
    if (!json_is_string(unk) || (tok->unk = lookup(tok, json_string_value(unk), json_string_length(unk))) < 0)
        return load_error(FL_ERR_VALUE, path, "model.unk_token %s%s%s is not in the vocabulary",
                          json_is_string(unk) ? "'" : "", json_is_string(unk) ? json_string_value(unk) : "(missing)",
                          json_is_string(unk) ? "'" : "");
    const json_t *prefix = json_object_get(model, "continuing_subword_prefix");
    const char *p = json_is_string(prefix) ? json_string_value(prefix) : "##";
    tok->prefix_len = strlen(p);
    if (!(tok->prefix = malloc(tok->prefix_len + 1)))
        return load_error(FL_ERR_MEMORY, path, "out of memory");
    memcpy(tok->prefix, p, tok->prefix_len + 1);
    const json_t *max = json_object_get(model, "max_input_chars_per_word");
    tok->max_chars = json_is_integer(max) ? json_integer_value(max) : 100;
    for (int64_t id = 0; id < tok->count; id++) {
        const token *t = &tok->tokens[id];
        size_t width = 0;
        for (size_t i = 0, len; t->text && i < t->len; i += len, width++)
            text_utf8_next((const unsigned char *)t->text + i, t->len - i, &len);
        if (width > tok->longest)
            tok->longest = width;
    }
    return FL_OK;
}

/* The model of a file that names no model.type, as the tokenizers library tells them
 * apart: it tries BPE (vocab and merges), WordPiece (vocab, unk_token,
 * continuing_subword_prefix and max_input_chars_per_word: bert-base-uncased's own
 * file), WordLevel (vocab and unk_token) and Unigram (vocab as a list) in turn. NULL
 * if none fits. */
static const char *untyped_model(const json_t *model)
{
    const json_t *vocab = json_object_get(model, "vocab");
    if (json_is_array(vocab))
        return "Unigram";
    if (!json_is_object(vocab))
        return NULL;
    if (json_object_get(model, "merges"))
        return "BPE";
    if (!json_object_get(model, "unk_token"))
        return NULL;
    if (json_object_get(model, "continuing_subword_prefix") && json_object_get(model, "max_input_chars_per_word"))
        return "WordPiece";
    return "WordLevel";
}

static fl_status load_tree(fl_tokenizer *tok, const char *path, const json_t *root)
{
    if (!json_is_object(root))
        return load_error(FL_ERR_VALUE, path, "the top level is not a JSON object");
    const json_t *model = json_object_get(root, "model");
    if (!json_is_object(model))
        return load_error(FL_ERR_VALUE, path, "no \"model\" object: not a tokenizer.json");
    const char *type = json_string_value(json_object_get(model, "type"));
    bool inferred = !type;
    if (inferred)
        type = untyped_model(model);
    json_t *vocab = json_object_get(model, "vocab");
    bool unigram = type && strcmp(type, "Unigram") == 0;
    if (!type || (strcmp(type, "BPE") != 0 && strcmp(type, "WordPiece") != 0 && !unigram))
        return load_error(FL_ERR_VALUE, path,
                          "model.type %s%s%s%s is not supported (only BPE, WordPiece and Unigram)", type ? "'" : "",
                          type ? type : "(missing)", type ? "'" : "",
                          type && inferred ? " (told by its fields: the file names no type)" : "");
    if (unigram ? !json_is_array(vocab) : !json_is_object(vocab))
        return load_error(FL_ERR_VALUE, path, "model.vocab is missing or not %s", unigram ? "a list" : "an object");
    const json_t *added = json_object_get(root, "added_tokens");
    if (added && !json_is_null(added) && !json_is_array(added))
        return load_error(FL_ERR_VALUE, path, "added_tokens is not an array");
    /* Ids must be dense enough to index: below the number of tokens listed. A Unigram
     * piece's id is its index. */
    size_t listed = json_object_size(vocab) + json_array_size(vocab) + json_array_size(added);
    tok->count = (int64_t)json_array_size(vocab);
    const char *key;
    const json_t *v;
    size_t i;
    json_array_foreach(vocab, i, v) {
        const json_t *piece = json_array_get(v, 0);
        if (json_array_size(v) != 2 || !json_is_string(piece) || !json_string_length(piece) ||
            !json_is_number(json_array_get(v, 1)))
            return load_error(FL_ERR_VALUE, path, "model.vocab[%zu] is not a [piece, score] pair", i);
    }
    json_object_foreach(vocab, key, v) {
        if (!json_is_integer(v))
            return load_error(FL_ERR_VALUE, path, "model.vocab['%s'] is not an integer id", key);
        if (json_integer_value(v) >= tok->count)
            tok->count = json_integer_value(v) + 1;
    }
    json_array_foreach(added, i, v) {
        const json_t *id = json_object_get(v, "id"), *content = json_object_get(v, "content");
        if (!json_is_integer(id) || !json_is_string(content) || !json_string_length(content))
            return load_error(FL_ERR_VALUE, path, "added_tokens[%zu] lacks an integer id or a non-empty content", i);
        if (json_flag(v, "single_word", false))
            return load_error(FL_ERR_VALUE, path, "added_tokens[%zu] '%s': single_word is not supported", i,
                              json_string_value(content));
        if (json_integer_value(id) >= tok->count)
            tok->count = json_integer_value(id) + 1;
    }
    if (tok->count > (int64_t)listed)
        return load_error(FL_ERR_VALUE, path, "id %lld is not below the number of tokens listed (%zu)",
                          (long long)tok->count - 1, listed);
    if (!(tok->tokens = calloc((size_t)tok->count + 1, sizeof *tok->tokens)) ||
        !(tok->added = malloc((json_array_size(added) + 1) * sizeof *tok->added)))
        return load_error(FL_ERR_MEMORY, path, "out of memory");
    fl_status st;
    json_object_foreach(vocab, key, v)
        if ((st = place_token(tok, path, "model.vocab", json_integer_value(v), key, strlen(key), false)) != FL_OK)
            return st;
    json_array_foreach(vocab, i, v) {
        const json_t *piece = json_array_get(v, 0);
        if ((st = place_token(tok, path, "model.vocab", (int64_t)i, json_string_value(piece),
                              json_string_length(piece), false)) != FL_OK)
            return st;
    }
    json_array_foreach(added, i, v) {
        const json_t *content = json_object_get(v, "content");
        int64_t id = json_integer_value(json_object_get(v, "id"));
        if ((st = place_token(tok, path, "added_tokens", id, json_string_value(content), json_string_length(content),
                              true)) != FL_OK)
            return st;
        token *t = &tok->tokens[id];
        t->lstrip = json_flag(v, "lstrip", false);
        t->rstrip = json_flag(v, "rstrip", false);
        t->normalized = json_flag(v, "normalized", !json_flag(v, "special", false));
        tok->added[tok->nadded++] = id;
    }
    if (!index_vocab(tok))
        return load_error(FL_ERR_MEMORY, path, "out of memory");
    const json_t *pre = json_object_get(root, "pre_tokenizer");
    bool whitespace_split, characters = !json_is_object(pre) || metaspace_of(pre, &whitespace_split);
    if (unigram && !characters)
        return load_error(FL_ERR_VALUE, path,
                          "Unigram model with pre_tokenizer %s: only Metaspace, a Sequence of WhitespaceSplit and "
                          "Metaspace, or none is supported",
                          json_type_name(pre));
    st = unigram                      ? load_unigram(tok, path, root, model)
         : strcmp(type, "BPE") != 0   ? load_wordpiece(tok, path, root, model)
         : characters                 ? load_character_bpe(tok, path, root, model)
                                      : load_bpe(tok, path, root, model);
    if (st == FL_OK && !(tok->post = text_template_load(path, json_object_get(root, "post_processor"), tok->count)))
        st = fl_last_status();
    for (size_t k = 0; st == FL_OK && k < tok->nadded; k++) {
        size_t len;
        bool in_normalized;
        const char *text = added_text(tok, &tok->tokens[tok->added[k]], &len, &in_normalized);
        if (len)
            tok->added_starts[in_normalized][(unsigned char)text[0]] = true;
    }
    return st;
}

fl_status fl_tokenizer_load(const char *path, fl_tokenizer **out)
{
    if (out)
        *out = NULL;
    if (!path || !out) {
        fl_error(FL_ERR_NULL, load_fn, "%s is NULL", path ? "out" : "the path");
        return FL_ERR_NULL;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        fl_error(FL_ERR_IO, load_fn, "'%s': cannot open: %s", path, strerror(errno));
        return FL_ERR_IO;
    }
    /* Read whole, then parsed: jansson's reader from a FILE takes a locked getc a byte,
     * a quarter of the time a Unigram file took to load. */
    bytes text = {0};
    unsigned char chunk[1 << 14];
    bool ok = push_bytes(&text, "", 0);
    for (size_t n; ok && (n = fread(chunk, 1, sizeof chunk, f)) > 0;)
        ok = push_bytes(&text, chunk, n);
    int failed = ferror(f) ? (errno ? errno : EIO) : 0;
    fclose(f);
    if (!ok || failed) {
        free(text.v);
        return failed ? load_error(FL_ERR_IO, path, "cannot read: %s", strerror(failed))
                      : load_error(FL_ERR_MEMORY, path, "out of memory");
    }
    json_error_t err;
    json_t *root = json_loadb((const char *)text.v, text.n, JSON_REJECT_DUPLICATES, &err);
    free(text.v);
    if (!root)
        return load_error(FL_ERR_VALUE, path, "not valid JSON at line %d, column %d (byte %d): %s", err.line,
                          err.column, err.position, err.text);
    fl_tokenizer *tok = calloc(1, sizeof *tok);
    fl_status st = tok ? load_tree(tok, path, root) : load_error(FL_ERR_MEMORY, path, "out of memory");
    json_decref(root);
    if (st != FL_OK) {
        fl_tokenizer_free(tok);
        return st;
    }
    *out = tok;
    return FL_OK;
}
