/*
 * The small, strict JSON that file headers need (safetensors), without a library.
 *
 * The reader is a cursor, not a tree: the caller walks the document it expects
 * (objects, arrays, strings, non-negative integers) and anything else is an error
 * with the byte offset where it was met. Strings are checked to be valid UTF-8, as
 * JSON requires. The first error is kept in `error` and every later call fails, so
 * a walk may check `failed` once at the end of a loop.
 *
 * The writer appends to a growable byte buffer; an allocation failure is remembered
 * in the buffer and reported once, when the caller checks `failed`.
 */
#ifndef FLARE_IO_JSON_H
#define FLARE_IO_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct fl__json {
    const char *text; /* not NUL-terminated */
    size_t length;
    size_t pos;
    size_t base; /* the file offset of text[0], for messages */
    bool failed;
    char error[192];
} fl__json;

void fl__json_init(fl__json *j, const char *text, size_t length, size_t base);
/* Records "at byte N: <message>" (N the file offset of the cursor); returns false. */
bool fl__json_fail(fl__json *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* After whitespace: the next character, or 0 at the end. */
char fl__json_peek(fl__json *j);
/* Skips whitespace and requires the character c. */
bool fl__json_expect(fl__json *j, char c);
/* Members of an object or elements of an array:
 *     for (bool more = fl__json_open(j, '{'); more; more = fl__json_next(j, '}'))
 * open consumes the bracket and says whether an item follows; next consumes a ','
 * (true: another item) or the closing bracket (false). After the loop, `failed`
 * tells an error from the end. */
bool fl__json_open(fl__json *j, char bracket);
bool fl__json_next(fl__json *j, char closing);
/* A string, unescaped, as a malloc'd NUL-terminated copy (NULL on error). \u0000
 * is refused, since the strings become C strings. */
char *fl__json_string(fl__json *j);
/* A non-negative integer that fits 64 bits: no sign, fraction or exponent. */
bool fl__json_uint(fl__json *j, uint64_t *out);
/* Requires that only whitespace remains. */
bool fl__json_finish(fl__json *j);

/* True if bytes[0..length) is valid UTF-8 (no overlong forms, no surrogates). */
bool fl__utf8_valid(const char *bytes, size_t length);

typedef struct fl__buffer {
    char *data;
    size_t length, capacity;
    bool failed; /* an allocation failed; the contents are incomplete */
} fl__buffer;

void fl__buffer_append(fl__buffer *b, const void *bytes, size_t length);
void fl__buffer_printf(fl__buffer *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s as a quoted JSON string (s must be valid UTF-8). */
void fl__buffer_json_string(fl__buffer *b, const char *s);
void fl__buffer_free(fl__buffer *b);

#endif
