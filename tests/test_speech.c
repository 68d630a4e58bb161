/* Speech: audio files written here and read back (WAV, FLAC, OGG), broken files,
 * mix-down and resampling; features against librosa and torch.stft with torchaudio's
 * formulas (fixtures: tests/fixtures/gen_speech.py), and the batch on threads. */
#include <math.h>
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
    assert_fails_status(fl_audio_read(tmp_dir, 0, &a), FL_ERR_IO, tmp_dir);
    assert_fails_status(fl_audio_write_wav(tmp_file("no/such/dir.wav"), x, 10, 1, 16000, FL_WAV_FLOAT), FL_ERR_IO,
                        "dir.wav");
    assert_fails_status(fl_audio_write_wav(whole, x, 10, 0, 16000, FL_WAV_FLOAT), FL_ERR_VALUE, "channels");
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
    };
    return cmocka_run_group_tests_name("speech", tests, make_tmp, remove_tmp);
}
