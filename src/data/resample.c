/* Datasets that read their source at other indices: resample (a given index list),
 * shuffle (a seeded permutation), span and partition (a contiguous range). */
#include <stdlib.h>
#include <string.h>

#include "dataset.h"

typedef struct mapped_dataset {
    fl_dataset *source;
    int64_t *indices; /* sample i is source sample indices[i]; NULL: start + i */
    int64_t start, count;
    uint64_t seed; /* shuffles only */
} mapped_dataset;

static int64_t source_index(const mapped_dataset *m, int64_t i)
{
    return m->indices ? m->indices[i] : m->start + i;
}

static int64_t mapped_size(fl_dataset *ds)
{
    mapped_dataset *m = ds->state;
    return m->count;
}

static fl_status mapped_get(fl_dataset *ds, int64_t index, fl_sample *out)
{
    mapped_dataset *m = ds->state;
    return fl__dataset_fetch(m->source, source_index(m, index), out);
}

/* Passes the batch on, mapped, so that the source's fast path still applies. */
static fl_status mapped_get_batch(fl_dataset *ds, const int64_t *indices, int64_t count, fl_sample *out)
{
    mapped_dataset *m = ds->state;
    int64_t *mapped = malloc((size_t)count * sizeof *mapped);
    if (!mapped)
        return fl_error(FL_ERR_MEMORY, "fl_dataset_get_batch", "cannot allocate %lld indices", (long long)count),
               FL_ERR_MEMORY;
    for (int64_t i = 0; i < count; i++)
        mapped[i] = source_index(m, indices[i]);
    fl_status status = fl__dataset_gather(m->source, mapped, count, out);
    free(mapped);
    return status;
}

static void mapped_set_epoch(fl_dataset *ds, int64_t epoch)
{
    mapped_dataset *m = ds->state;
    fl_dataset_set_epoch(m->source, epoch);
}

static void mapped_release(fl_dataset *ds)
{
    mapped_dataset *m = ds->state;
    fl_dataset_release(m->source);
    free(m->indices);
    free(m);
}

/* A span or a resample selects samples (a validation split, a fold, a class-balanced
 * draw): the epoch stops there, as a reshuffled source would change what is selected,
 * and a training epoch would reshuffle a split that shares the source under it. */
static const fl_dataset_ops resample_ops = {
    .name = "resample",
    .size = mapped_size,
    .get = mapped_get,
    .get_batch = mapped_get_batch,
    .release = mapped_release,
};

static const fl_dataset_ops span_ops = {
    .name = "span",
    .size = mapped_size,
    .get = mapped_get,
    .get_batch = mapped_get_batch,
    .release = mapped_release,
};

/* A partition is one rank's share of a source that every rank shuffles alike: the
 * epoch passes, so that the shares are drawn anew each epoch and stay disjoint. */
static const fl_dataset_ops partition_ops = {
    .name = "partition",
    .size = mapped_size,
    .get = mapped_get,
    .get_batch = mapped_get_batch,
    .set_epoch = mapped_set_epoch,
    .release = mapped_release,
};

/* Takes over source; NULL after an error (source released). */
static mapped_dataset *mapped_new(const char *fn, fl_dataset *source, int64_t count)
{
    if (!source) {
        if (fl_last_status() == FL_OK)
            fl_error(FL_ERR_NULL, fn, "the source dataset is NULL");
        return NULL;
    }
    mapped_dataset *m = calloc(1, sizeof *m);
    if (m && count > 0 && (uint64_t)count <= SIZE_MAX / sizeof(int64_t))
        m->indices = malloc((size_t)count * sizeof *m->indices);
    if (!m || (count > 0 && !m->indices)) {
        free(m);
        fl_dataset_release(source);
        return fl_error(FL_ERR_MEMORY, fn, "cannot allocate a dataset of %lld indices", (long long)count);
    }
    m->source = source;
    m->count = count < 0 ? 0 : count;
    return m;
}

fl_dataset *fl_resample_dataset(fl_dataset *source, const int64_t *indices, int64_t count)
{
    static const char fn[] = "fl_resample_dataset";
    if (source && ((!indices && count > 0) || count < 0)) {
        fl_dataset_release(source);
        return fl_error(indices ? FL_ERR_VALUE : FL_ERR_NULL, fn, "%s", indices ? "the count is negative"
                                                                            : "indices is NULL");
    }
    mapped_dataset *m = mapped_new(fn, source, count);
    if (!m)
        return NULL;
    int64_t size = fl_dataset_size(source);
    for (int64_t i = 0; i < count; i++) {
        if (indices[i] < 0 || indices[i] >= size) {
            fl_error(FL_ERR_INDEX, fn, "indices[%lld] = %lld is out of range for a %s dataset of %lld samples",
                     (long long)i, (long long)indices[i], source->ops->name, (long long)size);
            fl_dataset tmp = {.state = m};
            mapped_release(&tmp);
            return NULL;
        }
        m->indices[i] = indices[i];
    }
    return fl__dataset_make(fn, &resample_ops, m);
}

/* ---- shuffle ---- */

/* SplitMix64 (Steele, Lea and Flood): a small generator whose output depends only on
 * the seed, so permutations are the same everywhere. */
static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

/* Uniform in [0, n) without modulo bias: draws below 2^64 mod n are rejected. */
static uint64_t below(uint64_t *state, uint64_t n)
{
    uint64_t threshold = -n % n;
    uint64_t r;
    do
        r = splitmix64(state);
    while (r < threshold);
    return r % n;
}

/* Fisher-Yates over the identity, from a stream for (seed, epoch). */
static void permutation(int64_t *indices, int64_t count, uint64_t seed, int64_t epoch)
{
    uint64_t state = seed;
    state = splitmix64(&state) ^ (uint64_t)epoch;
    for (int64_t i = 0; i < count; i++)
        indices[i] = i;
    for (int64_t i = count - 1; i > 0; i--) {
        int64_t j = (int64_t)below(&state, (uint64_t)i + 1);
        int64_t t = indices[i];
        indices[i] = indices[j];
        indices[j] = t;
    }
}

static void draw_permutation(mapped_dataset *m, int64_t epoch) { permutation(m->indices, m->count, m->seed, epoch); }

static void shuffle_set_epoch(fl_dataset *ds, int64_t epoch)
{
    mapped_dataset *m = ds->state;
    draw_permutation(m, epoch);
    fl_dataset_set_epoch(m->source, epoch);
}

static const fl_dataset_ops shuffle_ops = {
    .name = "shuffle",
    .size = mapped_size,
    .get = mapped_get,
    .get_batch = mapped_get_batch,
    .set_epoch = shuffle_set_epoch,
    .release = mapped_release,
};

fl_dataset *fl_shuffle_dataset(fl_dataset *source, uint64_t seed)
{
    static const char fn[] = "fl_shuffle_dataset";
    mapped_dataset *m = mapped_new(fn, source, source ? fl_dataset_size(source) : 0);
    if (!m)
        return NULL;
    m->seed = seed;
    draw_permutation(m, 0);
    return fl__dataset_make(fn, &shuffle_ops, m);
}

/* ---- contiguous ranges ---- */

static fl_dataset *range_dataset(const char *fn, const fl_dataset_ops *ops, fl_dataset *source, int64_t start,
                                 int64_t count)
{
    mapped_dataset *m = mapped_new(fn, source, 0);
    if (!m)
        return NULL;
    int64_t size = fl_dataset_size(source);
    if (start < 0 || count < 0 || start > size || count > size - start) {
        fl_error(FL_ERR_INDEX, fn, "samples [%lld, %lld + %lld) are out of range for a %s dataset of %lld samples",
                 (long long)start, (long long)start, (long long)count, source->ops->name, (long long)size);
        fl_dataset tmp = {.state = m};
        mapped_release(&tmp);
        return NULL;
    }
    m->start = start;
    m->count = count;
    return fl__dataset_make(fn, ops, m);
}

fl_dataset *fl_span_dataset(fl_dataset *source, int64_t start, int64_t count)
{
    return range_dataset("fl_span_dataset", &span_ops, source, start, count);
}

fl_dataset *fl_partition_dataset(fl_dataset *source, int rank, int world_size)
{
    if (source && (world_size < 1 || rank < 0 || rank >= world_size)) {
        fl_dataset_release(source);
        return fl_error(FL_ERR_VALUE, "fl_partition_dataset", "rank %d is not in a world of size %d", rank,
                        world_size);
    }
    if (!source) {
        if (fl_last_status() == FL_OK)
            fl_error(FL_ERR_NULL, "fl_partition_dataset", "the source dataset is NULL");
        return NULL;
    }
    int64_t share = fl_dataset_size(source) / world_size;
    return range_dataset("fl_partition_dataset", &partition_ops, source, (int64_t)rank * share, share);
}

/* ---- random split ---- */

fl_status fl_random_split(fl_dataset *source, const int64_t *sizes, int count, uint64_t seed, fl_dataset **out)
{
    static const char fn[] = "fl_random_split";
    if (out)
        for (int k = 0; k < count; k++)
            out[k] = NULL;
    if (!source) {
        if (fl_last_status() == FL_OK)
            fl_error(FL_ERR_NULL, fn, "the source dataset is NULL");
        return fl_last_status();
    }
    if (!sizes || !out || count < 1) {
        fl_dataset_release(source);
        fl_error(count < 1 ? FL_ERR_VALUE : FL_ERR_NULL, fn, "%s",
                 count < 1 ? "needs at least one part" : sizes ? "out is NULL" : "sizes is NULL");
        return fl_last_status();
    }
    int64_t size = fl_dataset_size(source), total = 0;
    for (int k = 0; k < count; k++) {
        if (sizes[k] < 0 || sizes[k] > size - total) {
            fl_error(FL_ERR_VALUE, fn, "sizes[%d] = %lld: the sizes must be non-negative and add up to the %lld samples of the %s dataset",
                     k, (long long)sizes[k], (long long)size, source->ops->name);
            fl_dataset_release(source);
            return FL_ERR_VALUE;
        }
        total += sizes[k];
    }
    if (total != size) {
        fl_error(FL_ERR_VALUE, fn, "the sizes add up to %lld, not to the %lld samples of the %s dataset",
                 (long long)total, (long long)size, source->ops->name);
        fl_dataset_release(source);
        return FL_ERR_VALUE;
    }
    int64_t *order = malloc((size_t)(size ? size : 1) * sizeof *order);
    if (!order) {
        fl_dataset_release(source);
        fl_error(FL_ERR_MEMORY, fn, "cannot allocate %lld indices", (long long)size);
        return FL_ERR_MEMORY;
    }
    permutation(order, size, seed, 0);
    /* Each part is a resample of its own slice of the permutation: resamples stop the
     * epoch, so the parts never change and stay disjoint. */
    int64_t start = 0;
    fl_status status = FL_OK;
    for (int k = 0; k < count && status == FL_OK; k++) {
        out[k] = fl_resample_dataset(fl_dataset_retain(source), order + start, sizes[k]);
        if (!out[k])
            status = fl_last_status();
        start += sizes[k];
    }
    free(order);
    fl_dataset_release(source);
    if (status != FL_OK)
        for (int k = 0; k < count; k++) {
            fl_dataset_release(out[k]);
            out[k] = NULL;
        }
    return status;
}
