/* What a tokenizer.json's post_processor puts around the ids of one text or a pair
 * (template.c): the special tokens and token type ids of transformers'
 * add_special_tokens. */
#ifndef FLARE_TEXT_TEMPLATE_H
#define FLARE_TEXT_TEMPLATE_H

#include <jansson.h>

#include "flare/tensor.h"

typedef struct text_template text_template;

/* The template of post_processor (NULL or JSON null: none, the texts as they are).
 * A processor Flare does not apply is kept as a refusal that text_template_apply
 * reports, so that such a tokenizer still encodes without special tokens. NULL after
 * an error, recorded under fl_tokenizer_load naming path. */
text_template *text_template_load(const char *path, const json_t *post_processor, int64_t vocab_size);

void text_template_free(text_template *t);

/* ids a [na] and, when paired, b [nb] with the template's special tokens (t NULL: none),
 * into *ids and *types (malloc'd; types may be NULL) and *count. a and b may be NULL
 * when empty. Errors under fn. */
fl_status text_template_apply(const text_template *t, const char *fn, const int64_t *a, size_t na, const int64_t *b,
                              bool paired, size_t nb, int64_t **ids, int64_t **types, size_t *count);

#endif
