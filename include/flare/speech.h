/*
 * Flare's speech layer: audio files in, features for acoustic models out (the first
 * stages of Flashlight's wav2letter pipeline).
 *
 * Audio: WAV, FLAC and OGG/Vorbis (anything libsndfile reads), at any sample rate and
 * channel count, come back as mono f32 samples in [-1, 1] (integer PCM scaled as
 * libsndfile scales it: a 16-bit sample s reads s / 32768), channels mixed down by
 * their mean, optionally resampled with libsamplerate's SRC_SINC_BEST_QUALITY
 * converter (band-limited sinc interpolation; its passband is flat to within 0.01 dB
 * and its stopband attenuation is about 145 dB).
 *
 * Errors follow tensor.h: a non-zero fl_status (or NULL) and a message naming the
 * function. FL_ERR_IO: a file cannot be opened, is not audio libsndfile knows, is
 * empty, is cut short or cannot be written; the message names the file and gives
 * libsndfile's reason. FL_ERR_VALUE: bad rates.
 *
 * Thread safety: every function may be called from several threads at once (the
 * reason libsndfile gives for a file it cannot open is kept in one global string, so
 * two threads failing at once may see each other's).
 */
#ifndef FLARE_SPEECH_H
#define FLARE_SPEECH_H

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

#ifdef __cplusplus
}
#endif

#endif
