/*
 * Speech recognition trained with CTC on the corpus `make speech-data` synthesises
 * (apps/asr/corpus.py), tested on voices never heard in training.
 *
 *     asr [--data DIR] [--epochs N] [--stop-after N] [--batch-seconds S] [--lr LR]
 *         [--layers N] [--d-model N] [--heads N] [--ff N] [--channels N] [--dropout P]
 *         [--train-limit N] [--eval-limit N] [--workers N] [--no-augment] [--beam N]
 *         [--beam-threshold T] [--lm-weight W] [--word-score S] [--lm FILE] [--seed S]
 *         [--threads T] [--json FILE] [--save FILE] [--load FILE] [--eval-only]
 *         [--eval-split S] [--transcribe FILE] [--quiet] [--backend NAME]
 *
 * Audio (DIR's train.tsv, dev.tsv and test.tsv manifests) becomes log-mel features
 * normalized per utterance on --workers threads, SpecAugment masks them in training,
 * and utterances of similar length are batched together up to --batch-seconds of
 * padded audio. The model (models/speech_ctc.c) outputs the letters, the word boundary
 * "|" and the CTC blank; training is AdamW with a linear warm-up and a cosine decay, the
 * gradient norm clipped to 1. After every epoch the dev voices' CER and WER of greedy
 * decoding are printed; at the end the test voices are decoded three ways: greedy,
 * beam search constrained to DIR's lexicon, and the same beam search with a word
 * 3-gram language model (--lm, else DIR/lm.arpa, estimated from DIR/lm.txt with
 * modified Kneser-Ney when missing). Lines that cannot be used are counted and
 * reported, never dropped silently.
 *
 * --save writes a checkpoint after every epoch (the model's shape in its metadata);
 * --load resumes from one, training on to --epochs; --eval-only loads and evaluates
 * without training (--eval-split dev decodes the dev voices instead of the test voices
 * at the end, to choose the decoder's options on voices the test does not use);
 * --transcribe FILE prints the transcript of an audio file (any rate,
 * any channels) with the beam search and the language model.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "flare/autograd.h"
#include "flare/backend.h"
#include "flare/data.h"
#include "flare/decoder.h"
#include "flare/io.h"
#include "flare/meter.h"
#include "flare/nn.h"
#include "flare/optim.h"
#include "flare/speech.h"
#include "flare/tensor.h"
#include "flare/tensor_map.h"
#include "cli.h"
#include "input.h"
#include "models.h"
#include "output.h"

#define RATE 16000
#define MELS 80

typedef struct options {
    const char *data, *json, *save, *load, *lm, *transcribe, *eval_split;
    int epochs, stop_after, threads, workers;
    bool epochs_given, eval_only, quiet, no_augment;
    int64_t train_limit, eval_limit;
    double batch_seconds, lr;
    speech_ctc_config model;
    fl_ctc_beam_options beam;
    uint64_t seed;
} options;

static void parse_args(int argc, char **argv, options *o)
{
    *o = (options){.epochs = 30, .workers = 2, .batch_seconds = 60, .lr = 2e-3, .seed = 1,
                   .model = {.features = MELS, .channels = 192, .d_model = 192, .heads = 4, .dim_ff = 768, .layers = 6,
                             .kernel = 5, .stride = 3, .dropout = 0.1}};
    fl_ctc_beam_options_default(&o->beam);
    /* Chosen on the dev voices (README): a wider beam and a word score that offsets the
     * language model's cost of each word. */
    o->beam.beam_size = 128;
    o->beam.lm_weight = 1.0;
    o->beam.word_score = 2;
    const char *home = getenv("HOME");
    static char default_data[4096];
    snprintf(default_data, sizeof default_data, "%s/.cache/flare/speech", home ? home : ".");
    o->data = default_data;
    o->eval_split = "test";
    enum { DATA = 256, EPOCHS, STOP_AFTER, BATCH_SECONDS, LR, LAYERS, D_MODEL, HEADS, FF, CHANNELS, DROPOUT,
           TRAIN_LIMIT, EVAL_LIMIT, WORKERS, NO_AUGMENT, BEAM, BEAM_THRESHOLD, LM_WEIGHT, WORD_SCORE, LM, SEED, THREADS,
           JSON, SAVE, LOAD, EVAL_ONLY, EVAL_SPLIT, TRANSCRIBE, QUIET, BACKEND };
    static const struct option long_options[] = {
        {"data", required_argument, NULL, DATA},
        {"epochs", required_argument, NULL, EPOCHS},
        {"stop-after", required_argument, NULL, STOP_AFTER},
        {"batch-seconds", required_argument, NULL, BATCH_SECONDS},
        {"lr", required_argument, NULL, LR},
        {"layers", required_argument, NULL, LAYERS},
        {"d-model", required_argument, NULL, D_MODEL},
        {"heads", required_argument, NULL, HEADS},
        {"ff", required_argument, NULL, FF},
        {"channels", required_argument, NULL, CHANNELS},
        {"dropout", required_argument, NULL, DROPOUT},
        {"train-limit", required_argument, NULL, TRAIN_LIMIT},
        {"eval-limit", required_argument, NULL, EVAL_LIMIT},
        {"workers", required_argument, NULL, WORKERS},
        {"no-augment", no_argument, NULL, NO_AUGMENT},
        {"beam", required_argument, NULL, BEAM},
        {"beam-threshold", required_argument, NULL, BEAM_THRESHOLD},
        {"lm-weight", required_argument, NULL, LM_WEIGHT},
        {"word-score", required_argument, NULL, WORD_SCORE},
        {"lm", required_argument, NULL, LM},
        {"seed", required_argument, NULL, SEED},
        {"threads", required_argument, NULL, THREADS},
        {"json", required_argument, NULL, JSON},
        {"save", required_argument, NULL, SAVE},
        {"load", required_argument, NULL, LOAD},
        {"eval-only", no_argument, NULL, EVAL_ONLY},
        {"eval-split", required_argument, NULL, EVAL_SPLIT},
        {"transcribe", required_argument, NULL, TRANSCRIBE},
        {"quiet", no_argument, NULL, QUIET},
        {"backend", required_argument, NULL, BACKEND},
        {0},
    };
    cli c = {.program = "asr",
             .usage = "asr [--data DIR] [--epochs N] [--stop-after N] [--batch-seconds S] [--lr LR]\n"
                      "           [--layers N] [--d-model N] [--heads N] [--ff N] [--channels N] [--dropout P]\n"
                      "           [--train-limit N] [--eval-limit N] [--workers N] [--no-augment] [--beam N]\n"
                      "           [--beam-threshold T] [--lm-weight W] [--word-score S] [--lm FILE] [--seed S]\n"
                      "           [--threads T] [--json FILE] [--save FILE] [--load FILE] [--eval-only]\n"
                      "           [--eval-split S] [--transcribe FILE] [--quiet] [--backend NAME]\n"
                      "       --data DIR: the corpus of make speech-data (default ~/.cache/flare/speech)\n"
                      "       --batch-seconds S: padded seconds of audio in a batch (default 60)\n"
                      "       --train-limit N, --eval-limit N: use at most N utterances of a split\n"
                      "       --lm FILE: an ARPA language model (default DIR/lm.arpa, made from DIR/lm.txt)\n"
                      "       --load FILE: start from a checkpoint; --eval-only: evaluate it, train nothing\n"
                      "       --eval-split S: the voices decoded three ways at the end, test (default) or dev\n"
                      "       --transcribe FILE: print the transcript of an audio file\n"
                      "       " CLI_BACKEND_HELP,
             .options = long_options};
    for (int key; (key = cli_next(&c, argc, argv)) != -1;)
        switch (key) {
        case DATA: o->data = optarg; break;
        case EPOCHS: o->epochs = (int)cli_integer(&c, 0, 100000), o->epochs_given = true; break;
        case STOP_AFTER: o->stop_after = (int)cli_integer(&c, 1, 100000); break;
        case BATCH_SECONDS: o->batch_seconds = cli_number(&c, 1, 1e6); break;
        case LR: o->lr = cli_number(&c, 0, 100); break;
        case LAYERS: o->model.layers = cli_integer(&c, 1, 256); break;
        case D_MODEL: o->model.d_model = cli_integer(&c, 2, 1 << 16); break;
        case HEADS: o->model.heads = cli_integer(&c, 1, 256); break;
        case FF: o->model.dim_ff = cli_integer(&c, 1, 1 << 20); break;
        case CHANNELS: o->model.channels = cli_integer(&c, 1, 1 << 16); break;
        case DROPOUT: o->model.dropout = cli_number(&c, 0, 0.99); break;
        case TRAIN_LIMIT: o->train_limit = cli_integer(&c, 1, (long long)1e12); break;
        case EVAL_LIMIT: o->eval_limit = cli_integer(&c, 1, (long long)1e12); break;
        case WORKERS: o->workers = (int)cli_integer(&c, 0, 256); break;
        case NO_AUGMENT: o->no_augment = true; break;
        case BEAM: o->beam.beam_size = cli_integer(&c, 1, 1 << 20); break;
        case BEAM_THRESHOLD: o->beam.beam_threshold = cli_number(&c, 0, 1e6); break;
        case LM_WEIGHT: o->beam.lm_weight = cli_number(&c, 0, 100); break;
        case WORD_SCORE: o->beam.word_score = cli_number(&c, -100, 100); break;
        case LM: o->lm = optarg; break;
        case SEED: o->seed = (uint64_t)cli_integer(&c, 0, (long long)1e15); break;
        case THREADS: o->threads = (int)cli_integer(&c, 1, 1024); break;
        case JSON: o->json = optarg; break;
        case SAVE: o->save = optarg; break;
        case LOAD: o->load = optarg; break;
        case EVAL_ONLY: o->eval_only = true; break;
        case EVAL_SPLIT:
            if (strcmp(optarg, "dev") != 0 && strcmp(optarg, "test") != 0)
                cli_fail(&c, "--eval-split is dev or test, not %s", optarg);
            o->eval_split = optarg;
            break;
        case TRANSCRIBE: o->transcribe = optarg; break;
        case QUIET: o->quiet = true; break;
        case BACKEND: cli_backend(&c); break;
        }
    if (o->model.d_model % o->model.heads || o->model.d_model % 2)
        cli_fail(&c, "--d-model %" PRId64 " must be even and divisible by --heads %" PRId64, o->model.d_model,
                 o->model.heads);
    if ((o->eval_only || o->transcribe) && !o->load)
        cli_fail(&c, "--eval-only and --transcribe need a model: give --load FILE");
    if ((o->eval_only || o->transcribe) && o->epochs_given)
        cli_fail(&c, "--eval-only and --transcribe train nothing: leave out --epochs");
    if (o->eval_only || o->transcribe)
        o->epochs = 0;
}

static int fail(const char *what)
{
    fprintf(stderr, "asr: %s: %s\n", what, fl_last_error());
    return 1;
}

static void path_in(char *out, size_t size, const char *dir, const char *name)
{
    snprintf(out, size, "%s/%s", dir, name);
}

/* ---- features ---- */

static fl_speech_options feature_options(void)
{
    fl_speech_options f = fl_speech_defaults();
    f.sample_rate = RATE;
    f.n_mels = MELS;
    return f;
}

/* Audio [samples] to log-mel [frames, MELS], each channel normalized over the
 * utterance: a transform of the manifest's first field. */
static fl_tensor *log_mel(const fl_tensor *audio, void *user)
{
    (void)user;
    fl_speech_options f = feature_options();
    return fl_speech_normalize_tensor(fl_speech_features(audio, FL_SPEECH_LOG_MEL, &f));
}

/* ---- data ---- */

typedef struct split {
    const char *name;
    fl_dataset *manifest; /* a reference of our own, for the transcripts */
    fl_dataset *batches;  /* features, their lengths, targets, their lengths, indices */
    int64_t utterances;
} split;

static void split_release(split *s)
{
    fl_dataset_release(s->manifest);
    fl_dataset_release(s->batches);
    *s = (split){0};
}

/* The manifest DIR/NAME.tsv as batches of at most --batch-seconds of padded audio,
 * from --workers threads; training batches are augmented and shuffled each epoch. */
static int open_split(const options *o, const fl_token_set *tokens, const char *name, bool train, int64_t limit,
                      split *out)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.tsv", o->data, name);
    fl_manifest_options mo = fl_manifest_options_default();
    mo.sample_rate = RATE;
    mo.skip_bad = true;
    mo.boundary_at_ends = true; /* "| h e l l o | w o r l d |": every word ends as the lexicon spells it */
    *out = (split){.name = name, .manifest = fl_manifest_dataset(path, tokens, &mo)};
    if (!out->manifest)
        return fail("reading a manifest");
    const char *reason = NULL;
    int64_t skipped = fl_manifest_skipped(out->manifest, &reason);
    if (skipped > 0)
        fprintf(stderr, "asr: %s: skipped %" PRId64 " bad line%s; the first: %s\n", path, skipped,
                skipped == 1 ? "" : "s", reason);
    int64_t count = fl_dataset_size(out->manifest);
    if (limit && limit < count)
        count = limit;
    out->utterances = count;
    fl_dataset *ds = fl_span_dataset(fl_dataset_retain(out->manifest), 0, count);
    fl_transform_fn features[] = {log_mel};
    ds = fl_transform_dataset(ds, features, 1, NULL);
    static fl_spec_augment_options masks;
    if (train && !o->no_augment) {
        masks = fl_spec_augment_options_default();
        masks.freq_masks = 2, masks.freq_width = 15;
        masks.time_masks = 2, masks.time_width = 25, masks.time_ratio = 0.1;
        fl_transform_fn augment[] = {fl_spec_augment};
        ds = fl_transform_dataset(ds, augment, 1, &masks);
    }
    fl_bucket_options bo = fl_bucket_options_default();
    bo.batch_size = 0;
    bo.max_total = o->batch_seconds;
    bo.shuffle = train;
    bo.seed = o->seed;
    ds = fl_bucket_batch_dataset(ds, fl_manifest_durations(out->manifest), count, &bo, NULL, NULL);
    out->batches = o->workers > 0 && ds ? fl_prefetch_dataset(ds, o->workers, 0) : ds;
    return out->batches ? 0 : fail("setting up the data");
}

/* ---- decoding and scoring ---- */

/* Word ids for WER: every distinct word of the run gets one. */
typedef struct words {
    char **names;
    int64_t count, capacity;
} words;

static int64_t word_id(words *w, const char *word, size_t length)
{
    for (int64_t i = 0; i < w->count; i++)
        if (strlen(w->names[i]) == length && memcmp(w->names[i], word, length) == 0)
            return i;
    if (w->count == w->capacity) {
        int64_t capacity = w->capacity ? 2 * w->capacity : 1024;
        char **grown = realloc(w->names, (size_t)capacity * sizeof *grown);
        if (!grown)
            return -1;
        w->names = grown, w->capacity = capacity;
    }
    char *copy = malloc(length + 1);
    if (!copy)
        return -1;
    memcpy(copy, word, length);
    copy[length] = 0;
    w->names[w->count] = copy;
    return w->count++;
}

static void words_free(words *w)
{
    for (int64_t i = 0; i < w->count; i++)
        free(w->names[i]);
    free(w->names);
}

/* The word ids of a text (words split at spaces) into ids (at most capacity). */
static int64_t text_words(words *w, const char *text, int64_t *ids, int64_t capacity)
{
    int64_t n = 0;
    for (const char *p = text; *p && n < capacity;) {
        while (*p == ' ')
            p++;
        const char *end = p;
        while (*end && *end != ' ')
            end++;
        if (end > p)
            ids[n++] = word_id(w, p, (size_t)(end - p));
        p = end;
    }
    return n;
}

typedef enum { GREEDY, BEAM, BEAM_LM, DECODERS } decoder_kind;
static const char *const decoder_names[DECODERS] = {"greedy", "beam", "beam+LM"};

typedef struct scorer {
    fl_edit_distance_meter chars, words;
    int64_t failed; /* utterances the decoder found no transcript for */
} scorer;

/* Adds one utterance's hypothesis against its reference. */
static void score(scorer *s, words *w, const char *hypothesis, const char *reference)
{
    enum { MAX = 4096 };
    static int64_t hyp[MAX], ref[MAX];
    int64_t nh = 0, nr = 0;
    for (const char *p = hypothesis; *p && nh < MAX; p++)
        hyp[nh++] = (unsigned char)*p;
    for (const char *p = reference; *p && nr < MAX; p++)
        ref[nr++] = (unsigned char)*p;
    fl_edit_distance_meter_add(&s->chars, hyp, nh, ref, nr);
    nh = text_words(w, hypothesis, hyp, MAX);
    nr = text_words(w, reference, ref, MAX);
    fl_edit_distance_meter_add(&s->words, hyp, nh, ref, nr);
}

typedef struct decoding {
    const fl_token_set *tokens;
    const fl_lexicon *lexicon;
    const fl_ngram *lm;
    fl_ctc_beam_options beam;
    int64_t blank;
} decoding;

/* The transcript of one utterance's emissions [frames, tokens + 1] (malloc'd), or NULL
 * when the decoder finds none. */
static char *decode(const decoding *d, decoder_kind kind, const float *emissions, int64_t frames)
{
    int64_t classes = fl_token_set_size(d->tokens) + 1;
    fl_ctc_result r = {0};
    char *text = NULL;
    if (kind == GREEDY) {
        if (fl_ctc_greedy(emissions, frames, classes, d->blank, &r) == FL_OK)
            text = fl_token_set_decode(d->tokens, r.ids, r.count);
    } else {
        /* The word score balances the language model's cost of a word: without the model
         * it would only bias the count of words. */
        fl_ctc_beam_options beam = d->beam;
        if (kind == BEAM)
            beam.word_score = 0;
        if (fl_ctc_beam_search(emissions, frames, classes, d->lexicon, kind == BEAM_LM ? d->lm : NULL, &beam, &r) !=
            FL_OK)
            goto done;
        size_t size = 1;
        for (int64_t i = 0; i < r.count; i++)
            size += strlen(fl_lexicon_word(d->lexicon, r.ids[i])) + 1;
        if ((text = malloc(size))) {
            text[0] = 0;
            for (int64_t i = 0; i < r.count; i++) {
                if (i)
                    strcat(text, " ");
                strcat(text, fl_lexicon_word(d->lexicon, r.ids[i]));
            }
        }
    }
done:
    fl_ctc_result_free(&r);
    return text;
}

/* The log-probabilities [T', N, C] of a batch, and the output lengths, in the
 * innermost scope; the model in evaluation mode. */
static fl_variable *emissions_of(fl_module *model, const fl_sample *batch, fl_tensor **lengths)
{
    return speech_ctc_forward(model, fl_v_new(batch->fields[0], false), batch->fields[1], lengths);
}

typedef struct evaluation {
    scorer scores[DECODERS];
    int64_t utterances;
    double seconds;
} evaluation;

/* Decodes every utterance of a split with the decoders in [0, kinds), scoring them. */
static int evaluate(fl_module *model, split *s, const decoding *d, int kinds, words *w, evaluation *out)
{
    *out = (evaluation){0};
    fl_timer_meter timer = {0};
    fl_timer_meter_start(&timer);
    bool was_training = fl_module_is_training(model), grad = fl_set_grad_enabled(false);
    fl_module_train(model, false);
    int status = 0;
    int64_t count = fl_dataset_size(s->batches), classes = fl_token_set_size(d->tokens) + 1;
    fl_dataset_set_epoch(s->batches, 0);
    for (int64_t b = 0; b < count && status == 0; b++) {
        fl_scope scope = fl_scope_begin();
        fl_sample batch;
        fl_tensor *lengths = NULL;
        fl_variable *lp = NULL;
        if (fl_dataset_get(s->batches, b, &batch) != FL_OK || !(lp = emissions_of(model, &batch, &lengths))) {
            status = fail("evaluating");
        } else {
            /* [T', N, C] to [N, T', C] on the host. */
            const fl_tensor *v = fl_v_value(lp);
            int64_t frames = fl_dim(v, 0), n = fl_dim(v, 1);
            float *host = malloc((size_t)(n * frames * classes) * sizeof *host);
            int64_t *lens = malloc((size_t)n * sizeof *lens), *index = malloc((size_t)n * sizeof *index);
            if (!host || !lens || !index ||
                fl_to_host(fl_copy(fl_transpose(fl_cast(v, FL_F32), 0, 1)), host,
                           (size_t)(n * frames * classes) * sizeof *host) != FL_OK ||
                fl_to_host(lengths, lens, (size_t)n * sizeof *lens) != FL_OK ||
                fl_to_host(batch.fields[4], index, (size_t)n * sizeof *index) != FL_OK)
                status = fail("reading the model's outputs");
            for (int64_t i = 0; i < n && status == 0; i++) {
                const char *reference = fl_manifest_transcript(s->manifest, index[i]);
                for (int k = 0; k < kinds; k++) {
                    char *hypothesis = decode(d, (decoder_kind)k, host + i * frames * classes, lens[i]);
                    if (!hypothesis)
                        out->scores[k].failed++;
                    score(&out->scores[k], w, hypothesis ? hypothesis : "", reference);
                    free(hypothesis);
                }
                out->utterances++;
            }
            free(host), free(lens), free(index);
        }
        fl_scope_end(scope);
    }
    fl_module_train(model, was_training);
    fl_set_grad_enabled(grad);
    fl_timer_meter_stop(&timer);
    out->seconds = fl_timer_meter_value(&timer);
    return status;
}

/* ---- the language model and the lexicon ---- */

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* The ARPA model of --lm, or DIR/lm.arpa, which is estimated from DIR/lm.txt (a 3-gram
 * of modified Kneser-Ney) when it is not there yet. */
static int open_lm(const options *o, fl_ngram **lm)
{
    char path[4096];
    if (o->lm)
        snprintf(path, sizeof path, "%s", o->lm);
    else
        path_in(path, sizeof path, o->data, "lm.arpa");
    if (!o->lm && !exists(path)) {
        char text_path[4096];
        path_in(text_path, sizeof text_path, o->data, "lm.txt");
        size_t size = 0;
        char *text = input_read_all(text_path, &size);
        if (!text)
            return fprintf(stderr, "asr: cannot read %s: %s (make speech-data writes it)\n", text_path,
                           strerror(errno)),
                   1;
        fl_ngram_build_options bo;
        fl_ngram_build_options_default(&bo);
        fl_status st = fl_ngram_build_arpa(text, size, &bo, path);
        free(text);
        if (st != FL_OK)
            return fail("estimating the language model");
    }
    return fl_ngram_load_arpa(path, lm) == FL_OK ? 0 : fail("reading the language model");
}

/* ---- checkpoints ---- */

/* The model's shape and the epochs trained from a checkpoint this program saved. */
static int read_checkpoint_header(const char *path, speech_ctc_config *c, int *epoch)
{
    fl_tensor_map *map = NULL;
    if (fl_load_safetensors(path, &map) != FL_OK)
        return fail("loading the checkpoint");
    int64_t v[8];
    const char *keys[] = {"epoch", "channels", "d_model", "heads", "dim_ff", "layers", "tokens", "dropout_ppm"};
    bool ok = true;
    for (int i = 0; i < 8 && ok; i++)
        ok = cli_metadata_integer(map, keys[i], 0, 1 << 30, &v[i]);
    fl_tensor_map_free(map);
    if (!ok)
        return fprintf(stderr, "asr: %s: not a checkpoint of asr (its metadata lacks the model's shape)\n", path), 1;
    *epoch = (int)v[0];
    c->channels = v[1], c->d_model = v[2], c->heads = v[3], c->dim_ff = v[4], c->layers = v[5], c->tokens = v[6];
    c->dropout = (double)v[7] / 1e6;
    return 0;
}

static int save_checkpoint(const options *o, fl_module *model, fl_optimizer *opt, int epoch)
{
    char text[8][32];
    int64_t values[8] = {epoch, o->model.channels, o->model.d_model, o->model.heads, o->model.dim_ff, o->model.layers,
                         o->model.tokens, (int64_t)llround(o->model.dropout * 1e6)};
    for (int i = 0; i < 8; i++)
        snprintf(text[i], sizeof text[i], "%" PRId64, values[i]);
    const char *metadata[] = {"epoch", text[0], "channels", text[1], "d_model", text[2], "heads", text[3], "dim_ff",
                              text[4], "layers", text[5], "tokens", text[6], "dropout_ppm", text[7], NULL};
    return fl_checkpoint_save(o->save, model, opt, metadata) == FL_OK ? 0 : fail("saving the checkpoint");
}

/* ---- training ---- */

/* The CTC loss of one batch (mean over utterances of the loss per target token). */
static fl_variable *batch_loss(fl_module *model, const fl_sample *batch, int64_t blank)
{
    fl_tensor *lengths = NULL;
    fl_variable *lp = emissions_of(model, batch, &lengths);
    return lp ? fl_nn_ctc_loss(lp, batch->fields[2], lengths, batch->fields[3], blank, FL_REDUCTION_MEAN, true)
              : NULL;
}

typedef struct epoch_result {
    double seconds, loss, audio_per_second, dev_cer, dev_wer;
} epoch_result;

/* ---- the report ---- */

static void print_evaluation(const char *name, const evaluation *e, int kinds)
{
    printf("%s (%" PRId64 " utterances, %.1f s):", name, e->utterances, e->seconds);
    for (int k = 0; k < kinds; k++)
        printf("%s %s CER %.2f%% WER %.2f%%", k ? ";" : "", decoder_names[k],
               fl_edit_distance_meter_error_rate(&e->scores[k].chars),
               fl_edit_distance_meter_error_rate(&e->scores[k].words));
    printf("\n");
}

static int write_json(const options *o, const epoch_result *results, int first_epoch, int done, const evaluation *test,
                      int64_t parameters, const split *train, const split *dev)
{
    output_file out;
    if (!output_open(&out, "asr", o->json))
        return 1;
    FILE *f = out.f;
    fprintf(f, "{\n  \"program\": \"asr\",\n  \"backend\": \"%s\",\n  \"threads\": %d,\n",
            fl_default_backend()->name, fl_num_threads());
    fprintf(f, "  \"parameters\": %" PRId64 ",\n", parameters);
    fprintf(f,
            "  \"model\": {\"channels\": %" PRId64 ", \"d_model\": %" PRId64 ", \"heads\": %" PRId64
            ", \"dim_ff\": %" PRId64 ", \"layers\": %" PRId64 ", \"tokens\": %" PRId64 ", \"stride\": %d},\n",
            o->model.channels, o->model.d_model, o->model.heads, o->model.dim_ff, o->model.layers, o->model.tokens,
            o->model.stride);
    fprintf(f, "  \"train_utterances\": %" PRId64 ",\n  \"dev_utterances\": %" PRId64 ",\n",
            train ? train->utterances : 0, dev ? dev->utterances : 0);
    fprintf(f, "  \"epochs\": [");
    for (int i = 0; i < done; i++)
        fprintf(f,
                "%s\n    {\"epoch\": %d, \"seconds\": %.3f, \"loss\": %.6f, \"audio_seconds_per_second\": %.2f, "
                "\"dev_cer\": %.4f, \"dev_wer\": %.4f}",
                i ? "," : "", first_epoch + i + 1, results[i].seconds, results[i].loss, results[i].audio_per_second,
                results[i].dev_cer, results[i].dev_wer);
    fprintf(f, "%s],\n  \"test\": {\"utterances\": %" PRId64, done ? "\n  " : "", test->utterances);
    for (int k = 0; k < DECODERS; k++)
        fprintf(f, ", \"%s\": {\"cer\": %.4f, \"wer\": %.4f, \"no_transcript\": %" PRId64 "}", decoder_names[k],
                fl_edit_distance_meter_error_rate(&test->scores[k].chars),
                fl_edit_distance_meter_error_rate(&test->scores[k].words), test->scores[k].failed);
    fprintf(f, ", \"beam_size\": %" PRId64 ", \"lm_weight\": %g, \"word_score\": %g}\n}\n", o->beam.beam_size,
            o->beam.lm_weight, o->beam.word_score);
    return output_close(&out, true);
}

/* ---- transcribing a file ---- */

static int transcribe(fl_module *model, const char *path, const decoding *d)
{
    bool grad = fl_set_grad_enabled(false);
    fl_module_train(model, false);
    fl_scope scope = fl_scope_begin();
    int status = 0;
    fl_tensor *audio = fl_audio_load(path, RATE);
    fl_tensor *features = audio ? log_mel(audio, NULL) : NULL;
    fl_tensor *lengths = NULL;
    fl_variable *lp = NULL;
    if (!features)
        status = fail("reading the audio");
    else if (fl_dim(features, 0) < 1 ||
             !(lp = speech_ctc_forward(model, fl_v_new(fl_unsqueeze(features, 0), false),
                                       fl_full((double)fl_dim(features, 0), FL_I64, FL_SHAPE(1)), &lengths)))
        status = fail("transcribing");
    if (status == 0) {
        const fl_tensor *v = fl_v_value(lp);
        int64_t frames = fl_dim(v, 0), classes = fl_dim(v, 2);
        float *host = malloc((size_t)(frames * classes) * sizeof *host);
        char *text = NULL;
        if (!host || fl_to_host(fl_copy(fl_cast(v, FL_F32)), host, (size_t)(frames * classes) * sizeof *host) != FL_OK)
            status = fail("reading the model's outputs");
        else if (!(text = decode(d, d->lm ? BEAM_LM : GREEDY, host, frames)))
            status = fail("decoding");
        else
            printf("%s\n", text);
        free(text);
        free(host);
    }
    fl_scope_end(scope);
    fl_set_grad_enabled(grad);
    return status;
}

int main(int argc, char **argv)
{
    options o;
    parse_args(argc, argv, &o);
    if (o.threads)
        fl_set_num_threads(o.threads);
    fl_manual_seed(o.seed);

    /* Every exit past this point goes through finish, which releases what was made. */
    int status = 0, done = 0, first_epoch = 0;
    fl_token_set *tokens = NULL;
    fl_lexicon *lexicon = NULL;
    fl_ngram *lm = NULL;
    split train = {0}, dev = {0}, test = {0};
    fl_module *model = NULL;
    fl_parameters *params = NULL;
    fl_optimizer *opt = NULL;
    epoch_result *results = NULL;
    words vocabulary = {0};
    evaluation final = {0};
    char path[4096];

    path_in(path, sizeof path, o.data, "tokens.txt");
    if (!(tokens = fl_token_set_load(path, "|"))) {
        status = fail("reading the token set (make speech-data writes the corpus)");
        goto finish;
    }
    int64_t letters = fl_token_set_size(tokens);
    /* The lexicon's tokens are the model's classes: the letters, then the blank. */
    const char **names = malloc((size_t)(letters + 1) * sizeof *names);
    for (int64_t i = 0; names && i < letters; i++)
        names[i] = fl_token_set_token(tokens, i);
    if (names)
        names[letters] = "<blank>";
    path_in(path, sizeof path, o.data, "lexicon.txt");
    fl_status lex_status = names ? fl_lexicon_load(path, names, letters + 1, &lexicon) : FL_ERR_MEMORY;
    free(names);
    if (lex_status != FL_OK) {
        status = fail("reading the lexicon");
        goto finish;
    }
    if ((status = open_lm(&o, &lm)))
        goto finish;
    o.model.tokens = letters + 1; /* the blank last, as wav2letter appends it */
    decoding d = {.tokens = tokens, .lexicon = lexicon, .lm = lm, .beam = o.beam, .blank = letters};
    d.beam.blank = letters;
    d.beam.silence = fl_token_set_boundary(tokens);

    if (o.load) {
        if ((status = read_checkpoint_header(o.load, &o.model, &first_epoch)))
            goto finish;
        if (o.model.tokens != letters + 1) {
            fprintf(stderr, "asr: %s outputs %" PRId64 " tokens; %s/tokens.txt gives %" PRId64 " and the blank\n",
                    o.load, o.model.tokens, o.data, letters);
            status = 1;
            goto finish;
        }
    }
    model = speech_ctc_new(&o.model);
    params = model ? fl_module_parameters(model) : NULL;
    fl_adam_options adam = FL_ADAMW_DEFAULTS;
    adam.lr = o.lr;
    opt = params ? fl_adamw(params->items, params->count, &adam) : NULL;
    results = calloc((size_t)(o.epochs > 0 ? o.epochs : 1), sizeof *results);
    if (!opt || !results) {
        status = fail("setting up");
        goto finish;
    }
    if (o.load && fl_checkpoint_load(o.load, model, o.epochs > first_epoch ? opt : NULL, NULL) != FL_OK) {
        status = fail("loading the checkpoint");
        goto finish;
    }
    if (o.transcribe) {
        status = transcribe(model, o.transcribe, &d);
        goto finish;
    }
    bool training = o.epochs > first_epoch;
    if ((training && ((status = open_split(&o, tokens, "train", true, o.train_limit, &train)) ||
                      (status = open_split(&o, tokens, "dev", false, o.eval_limit, &dev)))) ||
        (status = open_split(&o, tokens, o.eval_split, false, o.eval_limit, &test)))
        goto finish;
    if (!o.quiet)
        printf("CTC model: %" PRId64 " parameters (%" PRId64 " layers of %" PRId64 ", %" PRId64 " heads, stride %d); %"
               PRId64 " tokens and the blank; %" PRId64 " training, %" PRId64 " dev, %" PRId64
               " test utterances; %d threads, %d data workers, on the %s backend\n",
               fl_module_parameter_count(model), o.model.layers, o.model.d_model, o.model.heads, o.model.stride,
               letters,
               train.utterances, dev.utterances, test.utterances, fl_num_threads(), o.workers,
               fl_default_backend()->name);

    int last_epoch = o.stop_after && o.stop_after < o.epochs ? o.stop_after : o.epochs;
    int64_t steps = training ? fl_dataset_size(train.batches) : 0, warmup = steps;
    for (int epoch = first_epoch; epoch < last_epoch && status == 0; epoch++, done++) {
        fl_dataset_set_epoch(train.batches, epoch);
        fl_module_train(model, true);
        fl_average_meter loss_meter = {0};
        fl_timer_meter timer = {0};
        fl_timer_meter_start(&timer);
        double audio_seconds = 0;
        for (int64_t b = 0; b < steps && status == 0; b++) {
            int64_t step = (int64_t)epoch * steps + b;
            double lr = fl_lr_cosine(o.lr, step, (int64_t)o.epochs * steps, o.lr / 50);
            fl_optimizer_set_lr(opt, step < warmup ? lr * (double)(step + 1) / (double)warmup : lr);
            fl_scope scope = fl_scope_begin();
            fl_sample batch;
            if (fl_dataset_get(train.batches, b, &batch) != FL_OK) {
                status = fail("reading a batch");
            } else {
                fl_variable *loss = batch_loss(model, &batch, letters);
                if (!loss || fl_v_backward(loss, NULL, false) != FL_OK) {
                    status = fail("training");
                } else {
                    fl_clip_grad_norm(params->items, params->count, 1.0, 2.0);
                    if (fl_optimizer_step(opt) != FL_OK)
                        status = fail("training");
                }
                fl_optimizer_zero_grad(opt);
                if (status == 0) {
                    int64_t n = fl_dim(batch.fields[0], 0);
                    audio_seconds += fl_item(fl_sum(batch.fields[1], FL_ALL_AXES, false)) *
                                     feature_options().hop_length / RATE;
                    fl_average_meter_add(&loss_meter, fl_item(fl_v_value(loss)), (double)n);
                    fl_timer_meter_add_samples(&timer, n);
                    if (!o.quiet)
                        output_progress(epoch + 1, b + 1, steps, fl_average_meter_value(&loss_meter),
                                        audio_seconds / fl_timer_meter_value(&timer), "s of audio");
                }
            }
            fl_scope_end(scope);
        }
        fl_timer_meter_stop(&timer);
        epoch_result *r = &results[done];
        r->seconds = fl_timer_meter_value(&timer);
        r->loss = fl_average_meter_value(&loss_meter);
        r->audio_per_second = audio_seconds / r->seconds;
        evaluation e;
        if (status == 0 && (status = evaluate(model, &dev, &d, 1, &vocabulary, &e)) == 0) {
            r->dev_cer = fl_edit_distance_meter_error_rate(&e.scores[GREEDY].chars);
            r->dev_wer = fl_edit_distance_meter_error_rate(&e.scores[GREEDY].words);
            if (!o.quiet) {
                printf("epoch %d: %.1f s (%.1f s of audio/s), loss %.4f, dev greedy CER %.2f%% WER %.2f%%\n",
                       epoch + 1, r->seconds, r->audio_per_second, r->loss, r->dev_cer, r->dev_wer);
                fflush(stdout);
            }
        }
        if (status == 0 && o.save)
            status = save_checkpoint(&o, model, opt, epoch + 1);
    }
    if (status == 0 && (status = evaluate(model, &test, &d, DECODERS, &vocabulary, &final)) == 0) {
        print_evaluation(strcmp(o.eval_split, "dev") == 0 ? "dev voices" : "test voices", &final, DECODERS);
        for (int k = 0; k < DECODERS; k++)
            if (final.scores[k].failed)
                printf("%s found no transcript for %" PRId64 " utterances (scored as empty)\n", decoder_names[k],
                       final.scores[k].failed);
    }
    if (status == 0 && o.json)
        status = write_json(&o, results, first_epoch, done, &final, fl_module_parameter_count(model),
                            training ? &train : NULL, training ? &dev : NULL);

finish:
    words_free(&vocabulary);
    free(results);
    fl_optimizer_free(opt);
    fl_parameters_free(params);
    fl_module_release(model);
    split_release(&train);
    split_release(&dev);
    split_release(&test);
    fl_ngram_free(lm);
    fl_lexicon_free(lexicon);
    fl_token_set_free(tokens);
    return status;
}
