/* SentencePiece's precompiled character map, the Precompiled normalizer of
 * tokenizer.json (T5's, ALBERT's and XLM-R's files; private to src/text): rewrite
 * rules from byte strings to byte strings, kept in a double-array trie, applied to
 * each grapheme cluster as the tokenizers library applies them. */
#ifndef FLARE_TEXT_CHARSMAP_H
#define FLARE_TEXT_CHARSMAP_H

#include <stdbool.h>
#include <stddef.h>

typedef struct text_charsmap text_charsmap;

/* The map that base64 text (len bytes; the file's "precompiled_charsmap") encodes;
 * NULL with *error saying why when it is not base64 or not a map, or out of memory
 * (*error "out of memory"). */
text_charsmap *text_charsmap_new(const char *base64, size_t len, const char **error);
void text_charsmap_free(text_charsmap *m);

/* s[0..n) normalized into *out (malloc'd, *out_n bytes, NUL after them): a cluster of
 * under 6 bytes whose start the map rewrites becomes that rewrite, whole; any other
 * character by character, each rewritten or kept. False if out of memory. */
bool text_charsmap_normalize(const text_charsmap *m, const unsigned char *s, size_t n, unsigned char **out,
                             size_t *out_n);

#endif
