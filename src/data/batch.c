/* The batch dataset: consecutive samples of its source combined into one. */
#include <limits.h>
#include <stdlib.h>

#include "dataset.h"

typedef struct batch_dataset {
    fl_dataset *source;
    int64_t batch_size;
    bool drop_last;
    fl_collate_fn collate; /* NULL: stack, through the source's fast path */
    void *user;
} batch_dataset;

static int64_t batch_size(fl_dataset *ds)
{
    batch_dataset *b = ds->state;
    int64_t n = fl_dataset_size(b->source);
    return b->drop_last ? n / b->batch_size : (n + b->batch_size - 1) / b->batch_size;
}

static fl_status batch_collate(batch_dataset *b, const int64_t *indices, int64_t count, fl_sample *out)
{
    fl_sample *samples = calloc((size_t)count, sizeof *samples);
    if (!samples)
        return fl_error(FL_ERR_MEMORY, "fl_batch_dataset", "cannot allocate %lld samples", (long long)count),
               FL_ERR_MEMORY;
    fl_status status = FL_OK;
    for (int64_t i = 0; i < count && status == FL_OK; i++)
        status = fl__dataset_fetch(b->source, indices[i], &samples[i]);
    if (status == FL_OK) {
        /* The collate runs in a scope of its own and its fields are kept from it. */
        fl_scope scope = fl_scope_begin();
        status = b->collate(samples, count, out, b->user);
        if (status == FL_OK && (out->count < 0 || out->count > FL_SAMPLE_MAX_FIELDS)) {
            fl_error(FL_ERR_VALUE, "fl_batch_dataset", "the collate function returned %d fields (at most %d)",
                     out->count, FL_SAMPLE_MAX_FIELDS);
            status = FL_ERR_VALUE;
        }
        for (int f = 0; status == FL_OK && f < out->count; f++) {
            if (!out->fields[f]) {
                fl_error(FL_ERR_NULL, "fl_batch_dataset", "the collate function returned a NULL field %d", f);
                status = FL_ERR_NULL;
            }
        }
        if (status == FL_OK) {
            for (int f = 0; f < out->count; f++)
                fl_keep(out->fields[f]);
        } else {
            *out = (fl_sample){0}; /* what it made is the scope's */
            status = fl__dataset_failure("fl_batch_dataset", "the collate function");
        }
        fl_scope_end(scope);
    }
    for (int64_t i = 0; i < count; i++)
        fl_sample_release(&samples[i]);
    free(samples);
    return status;
}

static fl_status batch_get(fl_dataset *ds, int64_t index, fl_sample *out)
{
    batch_dataset *b = ds->state;
    int64_t first = index * b->batch_size;
    int64_t count = fl_dataset_size(b->source) - first;
    if (count > b->batch_size)
        count = b->batch_size;
    int64_t *indices = malloc((size_t)count * sizeof *indices);
    if (!indices)
        return fl_error(FL_ERR_MEMORY, "fl_batch_dataset", "cannot allocate %lld indices", (long long)count),
               FL_ERR_MEMORY;
    for (int64_t i = 0; i < count; i++)
        indices[i] = first + i;
    fl_status status = b->collate ? batch_collate(b, indices, count, out)
                                  : fl__dataset_gather(b->source, indices, count, out);
    free(indices);
    return status;
}

static void batch_set_epoch(fl_dataset *ds, int64_t epoch)
{
    batch_dataset *b = ds->state;
    fl_dataset_set_epoch(b->source, epoch);
}

static void batch_release(fl_dataset *ds)
{
    batch_dataset *b = ds->state;
    fl_dataset_release(b->source);
    free(b);
}

static const fl_dataset_ops batch_ops = {
    .name = "batch",
    .size = batch_size,
    .get = batch_get,
    .set_epoch = batch_set_epoch,
    .release = batch_release,
};

fl_dataset *fl_batch_dataset(fl_dataset *source, int64_t size, bool drop_last, fl_collate_fn collate, void *user)
{
    static const char fn[] = "fl_batch_dataset";
    if (!source) {
        if (fl_last_status() == FL_OK)
            fl_error(FL_ERR_NULL, fn, "the source dataset is NULL");
        return NULL;
    }
    /* fl_stack takes an int count. */
    if (size < 1 || size > INT_MAX) {
        fl_dataset_release(source);
        return fl_error(FL_ERR_VALUE, fn, "the batch size must be in [1, %d], got %lld", INT_MAX, (long long)size);
    }
    batch_dataset *b = malloc(sizeof *b);
    if (!b) {
        fl_dataset_release(source);
        return fl_error(FL_ERR_MEMORY, fn, "cannot allocate a dataset");
    }
    *b = (batch_dataset){source, size, drop_last, collate, user};
    return fl__dataset_make(fn, &batch_ops, b);
}
