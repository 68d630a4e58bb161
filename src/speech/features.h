/* The speech features' set-up, shared by the one-signal functions (features.c) and
 * the batch on threads (batch.c). */
#ifndef FLARE_SPEECH_FEATURES_H
#define FLARE_SPEECH_FEATURES_H

#include "fft.h"
#include "flare/speech.h"

/* What a set of options makes once and every signal reuses: read-only once made,
 * so threads share it. */
typedef struct speech_setup {
    fl_speech_options opt;
    fl_speech_feature kind;
    int freqs; /* n_fft / 2 + 1 */
    int bins;  /* of the output: freqs, n_mels or n_mfcc */
    float *window; /* n_fft, the window centred in zeros */
    int win_from, win_to; /* the window's non-zero span within n_fft */
    /* the mel filters, sparse: filter m sums mel_weight[mel_at[m] + i] times the
     * spectrum's bin mel_first[m] + i, for i < mel_count[m] */
    int *mel_first, *mel_count, *mel_at;
    float *mel_weight;
    float *dct; /* [n_mfcc, n_mels], for MFCC */
    fftwf_plan plan;
} speech_setup;

/* Validates opt (NULL: the defaults) for kind and makes the set-up; records the error
 * naming fn and returns it otherwise. */
fl_status speech_setup_make(const char *fn, const fl_speech_options *opt, fl_speech_feature kind, speech_setup *s);
void speech_setup_free(speech_setup *s);

/* The feature of one signal into *out (malloc'd) and *frames; errors name fn. */
fl_status speech_setup_run(const char *fn, const speech_setup *s, const float *samples, int64_t count, float **out,
                           int64_t *frames);

#endif
