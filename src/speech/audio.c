/*
 * Audio files in and out: libsndfile reads and writes them, libsamplerate resamples.
 */
#define _GNU_SOURCE /* memmem */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <samplerate.h>
#include <sndfile.h>

#include "flare/extension.h"
#include "flare/speech.h"

/* Samples (frames times channels) read per sf_readf_float call: enough to amortise
 * the call, and a small buffer whatever the channel count. */
#define READ_SAMPLES 65536

void fl_audio_free(fl_audio *audio)
{
    if (!audio)
        return;
    free(audio->samples);
    audio->samples = NULL;
    audio->count = 0;
    audio->sample_rate = 0;
}

/* libsndfile accepts a data chunk whose header announces more bytes than the file
 * holds: it reads what is there and notes the mismatch only in its log, as
 * "data : 8000 (should be 3978)" (WAV; "SSND" in AIFF). A file cut short is an error
 * here, so the log is read for that note. (A WAV written to a pipe, its sizes left at
 * 0xFFFFFFFF because the writer could not go back to fill them in, reads as cut short
 * too.) */
static bool header_overstates_data(SNDFILE *f)
{
    char log[8192];
    sf_command(f, SFC_GET_LOG_INFO, log, sizeof log);
    for (const char *line = log; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        bool data = len > 4 && (strncmp(line, "data", 4) == 0 || strncmp(line, "SSND", 4) == 0);
        if (data && memmem(line, len, "should be", 9))
            return true;
    }
    return false;
}

fl_status fl_audio_read(const char *path, int sample_rate, fl_audio *out)
{
    static const char *fn = "fl_audio_read";
    if (fl_null_args(fn, 2, path, out))
        return fl_last_status();
    memset(out, 0, sizeof *out);
    if (sample_rate < 0) {
        fl_error(FL_ERR_VALUE, fn, "%s: sample rate %d is negative", path, sample_rate);
        return FL_ERR_VALUE;
    }
    SF_INFO info = {0};
    SNDFILE *f = sf_open(path, SFM_READ, &info);
    if (!f) {
        fl_error(FL_ERR_IO, fn, "%s: %s", path, sf_strerror(NULL));
        return FL_ERR_IO;
    }
    fl_status status = FL_OK;
    float *mono = NULL, *chunk = NULL;
    if (info.frames <= 0 || info.channels <= 0 || info.samplerate <= 0) {
        fl_error(FL_ERR_IO, fn, "%s: no audio samples (%lld frames, %d channels, %d Hz)", path,
                 (long long)info.frames, info.channels, info.samplerate);
        status = FL_ERR_IO;
        goto done;
    }
    if (sample_rate && (sample_rate > 256.0 * info.samplerate || 256.0 * sample_rate < info.samplerate)) {
        fl_error(FL_ERR_VALUE, fn, "%s: cannot resample %d Hz to %d Hz: the rates must be within a factor of 256",
                 path, info.samplerate, sample_rate);
        status = FL_ERR_VALUE;
        goto done;
    }
    if (header_overstates_data(f)) {
        fl_error(FL_ERR_IO, fn, "%s: truncated: the header announces more audio data than the file holds", path);
        status = FL_ERR_IO;
        goto done;
    }
    /* the buffer grows as frames arrive rather than trusting the header's count, which
     * a corrupt file can make absurd; chunks hold about READ_SAMPLES samples whatever
     * the channel count */
    int64_t capacity = info.frames < READ_SAMPLES ? info.frames : READ_SAMPLES;
    sf_count_t per_read = READ_SAMPLES / info.channels > 0 ? READ_SAMPLES / info.channels : 1;
    mono = malloc((size_t)capacity * sizeof *mono);
    chunk = malloc((size_t)per_read * (size_t)info.channels * sizeof *chunk);
    if (!mono || !chunk)
        goto no_memory;
    int64_t got = 0;
    while (got < info.frames) {
        sf_count_t want = info.frames - got < per_read ? info.frames - got : per_read;
        sf_count_t n = sf_readf_float(f, chunk, want);
        if (sf_error(f) != SF_ERR_NO_ERROR) {
            fl_error(FL_ERR_IO, fn, "%s: at frame %lld: %s", path, (long long)got, sf_strerror(f));
            status = FL_ERR_IO;
            goto done;
        }
        if (n <= 0)
            break;
        if (got + n > capacity) {
            int64_t grown = capacity * 2 < info.frames ? capacity * 2 : info.frames;
            float *bigger = realloc(mono, (size_t)grown * sizeof *mono);
            if (!bigger)
                goto no_memory;
            mono = bigger;
            capacity = grown;
        }
        for (sf_count_t i = 0; i < n; i++) {
            /* the mean in double: 8 channels of f32 sums would otherwise round per channel */
            double sum = 0;
            for (int c = 0; c < info.channels; c++)
                sum += chunk[i * info.channels + c];
            mono[got + i] = (float)(sum / info.channels);
        }
        got += n;
    }
    if (got < info.frames) {
        fl_error(FL_ERR_IO, fn, "%s: truncated: %lld of the %lld frames its header announces", path, (long long)got,
                 (long long)info.frames);
        status = FL_ERR_IO;
        goto done;
    }
    out->samples = mono;
    out->count = got;
    out->sample_rate = info.samplerate;
    mono = NULL;
    if (sample_rate && sample_rate != info.samplerate) {
        float *resampled;
        int64_t count;
        status = fl_audio_resample(out->samples, out->count, info.samplerate, sample_rate, &resampled, &count);
        if (status == FL_OK && count == 0) {
            /* fewer samples than one period of the new rate: nothing is left */
            free(resampled);
            fl_error(FL_ERR_IO, fn, "%s: its %lld samples at %d Hz are no sample at %d Hz", path,
                     (long long)out->count, info.samplerate, sample_rate);
            status = FL_ERR_IO;
        }
        if (status != FL_OK) {
            fl_audio_free(out);
            goto done;
        }
        free(out->samples);
        out->samples = resampled;
        out->count = count;
        out->sample_rate = sample_rate;
    }
    goto done;
no_memory:
    fl_error(FL_ERR_MEMORY, fn, "%s: cannot allocate its %lld frames of %d channels", path, (long long)info.frames,
             info.channels);
    status = FL_ERR_MEMORY;
done:
    free(mono);
    free(chunk);
    sf_close(f);
    return status;
}

fl_tensor *fl_audio_load(const char *path, int sample_rate)
{
    fl_audio a;
    if (fl_audio_read(path, sample_rate, &a) != FL_OK)
        return NULL;
    int64_t shape[1] = {a.count};
    fl_tensor *t = fl_from_data(a.samples, FL_F32, 1, shape);
    fl_audio_free(&a);
    return t;
}

fl_status fl_audio_resample(const float *samples, int64_t count, int from_rate, int to_rate, float **out,
                            int64_t *out_count)
{
    static const char *fn = "fl_audio_resample";
    if (fl_null_args(fn, 3, samples, out, out_count))
        return fl_last_status();
    *out = NULL;
    *out_count = 0;
    double ratio = (double)to_rate / from_rate;
    if (from_rate <= 0 || to_rate <= 0 || count < 0 || ratio > 256 || ratio < 1.0 / 256) {
        fl_error(FL_ERR_VALUE, fn, "%lld samples from %d Hz to %d Hz: rates must be positive and within a factor "
                 "of 256 of each other", (long long)count, from_rate, to_rate);
        return FL_ERR_VALUE;
    }
    int64_t n = from_rate == to_rate ? count : llround((double)count * ratio);
    /* a few frames more than asked for: the converter's count can round up */
    float *buf = malloc(((size_t)n + 16) * sizeof *buf);
    if (!buf) {
        fl_error(FL_ERR_MEMORY, fn, "cannot allocate %lld samples", (long long)n);
        return FL_ERR_MEMORY;
    }
    if (from_rate == to_rate) {
        memcpy(buf, samples, (size_t)count * sizeof *buf);
    } else if (n > 0) {
        SRC_DATA data = {.data_in = samples,
                         .data_out = buf,
                         .input_frames = (long)count,
                         .output_frames = (long)n + 16,
                         .end_of_input = 1,
                         .src_ratio = ratio};
        int err = src_simple(&data, SRC_SINC_BEST_QUALITY, 1);
        if (err) {
            free(buf);
            fl_error(FL_ERR_VALUE, fn, "%lld samples from %d Hz to %d Hz: %s", (long long)count, from_rate, to_rate,
                     src_strerror(err));
            return FL_ERR_VALUE;
        }
        /* the converter may stop a sample or two short of count * ratio: those are
         * the end of the flushed filter's tail, where the signal has ended */
        for (int64_t i = data.output_frames_gen; i < n; i++)
            buf[i] = 0;
    }
    *out = buf;
    *out_count = n;
    return FL_OK;
}

fl_status fl_audio_write_wav(const char *path, const float *samples, int64_t frames, int channels, int sample_rate,
                             fl_wav_format format)
{
    static const char *fn = "fl_audio_write_wav";
    if (fl_null_args(fn, 2, path, samples))
        return fl_last_status();
    if (frames < 0 || channels <= 0 || sample_rate <= 0 || (format != FL_WAV_PCM16 && format != FL_WAV_FLOAT)) {
        fl_error(FL_ERR_VALUE, fn, "%s: %lld frames of %d channels at %d Hz, format %d: counts and rate must be "
                 "positive and the format FL_WAV_PCM16 or FL_WAV_FLOAT", path, (long long)frames, channels,
                 sample_rate, (int)format);
        return FL_ERR_VALUE;
    }
    size_t size = strlen(path) + 32;
    char *tmp = malloc(size);
    if (!tmp) {
        fl_error(FL_ERR_MEMORY, fn, "%s: cannot allocate its temporary name", path);
        return FL_ERR_MEMORY;
    }
    SF_INFO info = {.samplerate = sample_rate,
                    .channels = channels,
                    .format = SF_FORMAT_WAV | (format == FL_WAV_PCM16 ? SF_FORMAT_PCM_16 : SF_FORMAT_FLOAT)};
    int fd = fl_temporary_file(path, tmp, size);
    SNDFILE *f = fd >= 0 ? sf_open_fd(fd, SFM_WRITE, &info, SF_TRUE) : NULL;
    if (!f) {
        if (fd >= 0)
            fl_error(FL_ERR_IO, fn, "%s: %s", tmp, sf_strerror(NULL)), close(fd), unlink(tmp);
        else
            fl_error(FL_ERR_IO, fn, "%s: cannot create a temporary beside it: %s", path, strerror(errno));
        free(tmp);
        return FL_ERR_IO;
    }
    /* libsndfile scales floats by 32767 when writing 16-bit PCM unless told to clip;
     * clipping keeps a full-scale 1.0 from wrapping around */
    sf_command(f, SFC_SET_CLIPPING, NULL, SF_TRUE);
    sf_count_t written = sf_writef_float(f, samples, frames);
    fl_status status = FL_OK;
    if (written != frames) {
        fl_error(FL_ERR_IO, fn, "%s: wrote %lld of %lld frames: %s", tmp, (long long)written, (long long)frames,
                 sf_strerror(f));
        status = FL_ERR_IO;
    }
    if (sf_close(f) != 0 && status == FL_OK) {
        fl_error(FL_ERR_IO, fn, "%s: closing failed", tmp);
        status = FL_ERR_IO;
    }
    if (status == FL_OK && rename(tmp, path) != 0) {
        fl_error(FL_ERR_IO, fn, "%s: cannot rename %s over it", path, tmp);
        status = FL_ERR_IO;
    }
    if (status != FL_OK)
        remove(tmp);
    free(tmp);
    return status;
}
