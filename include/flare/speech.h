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
 * samples, a missing, unreadable, corrupt or cut-short file is FL_ERR_IO naming path;
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
 * at path, whole or not at all: it writes path's name followed by ".tmp" and renames
 * that over path once complete, so a reader never sees half a file. FL_ERR_IO names the
 * file on failure. */
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

#ifdef __cplusplus
}
#endif

#endif
