/*
 * Flare's decoder layer: word n-gram language models and CTC decoding, the part of
 * speech recognition (Flashlight's wav2letter) that needs tensors only
 * (docs/SPEECH.md, "Language models and decoding"). Three parts, each below:
 *
 * - n-gram language models (fl_ngram): read from ARPA files and scored;
 * - estimating them: interpolated modified Kneser-Ney from text, written as ARPA;
 * - CTC decoding: best path, and a lexicon (fl_lexicon) beam search scored with a
 *   language model at each word's end.
 *
 * N-gram language models (fl_ngram) are read from ARPA files, the format of SRILM,
 * KenLM and IRSTLM:
 *
 *     \data\
 *     ngram 1=3
 *     ngram 2=1
 *
 *     \1-grams:
 *     -0.5  <s>   -0.3
 *     -0.4  </s>
 *     -0.6  the   -0.2
 *
 *     \2-grams:
 *     -0.1  <s> the
 *
 *     \end\
 *
 * Each n-gram line is a log10 probability, the n words, and for every order but the
 * highest an optional log10 backoff weight, separated by spaces or tabs. Any order
 * from 1 to FL_NGRAM_MAX_ORDER. A model scores word w after context h as KenLM and
 * SRILM do: log10 p(w | h) is the probability of the longest n-gram "h' w" in the
 * file (h' a suffix of h), plus the backoff weights of the contexts longer than h'
 * that are in the file. <s> and </s> are required; a word outside the vocabulary is
 * scored as <unk>, or, if the file has no <unk>, with log10 probability -100 (KenLM's
 * substitute).
 *
 * Errors follow tensor.h: a non-zero fl_status and a message (fl_last_error) naming
 * the function. FL_ERR_IO: the file cannot be read or written; FL_ERR_VALUE: it is not
 * an ARPA file this reader accepts, and the message names the file and the line (a
 * missing or malformed \data\ header, a count that does not match its section, an
 * n-gram order that was not declared, a malformed number, a wrong number of words, an
 * n-gram given twice, a context missing from the file, no \end\).
 *
 * Models and lexicons are immutable once made (a lexicon once its words are added):
 * threads may share them.
 */
#ifndef FLARE_DECODER_H
#define FLARE_DECODER_H

#include <stddef.h>
#include <stdint.h>

#include "flare/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- n-gram language models ------------------------------------------------------- */

/* The highest n-gram order read or built. */
#define FL_NGRAM_MAX_ORDER 10

typedef struct fl_ngram fl_ngram;

/* A context: up to order - 1 word ids, oldest first. States are plain values: copy
 * them, compare them with fl_ngram_state_equal. The scoring functions keep only the
 * longest suffix of the history that is an n-gram of the model (the rest cannot
 * change any later score), so that equal states mean equal futures. */
typedef struct fl_ngram_state {
    int32_t length;
    int32_t words[FL_NGRAM_MAX_ORDER - 1];
} fl_ngram_state;

/* Reads an ARPA file. On error *out is NULL. */
fl_status fl_ngram_load_arpa(const char *path, fl_ngram **out);

void fl_ngram_free(fl_ngram *lm);

/* The highest order, and the number of n-grams of an order (0 outside [1, order]). */
int fl_ngram_order(const fl_ngram *lm);
int64_t fl_ngram_count(const fl_ngram *lm, int order);

/* The vocabulary: the words of the 1-grams, with ids 0, 1, ... in the file's order. */
int64_t fl_ngram_vocab_size(const fl_ngram *lm);
/* The id of a word, or -1 if it is not in the vocabulary. */
int32_t fl_ngram_word_id(const fl_ngram *lm, const char *word);
/* The word of an id, owned by lm; NULL outside the vocabulary. */
const char *fl_ngram_word(const fl_ngram *lm, int32_t id);
/* The id an unknown word is scored as: <unk>'s, or -1 if the file has none. */
int32_t fl_ngram_unk(const fl_ngram *lm);

/* The state at the start of a sentence (after <s>), and the empty state. */
void fl_ngram_begin_state(const fl_ngram *lm, fl_ngram_state *state);
void fl_ngram_null_state(fl_ngram_state *state);
int fl_ngram_state_equal(const fl_ngram_state *a, const fl_ngram_state *b);

/* log10 p(word | in), and in *out (which may be in) the state after word. A word id
 * outside the vocabulary (-1 included) is scored as unknown. */
double fl_ngram_score(const fl_ngram *lm, const fl_ngram_state *in, int32_t word, fl_ngram_state *out);

/* What fl_ngram_evaluate counts over a text. log10_prob sums every word's and every
 * sentence end's log10 probability, unknown words included (scored as above);
 * perplexity = 10^(-log10_prob / (words + sentences)), KenLM's "perplexity including
 * OOVs"; perplexity_without_oov leaves the unknown words out of both the sum and the
 * count, as SRILM's ppl. */
typedef struct fl_ngram_stats {
    int64_t sentences;
    int64_t words;
    int64_t oov;
    double log10_prob;
    double perplexity;
    double perplexity_without_oov;
} fl_ngram_stats;

/* Scores size bytes of text: each line a sentence, words separated by spaces or tabs,
 * scored from <s> to </s> (an empty line scores </s> alone; a last line without a
 * newline counts). */
fl_status fl_ngram_evaluate(const fl_ngram *lm, const void *text, size_t size, fl_ngram_stats *stats);

/* log10 of one sentence of n words (ids, -1 for unknown), from <s> to </s>. */
double fl_ngram_sentence_log10(const fl_ngram *lm, const int32_t *words, size_t n);

/* ---- estimating a model --------------------------------------------------------------- */

/* How fl_ngram_build_arpa estimates. order: 3 by default, at most FL_NGRAM_MAX_ORDER.
 * discount_fallback: when the text is too small for an order's discounts (no n-gram
 * of that order seen exactly 1, 2, 3 or 4 times, or a discount out of range), use
 * 0.5, 1 and 1.5 instead of failing (KenLM's --discount_fallback). */
typedef struct fl_ngram_build_options {
    int order;
    int discount_fallback;
} fl_ngram_build_options;

void fl_ngram_build_options_default(fl_ngram_build_options *options);

/* Estimates an interpolated modified Kneser-Ney model (Chen & Goodman) from size bytes
 * of text and writes it to path as an ARPA file, through a temporary file renamed into
 * place (a reader never sees half a file). The text is one sentence a line, words
 * separated by spaces or tabs, each sentence padded with <s> and </s>; <s>, </s> or
 * a NUL byte in the text is an error naming the line. The vocabulary is every word seen, plus
 * <s>, </s> and <unk>. For an n-gram h w:
 *
 *   a(h w)    adjusted count: the count at the highest order and for n-grams that
 *             begin with <s>; else the number of distinct words seen before h w;
 *   D_n(c)    discounts of order n for a = 1, 2, 3+: with t_k the number of n-grams
 *             with a = k and Y = t1 / (t1 + 2 t2), D_k = k - (k + 1) Y t_{k+1} / t_k;
 *   p(w | h)  = (a(h w) - D_n(a(h w))) / S(h) + gamma(h) p(w | h minus its first word),
 *             S(h) the sum of a(h v) over v, gamma(h) = (D1 N1 + D2 N2 + D3+ N3+) / S(h)
 *             with N_k the number of v with a(h v) = k (3+: at least 3); order 1
 *             interpolates with the uniform distribution over the vocabulary but <s>.
 *
 * The file holds p(w | h) of every n-gram seen and gamma(h) as each context's backoff
 * weight, so the backoff rule of fl_ngram_score gives back the interpolated model.
 * <s> has log10 probability -99 (it is never predicted). options may be NULL for the
 * defaults. FL_ERR_VALUE: a bad order, <s> or </s> in the text, a text too small
 * for the discounts (without discount_fallback); FL_ERR_IO: the file cannot be
 * written. */
fl_status fl_ngram_build_arpa(const void *text, size_t size, const fl_ngram_build_options *options,
                              const char *path);

/* ---- CTC decoding ---------------------------------------------------------------------- */

/* Emissions are [frames, tokens] log-probabilities (log-softmax outputs, natural log),
 * frame after frame, as a float host buffer or a 2-D tensor of any float dtype (read
 * to the host as f32). A CTC path picks one token a frame; collapsing repeats and
 * dropping blanks gives its token sequence. */

/* A decoded sequence: ids (token ids for fl_ctc_greedy, lexicon word ids for the beam
 * search; allocated with malloc, NULL when count is 0) and its score (below). */
typedef struct fl_ctc_result {
    int64_t *ids;
    int64_t count;
    double score;
} fl_ctc_result;

void fl_ctc_result_free(fl_ctc_result *result);

/* Best path decoding: the best token of each frame (the first on ties), repeats
 * collapsed, blanks dropped; score is the path's summed emissions. */
fl_status fl_ctc_greedy(const float *emissions, int64_t frames, int64_t tokens, int64_t blank,
                        fl_ctc_result *result);
fl_status fl_ctc_greedy_tensor(const fl_tensor *emissions, int64_t blank, fl_ctc_result *result);

/* A lexicon: words and their spellings in token ids (a word may have several), kept as
 * a trie over tokens. Word ids are 0, 1, ... in the order words are first added. */
typedef struct fl_lexicon fl_lexicon;

/* An empty lexicon over token ids [0, tokens). */
fl_status fl_lexicon_new(int64_t tokens, fl_lexicon **out);
/* Adds a spelling of word (added if new). A spelling is at least one token
 * (FL_ERR_VALUE); a token outside [0, tokens) is an error (FL_ERR_INDEX). A token twice
 * in a row ("l l" of hello) needs a blank between them in a path, as CTC has it. A
 * spelling given again for the same word changes nothing. */
fl_status fl_lexicon_add(fl_lexicon *lex, const char *word, const int64_t *spelling, size_t length);
/* Reads a wav2letter lexicon file: a line per spelling, the word then its tokens,
 * separated by spaces or tabs ("hello h e l l o |"), the tokens named by
 * token_names[0 .. tokens) (a NULL name names no token; two tokens of one name are an
 * error). Blank lines are skipped. Errors name the file and line: a word with no
 * tokens, a token not among the names. */
fl_status fl_lexicon_load(const char *path, const char *const *token_names, int64_t tokens, fl_lexicon **out);
void fl_lexicon_free(fl_lexicon *lex);
int64_t fl_lexicon_size(const fl_lexicon *lex);
/* The word of an id, owned by lex; NULL outside [0, size). */
const char *fl_lexicon_word(const fl_lexicon *lex, int64_t id);
/* The id of a word, or -1. */
int64_t fl_lexicon_word_id(const fl_lexicon *lex, const char *word);
/* The first spelling given for word id: *length token ids at *tokens (owned by lex).
 * What a word's training target is (speech.h's fl_token_set_encode_words).
 * FL_ERR_INDEX outside [0, size). */
fl_status fl_lexicon_spelling(const fl_lexicon *lex, int64_t id, const int64_t **tokens, size_t *length);

typedef struct fl_ctc_beam_options {
    int64_t beam_size;     /* hypotheses kept after each frame (default 100) */
    int64_t beam_size_token; /* tokens tried each frame: its best ones; 0: all (default) */
    double beam_threshold; /* and only those within this of the best (default 25) */
    double lm_weight;      /* weight of the language model's natural-log probability (default 1) */
    double word_score;     /* added for each word (the insertion score; default 0) */
    double silence_score;  /* added for each silence token between words (default 0) */
    int64_t blank;         /* the blank token (default 0) */
    int64_t silence;       /* the token allowed between words, wav2letter's "|"; -1: none (default) */
    int smearing;          /* LM look-ahead inside words (wav2letter's max smearing; default 1, on) */
} fl_ctc_beam_options;

void fl_ctc_beam_options_default(fl_ctc_beam_options *options);

/* Lexicon-constrained beam search with a word language model, wav2letter's lexicon
 * decoder with Viterbi (max) scores. A hypothesis is a CTC path read as words: its
 * collapsed token sequence must split into silence tokens (between words, at the start
 * and at the end) and spellings of the lexicon, ending at a word boundary. Its score:
 *
 *   sum of the path's emissions
 *   + lm_weight * ln p_LM(w1 .. wk </s> | <s>)   (lm may be NULL: no LM term)
 *   + word_score * k + silence_score * (the silence tokens between words).
 *
 * Each word is scored by the language model as it ends (the lexicon word's spelling
 * looked up in the model's vocabulary; one it lacks is <unk>), </s> at the last frame.
 * Hypotheses in the same trie node, with the same last token and the same language
 * model state are merged, keeping the best; after each frame at most beam_size are
 * kept, each within beam_threshold of the best. With smearing (and an LM), a
 * hypothesis inside a word is ranked as if it had the best weighted unigram score of
 * the words its trie node leads to (less the best of all words), replaced by the
 * word's real score as it ends: words not yet paid for do not crowd out those that
 * are. It changes which hypotheses are pruned, never a finished hypothesis's score. With a beam large enough, the result
 * is the best-scoring word sequence over all paths and splits (the tests check it
 * against exhaustive search). The result holds lexicon word ids and that score.
 * FL_ERR_VALUE: no hypothesis ends at a word boundary, or bad options (a blank or
 * silence outside [0, tokens), the silence equal to the blank, beam_size < 1, a
 * negative beam_size_token, a negative or NaN threshold, a weight or score that is
 * not finite); FL_ERR_SHAPE: emissions not 2-D
 * or with another number of tokens than the lexicon. */
fl_status fl_ctc_beam_search(const float *emissions, int64_t frames, int64_t tokens, const fl_lexicon *lex,
                             const fl_ngram *lm, const fl_ctc_beam_options *options, fl_ctc_result *result);
fl_status fl_ctc_beam_search_tensor(const fl_tensor *emissions, const fl_lexicon *lex, const fl_ngram *lm,
                                    const fl_ctc_beam_options *options, fl_ctc_result *result);

#ifdef __cplusplus
}
#endif

#endif
