/* Tokenizers: ids identical to the Hugging Face tokenizers library on its own
 * tokenizer.json files (byte-level BPE, SentencePiece's BPE with byte fallback and
 * WordPiece), the BPE trainer against its trainer, exact byte round trips, and bad
 * files and ids. Fixtures: tests/fixtures/gen_tokenizers.py and
 * gen_sentencepiece.py. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "flare/text.h"
#include "support.h"
#include "text/graphemes.h" /* text_grapheme_length */
#include "text/unicode.h"   /* text_normalize */

static json_t *section_of(json_t **root, const char *file, const char *section)
{
    json_error_t err;
    if (!*root)
        *root = json_load_file(file, JSON_ALLOW_NUL, &err);
    assert_non_null(*root);
    json_t *s = json_object_get(*root, section);
    assert_non_null(s);
    return s;
}

static json_t *cases(const char *section)
{
    static json_t *root;
    return section_of(&root, FLARE_FIXTURES "/text_cases.json", section);
}

static json_t *sentencepiece_cases(const char *section)
{
    static json_t *root;
    return section_of(&root, FLARE_FIXTURES "/text_sentencepiece_cases.json", section);
}

static json_t *unigram_cases(const char *section)
{
    static json_t *root;
    return section_of(&root, FLARE_FIXTURES "/text_unigram_cases.json", section);
}

static fl_tokenizer *load(const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", FLARE_FIXTURES, name);
    fl_tokenizer *tok = NULL;
    assert_int_equal(fl_tokenizer_load(path, &tok), FL_OK);
    assert_non_null(tok);
    return tok;
}

static void assert_ids(const fl_tokenizer *tok, const char *text, size_t size, const json_t *expected)
{
    int64_t *ids;
    size_t n;
    assert_int_equal(fl_tokenizer_encode(tok, text, size, &ids, &n), FL_OK);
    if (n != json_array_size(expected))
        fail_msg("'%.60s': %zu ids, tokenizers gives %zu", text, n, json_array_size(expected));
    for (size_t i = 0; i < n; i++)
        if (ids[i] != json_integer_value(json_array_get(expected, i)))
            fail_msg("'%.60s': id %zu is %lld, tokenizers gives %lld", text, i, (long long)ids[i],
                     (long long)json_integer_value(json_array_get(expected, i)));
    free(ids);
}

static void assert_decodes(const fl_tokenizer *tok, const json_t *ids, const char *expected, size_t size)
{
    size_t n = json_array_size(ids), len;
    int64_t *v = malloc((n + 1) * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = json_integer_value(json_array_get(ids, i));
    char *text;
    assert_int_equal(fl_tokenizer_decode(tok, v, n, &text, &len), FL_OK);
    if (len != size || memcmp(text, expected, size) != 0)
        fail_msg("decoded '%.60s' (%zu bytes), tokenizers gives '%.60s' (%zu)", text, len, expected, size);
    assert_int_equal(text[len], 0);
    free(text), free(v);
}

static void matches_cases(const char *file, const json_t *list)
{
    fl_tokenizer *tok = load(file);
    size_t i;
    json_t *c;
    json_array_foreach(list, i, c) {
        const json_t *text = json_object_get(c, "text"), *decoded = json_object_get(c, "decoded");
        assert_ids(tok, json_string_value(text), json_string_length(text), json_object_get(c, "ids"));
        assert_decodes(tok, json_object_get(c, "ids"), json_string_value(decoded), json_string_length(decoded));
    }
    assert_true(i >= 20);
    fl_tokenizer_free(tok);
}

static void byte_level_bpe_ids_match_tokenizers(void **state) { matches_cases("text_bpe.json", cases("bpe")); }

static void wordpiece_ids_match_tokenizers(void **state)
{
    matches_cases("text_wordpiece.json", cases("wordpiece"));
}

/* Llama 2's layout: Prepend and Replace as the normalizer, no pre-tokenizer, byte
 * fallback, the decoder's Replace, ByteFallback, Fuse and Strip. */
static void sentencepiece_bpe_ids_match_tokenizers(void **state)
{
    matches_cases("text_sentencepiece.json", sentencepiece_cases("legacy"));
}

static char tmp_path[] = "/tmp/flare_text_XXXXXX";

/* A fixture changed by edit, written to tmp_path and loaded. */
static fl_tokenizer *load_edited(const char *file, void (*edit)(json_t *root))
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", FLARE_FIXTURES, file);
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    assert_non_null(root);
    edit(root);
    assert_int_equal(json_dump_file(root, tmp_path, 0), 0);
    json_decref(root);
    fl_tokenizer *tok = NULL;
    assert_int_equal(fl_tokenizer_load(tmp_path, &tok), FL_OK);
    return tok;
}

/* The fixture file changed by edit gives the library's ids for every case of the
 * list (at least 20), and with `decodes` its decodings too. */
static void edited_matches_cases(const char *file, void (*edit)(json_t *root), const json_t *list, bool decodes)
{
    fl_tokenizer *tok = load_edited(file, edit);
    size_t i;
    json_t *c;
    json_array_foreach(list, i, c) {
        const json_t *text = json_object_get(c, "text"), *decoded = json_object_get(c, "decoded");
        assert_ids(tok, json_string_value(text), json_string_length(text), json_object_get(c, "ids"));
        if (decodes)
            assert_decodes(tok, json_object_get(c, "ids"), json_string_value(decoded), json_string_length(decoded));
    }
    assert_true(i >= 20);
    fl_tokenizer_free(tok);
}

static void edited_matches(const char *file, void (*edit)(json_t *root), const char *section, bool decodes)
{
    edited_matches_cases(file, edit, cases(section), decodes);
}

static void merges_as_strings(json_t *root)
{
    json_t *merges = json_object_get(json_object_get(root, "model"), "merges"), *m;
    size_t i;
    json_array_foreach(merges, i, m) {
        char both[256];
        snprintf(both, sizeof both, "%s %s", json_string_value(json_array_get(m, 0)),
                 json_string_value(json_array_get(m, 1)));
        json_array_set_new(merges, i, json_string(both));
    }
}

static void prefix_space(json_t *root)
{
    json_object_set_new(json_object_get(root, "pre_tokenizer"), "add_prefix_space", json_true());
}

/* GPT-2's own file writes merges as "a b" strings; RoBERTa's puts a space first. */
static void byte_level_bpe_layouts(void **state)
{
    edited_matches("text_bpe.json", merges_as_strings, "bpe", false);
    edited_matches("text_bpe.json", prefix_space, "bpe_prefix_space", false);
}

/* The post_processor the next load_edited puts in the file. */
static json_t *post_processor;

static void set_post_processor(json_t *root) { json_object_set(root, "post_processor", post_processor); }

static void assert_same_ids(const char *what, const int64_t *got, size_t n, const json_t *expected)
{
    if (n != json_array_size(expected))
        fail_msg("%s: %zu ids, tokenizers gives %zu", what, n, json_array_size(expected));
    for (size_t i = 0; i < n; i++)
        if (got[i] != json_integer_value(json_array_get(expected, i)))
            fail_msg("%s: id %zu is %lld, tokenizers gives %lld", what, i, (long long)got[i],
                     (long long)json_integer_value(json_array_get(expected, i)));
}

/* tok encodes text (a C string) to the ids 0, 1, 2. */
static void encodes_to_first_three(const fl_tokenizer *tok, const char *text)
{
    int64_t *ids;
    size_t n;
    assert_int_equal(fl_tokenizer_encode(tok, text, strlen(text), &ids, &n), FL_OK);
    json_t *expected = json_pack("[i, i, i]", 0, 1, 2);
    assert_same_ids(text, ids, n, expected);
    json_decref(expected);
    free(ids);
}

/* add_special_tokens=True, for one text and for pairs, under each post-processor
 * published tokenizers use (tests/fixtures/gen_tokenizer_templates.py). */
static void special_tokens_match_tokenizers(void **state)
{
    (void)state;
    json_error_t err;
    json_t *root = json_load_file(FLARE_FIXTURES "/text_template_cases.json", 0, &err);
    assert_non_null(root);
    size_t v, i;
    json_t *variant, *c;
    json_array_foreach(root, v, variant) {
        post_processor = json_object_get(variant, "post_processor");
        fl_tokenizer *tok = load_edited(json_string_value(json_object_get(variant, "file")), set_post_processor);
        json_array_foreach(json_object_get(variant, "cases"), i, c) {
            const json_t *a = json_object_get(c, "a"), *b = json_object_get(c, "b");
            int64_t *ids, *types;
            size_t n;
            assert_int_equal(fl_tokenizer_encode_special(tok, json_string_value(a), json_string_length(a),
                                                         json_is_string(b) ? json_string_value(b) : NULL,
                                                         json_string_length(b), &ids, &types, &n),
                             FL_OK);
            char what[160];
            snprintf(what, sizeof what, "%s, '%s' + '%s'",
                     json_string_value(json_object_get(post_processor, "type")), json_string_value(a),
                     json_is_string(b) ? json_string_value(b) : "(none)");
            assert_same_ids(what, ids, n, json_object_get(c, "ids"));
            assert_same_ids(what, types, n, json_object_get(c, "type_ids"));
            free(ids), free(types);
        }
        assert_true(i >= 7);
        fl_tokenizer_free(tok);
    }
    assert_int_equal(v, 4);
    json_decref(root);
    assert_no_error();
}

/* No post_processor: the texts as they are, the second of type 1; a processor Flare
 * does not apply still loads, and only encode_special refuses it; a broken one is a
 * load error naming the file. */
static void special_tokens_without_a_template(void **state)
{
    (void)state;
    fl_tokenizer *tok = load("text_wordpiece.json");
    int64_t *plain, *ids, *types;
    size_t np, n;
    size_t first;
    assert_int_equal(fl_tokenizer_encode(tok, "hello", 5, &plain, &first), FL_OK);
    free(plain);
    assert_int_equal(fl_tokenizer_encode(tok, "hello world", 11, &plain, &np), FL_OK);
    assert_int_equal(fl_tokenizer_encode_special(tok, "hello", 5, "world", 5, &ids, &types, &n), FL_OK);
    assert_int_equal(n, np);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(ids[i], plain[i]);
        assert_int_equal(types[i], i >= first);
    }
    free(plain), free(ids), free(types);
    assert_fails_status(fl_tokenizer_encode_special(tok, "x", 1, NULL, 0, NULL, NULL, &n), FL_ERR_NULL, "ids is NULL");
    fl_tokenizer_free(tok);
    post_processor = json_pack("{s:s}", "type", "SomethingNew");
    tok = load_edited("text_wordpiece.json", set_post_processor);
    assert_int_equal(fl_tokenizer_encode(tok, "hello", 5, &plain, &np), FL_OK);
    free(plain);
    assert_fails_status(fl_tokenizer_encode_special(tok, "hello", 5, NULL, 0, &ids, NULL, &n), FL_ERR_VALUE,
                        "post_processor 'SomethingNew' is not one Flare applies");
    assert_null(ids);
    fl_tokenizer_free(tok);
    json_decref(post_processor);
    const char *broken[] = {
        "{\"type\": \"BertProcessing\", \"sep\": [\"[SEP]\", 100000], \"cls\": [\"[CLS]\", 2]}",
        "{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"[X]\", \"type_id\": 0}}], "
        "\"pair\": [], \"special_tokens\": {}}",
        "{\"type\": \"TemplateProcessing\", \"single\": [{\"Sequence\": {\"id\": \"B\", \"type_id\": 0}}], "
        "\"pair\": [], \"special_tokens\": {}}",
    };
    const char *messages[] = {"BertProcessing needs \"cls\" and \"sep\"",
                              "special token '[X]' has no \"ids\" in special_tokens",
                              "names sequence 'B': only A exists for one text"};
    for (int k = 0; k < 3; k++) {
        post_processor = json_loads(broken[k], 0, NULL);
        assert_non_null(post_processor);
        json_t *file = json_load_file(FLARE_FIXTURES "/text_wordpiece.json", 0, NULL);
        set_post_processor(file);
        assert_int_equal(json_dump_file(file, tmp_path, 0), 0);
        json_decref(file);
        json_decref(post_processor);
        assert_fails_status(fl_tokenizer_load(tmp_path, &tok), FL_ERR_VALUE, messages[k]);
        assert_null(tok);
    }
}

static void cased(json_t *root)
{
    json_t *norm = json_object_get(root, "normalizer");
    json_object_set_new(norm, "lowercase", json_false());
    json_object_set_new(norm, "strip_accents", json_null());
}

static void keep_accents(json_t *root)
{
    json_object_set_new(json_object_get(root, "normalizer"), "strip_accents", json_false());
}

static const char *wordpiece_normalizer;

/* The normalizer the fixture names wordpiece_<wordpiece_normalizer>_normalizer. */
static void normalizer_sequence(json_t *root)
{
    char key[96];
    snprintf(key, sizeof key, "wordpiece_%s_normalizer", wordpiece_normalizer);
    json_object_set(root, "normalizer", cases(key));
}

/* BertNormalizer's options, and Sequences of the normalizers SentencePiece's models
 * read (NFD, Lowercase, StripAccents as the tokenizers course builds a WordPiece;
 * NFKC and Lowercase) on text with capitals, accents and compatibility characters. */
static void wordpiece_normalizer_options(void **state)
{
    edited_matches("text_wordpiece.json", cased, "wordpiece_cased", false);
    edited_matches("text_wordpiece.json", keep_accents, "wordpiece_accents", false);
    const char *names[] = {"nfd_lowercase_strip_accents", "nfkc_lowercase"};
    for (int k = 0; k < 2; k++) {
        char key[96];
        snprintf(key, sizeof key, "wordpiece_%s", names[k]);
        wordpiece_normalizer = names[k];
        edited_matches("text_wordpiece.json", normalizer_sequence, key, false);
    }
}

static void byte_level_bpe_lookups(void **state)
{
    fl_tokenizer *tok = load("text_bpe.json");
    assert_int_equal(fl_tokenizer_vocab_size(tok), 1000);
    assert_int_equal(fl_tokenizer_token_to_id(tok, "<|endoftext|>"), 0);
    assert_string_equal(fl_tokenizer_id_to_token(tok, 0), "<|endoftext|>");
    int64_t the = fl_tokenizer_token_to_id(tok, "\xC4\xA0the"); /* "Ġthe" */
    assert_true(the > 256);
    assert_string_equal(fl_tokenizer_id_to_token(tok, the), "\xC4\xA0the");
    assert_int_equal(fl_tokenizer_token_to_id(tok, "no such token"), -1);
    assert_null(fl_tokenizer_id_to_token(tok, 1000));
    assert_null(fl_tokenizer_id_to_token(tok, -1));

    /* The same ids as a tensor, ready for an embedding. */
    fl_tensor *t = fl_tokenizer_encode_tensor(tok, " the the", 8);
    assert_non_null(t);
    assert_int_equal(fl_dtype_of(t), FL_I64);
    assert_int_equal(fl_numel(t), 2);
    int64_t v[2];
    assert_int_equal(fl_to_host(t, v, sizeof v), FL_OK);
    assert_int_equal(v[0], the);
    assert_int_equal(v[1], the);
    fl_tensor *empty = fl_tokenizer_encode_tensor(tok, "", 0);
    assert_non_null(empty);
    assert_int_equal(fl_numel(empty), 0);
    fl_tokenizer_free(tok);
}

/* Any bytes: NUL, invalid UTF-8 (lone continuation bytes, overlong forms, surrogates,
 * truncated sequences), mixed with text; at most one id a byte, and one more for
 * SentencePiece's marker put before the text. */
static void round_trip(const fl_tokenizer *tok, const unsigned char *s, size_t size)
{
    int64_t *ids;
    size_t n, len;
    char *text;
    assert_int_equal(fl_tokenizer_encode(tok, s, size, &ids, &n), FL_OK);
    assert_true(n <= size + (fl_tokenizer_token_to_id(tok, "<0x00>") >= 0));
    assert_int_equal(fl_tokenizer_decode(tok, ids, n, &text, &len), FL_OK);
    assert_int_equal(len, size);
    assert_memory_equal(text, s, size);
    free(ids), free(text);
}

/* The tokenizer of file gives back every byte alone, all 256 at once, odd sequences
 * and seeded mixes of plain text and any bytes; no text holds U+2581 (E2 96 81), which
 * SentencePiece's BPE decodes to a space. */
static fl_tokenizer *round_trips_any_bytes(const char *file)
{
    fl_tokenizer *tok = load(file);
    unsigned char all[256];
    for (int b = 0; b < 256; b++) {
        all[b] = (unsigned char)b;
        round_trip(tok, all + b, 1);
    }
    round_trip(tok, all, sizeof all);
    static const char *const odd[] = {"a\0b", "\x80\x80 x", "\xC0\xAF", "\xED\xA0\x80 \xF4\x90\x80\x80", "\xE2\x82",
                                      "caf\xC3", "  \xFF\xFE  the", "it's\0's", " lead", "trail  ", "\xE2\x96"};
    static const size_t odd_len[] = {3, 4, 2, 9, 2, 4, 9, 8, 5, 7, 2};
    for (size_t i = 0; i < sizeof odd / sizeof *odd; i++)
        round_trip(tok, (const unsigned char *)odd[i], odd_len[i]);
    unsigned char buf[2000];
    unsigned seed = 12345;
    for (int trial = 0; trial < 60; trial++) {
        size_t size = (size_t)(trial * 97) % sizeof buf;
        for (size_t i = 0; i < size; i++) {
            seed = seed * 1103515245u + 12345u;
            unsigned r = seed >> 16;
            /* Half plain text, so merges apply; half any byte. */
            buf[i] = r & 1 ? (unsigned char)(r >> 1) : (unsigned char)" etaoinshrdlu'.\n"[(r >> 1) % 16];
            if (i >= 2 && buf[i - 2] == 0xE2 && buf[i - 1] == 0x96 && buf[i] == 0x81)
                buf[i] = 'x';
        }
        round_trip(tok, buf, size);
    }
    return tok;
}

static void byte_level_bpe_round_trips_any_bytes(void **state)
{
    fl_tokenizer *tok = round_trips_any_bytes("text_bpe.json");
    /* One piece of 330,000 letters: merged in O(n log n), not a pass per merge. */
    size_t long_size = 30000 * 11;
    unsigned char *long_piece = malloc(long_size);
    for (size_t i = 0; i < long_size; i += 11)
        memcpy(long_piece + i, "thecomputer", 11);
    round_trip(tok, long_piece, long_size);
    free(long_piece);
    fl_tokenizer_free(tok);
}

static unsigned char *read_corpus(size_t *size)
{
    FILE *f = fopen(FLARE_FIXTURES "/text_corpus.txt", "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *size = (size_t)ftell(f);
    rewind(f);
    unsigned char *s = malloc(*size + 1);
    assert_int_equal(fread(s, 1, *size, f), *size);
    fclose(f);
    return s;
}

static void trainer_learns_the_merges_tokenizers_learns(void **state)
{
    json_t *train = cases("train");
    size_t size;
    unsigned char *corpus = read_corpus(&size);
    fl_tokenizer *tok = NULL;
    int64_t vocab_size = json_integer_value(json_object_get(train, "vocab_size"));
    assert_int_equal(fl_tokenizer_train_bpe(corpus, size, vocab_size,
                                            json_integer_value(json_object_get(train, "min_frequency")), &tok),
                     FL_OK);
    assert_int_equal(fl_tokenizer_vocab_size(tok), vocab_size);
    const char *key;
    json_t *v;
    json_object_foreach(json_object_get(train, "vocab"), key, v) {
        if (fl_tokenizer_token_to_id(tok, key) != json_integer_value(v))
            fail_msg("'%s' has id %lld, tokenizers gives %lld", key, (long long)fl_tokenizer_token_to_id(tok, key),
                     (long long)json_integer_value(v));
    }
    size_t i;
    json_array_foreach(json_object_get(train, "merges"), i, v) {
        char both[256];
        snprintf(both, sizeof both, "%s%s", json_string_value(json_array_get(v, 0)),
                 json_string_value(json_array_get(v, 1)));
        assert_string_equal(fl_tokenizer_id_to_token(tok, 256 + (int64_t)i), both);
    }
    assert_int_equal(i, vocab_size - 256);
    round_trip(tok, corpus, size);
    /* Merges make the text shorter in tokens than in bytes. */
    int64_t *ids;
    size_t n;
    assert_int_equal(fl_tokenizer_encode(tok, corpus, size, &ids, &n), FL_OK);
    assert_true(n < size * 3 / 4);
    free(ids);
    fl_tokenizer_free(tok);

    /* A vocabulary of the bytes alone, and one that stops early: no pair occurs
     * a million times. */
    assert_int_equal(fl_tokenizer_train_bpe(corpus, size, 256, 1, &tok), FL_OK);
    assert_int_equal(fl_tokenizer_vocab_size(tok), 256);
    round_trip(tok, corpus, 100);
    fl_tokenizer_free(tok);
    assert_int_equal(fl_tokenizer_train_bpe(corpus, size, 1000, 1000000, &tok), FL_OK);
    assert_int_equal(fl_tokenizer_vocab_size(tok), 256);
    fl_tokenizer_free(tok);
    assert_int_equal(fl_tokenizer_train_bpe("", 0, 300, 1, &tok), FL_OK);
    assert_int_equal(fl_tokenizer_vocab_size(tok), 256);
    fl_tokenizer_free(tok);
    free(corpus);
}

/* ---- bad input ---- */

static const char *write_tmp(const char *text)
{
    FILE *f = fopen(tmp_path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return tmp_path;
}

static void assert_load_fails(const char *json, fl_status status, const char *contains)
{
    fl_tokenizer *tok = (fl_tokenizer *)1;
    assert_fails_status(fl_tokenizer_load(write_tmp(json), &tok), status, contains);
    assert_null(tok);
}


/* A byte-level vocabulary: the 256 byte characters, then extra entries. */
static char *bpe_json(const char *extra_vocab, const char *merges, const char *pre)
{
    static char buf[16384];
    int n = snprintf(buf, sizeof buf, "{\"model\": {\"type\": \"BPE\", \"vocab\": {");
    int id = 0;
    for (unsigned b = 0; b < 256; b++) {
        unsigned cp = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174 ? b : 0;
        if (!cp) {
            unsigned k = 0;
            for (unsigned c = 0; c < b; c++)
                k += !((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174);
            cp = 256 + k;
        }
        n += snprintf(buf + n, sizeof buf - n, "%s\"\\u%04x\": %d", b ? ", " : "", cp, id++);
    }
    n += snprintf(buf + n, sizeof buf - n, "%s}, \"merges\": %s}, \"pre_tokenizer\": %s}", extra_vocab, merges, pre);
    return buf;
}

/* Renames the tokens of bytes 0xC0 and 0xFF (spelled U+00C0 and U+00FF), as GPT-NeoX's
 * vocabulary has none. */
static void without_unused_bytes(json_t *root)
{
    json_t *vocab = json_object_get(json_object_get(root, "model"), "vocab");
    const char *spelled[] = {"\xc3\x80", "\xc3\xbf"}, *renamed[] = {"<unused C0>", "<unused FF>"};
    for (int k = 0; k < 2; k++) {
        json_t *id = json_object_get(vocab, spelled[k]);
        assert_non_null(id);
        json_object_set(vocab, renamed[k], id);
        json_object_del(vocab, spelled[k]);
    }
}

static void nfc_normalizer(json_t *root) { json_object_set_new(root, "normalizer", json_pack("{s:s}", "type", "NFC")); }

/* GPT-NeoX's layout: byte-level BPE behind an NFC normalizer. Its vocabulary has no
 * tokens for the bytes valid UTF-8 never holds (0xC0, 0xC1, 0xF5 and up); such a file
 * loads, and text holding one of those bytes is refused. */
static void byte_level_bpe_with_nfc(void **state)
{
    edited_matches("text_bpe.json", nfc_normalizer, "bpe_nfc", true);
    fl_tokenizer *tok = load_edited("text_bpe.json", without_unused_bytes);
    int64_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(fl_tokenizer_encode(tok, "caf\xc3\xa9", 5, &ids, &n), FL_OK);
    assert_true(n > 0);
    free(ids);
    assert_fails_status(fl_tokenizer_encode(tok, "ab\xc0" "d", 4, &ids, &n), FL_ERR_VALUE,
                        "byte 0xC0 at offset 2 (not valid UTF-8) has no token");
    assert_null(ids);
    fl_tokenizer_free(tok);
    assert_load_fails("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
                      "\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFKC\"}, "
                      "{\"type\": \"Lowercase\"}]}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}",
                      FL_ERR_VALUE, "BPE model with normalizer Lowercase: only NFC, NFD, NFKC, NFKD");
}

static void llama3_split(json_t *root) { json_object_set(root, "pre_tokenizer", cases("llama3_pre_tokenizer")); }

static void qwen2_split(json_t *root)
{
    json_object_set(root, "pre_tokenizer", cases("qwen2_pre_tokenizer"));
    nfc_normalizer(root);
}

/* Llama 3's pre-tokenizer (a Split by its regex, then ByteLevel without one) and
 * Qwen2's (the regex with single digits, behind NFC); another regex is refused. */
static void byte_level_bpe_with_a_split(void **state)
{
    edited_matches("text_bpe.json", llama3_split, "bpe_llama3", true);
    edited_matches("text_bpe.json", qwen2_split, "bpe_qwen2", true);
    json_t *pre = json_deep_copy(cases("llama3_pre_tokenizer"));
    json_t *split = json_array_get(json_object_get(pre, "pretokenizers"), 0);
    json_object_set_new(json_object_get(split, "pattern"), "Regex", json_string("\\s+|\\w+"));
    char *text = json_dumps(pre, 0), json[2048];
    snprintf(json, sizeof json, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
             "\"pre_tokenizer\": %s}", text);
    assert_load_fails(json, FL_ERR_VALUE, "pre_tokenizer Split by '\\s+|\\w+': only Llama 3's and Qwen2's regex");
    free(text);
    json_decref(pre);
}

/* The code points of text_normalize(in, n, form) against the JSON list expected. */
static void assert_form(const int32_t *in, size_t n, text_form form, const char *name, const json_t *expected)
{
    int32_t out[16 * TEXT_COMPATIBILITY_GROWTH];
    assert_true(n <= 16);
    assert_true(text_decomposed_length(in, n, form) <= TEXT_FORM_GROWTH(form) * n);
    size_t m = text_normalize(in, n, out, form);
    assert_true(m <= text_decomposed_length(in, n, form));
    bool same = m == json_array_size(expected);
    for (size_t k = 0; same && k < m; k++)
        same = out[k] == json_integer_value(json_array_get(expected, k));
    if (!same)
        fail_msg("%s of %zu code points from U+%04X: %zu code points from U+%04X, unicodedata gives %zu", name, n,
                 (unsigned)in[0], m, (unsigned)out[0], json_array_size(expected));
}

/* text_normalize against Python's unicodedata (tests/fixtures/gen_normal_forms.py), in
 * each form: every code point, each its own normal form but those the fixture lists
 * (Hangul syllables, decomposed by rule, sampled), and random runs of starters,
 * compatibility characters and marks. */
static void normal_forms_match_unicodedata(void **state)
{
    json_error_t err;
    json_t *root = json_load_file(FLARE_FIXTURES "/text_normal_forms.json", 0, &err);
    assert_non_null(root);
    const json_t *forms = json_object_get(root, "forms"), *entry;
    int32_t stride = (int32_t)json_integer_value(json_object_get(root, "hangul_stride"));
    assert_int_equal(json_array_size(forms), 4);
    for (int f = 0; f < 4; f++) {
        const char *name = json_string_value(json_array_get(forms, (size_t)f));
        const json_t *changed = json_object_get(json_object_get(root, "changed"), name);
        size_t next = 0;
        for (int32_t cp = 0; cp < 0x110000; cp++) {
            if ((cp >= 0xD800 && cp < 0xE000) || (cp >= 0xAC00 && cp <= 0xD7A3 && (cp - 0xAC00) % stride))
                continue;
            entry = json_array_get(changed, next);
            if (entry && json_integer_value(json_array_get(entry, 0)) == cp) {
                assert_form(&cp, 1, (text_form)f, name, json_array_get(entry, 1));
                next++;
                continue;
            }
            int32_t out[TEXT_COMPATIBILITY_GROWTH];
            if (text_normalize(&cp, 1, out, (text_form)f) != 1 || out[0] != cp)
                fail_msg("%s changed U+%04X, which unicodedata keeps", name, (unsigned)cp);
        }
        assert_int_equal(next, json_array_size(changed));
        assert_true(next > 1000);
    }
    size_t i;
    json_array_foreach(json_object_get(root, "sequences"), i, entry) {
        const json_t *text = json_array_get(entry, 0);
        int32_t in[16];
        for (size_t k = 0; k < json_array_size(text); k++)
            in[k] = (int32_t)json_integer_value(json_array_get(text, k));
        for (int f = 0; f < 4; f++)
            assert_form(in, json_array_size(text), (text_form)f, json_string_value(json_array_get(forms, (size_t)f)),
                        json_array_get(entry, (size_t)f + 1));
    }
    assert_int_equal(i, 2000);
    json_decref(root);
}

static void drop_model_type(json_t *root) { json_object_del(json_object_get(root, "model"), "type"); }

/* Files written before tokenizers named the model (bert-base-uncased's own
 * tokenizer.json): the model is told by its fields, as the library tells it. */
static void files_that_name_no_model(void **state)
{
    edited_matches("text_bpe.json", drop_model_type, "bpe", true);
    edited_matches("text_wordpiece.json", drop_model_type, "wordpiece", true);
    assert_load_fails("{\"model\": {\"vocab\": {\"a\": 0}, \"unk_token\": \"a\"}}", FL_ERR_VALUE,
                      "model.type 'WordLevel' (told by its fields: the file names no type) is not supported");
    fl_tokenizer *tok = NULL;
    assert_int_equal(fl_tokenizer_load(write_tmp("{\"model\": {\"vocab\": [[\"a\", -1.0], [\"aa\", -1.5], "
                                                 "[\"?\", -5.0]], \"unk_id\": 2}}"),
                                       &tok),
                     FL_OK);
    /* "a aa" and "aa a" both score -2.5: the first offer to the end of "aaa" stands,
     * "aa" from the second character, as the library has it; "b" is unknown */
    encodes_to_first_three(tok, "aaab");
    fl_tokenizer_free(tok);
    assert_load_fails("{\"model\": {\"vocab\": {\"a\": 0}, \"continuing_subword_prefix\": \"##\"}}",
                      FL_ERR_VALUE, "model.type (missing) is not supported");
}

/* add_special_tokens=True: each case's ids with the file's template. */
static void special_ids_match(const char *file, const json_t *list)
{
    fl_tokenizer *tok = load(file);
    size_t i;
    json_t *c;
    json_array_foreach(list, i, c) {
        int64_t *ids;
        size_t n;
        const json_t *text = json_object_get(c, "text");
        assert_int_equal(fl_tokenizer_encode_special(tok, json_string_value(text), json_string_length(text), NULL, 0,
                                                     &ids, NULL, &n), FL_OK);
        assert_same_ids(json_string_value(text), ids, n, json_object_get(c, "ids"));
        free(ids);
    }
    assert_true(i > 0);
    fl_tokenizer_free(tok);
}

/* Unicode's own grapheme cluster cases (GraphemeBreakTest.txt, as gen_graphemes.py
 * copies them): every break, and no other, where the file puts one. */
static void grapheme_clusters_match_unicode(void **state)
{
    FILE *f = fopen(FLARE_FIXTURES "/grapheme_break_test.txt", "r");
    assert_non_null(f);
    char line[1024];
    int cases = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#')
            continue;
        unsigned char text[256];
        size_t n = 0, breaks[64], nbreaks = 0;
        for (char *p = line; *p;) {
            if (strncmp(p, "\xC3\xB7", 2) == 0 && n > 0) /* ÷ */
                breaks[nbreaks++] = n;
            char *end;
            unsigned long cp = strtoul(p, &end, 16);
            if (end != p && *p != ' ') {
                n += text_utf8_put((uint32_t)cp, text + n);
                p = end;
            } else {
                p++;
            }
        }
        size_t at = 0;
        for (size_t k = 0; k < nbreaks; k++) {
            size_t len = text_grapheme_length(text + at, n - at);
            if (at + len != breaks[k])
                fail_msg("%s: a cluster from byte %zu ends at %zu, Unicode says %zu", line, at, at + len, breaks[k]);
            at += len;
        }
        assert_int_equal(at, n);
        cases++;
    }
    fclose(f);
    assert_true(cases > 600);
}

/* ---- SentencePiece's Unigram model ---- */

/* T5's layout without its normalizer: Metaspace before and after, unknown characters
 * (alone, in runs, beside the unknown token's own spelling) fused into one token. */
static void unigram_ids_match_tokenizers(void **state)
{
    matches_cases("text_unigram.json", unigram_cases("unigram"));
    special_ids_match("text_unigram.json", unigram_cases("special"));
}

/* The 256 byte pieces after the others, with byte_fallback: an unknown run becomes its
 * bytes' tokens. */
static void with_byte_pieces(json_t *root)
{
    json_t *model = json_object_get(root, "model"), *vocab = json_object_get(model, "vocab");
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        json_array_append_new(vocab, json_pack("[s, f]", name, 0.0));
    }
    json_object_set_new(model, "byte_fallback", json_true());
}

static void unigram_byte_fallback(void **state)
{
    edited_matches_cases("text_unigram.json", with_byte_pieces, unigram_cases("byte_fallback"), true);
}

static const char *unigram_layout;

/* Sets the keys of the fixture's layout unigram_layout, its Precompiled steps given the
 * map the fixture writes once, as "charsmap". */
static void set_unigram_layout(json_t *root)
{
    const char *key;
    json_t *v;
    json_object_foreach(json_object_get(unigram_cases("layouts"), unigram_layout), key, v)
        json_object_set_new(root, key, json_deep_copy(v));
    json_t *norm = json_object_get(root, "normalizer"), *steps = json_object_get(norm, "normalizers"), *step;
    size_t i;
    json_array_foreach(steps, i, step) {
        if (json_object_get(step, "precompiled_charsmap"))
            json_object_set(step, "precompiled_charsmap", unigram_cases("charsmap"));
    }
    if (json_object_get(norm, "precompiled_charsmap"))
        json_object_set(norm, "precompiled_charsmap", unigram_cases("charsmap"));
}

/* A WhitespaceSplit before the Metaspace, as transformers 5 builds T5's and XLM-R's
 * tokenizers: each word between white space (U+3000, U+00A0, U+2028, ... too) gets
 * the marker, or with prepend_scheme "first" only a word at the text's very start. */
static void unigram_whitespace_split(void **state)
{
    const char *names[] = {"whitespace_split", "whitespace_first"};
    for (int k = 0; k < 2; k++) {
        unigram_layout = names[k];
        edited_matches_cases("text_unigram.json", set_unigram_layout, unigram_cases(names[k]), true);
    }
}

/* The normalizer of T5's and XLM-R's published files: SentencePiece's nmt_nfkc map
 * over grapheme clusters (a cluster of under 6 bytes rewritten whole from its first
 * key: "\uFF21\u0301" is "A"), then runs of spaces made one; on 434 texts, 400 of them
 * random strings of characters the map rewrites, marks, joiners and breaks. */
static void unigram_precompiled_normalizer(void **state)
{
    unigram_layout = "precompiled";
    edited_matches_cases("text_unigram.json", set_unigram_layout, unigram_cases("precompiled"), true);
    assert_true(json_array_size(unigram_cases("precompiled")) > 400);
}

/* The other normalizers of published SentencePiece files: ALBERT's (also XLNet's and
 * RemBERT's: TeX quotes, NFKD, StripAccents, Lowercase, the map), DeBERTa-v2's
 * (Lowercase, Strip, the map; a Sequence of the Metaspace alone before), and each
 * normalization form alone or with StripAccents, Lowercase or one-sided Strip; on 337
 * texts, 300 of them random strings of compatibility characters, capitals, accents,
 * marks of every category, quotes and white space. */
static void unigram_normalizers(void **state)
{
    const char *names[] = {"albert", "deberta", "nfc", "nfkc", "nfd_strip_accents", "nfkd_lowercase",
                           "strip_accents", "strip_left", "strip_right"};
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
        unigram_layout = names[k];
        edited_matches_cases("text_unigram.json", set_unigram_layout, unigram_cases(names[k]), true);
        assert_true(json_array_size(unigram_cases(names[k])) > 300);
    }
}

static void without_unk_id(json_t *root) { json_object_set_new(json_object_get(root, "model"), "unk_id", json_null()); }

static void unigram_refusals(void **state)
{
    /* No piece covers the character and there is no unknown token: it is named, as
     * the library refuses it too. */
    fl_tokenizer *tok = load_edited("text_unigram.json", without_unk_id);
    int64_t *ids = (int64_t *)1;
    size_t n = 3;
    assert_fails_status(fl_tokenizer_encode(tok, "ok \xE4\xBD\xA0", 6, &ids, &n), FL_ERR_VALUE,
                        "character U+4F60 '\xE4\xBD\xA0' in the text from offset 0 has no token");
    assert_null(ids);
    fl_tokenizer_free(tok);
    assert_load_fails("{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0.0], [\"b\"]]}}", FL_ERR_VALUE,
                      "model.vocab[1] is not a [piece, score] pair");
    assert_load_fails("{\"model\": {\"type\": \"Unigram\", \"vocab\": {\"a\": 0}}}", FL_ERR_VALUE,
                      "model.vocab is missing or not a list");
    assert_load_fails("{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0.0]], \"unk_id\": 1}}",
                      FL_ERR_VALUE, "model.unk_id is not null or an index of model.vocab");
    assert_load_fails("{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0.0]]}, "
                      "\"pre_tokenizer\": {\"type\": \"WhitespaceSplit\"}}",
                      FL_ERR_VALUE, "Unigram model with pre_tokenizer WhitespaceSplit");
    /* Character maps that are not one: empty, null, not base64, a trie longer than the
     * map */
    const char *maps[][2] = {{"\"\"", "is not a trie and its rewrites"},
                             {"null", "is not a string"},
                             {"\"!!!!\"", "is not base64"},
                             {"\"//8AAA==\"", "is not a trie and its rewrites"}};
    for (int k = 0; k < 4; k++) {
        char json[512];
        snprintf(json, sizeof json,
                 "{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0.0]]}, "
                 "\"normalizer\": {\"type\": \"Precompiled\", \"precompiled_charsmap\": %s}}",
                 maps[k][0]);
        char want[128];
        snprintf(want, sizeof want, "normalizer Precompiled: precompiled_charsmap %s", maps[k][1]);
        assert_load_fails(json, FL_ERR_VALUE, want);
    }
    /* A well-formed map whose one unit points far outside it: it rewrites nothing, and
     * reads nothing outside (the sanitizer build checks). */
    tok = NULL;
    assert_int_equal(fl_tokenizer_load(write_tmp("{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0.0], "
                                                 "[\"b\", 0.0], [\"c\", 0.0]]}, \"normalizer\": {\"type\": "
                                                 "\"Precompiled\", \"precompiled_charsmap\": \"BAAAAP////94AA==\"}}"),
                                       &tok),
                     FL_OK);
    encodes_to_first_three(tok, "abc");
    fl_tokenizer_free(tok);
}

/* ---- SentencePiece's BPE over characters, with byte fallback ---- */

/* The layout of this name in the cases file: its normalizer, pre_tokenizer and
 * decoder replace the fixture's. */
static const char *layout;

static void set_layout(json_t *root)
{
    const char *key;
    json_t *v;
    json_object_foreach(json_object_get(sentencepiece_cases("layouts"), layout), key, v)
        json_object_set(root, key, v);
}

static void without_byte_fallback(json_t *root)
{
    json_object_set_new(json_object_get(root, "model"), "byte_fallback", json_false());
}

/* "</s>" taking the whitespace on its right, "<unk>" on its left, "<s>" matched in the
 * normalized text as its normalized content. */
static void added_token_flags(json_t *root)
{
    json_t *t;
    size_t i;
    json_array_foreach(json_object_get(root, "added_tokens"), i, t) {
        const char *content = json_string_value(json_object_get(t, "content"));
        json_object_set_new(t, strcmp(content, "</s>") == 0 ? "rstrip" : strcmp(content, "<unk>") == 0 ? "lstrip"
                                                                                                     : "normalized",
                            json_true());
    }
}

/* Mistral's layout (Metaspace as the pre-tokenizer, prepending to the text's start
 * only), Metaspace splitting at each marker with its own decoder, unknown characters
 * without byte fallback, and added tokens that strip whitespace or are normalized. */
static void sentencepiece_bpe_layouts(void **state)
{
    const char *names[] = {"metaspace", "metaspace_split"};
    for (int k = 0; k < 2; k++) {
        layout = names[k];
        edited_matches_cases("text_sentencepiece.json", set_layout, sentencepiece_cases(names[k]), true);
    }
    edited_matches_cases("text_sentencepiece.json", without_byte_fallback, sentencepiece_cases("no_fallback"), true);
    edited_matches_cases("text_sentencepiece.json", added_token_flags, sentencepiece_cases("added_flags"), true);

    /* The template puts "<s>" first, as transformers' tokenizer(text) does. */
    special_ids_match("text_sentencepiece.json", sentencepiece_cases("special"));
}

/* Byte fallback covers every byte, so any text without U+2581 (which decodes to a
 * space) comes back exactly: invalid UTF-8 and NUL as their byte tokens. */
static void sentencepiece_bpe_round_trips_any_bytes(void **state)
{
    fl_tokenizer_free(round_trips_any_bytes("text_sentencepiece.json"));
}

static void without_unk(json_t *root)
{
    without_byte_fallback(root);
    json_object_del(json_object_get(root, "model"), "unk_token");
}

static void sentencepiece_bpe_refusals(void **state)
{
    /* Neither a token, nor byte tokens, nor an unknown token: the character is named. */
    fl_tokenizer *tok = load_edited("text_sentencepiece.json", without_unk);
    int64_t *ids = (int64_t *)1;
    size_t n = 3;
    assert_fails_status(fl_tokenizer_encode(tok, "ok <s>caf\xC3\xA9", 11, &ids, &n), FL_ERR_VALUE,
                        "character U+00E9 '\xC3\xA9' in the text from offset 6 has no token");
    assert_null(ids);
    assert_int_equal(n, 0);
    assert_fails_status(fl_tokenizer_encode(tok, "x\xFF", 2, &ids, &n), FL_ERR_VALUE, "byte 0xFF");
    assert_fails_status(fl_tokenizer_encode(tok, "the\0", 4, &ids, &n), FL_ERR_VALUE, "character U+0000");
    fl_tokenizer_free(tok);

    const char *start = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, ";
    char json[1024];
    struct {
        const char *rest, *error;
    } bad[] = {
        {"\"pre_tokenizer\": {\"type\": \"Whitespace\"}}", "pre_tokenizer Whitespace"},
        {"\"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"_\", \"prepend_scheme\": \"often\"}}",
         "prepend_scheme of always, first or never"},
        {"\"normalizer\": {\"type\": \"Nmt\"}}", "normalizer Nmt"},
        {"\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": \"_\"}, "
         "{\"type\": \"BertNormalizer\"}]}}",
         "normalizer BertNormalizer in a Sequence"},
        {"\"normalizer\": {\"type\": \"Strip\", \"strip_left\": true}}", "normalizer Strip"},
        {"\"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"Regex\": \" +\"}, \"content\": \"_\"}}",
         "normalizer Replace (of a regex?)"},
        {"\"decoder\": {\"type\": \"WordPiece\"}}", "decoder WordPiece"},
        {"\"normalizer\": {\"type\": \"Sequence\"}}", "normalizer Sequence has no \"normalizers\" array"},
        {"\"decoder\": {\"type\": \"Strip\", \"content\": \" \", \"start\": -1, \"stop\": 0}}", "decoder Strip"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(json, sizeof json, "%s%s", start, bad[i].rest);
        assert_load_fails(json, FL_ERR_VALUE, bad[i].error);
    }
    snprintf(json, sizeof json, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [], "
             "\"unk_token\": \"<unk>\"}}");
    assert_load_fails(json, FL_ERR_VALUE, "model.unk_token '<unk>' is not in the vocabulary");
}

static void bad_tokenizer_files(void **state)
{
    fl_tokenizer *tok = (fl_tokenizer *)1;
    assert_fails_status(fl_tokenizer_load("/nonexistent/tokenizer.json", &tok), FL_ERR_IO,
                        "/nonexistent/tokenizer.json");
    assert_null(tok);
    /* a directory opens, but does not read */
    assert_fails_status(fl_tokenizer_load(FLARE_FIXTURES, &tok), FL_ERR_IO, "cannot read: Is a directory");
    assert_null(tok);
    assert_fails_status(fl_tokenizer_load(NULL, &tok), FL_ERR_NULL, "path");
    assert_fails_status(fl_tokenizer_load(tmp_path, NULL), FL_ERR_NULL, "out");

    assert_load_fails("{\"model\": {\"type\": \"BPE\", ", FL_ERR_VALUE, "not valid JSON at line 1");
    assert_load_fails("", FL_ERR_VALUE, tmp_path);
    assert_load_fails("[1, 2]", FL_ERR_VALUE, "not a JSON object");
    assert_load_fails("{\"version\": \"1.0\"}", FL_ERR_VALUE, "no \"model\"");
    assert_load_fails("{\"model\": {\"type\": \"WordLevel\", \"vocab\": {\"a\": 0}}}", FL_ERR_VALUE,
                      "model.type 'WordLevel' is not supported (only BPE, WordPiece and Unigram)");
    assert_load_fails("{\"model\": {\"type\": \"BPE\", \"vocab\": [1]}}", FL_ERR_VALUE, "model.vocab");
    assert_load_fails("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": \"x\"}}}", FL_ERR_VALUE,
                      "model.vocab['a'] is not an integer");
    assert_load_fails("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0}}}", FL_ERR_VALUE,
                      "id 0 is given to both");
    assert_load_fails("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 99999999999}}}", FL_ERR_VALUE,
                      "not below the number of tokens");
    assert_load_fails("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}}}", FL_ERR_VALUE, "outside");
    assert_load_fails("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
                      "\"pre_tokenizer\": {\"type\": \"Metaspace\"}}",
                      FL_ERR_VALUE, "pre_tokenizer Metaspace");
    assert_load_fails("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
                      "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}}",
                      FL_ERR_VALUE, "the token of byte 0x00");
    assert_load_fails(bpe_json("", "[\"a b\", \"ab c\"]", "{\"type\": \"ByteLevel\"}"), FL_ERR_VALUE,
                      "model.merges[0]: 'ab' is not in the vocabulary");
    assert_load_fails(bpe_json(", \"ab\": 256", "[\"a b\", \"ab q\"]", "{\"type\": \"ByteLevel\"}"), FL_ERR_VALUE,
                      "model.merges[1]: 'abq' is not in the vocabulary");
    assert_load_fails(bpe_json(", \"ab\": 256", "[\"a b c\"]", "{\"type\": \"ByteLevel\"}"), FL_ERR_VALUE,
                      "model.merges[0] is not");
    assert_load_fails(bpe_json("", "{}", "{\"type\": \"ByteLevel\"}"), FL_ERR_VALUE, "model.merges is missing");
    assert_load_fails("{\"added_tokens\": [{\"id\": 0, \"content\": \"<s>\", \"single_word\": true}], "
                      "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}}",
                      FL_ERR_VALUE, "added_tokens[0] '<s>': single_word");
    assert_load_fails("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}, \"unk_token\": \"[UNK]\"}, "
                      "\"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"}}",
                      FL_ERR_VALUE, "model.unk_token '[UNK]' is not in the vocabulary");
    assert_load_fails("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}, \"unk_token\": \"a\"}, "
                      "\"normalizer\": {\"type\": \"Nmt\"}, \"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"}}",
                      FL_ERR_VALUE, "normalizer Nmt: only Prepend");
    assert_load_fails("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}, \"unk_token\": \"a\"}, "
                      "\"normalizer\": [], \"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"}}",
                      FL_ERR_VALUE, "normalizer is not an object");

    /* A well-formed minimal file loads: merges as pairs, as tokenizers 0.20 writes. */
    const char *pairs = bpe_json(", \"ab\": 256", "[[\"a\", \"b\"]]", "{\"type\": \"ByteLevel\"}");
    assert_int_equal(fl_tokenizer_load(write_tmp(pairs), &tok), FL_OK);
    int64_t *ids;
    size_t n;
    assert_int_equal(fl_tokenizer_encode(tok, "abab", 4, &ids, &n), FL_OK);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 256);
    assert_int_equal(ids[1], 256);
    free(ids);
    fl_tokenizer_free(tok);
}

static void bad_ids_and_arguments(void **state)
{
    fl_tokenizer *tok = load("text_bpe.json");
    char *text = (char *)1;
    size_t size = 7;
    int64_t ids[] = {40, 1000, 3};
    assert_fails_status(fl_tokenizer_decode(tok, ids, 3, &text, &size), FL_ERR_INDEX,
                        "id 1000 at position 1 is out of range (vocabulary size 1000)");
    assert_null(text);
    assert_int_equal(size, 0);
    ids[1] = -5;
    assert_fails_status(fl_tokenizer_decode(tok, ids, 3, &text, &size), FL_ERR_INDEX, "id -5 at position 1");
    assert_int_equal(fl_tokenizer_decode(tok, NULL, 0, &text, &size), FL_OK);
    assert_int_equal(size, 0);
    assert_string_equal(text, "");
    free(text);
    int64_t *out;
    size_t n;
    assert_fails_status(fl_tokenizer_encode(NULL, "a", 1, &out, &n), FL_ERR_NULL, "tokenizer");
    assert_fails_status(fl_tokenizer_encode(tok, NULL, 1, &out, &n), FL_ERR_NULL, "text");
    assert_int_equal(fl_tokenizer_encode(tok, NULL, 0, &out, &n), FL_OK);
    assert_int_equal(n, 0);
    assert_null(out);
    assert_fails(fl_tokenizer_encode_tensor(NULL, "a", 1), FL_ERR_NULL, "tokenizer");
    fl_tokenizer *t2;
    assert_fails_status(fl_tokenizer_train_bpe("abc", 3, 100, 1, &t2), FL_ERR_VALUE,
                        "vocab_size 100 must be at least 256");
    assert_fails_status(fl_tokenizer_train_bpe("abc", 3, 300, 0, &t2), FL_ERR_VALUE, "min_frequency 0");
    assert_fails_status(fl_tokenizer_train_bpe(NULL, 3, 300, 1, &t2), FL_ERR_NULL, "text");
    fl_tokenizer_free(NULL);
    assert_int_equal(fl_tokenizer_vocab_size(NULL), 0);
    fl_tokenizer_free(tok);
}

static int make_tmp(void **state)
{
    int fd = mkstemp(tmp_path);
    if (fd < 0)
        return -1;
    close(fd);
    return 0;
}

static int remove_tmp(void **state) { return unlink(tmp_path); }

int main(void)
{
    const struct CMUnitTest tests[] = {
        scoped_test(byte_level_bpe_ids_match_tokenizers),
        scoped_test(byte_level_bpe_layouts),
        scoped_test(byte_level_bpe_lookups),
        scoped_test(byte_level_bpe_round_trips_any_bytes),
        scoped_test(trainer_learns_the_merges_tokenizers_learns),
        scoped_test(wordpiece_ids_match_tokenizers),
        scoped_test(wordpiece_normalizer_options),
        scoped_test(files_that_name_no_model),
        scoped_test(normal_forms_match_unicodedata),
        scoped_test(byte_level_bpe_with_nfc),
        scoped_test(byte_level_bpe_with_a_split),
        scoped_test(special_tokens_match_tokenizers),
        scoped_test(special_tokens_without_a_template),
        scoped_test(sentencepiece_bpe_ids_match_tokenizers),
        scoped_test(sentencepiece_bpe_layouts),
        scoped_test(sentencepiece_bpe_round_trips_any_bytes),
        scoped_test(sentencepiece_bpe_refusals),
        scoped_test(grapheme_clusters_match_unicode),
        scoped_test(unigram_ids_match_tokenizers),
        scoped_test(unigram_byte_fallback),
        scoped_test(unigram_whitespace_split),
        scoped_test(unigram_precompiled_normalizer),
        scoped_test(unigram_normalizers),
        scoped_test(unigram_refusals),
        scoped_test(bad_tokenizer_files),
        scoped_test(bad_ids_and_arguments),
    };
    return cmocka_run_group_tests_name("text", tests, make_tmp, remove_tmp);
}
