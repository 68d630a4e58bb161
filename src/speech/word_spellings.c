/*
 * Lexicons: each word's spelling in tokens (wav2letter's lexicon.txt), for targets of
 * word pieces, or of letters with a boundary after each word, as the lexicon says.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flare/extension.h"
#include "speech_data.h"

struct fl_word_spellings {
    fl_token_set *tokens; /* a copy: spelling unknown words needs it */
    int64_t count;
    char **words;     /* sorted, unique */
    int64_t *offsets; /* word i spells as ids[offsets[i], offsets[i + 1]) */
    int64_t *ids;
};

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

void fl_word_spellings_free(fl_word_spellings *lex)
{
    if (!lex)
        return;
    for (int64_t i = 0; i < lex->count; i++)
        free(lex->words[i]);
    free(lex->words), free(lex->offsets), free(lex->ids);
    fl_token_set_free(lex->tokens);
    free(lex);
}

/* A word and its spelling as read, before sorting. */
typedef struct entry {
    char *word;
    int64_t line, start, length; /* the spelling: ids[start, start + length) */
} entry;

static int by_word(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    int c = strcmp(x->word, y->word);
    return c ? c : (x->line > y->line) - (x->line < y->line);
}

fl_word_spellings *fl_word_spellings_load(const char *path, const fl_token_set *tokens)
{
    static const char fn[] = "fl_word_spellings_load";
    if (fl_null_args(fn, 2, path, tokens))
        return NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return fl_error(FL_ERR_IO, fn, "%s: cannot open: %s", path, strerror(errno));
    entry *entries = NULL;
    int64_t *ids = NULL, count = 0, capacity = 0, nids = 0, id_capacity = 0, line_number = 0;
    char *line = NULL;
    size_t size = 0;
    ssize_t got;
    fl_status status = FL_OK;
    while (status == FL_OK && (got = getline(&line, &size, f)) >= 0) {
        line_number++;
        if ((ssize_t)strlen(line) != got) {
            fl_error(status = FL_ERR_IO, fn, "%s:%lld: a NUL byte in the line", path, (long long)line_number);
            break;
        }
        char *p = line;
        while (*p && is_space(*p))
            p++;
        if (!*p)
            continue; /* a blank line spells nothing */
        char *word = p;
        while (*p && !is_space(*p))
            p++;
        char *word_end = p;
        int64_t start = nids;
        for (;;) {
            while (*p && is_space(*p))
                p++;
            if (!*p)
                break;
            char *token = p;
            while (*p && !is_space(*p))
                p++;
            char saved = *p;
            *p = '\0';
            int64_t id = fl_token_set_id(tokens, token);
            if (id < 0) {
                fl_error(status = FL_ERR_IO, fn, "%s:%lld: the spelling of \"%.*s\" has \"%s\", not a token", path,
                         (long long)line_number, (int)(word_end - word), word, token);
                break;
            }
            *p = saved;
            if (nids == id_capacity) {
                id_capacity = id_capacity ? 2 * id_capacity : 4096;
                int64_t *grown = realloc(ids, (size_t)id_capacity * sizeof *grown);
                if (!grown) {
                    fl_error(status = FL_ERR_MEMORY, fn, "%s: out of memory", path);
                    break;
                }
                ids = grown;
            }
            ids[nids++] = id;
        }
        if (status != FL_OK)
            break;
        *word_end = '\0';
        if (nids == start) {
            fl_error(status = FL_ERR_IO, fn, "%s:%lld: the word \"%s\" has no spelling", path, (long long)line_number,
                     word);
            break;
        }
        if (count == capacity) {
            capacity = capacity ? 2 * capacity : 1024;
            entry *grown = realloc(entries, (size_t)capacity * sizeof *grown);
            if (!grown) {
                fl_error(status = FL_ERR_MEMORY, fn, "%s: out of memory", path);
                break;
            }
            entries = grown;
        }
        entries[count] = (entry){strdup(word), line_number, start, nids - start};
        if (!entries[count++].word)
            fl_error(status = FL_ERR_MEMORY, fn, "%s: out of memory", path);
    }
    if (status == FL_OK && ferror(f))
        fl_error(status = FL_ERR_IO, fn, "%s: read error after line %lld", path, (long long)line_number);
    if (status == FL_OK && count == 0)
        fl_error(status = FL_ERR_IO, fn, "%s: no words", path);
    free(line);
    fclose(f);

    fl_word_spellings *lex = status == FL_OK ? calloc(1, sizeof *lex) : NULL;
    if (status == FL_OK) {
        /* Sorted by word, then line: a word's first line is its spelling (wav2letter
         * takes the first of several for targets); the later ones are left out. */
        qsort(entries, (size_t)count, sizeof *entries, by_word);
        if (lex) {
            lex->words = malloc((size_t)count * sizeof *lex->words);
            lex->offsets = malloc((size_t)(count + 1) * sizeof *lex->offsets);
            lex->ids = malloc((size_t)(nids ? nids : 1) * sizeof *lex->ids);
            lex->tokens = fl__token_set_copy(tokens, fn);
        }
        if (!lex || !lex->words || !lex->offsets || !lex->ids || !lex->tokens) {
            if (fl_last_status() == FL_OK)
                fl_error(FL_ERR_MEMORY, fn, "%s: out of memory", path);
            status = fl_last_status();
        }
    }
    int64_t at = 0;
    for (int64_t i = 0; i < count; i++) {
        if (status == FL_OK && (lex->count == 0 || strcmp(lex->words[lex->count - 1], entries[i].word) != 0)) {
            lex->words[lex->count] = entries[i].word;
            lex->offsets[lex->count++] = at;
            memcpy(lex->ids + at, ids + entries[i].start, (size_t)entries[i].length * sizeof *ids);
            at += entries[i].length;
        } else {
            free(entries[i].word);
        }
    }
    if (status == FL_OK)
        lex->offsets[lex->count] = at;
    free(entries);
    free(ids);
    if (status != FL_OK) {
        fl_word_spellings_free(lex);
        return NULL;
    }
    return lex;
}

const fl_token_set *fl__word_spellings_tokens(const fl_word_spellings *lex) { return lex->tokens; }

int64_t fl_word_spellings_size(const fl_word_spellings *lex)
{
    if (!lex)
        return fl_error(FL_ERR_NULL, "fl_word_spellings_size", "the lexicon is NULL"), -1;
    return lex->count;
}

/* The index of the n-byte word at s, or -1. */
static int64_t find_word(const fl_word_spellings *lex, const char *s, size_t n)
{
    int64_t lo = 0, hi = lex->count;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        const char *w = lex->words[mid];
        size_t m = strlen(w);
        int c = memcmp(s, w, n < m ? n : m);
        if (c == 0)
            c = n < m ? -1 : n > m ? 1 : 0;
        if (c == 0)
            return mid;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return -1;
}

fl_status fl__word_spellings_encode(const fl_word_spellings *lex, const char *text, bool spell_unknown, int64_t **ids,
                             int64_t *count, const char *fn, const char *where)
{
    *ids = NULL;
    *count = 0;
    size_t n = strlen(text), at = 0;
    int64_t capacity = 0;
    int64_t boundary = fl_token_set_boundary(lex->tokens);
    for (;;) {
        while (at < n && is_space(text[at]))
            at++;
        if (at == n)
            break;
        size_t end = at;
        while (end < n && !is_space(text[end]))
            end++;
        int64_t w = find_word(lex, text + at, end - at);
        int64_t *spelling = NULL, length = 0, *letters = NULL;
        if (w >= 0) {
            spelling = lex->ids + lex->offsets[w];
            length = lex->offsets[w + 1] - lex->offsets[w];
        } else if (spell_unknown) {
            /* Its letters, then the boundary: the form corpus.py's lexicon gives every word. */
            char *word = strndup(text + at, end - at);
            char prefix[1200];
            snprintf(prefix, sizeof prefix, "%sin the word \"%s\" at byte offset %zu: ", where, word ? word : "",
                     at);
            fl_status status = word ? fl__token_encode(lex->tokens, word, false, &letters, &length, fn, prefix)
                                    : (fl_error(FL_ERR_MEMORY, fn, "%sout of memory", where), FL_ERR_MEMORY);
            free(word);
            if (status != FL_OK)
                goto failed;
            spelling = letters;
        } else {
            fl_error(FL_ERR_VALUE, fn, "%sthe word \"%.*s\" at byte offset %zu is not in the lexicon", where,
                     (int)(end - at), text + at, at);
            goto failed;
        }
        int64_t extra = letters && boundary >= 0 ? 1 : 0;
        if (*count + length + extra > capacity) {
            int64_t grown_capacity = capacity ? 2 * capacity : 256;
            while (grown_capacity < *count + length + extra)
                grown_capacity *= 2;
            int64_t *grown = realloc(*ids, (size_t)grown_capacity * sizeof *grown);
            if (!grown) {
                free(letters);
                fl_error(FL_ERR_MEMORY, fn, "%sout of memory", where);
                goto failed;
            }
            *ids = grown;
            capacity = grown_capacity;
        }
        memcpy(*ids + *count, spelling, (size_t)length * sizeof *spelling);
        *count += length;
        if (extra)
            (*ids)[(*count)++] = boundary;
        free(letters);
        at = end;
    }
    if (!*ids && !(*ids = malloc(sizeof **ids))) {
        fl_error(FL_ERR_MEMORY, fn, "%sout of memory", where);
        goto failed;
    }
    return FL_OK;
failed:
    free(*ids);
    *ids = NULL;
    *count = 0;
    return fl_last_status();
}

fl_status fl_word_spellings_encode(const fl_word_spellings *lex, const char *text, bool spell_unknown, int64_t **ids,
                            int64_t *count)
{
    static const char fn[] = "fl_word_spellings_encode";
    if (fl_null_args(fn, 4, lex, text, ids, count))
        return fl_last_status();
    return fl__word_spellings_encode(lex, text, spell_unknown, ids, count, fn, "");
}
