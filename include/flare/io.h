/*
 * Tensor files: named collections of tensors, read and written in the safetensors
 * format (https://huggingface.co/docs/safetensors), so that checkpoints move freely
 * between Flare, PyTorch, NumPy and the Hugging Face tools.
 *
 * A safetensors file is an 8-byte little-endian header length N, N bytes of JSON
 * ({"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
 * with an optional "__metadata__" object of string values), then the tensors' bytes,
 * row-major and little-endian, at offsets relative to the end of the header.
 *
 * Errors follow tensor.h: a non-zero fl_status and a message (fl_last_error) naming
 * the function and the file. FL_ERR_IO means the system refused (a missing file, a
 * directory that cannot be written); FL_ERR_VALUE means the file is not valid
 * safetensors, and the message gives the byte offset or the tensor's name (for a
 * file of another kind, it says so and shows the first bytes); FL_ERR_DTYPE a dtype Flare lacks (I16, F8_E4M3, ...); FL_ERR_SHAPE more than
 * FL_MAX_DIMS dimensions.
 */
#ifndef FLARE_IO_H
#define FLARE_IO_H

#include <stdbool.h>
#include <stddef.h>

#include "flare/tensor.h"
#include "flare/tensor_map.h" /* fl_tensor_map */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- safetensors ------------------------------------------------------------------- */

/* Writes the map to path atomically: into a new file beside it, flushed to disk,
 * then renamed over path. On any failure the temporary file is removed and a file
 * already at path is left as it was: path never holds a partly written file.
 *
 * The header lists the tensors in the map's order, with the metadata first; their
 * bytes are laid out by decreasing element size (stable), so that every tensor
 * starts at a multiple of its element size. The header is padded with spaces to a
 * multiple of 8 bytes, as the reference writer does. */
fl_status fl_save_safetensors(const char *path, const fl_tensor_map *map);

/* Reads path into a new map (*out, to free with fl_tensor_map_free), with the
 * tensors on the default backend in the header's order. The file is validated as
 * strictly as the reference reader does: the header's length and JSON, every dtype
 * and shape, and data offsets that cover the data exactly, without gaps or
 * overlaps, in a file of exactly that size; bool values must be 0 or 1. On error
 * *out is NULL. */
fl_status fl_load_safetensors(const char *path, fl_tensor_map **out);

/* ---- training checkpoints -------------------------------------------------------- */

typedef struct fl_module fl_module;       /* include/flare/nn.h */
typedef struct fl_optimizer fl_optimizer; /* include/flare/optim.h */

/*
 * A checkpoint is one safetensors file: the model's state dict under PyTorch's names
 * (unprefixed, so `model.load_state_dict(safetensors.torch.load_file(path))` reads a
 * file saved without an optimizer), the optimizer's state under "optimizer." (in
 * PyTorch's names: "optimizer.state.0.momentum_buffer", ...), and in the metadata the
 * random generator's state and the caller's key/value strings (metadata: key, value,
 * ..., NULL; may be NULL), such as the epoch. It is written atomically: a crash
 * leaves the previous checkpoint whole. optimizer may be NULL.
 *
 * Loading restores the model (strictly: every name must match), the optimizer's state
 * if optimizer is given, and the generator, so training resumed from a checkpoint
 * draws the same dropout masks and shuffles and computes the same losses as a run
 * that never stopped. Without an optimizer (to evaluate, or to start training anew),
 * the weights alone are needed: a plain state dict, such as PyTorch's
 * safetensors.torch.save_file(model.state_dict(), path) or fl_save_weights writes,
 * loads too, and the generator is restored only if the file holds its state; names
 * under "optimizer." are skipped. *file (if file is not NULL) receives the file's map,
 * for the caller's metadata; free it with fl_tensor_map_free. Nothing is changed on
 * error.
 */
fl_status fl_checkpoint_save(const char *path, const fl_module *model, const fl_optimizer *optimizer,
                             const char *const *metadata);
fl_status fl_checkpoint_load(const char *path, fl_module *model, fl_optimizer *optimizer, fl_tensor_map **file);

/* Writes the model's state dict alone, as safetensors.torch.save_file does (metadata
 * {"format": "pt"} and the caller's key/value strings, ..., NULL; may be NULL), so
 * that PyTorch's strict model.load_state_dict(safetensors.torch.load_file(path))
 * takes it as it is. Atomic, as fl_save_safetensors. fl_checkpoint_load reads it back
 * without an optimizer. */
fl_status fl_save_weights(const char *path, const fl_module *model, const char *const *metadata);

#ifdef __cplusplus
}
#endif

#endif
