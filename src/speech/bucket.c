/*
 * Length-bucketed batches and the padding collate: utterances of similar length
 * batched together (so that padding is a small part of each batch), and batches
 * padded into the shapes of the CTC loss.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "flare/extension.h"
#include "speech_data.h"

typedef struct bucket_dataset {
    fl_dataset *source;
    int64_t count;       /* samples */
    int64_t *order;      /* sample indices by length */
    int64_t *starts;     /* batch b is order[starts[b], starts[b + 1]) */
    int64_t batches;
    int64_t *permutation; /* the batch order of this epoch */
    bool shuffle;
    uint64_t seed;
    fl_collate_fn collate;
    void *user;
} bucket_dataset;

static const char FN[] = "fl_bucket_batch_dataset";

fl_bucket_options fl_bucket_options_default(void)
{
    return (fl_bucket_options){.batch_size = 16, .max_total = 0, .shuffle = true, .seed = 0};
}

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

/* The batch order of epoch: identity, or a Fisher-Yates shuffle drawn from (seed,
 * epoch) by SplitMix64. Unbiased: draws above the largest multiple of the range are
 * drawn again. */
static void draw_order(bucket_dataset *b, int64_t epoch)
{
    for (int64_t i = 0; i < b->batches; i++)
        b->permutation[i] = i;
    if (!b->shuffle)
        return;
    uint64_t state = b->seed;
    uint64_t key = splitmix64(&state) ^ (uint64_t)epoch;
    state = key;
    splitmix64(&state);
    for (int64_t i = b->batches - 1; i > 0; i--) {
        uint64_t range = (uint64_t)i + 1, limit = UINT64_MAX - UINT64_MAX % range, r;
        do
            r = splitmix64(&state);
        while (r >= limit);
        int64_t j = (int64_t)(r % range), t = b->permutation[i];
        b->permutation[i] = b->permutation[j];
        b->permutation[j] = t;
    }
}

static int64_t bucket_size(fl_dataset *ds)
{
    bucket_dataset *b = ds->state;
    return b->batches;
}

static fl_status bucket_get(fl_dataset *ds, int64_t index, fl_sample *out)
{
    bucket_dataset *b = ds->state;
    int64_t batch = b->permutation[index], first = b->starts[batch], count = b->starts[batch + 1] - first;
    fl_sample *samples = calloc((size_t)count, sizeof *samples);
    if (!samples)
        return fl_error(FL_ERR_MEMORY, FN, "cannot allocate %lld samples", (long long)count), FL_ERR_MEMORY;
    /* The samples belong to this entry's scope, and so does what the collate makes:
     * the fields it stores are taken from the scope, the rest goes with it. */
    fl_status status = FL_OK;
    for (int64_t i = 0; i < count && status == FL_OK; i++)
        status = fl_dataset_get(b->source, b->order[first + i], &samples[i]);
    if (status == FL_OK) {
        status = b->collate(samples, count, out, b->user);
        if (status != FL_OK) {
            *out = (fl_sample){0};
            if (fl_last_status() == FL_OK)
                fl_error(FL_ERR_BACKEND, FN, "the collate function failed without recording an error");
            status = fl_last_status();
        }
    }
    free(samples);
    return status;
}

static void bucket_set_epoch(fl_dataset *ds, int64_t epoch)
{
    bucket_dataset *b = ds->state;
    draw_order(b, epoch);
    fl_dataset_set_epoch(b->source, epoch);
}

static void bucket_free(bucket_dataset *b)
{
    if (!b)
        return;
    fl_dataset_release(b->source);
    free(b->order), free(b->starts), free(b->permutation);
    free(b);
}

static void bucket_release(fl_dataset *ds) { bucket_free(ds->state); }

static const fl_dataset_ops bucket_ops = {
    .name = "bucket batch",
    .size = bucket_size,
    .get = bucket_get,
    .set_epoch = bucket_set_epoch,
    .release = bucket_release,
};

/* For sorting sample indices by length, ties by index (a stable order everywhere). */
typedef struct keyed {
    double length;
    int64_t index;
} keyed;

static int by_length(const void *a, const void *b)
{
    const keyed *x = a, *y = b;
    if (x->length != y->length)
        return x->length < y->length ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

fl_dataset *fl_bucket_batch_dataset(fl_dataset *source, const double *lengths, int64_t count,
                                    const fl_bucket_options *options, fl_collate_fn collate, void *user)
{
    if (!source) {
        if (fl_last_status() == FL_OK)
            fl_error(FL_ERR_NULL, FN, "the source dataset is NULL");
        return NULL;
    }
    fl_bucket_options o = options ? *options : fl_bucket_options_default();
    int64_t size = fl_dataset_size(source);
    const char *problem = NULL;
    if (!lengths)
        problem = "lengths is NULL";
    else if (count != size)
        problem = "the lengths do not match the source's samples";
    else if (o.batch_size < 0 || !(o.max_total >= 0) || !isfinite(o.max_total))
        problem = "batch_size and max_total must be non-negative (0: no limit)";
    else if (o.batch_size == 0 && o.max_total == 0)
        problem = "batch_size and max_total cannot both be 0 (no limit at all)";
    if (problem) {
        fl_dataset_release(source);
        return fl_error(lengths ? FL_ERR_VALUE : FL_ERR_NULL, FN, "%s (%lld lengths, %lld samples, batch_size %lld, "
                        "max_total %g)", problem, (long long)count, (long long)size, (long long)o.batch_size,
                        o.max_total);
    }
    for (int64_t i = 0; i < count; i++) {
        if (!isfinite(lengths[i]) || lengths[i] < 0) {
            fl_dataset_release(source);
            return fl_error(FL_ERR_VALUE, FN, "lengths[%lld] = %g is not a finite non-negative length", (long long)i,
                            lengths[i]);
        }
    }
    bucket_dataset *b = calloc(1, sizeof *b);
    keyed *sorted = malloc((size_t)(count ? count : 1) * sizeof *sorted);
    if (b) {
        b->source = source;
        b->order = malloc((size_t)(count ? count : 1) * sizeof *b->order);
        b->starts = malloc((size_t)(count + 1) * sizeof *b->starts);
        b->permutation = malloc((size_t)(count ? count : 1) * sizeof *b->permutation);
    }
    if (!b || !sorted || !b->order || !b->starts || !b->permutation) {
        free(sorted);
        if (b)
            bucket_free(b);
        else
            fl_dataset_release(source);
        return fl_error(FL_ERR_MEMORY, FN, "cannot allocate the batches of %lld samples", (long long)count);
    }
    for (int64_t i = 0; i < count; i++)
        sorted[i] = (keyed){lengths[i], i};
    qsort(sorted, (size_t)count, sizeof *sorted, by_length);
    /* Greedy, in length order: the sample joins the open batch if the batch stays
     * within both limits with it (being the longest so far, it sets the padding). */
    int64_t in_batch = 0;
    for (int64_t i = 0; i < count; i++) {
        b->order[i] = sorted[i].index;
        bool fits = in_batch > 0 && (o.batch_size == 0 || in_batch + 1 <= o.batch_size) &&
                    (o.max_total == 0 || (double)(in_batch + 1) * sorted[i].length <= o.max_total);
        if (!fits) {
            b->starts[b->batches++] = i;
            in_batch = 0;
        }
        in_batch++;
    }
    b->starts[b->batches] = count;
    free(sorted);
    b->count = count;
    b->shuffle = o.shuffle;
    b->seed = o.seed;
    b->collate = collate ? collate : fl_speech_pad_collate;
    b->user = collate ? user : NULL;
    draw_order(b, 0);
    fl_dataset *ds = fl_dataset_new(&bucket_ops, b);
    if (!ds)
        bucket_free(b);
    return ds;
}

int64_t fl_bucket_batch_indices(fl_dataset *ds, int64_t batch, int64_t *indices)
{
    static const char fn[] = "fl_bucket_batch_indices";
    if (!ds)
        return fl_error(FL_ERR_NULL, fn, "the dataset is NULL"), -1;
    if (ds->ops != &bucket_ops)
        return fl_error(FL_ERR_VALUE, fn, "needs a bucket batch dataset, got a %s dataset", ds->ops->name), -1;
    bucket_dataset *b = ds->state;
    if (batch < 0 || batch >= b->batches)
        return fl_error(FL_ERR_INDEX, fn, "batch %lld is out of range for %lld batches", (long long)batch,
                        (long long)b->batches),
               -1;
    int64_t first = b->starts[b->permutation[batch]], count = b->starts[b->permutation[batch] + 1] - first;
    if (indices)
        memcpy(indices, b->order + first, (size_t)count * sizeof *indices);
    return count;
}

/* ---- the padding collate ----------------------------------------------------------- */

fl_status fl_speech_pad_collate(const fl_sample *samples, int64_t count, fl_sample *out, void *user)
{
    static const char fn[] = "fl_speech_pad_collate";
    fl_pad_collate_options o = user ? *(const fl_pad_collate_options *)user
                                    : (fl_pad_collate_options){.pad_value = 0, .pad_id = -1};
    if (!samples || !out || count < 1)
        return fl_error(count < 1 ? FL_ERR_VALUE : FL_ERR_NULL, fn, "needs at least one sample, got %lld",
                        (long long)count),
               fl_last_status();
    int fields = samples[0].count;
    int wanted = 0;
    for (int f = 0; f < fields; f++)
        wanted += fl_ndim(samples[0].fields[f]) > 0 ? 2 : 1;
    if (wanted > FL_SAMPLE_MAX_FIELDS)
        return fl_error(FL_ERR_VALUE, fn, "%d fields make %d padded fields with their lengths, more than %d", fields,
                        wanted, FL_SAMPLE_MAX_FIELDS),
               FL_ERR_VALUE;
    fl_tensor **column = malloc((size_t)count * sizeof *column);
    int64_t *lengths = malloc((size_t)count * sizeof *lengths);
    if (!column || !lengths) {
        free(column), free(lengths);
        return fl_error(FL_ERR_MEMORY, fn, "cannot allocate a batch of %lld", (long long)count), FL_ERR_MEMORY;
    }
    fl_status status = FL_OK;
    char a[FL_DESC_SIZE], d[FL_DESC_SIZE];
    out->count = 0;
    for (int f = 0; f < fields && status == FL_OK; f++) {
        const fl_tensor *first = samples[0].fields[f];
        int ndim = fl_ndim(first);
        int64_t longest = 0;
        for (int64_t i = 0; i < count && status == FL_OK; i++) {
            const fl_tensor *t = samples[i].fields[f];
            bool same = samples[i].count == fields && fl_ndim(t) == ndim && fl_dtype_of(t) == fl_dtype_of(first);
            for (int k = 1; same && k < ndim; k++)
                same = fl_dim(t, k) == fl_dim(first, k);
            if (!same) {
                fl_error(FL_ERR_SHAPE, fn, "field %d of sample %lld is %s but of sample 0 %s: only axis 0 may differ",
                         f, (long long)i, samples[i].count == fields ? fl_describe(t, a) : "missing",
                         fl_describe(first, d));
                status = FL_ERR_SHAPE;
                break;
            }
            lengths[i] = ndim ? fl_dim(t, 0) : 0;
            if (lengths[i] > longest)
                longest = lengths[i];
        }
        if (status != FL_OK)
            break;
        double value = fl_dtype_is_float(fl_dtype_of(first)) ? o.pad_value : (double)o.pad_id;
        for (int64_t i = 0; i < count; i++) {
            const fl_tensor *t = samples[i].fields[f];
            if (ndim == 0 || lengths[i] == longest) {
                column[i] = samples[i].fields[f];
                continue;
            }
            int64_t before[FL_MAX_DIMS] = {0}, after[FL_MAX_DIMS] = {0};
            after[0] = longest - lengths[i];
            column[i] = fl_pad(t, before, after, value);
        }
        if (count > INT32_MAX) {
            fl_error(FL_ERR_VALUE, fn, "%lld samples are more than one batch can stack", (long long)count);
            status = FL_ERR_VALUE;
            break;
        }
        fl_tensor *stacked = fl_stack(column, (int)count, 0);
        if (!stacked) {
            status = fl_last_status() != FL_OK ? fl_last_status() : FL_ERR_BACKEND;
            break;
        }
        out->fields[out->count++] = stacked;
        if (ndim > 0) {
            int64_t n = count;
            fl_tensor *l = fl_to_backend(fl_from_data(lengths, FL_I64, 1, &n), fl_backend_name(first));
            if (!l) {
                status = fl_last_status() != FL_OK ? fl_last_status() : FL_ERR_BACKEND;
                break;
            }
            out->fields[out->count++] = l;
        }
    }
    free(column), free(lengths);
    if (status != FL_OK)
        *out = (fl_sample){0}; /* what was made belongs to the scope */
    return status;
}
