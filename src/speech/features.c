/*
 * Spectrograms, mel filterbanks, log-mel and MFCC of one signal, as torch.stft and
 * torchaudio define them (include/flare/speech.h). The filters and the DCT are made in
 * double and kept in float; the frames go through FFTW in float.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "features.h"
#include "flare/extension.h"

fl_speech_options fl_speech_defaults(void)
{
    return (fl_speech_options){.sample_rate = 16000,
                               .n_fft = 400,
                               .hop_length = 160,
                               .win_length = 400,
                               .window = FL_WINDOW_HANN,
                               .center = true,
                               .n_mels = 80,
                               .f_min = 0,
                               .f_max = 0,
                               .mel_scale = FL_MEL_HTK,
                               .mel_norm = FL_MEL_NORM_NONE,
                               .power = 2,
                               .log_offset = 1e-6f,
                               .log_floor = 0,
                               .n_mfcc = 40};
}

static bool options_valid(const char *fn, const fl_speech_options *o, fl_speech_feature kind)
{
    const char *bad = NULL;
    char why[160];
    if (kind < FL_SPEECH_POWER || kind > FL_SPEECH_MFCC)
        snprintf(why, sizeof why, "feature kind %d is not one of fl_speech_feature", (int)kind), bad = why;
    else if (o->sample_rate <= 0)
        snprintf(why, sizeof why, "sample_rate %d is not positive", o->sample_rate), bad = why;
    else if (o->n_fft < 2)
        snprintf(why, sizeof why, "n_fft %d is below 2", o->n_fft), bad = why;
    else if (o->hop_length <= 0)
        snprintf(why, sizeof why, "hop_length %d is not positive", o->hop_length), bad = why;
    else if (o->win_length <= 0 || o->win_length > o->n_fft)
        snprintf(why, sizeof why, "win_length %d is not within [1, n_fft = %d]", o->win_length, o->n_fft), bad = why;
    else if (o->window != FL_WINDOW_HANN && o->window != FL_WINDOW_HAMMING)
        snprintf(why, sizeof why, "window %d is not one of fl_window", (int)o->window), bad = why;
    if (bad || kind == FL_SPEECH_POWER || kind == FL_SPEECH_MAGNITUDE)
        goto done;
    float f_max = o->f_max == 0 ? o->sample_rate / 2.0f : o->f_max;
    if (o->n_mels <= 0)
        snprintf(why, sizeof why, "n_mels %d is not positive", o->n_mels), bad = why;
    else if (!(o->f_min >= 0 && o->f_min < f_max))
        snprintf(why, sizeof why, "f_min %g and f_max %g: need 0 <= f_min < f_max", o->f_min, f_max), bad = why;
    else if (o->mel_scale != FL_MEL_HTK && o->mel_scale != FL_MEL_SLANEY)
        snprintf(why, sizeof why, "mel_scale %d is not one of fl_mel_scale", (int)o->mel_scale), bad = why;
    else if (o->mel_norm != FL_MEL_NORM_NONE && o->mel_norm != FL_MEL_NORM_SLANEY)
        snprintf(why, sizeof why, "mel_norm %d is not one of fl_mel_norm", (int)o->mel_norm), bad = why;
    else if (!(o->power > 0))
        snprintf(why, sizeof why, "power %g is not positive", o->power), bad = why;
    else if (!(o->log_offset >= 0 && o->log_floor >= 0))
        snprintf(why, sizeof why, "log_offset %g and log_floor %g: neither may be negative", o->log_offset,
                 o->log_floor), bad = why;
    else if (kind == FL_SPEECH_MFCC && (o->n_mfcc <= 0 || o->n_mfcc > o->n_mels))
        snprintf(why, sizeof why, "n_mfcc %d is not within [1, n_mels = %d]", o->n_mfcc, o->n_mels), bad = why;
done:
    if (bad)
        fl_error(FL_ERR_VALUE, fn, "options: %s", bad);
    return !bad;
}

/* The frames of count samples, or -1 after recording why there are none. */
static int64_t frame_count(const char *fn, int64_t count, const fl_speech_options *o)
{
    int64_t pad = o->center ? o->n_fft / 2 : 0;
    if (o->center && count < pad + 1) {
        fl_error(FL_ERR_VALUE, fn, "%lld samples are too few to reflect-pad by n_fft / 2 = %lld (center); at least "
                 "%lld are needed", (long long)count, (long long)pad, (long long)pad + 1);
        return -1;
    }
    if (!o->center && count < o->n_fft) {
        fl_error(FL_ERR_VALUE, fn, "%lld samples are fewer than n_fft = %d (no center padding)", (long long)count,
                 o->n_fft);
        return -1;
    }
    return 1 + (count + 2 * pad - o->n_fft) / o->hop_length;
}

int64_t fl_speech_frames(int64_t count, const fl_speech_options *opt)
{
    fl_speech_options d = fl_speech_defaults();
    const fl_speech_options *o = opt ? opt : &d;
    if (!options_valid("fl_speech_frames", o, FL_SPEECH_POWER))
        return -1;
    return frame_count("fl_speech_frames", count, o);
}

int fl_speech_bins(fl_speech_feature kind, const fl_speech_options *opt)
{
    fl_speech_options d = fl_speech_defaults();
    const fl_speech_options *o = opt ? opt : &d;
    return kind == FL_SPEECH_MFCC ? o->n_mfcc : kind == FL_SPEECH_MEL || kind == FL_SPEECH_LOG_MEL ? o->n_mels
                                                                                                   : o->n_fft / 2 + 1;
}

/* The mel scales, as torchaudio.functional's _hz_to_mel and _mel_to_hz. */
static double hz_to_mel(double f, fl_mel_scale scale)
{
    if (scale == FL_MEL_HTK)
        return 2595.0 * log10(1.0 + f / 700.0);
    const double f_sp = 200.0 / 3, min_log_hz = 1000.0, min_log_mel = min_log_hz / f_sp,
                 logstep = log(6.4) / 27.0;
    return f >= min_log_hz ? min_log_mel + log(f / min_log_hz) / logstep : f / f_sp;
}

static double mel_to_hz(double m, fl_mel_scale scale)
{
    if (scale == FL_MEL_HTK)
        return 700.0 * (pow(10.0, m / 2595.0) - 1.0);
    const double f_sp = 200.0 / 3, min_log_hz = 1000.0, min_log_mel = min_log_hz / f_sp,
                 logstep = log(6.4) / 27.0;
    return m >= min_log_mel ? min_log_hz * exp(logstep * (m - min_log_mel)) : f_sp * m;
}

/* The dense filterbank [freqs, n_mels], as torchaudio's melscale_fbanks: triangles
 * over the bins' frequencies linspace(0, sample_rate // 2, freqs). */
static double *mel_matrix(const fl_speech_options *o)
{
    int freqs = o->n_fft / 2 + 1, n = o->n_mels;
    double *fb = calloc((size_t)freqs * (size_t)n, sizeof *fb);
    double *f_pts = malloc(sizeof *f_pts * (size_t)(n + 2));
    if (!fb || !f_pts) {
        free(fb);
        free(f_pts);
        return NULL;
    }
    double f_max = o->f_max == 0 ? o->sample_rate / 2.0 : o->f_max;
    double m_min = hz_to_mel(o->f_min, o->mel_scale), m_max = hz_to_mel(f_max, o->mel_scale);
    for (int i = 0; i < n + 2; i++)
        f_pts[i] = mel_to_hz(m_min + (m_max - m_min) * i / (n + 1), o->mel_scale);
    double nyquist = (double)(o->sample_rate / 2);
    for (int k = 0; k < freqs; k++) {
        double f = freqs > 1 ? nyquist * k / (freqs - 1) : 0;
        for (int m = 0; m < n; m++) {
            double down = (f - f_pts[m]) / (f_pts[m + 1] - f_pts[m]);
            double up = (f_pts[m + 2] - f) / (f_pts[m + 2] - f_pts[m + 1]);
            double w = fmax(0.0, fmin(down, up));
            if (o->mel_norm == FL_MEL_NORM_SLANEY)
                w *= 2.0 / (f_pts[m + 2] - f_pts[m]);
            fb[(size_t)k * n + m] = w;
        }
    }
    free(f_pts);
    return fb;
}

fl_status fl_speech_mel_filters(const fl_speech_options *opt, float **out)
{
    static const char *fn = "fl_speech_mel_filters";
    if (fl_null_args(fn, 1, out))
        return fl_last_status();
    *out = NULL;
    fl_speech_options d = fl_speech_defaults();
    const fl_speech_options *o = opt ? opt : &d;
    if (!options_valid(fn, o, FL_SPEECH_MEL))
        return FL_ERR_VALUE;
    size_t size = (size_t)(o->n_fft / 2 + 1) * (size_t)o->n_mels;
    double *fb = mel_matrix(o);
    float *f = malloc(size * sizeof *f);
    if (!fb || !f) {
        free(fb);
        free(f);
        fl_error(FL_ERR_MEMORY, fn, "cannot allocate a [%d, %d] filterbank", o->n_fft / 2 + 1, o->n_mels);
        return FL_ERR_MEMORY;
    }
    for (size_t i = 0; i < size; i++)
        f[i] = (float)fb[i];
    free(fb);
    *out = f;
    return FL_OK;
}

void speech_setup_free(speech_setup *s)
{
    free(s->window);
    free(s->mel_first);
    free(s->mel_count);
    free(s->mel_at);
    free(s->mel_weight);
    free(s->dct);
    memset(s, 0, sizeof *s);
}

fl_status speech_setup_make(const char *fn, const fl_speech_options *opt, fl_speech_feature kind, speech_setup *s)
{
    memset(s, 0, sizeof *s);
    s->opt = opt ? *opt : fl_speech_defaults();
    s->kind = kind;
    const fl_speech_options *o = &s->opt;
    if (!options_valid(fn, o, kind))
        return FL_ERR_VALUE;
    int n_fft = o->n_fft, freqs = n_fft / 2 + 1;
    s->freqs = freqs;
    s->bins = fl_speech_bins(kind, o);
    s->plan = speech_rfft_plan(n_fft);
    s->window = calloc((size_t)n_fft, sizeof *s->window);
    if (!s->plan || !s->window)
        goto no_memory;
    /* periodic windows, as torch.hann_window(win_length) and torch.hamming_window:
     * the first win_length points of a symmetric window of win_length + 1 */
    double a = o->window == FL_WINDOW_HANN ? 0.5 : 0.54, b = 1 - a;
    s->win_from = (n_fft - o->win_length) / 2;
    s->win_to = s->win_from + o->win_length;
    for (int i = 0; i < o->win_length; i++)
        s->window[s->win_from + i] = (float)(a - b * cos(2 * M_PI * i / o->win_length));
    if (kind == FL_SPEECH_POWER || kind == FL_SPEECH_MAGNITUDE)
        return FL_OK;

    int n = o->n_mels;
    double *fb = mel_matrix(o);
    s->mel_first = calloc((size_t)n, sizeof *s->mel_first);
    s->mel_count = calloc((size_t)n, sizeof *s->mel_count);
    s->mel_at = calloc((size_t)n, sizeof *s->mel_at);
    s->mel_weight = malloc(sizeof *s->mel_weight * (size_t)freqs * (size_t)n);
    if (!fb || !s->mel_first || !s->mel_count || !s->mel_at || !s->mel_weight) {
        free(fb);
        goto no_memory;
    }
    /* each triangle spans a few bins: summing those alone is what makes the
     * filterbank cheap beside the FFT */
    int at = 0;
    for (int m = 0; m < n; m++) {
        int first = 0, last = -1;
        for (int k = 0; k < freqs; k++)
            if (fb[(size_t)k * n + m] != 0) {
                if (last < 0)
                    first = k;
                last = k;
            }
        s->mel_first[m] = first;
        s->mel_count[m] = last - first + 1;
        s->mel_at[m] = at;
        for (int k = first; k <= last; k++)
            s->mel_weight[at++] = (float)fb[(size_t)k * n + m];
    }
    free(fb);
    if (kind == FL_SPEECH_MFCC) {
        /* torchaudio's create_dct(n_mfcc, n_mels, "ortho"), transposed */
        s->dct = malloc(sizeof *s->dct * (size_t)o->n_mfcc * (size_t)n);
        if (!s->dct)
            goto no_memory;
        for (int k = 0; k < o->n_mfcc; k++)
            for (int i = 0; i < n; i++) {
                double c = cos(M_PI / n * (i + 0.5) * k) * sqrt(2.0 / n);
                s->dct[(size_t)k * n + i] = (float)(k == 0 ? c / sqrt(2.0) : c);
            }
    }
    return FL_OK;
no_memory:
    speech_setup_free(s);
    fl_error(FL_ERR_MEMORY, fn, "cannot set up features of n_fft %d and %d mels", n_fft, o->n_mels);
    return FL_ERR_MEMORY;
}

/* Sample i of the signal padded by pad on each side by reflection (torch's "reflect":
 * the edge sample is not repeated). pad < count, so one reflection suffices. */
static inline float reflected(const float *x, int64_t count, int64_t i)
{
    if (i < 0)
        i = -i;
    if (i >= count)
        i = 2 * (count - 1) - i;
    return x[i];
}

fl_status speech_setup_run(const char *fn, const speech_setup *s, const float *samples, int64_t count, float **out,
                           int64_t *frames)
{
    *out = NULL;
    *frames = 0;
    const fl_speech_options *o = &s->opt;
    int64_t t_count = frame_count(fn, count, o);
    if (t_count < 0)
        return FL_ERR_VALUE;
    int n_fft = o->n_fft, freqs = s->freqs, bins = s->bins, n_mels = o->n_mels;
    int64_t pad = o->center ? n_fft / 2 : 0;
    float *result = malloc(sizeof *result * (size_t)t_count * (size_t)bins);
    float *in = fftwf_malloc(sizeof *in * (size_t)n_fft);
    fftwf_complex *spec = fftwf_malloc(sizeof *spec * (size_t)freqs);
    float *power = malloc(sizeof *power * (size_t)freqs);
    float *mel = malloc(sizeof *mel * (size_t)(n_mels > 0 ? n_mels : 1));
    if (!result || !in || !spec || !power || !mel) {
        free(result);
        fftwf_free(in);
        fftwf_free(spec);
        free(power);
        free(mel);
        fl_error(FL_ERR_MEMORY, fn, "cannot allocate %lld frames of %d bins", (long long)t_count, bins);
        return FL_ERR_MEMORY;
    }
    memset(in, 0, sizeof *in * (size_t)n_fft);
    bool magnitude = s->kind == FL_SPEECH_MAGNITUDE || (s->kind != FL_SPEECH_POWER && o->power == 1);
    bool squared = s->kind == FL_SPEECH_POWER || (s->kind != FL_SPEECH_MAGNITUDE && o->power == 2);
    for (int64_t t = 0; t < t_count; t++) {
        int64_t start = t * o->hop_length - pad;
        const float *w = s->window;
        if (start + s->win_from >= 0 && start + s->win_to <= count) {
            const float *x = samples + start;
            for (int i = s->win_from; i < s->win_to; i++)
                in[i] = x[i] * w[i];
        } else {
            for (int i = s->win_from; i < s->win_to; i++)
                in[i] = reflected(samples, count, start + i) * w[i];
        }
        fftwf_execute_dft_r2c(s->plan, in, spec);
        float *row = result + (size_t)t * (size_t)bins;
        float *p = s->kind == FL_SPEECH_POWER || s->kind == FL_SPEECH_MAGNITUDE ? row : power;
        for (int k = 0; k < freqs; k++) {
            float sq = spec[k][0] * spec[k][0] + spec[k][1] * spec[k][1];
            p[k] = squared ? sq : magnitude ? sqrtf(sq) : powf(sqrtf(sq), o->power);
        }
        if (p == row)
            continue;
        float *m_out = s->kind == FL_SPEECH_MFCC ? mel : row;
        for (int m = 0; m < n_mels; m++) {
            const float *wt = s->mel_weight + s->mel_at[m], *pk = power + s->mel_first[m];
            float sum = 0;
            for (int i = 0; i < s->mel_count[m]; i++)
                sum += wt[i] * pk[i];
            m_out[m] = sum;
        }
        if (s->kind == FL_SPEECH_MEL)
            continue;
        for (int m = 0; m < n_mels; m++)
            m_out[m] = logf(fmaxf(m_out[m] + o->log_offset, o->log_floor));
        if (s->kind == FL_SPEECH_LOG_MEL)
            continue;
        for (int k = 0; k < bins; k++) {
            const float *d = s->dct + (size_t)k * n_mels;
            float sum = 0;
            for (int m = 0; m < n_mels; m++)
                sum += d[m] * mel[m];
            row[k] = sum;
        }
    }
    fftwf_free(in);
    fftwf_free(spec);
    free(power);
    free(mel);
    *out = result;
    *frames = t_count;
    return FL_OK;
}

fl_status fl_speech_compute(const float *samples, int64_t count, fl_speech_feature kind,
                            const fl_speech_options *opt, float **out, int64_t *frames)
{
    static const char *fn = "fl_speech_compute";
    if (fl_null_args(fn, 3, samples, out, frames))
        return fl_last_status();
    *out = NULL;
    *frames = 0;
    speech_setup s;
    fl_status status = speech_setup_make(fn, opt, kind, &s);
    if (status != FL_OK)
        return status;
    status = speech_setup_run(fn, &s, samples, count, out, frames);
    speech_setup_free(&s);
    return status;
}

/* t as f32 values on the host (malloc'd), or NULL after recording why. */
static float *host_f32(const char *fn, const fl_tensor *t)
{
    fl_scope scope = fl_scope_begin();
    fl_tensor *f = fl_cast(t, FL_F32);
    int64_t n = fl_numel(t);
    float *v = malloc(sizeof *v * (size_t)(n > 0 ? n : 1));
    if (!v)
        fl_error(FL_ERR_MEMORY, fn, "cannot allocate %lld values", (long long)n);
    else if (!f || fl_to_host(f, v, sizeof *v * (size_t)n) != FL_OK) {
        free(v);
        v = NULL;
    }
    fl_scope_end(scope);
    return v;
}

static fl_tensor *speech_tensor_on(const float *values, int64_t rows, int64_t cols, const fl_tensor *like)
{
    int64_t shape[2] = {rows, cols};
    fl_scope scope = fl_scope_begin();
    fl_tensor *t = fl_from_data(values, FL_F32, 2, shape);
    const char *backend = fl_backend_name(like);
    if (t && strcmp(fl_backend_name(t), backend) != 0)
        t = fl_to_backend(t, backend);
    return fl_scope_return(scope, t);
}

fl_tensor *fl_speech_features(const fl_tensor *signal, fl_speech_feature kind, const fl_speech_options *opt)
{
    static const char *fn = "fl_speech_features";
    if (fl_null_args(fn, 1, signal))
        return NULL;
    char d[FL_DESC_SIZE];
    if (fl_ndim(signal) != 1)
        return fl_error(FL_ERR_SHAPE, fn, "signal %s is not 1-D", fl_describe(signal, d));
    if (!fl_dtype_is_float(fl_dtype_of(signal)))
        return fl_error(FL_ERR_DTYPE, fn, "signal %s is not a float tensor", fl_describe(signal, d));
    float *x = host_f32(fn, signal);
    if (!x)
        return NULL;
    float *v;
    int64_t frames;
    fl_tensor *t = NULL;
    speech_setup s;
    if (speech_setup_make(fn, opt, kind, &s) == FL_OK) {
        if (speech_setup_run(fn, &s, x, fl_numel(signal), &v, &frames) == FL_OK) {
            t = speech_tensor_on(v, frames, s.bins, signal);
            free(v);
        }
        speech_setup_free(&s);
    }
    free(x);
    return t;
}

/* ---- normalisation and deltas ---------------------------------------------------- */

void fl_speech_normalize(float *features, int64_t frames, int bins)
{
    if (!features || frames <= 0 || bins <= 0)
        return;
    for (int b = 0; b < bins; b++) {
        double sum = 0, sq = 0;
        for (int64_t t = 0; t < frames; t++)
            sum += features[t * bins + b];
        double mean = sum / (double)frames;
        for (int64_t t = 0; t < frames; t++) {
            double c = features[t * bins + b] - mean;
            sq += c * c;
        }
        double scale = 1.0 / sqrt(sq / (double)frames + 1e-10);
        for (int64_t t = 0; t < frames; t++)
            features[t * bins + b] = (float)((features[t * bins + b] - mean) * scale);
    }
}

void fl_speech_deltas(const float *features, int64_t frames, int bins, float *out)
{
    if (!features || !out || frames <= 0 || bins <= 0)
        return;
    enum { N = 2 };
    const float denom = 10; /* 2 * (1^2 + 2^2) */
    for (int64_t t = 0; t < frames; t++) {
        const float *row[2 * N + 1];
        for (int n = -N; n <= N; n++) {
            int64_t u = t + n < 0 ? 0 : t + n >= frames ? frames - 1 : t + n;
            row[n + N] = features + u * bins;
        }
        for (int b = 0; b < bins; b++) {
            float sum = 0;
            for (int n = 1; n <= N; n++)
                sum += (float)n * (row[N + n][b] - row[N - n][b]);
            out[t * bins + b] = sum / denom;
        }
    }
}

/* A [frames, bins] float tensor's values on the host, or NULL after recording why. */
static float *host_features(const char *fn, const fl_tensor *features)
{
    if (fl_null_args(fn, 1, features))
        return NULL;
    char d[FL_DESC_SIZE];
    if (fl_ndim(features) != 2 || fl_shape(features)[0] == 0 || fl_shape(features)[1] == 0)
        return fl_error(FL_ERR_SHAPE, fn, "features %s are not [frames, bins] with both non-zero",
                        fl_describe(features, d));
    if (!fl_dtype_is_float(fl_dtype_of(features)))
        return fl_error(FL_ERR_DTYPE, fn, "features %s are not a float tensor", fl_describe(features, d));
    return host_f32(fn, features);
}

fl_tensor *fl_speech_normalize_tensor(const fl_tensor *features)
{
    float *v = host_features("fl_speech_normalize_tensor", features);
    if (!v)
        return NULL;
    int64_t frames = fl_shape(features)[0], bins = fl_shape(features)[1];
    fl_speech_normalize(v, frames, (int)bins);
    fl_tensor *t = speech_tensor_on(v, frames, bins, features);
    free(v);
    return t;
}

fl_tensor *fl_speech_deltas_tensor(const fl_tensor *features)
{
    static const char *fn = "fl_speech_deltas_tensor";
    float *v = host_features(fn, features);
    if (!v)
        return NULL;
    int64_t frames = fl_shape(features)[0], bins = fl_shape(features)[1];
    float *d = malloc(sizeof *d * (size_t)(frames * bins));
    fl_tensor *t = NULL;
    if (!d) {
        fl_error(FL_ERR_MEMORY, fn, "cannot allocate %lld values", (long long)(frames * bins));
    } else {
        fl_speech_deltas(v, frames, (int)bins, d);
        t = speech_tensor_on(d, frames, bins, features);
    }
    free(v);
    free(d);
    return t;
}
