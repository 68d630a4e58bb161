/* fl_tokenizer_load on any bytes as a tokenizer.json: jansson, then the model, vocab,
 * merges, added tokens, normalizer and pre-tokenizer checks. A tokenizer that loads
 * encodes a fixed text (odd bytes included) and the input itself, and decodes what it
 * encoded: neither may fail, but for a byte or character the vocabulary has no token
 * for (GPT-NeoX's has none for the bytes valid UTF-8 never holds; SentencePiece's
 * without byte fallback nor an unknown token none for characters it never saw). */
#include <stdlib.h>
#include <string.h>

#include "flare/text.h"
#include "fuzz.h"

static void encode_decode(const fl_tokenizer *tok, const void *text, size_t size)
{
    int64_t *ids;
    size_t n, len;
    char *back;
    fl_status status = fl_tokenizer_encode(tok, text, size, &ids, &n);
    if (status == FL_ERR_VALUE && strstr(fl_last_error(), "has no token")) {
        /* a vocabulary without the bytes valid UTF-8 never holds, given one; or a
         * character one without a token, byte tokens or an unknown token for a
         * character */
        fl_clear_error();
        return;
    }
    if (status != FL_OK)
        abort();
    if (fl_tokenizer_decode(tok, ids, n, &back, &len) != FL_OK)
        abort();
    free(ids), free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_setup();
    fl_tokenizer *tok;
    fl_status status = fl_tokenizer_load(fuzz_file(data, size), &tok);
    fuzz_check_error(status != FL_OK);
    if (status != FL_OK)
        return 0;
    static const char text[] = "The cat's [CLS] <|endoftext|>  caf\xC3\xA9 \xE4\xB8\xAD\x80\xFF\0 x\t\n";
    encode_decode(tok, text, sizeof text - 1);
    encode_decode(tok, data, size < 4096 ? size : 4096);
    fl_tokenizer_free(tok);
    return 0;
}
