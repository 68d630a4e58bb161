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

/* The index of the range of r[0..count) that holds cp, or -1. */
static ptrdiff_t range_of(const text_range *r, size_t count, int32_t cp)
{
    size_t lo = 0, hi = count;
    while (cp >= 0 && lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((uint32_t)cp < r[mid].first)
            hi = mid;
        else if ((uint32_t)cp > r[mid].last)
            lo = mid + 1;
        else
            return (ptrdiff_t)mid;
    }
    return -1;
}

static bool in_ranges(const text_range *r, size_t count, int32_t cp) { return range_of(r, count, cp) >= 0; }

bool text_is_letter(int32_t cp) { return in_ranges(text_letters, text_letters_count, cp); }
bool text_is_number(int32_t cp) { return in_ranges(text_numbers, text_numbers_count, cp); }
bool text_is_punctuation(int32_t cp) { return in_ranges(text_punctuation, text_punctuation_count, cp); }
bool text_is_other(int32_t cp) { return in_ranges(text_other, text_other_count, cp); }
bool text_is_nonspacing_mark(int32_t cp) { return in_ranges(text_nonspacing_marks, text_nonspacing_marks_count, cp); }
bool text_is_mark(int32_t cp) { return in_ranges(text_marks, text_marks_count, cp); }

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

/* Hangul's syllables and their jamo (Unicode 3.12): a leading consonant, a vowel and
 * an optional trailing consonant, computed rather than listed. */
enum { S_BASE = 0xAC00, L_BASE = 0x1100, V_BASE = 0x1161, T_BASE = 0x11A7, L_COUNT = 19, V_COUNT = 21,
       T_COUNT = 28, S_COUNT = L_COUNT * V_COUNT * T_COUNT };

int text_decompose(int32_t cp, uint32_t out[4])
{
    if (cp >= S_BASE && cp < S_BASE + S_COUNT) {
        int32_t s = cp - S_BASE;
        out[0] = (uint32_t)(L_BASE + s / (V_COUNT * T_COUNT));
        out[1] = (uint32_t)(V_BASE + (s % (V_COUNT * T_COUNT)) / T_COUNT);
        if (s % T_COUNT == 0)
            return 2;
        out[2] = (uint32_t)(T_BASE + s % T_COUNT);
        return 3;
    }
    return mapped(text_decomposition, text_decomposition_count, cp, out);
}

int text_combining_class(int32_t cp)
{
    ptrdiff_t at = range_of(text_combining, text_combining_count, cp);
    return at < 0 ? 0 : text_combining_classes[at];
}

/* The primary composite of the pair a b, or -1. */
static int32_t compose(int32_t a, int32_t b)
{
    if (a < 0 || b < 0)
        return -1;
    if (a >= L_BASE && a < L_BASE + L_COUNT && b >= V_BASE && b < V_BASE + V_COUNT)
        return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT;
    if (a >= S_BASE && a < S_BASE + S_COUNT && (a - S_BASE) % T_COUNT == 0 && b > T_BASE && b < T_BASE + T_COUNT)
        return a + (b - T_BASE);
    size_t lo = 0, hi = text_compositions_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const text_composition *c = &text_compositions[mid];
        if ((uint32_t)a < c->first || ((uint32_t)a == c->first && (uint32_t)b < c->second))
            hi = mid;
        else if ((uint32_t)a > c->first || (uint32_t)b > c->second)
            lo = mid + 1;
        else
            return (int32_t)c->composite;
    }
    return -1;
}

/* The full decomposition of cp into out, compatibility mappings included where
 * compatibility is set; a negative cp comes back as it is. */
static int decompose_fully(int32_t cp, bool compatibility, uint32_t out[TEXT_COMPATIBILITY_GROWTH])
{
    size_t lo = 0, hi = compatibility && cp >= 0 ? text_compatibility_count : 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const text_long_mapping *m = &text_compatibility[mid];
        if ((uint32_t)cp < m->code)
            hi = mid;
        else if ((uint32_t)cp > m->code)
            lo = mid + 1;
        else {
            for (int i = 0; i < m->count; i++)
                out[i] = text_compatibility_points[m->first + i];
            return m->count;
        }
    }
    return text_decompose(cp, out);
}

size_t text_decomposed_length(const int32_t *cp, size_t n, text_form form)
{
    bool compatibility = form == TEXT_NFKC || form == TEXT_NFKD;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t d[TEXT_COMPATIBILITY_GROWTH];
        m += (size_t)decompose_fully(cp[i], compatibility, d);
    }
    return m;
}

size_t text_normalize(const int32_t *cp, size_t n, int32_t *out, text_form form)
{
    /* Decompose every character fully, putting each run of marks in canonical order
     * (a stable sort by combining class) as it grows. */
    bool compatibility = form == TEXT_NFKC || form == TEXT_NFKD;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t d[TEXT_COMPATIBILITY_GROWTH];
        int count = decompose_fully(cp[i], compatibility, d);
        for (int k = 0; k < count; k++) {
            int32_t c = (int32_t)d[k];
            int cc = text_combining_class(c);
            size_t at = m++;
            while (cc && at > 0 && text_combining_class(out[at - 1]) > cc) {
                out[at] = out[at - 1];
                at--;
            }
            out[at] = c;
        }
    }
    if (form == TEXT_NFD || form == TEXT_NFKD)
        return m;
    /* Compose: each mark with the last starter, unless a mark of the same or a higher
     * class, or a starter, stands between them (it is blocked). */
    size_t w = 0, starter = 0;
    bool have_starter = false;
    int last_class = 0;
    for (size_t i = 0; i < m; i++) {
        int32_t c = out[i];
        int cc = text_combining_class(c);
        if (have_starter && (w == starter + 1 || (last_class != 0 && last_class < cc))) {
            int32_t composite = compose(out[starter], c);
            if (composite >= 0) {
                out[starter] = composite;
                continue;
            }
        }
        if (cc == 0) {
            starter = w;
            have_starter = true;
        }
        last_class = cc;
        out[w++] = c;
    }
    return w;
}
