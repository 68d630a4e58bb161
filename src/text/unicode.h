/* Unicode classes and mappings for the tokenizers (private to src/text). */
#ifndef FLARE_TEXT_UNICODE_H
#define FLARE_TEXT_UNICODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct text_range {
    uint32_t first, last;
} text_range;

typedef struct text_mapping {
    uint32_t code;
    uint8_t count;
    uint32_t to[4];
} text_mapping;

/* A mapping too long for text_mapping: text_compatibility_points[first, first + count). */
typedef struct text_long_mapping {
    uint32_t code;
    uint16_t first;
    uint8_t count;
} text_long_mapping;

typedef struct text_composition {
    uint32_t first, second, composite;
} text_composition;

extern const text_range text_letters[], text_numbers[], text_punctuation[], text_other[], text_nonspacing_marks[],
    text_marks[];
extern const size_t text_letters_count, text_numbers_count, text_punctuation_count, text_other_count,
    text_nonspacing_marks_count, text_marks_count;
extern const text_mapping text_lowercase[], text_decomposition[];
extern const size_t text_lowercase_count, text_decomposition_count;
/* text_combining[i], of text_combining_count ranges, has combining class
 * text_combining_classes[i]. */
extern const text_range text_combining[];
extern const size_t text_combining_count;
extern const uint8_t text_combining_classes[];
/* NFKD's full decomposition of each code point whose NFKD is not its NFD. */
extern const text_long_mapping text_compatibility[];
extern const size_t text_compatibility_count;
extern const uint32_t text_compatibility_points[];
extern const text_composition text_compositions[];
extern const size_t text_compositions_count;

/* Decodes one UTF-8 character of s[0..n) (n > 0): its code point and length in *len.
 * A byte that does not start a valid, shortest-form sequence (or a surrogate) is one
 * character by itself, with code point -1, so any bytes split into characters. */
int32_t text_utf8_next(const unsigned char *s, size_t n, size_t *len);
/* Writes cp as UTF-8 into out (4 bytes at most); returns the length. */
size_t text_utf8_put(uint32_t cp, unsigned char *out);

bool text_is_letter(int32_t cp);      /* \p{L} */
bool text_is_number(int32_t cp);      /* \p{N} */
bool text_is_punctuation(int32_t cp); /* \p{P} */
bool text_is_other(int32_t cp);       /* \p{C}: control, format, surrogate, private use, unassigned */
bool text_is_nonspacing_mark(int32_t cp);
bool text_is_mark(int32_t cp); /* \p{M}: nonspacing, spacing and enclosing marks */
bool text_is_whitespace(int32_t cp);  /* the White_Space property (regex \s, Rust's is_whitespace) */
/* The per-character lowercase (or decomposition, NFD) of cp into out[4]; returns the
 * count (1 and cp itself where it has none, a negative cp included, as (uint32_t)cp).
 * Hangul syllables decompose by rule. */
int text_lowercase_of(int32_t cp, uint32_t out[4]);
int text_decompose(int32_t cp, uint32_t out[4]);
/* The canonical combining class of cp (0 for a starter). */
int text_combining_class(int32_t cp);
/* Unicode's normalization forms (UAX #15). */
typedef enum text_form { TEXT_NFC, TEXT_NFD, TEXT_NFKC, TEXT_NFKD } text_form;
/* The most code points one code point becomes in a form: 4 canonically (NFC, NFD),
 * 18 with the compatibility mappings (NFKC, NFKD: U+FDFA's). */
#define TEXT_CANONICAL_GROWTH 4
#define TEXT_COMPATIBILITY_GROWTH 18
#define TEXT_FORM_GROWTH(form) \
    ((form) == TEXT_NFKC || (form) == TEXT_NFKD ? TEXT_COMPATIBILITY_GROWTH : TEXT_CANONICAL_GROWTH)
/* How many code points the n of cp decompose into in the form: text_normalize
 * writes at most this many (and at most TEXT_FORM_GROWTH(form) * n). */
size_t text_decomposed_length(const int32_t *cp, size_t n, text_form form);
/* Writes the n code points of cp in the normalization form to out, which holds
 * text_decomposed_length(cp, n, form); returns their count. A negative entry (an invalid UTF-8
 * byte, as text_utf8_next gives it) is kept as it is and, like a starter that
 * composes with nothing, blocks the marks after it. */
size_t text_normalize(const int32_t *cp, size_t n, int32_t *out, text_form form);

#endif
