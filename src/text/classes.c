/* Searches the generated tables of unicode.c; decodes and encodes UTF-8. */
#include "unicode.h"

int32_t text_utf8_next(const unsigned char *s, size_t n, size_t *len)
{
    unsigned char c = s[0];
    *len = 1;
    if (c < 0x80)
        return c;
    size_t need;
    uint32_t cp, min;
    if (c >= 0xC2 && c <= 0xDF)
        need = 1, cp = c & 0x1Fu, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF)
        need = 2, cp = c & 0x0Fu, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4)
        need = 3, cp = c & 0x07u, min = 0x10000;
    else
        return -1;
    if (n < need + 1)
        return -1;
    for (size_t i = 1; i <= need; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return -1;
        cp = (cp << 6) | (s[i] & 0x3Fu);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return -1;
    *len = need + 1;
    return (int32_t)cp;
}

size_t text_utf8_put(uint32_t cp, unsigned char *out)
{
    if (cp < 0x80) {
        out[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xC0 | (cp >> 6));
        out[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xE0 | (cp >> 12));
        out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (unsigned char)(0xF0 | (cp >> 18));
    out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

static bool in_ranges(const text_range *r, size_t count, int32_t cp)
{
    if (cp < 0)
        return false;
    size_t lo = 0, hi = count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((uint32_t)cp < r[mid].first)
            hi = mid;
        else if ((uint32_t)cp > r[mid].last)
            lo = mid + 1;
        else
            return true;
    }
    return false;
}

bool text_is_letter(int32_t cp) { return in_ranges(text_letters, text_letters_count, cp); }
bool text_is_number(int32_t cp) { return in_ranges(text_numbers, text_numbers_count, cp); }
bool text_is_punctuation(int32_t cp) { return in_ranges(text_punctuation, text_punctuation_count, cp); }
bool text_is_other(int32_t cp) { return in_ranges(text_other, text_other_count, cp); }
bool text_is_nonspacing_mark(int32_t cp) { return in_ranges(text_nonspacing_marks, text_nonspacing_marks_count, cp); }

bool text_is_whitespace(int32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

static int mapped(const text_mapping *m, size_t count, int32_t cp, uint32_t out[4])
{
    size_t lo = 0, hi = count;
    while (cp >= 0 && lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((uint32_t)cp < m[mid].code)
            hi = mid;
        else if ((uint32_t)cp > m[mid].code)
            lo = mid + 1;
        else {
            for (int i = 0; i < m[mid].count; i++)
                out[i] = m[mid].to[i];
            return m[mid].count;
        }
    }
    out[0] = (uint32_t)cp;
    return 1;
}

int text_lowercase_of(int32_t cp, uint32_t out[4]) { return mapped(text_lowercase, text_lowercase_count, cp, out); }

int text_decompose(int32_t cp, uint32_t out[4])
{
    /* Hangul syllables: leading consonant, vowel and optional trailing consonant
     * (Unicode 3.12), computed rather than listed. */
    if (cp >= 0xAC00 && cp <= 0xD7A3) {
        int32_t s = cp - 0xAC00;
        out[0] = (uint32_t)(0x1100 + s / (21 * 28));
        out[1] = (uint32_t)(0x1161 + (s % (21 * 28)) / 28);
        if (s % 28 == 0)
            return 2;
        out[2] = (uint32_t)(0x11A7 + s % 28);
        return 3;
    }
    return mapped(text_decomposition, text_decomposition_count, cp, out);
}
