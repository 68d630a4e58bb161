/* The tensor dataset: sample i is row i of each of a few tensors. */
#include <stdlib.h>

#include "dataset.h"

typedef struct tensor_dataset {
    int count;
    fl_tensor *tensors[FL_SAMPLE_MAX_FIELDS];
} tensor_dataset;

static int64_t tensor_size(fl_dataset *ds)
{
    tensor_dataset *t = ds->state;
    return t->tensors[0]->shape[0];
}

static fl_status tensor_get(fl_dataset *ds, int64_t index, fl_sample *out)
{
    tensor_dataset *t = ds->state;
    fl_scope scope = fl_scope_begin();
    for (int f = 0; f < t->count; f++) {
        out->fields[f] = fl_keep(fl_index(t->tensors[f], FL_INDEX(FL_AT(index))));
        if (!out->fields[f])
            break;
        out->count = f + 1;
    }
    fl_scope_end(scope);
    if (out->count != t->count) {
        fl_sample_release(out);
        return fl__dataset_failure("fl_tensor_dataset", "fl_index");
    }
    return FL_OK;
}

/* One fl_index_select per field gathers every row of the batch at once. */
static fl_status tensor_get_batch(fl_dataset *ds, const int64_t *indices, int64_t count, fl_sample *out)
{
    tensor_dataset *t = ds->state;
    fl_scope scope = fl_scope_begin();
    fl_tensor *index = fl_from_data(indices, FL_I64, 1, &count);
    for (int f = 0; index && f < t->count; f++) {
        const fl_tensor *field = t->tensors[f];
        out->fields[f] = fl_keep(fl_index_select(field, 0, fl_to_backend(index, fl_backend_name(field))));
        if (!out->fields[f])
            break;
        out->count = f + 1;
    }
    fl_scope_end(scope);
    if (out->count != t->count) {
        fl_sample_release(out);
        return fl__dataset_failure("fl_tensor_dataset", "fl_index_select");
    }
    return FL_OK;
}

static void tensor_release(fl_dataset *ds)
{
    tensor_dataset *t = ds->state;
    for (int f = 0; f < t->count; f++)
        fl_release(t->tensors[f]);
    free(t);
}

static const fl_dataset_ops tensor_ops = {
    .name = "tensor",
    .size = tensor_size,
    .get = tensor_get,
    .get_batch = tensor_get_batch,
    .release = tensor_release,
};

fl_dataset *fl_tensor_dataset(fl_tensor *const *tensors, int count)
{
    static const char fn[] = "fl_tensor_dataset";
    if (!tensors)
        return fl_error(FL_ERR_NULL, fn, "tensors is NULL");
    if (count < 1 || count > FL_SAMPLE_MAX_FIELDS)
        return fl_error(FL_ERR_VALUE, fn, "needs 1 to %d tensors, got %d", FL_SAMPLE_MAX_FIELDS, count);
    for (int f = 0; f < count; f++) {
        if (!tensors[f]) {
            if (fl_last_status() == FL_OK)
                fl_error(FL_ERR_NULL, fn, "tensors[%d] is NULL", f);
            return NULL;
        }
    }
    char a[FL_DESC_SIZE], b[FL_DESC_SIZE];
    for (int f = 0; f < count; f++) {
        if (tensors[f]->ndim == 0)
            return fl_error(FL_ERR_SHAPE, fn, "tensors[%d] is %s: samples are slices along axis 0, so it must be "
                             "at least 1-D", f, fl_describe(tensors[f], a));
        if (tensors[f]->shape[0] != tensors[0]->shape[0])
            return fl_error(FL_ERR_SHAPE, fn, "tensors[0] is %s but tensors[%d] is %s: their lengths (axis 0) "
                             "differ", fl_describe(tensors[0], a), f, fl_describe(tensors[f], b));
    }
    tensor_dataset *t = calloc(1, sizeof *t);
    if (!t)
        return fl_error(FL_ERR_MEMORY, fn, "cannot allocate a dataset");
    t->count = count;
    for (int f = 0; f < count; f++)
        t->tensors[f] = fl_retain(tensors[f]);
    return fl__dataset_make(fn, &tensor_ops, t);
}
