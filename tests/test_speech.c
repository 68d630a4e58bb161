/* Speech: audio files written here and read back (WAV, FLAC, OGG), broken files,
 * mix-down and resampling; features against librosa and torch.stft with torchaudio's
 * formulas (fixtures: tests/fixtures/gen_speech.py), and the batch on threads. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sndfile.h>

#include "flare/speech.h"
#include "support.h"

static char tmp_dir[] = "/tmp/flare_speech_XXXXXX";

static const char *tmp_file(const char *name)
{
    static char path[4][512];
    static int next;
    char *p = path[next++ % 4];
    snprintf(p, sizeof path[0], "%s/%s", tmp_dir, name);
    return p;
}

static void sine(float *x, int64_t n, double freq, double rate, double amp)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(amp * sin(2 * M_PI * freq * (double)i / rate));
}

static void write_file(const char *path, const void *bytes, size_t size)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, size, f), size);
    fclose(f);
}

static long file_size(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return (long)st.st_size;
}

static void wav_round_trip(void **state)
{
    enum { N = 1000 };
    float x[N];
    sine(x, N, 440, 16000, 0.9);
    const char *path = tmp_file("float.wav");
    assert_int_equal(fl_audio_write_wav(path, x, N, 1, 16000, FL_WAV_FLOAT), FL_OK);
    assert_int_equal(access(tmp_file("float.wav.tmp"), F_OK), -1); /* renamed, not left */
    fl_audio a;
    assert_int_equal(fl_audio_read(path, 0, &a), FL_OK);
    assert_int_equal(a.count, N);
    assert_int_equal(a.sample_rate, 16000);
    assert_memory_equal(a.samples, x, sizeof x);
    fl_audio_free(&a);

    path = tmp_file("pcm16.wav");
    assert_int_equal(fl_audio_write_wav(path, x, N, 1, 8000, FL_WAV_PCM16), FL_OK);
    assert_int_equal(file_size(path), 44 + 2 * N);
    assert_int_equal(fl_audio_read(path, 0, &a), FL_OK);
    assert_int_equal(a.count, N);
    assert_int_equal(a.sample_rate, 8000);
    for (int i = 0; i < N; i++)
        assert_true(fabsf(a.samples[i] - x[i]) <= 1.5f / 32768);
    fl_audio_free(&a);

    /* the tensor form, on the default backend */
    fl_tensor *t = fl_audio_load(path, 0);
    assert_shape(t, N);
    assert_dtype(t, FL_F32);
    assert_string_equal(fl_backend_name(t), fl_backend_name(fl_scalar(0, FL_F32)));
}

/* FLAC and OGG/Vorbis, written with libsndfile itself. */
static void write_with_sndfile(const char *path, int format, const float *x, int64_t n, int rate)
{
    SF_INFO info = {.samplerate = rate, .channels = 1, .format = format};
    SNDFILE *f = sf_open(path, SFM_WRITE, &info);
    assert_non_null(f);
    assert_int_equal(sf_writef_float(f, x, n), n);
    assert_int_equal(sf_close(f), 0);
}

static void flac_and_ogg(void **state)
{
    enum { N = 22050 };
    static float x[N];
    sine(x, N, 1000, 22050, 0.5);
    const char *flac = tmp_file("a.flac"), *ogg = tmp_file("a.ogg");
    write_with_sndfile(flac, SF_FORMAT_FLAC | SF_FORMAT_PCM_16, x, N, 22050);
    write_with_sndfile(ogg, SF_FORMAT_OGG | SF_FORMAT_VORBIS, x, N, 22050);
    fl_audio a;
    assert_int_equal(fl_audio_read(flac, 0, &a), FL_OK);
    assert_int_equal(a.count, N);
    assert_int_equal(a.sample_rate, 22050);
    for (int i = 0; i < N; i++)
        assert_true(fabsf(a.samples[i] - x[i]) <= 1.5f / 32768);
    fl_audio_free(&a);
    /* lossy: the same sine within a few hundredths */
    assert_int_equal(fl_audio_read(ogg, 0, &a), FL_OK);
    assert_int_equal(a.count, N);
    double err = 0;
    for (int i = 1000; i < N - 1000; i++)
        err = fmax(err, fabs(a.samples[i] - x[i]));
    assert_true(err < 0.05);
    fl_audio_free(&a);
}

static void stereo_mixes_down_to_the_mean(void **state)
{
    enum { N = 500 };
    float lr[2 * N], l[N], r[N];
    sine(l, N, 300, 16000, 0.5);
    sine(r, N, 700, 16000, 0.25);
    for (int i = 0; i < N; i++) {
        lr[2 * i] = l[i];
        lr[2 * i + 1] = r[i];
    }
    const char *path = tmp_file("stereo.wav");
    assert_int_equal(fl_audio_write_wav(path, lr, N, 2, 16000, FL_WAV_FLOAT), FL_OK);
    fl_audio a;
    assert_int_equal(fl_audio_read(path, 0, &a), FL_OK);
    assert_int_equal(a.count, N);
    for (int i = 0; i < N; i++)
        assert_float_equal(a.samples[i], (l[i] + r[i]) / 2, 1e-7);
    fl_audio_free(&a);

    /* longer than one read, and three channels: the buffer grows, chunk by chunk */
    enum { M = 150001, C = 3 };
    float *many = malloc(sizeof *many * M * C);
    for (int64_t i = 0; i < M * C; i++)
        many[i] = (float)((i * 7919) % 2001 - 1000) / 1024;
    path = tmp_file("three.wav");
    assert_int_equal(fl_audio_write_wav(path, many, M, C, 16000, FL_WAV_FLOAT), FL_OK);
    assert_int_equal(fl_audio_read(path, 0, &a), FL_OK);
    assert_int_equal(a.count, M);
    for (int i = 0; i < M; i++)
        assert_float_equal(a.samples[i], ((double)many[C * i] + many[C * i + 1] + many[C * i + 2]) / 3, 1e-7);
    fl_audio_free(&a);
    free(many);
}

/* The amplitude and frequency of a sine by least squares against sin and cos at
 * frequency f, over the middle of x. */
static double amplitude_at(const float *x, int64_t n, double f, double rate)
{
    double s = 0, c = 0;
    int64_t from = n / 4, to = 3 * n / 4;
    for (int64_t i = from; i < to; i++) {
        s += x[i] * sin(2 * M_PI * f * (double)i / rate);
        c += x[i] * cos(2 * M_PI * f * (double)i / rate);
    }
    return 2 * sqrt(s * s + c * c) / (double)(to - from);
}

static void resampling_keeps_frequency_and_amplitude(void **state)
{
    enum { N = 44100 };
    static float x[N];
    sine(x, N, 440, 44100, 0.8);
    const char *path = tmp_file("44k.wav");
    assert_int_equal(fl_audio_write_wav(path, x, N, 1, 44100, FL_WAV_FLOAT), FL_OK);
    fl_audio a;
    assert_int_equal(fl_audio_read(path, 16000, &a), FL_OK);
    assert_int_equal(a.sample_rate, 16000);
    assert_int_equal(a.count, 16000);
    /* the sine is at 440 Hz of the new rate, with its amplitude: nothing at 430 or 450 */
    assert_float_equal(amplitude_at(a.samples, a.count, 440, 16000), 0.8, 1e-3);
    assert_true(amplitude_at(a.samples, a.count, 450, 16000) < 0.02);
    /* and sample by sample in the middle, away from the filter's edges */
    for (int64_t i = 1000; i < a.count - 1000; i++)
        assert_float_equal(a.samples[i], 0.8 * sin(2 * M_PI * 440 * (double)i / 16000), 2e-3);
    fl_audio_free(&a);

    /* a tone above the new Nyquist frequency is filtered out */
    sine(x, N, 12000, 44100, 0.8);
    float *y;
    int64_t m;
    assert_int_equal(fl_audio_resample(x, N, 44100, 16000, &y, &m), FL_OK);
    assert_int_equal(m, 16000);
    double peak = 0;
    for (int64_t i = 1000; i < m - 1000; i++)
        peak = fmax(peak, fabs(y[i]));
    assert_true(peak < 1e-3);
    free(y);

    /* upsampling */
    sine(x, 8000, 1000, 8000, 0.5);
    assert_int_equal(fl_audio_resample(x, 8000, 8000, 48000, &y, &m), FL_OK);
    assert_int_equal(m, 48000);
    assert_float_equal(amplitude_at(y, m, 1000, 48000), 0.5, 1e-3);
    free(y);

    assert_fails_status(fl_audio_resample(x, 10, 0, 16000, &y, &m), FL_ERR_VALUE, "0 Hz");
    assert_fails_status(fl_audio_resample(x, 10, 1000, 1000000, &y, &m), FL_ERR_VALUE, "factor");
}

static void broken_files_are_clear_errors(void **state)
{
    fl_audio a;
    const char *missing = tmp_file("missing.wav");
    assert_fails_status(fl_audio_read(missing, 0, &a), FL_ERR_IO, missing);
    assert_null(a.samples);
    assert_fails(fl_audio_load(missing, 16000), FL_ERR_IO, "missing.wav");

    /* garbage */
    unsigned char junk[4096];
    uint32_t s = 12345;
    for (size_t i = 0; i < sizeof junk; i++) {
        s = s * 1664525u + 1013904223u;
        junk[i] = (unsigned char)(s >> 24);
    }
    const char *garbage = tmp_file("garbage.wav");
    write_file(garbage, junk, sizeof junk);
    assert_fails_status(fl_audio_read(garbage, 0, &a), FL_ERR_IO, garbage);

    /* an empty file, and a WAV of no samples */
    const char *empty = tmp_file("empty.wav");
    write_file(empty, "", 0);
    assert_fails_status(fl_audio_read(empty, 0, &a), FL_ERR_IO, empty);
    float x[4000];
    sine(x, 4000, 440, 16000, 0.5);
    const char *none = tmp_file("none.wav");
    assert_int_equal(fl_audio_write_wav(none, x, 0, 1, 16000, FL_WAV_PCM16), FL_OK);
    assert_fails_status(fl_audio_read(none, 0, &a), FL_ERR_IO, "no audio samples");

    /* a WAV cut short: half its data gone */
    const char *whole = tmp_file("whole.wav"), *cut = tmp_file("cut.wav");
    assert_int_equal(fl_audio_write_wav(whole, x, 4000, 1, 16000, FL_WAV_PCM16), FL_OK);
    long size = file_size(whole);
    unsigned char *bytes = malloc((size_t)size);
    FILE *f = fopen(whole, "rb");
    assert_int_equal(fread(bytes, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    write_file(cut, bytes, (size_t)size / 2);
    assert_fails_status(fl_audio_read(cut, 0, &a), FL_ERR_IO, "truncated");
    /* only the header */
    write_file(cut, bytes, 44);
    assert_fails_status(fl_audio_read(cut, 0, &a), FL_ERR_IO, cut);
    /* cut inside the header */
    write_file(cut, bytes, 20);
    assert_fails_status(fl_audio_read(cut, 0, &a), FL_ERR_IO, cut);
    free(bytes);

    /* a FLAC file cut short */
    static float y[16000];
    sine(y, 16000, 440, 16000, 0.5);
    const char *flac = tmp_file("cut.flac");
    write_with_sndfile(flac, SF_FORMAT_FLAC | SF_FORMAT_PCM_16, y, 16000, 16000);
    size = file_size(flac);
    bytes = malloc((size_t)size);
    f = fopen(flac, "rb");
    assert_int_equal(fread(bytes, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    write_file(flac, bytes, (size_t)size / 2);
    free(bytes);
    assert_fails_status(fl_audio_read(flac, 0, &a), FL_ERR_IO, flac);

    /* bad arguments; a directory */
    assert_fails_status(fl_audio_read(NULL, 0, &a), FL_ERR_NULL, "fl_audio_read");
    assert_fails_status(fl_audio_read(whole, -5, &a), FL_ERR_VALUE, "-5");
    assert_fails_status(fl_audio_read(whole, 16000 * 300, &a), FL_ERR_VALUE, "whole.wav: cannot resample 16000 Hz");
    assert_fails_status(fl_audio_read(tmp_dir, 0, &a), FL_ERR_IO, tmp_dir);
    assert_fails_status(fl_audio_write_wav(tmp_file("no/such/dir.wav"), x, 10, 1, 16000, FL_WAV_FLOAT), FL_ERR_IO,
                        "dir.wav");
    assert_fails_status(fl_audio_write_wav(whole, x, 10, 0, 16000, FL_WAV_FLOAT), FL_ERR_VALUE, "channels");
}

/* ---- features against the fixtures ------------------------------------------------ */

static float *fixture_values(const char *name, int64_t *n)
{
    fl_tensor *t = fixture("speech.bin", name);
    assert_non_null(t);
    *n = fl_numel(t);
    float *v = malloc(sizeof *v * (size_t)*n);
    assert_int_equal(fl_to_host(t, v, sizeof *v * (size_t)*n), FL_OK);
    return v;
}

static fl_speech_options config(const char *name)
{
    fl_speech_options o = fl_speech_defaults();
    if (strcmp(name, "slaney") == 0) {
        o.n_fft = 512, o.hop_length = 128, o.win_length = 400, o.window = FL_WINDOW_HAMMING, o.n_mels = 40;
        o.f_min = 20, o.f_max = 7600, o.mel_scale = FL_MEL_SLANEY, o.mel_norm = FL_MEL_NORM_SLANEY, o.power = 1;
        o.n_mfcc = 13;
    } else if (strcmp(name, "nocenter") == 0) {
        o.sample_rate = 8000, o.n_fft = 256, o.hop_length = 80, o.win_length = 256, o.center = false;
        o.n_mels = 23, o.log_offset = 0, o.log_floor = 1e-5f, o.n_mfcc = 13;
    }
    return o;
}

/* Fails unless got[frames, bins] matches the fixture within atol + rtol * |expected|.
 * Linear features (relative_to_max): atol is scale times the fixture's largest
 * magnitude, since their smallest values carry the rounding of the largest.
 * Logarithmic ones: atol is scale, except where the value lies more than ln(1e6)
 * (60 dB of energy) below the fixture's largest, where deep applies: the spectrum is
 * computed in float32, whose rounding (about 1e-7 of a frame's largest bins) is a
 * large part of an energy a million times smaller, and the log magnifies it. */
static void assert_matches(const float *got, int64_t frames, int bins, const char *name, double rtol, double scale,
                           bool relative_to_max, double deep)
{
    int64_t n;
    float *ref = fixture_values(name, &n);
    fl_tensor *t = fixture("speech.bin", name);
    assert_int_equal(fl_shape(t)[0], frames);
    assert_int_equal(fl_shape(t)[1], bins);
    double max = relative_to_max ? 0 : -INFINITY, worst = 0;
    for (int64_t i = 0; i < n; i++)
        max = relative_to_max ? fmax(max, fabs(ref[i])) : fmax(max, ref[i]);
    int64_t at = -1;
    for (int64_t i = 0; i < n; i++) {
        double atol = relative_to_max ? scale * max : deep > 0 && ref[i] < max - log(1e6) ? deep : scale;
        double excess = fabs(got[i] - ref[i]) - (atol + rtol * fabs(ref[i]));
        if (excess > worst)
            worst = excess, at = i;
    }
    if (at >= 0)
        fail_msg("%s: frame %lld bin %lld: %.9g, expected %.9g", name, (long long)(at / bins), (long long)(at % bins),
                 got[at], ref[at]);
    free(ref);
}

/* Whether gen_speech.py stores feature kind of signal s under configuration c (its
 * STORED and SPECTRA). */
static bool stored(int c, int s, fl_speech_feature kind)
{
    static const char *const configs[] = {"default", "slaney", "nocenter"};
    if (kind == FL_SPEECH_POWER || kind == FL_SPEECH_MAGNITUDE) {
        static const int spectra[][2] = {{0, 0}, {0, 2}, {1, 1}, {2, 2}}; /* {config, signal} */
        bool any = false;
        for (int i = 0; i < 4; i++)
            any |= spectra[i][0] == c && spectra[i][1] == s;
        return any && (kind == FL_SPEECH_POWER || strcmp(configs[c], "default") == 0);
    }
    return kind != FL_SPEECH_MEL || strcmp(configs[c], "nocenter") != 0;
}

static void features_match_the_references(void **state)
{
    static const char *const configs[] = {"default", "slaney", "nocenter"};
    static const char *const signals[] = {"chirp", "noise", "speech"};
    static const struct {
        fl_speech_feature kind;
        const char *key;
        bool linear;
    } kinds[] = {{FL_SPEECH_POWER, "power", true},     {FL_SPEECH_MAGNITUDE, "magnitude", true},
                 {FL_SPEECH_MEL, "mel", true},         {FL_SPEECH_LOG_MEL, "logmel", false},
                 {FL_SPEECH_MFCC, "mfcc", false}};
    int checked = 0;
    for (int c = 0; c < 3; c++) {
        fl_speech_options o = config(configs[c]);
        for (int s = 0; s < 3; s++) {
            char name[64];
            snprintf(name, sizeof name, "%s%s", signals[s], o.sample_rate == 8000 ? "_8k" : "");
            int64_t count;
            float *x = fixture_values(name, &count);
            for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
                char key[96];
                snprintf(key, sizeof key, "%s_%s_%s", configs[c], signals[s], kinds[k].key);
                if (!stored(c, s, kinds[k].kind))
                    continue;
                float *f;
                int64_t frames;
                assert_int_equal(fl_speech_compute(x, count, kinds[k].kind, &o, &f, &frames), FL_OK);
                assert_int_equal(frames, fl_speech_frames(count, &o));
                /* the chirp's bins away from its tone lie 200 dB below it, where the
                 * float32 spectrum's rounding shows through the log and, mixed by the
                 * DCT, in every MFCC of the frame */
                bool chirp = s == 0;
                double scale = chirp && kinds[k].kind == FL_SPEECH_MFCC ? 1e-3 : 1e-4;
                double deep = kinds[k].kind == FL_SPEECH_LOG_MEL ? 1e-2 : 0;
                assert_matches(f, frames, fl_speech_bins(kinds[k].kind, &o), key, 1e-4, scale, kinds[k].linear, deep);
                checked++;
                free(f);
            }
            free(x);
        }
    }
    assert_int_equal(checked, 30);

    /* normalisation and deltas of the reference log-mel */
    for (int s = 0; s < 3; s++) {
        char key[96];
        snprintf(key, sizeof key, "default_%s_logmel", signals[s]);
        int64_t n;
        float *logmel = fixture_values(key, &n);
        int bins = 80;
        int64_t frames = n / bins;
        float *d = malloc(sizeof *d * (size_t)n);
        fl_speech_deltas(logmel, frames, bins, d);
        snprintf(key, sizeof key, "default_%s_deltas", signals[s]);
        assert_matches(d, frames, bins, key, 1e-5, 1e-5, false, 0);
        fl_speech_normalize(logmel, frames, bins);
        snprintf(key, sizeof key, "default_%s_norm", signals[s]);
        assert_matches(logmel, frames, bins, key, 1e-5, 1e-5, false, 0);
        free(d);
        free(logmel);
    }

    /* the filterbank itself */
    fl_speech_options o = config("slaney");
    float *fb;
    assert_int_equal(fl_speech_mel_filters(&o, &fb), FL_OK);
    assert_matches(fb, o.n_fft / 2 + 1, o.n_mels, "slaney_fb", 1e-5, 1e-6, true, 0);
    free(fb);
}

static void feature_tensors_come_back_on_the_signal_backend(void **state)
{
    int64_t count;
    float *x = fixture_values("speech", &count);
    fl_speech_options o = fl_speech_defaults();
    float *ref;
    int64_t frames;
    assert_int_equal(fl_speech_compute(x, count, FL_SPEECH_LOG_MEL, &o, &ref, &frames), FL_OK);
    int64_t shape[1] = {count};
    const char *backends[] = {fl_backend_name(fl_scalar(0, FL_F32)), support_other_backend()};
    for (int b = 0; b < 2; b++) {
        fl_tensor *signal = fl_to_backend(fl_from_data(x, FL_F32, 1, shape), backends[b]);
        fl_tensor *t = fl_speech_features(signal, FL_SPEECH_LOG_MEL, &o);
        assert_shape(t, frames, 80);
        assert_dtype(t, FL_F32);
        assert_string_equal(fl_backend_name(t), backends[b]);
        float *v = malloc(sizeof *v * (size_t)(frames * 80));
        assert_int_equal(fl_to_host(t, v, sizeof *v * (size_t)(frames * 80)), FL_OK);
        assert_memory_equal(v, ref, sizeof *v * (size_t)(frames * 80));

        /* deltas and normalisation of the tensor, on its backend, as on the host */
        fl_tensor *d = fl_speech_deltas_tensor(t), *nrm = fl_speech_normalize_tensor(t);
        assert_string_equal(fl_backend_name(d), backends[b]);
        assert_string_equal(fl_backend_name(nrm), backends[b]);
        float *hd = malloc(sizeof *hd * (size_t)(frames * 80));
        fl_speech_deltas(ref, frames, 80, hd);
        assert_int_equal(fl_to_host(d, v, sizeof *v * (size_t)(frames * 80)), FL_OK);
        assert_memory_equal(v, hd, sizeof *v * (size_t)(frames * 80));
        memcpy(hd, ref, sizeof *hd * (size_t)(frames * 80));
        fl_speech_normalize(hd, frames, 80);
        assert_int_equal(fl_to_host(nrm, v, sizeof *v * (size_t)(frames * 80)), FL_OK);
        assert_memory_equal(v, hd, sizeof *v * (size_t)(frames * 80));
        free(hd);
        free(v);

        /* an f64 signal gives the same features */
        fl_tensor *t64 = fl_speech_features(fl_cast(signal, FL_F64), FL_SPEECH_LOG_MEL, NULL);
        assert_true(support_same_bytes(fl_to_backend(t64, backends[b]), t));
    }
    /* normalised features have mean 0 and variance 1 per bin */
    fl_tensor *nrm = fl_speech_normalize_tensor(fl_speech_features(fl_from_data(x, FL_F32, 1, shape), FL_SPEECH_MFCC,
                                                                   NULL));
    assert_shape(nrm, frames, 40);
    fl_tensor *mean = fl_mean(nrm, FL_AXES(0), false), *var = fl_var(nrm, FL_AXES(0), 0, false);
    float mv[40];
    assert_int_equal(fl_to_host(mean, mv, sizeof mv), FL_OK);
    for (int i = 0; i < 40; i++)
        assert_float_equal(mv[i], 0, 1e-5);
    assert_int_equal(fl_to_host(var, mv, sizeof mv), FL_OK);
    for (int i = 0; i < 40; i++)
        assert_float_equal(mv[i], 1, 1e-4);
    free(ref);
    free(x);
}

static void bad_signals_and_options(void **state)
{
    float x[1000] = {0};
    float *out;
    int64_t frames;
    fl_speech_options o = fl_speech_defaults();
    /* too short for the reflection padding, or for one frame without it */
    assert_fails_status(fl_speech_compute(x, 200, FL_SPEECH_POWER, &o, &out, &frames), FL_ERR_VALUE,
                        "200 samples are too few to reflect-pad by n_fft / 2 = 200");
    assert_null(out);
    assert_int_equal(fl_speech_compute(x, 201, FL_SPEECH_POWER, &o, &out, &frames), FL_OK);
    assert_int_equal(frames, 2);
    free(out);
    o.center = false;
    assert_fails_status(fl_speech_compute(x, 399, FL_SPEECH_LOG_MEL, &o, &out, &frames), FL_ERR_VALUE,
                        "fewer than n_fft = 400");
    assert_int_equal(fl_speech_frames(400, &o), 1);
    assert_int_equal(fl_speech_frames(559, &o), 1);
    assert_int_equal(fl_speech_frames(560, &o), 2);
    o.center = true;
    assert_int_equal(fl_speech_frames(16000, &o), 101); /* torch.stft's count */
    assert_int_equal(fl_speech_frames(16000, NULL), 101);

    fl_speech_options b = fl_speech_defaults();
    b.win_length = 500;
    assert_fails_status(fl_speech_compute(x, 1000, FL_SPEECH_POWER, &b, &out, &frames), FL_ERR_VALUE,
                        "win_length 500 is not within [1, n_fft = 400]");
    b = fl_speech_defaults(), b.hop_length = 0;
    assert_fails_status(fl_speech_compute(x, 1000, FL_SPEECH_POWER, &b, &out, &frames), FL_ERR_VALUE, "hop_length 0");
    b = fl_speech_defaults(), b.f_max = 9000, b.f_min = 9500;
    assert_fails_status(fl_speech_compute(x, 1000, FL_SPEECH_MEL, &b, &out, &frames), FL_ERR_VALUE, "f_min");
    b = fl_speech_defaults(), b.n_mfcc = 81;
    assert_fails_status(fl_speech_compute(x, 1000, FL_SPEECH_MFCC, &b, &out, &frames), FL_ERR_VALUE,
                        "n_mfcc 81 is not within [1, n_mels = 80]");
    b = fl_speech_defaults(), b.log_offset = -1;
    assert_fails_status(fl_speech_compute(x, 1000, FL_SPEECH_LOG_MEL, &b, &out, &frames), FL_ERR_VALUE,
                        "log_offset");
    b = fl_speech_defaults(), b.sample_rate = 0;
    assert_fails_status(fl_speech_compute(x, 1000, FL_SPEECH_POWER, &b, &out, &frames), FL_ERR_VALUE,
                        "sample_rate 0");
    assert_fails_status(fl_speech_compute(x, 1000, (fl_speech_feature)9, NULL, &out, &frames), FL_ERR_VALUE,
                        "feature kind 9");
    assert_fails_status(fl_speech_compute(NULL, 1000, FL_SPEECH_POWER, NULL, &out, &frames), FL_ERR_NULL,
                        "fl_speech_compute");

    /* tensors: not 1-D, not float */
    assert_fails(fl_speech_features(fl_zeros(FL_F32, FL_SHAPE(2, 500)), FL_SPEECH_POWER, NULL), FL_ERR_SHAPE,
                 "signal f32[2, 500] is not 1-D");
    assert_fails(fl_speech_features(fl_zeros(FL_I32, FL_SHAPE(500)), FL_SPEECH_POWER, NULL), FL_ERR_DTYPE,
                 "not a float tensor");
    assert_fails(fl_speech_features(fl_zeros(FL_F32, FL_SHAPE(100)), FL_SPEECH_POWER, NULL), FL_ERR_VALUE,
                 "fl_speech_features: 100 samples are too few");
    assert_fails(fl_speech_deltas_tensor(fl_zeros(FL_F32, FL_SHAPE(500))), FL_ERR_SHAPE, "[frames, bins]");
    assert_fails(fl_speech_normalize_tensor(NULL), FL_ERR_NULL, "fl_speech_normalize_tensor");
}

static void batch_on_threads_matches_one_by_one(void **state)
{
    enum { B = 9 };
    float *signals[B];
    int64_t counts[B];
    uint32_t seed = 7;
    for (int i = 0; i < B; i++) {
        counts[i] = 201 + 1777 * i % 9000; /* 201 samples, the fewest, and up */
        signals[i] = malloc(sizeof(float) * (size_t)counts[i]);
        for (int64_t j = 0; j < counts[i]; j++) {
            seed = seed * 1664525u + 1013904223u;
            signals[i][j] = (float)((double)(seed >> 8) / (1 << 24) - 0.5) * (float)(i + 1) / B;
        }
    }
    fl_speech_options o = fl_speech_defaults();
    o.n_mels = 64;
    float *out[B], *one;
    int64_t frames[B], n;
    for (int threads = 0; threads <= 4; threads++) {
        assert_int_equal(fl_speech_log_mel_batch((const float *const *)signals, counts, B, &o, threads, out, frames),
                         FL_OK);
        for (int i = 0; i < B; i++) {
            assert_int_equal(fl_speech_compute(signals[i], counts[i], FL_SPEECH_LOG_MEL, &o, &one, &n), FL_OK);
            assert_int_equal(frames[i], n);
            assert_memory_equal(out[i], one, sizeof(float) * (size_t)(n * 64));
            free(one);
            free(out[i]);
        }
    }
    /* more threads than signals, and no signals */
    assert_int_equal(fl_speech_log_mel_batch((const float *const *)signals, counts, 2, &o, 16, out, frames), FL_OK);
    free(out[0]);
    free(out[1]);
    assert_int_equal(fl_speech_log_mel_batch((const float *const *)signals, counts, 0, &o, 2, out, frames), FL_OK);

    /* a signal too short: the error names it, and nothing is returned */
    counts[5] = 100;
    counts[7] = 50;
    assert_fails_status(fl_speech_log_mel_batch((const float *const *)signals, counts, B, &o, 3, out, frames),
                        FL_ERR_VALUE, "fl_speech_log_mel_batch: signal 5: 100 samples are too few");
    for (int i = 0; i < B; i++)
        assert_null(out[i]);
    o.n_mels = 0;
    assert_fails_status(fl_speech_log_mel_batch((const float *const *)signals, counts, B, &o, 3, out, frames),
                        FL_ERR_VALUE, "n_mels 0");
    assert_fails_status(fl_speech_log_mel_batch((const float *const *)signals, counts, B, NULL, -1, out, frames),
                        FL_ERR_VALUE, "threads -1");
    float *third = signals[3];
    signals[3] = NULL;
    assert_fails_status(fl_speech_log_mel_batch((const float *const *)signals, counts, B, NULL, 2, out, frames),
                        FL_ERR_NULL, "signal 3 is NULL");
    signals[3] = third;
    for (int i = 0; i < B; i++)
        free(signals[i]);
}

/* Threads that each compute features with FFT sizes no one has used yet: the plans
 * are made concurrently (under the lock) and the features are those made alone. */
enum { PLAN_THREADS = 4, PLAN_SIGNAL = 3000 };

typedef struct plan_job {
    const float *x;
    int n_fft;
    float *out;
    int64_t frames;
    fl_status status;
} plan_job;

static void *plan_worker(void *arg)
{
    plan_job *job = arg;
    fl_speech_options o = fl_speech_defaults();
    o.n_fft = o.win_length = job->n_fft;
    o.hop_length = 100;
    job->status = fl_speech_compute(job->x, PLAN_SIGNAL, FL_SPEECH_MFCC, &o, &job->out, &job->frames);
    return NULL;
}

static void plans_made_on_several_threads_at_once(void **state)
{
    static float x[PLAN_SIGNAL];
    sine(x, PLAN_SIGNAL, 523, 16000, 0.4);
    plan_job jobs[2 * PLAN_THREADS];
    pthread_t threads[2 * PLAN_THREADS];
    for (int i = 0; i < 2 * PLAN_THREADS; i++) {
        /* sizes unused elsewhere in this program, two threads per size */
        jobs[i] = (plan_job){.x = x, .n_fft = 300 + 2 * (i % PLAN_THREADS) + 1};
        assert_int_equal(pthread_create(&threads[i], NULL, plan_worker, &jobs[i]), 0);
    }
    for (int i = 0; i < 2 * PLAN_THREADS; i++)
        assert_int_equal(pthread_join(threads[i], NULL), 0);
    for (int i = 0; i < 2 * PLAN_THREADS; i++) {
        assert_int_equal(jobs[i].status, FL_OK);
        plan_job alone = {.x = x, .n_fft = jobs[i].n_fft};
        plan_worker(&alone);
        assert_int_equal(alone.status, FL_OK);
        assert_int_equal(alone.frames, jobs[i].frames);
        assert_memory_equal(alone.out, jobs[i].out, sizeof(float) * (size_t)(alone.frames * 40));
        free(alone.out);
        free(jobs[i].out);
    }
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
        scoped_test(wav_round_trip),
        scoped_test(flac_and_ogg),
        scoped_test(stereo_mixes_down_to_the_mean),
        scoped_test(resampling_keeps_frequency_and_amplitude),
        scoped_test(broken_files_are_clear_errors),
        scoped_test(features_match_the_references),
        scoped_test(feature_tensors_come_back_on_the_signal_backend),
        scoped_test(bad_signals_and_options),
        scoped_test(batch_on_threads_matches_one_by_one),
        scoped_test(plans_made_on_several_threads_at_once),
    };
    return cmocka_run_group_tests_name("speech", tests, make_tmp, remove_tmp);
}
