/* The Unigram model of tokenizer.json (SentencePiece's, as T5, ALBERT and XLM-R hold
 * it; private to src/text): a trie over the vocabulary's pieces and the segmentation
 * of a piece of text whose pieces' scores sum highest, as the tokenizers library finds
 * it. */
#ifndef FLARE_TEXT_UNIGRAM_H
#define FLARE_TEXT_UNIGRAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct text_unigram text_unigram;

/* One token of a segmentation: bytes [start, end) of the text, and the piece's id, or
 * -1 for a run of the unknown token's (characters no piece covers, and the unknown
 * token's own piece where the text spells it), which the library fuses into one. */
typedef struct text_unigram_token {
    size_t start, end;
    int64_t id;
} text_unigram_token;

/* An empty model; NULL if out of memory. */
text_unigram *text_unigram_new(void);
void text_unigram_free(text_unigram *u);

/* Adds piece (len > 0 bytes) with its id and score (a log probability); false if out
 * of memory. A piece added twice keeps the later id, as the library's map does. */
bool text_unigram_add(text_unigram *u, const char *piece, size_t len, int64_t id, double score);

/* The unknown token's id (-1: none; set after every piece is added). */
void text_unigram_set_unknown(text_unigram *u, int64_t id);

/* The best segmentation of s[0..n) into out, which holds n tokens (a token takes at
 * least one byte), *count of them. A character no piece starts with scores the
 * lowest piece's score less 10; ties keep the shorter piece, found first. False if out of memory; *uncovered is
 * the offset of a character no piece covers when the model has no unknown token
 * (SIZE_MAX otherwise), and the segmentation is then not made. */
bool text_unigram_segment(const text_unigram *u, const unsigned char *s, size_t n, text_unigram_token *out,
                          size_t *count, size_t *uncovered);

#endif
