/* The transform dataset: each field of each sample mapped through a user function.
 *
 * Random draws in a transform come from the sample's own stream, keyed by the
 * dataset's key (from the generator, when it was made), the epoch and the sample
 * index: prefetch workers run transforms in whatever order their timing gives, and
 * the draws must not depend on it. */
#include <stdlib.h>
#include <string.h>

#include "dataset.h"

typedef struct transform_dataset {
    fl_dataset *source;
    int count;
    fl_transform_fn transforms[FL_SAMPLE_MAX_FIELDS];
    void *user;
    uint64_t key;
    int64_t epoch;
} transform_dataset;

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

static int64_t transform_size(fl_dataset *ds)
{
    transform_dataset *t = ds->state;
    return fl_dataset_size(t->source);
}

static fl_status transform_get(fl_dataset *ds, int64_t index, fl_sample *out)
{
    transform_dataset *t = ds->state;
    fl_status status = fl__dataset_fetch(t->source, index, out);
    fl_random_stream outer = fl_random_stream_begin(mix64(mix64(t->key ^ (uint64_t)t->epoch) ^ (uint64_t)index));
    for (int f = 0; status == FL_OK && f < t->count && f < out->count; f++) {
        if (!t->transforms[f])
            continue;
        fl_scope scope = fl_scope_begin();
        fl_tensor *mapped = fl_keep(t->transforms[f](out->fields[f], t->user));
        fl_scope_end(scope);
        if (!mapped) {
            if (fl_last_status() == FL_OK)
                fl_error(FL_ERR_VALUE, "fl_transform_dataset",
                         "the transform of field %d returned NULL without recording an error", f);
            status = fl_last_status();
            break;
        }
        fl_release(out->fields[f]);
        out->fields[f] = mapped;
    }
    fl_random_stream_end(outer);
    if (status != FL_OK)
        fl_sample_release(out);
    return status;
}

static void transform_set_epoch(fl_dataset *ds, int64_t epoch)
{
    transform_dataset *t = ds->state;
    t->epoch = epoch;
    fl_dataset_set_epoch(t->source, epoch);
}

static void transform_release(fl_dataset *ds)
{
    transform_dataset *t = ds->state;
    fl_dataset_release(t->source);
    free(t);
}

/* No get_batch: a transform sees one sample at a time, which a batch is not. */
static const fl_dataset_ops transform_ops = {
    .name = "transform",
    .size = transform_size,
    .get = transform_get,
    .set_epoch = transform_set_epoch,
    .release = transform_release,
};

fl_dataset *fl_transform_dataset(fl_dataset *source, const fl_transform_fn *transforms, int count, void *user)
{
    static const char fn[] = "fl_transform_dataset";
    if (!source) {
        if (fl_last_status() == FL_OK)
            fl_error(FL_ERR_NULL, fn, "the source dataset is NULL");
        return NULL;
    }
    if (!transforms || count < 0 || count > FL_SAMPLE_MAX_FIELDS) {
        fl_dataset_release(source);
        if (!transforms)
            return fl_error(FL_ERR_NULL, fn, "transforms is NULL");
        return fl_error(FL_ERR_VALUE, fn, "needs 0 to %d transforms, got %d", FL_SAMPLE_MAX_FIELDS, count);
    }
    transform_dataset *t = calloc(1, sizeof *t);
    if (!t) {
        fl_dataset_release(source);
        return fl_error(FL_ERR_MEMORY, fn, "cannot allocate a dataset");
    }
    t->source = source;
    t->count = count;
    memcpy(t->transforms, transforms, (size_t)count * sizeof *transforms);
    t->user = user;
    t->key = fl_random_stream_key();
    return fl__dataset_make(fn, &transform_ops, t);
}
