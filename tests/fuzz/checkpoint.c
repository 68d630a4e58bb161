/* fl_checkpoint_load on any bytes, into a small model with an Adam optimizer: the
 * safetensors reader, then the checks of names, shapes and dtypes against the model's
 * state dict and the optimizer's, and the generator state in the metadata. The model
 * is made once; a checkpoint that loads replaces its state, as in training. */
#include <stdlib.h>

#include "flare/io.h"
#include "flare/nn.h"
#include "flare/optim.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static fl_module *model;
    static fl_optimizer *optimizer;
    fuzz_setup();
    if (!model) {
        model = fl_nn_sequential(FL_MODULES(fl_nn_linear(3, 2, true), fl_nn_relu(), fl_nn_linear(2, 1, false)));
        fl_parameters *params = fl_module_parameters(model);
        optimizer = params ? fl_adam(params->items, params->count, &FL_ADAM_DEFAULTS) : NULL;
        fl_parameters_free(params);
        if (!optimizer)
            abort();
    }
    fl_tensor_map *file;
    fl_status status = fl_checkpoint_load(fuzz_file(data, size), model, optimizer, &file);
    fuzz_check_error(status != FL_OK);
    fl_tensor_map_free(file);
    return 0;
}
