/*
 * Flare's speech layer: audio files in, features for acoustic models out (the first
 * stages of Flashlight's wav2letter pipeline).
 *
 * Audio: WAV, FLAC and OGG/Vorbis (anything libsndfile reads), at any sample rate and
 * channel count, come back as mono f32 samples in [-1, 1] (integer PCM scaled as
 * libsndfile scales it: a 16-bit sample s reads s / 32768), channels mixed down by
 * their mean, optionally resampled with libsamplerate's SRC_SINC_BEST_QUALITY
 * converter (its highest-quality band-limited sinc interpolator).
 *
 * Features are computed on the host from f32 samples, as torch.stft and torchaudio
 * (and librosa, with the same options) define them, in single precision with FFTW:
 *
 * - frames: with `center`, the signal is padded by n_fft / 2 on both sides by
 *   reflection (torch.stft's center=True, pad_mode="reflect"), which needs at least
 *   n_fft / 2 + 1 samples; without it, frames start at 0 and the signal needs at least
 *   n_fft samples. Frame t covers samples [t * hop, t * hop + n_fft) of the (padded)
 *   signal; there are 1 + (padded length - n_fft) / hop of them (integer division).
 * - window: hann or hamming of win_length samples, periodic (torch.hann_window's and
 *   torch.hamming_window's default; librosa's "hann"), zero-padded on both sides to
 *   n_fft as torch.stft centres a shorter window: (n_fft - win_length) / 2 zeros before.
 * - spectrogram: |rfft(frame * window)|^power for the n_fft / 2 + 1 bins (power 2 the
 *   power spectrogram, 1 the magnitude); no normalisation.
 * - mel filterbank: n_mels triangles between f_min and f_max on the HTK scale
 *   (2595 log10(1 + f / 700)) or Slaney's (linear below 1 kHz, logarithmic above, as
 *   librosa's default and torchaudio's mel_scale="slaney"), with no normalisation or
 *   Slaney's area normalisation (2 / (f[m + 2] - f[m]) per triangle): torchaudio's
 *   melscale_fbanks, librosa.filters.mel.
 * - log-mel: ln(max(mel + log_offset, log_floor)). The defaults, offset 1e-6 and floor
 *   0, are torchaudio.transforms.MFCC's log_mels=True.
 * - MFCC: the orthonormal DCT-II of the log-mel over the mel axis, first n_mfcc
 *   coefficients: torchaudio.transforms.MFCC with log_mels=True (its default,
 *   log_mels=False, takes the DCT of 10 log10(mel) clamped to 80 dB below the maximum
 *   instead; that is 10 / ln 10 times these values wherever the clamp does not act).
 *
 * Every feature is laid out time-major, [frames, bins] row by row (bins = n_fft / 2 + 1,
 * n_mels or n_mfcc), the layout an acoustic model reads; torchaudio's is the transpose.
 *
 * Errors follow tensor.h: a non-zero fl_status (or NULL) and a message naming the
 * function. FL_ERR_IO: a file cannot be opened, is not audio libsndfile knows, is
 * empty, is cut short or cannot be written; the message names the file and gives
 * libsndfile's reason. FL_ERR_VALUE: bad options or a signal too short for its frames.
 *
 * Thread safety: every function may be called from several threads at once. The FFTW
 * plans (one per n_fft, made on first use) are made under a lock and shared. The
 * reason libsndfile gives for a file it cannot open is kept in one global string, so
 * two threads failing at once may see each other's.
 */
#ifndef FLARE_SPEECH_H
#define FLARE_SPEECH_H

#include <stdbool.h>
#include <stdint.h>

#include "flare/data.h"
#include "flare/decoder.h"
#include "flare/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- audio ----------------------------------------------------------------------- */

/* Mono samples: count of them, in [-1, 1] as read, at sample_rate Hz. */
typedef struct fl_audio {
    float *samples; /* malloc'd; fl_audio_free frees it */
    int64_t count;
    int sample_rate;
} fl_audio;

/* Reads an audio file, mixes its channels down to their mean and, if sample_rate is
 * not 0, resamples it to sample_rate Hz (else keeps the file's rate). A file of no
 * samples (or too few to leave one at sample_rate), a missing, unreadable, corrupt or cut-short file is FL_ERR_IO naming path;
 * *out is then zeroed. A file is cut short if it yields fewer frames than its header
 * announces. */
fl_status fl_audio_read(const char *path, int sample_rate, fl_audio *out);

/* The same samples as a new 1-D f32 tensor on the default backend; NULL on error. */
fl_tensor *fl_audio_load(const char *path, int sample_rate);

void fl_audio_free(fl_audio *audio);

/* Resamples count samples at from_rate Hz to to_rate Hz (SRC_SINC_BEST_QUALITY) into
 * *out (malloc'd; free() it) and *out_count, which is round(count * to_rate /
 * from_rate). Equal rates copy. Rates must be positive and their ratio within
 * [1/256, 256] (libsamplerate's range). */
fl_status fl_audio_resample(const float *samples, int64_t count, int from_rate, int to_rate, float **out,
                            int64_t *out_count);

/* How fl_audio_write_wav stores samples. */
typedef enum fl_wav_format {
    FL_WAV_PCM16, /* 16-bit integers: x * 32767 rounded, clipped to [-32768, 32767] */
    FL_WAV_FLOAT  /* 32-bit IEEE floats, exact */
} fl_wav_format;

/* Writes frames frames of channels interleaved samples at sample_rate Hz to a WAV file
 * at path, whole or not at all: it writes a temporary beside path (fl_temporary_file,
 * unique to the writer) and renames that over path once complete, so a reader never
 * sees half a file. FL_ERR_IO names the file on failure. */
fl_status fl_audio_write_wav(const char *path, const float *samples, int64_t frames, int channels, int sample_rate,
                             fl_wav_format format);

/* ---- features -------------------------------------------------------------------- */

typedef enum fl_window { FL_WINDOW_HANN, FL_WINDOW_HAMMING } fl_window;
typedef enum fl_mel_scale { FL_MEL_HTK, FL_MEL_SLANEY } fl_mel_scale;
typedef enum fl_mel_norm { FL_MEL_NORM_NONE, FL_MEL_NORM_SLANEY } fl_mel_norm;

/* What a feature function computes, and how. fl_speech_defaults() gives the defaults
 * in brackets; set fields on a copy of them. */
typedef struct fl_speech_options {
    int sample_rate;       /* [16000] Hz of the signal; sets the mel filters' frequencies */
    int n_fft;             /* [400] FFT size: bins = n_fft / 2 + 1 (25 ms at 16 kHz) */
    int hop_length;        /* [160] samples between frames (10 ms at 16 kHz) */
    int win_length;        /* [400] window length, at most n_fft */
    fl_window window;      /* [FL_WINDOW_HANN] periodic, as torch */
    bool center;           /* [true] reflect-pad n_fft / 2 on both sides, as torch.stft */
    int n_mels;            /* [80] mel filters */
    float f_min;           /* [0] Hz, lowest edge of the mel filters */
    float f_max;           /* [0] Hz, highest edge; 0 means sample_rate / 2 */
    fl_mel_scale mel_scale; /* [FL_MEL_HTK] torchaudio's default; librosa's is Slaney */
    fl_mel_norm mel_norm;  /* [FL_MEL_NORM_NONE] torchaudio's default; librosa's is Slaney */
    float power;           /* [2] of the magnitude the mel filters sum: 2 power, 1 magnitude */
    float log_offset;      /* [1e-6] added to the mel energies before the log */
    float log_floor;       /* [0] the log's argument is at least this */
    int n_mfcc;            /* [40] MFCCs kept, at most n_mels */
} fl_speech_options;

fl_speech_options fl_speech_defaults(void);

/* The feature kinds of fl_speech_compute and fl_speech_features. */
typedef enum fl_speech_feature {
    FL_SPEECH_POWER,     /* |X|^2, n_fft / 2 + 1 bins */
    FL_SPEECH_MAGNITUDE, /* |X|, n_fft / 2 + 1 bins */
    FL_SPEECH_MEL,       /* mel filterbank of |X|^power, n_mels */
    FL_SPEECH_LOG_MEL,   /* log of the above, n_mels */
    FL_SPEECH_MFCC       /* DCT-II (orthonormal) of the log-mel, n_mfcc */
} fl_speech_feature;

/* The number of frames of a signal of count samples (above), or -1 after recording
 * FL_ERR_VALUE if the options are invalid or the signal too short for them. */
int64_t fl_speech_frames(int64_t count, const fl_speech_options *opt);

/* The bins of one frame of feature kind under opt (n_fft / 2 + 1, n_mels or n_mfcc). */
int fl_speech_bins(fl_speech_feature kind, const fl_speech_options *opt);

/* Computes feature kind of count samples into *out (malloc'd, [*frames, bins]
 * row-major; free() it). opt NULL means the defaults. */
fl_status fl_speech_compute(const float *samples, int64_t count, fl_speech_feature kind,
                            const fl_speech_options *opt, float **out, int64_t *frames);

/* The same on a 1-D float tensor (any float dtype, any backend): a new f32 tensor
 * [frames, bins] on the signal's backend; NULL on error. */
fl_tensor *fl_speech_features(const fl_tensor *signal, fl_speech_feature kind, const fl_speech_options *opt);

/* The mel filterbank opt describes, [n_fft / 2 + 1, n_mels] row-major, into *out
 * (malloc'd; free() it): mel = spectrogram (one frame's bins) times this matrix. */
fl_status fl_speech_mel_filters(const fl_speech_options *opt, float **out);

/* Per-utterance mean and variance normalisation, in place, of a [frames, bins]
 * feature: each bin minus its mean over the frames, divided by sqrt(variance + 1e-10)
 * (the population variance over the frames). A constant bin becomes 0. */
void fl_speech_normalize(float *features, int64_t frames, int bins);

/* Deltas over time of a [frames, bins] feature into out ([frames, bins]; not in
 * place), as torchaudio.functional.compute_deltas with win_length 5 (N = 2): d[t] =
 * sum_{n=1..N} n (c[t + n] - c[t - n]) / (2 sum_{n=1..N} n^2), frames beyond either
 * end replaced by the nearest frame (mode "replicate"). Applied twice, delta-deltas. */
void fl_speech_deltas(const float *features, int64_t frames, int bins, float *out);

/* fl_speech_normalize and fl_speech_deltas on a [frames, bins] float tensor: a new f32
 * tensor of its shape on its backend; NULL on error. */
fl_tensor *fl_speech_normalize_tensor(const fl_tensor *features);
fl_tensor *fl_speech_deltas_tensor(const fl_tensor *features);

/* ---- batches ------------------------------------------------------------------------ */

/* Log-mel features of batch signals (signals[i], counts[i] samples each) on threads
 * worker threads (at most batch; 0 means fl_num_threads()), each thread taking the
 * next signal not yet taken. out[i] receives signal i's [frames[i], n_mels] features
 * (malloc'd; free() each). The results are those of fl_speech_compute one by one. On
 * error every out[i] is NULL and the message names the first signal that failed. */
fl_status fl_speech_log_mel_batch(const float *const *signals, const int64_t *counts, int batch,
                                  const fl_speech_options *opt, int threads, float **out, int64_t *frames);

/* ---- token sets -------------------------------------------------------------------
 *
 * The output alphabet of an acoustic model trained with CTC, read from a tokens file
 * (wav2letter's tokens.txt): one token per line, UTF-8, the line number (from 0) its id.
 * A token is one or more characters; "|" is by convention the word boundary. The CTC
 * blank is not in the file: Flare follows wav2letter and APPENDS it, so the blank's id
 * is fl_token_set_size(ts) and the model outputs fl_token_set_size(ts) + 1 classes
 * (fl_nn_ctc_loss(..., blank = fl_token_set_size(ts), ...)); token ids keep the
 * file's numbering.
 *
 * A transcript is encoded as letters (wav2letter's default): words are the runs of
 * non-space characters (space, tab, CR, LF separate them); each word is split into
 * tokens by longest match at each byte, and the boundary token goes between words (and
 * before the first and after the last if boundary_at_ends): "hello world" with tokens
 * "|", a .. z gives h e l l o | w o r l d. A character no token matches is
 * FL_ERR_VALUE naming the character, its code point and its byte offset in the
 * transcript (and the file and line, for a manifest's). Decoding maps ids back to their
 * tokens, the boundary to one space (none at the ends, runs of boundaries to one).
 */
typedef struct fl_token_set fl_token_set;

/* Reads a tokens file. Lines are tokens as written (a trailing CR is dropped); an empty
 * line, a duplicate token, a token holding whitespace or invalid UTF-8 is FL_ERR_IO naming
 * the file and line. boundary names the word boundary token ("|" if NULL); a file
 * without it is an error unless boundary is "" (no boundary: words are then joined
 * directly and encoding a transcript of several words fails). */
fl_token_set *fl_token_set_load(const char *path, const char *boundary);
/* The same from count strings (tokens[i] has id i), with the same checks. */
fl_token_set *fl_token_set_new(const char *const *tokens, int64_t count, const char *boundary);
void fl_token_set_free(fl_token_set *ts);

int64_t fl_token_set_size(const fl_token_set *ts);
/* The token of id (NULL if out of range; the string belongs to ts). */
const char *fl_token_set_token(const fl_token_set *ts, int64_t id);
/* The id of token, or -1. */
int64_t fl_token_set_id(const fl_token_set *ts, const char *token);
/* The id of the word boundary, or -1 if there is none. */
int64_t fl_token_set_boundary(const fl_token_set *ts);

/* Encodes text as above into *ids (malloc'd; free() it) and *count. */
fl_status fl_token_set_encode(const fl_token_set *ts, const char *text, bool boundary_at_ends, int64_t **ids,
                              int64_t *count);
/* The text of count ids (malloc'd; free() it); NULL if an id is out of [0, size) (the
 * blank included: collapse a CTC path and drop its blanks first). */
char *fl_token_set_decode(const fl_token_set *ts, const int64_t *ids, int64_t count);

/* Encodes text word by word (words: runs of non-whitespace) as the concatenation of
 * each word's first spelling in lex (decoder.h's lexicon, as fl_lexicon_load reads
 * wav2letter's lexicon.txt, with ts's tokens as its token names: "hello h e l l o |"
 * for letters with a boundary after each word, or word pieces, "hello he llo |"). A
 * word not in the lexicon is FL_ERR_VALUE naming it and its byte offset, unless
 * spell_unknown: then it is spelled as fl_token_set_encode spells a word, followed by
 * the boundary token if there is one ("w o r d |", the form corpus.py gives every
 * word). A spelling with a token id outside ts is FL_ERR_VALUE. *ids is malloc'd;
 * free() it. */
fl_status fl_token_set_encode_words(const fl_token_set *ts, const fl_lexicon *lex, const char *text,
                                    bool spell_unknown, int64_t **ids, int64_t *count);

/* ---- manifests --------------------------------------------------------------------
 *
 * A manifest lists utterances, one per line: "path<TAB>duration<TAB>transcript", the
 * path relative to the manifest's directory (or absolute), the duration in seconds
 * (what apps/asr/corpus.py writes as train.tsv, dev.tsv, test.tsv). The whole
 * manifest is read and checked when the dataset is made: a line without three fields,
 * with a duration that is not a finite positive number, an empty transcript or one
 * the token set cannot encode, or whose audio file does not exist (stat) is a bad
 * line. Bad lines are errors (FL_ERR_IO, "manifest:line: reason") unless skip_bad is
 * set; then they are left out and counted, and fl_manifest_skipped reports how many
 * and why the first was. A manifest with no good line is an error either way.
 *
 * Sample i (in the manifest's order, bad lines left out) has three fields:
 *   0: the audio, f32 [samples], read with fl_audio_read at options.sample_rate;
 *   1: the transcript's token ids, i64 [L];
 *   2: i, an i64 scalar (0-d), so that a batch says which utterances it holds.
 * An audio file that cannot be read when the sample is fetched is an error of that
 * get, naming the file and the manifest's line.
 */
typedef struct fl_manifest_options {
    int sample_rate;       /* Hz to resample every file to; 0: each file's own. Default 16000. */
    bool skip_bad;         /* leave bad lines out and count them, instead of failing. Default false. */
    bool boundary_at_ends; /* the boundary token also before and after the transcript. Default false. */
    /* Encode transcripts with this lexicon (fl_token_set_encode_words) instead of as
     * letters; its token ids are the dataset's tokens' (boundary_at_ends is then not
     * used: the spellings say where boundaries go). Default NULL. */
    const fl_lexicon *lexicon;
    bool spell_unknown; /* with a lexicon: spell words it lacks (fl_token_set_encode_words). Default false. */
} fl_manifest_options;

/* The defaults above. */
fl_manifest_options fl_manifest_options_default(void);

/* A dataset of the manifest at path, with transcripts encoded by tokens (and the
 * lexicon, if options has one) while it is made: both may be freed after. options NULL:
 * the defaults. */
fl_dataset *fl_manifest_dataset(const char *path, const fl_token_set *tokens, const fl_manifest_options *options);

/* The accessors below take a manifest dataset (FL_ERR_VALUE for any other kind); the
 * strings and arrays they return belong to it. */
/* The number of bad lines left out, and (if reason is not NULL) why the first one was
 * ("train.tsv:7: ..."; "" if none). -1 on error. */
int64_t fl_manifest_skipped(fl_dataset *ds, const char **reason);
/* The durations in seconds the manifest gives, one per sample: for bucketing. */
const double *fl_manifest_durations(fl_dataset *ds);
/* Sample index's audio path (as resolved) and transcript. */
const char *fl_manifest_audio_path(fl_dataset *ds, int64_t index);
const char *fl_manifest_transcript(fl_dataset *ds, int64_t index);

/* ---- length-bucketed batches -------------------------------------------------------
 *
 * Batches of utterances of similar length, so that little of a padded batch is
 * padding. The samples are sorted by lengths[i] (ties by index) and cut, in that
 * order, into batches of at most batch_size samples whose padded size, the sample count
 * times the longest length, stays within max_total (a sample longer than max_total on
 * its own gets a batch of its own). The batches are the same every epoch; their ORDER
 * is a permutation drawn from (seed, epoch) if shuffle is set (SplitMix64, the same on
 * every machine and thread count), so every sample is in exactly one batch each epoch.
 * Batch k gathers its samples from the source (which gets the epoch too) and combines
 * them with collate (NULL: fl_speech_pad_collate with its defaults).
 */
typedef struct fl_bucket_options {
    int64_t batch_size; /* most samples in a batch; 0: no limit (max_total alone). Default 16. */
    double max_total;   /* most padded length (count * longest) in a batch; 0: no limit. Default 0. */
    bool shuffle;       /* shuffle the order of the batches each epoch. Default true. */
    uint64_t seed;      /* Default 0. */
} fl_bucket_options;

fl_bucket_options fl_bucket_options_default(void);

/* lengths (count of them, the source's size; copied) are any measure of each sample:
 * fl_manifest_durations, or frames. Takes over source, as fl_batch_dataset does. */
fl_dataset *fl_bucket_batch_dataset(fl_dataset *source, const double *lengths, int64_t count,
                                    const fl_bucket_options *options, fl_collate_fn collate, void *user);
/* Which source samples batch `batch` holds this epoch: their count, and (if indices is
 * not NULL) the indices, copied to indices[0 .. count). -1 on error. */
int64_t fl_bucket_batch_indices(fl_dataset *ds, int64_t batch, int64_t *indices);

/* The collate of variable-length samples, an fl_collate_fn (user: a
 * fl_pad_collate_options, or NULL for the defaults). Field by field: a field of at
 * least one axis is padded along axis 0 to the longest in the batch and stacked,
 * [N, T_max, ...], and followed by an i64 [N] field of the lengths before padding; a
 * 0-d field is stacked, [N]. Float fields pad with pad_value, integer fields with
 * pad_id. A manifest sample (audio, ids, index) becomes five fields: audio [N, T],
 * audio lengths [N], targets [N, S], target lengths [N], indices [N]: the targets and
 * target lengths fl_nn_ctc_loss takes as they are; its log_probs are [T, N, C] (the
 * model's [N, T, C] transposed) and its input lengths the model's output frames of
 * each sample (from the audio lengths through the model's strides). The other axes of
 * a field must agree across the batch (FL_ERR_SHAPE). */
typedef struct fl_pad_collate_options {
    double pad_value; /* Default 0. */
    int64_t pad_id;   /* Default -1: never a token, so padding cannot pass for labels. */
} fl_pad_collate_options;

fl_status fl_speech_pad_collate(const fl_sample *samples, int64_t count, fl_sample *out, void *user);

/* ---- augmentation -----------------------------------------------------------------
 *
 * Random augmentations as fl_transform_fn transforms (user: the options struct; NULL
 * for the defaults), for fl_transform_dataset: the draws come from the sample's own
 * random stream, keyed by the generator's state when the transform dataset was made
 * (so by fl_manual_seed before it), the epoch and the sample index, never by thread
 * timing. Batches are the same whatever the number of prefetch workers, and differ
 * from epoch to epoch. The result is on the field's backend.
 */

/* SpecAugment (Park et al. 2019) on a feature tensor [T, F] (frames by frequency
 * channels, float). First, if time_warp W > 0 and T > 2W, time warping: a frame c
 * uniform in [W, T - W) moves to c + d, d uniform in [-(W - 1), W - 1], the frames
 * before and after it stretched or squeezed linearly to fit (output frame j reads the
 * input at j * c / (c + d) before the point, linearly between the last frames after
 * it, interpolating linearly between frames); the first and last frames stay. Then
 * freq_masks bands of f channels, f uniform in [0, freq_width]
 * (clamped to F), starting at f0 uniform in [0, F - f]; then time_masks spans of t
 * frames, t uniform in [0, min(time_width, floor(time_ratio * T))], starting at t0
 * uniform in [0, T - t]. Masked values become 0, or the mean of the (warped) input
 * if mask_mean. Defaults: LibriSpeech double (LD) policy, 2 masks of up to 27 channels and 2
 * of up to 100 frames, time_ratio 1.0 (the paper's p), mask value 0, and time warping
 * off (the paper's LD policy warps with W = 80; it adds least, and many recipes leave it
 * out). */
typedef struct fl_spec_augment_options {
    int freq_masks, freq_width;
    int time_masks, time_width;
    double time_ratio;
    bool mask_mean;
    int time_warp; /* W; 0: no warping */
} fl_spec_augment_options;

fl_spec_augment_options fl_spec_augment_options_default(void);
fl_tensor *fl_spec_augment(const fl_tensor *features, void *options);

/* Additive noise at a signal-to-noise ratio drawn uniformly from [snr_low, snr_high] dB
 * (equal for a fixed one): noise n is scaled by a so that mean(x^2) / mean((a n)^2) is
 * that ratio exactly (for the noise drawn), and x + a n returned, any shape, float. The
 * noise is white Gaussian, or, if noise is set, a stretch of that 1-D float signal
 * starting at a random offset (repeated end to end if shorter than x, and on x's
 * backend). A silent x comes back unchanged. Defaults: 10 to 30 dB, white. */
typedef struct fl_noise_options {
    double snr_low, snr_high;
    const fl_tensor *noise;
} fl_noise_options;

fl_noise_options fl_noise_options_default(void);
fl_tensor *fl_add_noise(const fl_tensor *audio, void *options);

/* Speed perturbation (Ko et al. 2015, Kaldi's and sox's "speed"): the audio [samples]
 * played factor times faster, pitch and tempo together, resampled with
 * fl_audio_resample (libsamplerate's SINC_BEST) as if its rate were factor times its
 * own: round(samples / factor) samples come back. factor is drawn uniformly from
 * factors[0 .. count). Default: 0.9, 1.0, 1.1. */
#define FL_SPEED_MAX_FACTORS 16
typedef struct fl_speed_options {
    int count;
    double factors[FL_SPEED_MAX_FACTORS];
} fl_speed_options;

fl_speed_options fl_speed_options_default(void);
fl_tensor *fl_speed_perturb(const fl_tensor *audio, void *options);

#ifdef __cplusplus
}
#endif

#endif
