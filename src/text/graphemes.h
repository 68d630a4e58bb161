/* Extended grapheme clusters (UAX #29, as Unicode 15.0 defines them; private to
 * src/text): the Precompiled normalizer of SentencePiece's files works on them. */
#ifndef FLARE_TEXT_GRAPHEMES_H
#define FLARE_TEXT_GRAPHEMES_H

#include <stddef.h>
#include <stdint.h>

/* Grapheme_Cluster_Break values, as gen_graphemes.py numbers them; GRAPHEME_PICTOGRAPHIC
 * is Extended_Pictographic (whose characters are all Other). */
enum {
    GRAPHEME_OTHER, GRAPHEME_CR, GRAPHEME_LF, GRAPHEME_CONTROL, GRAPHEME_EXTEND, GRAPHEME_ZWJ,
    GRAPHEME_REGIONAL_INDICATOR, GRAPHEME_PREPEND, GRAPHEME_SPACING_MARK, GRAPHEME_L, GRAPHEME_V, GRAPHEME_T,
    GRAPHEME_LV, GRAPHEME_LVT, GRAPHEME_PICTOGRAPHIC = 16
};

typedef struct text_grapheme_range {
    uint32_t first, last;
    uint8_t kind;
} text_grapheme_range;

/* Sorted, disjoint; code points outside them are Other (grapheme_table.c). */
extern const text_grapheme_range text_grapheme_ranges[];
extern const size_t text_grapheme_ranges_count;

/* The length in bytes of the extended grapheme cluster that starts s[0..n) (n > 0).
 * A byte outside valid UTF-8 is a cluster of its own. */
size_t text_grapheme_length(const unsigned char *s, size_t n);

#endif
