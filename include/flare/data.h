/*
 * Flare's data layer: datasets as composable pipelines, and reading datasets from disk.
 *
 * A dataset, as in Flashlight, is anything with a size and a get(i) that returns a
 * sample: a short list of tensors (an image and its label, say). Pipelines are
 * datasets wrapping datasets:
 *
 *     fl_dataset *d = fl_tensor_dataset((fl_tensor *[]){images, labels}, 2);
 *     d = fl_shuffle_dataset(d, 42);              each wrapper takes over d
 *     d = fl_batch_dataset(d, 64, false, NULL, NULL);
 *     d = fl_prefetch_dataset(d, 2, 0);           two worker threads
 *     for (int64_t i = 0; i < fl_dataset_size(d); i++) { fl_dataset_get(d, i, &batch); ... }
 *     fl_dataset_release(d);
 *
 * The IDX reader loads MNIST and Fashion-MNIST.
 */
#ifndef FLARE_DATA_H
#define FLARE_DATA_H

#include <stdbool.h>

#include "flare/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- samples -------------------------------------------------------------------- */

#define FL_SAMPLE_MAX_FIELDS 8

/* The fields of one sample (or of one batch: each field stacked along a new axis 0). */
typedef struct fl_sample {
    int count;
    fl_tensor *fields[FL_SAMPLE_MAX_FIELDS];
} fl_sample;

/* Releases the fields and sets count to 0. For samples that belong to the caller:
 * those obtained outside any scope, and those an fl_dataset_ops entry fills. */
void fl_sample_release(fl_sample *sample);

/* ---- the dataset interface ------------------------------------------------------- */

typedef struct fl_dataset fl_dataset;

/*
 * What a kind of dataset implements. Entries receive valid arguments (the index in
 * range, out zeroed); they return FL_OK or a status after recording an error
 * (fl_last_error). get and size are required; the others may be NULL.
 *
 * get and get_batch run inside a scope of their own, as collate functions and
 * transforms do, so they simply store what tensor functions return:
 *
 *     out->fields[0] = fl_mul_scalar(fl_index(st->images, FL_INDEX(FL_AT(index))), 1.0 / 255);
 *     out->count = 1;
 *
 * The fields they store are taken from that scope and handed to the caller; their
 * temporaries go when it ends. A field not made in that scope must be a reference of
 * the entry's own: to return a tensor the dataset holds, store fl_retain(t). (fl_keep
 * of a result made in the scope is also right: the reference is then the entry's.)
 *
 * get may run on several threads at once (prefetch workers): it must not change
 * shared state without a lock. Tensors are immutable and their scopes and errors are
 * per thread, so reading tensors and computing with them is safe.
 */
typedef struct fl_dataset_ops {
    const char *name;
    int64_t (*size)(fl_dataset *ds);
    fl_status (*get)(fl_dataset *ds, int64_t index, fl_sample *out);
    /* The samples at indices gathered into one batch, each field stacked along a new
     * axis 0: what get on each and stacking would give, but faster (a tensor dataset
     * does it with one fl_index_select per field). NULL: the caller gets and stacks. */
    fl_status (*get_batch)(fl_dataset *ds, const int64_t *indices, int64_t count, fl_sample *out);
    /* Starts epoch `epoch` (shuffles reshuffle); wrappers pass it on to their sources. */
    void (*set_epoch)(fl_dataset *ds, int64_t epoch);
    /* Frees state and releases the sources; called once, by the last release. */
    void (*release)(fl_dataset *ds);
} fl_dataset_ops;

struct fl_dataset {
    int refcount;
    const fl_dataset_ops *ops;
    void *state;
};

/* A dataset of a kind of one's own; state belongs to it (ops->release frees it).
 * ops must outlive the dataset. NULL if out of memory (then state is not freed). */
fl_dataset *fl_dataset_new(const fl_dataset_ops *ops, void *state);
fl_dataset *fl_dataset_retain(fl_dataset *ds);
void fl_dataset_release(fl_dataset *ds);

/* The number of samples; -1 (and an error) for NULL. */
int64_t fl_dataset_size(fl_dataset *ds);
/* Fills out with sample `index` (negative counts from the end, as in Python). As with
 * tensors, the fields belong to the innermost scope if one is open, else to the
 * caller (fl_sample_release). On failure out->count is 0. */
fl_status fl_dataset_get(fl_dataset *ds, int64_t index, fl_sample *out);
/* The samples at indices as one batch, each field stacked along a new axis 0, through
 * the dataset's fast path where it has one. Fields belong to the scope, as above. */
fl_status fl_dataset_get_batch(fl_dataset *ds, const int64_t *indices, int64_t count, fl_sample *out);
/* Starts an epoch: shuffle datasets in the pipeline draw the permutation for
 * (seed, epoch); prefetch datasets drop what they built ahead. Call it between
 * passes, not while another thread is in fl_dataset_get. The epoch stops at a span
 * or a resample, which select samples: a split of a shuffled source stays the same
 * split whatever the other split's pipeline does, so shuffle (and augment) above the
 * split: fl_shuffle_dataset(fl_span_dataset(shuffled, ...), seed). It passes through
 * a partition, whose ranks shuffle alike beneath it. */
void fl_dataset_set_epoch(fl_dataset *ds, int64_t epoch);

/* ---- datasets ---------------------------------------------------------------------
 *
 * Constructors that wrap datasets take over the caller's reference to each source,
 * also when they fail (then the sources are released), so pipelines nest:
 * fl_batch_dataset(fl_shuffle_dataset(d, 1), 32, ...). To keep using a source, retain
 * it first. A NULL source makes the constructor return NULL, keeping the first error.
 */

/* Sample i is (tensors[0][i], tensors[1][i], ...): views of slices along axis 0. The
 * tensors (1 to FL_SAMPLE_MAX_FIELDS, at least 1-D, equal lengths) are retained. */
fl_dataset *fl_tensor_dataset(fl_tensor *const *tensors, int count);

/*
 * Windows of a token sequence for a language model: sample i is (input, target), two
 * i64 [length] tensors, input = tokens[s, s + length) and target = tokens[s + 1,
 * s + length + 1), the next token at each position, with s = i * stride. stride =
 * length gives windows side by side (every token a target once); a smaller stride
 * overlaps them. There are (n - length - 1) / stride + 1 windows of n tokens; fewer
 * than length + 1 tokens is an error. Batches gather with one fl_index_select per
 * field, so shuffle, batch and prefetch above it as over a tensor dataset.
 *
 * fl_token_dataset takes a 1-D u8, i32 or i64 tensor of non-negative ids (a C array
 * is fl_from_data away); it keeps an i64 copy. fl_token_dataset_from_file reads a
 * file of raw tokens: one byte each for FL_U8 (a byte- or character-level model on
 * any file), little-endian 4 or 8 bytes for FL_I32 or FL_I64 (what NumPy's tofile
 * writes). Errors name the file and, for a partial last token or a negative id, its
 * byte offset.
 */
fl_dataset *fl_token_dataset(const fl_tensor *tokens, int64_t length, int64_t stride);
fl_dataset *fl_token_dataset_from_file(const char *path, fl_dtype dtype, int64_t length, int64_t stride);

/* Combines count samples into a batch in out, or returns a status after recording an
 * error. It runs inside a scope of its own, and the fields it stores in out are kept
 * from that scope (retained if they come from elsewhere), so it simply stores what
 * tensor functions return, without fl_keep. */
typedef fl_status (*fl_collate_fn)(const fl_sample *samples, int64_t count, fl_sample *out, void *user);
/* Batch i holds samples [i * batch_size, (i + 1) * batch_size); the last batch is
 * partial unless drop_last drops it. collate NULL stacks each field along a new axis 0
 * (through the source's get_batch fast path when it has one). */
fl_dataset *fl_batch_dataset(fl_dataset *source, int64_t batch_size, bool drop_last, fl_collate_fn collate,
                             void *user);

/* The source in a random order: a permutation drawn from (seed, epoch), the same on
 * every machine and thread count; fl_dataset_set_epoch draws another. */
fl_dataset *fl_shuffle_dataset(fl_dataset *source, uint64_t seed);

/* Sample i is source sample indices[i] (copied; each in range, repeats allowed). The
 * epoch does not reach the source (fl_dataset_set_epoch). */
fl_dataset *fl_resample_dataset(fl_dataset *source, const int64_t *indices, int64_t count);

/* Maps field i of each sample through transforms[i] (NULL leaves it). A transform
 * runs inside a scope of its own, so it may compose tensor functions freely; it
 * returns the new field, or NULL after an error. It may run on prefetch workers.
 * Random draws in it (fl_rand, ...) come from a stream of the sample's own, keyed by
 * the generator's state when the dataset was made (fl_random_stream_key), the epoch
 * and the sample index: a random augmentation gives the same values whatever the
 * number of workers and their timing, and new values each epoch. */
typedef fl_tensor *(*fl_transform_fn)(const fl_tensor *field, void *user);
fl_dataset *fl_transform_dataset(fl_dataset *source, const fl_transform_fn *transforms, int count, void *user);

/* The sources end to end. */
fl_dataset *fl_concat_dataset(fl_dataset *const *sources, int count);
/* The fields of the sources side by side: sample i is source 0's fields, then source
 * 1's, ... The sources must be of equal size. */
fl_dataset *fl_merge_dataset(fl_dataset *const *sources, int count);
/* Samples [start, start + count) of the source. The epoch does not reach the source,
 * so two spans of one shuffled source stay disjoint (fl_dataset_set_epoch). */
fl_dataset *fl_span_dataset(fl_dataset *source, int64_t start, int64_t count);

/*
 * Splits the source at random into count disjoint parts of sizes[0 .. count), which
 * must add up to its size (torch.utils.data.random_split): part k is a resample of
 * the source at its own slice of one permutation drawn from seed (SplitMix64, the same
 * everywhere). The permutation is drawn once, here: the epoch does not reach the
 * parts or the source beneath them (fl_dataset_set_epoch), so a training part can be
 * reshuffled each epoch, fl_shuffle_dataset(out[0], s), and never takes samples from
 * the validation part. Shuffle above the split, not below it: a shuffle beneath adds
 * nothing, and an epoch set on it through another reference would move samples
 * between the parts. The parts are stored in
 * out[0 .. count) and each holds a reference to the source; the caller's reference is
 * taken over, also on failure (then every out[k] is NULL).
 */
fl_status fl_random_split(fl_dataset *source, const int64_t *sizes, int count, uint64_t seed, fl_dataset **out);

/*
 * The part of a dataset that rank `rank` of `world_size` data-parallel workers trains
 * on: the contiguous span [rank * m, (rank + 1) * m) with m = size / world_size. Every
 * rank gets the same number of samples, so collective steps stay in lockstep; the
 * size % world_size samples at the end are dropped (PyTorch's DistributedSampler with
 * drop_last=True; it pads by repeating samples otherwise, which skews the statistics).
 * Spans rather than strided slices keep rows adjacent; for a random split, shuffle
 * with the same seed on every rank before partitioning. Unlike a span, a partition
 * passes the epoch on: every rank reshuffles alike, so the shares change each epoch
 * (as with DistributedSampler.set_epoch) and stay disjoint.
 */
fl_dataset *fl_partition_dataset(fl_dataset *source, int rank, int world_size);

/*
 * Builds samples ahead on `workers` threads: after get(i), samples i + 1 ... i + depth
 * are built while the caller works (depth 0 means 2 * workers). Samples come in index
 * order whatever the thread count; a get out of sequence starts building ahead from
 * there. An error on a worker is reported by the get of that sample. Releasing the
 * dataset stops and joins the workers. One consumer thread at a time.
 */
fl_dataset *fl_prefetch_dataset(fl_dataset *source, int workers, int depth);

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
