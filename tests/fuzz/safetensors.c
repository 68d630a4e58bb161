/* fl_load_safetensors on any bytes: the length prefix, the JSON header (jansson and
 * Flare's checks of it), the data offsets and the values. A file that loads is saved
 * and loaded again, and must give the same tensors. */
#include <stdlib.h>
#include <string.h>

#include "flare/io.h"
#include "fuzz.h"

static int same(const fl_tensor_map *a, const fl_tensor_map *b)
{
    if (fl_tensor_map_count(a) != fl_tensor_map_count(b))
        return 0;
    for (size_t i = 0; i < fl_tensor_map_count(a); i++) {
        const fl_tensor *x = fl_tensor_map_tensor_at(a, i), *y = fl_tensor_map_tensor_at(b, i);
        if (strcmp(fl_tensor_map_name_at(a, i), fl_tensor_map_name_at(b, i)) != 0 || fl_dtype_of(x) != fl_dtype_of(y) ||
            fl_ndim(x) != fl_ndim(y) || fl_numel(x) != fl_numel(y))
            return 0;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_setup();
    fl_tensor_map *map;
    fl_status status = fl_load_safetensors(fuzz_file(data, size), &map);
    fuzz_check_error(status != FL_OK);
    if (status != FL_OK)
        return 0;
    /* What Flare read, it writes back in a form it reads again. */
    fl_tensor_map *again = NULL;
    status = fl_save_safetensors(fuzz_path(1), map);
    if (status == FL_OK)
        status = fl_load_safetensors(fuzz_path(1), &again);
    if (status != FL_OK || !same(map, again))
        abort();
    fl_tensor_map_free(again);
    fl_tensor_map_free(map);
    return 0;
}
