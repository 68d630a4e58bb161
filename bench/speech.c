/*
 * Log-mel throughput of fl_speech_log_mel_batch, timed on request so that
 * bench/run_speech.py can alternate it with librosa and PyTorch call by call.
 *
 *     bench_speech --signals FILE --utterances N --threads T
 *
 * FILE holds N utterances of equal length as raw little-endian f32, one after the
 * other (run_speech.py writes it, so every side computes the same audio). On stdin,
 * each line "time" computes the log-mel of all N on T threads (torchaudio's defaults:
 * 16 kHz, n_fft 400, hop 160, 80 HTK mels, ln(mel + 1e-6)) and answers
 * {"seconds": S, "frames": F} on stdout; EOF ends. One untimed batch first makes the
 * FFT plan.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flare/speech.h"
#include "timing.h"

int main(int argc, char **argv)
{
    const char *path = NULL;
    int n = 0, threads = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--signals") == 0)
            path = argv[i + 1];
        else if (strcmp(argv[i], "--utterances") == 0)
            n = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--threads") == 0)
            threads = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "bench_speech: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (!path || n <= 0 || threads <= 0) {
        fprintf(stderr, "usage: bench_speech --signals FILE --utterances N --threads T\n");
        return 2;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long bytes = ftell(f);
    fseek(f, 0, SEEK_SET);
    int64_t each = bytes / (long)sizeof(float) / n;
    float *all = malloc((size_t)bytes);
    if (!all || each <= 0 || fread(all, 1, (size_t)bytes, f) != (size_t)bytes) {
        fprintf(stderr, "bench_speech: %s: cannot read %d utterances\n", path, n);
        return 1;
    }
    fclose(f);
    const float **signals = malloc(sizeof *signals * (size_t)n);
    int64_t *counts = malloc(sizeof *counts * (size_t)n), *frames = malloc(sizeof *frames * (size_t)n);
    float **out = malloc(sizeof *out * (size_t)n);
    for (int i = 0; i < n; i++) {
        signals[i] = all + (size_t)i * (size_t)each;
        counts[i] = each;
    }
    fl_speech_options o = fl_speech_defaults();
    char line[64];
    for (int first = 1;; first = 0) {
        if (!first && !fgets(line, sizeof line, stdin))
            break;
        double start = bench_now();
        if (fl_speech_log_mel_batch(signals, counts, n, &o, threads, out, frames) != FL_OK) {
            fprintf(stderr, "bench_speech: %s\n", fl_last_error());
            return 1;
        }
        double seconds = bench_now() - start;
        int64_t total = 0;
        for (int i = 0; i < n; i++) {
            total += frames[i];
            free(out[i]);
        }
        if (!first) {
            printf("{\"seconds\": %.9f, \"frames\": %lld}\n", seconds, (long long)total);
            fflush(stdout);
        }
    }
    free(all);
    free(signals);
    free(counts);
    free(frames);
    free(out);
    return 0;
}
