/*
 * Flare's text layer: tokenizers that turn bytes into token ids for language models,
 * and back.
 *
 * Three models, with the ids of the Hugging Face `tokenizers` library:
 *
 * - byte-level BPE (GPT-2, RoBERTa, GPT-NeoX, Llama 3, Qwen2): text is split by
 *   GPT-2's pre-tokenization regex
 *   ('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+), each
 *   piece's bytes become the 256 base tokens (written with GPT-2's byte-to-unicode
 *   characters, as tokenizer.json spells them) and the learned merges are applied,
 *   lowest rank first. Any bytes encode, invalid UTF-8 and NUL included (a byte that
 *   is not part of a valid UTF-8 character counts as punctuation for the regex), and
 *   decoding returns exactly the bytes encoded. Behind an NFC normalizer (GPT-NeoX's
 *   and Pythia's files) the text is put in Normalization Form C first, so decoding
 *   gives the normalized text. A vocabulary may lack the tokens of the bytes valid
 *   UTF-8 never holds (0xC0, 0xC1, 0xF5 and up; GPT-NeoX's does), and text holding
 *   one is then refused (FL_ERR_VALUE, with its offset).
 *   Llama 3's and Qwen2's files cut the text by their own regex instead
 *   ((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *   ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+, Qwen2's with \p{N}
 *   alone), matched the same way.
 * - SentencePiece's BPE (Llama 2, Mistral): BPE over characters, not bytes. A
 *   character the vocabulary lacks becomes its UTF-8 bytes' tokens "<0x00>" ...
 *   "<0xFF>" (byte_fallback), else the unknown token (a run of them one, fuse_unk);
 *   then the merges, lowest rank first. The text is first edited by the file's
 *   normalizer (Llama 2's: "\u2581" put before it and spaces made "\u2581") or
 *   Metaspace pre-tokenizer (Mistral's: the same, the marker only before the text's
 *   start with prepend_scheme "first"), each piece between added tokens on its own.
 *   Decoding runs the file's decoder (Replace, ByteFallback, Fuse, Strip,
 *   Metaspace); with byte fallback the bytes encoded come back, invalid UTF-8
 *   included, unless the text holds "\u2581", which decodes to a space.
 * - SentencePiece's Unigram (T5, ALBERT, XLM-R, XLNet, DeBERTa-v2): the same
 *   normalizer, pre-tokenizer, decoder and byte tokens; each piece of text is cut
 *   where the pieces' scores sum highest (the library's Viterbi, its ties and its
 *   unknown token's score), a run of characters no piece covers one unknown token
 *   (unk_id), or its bytes' tokens with byte_fallback. A Precompiled normalizer
 *   (SentencePiece's character map) rewrites the text per grapheme cluster as the
 *   library does; NFC, NFD, NFKC, NFKD, StripAccents (every mark dropped), Lowercase
 *   and Strip steps are applied as the library applies them.
 * - WordPiece (BERT): BertNormalizer (control characters removed, whitespace made
 *   spaces, spaces around CJK ideographs, accents stripped and lowercase if the file
 *   says so) or the steps SentencePiece's models read, BertPreTokenizer (split on whitespace and around each punctuation
 *   character), then each word greedily as its longest vocabulary prefix and
 *   "##"-continuations; a word that cannot be covered, or longer than
 *   max_input_chars_per_word characters, is the unknown token's id. Decoding joins
 *   the tokens as the WordPiece decoder does (continuations glued, " ." made ".",
 *   ...): lowercased, accent-free text, not the original bytes. Input bytes that are
 *   not valid UTF-8 read as U+FFFD, which the normalizer removes.
 *
 * Added tokens of tokenizer.json ("<|endoftext|>", "[CLS]", ...) are matched in the
 * raw text first, leftmost and longest, and become their ids, with the whitespace on
 * their left (lstrip) or right (rstrip) where the file says so; the text between them
 * is tokenized by the model. With SentencePiece's models an added token marked
 * "normalized" is matched in the normalized text instead, as its own content
 * normalized (Llama 2's "<s>" as "\u2581<s>"), and decoded as that, as the library
 * does. fl_tokenizer_encode adds no template tokens ([CLS] ...
 * [SEP]), as `tokenizer.encode(text, add_special_tokens=False)`;
 * fl_tokenizer_encode_special adds them as the post_processor says; decoding skips nothing, as
 * `tokenizer.decode(ids, skip_special_tokens=False)`.
 *
 * Errors follow tensor.h: a non-zero fl_status and a message (fl_last_error) naming
 * the function. FL_ERR_IO: the file cannot be read; FL_ERR_VALUE: it is not JSON, or
 * not a tokenizer this layer reads (the message names the file and the field: an
 * unsupported model type, normalizer, pre-tokenizer or decoder, a merge of unknown
 * tokens, an id given twice ...), or text a vocabulary cannot cover (the character or
 * byte, and where); FL_ERR_INDEX: an id to decode outside the vocabulary.
 *
 * A tokenizer is immutable once made: threads may share one.
 */
#ifndef FLARE_TEXT_H
#define FLARE_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "flare/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fl_tokenizer fl_tokenizer;

/* Learns a byte-level BPE tokenizer from size bytes of text: the 256 byte tokens
 * (ids in the order of their characters' code points, as the `tokenizers` trainer
 * numbers them), then merges until vocab_size tokens: each time the adjacent pair
 * of tokens seen most often within the pre-tokenized pieces (counted once per
 * occurrence), ties to the pair of smallest ids, becomes a new token with the next
 * id. Training stops early when no pair occurs min_frequency times (at least 1).
 * vocab_size must be at least 256. These are the merges and ids of the tokenizers
 * library's BpeTrainer with the ByteLevel alphabet given the text as one sequence
 * (train_from_iterator([text]); its train(files) reads a file line by line, so no
 * piece spans a newline there). Time about linear in the text and the merges: the
 * pair counts are updated in the words a merge changes, not recounted. */
fl_status fl_tokenizer_train_bpe(const void *text, size_t size, int64_t vocab_size, int64_t min_frequency,
                                 fl_tokenizer **out);

/* Reads a Hugging Face tokenizer.json: model.type "BPE" with a ByteLevel
 * pre-tokenizer and no normalizer (GPT-2's layout) or an NFC one (GPT-NeoX's; another
 * normalization form, or a Sequence of them, too), or
 * with a Sequence of a Split by Llama 3's or Qwen2's regex and a ByteLevel without
 * one (Llama 3's layout; Qwen2's behind NFC); merges as "a b" strings or as pairs,
 * add_prefix_space and ignore_merges honoured; or model.type "BPE" with no
 * pre-tokenizer or a Metaspace one, a normalizer of Prepend and Replace (of a string)
 * steps or none, and a decoder of Replace, ByteFallback, Fuse, Strip and Metaspace
 * steps or none (SentencePiece's layout: Llama 2's, Mistral's); or model.type
 * "Unigram" with the same pre-tokenizer (or a Sequence of WhitespaceSplit and
 * Metaspace, T5's and XLM-R's, or of the Metaspace alone, DeBERTa-v2's) and decoder;
 * with either SentencePiece model, a normalizer that may also hold a Precompiled
 * character map, a Replace of runs of one character (T5's and XLM-R's published
 * " {2,}"), NFC, NFD, NFKC, NFKD, StripAccents, Lowercase and Strip (ALBERT's and
 * DeBERTa-v2's); or
 * model.type "WordPiece" with a BertNormalizer, those normalizer steps, or none, and
 * a BertPreTokenizer (bert-base-uncased's layout). A file that names no model.type
 * (bert-base-uncased's own, written before tokenizers named it) is told by its
 * fields, as the tokenizers library tells it. Added tokens with single_word are
 * refused. The
 * file's "truncation" and "padding" are not applied, as transformers' tokenizers do
 * not apply them: the caller cuts and pads. On error *out is NULL. */
fl_status fl_tokenizer_load(const char *path, fl_tokenizer **out);

void fl_tokenizer_free(fl_tokenizer *tok);

/* The number of ids: one more than the largest id of the vocabulary and the added
 * tokens. */
int64_t fl_tokenizer_vocab_size(const fl_tokenizer *tok);

/* The id of a token spelled as tokenizer.json spells it (byte-level tokens with
 * GPT-2's characters: "Ġthe"), or -1 if there is none. */
int64_t fl_tokenizer_token_to_id(const fl_tokenizer *tok, const char *token);

/* The spelling of id, NUL-terminated, owned by tok; NULL if id names no token. */
const char *fl_tokenizer_id_to_token(const fl_tokenizer *tok, int64_t id);

/* Encodes size bytes of text into *ids (allocated with malloc; free() it; NULL when
 * *count is 0) and *count. */
fl_status fl_tokenizer_encode(const fl_tokenizer *tok, const void *text, size_t size, int64_t **ids,
                              size_t *count);

/* The same ids as a new 1-D FL_I64 tensor on the default backend (of 0 elements for
 * empty text), ready for an embedding; NULL on error. */
fl_tensor *fl_tokenizer_encode_tensor(const fl_tokenizer *tok, const void *text, size_t size);

/* Encodes text, and pair after it when pair is not NULL (a sentence pair), as
 * transformers' tokenizer(text, pair) does by default (add_special_tokens): the ids of
 * fl_tokenizer_encode with the special tokens tokenizer.json's post_processor puts
 * around them ("[CLS] A [SEP]" and "[CLS] A [SEP] B [SEP]" for BERT), into *ids and
 * each id's token type into *type_ids (0 for the first text, the template's for the
 * rest; type_ids may be NULL), both malloc'd, and *count. TemplateProcessing,
 * BertProcessing, RobertaProcessing, ByteLevel and a Sequence of these are applied;
 * without a post_processor (or for a trained tokenizer) the texts follow each other,
 * the second of type 1. Another post_processor is an error (FL_ERR_VALUE) naming it;
 * fl_tokenizer_encode still works for such a tokenizer. */
fl_status fl_tokenizer_encode_special(const fl_tokenizer *tok, const void *text, size_t size, const void *pair,
                                      size_t pair_size, int64_t **ids, int64_t **type_ids, size_t *count);

/* Decodes count ids into *text (allocated with malloc, followed by a NUL that *size
 * does not count; free() it). An id outside [0, vocab size) or naming no token is an
 * error (FL_ERR_INDEX) giving its position. */
fl_status fl_tokenizer_decode(const fl_tokenizer *tok, const int64_t *ids, size_t count, char **text,
                              size_t *size);

#ifdef __cplusplus
}
#endif

#endif
