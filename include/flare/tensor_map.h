/*
 * Named tensor collections: what a file of tensors holds (io.h reads and writes them
 * as safetensors) and what a module's or an optimizer's state dict is (nn.h, optim.h).
 * In memory only; part of the tensor layer, so that nn and optim need nothing from io.
 *
 * Errors follow tensor.h: NULL or a non-zero fl_status, and a message (fl_last_error).
 */
#ifndef FLARE_TENSOR_MAP_H
#define FLARE_TENSOR_MAP_H

#include <stdbool.h>
#include <stddef.h>

#include "flare/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Tensors by name, in the order they were first set, with string metadata (key/value
 * pairs, also in order). Names and metadata are UTF-8. */
typedef struct fl_tensor_map fl_tensor_map;

fl_tensor_map *fl_tensor_map_create(void);
/* Releases the map's references to its tensors. */
void fl_tensor_map_free(fl_tensor_map *map);

/* Stores a reference to tensor (retained) under name, replacing (and releasing)
 * a tensor already there, which keeps its position. The name "__metadata__" is
 * reserved by the format. A NULL tensor is an error, or, if an error is already
 * recorded, the propagation of an earlier failure (the map is unchanged). */
fl_status fl_tensor_map_set(fl_tensor_map *map, const char *name, const fl_tensor *tensor);
/* The tensor stored under name, borrowed: it stays valid while the map holds it
 * (fl_retain it to keep it longer). NULL and an error if there is none. */
fl_tensor *fl_tensor_map_get(const fl_tensor_map *map, const char *name);
bool fl_tensor_map_contains(const fl_tensor_map *map, const char *name);
size_t fl_tensor_map_count(const fl_tensor_map *map);
/* The i-th name and tensor (borrowed), or NULL and an error if i >= count. */
const char *fl_tensor_map_name_at(const fl_tensor_map *map, size_t i);
fl_tensor *fl_tensor_map_tensor_at(const fl_tensor_map *map, size_t i);

/* Copies key and value; replaces the value of an existing key. */
fl_status fl_tensor_map_set_metadata(fl_tensor_map *map, const char *key, const char *value);
/* The value of key, or NULL (and no error: metadata is optional) if there is none. */
const char *fl_tensor_map_metadata(const fl_tensor_map *map, const char *key);
size_t fl_tensor_map_metadata_count(const fl_tensor_map *map);
/* The i-th key, or NULL and an error if i >= the metadata count. */
const char *fl_tensor_map_metadata_key_at(const fl_tensor_map *map, size_t i);

#ifdef __cplusplus
}
#endif

#endif
