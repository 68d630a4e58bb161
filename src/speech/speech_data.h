/* What the token set, manifest and bucket files of src/speech share. */
#ifndef FLARE_SPEECH_DATA_H
#define FLARE_SPEECH_DATA_H

#include "flare/speech.h"

/* fl_token_set_encode with the error recorded under fn and prefixed by where (e.g.
 * "train.tsv:7: "; "" for none). */
fl_status fl__token_encode(const fl_token_set *ts, const char *text, bool boundary_at_ends, int64_t **ids,
                           int64_t *count, const char *fn, const char *where);

/* A copy of ts (NULL after recording an error under fn). */
fl_token_set *fl__token_set_copy(const fl_token_set *ts, const char *fn);

/* fl_token_set_encode_words, with errors as fl__token_encode's. */
fl_status fl__encode_words(const fl_token_set *ts, const fl_lexicon *lex, const char *text, bool spell_unknown,
                           int64_t **ids, int64_t *count, const char *fn, const char *where);

#endif
