/* A strict JSON cursor and writer for file headers (see json.h). */
#include "json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void fl__json_init(fl__json *j, const char *text, size_t length, size_t base)
{
    *j = (fl__json){.text = text, .length = length, .base = base};
}

bool fl__json_fail(fl__json *j, const char *fmt, ...)
{
    if (j->failed)
        return false;
    j->failed = true;
    int n = snprintf(j->error, sizeof j->error, "at byte %zu: ", j->base + j->pos);
    if (n < 0 || (size_t)n >= sizeof j->error)
        n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->error + n, sizeof j->error - (size_t)n, fmt, ap);
    va_end(ap);
    return false;
}

static void skip_space(fl__json *j)
{
    while (j->pos < j->length) {
        char c = j->text[j->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        j->pos++;
    }
}

/* Describes the character at the cursor for a message. */
static const char *found(fl__json *j, char *buf, size_t size)
{
    if (j->pos >= j->length)
        return "the end of the header";
    unsigned char c = (unsigned char)j->text[j->pos];
    if (c >= 0x20 && c < 0x7f)
        snprintf(buf, size, "'%c'", c);
    else
        snprintf(buf, size, "byte 0x%02x", c);
    return buf;
}

char fl__json_peek(fl__json *j)
{
    if (j->failed)
        return 0;
    skip_space(j);
    return j->pos < j->length ? j->text[j->pos] : 0;
}

bool fl__json_expect(fl__json *j, char c)
{
    if (j->failed)
        return false;
    skip_space(j);
    if (j->pos < j->length && j->text[j->pos] == c) {
        j->pos++;
        return true;
    }
    char buf[16];
    return fl__json_fail(j, "expected '%c', found %s", c, found(j, buf, sizeof buf));
}

bool fl__json_open(fl__json *j, char bracket)
{
    if (!fl__json_expect(j, bracket))
        return false;
    char closing = bracket == '{' ? '}' : ']';
    if (fl__json_peek(j) == closing) {
        j->pos++;
        return false;
    }
    return !j->failed;
}

bool fl__json_next(fl__json *j, char closing)
{
    char c = fl__json_peek(j);
    if (j->failed)
        return false;
    if (c == ',' || c == closing) {
        j->pos++;
        return c == ',';
    }
    char buf[16];
    return fl__json_fail(j, "expected ',' or '%c', found %s", closing, found(j, buf, sizeof buf));
}

bool fl__utf8_valid(const char *bytes, size_t length)
{
    const unsigned char *s = (const unsigned char *)bytes;
    size_t i = 0;
    while (i < length) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n;
        unsigned min, code;
        if (c >= 0xc2 && c <= 0xdf)
            n = 1, min = 0x80, code = c & 0x1f;
        else if (c >= 0xe0 && c <= 0xef)
            n = 2, min = 0x800, code = c & 0x0f;
        else if (c >= 0xf0 && c <= 0xf4)
            n = 3, min = 0x10000, code = c & 0x07;
        else
            return false;
        if (length - i <= n)
            return false;
        for (size_t k = 1; k <= n; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
            code = (code << 6) | (s[i + k] & 0x3f);
        }
        if (code < min || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff))
            return false;
        i += n + 1;
    }
    return true;
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The four hex digits of a \u escape at the cursor (just after the 'u'). */
static bool hex4(fl__json *j, unsigned *out)
{
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        int d = j->pos < j->length ? hex_digit(j->text[j->pos]) : -1;
        if (d < 0)
            return fl__json_fail(j, "a \\u escape needs four hex digits");
        v = v * 16 + (unsigned)d;
        j->pos++;
    }
    *out = v;
    return true;
}

static void append_utf8(fl__buffer *b, unsigned code)
{
    char out[4];
    size_t n;
    if (code < 0x80)
        out[0] = (char)code, n = 1;
    else if (code < 0x800)
        out[0] = (char)(0xc0 | code >> 6), out[1] = (char)(0x80 | (code & 0x3f)), n = 2;
    else if (code < 0x10000)
        out[0] = (char)(0xe0 | code >> 12), out[1] = (char)(0x80 | ((code >> 6) & 0x3f)),
        out[2] = (char)(0x80 | (code & 0x3f)), n = 3;
    else
        out[0] = (char)(0xf0 | code >> 18), out[1] = (char)(0x80 | ((code >> 12) & 0x3f)),
        out[2] = (char)(0x80 | ((code >> 6) & 0x3f)), out[3] = (char)(0x80 | (code & 0x3f)), n = 4;
    fl__buffer_append(b, out, n);
}

/* A \u escape, with the second half of a surrogate pair if the first needs one. */
static bool unicode_escape(fl__json *j, fl__buffer *b)
{
    size_t start = j->pos - 2;
    unsigned code = 0;
    if (!hex4(j, &code))
        return false;
    if (code >= 0xd800 && code <= 0xdbff) {
        unsigned low = 0;
        if (j->length - j->pos < 2 || j->text[j->pos] != '\\' || j->text[j->pos + 1] != 'u') {
            j->pos = start;
            return fl__json_fail(j, "a high surrogate \\u%04x without its low half", code);
        }
        j->pos += 2;
        if (!hex4(j, &low))
            return false;
        if (low < 0xdc00 || low > 0xdfff) {
            j->pos = start;
            return fl__json_fail(j, "a high surrogate \\u%04x followed by \\u%04x", code, low);
        }
        code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
    } else if (code >= 0xdc00 && code <= 0xdfff) {
        j->pos = start;
        return fl__json_fail(j, "a lone low surrogate \\u%04x", code);
    } else if (code == 0) {
        j->pos = start;
        return fl__json_fail(j, "\\u0000 in a string is not supported");
    }
    append_utf8(b, code);
    return true;
}

char *fl__json_string(fl__json *j)
{
    if (!fl__json_expect(j, '"'))
        return NULL;
    fl__buffer b = {0};
    for (;;) {
        if (j->pos >= j->length) {
            fl__json_fail(j, "a string is not terminated");
            break;
        }
        unsigned char c = (unsigned char)j->text[j->pos];
        if (c == '"') {
            j->pos++;
            fl__buffer_append(&b, "", 1);
            if (b.failed) {
                fl__json_fail(j, "out of memory");
                break;
            }
            return b.data;
        }
        if (c < 0x20) {
            fl__json_fail(j, "control character 0x%02x in a string", c);
            break;
        }
        if (c == '\\') {
            char e = j->pos + 1 < j->length ? j->text[j->pos + 1] : 0;
            const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
            const char *hit = e ? strchr(from, e) : NULL;
            if (hit) {
                fl__buffer_append(&b, &to[hit - from], 1);
                j->pos += 2;
            } else if (e == 'u') {
                j->pos += 2;
                if (!unicode_escape(j, &b))
                    break;
            } else {
                fl__json_fail(j, "invalid escape in a string");
                break;
            }
            continue;
        }
        /* A run of plain bytes, checked as UTF-8 in one go. */
        size_t start = j->pos;
        while (j->pos < j->length) {
            unsigned char d = (unsigned char)j->text[j->pos];
            if (d == '"' || d == '\\' || d < 0x20)
                break;
            j->pos++;
        }
        if (!fl__utf8_valid(j->text + start, j->pos - start)) {
            j->pos = start;
            fl__json_fail(j, "a string is not valid UTF-8");
            break;
        }
        fl__buffer_append(&b, j->text + start, j->pos - start);
    }
    fl__buffer_free(&b);
    return NULL;
}

bool fl__json_uint(fl__json *j, uint64_t *out)
{
    char c = fl__json_peek(j);
    if (j->failed)
        return false;
    if (c < '0' || c > '9') {
        char buf[16];
        return fl__json_fail(j, "expected a non-negative integer, found %s", found(j, buf, sizeof buf));
    }
    size_t start = j->pos;
    uint64_t v = 0;
    while (j->pos < j->length && j->text[j->pos] >= '0' && j->text[j->pos] <= '9') {
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, (uint64_t)(j->text[j->pos] - '0'), &v)) {
            j->pos = start;
            return fl__json_fail(j, "an integer does not fit 64 bits");
        }
        j->pos++;
    }
    if (j->text[start] == '0' && j->pos - start > 1) {
        j->pos = start;
        return fl__json_fail(j, "an integer has a leading zero");
    }
    if (j->pos < j->length && (j->text[j->pos] == '.' || j->text[j->pos] == 'e' || j->text[j->pos] == 'E')) {
        j->pos = start;
        return fl__json_fail(j, "expected an integer, found a fraction or exponent");
    }
    *out = v;
    return true;
}

bool fl__json_finish(fl__json *j)
{
    if (j->failed)
        return false;
    skip_space(j);
    if (j->pos < j->length) {
        char buf[16];
        return fl__json_fail(j, "unexpected %s after the header's object", found(j, buf, sizeof buf));
    }
    return true;
}

/* ---- writer ---- */

void fl__buffer_append(fl__buffer *b, const void *bytes, size_t length)
{
    if (b->failed)
        return;
    if (length > b->capacity - b->length) {
        size_t capacity = b->capacity ? b->capacity : 256;
        while (capacity - b->length < length)
            capacity *= 2;
        char *data = realloc(b->data, capacity);
        if (!data) {
            b->failed = true;
            return;
        }
        b->data = data;
        b->capacity = capacity;
    }
    if (length)
        memcpy(b->data + b->length, bytes, length);
    b->length += length;
}

void fl__buffer_printf(fl__buffer *b, const char *fmt, ...)
{
    char small[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof small) {
        b->failed = true; /* only short numbers and words are printed */
        return;
    }
    fl__buffer_append(b, small, (size_t)n);
}

void fl__buffer_json_string(fl__buffer *b, const char *s)
{
    fl__buffer_append(b, "\"", 1);
    for (const char *run = s;; s++) {
        unsigned char c = (unsigned char)*s;
        if (c != 0 && c != '"' && c != '\\' && c >= 0x20)
            continue;
        fl__buffer_append(b, run, (size_t)(s - run));
        if (c == 0)
            break;
        static const char special[] = "\"\\\b\f\n\r\t", letter[] = "\"\\bfnrt";
        const char *hit = strchr(special, c);
        if (hit) {
            char escaped[2] = {'\\', letter[hit - special]};
            fl__buffer_append(b, escaped, 2);
        } else {
            fl__buffer_printf(b, "\\u%04x", c);
        }
        run = s + 1;
    }
    fl__buffer_append(b, "\"", 1);
}

void fl__buffer_free(fl__buffer *b)
{
    free(b->data);
    *b = (fl__buffer){0};
}
