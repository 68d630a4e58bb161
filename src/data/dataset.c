/* The dataset interface: reference counts, checked entry points, and gathering a batch
 * from any dataset. */
#include <stdlib.h>
#include <string.h>

#include "dataset.h"

void fl_sample_release(fl_sample *sample)
{
    if (!sample)
        return;
    for (int i = 0; i < sample->count && i < FL_SAMPLE_MAX_FIELDS; i++)
        fl_release(sample->fields[i]);
    sample->count = 0;
}

fl_dataset *fl_dataset_new(const fl_dataset_ops *ops, void *state)
{
    if (!ops || !ops->size || !ops->get)
        return fl_error(FL_ERR_NULL, "fl_dataset_new", "ops and its size and get entries are required");
    fl_dataset *ds = malloc(sizeof *ds);
    if (!ds)
        return fl_error(FL_ERR_MEMORY, "fl_dataset_new", "cannot allocate a dataset");
    *ds = (fl_dataset){.refcount = 1, .ops = ops, .state = state};
    return ds;
}

fl_dataset *fl__dataset_make(const char *fn, const fl_dataset_ops *ops, void *state)
{
    fl_dataset *ds = malloc(sizeof *ds);
    if (!ds) {
        fl_dataset tmp = {.refcount = 1, .ops = ops, .state = state};
        ops->release(&tmp);
        return fl_error(FL_ERR_MEMORY, fn, "cannot allocate a dataset");
    }
    *ds = (fl_dataset){.refcount = 1, .ops = ops, .state = state};
    return ds;
}

fl_dataset *fl_dataset_retain(fl_dataset *ds)
{
    if (ds)
        __atomic_add_fetch(&ds->refcount, 1, __ATOMIC_RELAXED);
    return ds;
}

void fl_dataset_release(fl_dataset *ds)
{
    if (!ds || __atomic_sub_fetch(&ds->refcount, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    if (ds->ops->release)
        ds->ops->release(ds);
    free(ds);
}

void fl__release_sources(fl_dataset *const *sources, int count)
{
    for (int i = 0; sources && i < count; i++)
        fl_dataset_release(sources[i]);
}

fl_status fl__dataset_failure(const char *fn, const char *what)
{
    if (fl_last_status() == FL_OK)
        fl_error(FL_ERR_BACKEND, fn, "%s failed without recording an error", what);
    return fl_last_status();
}

int64_t fl_dataset_size(fl_dataset *ds)
{
    if (!ds) {
        if (fl_last_status() == FL_OK)
            fl_error(FL_ERR_NULL, "fl_dataset_size", "the dataset is NULL");
        return -1;
    }
    return ds->ops->size(ds);
}

/* Hands the owned fields of out to the innermost scope, as tensor functions do. */
static fl_status to_scope(fl_sample *out)
{
    fl_status status = FL_OK;
    for (int i = 0; i < out->count; i++) {
        if (!fl_out(out->fields[i])) /* fl_out released it and recorded the error */
            status = FL_ERR_MEMORY;
    }
    if (status != FL_OK) {
        for (int i = 0; i < out->count; i++)
            out->fields[i] = NULL;
        out->count = 0;
    }
    return status;
}

/* Checks what an entry returned: a status with an error, or fields that are there. */
static fl_status checked(const char *fn, fl_dataset *ds, fl_status status, fl_sample *out)
{
    if (status == FL_OK && (out->count < 0 || out->count > FL_SAMPLE_MAX_FIELDS)) {
        status = FL_ERR_VALUE;
        fl_error(status, fn, "the %s dataset returned %d fields (at most %d)", ds->ops->name, out->count,
                 FL_SAMPLE_MAX_FIELDS);
        out->count = 0;
    }
    for (int i = 0; status == FL_OK && i < out->count; i++) {
        if (!out->fields[i]) {
            status = FL_ERR_NULL;
            fl_error(status, fn, "the %s dataset returned a NULL field %d", ds->ops->name, i);
        }
    }
    if (status != FL_OK) {
        if (fl_last_status() == FL_OK)
            fl_error(status, fn, "the %s dataset failed without recording an error", ds->ops->name);
        for (int i = 0; i < out->count; i++)
            fl_release(out->fields[i]); /* NULL-safe */
        out->count = 0;
        return fl_last_status();
    }
    return FL_OK;
}

/* Takes the fields an entry stored in out from the scope it ran in, which ends next:
 * a field the scope holds (made there by tensor functions) becomes the caller's
 * reference; any other field already is one (fl_keep or fl_retain in the entry). A
 * tensor stored in two fields gets a reference for each. */
static void take_fields(fl_sample *out)
{
    bool taken[FL_SAMPLE_MAX_FIELDS] = {false};
    for (int i = 0; i < out->count && i < FL_SAMPLE_MAX_FIELDS; i++) {
        if (!out->fields[i])
            continue;
        taken[i] = fl_scope_disown(out->fields[i]);
        for (int j = 0; !taken[i] && j < i; j++) {
            if (taken[j] && out->fields[j] == out->fields[i]) {
                fl_retain(out->fields[i]);
                break;
            }
        }
    }
}

fl_status fl__dataset_fetch(fl_dataset *ds, int64_t index, fl_sample *out)
{
    /* A scope of its own, as collate and transforms have: the natural get stores what
     * tensor functions return, which belongs to this scope, not to the caller's. */
    fl_scope scope = fl_scope_begin();
    fl_status status = ds->ops->get(ds, index, out);
    take_fields(out);
    fl_scope_end(scope);
    return checked("fl_dataset_get", ds, status, out);
}

fl_status fl_dataset_get(fl_dataset *ds, int64_t index, fl_sample *out)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!ds || !out) {
        if (fl_last_status() == FL_OK)
            fl_error(FL_ERR_NULL, "fl_dataset_get", "%s is NULL", ds ? "out" : "the dataset");
        return fl_last_status();
    }
    int64_t size = ds->ops->size(ds);
    if (index < -size || index >= size) {
        fl_error(FL_ERR_INDEX, "fl_dataset_get", "index %lld is out of range for a %s dataset of %lld samples",
                 (long long)index, ds->ops->name, (long long)size);
        return FL_ERR_INDEX;
    }
    if (index < 0)
        index += size;
    fl_status status = fl__dataset_fetch(ds, index, out);
    return status != FL_OK ? status : to_scope(out);
}

fl_status fl__stack_samples(const fl_sample *samples, int64_t count, fl_sample *out, void *user)
{
    if (count < 1)
        return fl_error(FL_ERR_VALUE, "fl_collate", "no samples to stack"), FL_ERR_VALUE;
    int fields = samples[0].count;
    for (int64_t i = 1; i < count; i++) {
        if (samples[i].count != fields) {
            fl_error(FL_ERR_SHAPE, "fl_collate", "sample 0 has %d fields but sample %lld has %d", fields,
                     (long long)i, samples[i].count);
            return FL_ERR_SHAPE;
        }
    }
    fl_tensor **column = malloc((size_t)count * sizeof *column);
    if (!column)
        return fl_error(FL_ERR_MEMORY, "fl_collate", "cannot allocate %lld pointers", (long long)count),
               FL_ERR_MEMORY;
    fl_scope scope = fl_scope_begin();
    for (int f = 0; f < fields; f++) {
        for (int64_t i = 0; i < count; i++)
            column[i] = samples[i].fields[f];
        out->fields[f] = fl_keep(fl_stack(column, (int)count, 0));
        if (!out->fields[f])
            break;
        out->count = f + 1;
    }
    fl_scope_end(scope);
    free(column);
    if (out->count != fields) {
        fl_sample_release(out);
        return fl__dataset_failure("fl_collate", "fl_stack");
    }
    return FL_OK;
}

fl_status fl__dataset_gather(fl_dataset *ds, const int64_t *indices, int64_t count, fl_sample *out)
{
    if (ds->ops->get_batch) {
        fl_scope scope = fl_scope_begin();
        fl_status status = ds->ops->get_batch(ds, indices, count, out);
        take_fields(out);
        fl_scope_end(scope);
        return checked("fl_dataset_get_batch", ds, status, out);
    }
    fl_sample *samples = calloc((size_t)count, sizeof *samples);
    if (!samples)
        return fl_error(FL_ERR_MEMORY, "fl_dataset_get_batch", "cannot allocate %lld samples", (long long)count),
               FL_ERR_MEMORY;
    fl_status status = FL_OK;
    for (int64_t i = 0; i < count && status == FL_OK; i++)
        status = fl__dataset_fetch(ds, indices[i], &samples[i]);
    if (status == FL_OK)
        status = fl__stack_samples(samples, count, out, NULL);
    for (int64_t i = 0; i < count; i++)
        fl_sample_release(&samples[i]);
    free(samples);
    return status;
}

fl_status fl_dataset_get_batch(fl_dataset *ds, const int64_t *indices, int64_t count, fl_sample *out)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!ds || !out || (!indices && count > 0)) {
        if (fl_last_status() == FL_OK)
            fl_error(FL_ERR_NULL, "fl_dataset_get_batch", "%s is NULL",
                     !ds ? "the dataset" : !out ? "out" : "indices");
        return fl_last_status();
    }
    if (count < 1) {
        fl_error(FL_ERR_VALUE, "fl_dataset_get_batch", "a batch needs at least one index, got %lld",
                 (long long)count);
        return FL_ERR_VALUE;
    }
    int64_t size = ds->ops->size(ds);
    for (int64_t i = 0; i < count; i++) {
        if (indices[i] < 0 || indices[i] >= size) {
            fl_error(FL_ERR_INDEX, "fl_dataset_get_batch",
                     "indices[%lld] = %lld is out of range for a %s dataset of %lld samples", (long long)i,
                     (long long)indices[i], ds->ops->name, (long long)size);
            return FL_ERR_INDEX;
        }
    }
    fl_status status = fl__dataset_gather(ds, indices, count, out);
    return status != FL_OK ? status : to_scope(out);
}

void fl_dataset_set_epoch(fl_dataset *ds, int64_t epoch)
{
    if (ds && ds->ops->set_epoch)
        ds->ops->set_epoch(ds, epoch);
}
