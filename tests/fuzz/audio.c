/* fl_audio_read on any bytes as an audio file: libsndfile's readers of every format
 * it knows (WAV, AIFF, AU, FLAC, OGG, ...), then Flare's checks (no samples, cut
 * short), the mix-down and a resampling to 16 kHz. Audio that reads is turned into
 * log-mel features, which may not fail once the signal is long enough. */
#include <stdlib.h>

#include "flare/speech.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_setup();
    const char *path = fuzz_file(data, size);
    fl_audio a;
    for (int resample = 0; resample < 2; resample++) {
        fl_status status = fl_audio_read(path, resample ? 16000 : 0, &a);
        fuzz_check_error(status != FL_OK);
        if (status != FL_OK)
            continue;
        if (a.count <= 0 || !a.samples || a.sample_rate <= 0)
            abort();
        fl_speech_options o = fl_speech_defaults();
        o.sample_rate = resample ? 16000 : a.sample_rate;
        float *features;
        int64_t frames;
        status = fl_speech_compute(a.samples, a.count, FL_SPEECH_LOG_MEL, &o, &features, &frames);
        if (a.count > o.n_fft / 2 && o.sample_rate >= 2 && status != FL_OK)
            abort();
        fuzz_check_error(status != FL_OK);
        if (status == FL_OK)
            free(features);
        fl_audio_free(&a);
    }
    return 0;
}
