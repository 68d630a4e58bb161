/* Speech data: token sets, lexicons, manifests written here (with WAVs written by
 * fl_audio_write_wav) and read back, bad lines, length-bucketed batches padded for the
 * CTC loss, and augmentation: masks within their bounds, noise at its SNR, speed
 * perturbation, and the same batches whatever the number of prefetch workers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flare/autograd.h"
#include "flare/data.h"
#include "flare/extension.h"
#include "flare/nn.h"
#include "flare/speech.h"
#include "support.h"

static char tmp_dir[] = "/tmp/flare_speech_data_XXXXXX";

static const char *tmp_file(const char *name)
{
    static char path[8][512];
    static int next;
    char *p = path[next++ % 8];
    snprintf(p, sizeof path[0], "%s/%s", tmp_dir, name);
    return p;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    fclose(f);
}

/* The corpus's token set (apps/asr/corpus.py): "|", ', a to z. */
static fl_token_set *letters(void)
{
    const char *tokens[28] = {"|", "'"};
    static char alphabet[26][2];
    for (int i = 0; i < 26; i++) {
        alphabet[i][0] = (char)('a' + i);
        tokens[2 + i] = alphabet[i];
    }
    fl_token_set *ts = fl_token_set_new(tokens, 28, NULL);
    assert_non_null(ts);
    return ts;
}

static int64_t letter(char c) { return c == '|' ? 0 : c == '\'' ? 1 : 2 + (c - 'a'); }

static void assert_ids(const int64_t *ids, int64_t count, const char *spelled)
{
    assert_int_equal(count, (int64_t)strlen(spelled));
    for (int64_t i = 0; i < count; i++)
        assert_int_equal(ids[i], letter(spelled[i]));
}

static void tokens_round_trip(void **state)
{
    fl_token_set *ts = letters();
    assert_int_equal(fl_token_set_size(ts), 28);
    assert_int_equal(fl_token_set_boundary(ts), 0);
    assert_int_equal(fl_token_set_id(ts, "z"), 27);
    assert_int_equal(fl_token_set_id(ts, "zz"), -1);
    assert_string_equal(fl_token_set_token(ts, 1), "'");

    int64_t *ids, count;
    assert_int_equal(fl_token_set_encode(ts, "hello world", false, &ids, &count), FL_OK);
    assert_ids(ids, count, "hello|world");
    char *text = fl_token_set_decode(ts, ids, count);
    assert_string_equal(text, "hello world");
    free(text), free(ids);

    /* boundaries at the ends; runs of whitespace are one word break */
    assert_int_equal(fl_token_set_encode(ts, "  it's\t two \r\n", true, &ids, &count), FL_OK);
    assert_ids(ids, count, "|it's|two|");
    text = fl_token_set_decode(ts, ids, count);
    assert_string_equal(text, "it's two");
    free(text), free(ids);

    /* nothing to encode; decoding collapses boundary runs */
    assert_int_equal(fl_token_set_encode(ts, " ", true, &ids, &count), FL_OK);
    assert_int_equal(count, 0);
    free(ids);
    text = fl_token_set_decode(ts, (const int64_t[]){0, 0, 9, 0, 0, 2, 0}, 7);
    assert_string_equal(text, "h a");
    free(text);
    fl_token_set_free(ts);

    /* multi-character and multi-byte tokens: longest match first */
    ts = fl_token_set_new((const char *[]){"_", "t", "h", "th", "e", "\xc3\xa9"}, 6, "_");
    assert_non_null(ts);
    assert_int_equal(fl_token_set_encode(ts, "the th\xc3\xa9", false, &ids, &count), FL_OK);
    int64_t expected[] = {3, 4, 0, 3, 5};
    assert_int_equal(count, 5);
    assert_memory_equal(ids, expected, sizeof expected);
    text = fl_token_set_decode(ts, ids, count);
    assert_string_equal(text, "the th\xc3\xa9");
    free(text), free(ids);
    fl_token_set_free(ts);
}

static void tokens_errors(void **state)
{
    fl_token_set *ts = letters();
    int64_t *ids, count;
    assert_fails_status(fl_token_set_encode(ts, "hello World", false, &ids, &count), FL_ERR_VALUE,
                        "'W' (U+0057) at byte offset 6");
    assert_null(ids);
    assert_fails_status(fl_token_set_encode(ts, "caf\xc3\xa9", false, &ids, &count), FL_ERR_VALUE,
                        "(U+00E9) at byte offset 3");
    assert_fails_status(fl_token_set_encode(ts, "ab\xff", false, &ids, &count), FL_ERR_VALUE,
                        "invalid UTF-8 (byte 0xff) at byte offset 2");
    assert_fails(fl_token_set_decode(ts, (const int64_t[]){2, 28}, 2), FL_ERR_INDEX, "the CTC blank");
    assert_fails(fl_token_set_decode(ts, (const int64_t[]){-1}, 1), FL_ERR_INDEX, "ids[0] = -1");
    fl_token_set_free(ts);

    /* a set without a boundary encodes single words only */
    ts = fl_token_set_new((const char *[]){"a", "b"}, 2, "");
    assert_non_null(ts);
    assert_int_equal(fl_token_set_boundary(ts), -1);
    assert_int_equal(fl_token_set_encode(ts, "ab", false, &ids, &count), FL_OK);
    free(ids);
    assert_fails_status(fl_token_set_encode(ts, "ab ba", false, &ids, &count), FL_ERR_VALUE, "needs a boundary token, and the token set has none");
    fl_token_set_free(ts);

    /* files: the corpus's, then broken ones named by line */
    const char *path = tmp_file("tokens.txt");
    write_text(path, "|\n'\na\nb\r\nc\n");
    ts = fl_token_set_load(path, NULL);
    assert_non_null(ts);
    assert_int_equal(fl_token_set_size(ts), 5);
    assert_int_equal(fl_token_set_id(ts, "b"), 3);
    fl_token_set_free(ts);
    write_text(path, "|\na\n\nb\n");
    assert_fails(fl_token_set_load(path, NULL), FL_ERR_IO, "tokens.txt:3: an empty token");
    write_text(path, "|\na\nb\na\n");
    assert_fails(fl_token_set_load(path, NULL), FL_ERR_IO, "tokens.txt:4: the token \"a\" repeats line 2");
    write_text(path, "a\nb\n");
    assert_fails(fl_token_set_load(path, NULL), FL_ERR_IO, "no word boundary token \"|\"");
    write_text(path, "|\na b\n");
    assert_fails(fl_token_set_load(path, NULL), FL_ERR_IO, "tokens.txt:2");
    write_text(path, "|\n\xc3\n");
    assert_fails(fl_token_set_load(path, NULL), FL_ERR_IO, "tokens.txt:2: invalid UTF-8");
    assert_fails(fl_token_set_load(tmp_file("none.txt"), NULL), FL_ERR_IO, "none.txt");
}

/* ---- manifests -------------------------------------------------------------------- */

enum { RATE = 16000, UTTERANCES = 10 };

/* Utterance i: i-dependent lengths, so that bucketing has something to sort. */
static int64_t utterance_samples(int i) { return 800 + (int64_t)((i * 7) % UTTERANCES) * 400; }

static const char *const TRANSCRIPTS[UTTERANCES] = {
    "turn on the lights", "call mom", "it's seven o'clock", "play jazz", "what time is it",
    "set a timer for ten minutes", "dial one two three", "stop", "navigate to the park", "read me the news"};

static void utterance(int i, float *x)
{
    for (int64_t t = 0; t < utterance_samples(i); t++)
        x[t] = (float)(0.5 * sin(2 * M_PI * (200.0 + 50 * i) * (double)t / RATE));
}

/* Writes the WAVs under audio/ and a manifest of them, with extra lines appended. */
static const char *write_corpus(const char *manifest, const char *extra)
{
    char dir[600];
    snprintf(dir, sizeof dir, "%s/audio", tmp_dir);
    mkdir(dir, 0755);
    static char text[8192];
    size_t at = 0;
    float x[800 + UTTERANCES * 400];
    for (int i = 0; i < UTTERANCES; i++) {
        char name[64];
        snprintf(name, sizeof name, "audio/%06d.wav", i);
        utterance(i, x);
        assert_int_equal(fl_audio_write_wav(tmp_file(name), x, utterance_samples(i), 1, RATE, FL_WAV_FLOAT), FL_OK);
        at += (size_t)snprintf(text + at, sizeof text - at, "%s\t%.4f\t%s\n", name,
                               (double)utterance_samples(i) / RATE, TRANSCRIPTS[i]);
    }
    snprintf(text + at, sizeof text - at, "%s", extra);
    const char *path = tmp_file(manifest);
    write_text(path, text);
    return path;
}

static void manifest_reads_back(void **state)
{
    fl_token_set *ts = letters();
    const char *path = write_corpus("train.tsv", "");
    fl_dataset *ds = fl_manifest_dataset(path, ts, NULL);
    fl_token_set_free(ts); /* the dataset has its own copy */
    ts = letters();
    assert_non_null(ds);
    assert_int_equal(fl_dataset_size(ds), UTTERANCES);
    const char *reason;
    assert_int_equal(fl_manifest_skipped(ds, &reason), 0);
    assert_string_equal(reason, "");
    const double *durations = fl_manifest_durations(ds);
    float x[800 + UTTERANCES * 400];
    for (int i = 0; i < UTTERANCES; i++) {
        assert_true(fabs(durations[i] - (double)utterance_samples(i) / RATE) < 1e-4);
        assert_string_equal(fl_manifest_transcript(ds, i), TRANSCRIPTS[i]);
        assert_non_null(strstr(fl_manifest_audio_path(ds, i), tmp_dir));
        fl_sample s;
        assert_int_equal(fl_dataset_get(ds, i, &s), FL_OK);
        assert_int_equal(s.count, 3);
        assert_shape(s.fields[0], utterance_samples(i));
        assert_dtype(s.fields[0], FL_F32);
        utterance(i, x);
        assert_close(s.fields[0], fl_from_data(x, FL_F32, 1, (int64_t[]){utterance_samples(i)}), 0, 0);
        int64_t *ids, count;
        assert_int_equal(fl_token_set_encode(ts, TRANSCRIPTS[i], false, &ids, &count), FL_OK);
        assert_shape(s.fields[1], count);
        assert_dtype(s.fields[1], FL_I64);
        assert_close(s.fields[1], fl_from_data(ids, FL_I64, 1, &count), 0, 0);
        free(ids);
        assert_int_equal(fl_ndim(s.fields[2]), 0);
        assert_int_equal((int64_t)fl_item(s.fields[2]), i);
    }
    assert_fails(fl_manifest_transcript(ds, UTTERANCES), FL_ERR_INDEX, "out of range");
    fl_dataset_release(ds);

    /* resampled on reading; boundaries at the ends */
    fl_manifest_options o = fl_manifest_options_default();
    o.sample_rate = 8000;
    o.boundary_at_ends = true;
    ds = fl_manifest_dataset(path, ts, &o);
    fl_sample s;
    assert_int_equal(fl_dataset_get(ds, 1, &s), FL_OK);
    assert_shape(s.fields[0], utterance_samples(1) / 2);
    assert_shape(s.fields[1], 10); /* |call|mom| */
    fl_dataset_release(ds);

    /* not a manifest */
    fl_dataset *other = fl_tensor_dataset((fl_tensor *[]){fl_zeros(FL_F32, FL_SHAPE(3))}, 1);
    assert_int_equal(fl_manifest_skipped(other, NULL), -1);
    assert_fails(NULL, FL_ERR_VALUE, "needs a manifest dataset, got a tensor dataset");
    fl_dataset_release(other);
    fl_token_set_free(ts);
}

static void manifest_bad_lines(void **state)
{
    fl_token_set *ts = letters();
    static const struct {
        const char *line, *message;
    } cases[] = {
        {"audio/000001.wav\t0.1\n", "bad.tsv:11: 2 tab-separated fields, expected 3"},
        {"audio/000001.wav\tlong\thello\n", "bad.tsv:11: the duration \"long\" is not a positive number"},
        {"audio/000001.wav\t-1\thello\n", "bad.tsv:11: the duration \"-1\""},
        {"audio/000001.wav\t0.1\t \n", "bad.tsv:11: the transcript is empty"},
        {"audio/000001.wav\t0.1\tHello\n", "bad.tsv:11: character 'H' (U+0048) at byte offset 0"},
        {"audio/missing.wav\t0.1\thello\n", "bad.tsv:11: audio file"},
        {"audio\t0.1\thello\n", "not a regular file"},
        {"\n", "bad.tsv:11: 1 tab-separated field,"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *path = write_corpus("bad.tsv", cases[i].line);
        assert_fails(fl_manifest_dataset(path, ts, NULL), FL_ERR_IO, cases[i].message);
    }
    assert_fails(fl_manifest_dataset(tmp_file("absent.tsv"), ts, NULL), FL_ERR_IO, "absent.tsv: cannot open");

    /* skipped and counted, the first reason kept */
    char extra[512];
    snprintf(extra, sizeof extra, "%s%s%s", cases[1].line, cases[5].line, cases[0].line);
    const char *path = write_corpus("bad.tsv", extra);
    fl_manifest_options o = fl_manifest_options_default();
    o.skip_bad = true;
    fl_dataset *ds = fl_manifest_dataset(path, ts, &o);
    assert_non_null(ds);
    assert_int_equal(fl_dataset_size(ds), UTTERANCES);
    const char *reason;
    assert_int_equal(fl_manifest_skipped(ds, &reason), 3);
    assert_non_null(strstr(reason, "bad.tsv:11: the duration \"long\""));
    fl_dataset_release(ds);

    /* nothing good */
    path = tmp_file("worse.tsv");
    write_text(path, cases[0].line);
    assert_fails(fl_manifest_dataset(path, ts, &o), FL_ERR_IO, "every line (1) is bad; the first: ");

    /* audio that disappears after the manifest was read: the get names the line */
    path = write_corpus("train.tsv", "");
    ds = fl_manifest_dataset(path, ts, NULL);
    assert_int_equal(unlink(tmp_file("audio/000004.wav")), 0);
    fl_sample s;
    assert_fails_status(fl_dataset_get(ds, 4, &s), FL_ERR_IO, "train.tsv:5: sample 4: fl_audio_read: ");
    fl_dataset_release(ds);
    fl_token_set_free(ts);
}

/* A lexicon of decoder.h, read with the token set's tokens as its names. */
static fl_lexicon *load_lexicon(const char *path, const fl_token_set *ts)
{
    const char *names[64];
    int64_t n = fl_token_set_size(ts);
    assert_true(n <= 64);
    for (int64_t i = 0; i < n; i++)
        names[i] = fl_token_set_token(ts, i);
    fl_lexicon *lex = NULL;
    assert_int_equal(fl_lexicon_load(path, names, n, &lex), FL_OK);
    return lex;
}

static void lexicon_spellings(void **state)
{
    const char *pieces[] = {"|", "he", "llo", "wor", "ld", "h", "e", "l", "o", "w", "r", "d"};
    fl_token_set *ts = fl_token_set_new(pieces, 12, NULL);
    const char *path = tmp_file("lexicon.txt");
    write_text(path, "world\twor ld |\nhello\the llo |\n\nhello\th e l l o |\nwho  w h o |\r\n");
    fl_lexicon *lex = load_lexicon(path, ts);
    assert_int_equal(fl_lexicon_size(lex), 3);
    const int64_t *first;
    size_t first_length;
    assert_int_equal(fl_lexicon_spelling(lex, fl_lexicon_word_id(lex, "hello"), &first, &first_length), FL_OK);
    assert_int_equal(first_length, 3); /* he llo |, not the later h e l l o | */
    assert_fails_status(fl_lexicon_spelling(lex, 3, &first, &first_length), FL_ERR_INDEX, "word id 3 is outside [0, 3)");
    int64_t *ids, count;
    assert_int_equal(fl_token_set_encode_words(ts, lex, " hello  world who", false, &ids, &count), FL_OK);
    int64_t expected[] = {1, 2, 0, 3, 4, 0, 9, 5, 8, 0};
    assert_int_equal(count, 10);
    assert_memory_equal(ids, expected, sizeof expected);
    char *text = fl_token_set_decode(ts, ids, count);
    assert_string_equal(text, "hello world who");
    free(text), free(ids);
    /* words it lacks: an error, or spelled by longest match with a boundary after */
    assert_fails_status(fl_token_set_encode_words(ts, lex, "hello held", false, &ids, &count), FL_ERR_VALUE,
                        "the word \"held\" at byte offset 6 is not in the lexicon");
    assert_int_equal(fl_token_set_encode_words(ts, lex, "hello held", true, &ids, &count), FL_OK);
    int64_t spelled[] = {1, 2, 0, 1, 4, 0}; /* he ld: "ld" is longer than "l" */
    assert_int_equal(count, 6);
    assert_memory_equal(ids, spelled, sizeof spelled);
    free(ids);
    assert_fails_status(fl_token_set_encode_words(ts, lex, "hello hex", true, &ids, &count), FL_ERR_VALUE,
                        "in the word \"hex\" at byte offset 6: character 'x' (U+0078) at byte offset 2");
    fl_lexicon_free(lex);
    fl_token_set_free(ts);

    /* a manifest's targets through the corpus's lexicon (letters, "|" after each word) */
    ts = letters();
    char lexicon[4096] = "";
    for (int i = 0; i < UTTERANCES; i++) {
        char copy[128];
        snprintf(copy, sizeof copy, "%s", TRANSCRIPTS[i]);
        for (char *w = strtok(copy, " "); w; w = strtok(NULL, " ")) {
            size_t at = strlen(lexicon);
            at += (size_t)snprintf(lexicon + at, sizeof lexicon - at, "%s\t", w);
            for (const char *c = w; *c; c++)
                at += (size_t)snprintf(lexicon + at, sizeof lexicon - at, "%c ", *c);
            snprintf(lexicon + at, sizeof lexicon - at, "|\n");
        }
    }
    write_text(path, lexicon);
    lex = load_lexicon(path, ts);
    fl_manifest_options o = fl_manifest_options_default();
    o.lexicon = lex;
    fl_dataset *ds = fl_manifest_dataset(write_corpus("train.tsv", ""), ts, &o);
    fl_lexicon_free(lex);
    assert_non_null(ds);
    fl_sample s;
    assert_int_equal(fl_dataset_get(ds, 1, &s), FL_OK);
    int64_t call_mom[] = {letter('c'), letter('a'), letter('l'), letter('l'), 0, letter('m'), letter('o'),
                          letter('m'), 0};
    int64_t n = 9;
    assert_close(s.fields[1], fl_from_data(call_mom, FL_I64, 1, &n), 0, 0);
    fl_dataset_release(ds);
    /* a lexicon whose spellings use ids the token set lacks */
    write_text(path, "turn\tzz\n");
    fl_lexicon *other = NULL;
    assert_int_equal(fl_lexicon_load(path, (const char *const[]){"|", "zz"}, 2, &other), FL_OK);
    fl_token_set *two = fl_token_set_new((const char *[]){"|"}, 1, NULL);
    assert_fails_status(fl_token_set_encode_words(two, other, "turn", false, &ids, &count), FL_ERR_VALUE,
                        "spells \"turn\" with token id 1, outside the token set's 1");
    fl_token_set_free(two);
    fl_lexicon_free(other);
    /* a transcript word it lacks, named by line */
    write_text(path, "a\ta |\n");
    o.lexicon = lex = load_lexicon(path, ts);
    assert_fails(fl_manifest_dataset(tmp_file("train.tsv"), ts, &o), FL_ERR_IO,
                 "train.tsv:1: the word \"turn\" at byte offset 0 is not in the lexicon");
    fl_lexicon_free(lex);
    fl_token_set_free(ts);
}

/* ---- bucketing and padding ---------------------------------------------------------- */

static void bucketing_covers_every_sample_once(void **state)
{
    enum { N = 103 };
    double lengths[N];
    for (int i = 0; i < N; i++)
        lengths[i] = (double)((i * 37) % 101) + 1;
    fl_dataset *source = fl_tensor_dataset((fl_tensor *[]){fl_arange(0, N, 1, FL_I64)}, 1);
    fl_bucket_options o = fl_bucket_options_default();
    o.batch_size = 8;
    o.max_total = 400;
    o.seed = 3;
    fl_dataset *ds = fl_bucket_batch_dataset(source, lengths, N, &o, NULL, NULL);
    assert_non_null(ds);
    int64_t batches = fl_dataset_size(ds);
    int64_t first_order[N], indices[N];
    bool order_changed = false;
    for (int epoch = 0; epoch < 3; epoch++) {
        fl_dataset_set_epoch(ds, epoch);
        int seen[N] = {0};
        double lows[N], highs[N];
        for (int64_t b = 0; b < batches; b++) {
            int64_t count = fl_bucket_batch_indices(ds, b, indices);
            assert_true(count >= 1 && count <= 8);
            double low = INFINITY, high = 0;
            for (int64_t k = 0; k < count; k++) {
                seen[indices[k]]++;
                low = fmin(low, lengths[indices[k]]);
                high = fmax(high, lengths[indices[k]]);
            }
            assert_true(count == 1 || count * high <= 400);
            lows[b] = low, highs[b] = high;
            if (epoch == 0)
                first_order[b] = indices[0];
            else if (first_order[b] != indices[0])
                order_changed = true;
            /* the batch itself: the samples it says, padded (here 0-d: stacked) */
            fl_sample s;
            assert_int_equal(fl_dataset_get(ds, b, &s), FL_OK);
            assert_int_equal(s.count, 1);
            assert_close(s.fields[0], fl_from_data(indices, FL_I64, 1, &count), 0, 0);
        }
        for (int i = 0; i < N; i++)
            assert_int_equal(seen[i], 1);
        /* similar lengths together: the batches' ranges do not interleave */
        for (int64_t a = 0; a < batches; a++)
            for (int64_t b = 0; b < batches; b++)
                if (a != b)
                    assert_true(highs[a] <= lows[b] || highs[b] <= lows[a]);
    }
    assert_true(order_changed);
    fl_dataset_release(ds);

    /* bad options */
    source = fl_tensor_dataset((fl_tensor *[]){fl_arange(0, N, 1, FL_I64)}, 1);
    assert_fails(fl_bucket_batch_dataset(source, lengths, N - 1, NULL, NULL, NULL), FL_ERR_VALUE, "do not match");
    lengths[5] = NAN;
    source = fl_tensor_dataset((fl_tensor *[]){fl_arange(0, N, 1, FL_I64)}, 1);
    assert_fails(fl_bucket_batch_dataset(source, lengths, N, NULL, NULL, NULL), FL_ERR_VALUE, "lengths[5]");
}

/* A collated manifest batch has the CTC loss's shapes: each sample's loss from the
 * padded batch equals its loss alone. */
static void padded_batches_fit_the_ctc_loss(void **state)
{
    fl_token_set *ts = letters();
    fl_dataset *manifest = fl_manifest_dataset(write_corpus("train.tsv", ""), ts, NULL);
    const double *durations = fl_manifest_durations(manifest);
    fl_bucket_options o = fl_bucket_options_default();
    o.batch_size = 4;
    fl_dataset *ds = fl_bucket_batch_dataset(fl_dataset_retain(manifest), durations, UTTERANCES, &o, NULL, NULL);
    assert_int_equal(fl_dataset_size(ds), 3);
    int64_t classes = fl_token_set_size(ts) + 1, blank = fl_token_set_size(ts);
    fl_manual_seed(5);
    for (int64_t b = 0; b < fl_dataset_size(ds); b++) {
        fl_sample s;
        assert_int_equal(fl_dataset_get(ds, b, &s), FL_OK);
        assert_int_equal(s.count, 5);
        int64_t n = fl_dim(s.fields[0], 0), longest = 0, widest = 0;
        int64_t indices[4], audio_len[4], target_len[4];
        assert_int_equal(fl_bucket_batch_indices(ds, b, indices), n);
        assert_int_equal(fl_to_host(s.fields[1], audio_len, (size_t)n * 8), FL_OK);
        assert_int_equal(fl_to_host(s.fields[3], target_len, (size_t)n * 8), FL_OK);
        assert_close(s.fields[4], fl_from_data(indices, FL_I64, 1, &n), 0, 0);
        for (int64_t i = 0; i < n; i++) {
            fl_sample one;
            assert_int_equal(fl_dataset_get(manifest, indices[i], &one), FL_OK);
            assert_int_equal(audio_len[i], fl_dim(one.fields[0], 0));
            assert_int_equal(target_len[i], fl_dim(one.fields[1], 0));
            longest = audio_len[i] > longest ? audio_len[i] : longest;
            widest = target_len[i] > widest ? target_len[i] : widest;
            /* the row is the sample, then padding: zeros for audio, -1 for targets */
            fl_tensor *row = fl_index(s.fields[0], FL_INDEX(FL_AT(i)));
            assert_close(fl_index(row, FL_INDEX(FL_RANGE(0, audio_len[i]))), one.fields[0], 0, 0);
            assert_true(fl_item(fl_sum(fl_abs(fl_index(row, FL_INDEX(FL_RANGE(audio_len[i], fl_dim(row, 0))))),
                                       FL_ALL_AXES, false)) == 0);
            fl_tensor *ids = fl_index(s.fields[2], FL_INDEX(FL_AT(i)));
            assert_close(fl_index(ids, FL_INDEX(FL_RANGE(0, target_len[i]))), one.fields[1], 0, 0);
            if (target_len[i] < fl_dim(ids, 0))
                assert_true(fl_item(fl_max(fl_index(ids, FL_INDEX(FL_RANGE(target_len[i], fl_dim(ids, 0)))),
                                           FL_ALL_AXES, false)) == -1);
        }
        assert_shape(s.fields[0], n, longest);
        assert_shape(s.fields[2], n, widest);

        /* a model's output: T frames for the longest, fewer for the others */
        int64_t frames = 3 * widest + 3, input_len[4];
        for (int64_t i = 0; i < n; i++)
            input_len[i] = frames - (longest - audio_len[i]) * frames / (2 * longest);
        fl_tensor *lp = fl_log_softmax(fl_randn(FL_F32, FL_SHAPE(frames, n, classes)), 2);
        fl_tensor *lengths = fl_from_data(input_len, FL_I64, 1, &n);
        fl_variable *loss = fl_nn_ctc_loss(fl_v_new(lp, false), s.fields[2], lengths, s.fields[3], blank,
                                           FL_REDUCTION_NONE, false);
        assert_non_null(loss);
        double losses[4];
        assert_int_equal(fl_to_host(fl_cast(fl_v_value(loss), FL_F64), losses, (size_t)n * 8), FL_OK);
        for (int64_t i = 0; i < n; i++) {
            fl_tensor *alone = fl_index(lp, FL_INDEX(FL_RANGE(0, input_len[i]), FL_RANGE(i, i + 1)));
            fl_tensor *targets = fl_index(s.fields[2], FL_INDEX(FL_RANGE(i, i + 1), FL_RANGE(0, target_len[i])));
            fl_variable *one = fl_nn_ctc_loss(fl_v_new(alone, false), targets, T_I64(FL_SHAPE(1), input_len[i]),
                                              T_I64(FL_SHAPE(1), target_len[i]), blank, FL_REDUCTION_SUM, false);
            assert_true(isfinite(losses[i]));
            assert_true(fabs(fl_item(fl_v_value(one)) - losses[i]) <= 1e-4 * fabs(losses[i]));
        }
    }
    fl_dataset_release(ds);
    fl_dataset_release(manifest);
    fl_token_set_free(ts);

    /* fields that differ in more than axis 0 */
    fl_sample two[2] = {{1, {fl_zeros(FL_F32, FL_SHAPE(3, 4))}}, {1, {fl_zeros(FL_F32, FL_SHAPE(5, 3))}}};
    fl_sample out = {0};
    assert_fails_status(fl_speech_pad_collate(two, 2, &out, NULL), FL_ERR_SHAPE, "only axis 0 may differ");
    /* [T, F] features pad along T, the pad value as asked */
    two[1].fields[0] = fl_ones(FL_F32, FL_SHAPE(2, 4));
    fl_pad_collate_options po = {.pad_value = -7, .pad_id = 0};
    assert_int_equal(fl_speech_pad_collate(two, 2, &out, &po), FL_OK);
    assert_int_equal(out.count, 2);
    assert_shape(out.fields[0], 2, 3, 4);
    assert_values(out.fields[1], 0, 0, 3, 2);
    assert_values(fl_index(out.fields[0], FL_INDEX(FL_AT(1), FL_AT(2), FL_AT(0))), 0, 0, -7);
}

/* ---- augmentation ----------------------------------------------------------------- */

static void spec_augment_masks_within_bounds(void **state)
{
    enum { T = 120, F = 40 };
    fl_spec_augment_options o = {.freq_masks = 2, .freq_width = 8, .time_masks = 3, .time_width = 30,
                                 .time_ratio = 0.1, .mask_mean = false};
    fl_manual_seed(11);
    fl_tensor *ones = fl_ones(FL_F32, FL_SHAPE(T, F));
    int masked_rows = 0, masked_cols = 0;
    for (int draw = 0; draw < 20; draw++) {
        float y[T * F];
        fl_tensor *out = fl_spec_augment(ones, &o);
        assert_shape(out, T, F);
        assert_int_equal(fl_to_host(out, y, sizeof y), FL_OK);
        bool row_zero[T], col_zero[F];
        int rows = 0, cols = 0;
        for (int t = 0; t < T; t++) {
            row_zero[t] = true;
            for (int c = 0; c < F; c++)
                row_zero[t] &= y[t * F + c] == 0;
            rows += row_zero[t];
        }
        for (int c = 0; c < F; c++) {
            col_zero[c] = true;
            for (int t = 0; t < T; t++)
                col_zero[c] &= y[t * F + c] == 0;
            cols += col_zero[c];
        }
        /* every value is 1, or 0 inside a masked band or span */
        for (int t = 0; t < T; t++)
            for (int c = 0; c < F; c++)
                assert_true(y[t * F + c] == 1 || (y[t * F + c] == 0 && (row_zero[t] || col_zero[c])));
        assert_true(cols <= 2 * 8);
        assert_true(rows <= 3 * 12); /* at most time_ratio * T = 12 frames each */
        masked_rows += rows, masked_cols += cols;
    }
    assert_true(masked_rows > 0 && masked_cols > 0);

    /* the mean as the mask value */
    o = (fl_spec_augment_options){.freq_masks = 1, .freq_width = F, .mask_mean = true};
    fl_tensor *x = fl_add_scalar(fl_mul_scalar(fl_rand(FL_F32, FL_SHAPE(T, F)), 2), 3);
    double mean = fl_item(fl_mean(x, FL_ALL_AXES, false));
    bool seen = false;
    for (int draw = 0; draw < 10 && !seen; draw++) {
        fl_tensor *out = fl_spec_augment(x, &o);
        fl_tensor *changed = fl_ne(out, x);
        if (fl_item(fl_sum(fl_cast(changed, FL_F32), FL_ALL_AXES, false)) > 0) {
            seen = true;
            double value = fl_item(fl_max(fl_where(changed, out, fl_full(-1e9, FL_F32, FL_SHAPE(T, F))),
                                          FL_ALL_AXES, false));
            assert_true(fabs(value - mean) < 1e-5);
        }
    }
    assert_true(seen);
    /* time warping of a ramp: piecewise linear with one knee, at most W - 1 frames from
     * its source frame, the ends kept */
    enum { W = 10 };
    o = (fl_spec_augment_options){.time_warp = W};
    fl_tensor *ramp = fl_broadcast_to(fl_reshape(fl_arange(0, T, 1, FL_F32), FL_SHAPE(T, 1)), FL_SHAPE(T, 3));
    int warped = 0;
    for (int draw = 0; draw < 10; draw++) {
        float y[T * 3];
        assert_int_equal(fl_to_host(fl_spec_augment(ramp, &o), y, sizeof y), FL_OK);
        assert_true(y[0] == 0 && fabsf(y[(T - 1) * 3] - (T - 1)) < 1e-4f);
        int knees = 0;
        for (int t = 1; t + 1 < T; t++) {
            assert_true(y[t * 3] == y[t * 3 + 2] && y[(t + 1) * 3] > y[t * 3]);
            if (fabsf(y[(t + 1) * 3] - 2 * y[t * 3] + y[(t - 1) * 3]) > 1e-4f) {
                knees++;
                assert_true(fabsf(y[t * 3] - (float)t) <= W - 1 + 1e-4f);
                assert_true(y[t * 3] >= W - 1e-4f && y[t * 3] < T - W);
            }
        }
        assert_true(knees <= 1);
        warped += knees;
    }
    assert_true(warped > 0);
    /* the most masks, and a warp */
    o = (fl_spec_augment_options){.freq_masks = 16, .freq_width = 2, .time_masks = 16, .time_width = 2,
                                  .time_ratio = 1, .time_warp = 3};
    assert_shape(fl_spec_augment(ones, &o), T, F);
    o.time_masks = 17;
    assert_fails(fl_spec_augment(ones, &o), FL_ERR_VALUE, "0 to 16 masks");
    assert_fails(fl_spec_augment(fl_zeros(FL_F32, FL_SHAPE(3)), NULL), FL_ERR_SHAPE, "[T, F]");
    o.time_ratio = 2;
    assert_fails(fl_spec_augment(ones, &o), FL_ERR_VALUE, "time_ratio");
}

static double snr_db(const fl_tensor *clean, const fl_tensor *noisy)
{
    fl_tensor *c = fl_cast(clean, FL_F64), *n = fl_sub(fl_cast(noisy, FL_F64), c);
    return 10 * log10(fl_item(fl_mean(fl_square(c), FL_ALL_AXES, false)) /
                      fl_item(fl_mean(fl_square(n), FL_ALL_AXES, false)));
}

static void noise_at_its_snr(void **state)
{
    float x[4000];
    for (int i = 0; i < 4000; i++)
        x[i] = (float)(0.3 * sin(2 * M_PI * 440.0 * i / RATE) + 0.1 * sin(2 * M_PI * 97.0 * i / RATE));
    fl_tensor *clean = fl_from_data(x, FL_F32, FL_SHAPE(4000));
    fl_manual_seed(2);
    for (int i = 0; i < 5; i++) {
        double snr = -5 + 10.0 * i;
        fl_noise_options o = {.snr_low = snr, .snr_high = snr};
        assert_true(fabs(snr_db(clean, fl_add_noise(clean, &o)) - snr) < 0.1);
        /* a given noise signal, shorter than the audio (repeated) */
        o.noise = fl_mul_scalar(fl_rand(FL_F32, FL_SHAPE(1500)), 0.01);
        fl_tensor *noisy = fl_add_noise(clean, &o);
        assert_shape(noisy, 4000);
        assert_true(fabs(snr_db(clean, noisy) - snr) < 0.1);
    }
    /* a range: inside it, and not always the same */
    fl_noise_options o = fl_noise_options_default();
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < 10; i++) {
        double snr = snr_db(clean, fl_add_noise(clean, &o));
        lo = fmin(lo, snr), hi = fmax(hi, snr);
    }
    assert_true(lo >= 10 - 0.1 && hi <= 30 + 0.1 && hi - lo > 1);
    /* silence stays silence; silent noise cannot reach an SNR */
    fl_tensor *silent = fl_zeros(FL_F32, FL_SHAPE(100));
    assert_values(fl_sum(fl_abs(fl_add_noise(silent, NULL)), FL_ALL_AXES, false), 0, 0, 0);
    o.noise = fl_zeros(FL_F32, FL_SHAPE(10));
    assert_fails(fl_add_noise(clean, &o), FL_ERR_VALUE, "silent");
    assert_fails(fl_add_noise(fl_zeros(FL_I64, FL_SHAPE(3)), NULL), FL_ERR_DTYPE, "float");
}

/* Sign changes per second: twice the frequency of a pure tone. */
static double crossings(const fl_tensor *t)
{
    int64_t n = fl_numel(t);
    float *y = malloc((size_t)n * sizeof *y);
    assert_int_equal(fl_to_host(t, y, (size_t)n * sizeof *y), FL_OK);
    int count = 0;
    for (int64_t i = 1000; i + 1 < n - 1000; i++)
        count += (y[i] < 0) != (y[i + 1] < 0);
    free(y);
    return count / ((double)(n - 2002) / RATE);
}

static void speed_perturbation(void **state)
{
    enum { N = 16000 };
    float x[N];
    for (int i = 0; i < N; i++)
        x[i] = (float)(0.5 * sin(2 * M_PI * 500.0 * i / RATE));
    fl_tensor *tone = fl_from_data(x, FL_F32, FL_SHAPE(N));
    double base = crossings(tone);
    for (int k = 0; k < 2; k++) {
        double factor = k ? 1.1 : 0.9;
        fl_speed_options o = {.count = 1, .factors = {factor}};
        fl_tensor *y = fl_speed_perturb(tone, &o);
        assert_shape(y, (int64_t)llround(N / factor));
        assert_true(fabs(crossings(y) / base - factor) < 0.01);
    }
    /* the default draws among 0.9, 1.0 and 1.1 */
    int seen[3] = {0};
    for (int i = 0; i < 30; i++) {
        int64_t n = fl_dim(fl_speed_perturb(tone, NULL), 0);
        assert_true(n == 17778 || n == N || n == 14545);
        seen[n == 17778 ? 0 : n == N ? 1 : 2]++;
    }
    assert_true(seen[0] && seen[1] && seen[2]);
    fl_speed_options bad = {.count = 1, .factors = {0}};
    assert_fails(fl_speed_perturb(tone, &bad), FL_ERR_VALUE, "factors[0] = 0");
    assert_fails(fl_speed_perturb(fl_zeros(FL_F32, FL_SHAPE(2, 3)), NULL), FL_ERR_SHAPE, "1-D");
}

static fl_tensor *augment_audio(const fl_tensor *audio, void *user)
{
    (void)user;
    fl_noise_options noise = {.snr_low = 5, .snr_high = 20};
    return fl_add_noise(fl_speed_perturb(audio, NULL), &noise);
}

/* The batches of an epoch, as one tensor per field (concatenated, flattened). */
static void epoch_batches(fl_dataset *ds, int64_t epoch, fl_tensor **flat, int fields)
{
    fl_dataset_set_epoch(ds, epoch);
    int64_t n = fl_dataset_size(ds);
    fl_tensor **parts = calloc((size_t)(n * fields), sizeof *parts);
    for (int64_t b = 0; b < n; b++) {
        fl_sample s;
        assert_int_equal(fl_dataset_get(ds, b, &s), FL_OK);
        assert_int_equal(s.count, fields);
        for (int f = 0; f < fields; f++)
            parts[f * n + b] = fl_reshape(s.fields[f], FL_SHAPE(-1));
    }
    for (int f = 0; f < fields; f++)
        flat[f] = fl_concat(parts + f * n, (int)n, 0);
    free(parts);
}

static void augmentation_same_whatever_the_workers(void **state)
{
    fl_token_set *ts = letters();
    const char *path = write_corpus("train.tsv", "");
    fl_tensor *runs[2][2][5];
    for (int workers = 0; workers < 2; workers++) {
        fl_dataset *manifest = fl_manifest_dataset(path, ts, NULL);
        const double *durations = fl_manifest_durations(manifest);
        double lengths[UTTERANCES];
        memcpy(lengths, durations, sizeof lengths);
        fl_manual_seed(42);
        fl_dataset *ds = fl_transform_dataset(manifest, (fl_transform_fn[]){augment_audio}, 1, NULL);
        fl_bucket_options o = fl_bucket_options_default();
        o.batch_size = 3;
        o.seed = 9;
        ds = fl_bucket_batch_dataset(ds, lengths, UTTERANCES, &o, NULL, NULL);
        if (workers)
            ds = fl_prefetch_dataset(ds, 2, 0);
        assert_non_null(ds);
        for (int epoch = 0; epoch < 2; epoch++)
            epoch_batches(ds, epoch, runs[workers][epoch], 5);
        fl_dataset_release(ds);
    }
    for (int epoch = 0; epoch < 2; epoch++)
        for (int f = 0; f < 5; f++)
            assert_true(support_same_bytes(runs[0][epoch][f], runs[1][epoch][f]));
    /* another epoch, other draws (and another batch order) */
    assert_false(support_same_bytes(runs[0][0][0], runs[0][1][0]));

    /* SpecAugment on features [T, F] the same way */
    fl_manual_seed(1);
    fl_tensor *features = fl_rand(FL_F32, FL_SHAPE(12, 50, 20));
    fl_spec_augment_options so = {.freq_masks = 2, .freq_width = 6, .time_masks = 2, .time_width = 10,
                                  .time_ratio = 0.5, .time_warp = 5};
    fl_tensor *spec[2][1];
    for (int workers = 0; workers < 2; workers++) {
        fl_manual_seed(8);
        fl_dataset *ds = fl_transform_dataset(fl_tensor_dataset(&features, 1),
                                              (fl_transform_fn[]){fl_spec_augment}, 1, &so);
        ds = fl_batch_dataset(ds, 5, false, NULL, NULL);
        if (workers)
            ds = fl_prefetch_dataset(ds, 2, 0);
        epoch_batches(ds, 0, spec[workers], 1);
        fl_dataset_release(ds);
    }
    assert_true(support_same_bytes(spec[0][0], spec[1][0]));
    assert_false(support_same_bytes(spec[0][0], fl_reshape(features, FL_SHAPE(-1))));
    fl_token_set_free(ts);
}

static int make_tmp(void **state) { return mkdtemp(tmp_dir) ? 0 : -1; }

static int remove_tmp(void **state)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        scoped_test(tokens_round_trip),
        scoped_test(tokens_errors),
        scoped_test(manifest_reads_back),
        scoped_test(manifest_bad_lines),
        scoped_test(lexicon_spellings),
        scoped_test(bucketing_covers_every_sample_once),
        scoped_test(padded_batches_fit_the_ctc_loss),
        scoped_test(spec_augment_masks_within_bounds),
        scoped_test(noise_at_its_snr),
        scoped_test(speed_perturbation),
        scoped_test(augmentation_same_whatever_the_workers),
    };
    return cmocka_run_group_tests_name("speech data", tests, make_tmp, remove_tmp);
}
