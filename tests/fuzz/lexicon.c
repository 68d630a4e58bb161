/* fl_lexicon_load on any bytes as a wav2letter lexicon file (word, then its tokens),
 * over the tokens _ | a b c d e. A lexicon that loads decodes fixed emissions by the
 * lexicon beam search (with a silence token and without), which either finds words
 * (known word ids) or reports that no hypothesis ends at a word boundary. */
#include <math.h>
#include <stdlib.h>

#include "flare/decoder.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_setup();
    static const char *const names[] = {"_", "|", "a", "b", "c", "d", "e"};
    enum { TOKENS = 7, FRAMES = 6 };
    fl_lexicon *lex;
    fl_status status = fl_lexicon_load(fuzz_file(data, size), names, TOKENS, &lex);
    fuzz_check_error(status != FL_OK);
    if (status != FL_OK)
        return 0;
    float e[FRAMES * TOKENS];
    for (int t = 0; t < FRAMES; t++)
        for (int k = 0; k < TOKENS; k++)
            e[t * TOKENS + k] = (float)log((1.0 + (t * 3 + k * 5) % 7) / 28.0);
    for (int silence = -1; silence <= 1; silence += 2) {
        fl_ctc_beam_options o;
        fl_ctc_beam_options_default(&o);
        o.silence = silence;
        o.beam_size = 8;
        fl_ctc_result r;
        status = fl_ctc_beam_search(e, FRAMES, TOKENS, lex, NULL, &o, &r);
        fuzz_check_error(status != FL_OK);
        for (int64_t i = 0; status == FL_OK && i < r.count; i++)
            if (!fl_lexicon_word(lex, r.ids[i]))
                abort();
        fl_ctc_result_free(&r);
    }
    fl_lexicon_free(lex);
    return 0;
}
