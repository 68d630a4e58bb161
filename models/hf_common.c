/* What the Hugging Face loaders share (hf_common.h). */
#include "hf_common.h"

#include <stdio.h>
#include <string.h>

#include "flare/extension.h"

bool hf_config_int(const char *fn, json_t *config, const char *path, const char *key, int64_t *out)
{
    json_t *v = json_object_get(config, key);
    if (!json_is_integer(v) || json_integer_value(v) < 1) {
        fl_error(FL_ERR_VALUE, fn, "%s: \"%s\" must be a positive integer%s", path, key,
                 v ? "" : ", and it is missing");
        return false;
    }
    *out = json_integer_value(v);
    return true;
}

bool hf_config_unquantized(const char *fn, json_t *config, const char *path)
{
    json_t *q = json_object_get(config, "quantization_config");
    if (!q || json_is_null(q))
        return true;
    const char *method = json_string_value(json_object_get(q, "quant_method"));
    fl_error(FL_ERR_VALUE, fn,
             "%s: \"quantization_config\" (%s) names a quantized checkpoint: Flare loads floating-point weights only",
             path, method ? method : "no quant_method");
    return false;
}

json_t *hf_config_open(const char *fn, const char *path)
{
    json_error_t error;
    json_t *config = json_load_file(path, 0, &error);
    if (config)
        return config;
    FILE *f = fopen(path, "rb");
    if (!f)
        return fl_error(FL_ERR_IO, fn, "%s: cannot be opened", path);
    fclose(f);
    return fl_error(FL_ERR_VALUE, fn, "%s: not valid JSON at line %d, column %d: %s", path, error.line, error.column,
                    error.text);
}

fl_tensor *hf_tensor(const char *fn, const char *path, const fl_tensor_map *file, const char *hf, int ndim,
                     const int64_t *shape)
{
    fl_tensor *t = fl_tensor_map_contains(file, hf) ? fl_tensor_map_get(file, hf) : NULL;
    if (!t)
        return fl_error(FL_ERR_VALUE, fn, "%s: the tensor \"%s\" is missing", path, hf);
    fl_dtype dtype = fl_dtype_of(t);
    if (dtype != FL_F32 && dtype != FL_F64 && dtype != FL_F16 && dtype != FL_BF16)
        return fl_error(FL_ERR_DTYPE, fn, "%s: the tensor \"%s\" is not floating point (%s)", path, hf,
                        fl_dtype_name(dtype));
    bool fits = fl_ndim(t) == ndim;
    for (int i = 0; fits && i < ndim; i++)
        fits = fl_dim(t, i) == shape[i];
    if (!fits) {
        char got[FL_DESC_SIZE], want[FL_DESC_SIZE + 64];
        int n = snprintf(want, sizeof want, "[");
        for (int i = 0; i < ndim; i++)
            n += snprintf(want + n, sizeof want - (size_t)n, "%s%lld", i ? ", " : "", (long long)shape[i]);
        snprintf(want + n, sizeof want - (size_t)n, "]");
        return fl_error(FL_ERR_SHAPE, fn, "%s: the tensor \"%s\" has shape %s, expected %s", path, hf,
                        fl_describe(t, got), want);
    }
    return dtype == FL_F32 ? t : fl_cast(t, FL_F32);
}

static bool exists(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f)
        fclose(f);
    return f != NULL;
}

/* The tensors of a checkpoint split into shards, as model.safetensors.index.json lists
 * them ("weight_map": tensor name -> shard file in the same directory), merged into
 * one map. Every listed tensor must be in its shard; a shard's name is a plain file
 * name, never a path out of the directory. */
static fl_tensor_map *load_shards(const char *fn, const char *dir, const char *index_path)
{
    json_t *index = hf_config_open(fn, index_path);
    if (!index)
        return NULL;
    json_t *map = json_object_get(index, "weight_map");
    fl_tensor_map *all = NULL;
    if (!json_is_object(map) || json_object_size(map) == 0) {
        fl_error(FL_ERR_VALUE, fn, "%s: \"weight_map\" must be a non-empty object of tensor names to files",
                 index_path);
        goto done;
    }
    all = fl_tensor_map_create();
    const char *name;
    json_t *file;
    json_object_foreach(map, name, file)
    {
        if (fl_tensor_map_contains(all, name))
            continue; /* loaded with an earlier shard */
        const char *shard = json_string_value(file);
        if (!shard || !*shard || strchr(shard, '/') || strcmp(shard, "..") == 0) {
            fl_error(FL_ERR_VALUE, fn, "%s: the file of \"%s\" must be a file name in the directory", index_path,
                     name);
            goto fail;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, shard);
        fl_tensor_map *part = NULL;
        if (fl_load_safetensors(path, &part) != FL_OK)
            goto fail;
        /* Take every tensor the index puts in this shard; one listed there but absent is
         * a damaged download. */
        const char *other;
        json_t *other_file;
        bool ok = true;
        json_object_foreach(map, other, other_file)
        {
            if (!ok || !json_is_string(other_file) || strcmp(json_string_value(other_file), shard) != 0)
                continue;
            if (!fl_tensor_map_contains(part, other)) {
                fl_error(FL_ERR_VALUE, fn, "%s: the tensor \"%s\" is listed in %s but missing from it", index_path,
                         other, shard);
                ok = false;
            } else if (fl_tensor_map_set(all, other, fl_tensor_map_get(part, other)) != FL_OK) {
                ok = false;
            }
        }
        fl_tensor_map_free(part);
        if (!ok)
            goto fail;
    }
    goto done;
fail:
    fl_tensor_map_free(all);
    all = NULL;
done:
    json_decref(index);
    return all;
}

fl_tensor_map *hf_open_weights(const char *fn, const char *dir, char *path, size_t path_size)
{
    snprintf(path, path_size, "%s/model.safetensors", dir);
    if (exists(path)) {
        fl_tensor_map *file = NULL;
        return fl_load_safetensors(path, &file) == FL_OK ? file : NULL;
    }
    snprintf(path, path_size, "%s/model.safetensors.index.json", dir);
    if (exists(path))
        return load_shards(fn, dir, path);
    const char *others[] = {"pytorch_model.bin", "tf_model.h5", "flax_model.msgpack"};
    for (size_t i = 0; i < sizeof others / sizeof *others; i++) {
        char other[4096];
        snprintf(other, sizeof other, "%s/%s", dir, others[i]);
        if (exists(other))
            return fl_error(FL_ERR_IO, fn,
                            "%s holds %s but no model.safetensors: Flare reads only safetensors (transformers "
                            "writes it with save_pretrained(dir, safe_serialization=True))",
                            dir, others[i]);
    }
    snprintf(path, path_size, "%s/model.safetensors", dir);
    return fl_error(FL_ERR_IO, fn, "%s: cannot be opened, and there is no model.safetensors.index.json beside it",
                    path);
}

/* Whether config's model needs at most twice the values the checkpoint at path holds
 * (hf_load). */
static bool file_can_fill(const char *fn, const char *path, const fl_tensor_map *file, const void *config,
                          hf_count_fn count_parameters)
{
    double held = 0, needed = count_parameters(config);
    for (size_t i = 0; i < fl_tensor_map_count(file); i++)
        held += (double)fl_numel(fl_tensor_map_get(file, fl_tensor_map_name_at(file, i)));
    if (needed <= 2 * held)
        return true;
    fl_error(FL_ERR_VALUE, fn,
             "%s holds %.0f values, but the model of config.json has %.4g parameters, more than twice as many: the "
             "config does not belong to these weights",
             path, held, needed);
    return false;
}

fl_status hf_load(const char *fn, const char *dir, void *config, hf_read_config_fn read_config,
                  hf_count_fn count_parameters, hf_build_fn build, hf_map_fn map_weights, fl_module **model)
{
    if (fl_null_args(fn, 2, dir, model))
        return fl_last_status();
    *model = NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (!read_config(path, config))
        return fl_last_status();
    fl_tensor_map *file = hf_open_weights(fn, dir, path, sizeof path);
    if (!file)
        return fl_last_status();
    if (!file_can_fill(fn, path, file, config, count_parameters)) {
        fl_tensor_map_free(file);
        return fl_last_status();
    }
    /* Every parameter is overwritten below: building without initializing them spares
     * drawing as many random values as the checkpoint holds (and the memory for them),
     * and leaves the global generator as it was. */
    bool initializing = fl_nn_set_initialization(false);
    fl_module *m = build(config);
    fl_nn_set_initialization(initializing);
    fl_tensor_map *expected = fl_tensor_map_create(), *values = fl_tensor_map_create();
    fl_scope scope = fl_scope_begin();
    bool ok = m && expected && values && fl_module_state_dict(m, expected) == FL_OK &&
              map_weights(path, file, config, expected, values) && fl_module_load_state_dict(m, values, true) == FL_OK;
    fl_scope_end(scope);
    fl_tensor_map_free(file);
    fl_tensor_map_free(expected);
    fl_tensor_map_free(values);
    if (!ok) {
        fl_module_release(m);
        if (fl_last_status() == FL_OK)
            fl_error(FL_ERR_MEMORY, fn, "out of memory");
        return fl_last_status();
    }
    fl_module_train(m, false);
    *model = m;
    return FL_OK;
}
