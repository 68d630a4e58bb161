/*
 * What the Hugging Face loaders (hf.c, hf_bert.c) share: opening config.json, taking a
 * checked tensor out of model.safetensors, and the load itself (config, file, model,
 * state dict). Errors are recorded under the loader's own name, fn.
 */
#ifndef FLARE_MODELS_HF_COMMON_H
#define FLARE_MODELS_HF_COMMON_H

#include <jansson.h>

#include "flare/io.h"

#include "models.h"

/* config[key] as a positive integer; absent or of another kind is an error. */
bool hf_config_int(const char *fn, json_t *config, const char *path, const char *key, int64_t *out);

/* False, with an error naming the method, when config describes a quantized checkpoint
 * ("quantization_config": GPTQ, AWQ, bitsandbytes ...): its tensors are packed integers
 * and scales that Flare's float models do not compute with. */
bool hf_config_unquantized(const char *fn, json_t *config, const char *path);

/* The parsed config.json at path; NULL after an error (cannot be opened, not JSON). */
json_t *hf_config_open(const char *fn, const char *path);

/* file[hf], which must be floating point of shape `shape`, as f32; NULL after an error. */
fl_tensor *hf_tensor(const char *fn, const char *path, const fl_tensor_map *file, const char *hf, int ndim,
                     const int64_t *shape);

/* The tensors of dir's checkpoint: model.safetensors, or the shards that
 * model.safetensors.index.json lists, merged. path receives the file that errors about
 * a tensor should name. A directory holding only another format (pytorch_model.bin) is
 * an error saying so. NULL after an error. */
fl_tensor_map *hf_open_weights(const char *fn, const char *dir, char *path, size_t path_size);

/* Reads path (config.json) into config; false after an error. */
typedef bool (*hf_read_config_fn)(const char *path, void *config);
/* A model of config; NULL after an error. */
typedef fl_module *(*hf_build_fn)(const void *config);
/* How many values the parameters of config's model hold (in double: a config.json may
 * describe any size). */
typedef double (*hf_count_fn)(const void *config);
/* The values of the model's parameters, under Flare's names, from the file's. */
typedef bool (*hf_map_fn)(const char *path, const fl_tensor_map *file, const void *config,
                          const fl_tensor_map *expected, fl_tensor_map *values);

/* dir's config.json read into config, then the model built and given the weights of
 * dir's model.safetensors, in eval mode, into *model (NULL after an error). A config
 * whose model needs more than twice the values the checkpoint holds is refused before
 * anything is built: every parameter comes from tensors of the file, so such a config
 * does not belong to it, and building first would allocate whatever size it names.
 * Below that, the model is built and the tensors' names and shapes say precisely what
 * is missing. The model's
 * initial values come from a stream of their own, so the global generator is left as it
 * was. */
fl_status hf_load(const char *fn, const char *dir, void *config, hf_read_config_fn read_config,
                  hf_count_fn count_parameters, hf_build_fn build, hf_map_fn map_weights, fl_module **model);

#endif
