/*
 * Training targets through a lexicon (decoder.h's fl_lexicon, read from wav2letter's
 * lexicon.txt): each word's first spelling, for targets of word pieces, or of letters
 * with a boundary after each word, as the lexicon says.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flare/extension.h"
#include "speech_data.h"

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* Appends count ids to *ids (*used of *capacity). */
static bool append(int64_t **ids, int64_t *used, int64_t *capacity, const int64_t *more, int64_t count)
{
    if (*used + count > *capacity) {
        int64_t grown_capacity = *capacity ? 2 * *capacity : 256;
        while (grown_capacity < *used + count)
            grown_capacity *= 2;
        int64_t *grown = realloc(*ids, (size_t)grown_capacity * sizeof *grown);
        if (!grown)
            return false;
        *ids = grown;
        *capacity = grown_capacity;
    }
    memcpy(*ids + *used, more, (size_t)count * sizeof *more);
    *used += count;
    return true;
}

fl_status fl__encode_words(const fl_token_set *ts, const fl_lexicon *lex, const char *text, bool spell_unknown,
                           int64_t **ids, int64_t *count, const char *fn, const char *where)
{
    *ids = NULL;
    *count = 0;
    size_t n = strlen(text), at = 0;
    int64_t capacity = 0, boundary = fl_token_set_boundary(ts), size = fl_token_set_size(ts);
    while (true) {
        while (at < n && is_space(text[at]))
            at++;
        if (at == n)
            break;
        size_t end = at;
        while (end < n && !is_space(text[end]))
            end++;
        char *word = strndup(text + at, end - at);
        if (!word) {
            fl_error(FL_ERR_MEMORY, fn, "%sout of memory", where);
            goto failed;
        }
        int64_t w = fl_lexicon_word_id(lex, word), *letters = NULL, length = 0;
        const int64_t *spelling = NULL;
        fl_status status = FL_OK;
        if (w >= 0) {
            size_t spelled;
            fl_lexicon_spelling(lex, w, &spelling, &spelled);
            length = (int64_t)spelled;
            for (int64_t i = 0; i < length && status == FL_OK; i++)
                if (spelling[i] >= size) {
                    fl_error(FL_ERR_VALUE, fn, "%sthe lexicon spells \"%s\" with token id %lld, outside the token set's %lld",
                             where, word, (long long)spelling[i], (long long)size);
                    status = FL_ERR_VALUE;
                }
        } else if (spell_unknown) {
            /* Its letters, then the boundary: the form corpus.py's lexicon gives every word. */
            char prefix[1200];
            snprintf(prefix, sizeof prefix, "%sin the word \"%s\" at byte offset %zu: ", where, word, at);
            status = fl__token_encode(ts, word, false, &letters, &length, fn, prefix);
            spelling = letters;
        } else {
            fl_error(FL_ERR_VALUE, fn, "%sthe word \"%s\" at byte offset %zu is not in the lexicon", where, word, at);
            status = FL_ERR_VALUE;
        }
        free(word);
        bool ok = status == FL_OK && append(ids, count, &capacity, spelling, length) &&
                  (!letters || boundary < 0 || append(ids, count, &capacity, &boundary, 1));
        free(letters);
        if (!ok) {
            if (status == FL_OK)
                fl_error(FL_ERR_MEMORY, fn, "%sout of memory", where);
            goto failed;
        }
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

fl_status fl_token_set_encode_words(const fl_token_set *ts, const fl_lexicon *lex, const char *text,
                                    bool spell_unknown, int64_t **ids, int64_t *count)
{
    static const char fn[] = "fl_token_set_encode_words";
    if (fl_null_args(fn, 5, ts, lex, text, ids, count))
        return fl_last_status();
    return fl__encode_words(ts, lex, text, spell_unknown, ids, count, fn, "");
}
