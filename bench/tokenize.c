/*
 * Encoding text with a Hugging Face tokenizer.json: fl_tokenizer_encode on every line
 * of a text file (as a batch of short texts is encoded), no special tokens, timed.
 *
 *     bench_tokenize --tokenizer FILE --text FILE [--repeats R]
 *
 * Prints one JSON line: the seconds fl_tokenizer_load took, the median seconds of R
 * passes over all the lines (3), the lines, bytes and ids of one pass, and a checksum
 * of the ids (their sum) to compare with another tokenizer's. Encoding runs on one
 * thread. bench/run_tokenize.py runs it beside the tokenizers library.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flare/tensor.h"
#include "flare/text.h"
#include "cli.h"
#include "input.h"
#include "timing.h"

#define MAX_REPEATS 100

int main(int argc, char **argv)
{
    enum { TOKENIZER = 256, TEXT, REPEATS };
    static const struct option long_options[] = {
        {"tokenizer", required_argument, NULL, TOKENIZER},
        {"text", required_argument, NULL, TEXT},
        {"repeats", required_argument, NULL, REPEATS},
        {0},
    };
    cli c = {.program = "bench_tokenize",
             .usage = "bench_tokenize --tokenizer FILE --text FILE [--repeats R]",
             .options = long_options};
    const char *tokenizer_path = NULL, *text_path = NULL;
    int repeats = 3;
    for (int key; (key = cli_next(&c, argc, argv)) != -1;)
        switch (key) {
        case TOKENIZER: tokenizer_path = optarg; break;
        case TEXT: text_path = optarg; break;
        case REPEATS: repeats = (int)cli_integer(&c, 1, MAX_REPEATS); break;
        }
    if (!tokenizer_path || !text_path)
        cli_fail(&c, "needs --tokenizer FILE and --text FILE");
    size_t size;
    char *text = input_read_all(text_path, &size);
    if (!text)
        cli_fail(&c, "cannot read '%s': %s", text_path, strerror(errno));

    fl_tokenizer *tok = NULL;
    double start = bench_now();
    if (fl_tokenizer_load(tokenizer_path, &tok) != FL_OK) {
        fprintf(stderr, "bench_tokenize: %s\n", fl_last_error());
        return 1;
    }
    double load_seconds = bench_now() - start, times[MAX_REPEATS];
    size_t lines = 0, ids_total = 0;
    uint64_t checksum = 0;
    for (int r = 0; r < repeats; r++) {
        lines = ids_total = 0;
        checksum = 0;
        start = bench_now();
        for (size_t at = 0; at < size;) {
            const char *end = memchr(text + at, '\n', size - at);
            size_t len = end ? (size_t)(end - (text + at)) : size - at;
            int64_t *ids;
            size_t n;
            if (fl_tokenizer_encode(tok, text + at, len, &ids, &n) != FL_OK) {
                fprintf(stderr, "bench_tokenize: line %zu: %s\n", lines + 1, fl_last_error());
                return 1;
            }
            for (size_t i = 0; i < n; i++)
                checksum += (uint64_t)ids[i];
            free(ids);
            ids_total += n;
            lines++;
            at += len + 1;
        }
        times[r] = bench_now() - start;
    }
    printf("{\"load_seconds\": %.4f, \"seconds\": %.5f, \"lines\": %zu, \"bytes\": %zu, \"ids\": %zu, "
           "\"checksum\": %" PRIu64 "}\n",
           load_seconds, bench_median(times, repeats), lines, size, ids_total, checksum);
    fl_tokenizer_free(tok);
    free(text);
    return 0;
}
