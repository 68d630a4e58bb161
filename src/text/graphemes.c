/*
 * Extended grapheme clusters (graphemes.h): UAX #29's rules GB3-GB13 of Unicode 15.0
 * over the property table gen_graphemes.py writes. A cluster grows one character at
 * a time while a rule says not to break before it; two states carry the rules that
 * look further back: how many Regional_Indicators end the cluster (GB12, GB13: flags
 * pair up), and whether it ends in a pictograph, its Extends, and a ZWJ (GB11: emoji
 * ZWJ sequences).
 */
#include <stdbool.h>

#include "graphemes.h"
#include "unicode.h"

static int kind_of(int32_t cp)
{
    if (cp < 0)
        return GRAPHEME_CONTROL; /* a byte outside valid UTF-8 stands alone */
    if (cp < 0x80) /* most text: no search of the table */
        return cp == '\r' ? GRAPHEME_CR : cp == '\n' ? GRAPHEME_LF : cp < 0x20 || cp == 0x7F ? GRAPHEME_CONTROL
                                                                                     : GRAPHEME_OTHER;
    size_t lo = 0, hi = text_grapheme_ranges_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((uint32_t)cp > text_grapheme_ranges[mid].last)
            lo = mid + 1;
        else if ((uint32_t)cp < text_grapheme_ranges[mid].first)
            hi = mid;
        else
            return text_grapheme_ranges[mid].kind;
    }
    return GRAPHEME_OTHER;
}

static bool is_control(int kind) { return kind == GRAPHEME_CR || kind == GRAPHEME_LF || kind == GRAPHEME_CONTROL; }

/* Whether no break falls between prev and next (GB3-GB9b, GB11-GB13 by their states). */
static bool joined(int prev, int next, size_t indicators, bool after_pictograph_zwj)
{
    if (prev == GRAPHEME_CR && next == GRAPHEME_LF)
        return true; /* GB3 */
    if (is_control(prev) || is_control(next))
        return false; /* GB4, GB5 */
    if (prev == GRAPHEME_L &&
        (next == GRAPHEME_L || next == GRAPHEME_V || next == GRAPHEME_LV || next == GRAPHEME_LVT))
        return true; /* GB6 */
    if ((prev == GRAPHEME_LV || prev == GRAPHEME_V) && (next == GRAPHEME_V || next == GRAPHEME_T))
        return true; /* GB7 */
    if ((prev == GRAPHEME_LVT || prev == GRAPHEME_T) && next == GRAPHEME_T)
        return true; /* GB8 */
    if (next == GRAPHEME_EXTEND || next == GRAPHEME_ZWJ || next == GRAPHEME_SPACING_MARK || prev == GRAPHEME_PREPEND)
        return true; /* GB9, GB9a, GB9b */
    if (prev == GRAPHEME_ZWJ && next == GRAPHEME_PICTOGRAPHIC && after_pictograph_zwj)
        return true; /* GB11 */
    return prev == GRAPHEME_REGIONAL_INDICATOR && next == GRAPHEME_REGIONAL_INDICATOR && indicators % 2 == 1;
}

size_t text_grapheme_length(const unsigned char *s, size_t n)
{
    size_t len, at;
    int prev = kind_of(text_utf8_next(s, n, &len));
    size_t indicators = prev == GRAPHEME_REGIONAL_INDICATOR;
    bool pictograph = prev == GRAPHEME_PICTOGRAPHIC; /* a pictograph, then only Extends */
    bool pictograph_zwj = false;                     /* that, then a ZWJ */
    for (at = len; at < n; at += len) {
        int next = kind_of(text_utf8_next(s + at, n - at, &len));
        if (!joined(prev, next, indicators, pictograph_zwj))
            break;
        indicators = next == GRAPHEME_REGIONAL_INDICATOR ? indicators + 1 : 0;
        pictograph_zwj = next == GRAPHEME_ZWJ && pictograph;
        pictograph = next == GRAPHEME_PICTOGRAPHIC || (pictograph && next == GRAPHEME_EXTEND);
        prev = next;
    }
    return at;
}
