/* fl_load_idx on any bytes: the IDX header, the values, and the gzip stream of a file
 * that starts with gzip's magic bytes (the seeds hold both). */
#include "flare/data.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_setup();
    fl_tensor *t = fl_load_idx(fuzz_file(data, size));
    fuzz_check_error(!t);
    fl_release(t);
    return 0;
}
