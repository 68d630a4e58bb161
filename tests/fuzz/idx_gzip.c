/* fl_load_idx on any bytes gzipped: the IDX reader's gzip path over any content, which
 * mutating compressed bytes seldom reaches (they mostly break the stream's checksum).
 * The input is compressed in two members when it is long enough, as `cat a.gz b.gz`. */
#include <stdlib.h>
#include <zlib.h>

#include "flare/data.h"
#include "fuzz.h"

/* Appends data gzipped, as one member, to out at *used. */
static void deflate_member(const uint8_t *data, size_t size, uint8_t *out, size_t capacity, size_t *used)
{
    z_stream z = {0};
    if (deflateInit2(&z, 1, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        abort();
    z.next_in = (Bytef *)(uintptr_t)data;
    z.avail_in = (uInt)size;
    z.next_out = out + *used;
    z.avail_out = (uInt)(capacity - *used);
    if (deflate(&z, Z_FINISH) != Z_STREAM_END)
        abort();
    *used = capacity - z.avail_out;
    deflateEnd(&z);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_setup();
    size_t first = size > 64 ? size / 2 : size;
    size_t capacity = compressBound((uLong)size) + 64, used = 0;
    uint8_t *gz = malloc(capacity);
    if (!gz)
        abort();
    deflate_member(data, first, gz, capacity, &used);
    if (first < size)
        deflate_member(data + first, size - first, gz, capacity, &used);
    fl_tensor *t = fl_load_idx(fuzz_file(gz, used));
    free(gz);
    fuzz_check_error(!t);
    fl_release(t);
    return 0;
}
