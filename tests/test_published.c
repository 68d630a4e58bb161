/* Files as published checkpoints ship them (tests/fixtures/published/, from
 * tests/fixtures/gen_published.py): gpt2's, all-MiniLM-L6-v2's and Phi-3-mini's
 * tokenizer.json give the ids (and decodings) of the `tokenizers` library on a few
 * hundred lines of text, and a checkpoint with
 * all-MiniLM-L6-v2's config.json and its model.safetensors header (names, dtypes, the
 * position_ids buffer, the pooler) loads into Flare's BERT encoder and gives
 * transformers' hidden states, from text to sentence embeddings. The published weights
 * are not in the repository: the data section holds values made from their place in it.
 * Where FLARE_PUBLISHED_WEIGHTS names a directory holding the published checkpoint itself
 * (tests/fixtures/fetch_published.py, which `make test` runs), the weights give
 * transformers' hidden states too, and sentence-transformers' semantic search finds the
 * sentences its documentation shows. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "flare/io.h"
#include "flare/text.h"
#include "models.h"
#include "support.h"

#define PUBLISHED FLARE_FIXTURES "/published"
#define MINILM PUBLISHED "/all-MiniLM-L6-v2"

/* The fixture `name` of published.bin on the host, as bytes or int32 values. */
static void *host_values(const char *name, size_t *count)
{
    fl_tensor *t = fixture("published.bin", name);
    assert_non_null(t);
    *count = (size_t)fl_numel(t);
    size_t bytes = *count * fl_dtype_size(fl_dtype_of(t));
    void *values = malloc(bytes + 1);
    assert_int_equal(fl_to_host(t, values, bytes), FL_OK);
    ((char *)values)[bytes] = 0;
    return values;
}

/* The newline-separated lines of the u8 fixture `name`, at most capacity: returns how
 * many, each at lines[i] with lengths[i] bytes (pointing into *text, which the caller
 * frees). */
static size_t split_lines(const char *name, char **text, const char **lines, size_t *lengths, size_t capacity)
{
    size_t size, count = 0;
    *text = host_values(name, &size);
    for (char *at = *text, *end = *text + size; at <= end && count < capacity; count++) {
        char *newline = memchr(at, '\n', (size_t)(end - at));
        lines[count] = at;
        lengths[count] = (size_t)((newline ? newline : end) - at);
        at += lengths[count] + 1;
    }
    return count;
}

static void assert_ids(const int64_t *got, size_t got_count, const int32_t *expected, size_t expected_count,
                       const char *what, size_t line)
{
    size_t same = 0;
    while (same < got_count && same < expected_count && got[same] == expected[same])
        same++;
    if (same != got_count || same != expected_count)
        fail_msg("%s of text %zu: %zu ids, expected %zu (first difference at %zu)", what, line, got_count,
                 expected_count, same);
}

#define MAX_TEXTS 512

/* Every text through encode (and, byte_exact, the ids back through decode, which must
 * give the bytes again) against the library's ids. The file's truncation (gpt2's at 50
 * tokens, all-MiniLM-L6-v2's at 128; 0 for a file without one) is not applied, as
 * transformers does not apply it. */
static void check_tokenizer(const char *path, const char *key, bool byte_exact, size_t truncation)
{
    fl_tokenizer *tok = NULL;
    assert_int_equal(fl_tokenizer_load(path, &tok), FL_OK);
    char *text, name[64];
    const char *lines[MAX_TEXTS];
    size_t lengths[MAX_TEXTS], id_count, count_count;
    size_t texts = split_lines("texts", &text, lines, lengths, MAX_TEXTS);
    snprintf(name, sizeof name, "%s_ids", key);
    int32_t *expected = host_values(name, &id_count);
    snprintf(name, sizeof name, "%s_counts", key);
    int32_t *counts = host_values(name, &count_count);
    assert_int_equal(count_count, texts);
    size_t at = 0, longest = 0;
    for (size_t i = 0; i < texts; i++) {
        int64_t *ids = NULL;
        size_t n = 0;
        assert_int_equal(fl_tokenizer_encode(tok, lines[i], lengths[i], &ids, &n), FL_OK);
        assert_ids(ids, n, expected + at, (size_t)counts[i], key, i);
        at += (size_t)counts[i];
        longest = n > longest ? n : longest;
        if (byte_exact) {
            char *decoded = NULL;
            size_t size = 0;
            assert_int_equal(fl_tokenizer_decode(tok, ids, n, &decoded, &size), FL_OK);
            assert_int_equal(size, lengths[i]);
            assert_memory_equal(decoded, lines[i], size);
            free(decoded);
        }
        free(ids);
    }
    assert_int_equal(at, id_count);
    if (truncation) /* a text is longer than the file's truncation */
        assert_true(longest > truncation);
    free(text);
    free(expected);
    free(counts);
    fl_tokenizer_free(tok);
}

/* Every text encoded and decoded again gives the library's decoding (key, one a line). */
static void check_decodings(const fl_tokenizer *tok, const char *key)
{
    char *text, *decoded_text;
    const char *lines[MAX_TEXTS], *decoded[MAX_TEXTS];
    size_t lengths[MAX_TEXTS], decoded_lengths[MAX_TEXTS];
    size_t texts = split_lines("texts", &text, lines, lengths, MAX_TEXTS);
    assert_int_equal(split_lines(key, &decoded_text, decoded, decoded_lengths, MAX_TEXTS), texts);
    for (size_t i = 0; i < texts; i++) {
        int64_t *ids = NULL;
        size_t n = 0, size = 0;
        char *out = NULL;
        assert_int_equal(fl_tokenizer_encode(tok, lines[i], lengths[i], &ids, &n), FL_OK);
        assert_int_equal(fl_tokenizer_decode(tok, ids, n, &out, &size), FL_OK);
        if (size != decoded_lengths[i] || memcmp(out, decoded[i], size) != 0)
            fail_msg("decoding text %zu: \"%s\", expected \"%.*s\"", i, out, (int)decoded_lengths[i], decoded[i]);
        free(out);
        free(ids);
    }
    free(text);
    free(decoded_text);
}

static void gpt2_tokenizer_gives_the_library_ids(void **state)
{
    (void)state;
    check_tokenizer(PUBLISHED "/gpt2/tokenizer.json", "gpt2", true, 50);
    assert_no_error();
}

/* WordPiece ids; pairs with [CLS] A [SEP] B [SEP] and their token types; and the
 * decoder's text. */
static void minilm_tokenizer_gives_the_library_ids(void **state)
{
    (void)state;
    check_tokenizer(MINILM "/tokenizer.json", "minilm", false, 128);
    fl_tokenizer *tok = NULL;
    assert_int_equal(fl_tokenizer_load(MINILM "/tokenizer.json", &tok), FL_OK);
    char *text;
    const char *lines[MAX_TEXTS];
    size_t lengths[MAX_TEXTS], id_count, type_count, count_count;
    size_t texts = split_lines("texts", &text, lines, lengths, MAX_TEXTS);
    int32_t *expected = host_values("minilm_pair_ids", &id_count);
    int32_t *expected_types = host_values("minilm_pair_types", &type_count);
    int32_t *counts = host_values("minilm_pair_counts", &count_count);
    assert_int_equal(count_count, texts / 2);
    size_t at = 0;
    for (size_t p = 0; p < count_count; p++) {
        int64_t *ids = NULL, *types = NULL;
        size_t n = 0;
        assert_int_equal(fl_tokenizer_encode_special(tok, lines[2 * p], lengths[2 * p], lines[2 * p + 1],
                                                     lengths[2 * p + 1], &ids, &types, &n),
                         FL_OK);
        assert_ids(ids, n, expected + at, (size_t)counts[p], "pair ids", 2 * p);
        assert_ids(types, n, expected_types + at, (size_t)counts[p], "pair types", 2 * p);
        at += (size_t)counts[p];
        free(ids);
        free(types);
    }
    assert_int_equal(at, id_count);
    check_decodings(tok, "minilm_decoded");
    free(text);
    free(expected);
    free(expected_types);
    free(counts);
    fl_tokenizer_free(tok);
    assert_no_error();
}

/* SentencePiece's BPE in Llama 2's layout with byte fallback, and chat tokens that
 * take the whitespace on their right: ids and decodings. */
static void phi3_tokenizer_gives_the_library_ids(void **state)
{
    (void)state;
    check_tokenizer(PUBLISHED "/phi-3-mini/tokenizer.json", "phi3", false, 0); /* the file sets no truncation */
    fl_tokenizer *tok = NULL;
    assert_int_equal(fl_tokenizer_load(PUBLISHED "/phi-3-mini/tokenizer.json", &tok), FL_OK);
    check_decodings(tok, "phi3_decoded");
    fl_tokenizer_free(tok);
    assert_no_error();
}

/* The f32 at word n of the data section, as gen_published.py's published_values. */
static float published_value(uint64_t n)
{
    uint64_t z = n + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    float u = (float)(z >> 40) * 0x1p-24f - 0.5f;
    return 0.1f * u;
}

/* dir/model.safetensors: the published header, then the data section it describes
 * filled as gen_published.py fills it; returns the file's size. */
static long write_checkpoint(const char *dir)
{
    FILE *in = fopen(MINILM "/model.safetensors.header", "rb");
    assert_non_null(in);
    static unsigned char header[1 << 15];
    size_t size = fread(header, 1, sizeof header, in);
    fclose(in);
    uint64_t json_size = 0;
    for (int i = 7; i >= 0; i--)
        json_size = json_size << 8 | header[i];
    assert_int_equal(size, 8 + json_size);
    json_error_t error;
    json_t *tensors = json_loadb((const char *)header + 8, json_size, 0, &error);
    assert_non_null(tensors);
    uint64_t data_size = 0;
    const char *name;
    json_t *t;
    json_object_foreach(tensors, name, t)
    {
        json_t *offsets = json_object_get(t, "data_offsets");
        if (offsets && (uint64_t)json_integer_value(json_array_get(offsets, 1)) > data_size)
            data_size = (uint64_t)json_integer_value(json_array_get(offsets, 1));
    }
    unsigned char *data = calloc(data_size, 1);
    assert_non_null(data);
    json_object_foreach(tensors, name, t)
    {
        json_t *offsets = json_object_get(t, "data_offsets");
        if (!offsets)
            continue; /* __metadata__ */
        uint64_t begin = (uint64_t)json_integer_value(json_array_get(offsets, 0));
        uint64_t end = (uint64_t)json_integer_value(json_array_get(offsets, 1));
        const char *dtype = json_string_value(json_object_get(t, "dtype"));
        size_t length = strlen(name);
        bool layer_norm_weight = length >= 16 && strcmp(name + length - 16, "LayerNorm.weight") == 0;
        if (strcmp(dtype, "F32") == 0) {
            for (uint64_t n = begin / 4; n < end / 4; n++) {
                float v = published_value(n);
                v = layer_norm_weight ? 1.0f + v : v;
                memcpy(data + 4 * n, &v, 4);
            }
        } else {
            assert_string_equal(dtype, "I64");
            for (uint64_t n = 0; n < (end - begin) / 8; n++) {
                int64_t v = (int64_t)n;
                memcpy(data + begin + 8 * n, &v, 8);
            }
        }
    }
    json_decref(tensors);
    char path[128];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *out = fopen(path, "wb");
    assert_non_null(out);
    assert_int_equal(fwrite(header, 1, size, out), size);
    assert_int_equal(fwrite(data, 1, data_size, out), data_size);
    assert_int_equal(fclose(out), 0);
    free(data);
    return (long)(size + data_size);
}

static void copy_file(const char *from, const char *dir, const char *name)
{
    FILE *in = fopen(from, "rb");
    assert_non_null(in);
    char path[128], buffer[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *out = fopen(path, "wb");
    assert_non_null(out);
    size_t n;
    while ((n = fread(buffer, 1, sizeof buffer, in)) > 0)
        assert_int_equal(fwrite(buffer, 1, n, out), n);
    fclose(in);
    assert_int_equal(fclose(out), 0);
}

/* Two sentence pairs, tokenized by the published tokenizer.json and padded to the
 * longer, through the encoder loaded from the published layout; and the file cut short
 * where a partial download would leave it. */
static void minilm_checkpoint_matches_transformers(void **state)
{
    (void)state;
    char dir[] = "/tmp/flare_published_XXXXXX";
    assert_non_null(mkdtemp(dir));
    copy_file(MINILM "/config.json", dir, "config.json");
    long file_size = write_checkpoint(dir);
    fl_module *m = NULL;
    hf_bert_config c;
    assert_int_equal(hf_load_bert(dir, &m, &c), FL_OK);
    assert_int_equal(c.vocab, 30522);
    assert_int_equal(c.layers, 6);
    assert_int_equal(c.heads, 12);
    assert_int_equal(c.hidden, 384);
    assert_int_equal(c.intermediate, 1536);
    assert_true(c.layer_norm_eps == 1e-12);

    fl_tensor *ids = fixture("published.bin", "ids"), *types = fixture("published.bin", "types");
    fl_tensor *mask = fixture("published.bin", "mask");
    const char *pairs[2][2] = {{"A man is eating food.", "Someone eats."},
                               {"The new movie is awesome, isn't it?", "It was the worst film I've seen"}};
    fl_tokenizer *tok = NULL;
    assert_int_equal(fl_tokenizer_load(MINILM "/tokenizer.json", &tok), FL_OK);
    /* The library's padded batch, row by row: Flare's ids and types, then zeros. */
    int64_t width = fl_dim(ids, 1), padded_ids[2 * 64], padded_types[2 * 64];
    assert_true(width <= 64);
    assert_int_equal(fl_to_host(ids, padded_ids, sizeof(int64_t) * 2 * (size_t)width), FL_OK);
    assert_int_equal(fl_to_host(types, padded_types, sizeof(int64_t) * 2 * (size_t)width), FL_OK);
    for (int p = 0; p < 2; p++) {
        int64_t *got = NULL, *got_types = NULL;
        size_t n = 0;
        assert_int_equal(fl_tokenizer_encode_special(tok, pairs[p][0], strlen(pairs[p][0]), pairs[p][1],
                                                     strlen(pairs[p][1]), &got, &got_types, &n),
                         FL_OK);
        assert_true(n <= (size_t)width);
        assert_memory_equal(got, padded_ids + p * width, n * sizeof(int64_t));
        assert_memory_equal(got_types, padded_types + p * width, n * sizeof(int64_t));
        for (int64_t i = (int64_t)n; i < width; i++)
            assert_int_equal(padded_ids[p * width + i], 0);
        free(got);
        free(got_types);
    }
    fl_tokenizer_free(tok);

    fl_variable *hidden = hf_bert_forward(m, ids, types, mask);
    assert_non_null(hidden);
    assert_close(fl_v_value(hidden), fixture("published.bin", "hidden"), 1e-4, 1e-4);
    assert_close(hf_bert_mean_pool(fl_v_value(hidden), mask), fixture("published.bin", "pooled"), 1e-4, 1e-4);
    fl_module_release(m);

    char path[128];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    const long cut = 851968; /* where the GitHub copy of the file ends */
    assert_true(file_size > cut);
    assert_int_equal(truncate(path, cut), 0);
    m = NULL;
    assert_fails_status(hf_load_bert(dir, &m, NULL), FL_ERR_VALUE, "the file is truncated");
    assert_null(m);
    unlink(path);
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    rmdir(dir);
    assert_no_error();
}

/* The published checkpoint's directory, from FLARE_PUBLISHED_WEIGHTS; skips the test
 * where it is not set. */
static const char *published_weights(void)
{
    const char *dir = getenv("FLARE_PUBLISHED_WEIGHTS");
    if (!dir || !*dir) {
        print_message("FLARE_PUBLISHED_WEIGHTS is not set: `make test` sets it after "
                      "tests/fixtures/fetch_published.py\n");
        skip();
    }
    return dir;
}

/* The published weights, on the sentence pairs of the test above. */
static void minilm_published_weights_match_transformers(void **state)
{
    (void)state;
    fl_module *m = NULL;
    hf_bert_config c;
    assert_int_equal(hf_load_bert(published_weights(), &m, &c), FL_OK);
    assert_int_equal(c.hidden, 384);
    fl_tensor *mask = fixture("published.bin", "mask");
    fl_variable *hidden =
        hf_bert_forward(m, fixture("published.bin", "ids"), fixture("published.bin", "types"), mask);
    assert_non_null(hidden);
    assert_close(fl_v_value(hidden), fixture("published.bin", "weights_hidden"), 1e-4, 1e-4);
    assert_close(hf_bert_mean_pool(fl_v_value(hidden), mask), fixture("published.bin", "weights_pooled"), 1e-4,
                 1e-4);
    fl_module_release(m);
    assert_no_error();
}

/* sentence-transformers' semantic search example, from text: each query's nearest
 * corpus sentence by the cosine of the mean-pooled embeddings, as the library's
 * documentation shows it (0.7035, 0.6433 and 0.8253 for the three below). */
#define CORPUS 9
#define QUERIES 3
static void minilm_published_weights_find_the_nearest_sentences(void **state)
{
    (void)state;
    const char *texts[CORPUS + QUERIES] = {
        "A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby.",
        "A man is riding a horse.", "A woman is playing violin.", "Two men pushed carts through the woods.",
        "A man is riding a white horse on an enclosed ground.", "A monkey is playing drums.",
        "A cheetah is running behind its prey.",
        /* the queries */
        "A man is eating pasta.", "Someone in a gorilla costume is playing a set of drums.",
        "A cheetah chases prey on across a field."};
    const int nearest[QUERIES] = {0, 7, 8};
    enum { N = CORPUS + QUERIES, WIDTH = 32 };
    fl_tokenizer *tok = NULL;
    assert_int_equal(fl_tokenizer_load(MINILM "/tokenizer.json", &tok), FL_OK);
    /* The batch padded on the right to its longest row, as the library pads it. */
    int64_t ids[N * WIDTH] = {0}, mask[N * WIDTH] = {0}, width = 0;
    for (int i = 0; i < N; i++) {
        int64_t *got = NULL, *types = NULL;
        size_t n = 0;
        assert_int_equal(fl_tokenizer_encode_special(tok, texts[i], strlen(texts[i]), NULL, 0, &got, &types, &n),
                         FL_OK);
        assert_true(n <= WIDTH);
        for (size_t k = 0; k < n; k++) {
            ids[i * WIDTH + (int64_t)k] = got[k];
            mask[i * WIDTH + (int64_t)k] = 1;
        }
        width = (int64_t)n > width ? (int64_t)n : width;
        free(got);
        free(types);
    }
    fl_tokenizer_free(tok);
    int64_t packed_ids[N * WIDTH], packed_mask[N * WIDTH];
    for (int i = 0; i < N; i++)
        for (int64_t k = 0; k < width; k++) {
            packed_ids[i * width + k] = ids[i * WIDTH + k];
            packed_mask[i * width + k] = mask[i * WIDTH + k];
        }
    fl_tensor *id_tensor = fl_from_data(packed_ids, FL_I64, FL_SHAPE(N, width));
    fl_tensor *mask_tensor = fl_from_data(packed_mask, FL_I64, FL_SHAPE(N, width));
    assert_close(id_tensor, fixture("published.bin", "search_ids"), 0, 0);
    assert_close(mask_tensor, fixture("published.bin", "search_mask"), 0, 0);

    fl_module *m = NULL;
    assert_int_equal(hf_load_bert(published_weights(), &m, NULL), FL_OK);
    fl_variable *hidden = hf_bert_forward(m, id_tensor, fl_zeros_like(id_tensor), mask_tensor);
    assert_non_null(hidden);
    fl_tensor *pooled = hf_bert_mean_pool(fl_v_value(hidden), mask_tensor);
    assert_close(pooled, fixture("published.bin", "search_pooled"), 1e-4, 1e-4);

    static float embedding[N][384];
    assert_int_equal(fl_to_host(pooled, embedding, sizeof embedding), FL_OK);
    double norm[N], scores[QUERIES * CORPUS];
    for (int i = 0; i < N; i++) {
        norm[i] = 0;
        for (int k = 0; k < 384; k++)
            norm[i] += (double)embedding[i][k] * embedding[i][k];
        norm[i] = sqrt(norm[i]);
    }
    for (int q = 0; q < QUERIES; q++) {
        int best = 0;
        for (int s = 0; s < CORPUS; s++) {
            double dot = 0;
            for (int k = 0; k < 384; k++)
                dot += (double)embedding[CORPUS + q][k] * embedding[s][k];
            scores[q * CORPUS + s] = dot / (norm[CORPUS + q] * norm[s]);
            best = scores[q * CORPUS + s] > scores[q * CORPUS + best] ? s : best;
        }
        assert_int_equal(best, nearest[q]);
    }
    assert_close(fl_from_data(scores, FL_F64, FL_SHAPE(QUERIES, CORPUS)), fixture("published.bin", "search_scores"),
                 1e-4, 1e-4);
    fl_module_release(m);
    assert_no_error();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        scoped_test(gpt2_tokenizer_gives_the_library_ids),
        scoped_test(minilm_tokenizer_gives_the_library_ids),
        scoped_test(phi3_tokenizer_gives_the_library_ids),
        scoped_test(minilm_checkpoint_matches_transformers),
        scoped_test(minilm_published_weights_match_transformers),
        scoped_test(minilm_published_weights_find_the_nearest_sentences),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
