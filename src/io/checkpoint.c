/* Training checkpoints: a model's state dict, an optimizer's state and the random
 * generator's, in one safetensors file; and weights files, the state dict alone
 * (include/flare/io.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flare/extension.h"
#include "flare/io.h"
#include "flare/nn.h"
#include "flare/optim.h"

#define OPTIMIZER_PREFIX "optimizer."
#define RANDOM_SEED_KEY "flare.random_seed"
#define RANDOM_COUNTER_KEY "flare.random_counter"

/* The caller's key/value strings, ..., NULL (metadata may be NULL), into map. */
static fl_status add_metadata(const char *fn, fl_tensor_map *map, const char *const *metadata)
{
    fl_status status = FL_OK;
    for (int i = 0; status == FL_OK && metadata && metadata[i]; i += 2) {
        if (!metadata[i + 1])
            status = (fl_error(FL_ERR_VALUE, fn, "metadata key '%s' has no value", metadata[i]), FL_ERR_VALUE);
        else if (strncmp(metadata[i], "flare.", 6) == 0) /* the generator's state: overwritten, the file is lost */
            status = (fl_error(FL_ERR_VALUE, fn,
                               "metadata key '%s' is reserved: keys starting with 'flare.' hold Flare's own state",
                               metadata[i]),
                      FL_ERR_VALUE);
        else
            status = fl_tensor_map_set_metadata(map, metadata[i], metadata[i + 1]);
    }
    return status;
}

fl_status fl_save_weights(const char *path, const fl_module *model, const char *const *metadata)
{
    if (fl_null_args("fl_save_weights", 2, path, model))
        return fl_last_status();
    fl_tensor_map *map = fl_tensor_map_create();
    if (!map)
        return fl_last_status();
    fl_status status = fl_module_state_dict(model, map);
    /* What safetensors.torch.save_file writes. */
    if (status == FL_OK)
        status = fl_tensor_map_set_metadata(map, "format", "pt");
    if (status == FL_OK)
        status = add_metadata("fl_save_weights", map, metadata);
    if (status == FL_OK)
        status = fl_save_safetensors(path, map);
    fl_tensor_map_free(map);
    return status;
}

fl_status fl_checkpoint_save(const char *path, const fl_module *model, const fl_optimizer *optimizer,
                             const char *const *metadata)
{
    if (fl_null_args("fl_checkpoint_save", 2, path, model))
        return fl_last_status();
    fl_tensor_map *map = fl_tensor_map_create();
    if (!map)
        return fl_last_status();
    fl_status status = fl_module_state_dict(model, map);
    if (status == FL_OK && optimizer)
        status = fl_optimizer_state(optimizer, map, OPTIMIZER_PREFIX);
    uint64_t seed, counter;
    fl_random_state(&seed, &counter);
    char seed_text[24], counter_text[24];
    snprintf(seed_text, sizeof seed_text, "%" PRIu64, seed);
    snprintf(counter_text, sizeof counter_text, "%" PRIu64, counter);
    if (status == FL_OK)
        status = fl_tensor_map_set_metadata(map, RANDOM_SEED_KEY, seed_text);
    if (status == FL_OK)
        status = fl_tensor_map_set_metadata(map, RANDOM_COUNTER_KEY, counter_text);
    if (status == FL_OK)
        status = add_metadata("fl_checkpoint_save", map, metadata);
    if (status == FL_OK)
        status = fl_save_safetensors(path, map);
    fl_tensor_map_free(map);
    return status;
}

/* Decimal digits only, below 2^64: strtoull alone takes a sign (negating "-3") and
 * saturates what overflows. */
static bool parse_u64(const char *text, uint64_t *out)
{
    if (!text || !*text)
        return false;
    uint64_t v = 0;
    for (const char *c = text; *c; c++)
        if (*c < '0' || *c > '9' || __builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *c - '0', &v))
            return false;
    *out = v;
    return true;
}

fl_status fl_checkpoint_load(const char *path, fl_module *model, fl_optimizer *optimizer, fl_tensor_map **file)
{
    const char *fn = "fl_checkpoint_load";
    if (file)
        *file = NULL;
    if (fl_null_args(fn, 2, path, model))
        return fl_last_status();
    fl_tensor_map *map = NULL, *weights = fl_tensor_map_create(), *before = fl_tensor_map_create();
    fl_status status = weights && before ? fl_load_safetensors(path, &map) : fl_last_status();
    uint64_t seed = 0, counter = 0;
    const char *seed_text = status == FL_OK ? fl_tensor_map_metadata(map, RANDOM_SEED_KEY) : NULL;
    const char *counter_text = status == FL_OK ? fl_tensor_map_metadata(map, RANDOM_COUNTER_KEY) : NULL;
    bool has_generator = seed_text || counter_text;
    /* Resuming needs the generator; evaluating (no optimizer) needs only the weights,
     * so a plain state dict (PyTorch's, fl_save_weights') loads then. */
    if (status == FL_OK && !has_generator && optimizer)
        status = (fl_error(FL_ERR_VALUE, fn, "%s: not a Flare checkpoint (no generator state in its metadata), so "
                           "training cannot resume from it; without an optimizer its weights alone load", path),
                  FL_ERR_VALUE);
    else if (status == FL_OK && has_generator && (!parse_u64(seed_text, &seed) || !parse_u64(counter_text, &counter)))
        status = (fl_error(FL_ERR_VALUE, fn,
                           "%s: the generator state (" RANDOM_SEED_KEY " '%.40s', " RANDOM_COUNTER_KEY
                           " '%.40s') is not two whole numbers below 2^64",
                           path, seed_text, counter_text),
                  FL_ERR_VALUE);
    for (size_t i = 0; status == FL_OK && i < fl_tensor_map_count(map); i++) {
        const char *name = fl_tensor_map_name_at(map, i);
        if (strncmp(name, OPTIMIZER_PREFIX, strlen(OPTIMIZER_PREFIX)) != 0)
            status = fl_tensor_map_set(weights, name, fl_tensor_map_tensor_at(map, i));
    }
    /* Values are immutable, so the model's current state dict is a backup that costs
     * references only: if the optimizer refuses its state, the model goes back. */
    if (status == FL_OK)
        status = fl_module_state_dict(model, before);
    if (status == FL_OK)
        status = fl_module_load_state_dict(model, weights, true);
    if (status == FL_OK && optimizer) {
        status = fl_optimizer_load_state(optimizer, map, OPTIMIZER_PREFIX);
        if (status != FL_OK)
            fl_module_load_state_dict(model, before, true);
    }
    if (status == FL_OK && has_generator)
        fl_set_random_state(seed, counter);
    if (status != FL_OK && fl_last_status() != FL_OK && !strstr(fl_last_error(), path)) {
        /* Name the file in errors that come from the layers below. */
        char message[512];
        snprintf(message, sizeof message, "%s", fl_last_error());
        fl_clear_error();
        fl_error(status, fn, "%s: %s", path, message);
    }
    fl_tensor_map_free(weights);
    fl_tensor_map_free(before);
    if (status == FL_OK && file)
        *file = map;
    else
        fl_tensor_map_free(map);
    return status;
}
