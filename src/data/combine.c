/* Datasets of several sources: concat (end to end) and merge (fields side by side). */
#include <stdlib.h>
#include <string.h>

#include "dataset.h"

typedef struct combined_dataset {
    int count;
    fl_dataset **sources;
    int64_t *ends; /* concat: ends[i] = total size of sources 0..i */
} combined_dataset;

static void combined_release(fl_dataset *ds)
{
    combined_dataset *c = ds->state;
    fl__release_sources(c->sources, c->count);
    free(c->sources);
    free(c->ends);
    free(c);
}

static void combined_set_epoch(fl_dataset *ds, int64_t epoch)
{
    combined_dataset *c = ds->state;
    for (int i = 0; i < c->count; i++)
        fl_dataset_set_epoch(c->sources[i], epoch);
}

/* Takes over the sources; NULL after an error (sources released). */
static combined_dataset *combined_new(const char *fn, fl_dataset *const *sources, int count)
{
    if (!sources || count < 1) {
        fl__release_sources(sources, count);
        if (!sources)
            return fl_error(FL_ERR_NULL, fn, "sources is NULL");
        return fl_error(FL_ERR_VALUE, fn, "needs at least one source, got %d", count);
    }
    for (int i = 0; i < count; i++) {
        if (!sources[i]) {
            if (fl_last_status() == FL_OK)
                fl_error(FL_ERR_NULL, fn, "sources[%d] is NULL", i);
            fl__release_sources(sources, count);
            return NULL;
        }
    }
    combined_dataset *c = calloc(1, sizeof *c);
    if (c) {
        c->sources = malloc((size_t)count * sizeof *c->sources);
        c->ends = malloc((size_t)count * sizeof *c->ends);
    }
    if (!c || !c->sources || !c->ends) {
        if (c) {
            free(c->sources);
            free(c->ends);
        }
        free(c);
        fl__release_sources(sources, count);
        return fl_error(FL_ERR_MEMORY, fn, "cannot allocate a dataset of %d sources", count);
    }
    c->count = count;
    int64_t total = 0;
    for (int i = 0; i < count; i++) {
        c->sources[i] = sources[i];
        total += fl_dataset_size(sources[i]);
        c->ends[i] = total;
    }
    return c;
}

/* ---- concat ---- */

static int64_t concat_size(fl_dataset *ds)
{
    combined_dataset *c = ds->state;
    return c->ends[c->count - 1];
}

static fl_status concat_get(fl_dataset *ds, int64_t index, fl_sample *out)
{
    combined_dataset *c = ds->state;
    int lo = 0, hi = c->count - 1; /* the first source whose end is past index */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (c->ends[mid] > index)
            hi = mid;
        else
            lo = mid + 1;
    }
    int64_t begin = lo ? c->ends[lo - 1] : 0;
    return fl__dataset_fetch(c->sources[lo], index - begin, out);
}

static const fl_dataset_ops concat_ops = {
    .name = "concat",
    .size = concat_size,
    .get = concat_get,
    .set_epoch = combined_set_epoch,
    .release = combined_release,
};

fl_dataset *fl_concat_dataset(fl_dataset *const *sources, int count)
{
    combined_dataset *c = combined_new("fl_concat_dataset", sources, count);
    return c ? fl__dataset_make("fl_concat_dataset", &concat_ops, c) : NULL;
}

/* ---- merge ---- */

static int64_t merge_size(fl_dataset *ds)
{
    combined_dataset *c = ds->state;
    return c->ends[0];
}

/* Appends to out the fields of each source's sample indices[0], or, for a batch, of
 * its samples at indices gathered. */
static fl_status merge_fields(combined_dataset *c, const int64_t *indices, int64_t count, bool batch,
                              fl_sample *out)
{
    for (int i = 0; i < c->count; i++) {
        fl_sample part = {0};
        fl_status status = batch ? fl__dataset_gather(c->sources[i], indices, count, &part)
                                 : fl__dataset_fetch(c->sources[i], indices[0], &part);
        if (status == FL_OK && out->count + part.count > FL_SAMPLE_MAX_FIELDS) {
            fl_error(FL_ERR_VALUE, "fl_merge_dataset", "the merged sample has more than %d fields",
                     FL_SAMPLE_MAX_FIELDS);
            fl_sample_release(&part);
            status = FL_ERR_VALUE;
        }
        if (status != FL_OK) {
            fl_sample_release(out);
            return status;
        }
        memcpy(&out->fields[out->count], part.fields, (size_t)part.count * sizeof *part.fields);
        out->count += part.count;
    }
    return FL_OK;
}

static fl_status merge_get(fl_dataset *ds, int64_t index, fl_sample *out)
{
    return merge_fields(ds->state, &index, 1, false, out);
}

static fl_status merge_get_batch(fl_dataset *ds, const int64_t *indices, int64_t count, fl_sample *out)
{
    return merge_fields(ds->state, indices, count, true, out);
}

static const fl_dataset_ops merge_ops = {
    .name = "merge",
    .size = merge_size,
    .get = merge_get,
    .get_batch = merge_get_batch,
    .set_epoch = combined_set_epoch,
    .release = combined_release,
};

fl_dataset *fl_merge_dataset(fl_dataset *const *sources, int count)
{
    static const char fn[] = "fl_merge_dataset";
    combined_dataset *c = combined_new(fn, sources, count);
    if (!c)
        return NULL;
    for (int i = 1; i < count; i++) {
        int64_t size = c->ends[i] - c->ends[i - 1];
        if (size != c->ends[0]) {
            fl_error(FL_ERR_SHAPE, fn, "sources[0] has %lld samples but sources[%d] has %lld: merged sources must "
                     "be of equal size", (long long)c->ends[0], i, (long long)size);
            fl_dataset tmp = {.state = c};
            combined_release(&tmp);
            return NULL;
        }
    }
    return fl__dataset_make(fn, &merge_ops, c);
}
