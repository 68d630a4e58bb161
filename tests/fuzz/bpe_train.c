/* fl_tokenizer_train_bpe on any bytes as the training text, which must succeed: byte-level
 * BPE takes every byte sequence. The first byte sets how many merges to learn (0 to
 * 255). The trained tokenizer encodes the text and a fixed one, and decoding gives
 * back exactly the bytes encoded, every id within the vocabulary. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flare/tensor.h"
#include "flare/text.h"
#include "fuzz.h"

/* Training time grows with the text; longer inputs say nothing new. */
#define MAX_TEXT 8192

static void round_trip(const fl_tokenizer *tok, const void *text, size_t size)
{
    int64_t *ids;
    size_t n, len;
    char *back;
    if (fl_tokenizer_encode(tok, text, size, &ids, &n) != FL_OK ||
        fl_tokenizer_decode(tok, ids, n, &back, &len) != FL_OK) {
        fprintf(stderr, "a trained tokenizer failed: %s\n", fl_last_error());
        abort();
    }
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= fl_tokenizer_vocab_size(tok)) {
            fprintf(stderr, "id %lld is outside the vocabulary of %lld\n", (long long)ids[i],
                    (long long)fl_tokenizer_vocab_size(tok));
            abort();
        }
    if (len != size || (size && memcmp(back, text, size) != 0)) {
        fprintf(stderr, "decoding did not give back the %zu bytes encoded (%zu bytes)\n", size, len);
        abort();
    }
    free(ids), free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_setup();
    if (size > MAX_TEXT)
        return 0;
    fl_tokenizer *tok;
    if (fl_tokenizer_train_bpe(data, size, 256 + (size ? data[0] : 0), 1, &tok) != FL_OK) {
        fprintf(stderr, "training on %zu bytes failed: %s\n", size, fl_last_error());
        abort();
    }
    static const char text[] = "The cat's hat, the cat's bat.  caf\xC3\xA9 \xE4\xB8\xAD\x80\xFF\0 x\t\n";
    round_trip(tok, data, size);
    round_trip(tok, text, sizeof text - 1);
    fl_tokenizer_free(tok);
    return 0;
}
