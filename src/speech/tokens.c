/*
 * Token sets: the output alphabet of a CTC acoustic model, and transcripts to token
 * ids and back, as wav2letter's letter targets (words of tokens, a boundary token
 * between them).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flare/extension.h"
#include "speech_data.h"

struct fl_token_set {
    char **tokens;   /* by id */
    int64_t *sorted; /* ids in strcmp order of their tokens, for lookups */
    int64_t count, boundary;
    size_t longest; /* bytes of the longest token */
};

static bool is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* The length of the UTF-8 sequence at s (at most n bytes) and its code point, or 0 if
 * it is not a valid sequence (overlong forms, surrogates and values above U+10FFFF
 * are invalid, as in RFC 3629). */
static size_t utf8_next(const unsigned char *s, size_t n, uint32_t *cp)
{
    if (n == 0)
        return 0;
    unsigned char c = s[0];
    size_t len;
    uint32_t v, min;
    if (c < 0x80)
        return *cp = c, 1;
    if ((c & 0xE0) == 0xC0)
        len = 2, v = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0)
        len = 3, v = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0)
        len = 4, v = c & 0x07, min = 0x10000;
    else
        return 0;
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = v << 6 | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    *cp = v;
    return len;
}

/* Compares the n bytes at s with token t, as strcmp orders strings. */
static int compare_prefix(const char *s, size_t n, const char *t)
{
    size_t m = strlen(t);
    int c = memcmp(s, t, n < m ? n : m);
    if (c != 0)
        return c;
    return n < m ? -1 : n > m ? 1 : 0;
}

/* The id of the token equal to the n bytes at s, or -1. */
static int64_t find(const fl_token_set *ts, const char *s, size_t n)
{
    int64_t lo = 0, hi = ts->count;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = compare_prefix(s, n, ts->tokens[ts->sorted[mid]]);
        if (c == 0)
            return ts->sorted[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return -1;
}

typedef struct entry {
    const char *token;
    int64_t id;
} entry;

static int by_token(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    int c = strcmp(x->token, y->token);
    return c ? c : (x->id > y->id) - (x->id < y->id);
}

void fl_token_set_free(fl_token_set *ts)
{
    if (!ts)
        return;
    for (int64_t i = 0; ts->tokens && i < ts->count; i++)
        free(ts->tokens[i]);
    free(ts->tokens);
    free(ts->sorted);
    free(ts);
}

/* Builds a token set from count tokens (copied), checking each; errors name token i
 * as origin:(i + first_line): "tokens.txt:3" for a file's line 3. */
static fl_token_set *build(const char *fn, const char *const *tokens, int64_t count, const char *boundary,
                           const char *origin, int64_t first_line)
{
    fl_status status = FL_OK;
#define WHERE(i) origin, (long long)((i) + first_line)
    if (count < 1)
        return fl_error(FL_ERR_VALUE, fn, "%s: no tokens", origin);
    if (!boundary)
        boundary = "|";
    fl_token_set *ts = calloc(1, sizeof *ts);
    if (!ts || !(ts->tokens = calloc((size_t)count, sizeof *ts->tokens)) ||
        !(ts->sorted = malloc((size_t)count * sizeof *ts->sorted))) {
        fl_token_set_free(ts);
        return fl_error(FL_ERR_MEMORY, fn, "%s: cannot allocate %lld tokens", origin, (long long)count);
    }
    ts->count = count;
    ts->boundary = -1;
    for (int64_t i = 0; i < count && status == FL_OK; i++) {
        const char *t = tokens[i];
        size_t n = t ? strlen(t) : 0;
        if (n == 0) {
            fl_error(status = FL_ERR_IO, fn, "%s:%lld: an empty token", WHERE(i));
            break;
        }
        for (size_t at = 0; at < n;) {
            uint32_t cp;
            size_t len = utf8_next((const unsigned char *)t + at, n - at, &cp);
            if (len == 0) {
                fl_error(status = FL_ERR_IO, fn, "%s:%lld: invalid UTF-8 (byte 0x%02x at offset %zu of the token)",
                         WHERE(i), (unsigned char)t[at], at);
                break;
            }
            if (is_space((unsigned char)t[at])) {
                fl_error(status = FL_ERR_IO, fn, "%s:%lld: the token \"%s\" holds whitespace, which separates words",
                         WHERE(i), t);
                break;
            }
            at += len;
        }
        if (status != FL_OK)
            break;
        if (!(ts->tokens[i] = strdup(t))) {
            fl_error(status = FL_ERR_MEMORY, fn, "%s: cannot allocate a token", origin);
            break;
        }
        if (n > ts->longest)
            ts->longest = n;
        if (strcmp(t, boundary) == 0)
            ts->boundary = i;
        ts->sorted[i] = i;
    }
    if (status == FL_OK) {
        entry *order = malloc((size_t)count * sizeof *order);
        if (!order) {
            fl_token_set_free(ts);
            return fl_error(FL_ERR_MEMORY, fn, "%s: cannot allocate %lld tokens", origin, (long long)count);
        }
        for (int64_t i = 0; i < count; i++)
            order[i] = (entry){ts->tokens[i], i};
        qsort(order, (size_t)count, sizeof *order, by_token);
        for (int64_t i = 0; i < count; i++)
            ts->sorted[i] = order[i].id;
        free(order);
        for (int64_t i = 1; i < count && status == FL_OK; i++) {
            int64_t a = ts->sorted[i - 1], b = ts->sorted[i]; /* a < b: equal tokens sort by id */
            if (strcmp(ts->tokens[a], ts->tokens[b]) == 0)
                fl_error(status = FL_ERR_IO, fn, "%s:%lld: the token \"%s\" repeats line %lld", WHERE(b),
                         ts->tokens[a], (long long)(a + first_line));
        }
    }
    if (status == FL_OK && boundary[0] && ts->boundary < 0)
        fl_error(status = FL_ERR_IO, fn, "%s: no word boundary token \"%s\"", origin, boundary);
#undef WHERE
    if (status != FL_OK) {
        fl_token_set_free(ts);
        return NULL;
    }
    return ts;
}

fl_token_set *fl_token_set_new(const char *const *tokens, int64_t count, const char *boundary)
{
    static const char fn[] = "fl_token_set_new";
    if (!tokens)
        return fl_error(FL_ERR_NULL, fn, "tokens is NULL");
    return build(fn, tokens, count, boundary, "tokens", 0);
}

fl_token_set *fl_token_set_load(const char *path, const char *boundary)
{
    static const char fn[] = "fl_token_set_load";
    if (!path)
        return fl_error(FL_ERR_NULL, fn, "path is NULL");
    FILE *f = fopen(path, "rb");
    if (!f)
        return fl_error(FL_ERR_IO, fn, "%s: cannot open: %s", path, strerror(errno));
    char **lines = NULL;
    int64_t count = 0, capacity = 0;
    char *line = NULL;
    size_t size = 0;
    ssize_t got;
    fl_status status = FL_OK;
    while ((got = getline(&line, &size, f)) >= 0) {
        if (got > 0 && line[got - 1] == '\n')
            line[--got] = '\0';
        if (got > 0 && line[got - 1] == '\r')
            line[--got] = '\0';
        if ((ssize_t)strlen(line) != got) {
            fl_error(status = FL_ERR_IO, fn, "%s:%lld: a NUL byte in the token", path, (long long)count + 1);
            break;
        }
        if (count == capacity) {
            capacity = capacity ? 2 * capacity : 64;
            char **grown = realloc(lines, (size_t)capacity * sizeof *lines);
            if (!grown) {
                fl_error(status = FL_ERR_MEMORY, fn, "%s: cannot allocate %lld lines", path, (long long)capacity);
                break;
            }
            lines = grown;
        }
        if (!(lines[count] = strdup(line))) {
            fl_error(status = FL_ERR_MEMORY, fn, "%s: cannot allocate a line", path);
            break;
        }
        count++;
    }
    if (status == FL_OK && ferror(f))
        fl_error(status = FL_ERR_IO, fn, "%s: read error after line %lld", path, (long long)count);
    free(line);
    fclose(f);
    fl_token_set *ts = NULL;
    if (status == FL_OK)
        ts = build(fn, (const char *const *)lines, count, boundary, path, 1);
    for (int64_t i = 0; i < count; i++)
        free(lines[i]);
    free(lines);
    return ts;
}

fl_token_set *fl__token_set_copy(const fl_token_set *ts, const char *fn)
{
    if (!ts)
        return fl_error(FL_ERR_NULL, fn, "the token set is NULL");
    fl_token_set *copy = build(fn, (const char *const *)ts->tokens, ts->count, "", "tokens", 0);
    if (copy)
        copy->boundary = ts->boundary;
    return copy;
}


int64_t fl_token_set_size(const fl_token_set *ts)
{
    if (!ts)
        return fl_error(FL_ERR_NULL, "fl_token_set_size", "the token set is NULL"), -1;
    return ts->count;
}

const char *fl_token_set_token(const fl_token_set *ts, int64_t id)
{
    if (!ts)
        return fl_error(FL_ERR_NULL, "fl_token_set_token", "the token set is NULL");
    if (id < 0 || id >= ts->count)
        return fl_error(FL_ERR_INDEX, "fl_token_set_token", "id %lld is not in [0, %lld)", (long long)id,
                        (long long)ts->count);
    return ts->tokens[id];
}

int64_t fl_token_set_id(const fl_token_set *ts, const char *token)
{
    if (!ts || !token)
        return fl_error(FL_ERR_NULL, "fl_token_set_id", "%s is NULL", ts ? "token" : "the token set"), -1;
    return find(ts, token, strlen(token));
}

int64_t fl_token_set_boundary(const fl_token_set *ts)
{
    if (!ts)
        return fl_error(FL_ERR_NULL, "fl_token_set_boundary", "the token set is NULL"), -1;
    return ts->boundary;
}

/* Appends id to the growing array. */
static bool push(int64_t **ids, int64_t *count, int64_t *capacity, int64_t id)
{
    if (*count == *capacity) {
        *capacity = *capacity ? 2 * *capacity : 64;
        int64_t *grown = realloc(*ids, (size_t)*capacity * sizeof **ids);
        if (!grown)
            return false;
        *ids = grown;
    }
    (*ids)[(*count)++] = id;
    return true;
}

fl_status fl__token_encode(const fl_token_set *ts, const char *text, bool boundary_at_ends, int64_t **ids,
                           int64_t *count, const char *fn, const char *where)
{
    *ids = NULL;
    *count = 0;
    const unsigned char *s = (const unsigned char *)text;
    size_t n = strlen(text), at = 0;
    int64_t capacity = 0;
    bool ok = true, words = false;
    while (ok) {
        while (at < n && is_space(s[at]))
            at++;
        if (at == n)
            break;
        if (words || boundary_at_ends) {
            if (ts->boundary < 0) {
                fl_error(FL_ERR_VALUE, fn, "%sthe word at byte offset %zu needs a boundary token, and the token set "
                         "has none", where, at);
                goto failed;
            }
            ok = push(ids, count, &capacity, ts->boundary);
        }
        words = true;
        while (ok && at < n && !is_space(s[at])) {
            size_t end = at;
            while (end < n && !is_space(s[end]) && end - at < ts->longest)
                end++;
            int64_t id = -1;
            for (size_t len = end - at; len > 0 && id < 0; len--) {
                id = find(ts, text + at, len);
                if (id >= 0)
                    ok = push(ids, count, &capacity, id), at += len;
            }
            if (id < 0) {
                uint32_t cp;
                size_t len = utf8_next(s + at, n - at, &cp);
                if (len == 0)
                    fl_error(FL_ERR_VALUE, fn, "%sinvalid UTF-8 (byte 0x%02x) at byte offset %zu of the transcript",
                             where, s[at], at);
                else if (cp < 0x20 || cp == 0x7F)
                    fl_error(FL_ERR_VALUE, fn, "%scharacter U+%04X at byte offset %zu of the transcript is not in "
                             "the token set", where, (unsigned)cp, at);
                else
                    fl_error(FL_ERR_VALUE, fn, "%scharacter '%.*s' (U+%04X) at byte offset %zu of the transcript is "
                             "not in the token set", where, (int)len, text + at, (unsigned)cp, at);
                goto failed;
            }
        }
    }
    if (ok && words && boundary_at_ends)
        ok = push(ids, count, &capacity, ts->boundary);
    if (ok && !*ids)
        ok = (*ids = malloc(sizeof **ids)) != NULL; /* a valid pointer for no ids */
    if (!ok) {
        fl_error(FL_ERR_MEMORY, fn, "%scannot allocate %lld token ids", where, (long long)capacity);
        goto failed;
    }
    return FL_OK;
failed:
    free(*ids);
    *ids = NULL;
    *count = 0;
    return fl_last_status();
}

fl_status fl_token_set_encode(const fl_token_set *ts, const char *text, bool boundary_at_ends, int64_t **ids,
                              int64_t *count)
{
    static const char fn[] = "fl_token_set_encode";
    if (fl_null_args(fn, 4, ts, text, ids, count))
        return fl_last_status();
    return fl__token_encode(ts, text, boundary_at_ends, ids, count, fn, "");
}

char *fl_token_set_decode(const fl_token_set *ts, const int64_t *ids, int64_t count)
{
    static const char fn[] = "fl_token_set_decode";
    if (!ts || (!ids && count > 0))
        return fl_error(FL_ERR_NULL, fn, "%s is NULL", ts ? "ids" : "the token set");
    if (count < 0)
        return fl_error(FL_ERR_VALUE, fn, "count %lld is negative", (long long)count);
    size_t bytes = 1;
    for (int64_t i = 0; i < count; i++) {
        if (ids[i] < 0 || ids[i] >= ts->count)
            return fl_error(FL_ERR_INDEX, fn, "ids[%lld] = %lld is not a token id in [0, %lld)%s", (long long)i,
                            (long long)ids[i], (long long)ts->count,
                            ids[i] == ts->count ? " (it is the CTC blank: drop blanks before decoding)" : "");
        bytes += strlen(ts->tokens[ids[i]]) + 1;
    }
    char *text = malloc(bytes), *end = text;
    if (!text)
        return fl_error(FL_ERR_MEMORY, fn, "cannot allocate %zu bytes", bytes);
    bool space = false;
    for (int64_t i = 0; i < count; i++) {
        if (ids[i] == ts->boundary) {
            space = end != text;
            continue;
        }
        if (space)
            *end++ = ' ';
        space = false;
        size_t len = strlen(ts->tokens[ids[i]]);
        memcpy(end, ts->tokens[ids[i]], len);
        end += len;
    }
    *end = '\0';
    return text;
}
