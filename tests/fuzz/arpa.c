/* fl_ngram_load_arpa on any bytes as an ARPA file: the \data\ header, the sections and
 * their counts, numbers, words, duplicates and contexts. A model that loads scores a
 * fixed text and the input itself, word by word from every kind of state: scores must
 * be numbers (finite, or -inf where the file says so), never garbage. */
#include <math.h>
#include <stdlib.h>

#include "flare/decoder.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_setup();
    fl_ngram *lm;
    fl_status status = fl_ngram_load_arpa(fuzz_file(data, size), &lm);
    fuzz_check_error(status != FL_OK);
    if (status != FL_OK)
        return 0;
    static const char text[] = "<s> a b </s>\n\nb a b\tc <unk> x y\r\n a";
    fl_ngram_stats stats;
    if (fl_ngram_evaluate(lm, text, sizeof text - 1, &stats) != FL_OK || isnan(stats.log10_prob))
        abort();
    if (fl_ngram_evaluate(lm, data, size < 4096 ? size : 4096, &stats) != FL_OK || isnan(stats.log10_prob))
        abort();
    /* every word after every word, from the null state and from <s> */
    int64_t v = fl_ngram_vocab_size(lm);
    for (int32_t a = -1; a < v && a < 64; a++) {
        fl_ngram_state s, t;
        fl_ngram_begin_state(lm, &s);
        double x = fl_ngram_score(lm, &s, a, &s);
        fl_ngram_null_state(&t);
        x += fl_ngram_score(lm, &t, a, &t);
        for (int32_t b = -1; b < v && b < 64; b++) {
            fl_ngram_state u;
            x += fl_ngram_score(lm, &s, b, &u) + fl_ngram_score(lm, &t, b, &u);
            if (u.length < 0 || u.length > (fl_ngram_order(lm) > 1 ? fl_ngram_order(lm) - 1 : 0))
                abort();
        }
        if (isnan(x))
            abort();
    }
    fl_ngram_free(lm);
    return 0;
}
