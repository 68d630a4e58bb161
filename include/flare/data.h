/*
 * Flare's data layer: reading datasets from disk into tensors.
 *
 * For now it reads IDX files, the format of MNIST and Fashion-MNIST. Datasets that
 * batch, shuffle and transform samples will be declared here as well.
 */
#ifndef FLARE_DATA_H
#define FLARE_DATA_H

#include <stdbool.h>

#include "flare/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- IDX files ------------------------------------------------------------------ */

/*
 * Reads an IDX file: two zero bytes, a type code, the number of dimensions, each
 * dimension as a big-endian u32, then the values, big-endian, row-major. A file that
 * starts with the gzip magic bytes (1f 8b) is decompressed as it is read, whatever
 * its name.
 *
 * Type codes become dtypes as follows. Flare has no i8 or i16, so those widen to
 * i32 (exactly; the values are unchanged):
 *     0x08 u8 -> FL_U8     0x09 i8  -> FL_I32    0x0B i16 -> FL_I32
 *     0x0C i32 -> FL_I32   0x0D f32 -> FL_F32    0x0E f64 -> FL_F64
 *
 * The file must hold exactly the values its header describes: trailing bytes are an
 * error, as they are for NumPy's and torchvision's readers, since they mean that the
 * header and the data disagree. Headers of more than FL_MAX_DIMS dimensions, or that
 * describe more than FL_IDX_MAX_BYTES of values, are rejected. Errors (status
 * FL_ERR_IO) name the file and, but for a file that cannot be opened, the byte offset
 * where reading failed; offsets in a gzipped file count decompressed bytes, and
 * errors in the gzip stream itself also give the compressed offset. Memory grows with
 * the data the file really holds, whatever its header promises.
 */
fl_tensor *fl_load_idx(const char *path);

#define FL_IDX_MAX_BYTES ((uint64_t)1 << 40)

/* Where Debian's dataset-fashion-mnist package installs Fashion-MNIST. */
#define FL_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/*
 * Loads the training (train-*) or test (t10k-*) split of MNIST or Fashion-MNIST from
 * dir: images-idx3-ubyte as u8 [N, rows, cols] (28 x 28 in both datasets) and
 * labels-idx1-ubyte as u8 [N], each plain or with a .gz suffix (the plain file is
 * preferred when both exist). Fails unless the images are a 3-D u8 array, the labels
 * a 1-D u8 array, and their counts agree. On failure both outputs are set to NULL.
 */
fl_status fl_load_mnist(const char *dir, bool train, fl_tensor **images, fl_tensor **labels);

#ifdef __cplusplus
}
#endif

#endif
