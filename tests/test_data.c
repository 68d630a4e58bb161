/* Datasets: every kind, their composition, the batch fast path, shuffle and prefetch
 * determinism, and the error paths. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flare/data.h"
#include "support.h"

/* x: f32 [n, 3] with row i = (3i, 3i + 1, 3i + 2); y: i64 [n] with y[i] = i. */
static fl_dataset *rows(int64_t n)
{
    fl_scope scope = fl_scope_begin();
    fl_tensor *x = fl_reshape(fl_arange(0, (double)(3 * n), 1, FL_F32), FL_SHAPE(n, 3));
    fl_tensor *y = fl_arange(0, (double)n, 1, FL_I64);
    fl_dataset *ds = fl_tensor_dataset((fl_tensor *[]){x, y}, 2);
    fl_scope_end(scope);
    return ds;
}

/* The label (field 1) of sample i, which for rows() is its original index. */
static int64_t label(fl_dataset *ds, int64_t i)
{
    fl_sample s;
    if (fl_dataset_get(ds, i, &s) != FL_OK)
        return -1;
    return (int64_t)fl_item(s.fields[1]);
}

/* Fails unless the two datasets give equal samples (same fields, shapes, values). */
static void assert_same_samples(fl_dataset *a, fl_dataset *b)
{
    assert_int_equal(fl_dataset_size(a), fl_dataset_size(b));
    for (int64_t i = 0; i < fl_dataset_size(a); i++) {
        fl_scope scope = fl_scope_begin();
        fl_sample sa, sb;
        assert_int_equal(fl_dataset_get(a, i, &sa), FL_OK);
        assert_int_equal(fl_dataset_get(b, i, &sb), FL_OK);
        assert_int_equal(sa.count, sb.count);
        for (int f = 0; f < sa.count; f++) {
            assert_int_equal(fl_ndim(sa.fields[f]), fl_ndim(sb.fields[f]));
            assert_memory_equal(fl_shape(sa.fields[f]), fl_shape(sb.fields[f]), sizeof(int64_t) * fl_ndim(sa.fields[f]));
            assert_close(sa.fields[f], sb.fields[f], 0, 0);
        }
        fl_scope_end(scope);
    }
}

/* ---- a dataset kind of the test's own, without a get_batch fast path ---- */

typedef struct plain_state {
    fl_dataset *inner;
    int fields; /* fields to return: more than FL_SAMPLE_MAX_FIELDS tests the check */
} plain_state;

static int64_t plain_size(fl_dataset *ds) { return fl_dataset_size(((plain_state *)ds->state)->inner); }

static fl_status plain_get(fl_dataset *ds, int64_t index, fl_sample *out)
{
    plain_state *p = ds->state;
    if (p->fields > FL_SAMPLE_MAX_FIELDS) {
        out->count = p->fields;
        return FL_OK;
    }
    fl_sample s;
    fl_scope scope = fl_scope_begin();
    fl_status status = fl_dataset_get(p->inner, index, &s);
    for (int f = 0; status == FL_OK && f < s.count; f++)
        out->fields[out->count++] = fl_keep(s.fields[f]);
    fl_scope_end(scope);
    return status;
}

static void plain_release(fl_dataset *ds)
{
    plain_state *p = ds->state;
    fl_dataset_release(p->inner);
    free(p);
}

static const fl_dataset_ops plain_ops = {.name = "plain", .size = plain_size, .get = plain_get,
                                         .release = plain_release};

static fl_dataset *plain(fl_dataset *inner, int fields)
{
    plain_state *p = malloc(sizeof *p);
    *p = (plain_state){inner, fields};
    return fl_dataset_new(&plain_ops, p);
}

/* ---- counting index_select, to see the fast path taken ---- */

static int index_selects;
static fl_backend original;

static int counting_index_select(const fl_backend *self, fl_tensor *out, const fl_tensor *a, int axis,
                                 const fl_tensor *index)
{
    __atomic_add_fetch(&index_selects, 1, __ATOMIC_RELAXED);
    return self->base->index_select(self->base, out, a, axis, index);
}

static void count_index_selects(bool on)
{
    /* The table the calls go through: the lazy backend delegates index_select to cpu,
     * the others run their own. */
    const char *name = strcmp(fl_default_backend()->name, "lazy") == 0 ? "cpu" : fl_default_backend()->name;
    if (on) {
        fl_backend counting = support_derive(name);
        counting.index_select = counting_index_select;
        original = support_override(&counting);
        index_selects = 0;
    } else {
        support_override(&original);
    }
}

/* ---- tensor dataset ---- */

static void tensor_dataset_slices_rows(void **state)
{
    fl_dataset *ds = rows(4);
    assert_int_equal(fl_dataset_size(ds), 4);
    fl_sample s;
    assert_int_equal(fl_dataset_get(ds, 1, &s), FL_OK);
    assert_int_equal(s.count, 2);
    assert_values(s.fields[0], 0, 0, 3, 4, 5);
    assert_shape(s.fields[1]);
    assert_values(s.fields[1], 0, 0, 1);
    assert_int_equal(fl_dataset_get(ds, -1, &s), FL_OK); /* from the end, as in Python */
    assert_values(s.fields[0], 0, 0, 9, 10, 11);
    /* The dataset keeps its tensors: nothing else need hold them. */
    assert_int_equal(fl_dataset_get(fl_dataset_retain(ds), 0, &s), FL_OK);
    fl_dataset_release(ds);
    fl_dataset_release(ds);
}

static void tensor_dataset_errors(void **state)
{
    fl_tensor *a = fl_zeros(FL_F32, FL_SHAPE(4, 2)), *b = fl_zeros(FL_I64, FL_SHAPE(3));
    assert_fails(fl_tensor_dataset((fl_tensor *[]){a, b}, 2), FL_ERR_SHAPE,
                 "fl_tensor_dataset: tensors[0] is f32[4, 2] but tensors[1] is i64[3]: their lengths (axis 0) differ");
    assert_fails(fl_tensor_dataset((fl_tensor *[]){fl_scalar(1, FL_F32)}, 1), FL_ERR_SHAPE,
                 "tensors[0] is f32[]: samples are slices along axis 0");
    assert_fails(fl_tensor_dataset((fl_tensor *[]){a}, 0), FL_ERR_VALUE, "needs 1 to 8 tensors, got 0");
    fl_tensor *nine[9] = {a, a, a, a, a, a, a, a, a};
    assert_fails(fl_tensor_dataset(nine, 9), FL_ERR_VALUE, "got 9");
    assert_fails(fl_tensor_dataset((fl_tensor *[]){a, NULL}, 2), FL_ERR_NULL, "tensors[1] is NULL");
    assert_fails(fl_tensor_dataset(NULL, 1), FL_ERR_NULL, "tensors is NULL");

    fl_dataset *ds = rows(4);
    fl_sample s;
    assert_fails_status(fl_dataset_get(ds, 4, &s), FL_ERR_INDEX,
                        "fl_dataset_get: index 4 is out of range for a tensor dataset of 4 samples");
    assert_int_equal(s.count, 0);
    assert_fails_status(fl_dataset_get(ds, -5, &s), FL_ERR_INDEX, "index -5");
    assert_fails_status(fl_dataset_get(ds, 0, NULL), FL_ERR_NULL, "out is NULL");
    assert_fails_status(fl_dataset_get(NULL, 0, &s), FL_ERR_NULL, "the dataset is NULL");
    assert_int_equal(fl_dataset_size(NULL), -1);
    fl_clear_error();
    fl_dataset_release(ds);
    fl_dataset_release(NULL);
}

/* ---- batch ---- */

static void batch_keeps_or_drops_the_partial_batch(void **state)
{
    fl_dataset *ds = fl_batch_dataset(rows(10), 4, false, NULL, NULL);
    assert_int_equal(fl_dataset_size(ds), 3);
    fl_sample s;
    assert_int_equal(fl_dataset_get(ds, 1, &s), FL_OK);
    assert_shape(s.fields[0], 4, 3);
    assert_values(s.fields[1], 0, 0, 4, 5, 6, 7);
    assert_int_equal(fl_dataset_get(ds, 2, &s), FL_OK);
    assert_shape(s.fields[0], 2, 3);
    assert_values(s.fields[0], 0, 0, 24, 25, 26, 27, 28, 29);
    fl_dataset_release(ds);

    ds = fl_batch_dataset(rows(10), 4, true, NULL, NULL);
    assert_int_equal(fl_dataset_size(ds), 2);
    assert_fails_status(fl_dataset_get(ds, 2, &s), FL_ERR_INDEX, "batch dataset of 2 samples");
    fl_dataset_release(ds);

    ds = fl_batch_dataset(rows(3), 5, true, NULL, NULL);
    assert_int_equal(fl_dataset_size(ds), 0);
    fl_dataset_release(ds);

    assert_fails(fl_batch_dataset(rows(3), 0, false, NULL, NULL), FL_ERR_VALUE, "the batch size must be in [1,");
    assert_fails(fl_batch_dataset(NULL, 2, false, NULL, NULL), FL_ERR_NULL, "the source dataset is NULL");
}

static void batch_gathers_with_one_index_select_per_field(void **state)
{
    /* Through a shuffle and a span the tensor dataset's fast path still applies ... */
    fl_dataset *fast = fl_batch_dataset(fl_span_dataset(fl_shuffle_dataset(rows(50), 3), 5, 40), 8, false, NULL, NULL);
    /* ... and without it (plain has no get_batch) samples are fetched and stacked alike. */
    fl_dataset *slow = fl_batch_dataset(plain(fl_span_dataset(fl_shuffle_dataset(rows(50), 3), 5, 40), 2), 8, false,
                                        NULL, NULL);
    assert_same_samples(fast, slow);

    count_index_selects(true);
    fl_sample s;
    assert_int_equal(fl_dataset_get(fast, 0, &s), FL_OK);
    int fast_calls = index_selects;
    index_selects = 0;
    assert_int_equal(fl_dataset_get(slow, 0, &s), FL_OK);
    int slow_calls = index_selects;
    count_index_selects(false);
    assert_int_equal(fast_calls, 2); /* one per field */
    assert_int_equal(slow_calls, 0);
    assert_shape(s.fields[0], 8, 3);
    fl_dataset_release(fast);
    fl_dataset_release(slow);

    /* The public entry point too. */
    fl_dataset *ds = rows(6);
    assert_int_equal(fl_dataset_get_batch(ds, (const int64_t[]){5, 0, 5}, 3, &s), FL_OK);
    assert_values(s.fields[1], 0, 0, 5, 0, 5);
    assert_fails_status(fl_dataset_get_batch(ds, (const int64_t[]){1, 6}, 2, &s), FL_ERR_INDEX,
                        "indices[1] = 6 is out of range for a tensor dataset of 6 samples");
    assert_fails_status(fl_dataset_get_batch(ds, (const int64_t[]){1}, 0, &s), FL_ERR_VALUE,
                        "a batch needs at least one index, got 0");
    assert_fails_status(fl_dataset_get_batch(ds, NULL, 2, &s), FL_ERR_NULL, "indices is NULL");
    fl_dataset_release(ds);
}

/* A collate that sums the images and stacks the labels. */
static fl_status sum_collate(const fl_sample *samples, int64_t count, fl_sample *out, void *user)
{
    int *calls = user;
    (*calls)++;
    fl_tensor *x = samples[0].fields[0], *y[16];
    for (int64_t i = 1; i < count; i++)
        x = fl_add(x, samples[i].fields[0]);
    for (int64_t i = 0; i < count; i++)
        y[i] = samples[i].fields[1];
    out->fields[0] = x; /* for a batch of one, a field of the sample itself */
    out->fields[1] = fl_stack(y, (int)count, 0);
    out->count = 2;
    return FL_OK;
}

static fl_status too_many_fields(const fl_sample *samples, int64_t count, fl_sample *out, void *user)
{
    out->count = *(int *)user;
    for (int f = 0; f < out->count && f < FL_SAMPLE_MAX_FIELDS; f++)
        out->fields[f] = f ? NULL : samples[0].fields[0];
    return FL_OK;
}

/* Fails after filling a field (which the batch dataset must release); with user set,
 * through a tensor error, else silently. */
static fl_status failing_collate(const fl_sample *samples, int64_t count, fl_sample *out, void *user)
{
    out->fields[0] = fl_copy(samples[0].fields[0]);
    out->count = 1;
    if (!user)
        return FL_ERR_VALUE;
    fl_add(samples[0].fields[0], fl_zeros(FL_F32, FL_SHAPE(2)));
    return fl_last_status();
}

static void batch_with_a_collate_of_ones_own(void **state)
{
    int calls = 0;
    fl_dataset *ds = fl_batch_dataset(rows(5), 2, false, sum_collate, &calls);
    fl_sample s;
    assert_int_equal(fl_dataset_get(ds, 1, &s), FL_OK);
    assert_values(s.fields[0], 0, 0, 6 + 9, 7 + 10, 8 + 11);
    assert_values(s.fields[1], 0, 0, 2, 3);
    assert_int_equal(fl_dataset_get(ds, 2, &s), FL_OK); /* the partial batch of one */
    assert_values(s.fields[1], 0, 0, 4);
    assert_int_equal(calls, 2);
    fl_dataset_release(ds);

    ds = fl_batch_dataset(rows(5), 2, false, failing_collate, NULL);
    assert_fails_status(fl_dataset_get(ds, 0, &s), FL_ERR_BACKEND,
                        "fl_batch_dataset: the collate function failed without recording an error");
    assert_int_equal(s.count, 0);
    fl_dataset_release(ds);
    ds = fl_batch_dataset(rows(5), 2, false, failing_collate, &calls);
    assert_fails_status(fl_dataset_get(ds, 0, &s), FL_ERR_SHAPE, "fl_add: shapes f32[3] and f32[2] do not broadcast");
    fl_dataset_release(ds);
    int fields = 9;
    ds = fl_batch_dataset(rows(5), 2, false, too_many_fields, &fields);
    assert_fails_status(fl_dataset_get(ds, 0, &s), FL_ERR_VALUE, "the collate function returned 9 fields (at most 8)");
    fields = 2;
    assert_fails_status(fl_dataset_get(ds, 0, &s), FL_ERR_NULL, "the collate function returned a NULL field 1");
    fields = 1;
    assert_int_equal(fl_dataset_get(ds, 0, &s), FL_OK); /* a field passed through from a sample */
    assert_values(s.fields[0], 0, 0, 0, 1, 2);
    fl_dataset_release(ds);

    /* The default collate needs samples that stack. */
    fl_tensor *ragged[] = {fl_zeros(FL_F32, FL_SHAPE(2, 2))};
    fl_dataset *parts[] = {fl_tensor_dataset(ragged, 1), fl_tensor_dataset((fl_tensor *[]){fl_zeros(FL_F32, FL_SHAPE(1, 3))}, 1)};
    ds = fl_batch_dataset(fl_concat_dataset(parts, 2), 3, false, NULL, NULL);
    assert_fails_status(fl_dataset_get(ds, 0, &s), FL_ERR_SHAPE, "fl_stack");
    fl_dataset_release(ds);
}

/* ---- shuffle and resample ---- */

static void shuffle_is_a_seeded_permutation(void **state)
{
    enum { n = 64 };
    fl_dataset *a = fl_shuffle_dataset(rows(n), 42), *b = fl_shuffle_dataset(rows(n), 42);
    fl_dataset *c = fl_shuffle_dataset(rows(n), 43);
    int64_t order[n], seen[n] = {0};
    bool identity = true, same_as_c = true;
    for (int64_t i = 0; i < n; i++) {
        order[i] = label(a, i);
        assert_true(order[i] >= 0 && order[i] < n);
        seen[order[i]]++;
        identity &= order[i] == i;
        same_as_c &= order[i] == label(c, i);
        assert_int_equal(label(b, i), order[i]); /* same seed, same order */
    }
    for (int64_t i = 0; i < n; i++)
        assert_int_equal(seen[i], 1);
    assert_false(identity);
    assert_false(same_as_c);

    /* A new epoch, a new order; epoch 0 again, the first order. */
    fl_dataset_set_epoch(a, 1);
    bool changed = false;
    for (int64_t i = 0; i < n; i++)
        changed |= label(a, i) != order[i];
    assert_true(changed);
    fl_dataset_set_epoch(a, 0);
    for (int64_t i = 0; i < n; i++)
        assert_int_equal(label(a, i), order[i]);

    /* The permutation is part of the format: fixed for a seed on every machine. */
    fl_dataset *small = fl_shuffle_dataset(rows(8), 1);
    const int64_t expected[8] = {0, 5, 2, 7, 3, 4, 1, 6};
    for (int64_t i = 0; i < 8; i++)
        assert_int_equal(label(small, i), expected[i]);
    fl_dataset_release(small);

    fl_dataset *empty = fl_shuffle_dataset(fl_span_dataset(rows(3), 1, 0), 5);
    assert_int_equal(fl_dataset_size(empty), 0);
    fl_dataset_release(empty);
    assert_fails(fl_shuffle_dataset(NULL, 1), FL_ERR_NULL, "fl_shuffle_dataset: the source dataset is NULL");
    fl_dataset_release(a);
    fl_dataset_release(b);
    fl_dataset_release(c);
}

static void resample_reads_given_indices(void **state)
{
    fl_dataset *ds = fl_resample_dataset(rows(5), (const int64_t[]){3, 3, 0, 4}, 4);
    assert_int_equal(fl_dataset_size(ds), 4);
    assert_int_equal(label(ds, 0), 3);
    assert_int_equal(label(ds, 1), 3);
    assert_int_equal(label(ds, 2), 0);
    assert_int_equal(label(ds, 3), 4);
    fl_sample s;
    assert_int_equal(fl_dataset_get_batch(ds, (const int64_t[]){3, 2}, 2, &s), FL_OK);
    assert_values(s.fields[1], 0, 0, 4, 0);
    fl_dataset_release(ds);

    assert_fails(fl_resample_dataset(rows(5), (const int64_t[]){1, 5}, 2), FL_ERR_INDEX,
                 "fl_resample_dataset: indices[1] = 5 is out of range for a tensor dataset of 5 samples");
    assert_fails(fl_resample_dataset(rows(5), (const int64_t[]){-1}, 1), FL_ERR_INDEX, "indices[0] = -1");
    assert_fails(fl_resample_dataset(rows(5), NULL, 2), FL_ERR_NULL, "indices is NULL");
    assert_fails(fl_resample_dataset(rows(5), (const int64_t[]){1}, -1), FL_ERR_VALUE, "the count is negative");
    ds = fl_resample_dataset(rows(5), NULL, 0);
    assert_int_equal(fl_dataset_size(ds), 0);
    fl_dataset_release(ds);
}

/* ---- transform ---- */

/* (x - mean) / std with mean and std from user. */
static fl_tensor *normalize(const fl_tensor *x, void *user)
{
    const double *stats = user;
    return fl_div(fl_sub(x, fl_scalar(stats[0], FL_F32)), fl_scalar(stats[1], FL_F32));
}

/* Fails on the sample whose label (in field 0 here) is 3; silently on label 4. */
static fl_tensor *fail_on_three(const fl_tensor *y, void *user)
{
    double v = fl_item(y);
    if (v == 4)
        return NULL;
    if (v == 3)
        return fl_reshape(y, FL_SHAPE(7)); /* i64[] to [7]: an error */
    return fl_mul(y, fl_scalar(10, FL_I64));
}

static void transform_maps_fields(void **state)
{
    double stats[] = {1.0, 2.0};
    fl_dataset *ds = fl_transform_dataset(rows(4), (const fl_transform_fn[]){normalize, NULL}, 2, stats);
    fl_sample s;
    assert_int_equal(fl_dataset_get(ds, 1, &s), FL_OK);
    assert_values(s.fields[0], 0, 0, 1, 1.5, 2);
    assert_dtype(s.fields[1], FL_I64);
    assert_values(s.fields[1], 0, 0, 1);
    /* Batches of transformed samples: fetched one by one, then stacked. */
    fl_dataset *batches = fl_batch_dataset(fl_dataset_retain(ds), 3, false, NULL, NULL);
    assert_int_equal(fl_dataset_get(batches, 0, &s), FL_OK);
    assert_values(s.fields[0], 0, 0, -0.5, 0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5);
    fl_dataset_release(batches);
    fl_dataset_release(ds);

    fl_dataset *labels = fl_tensor_dataset((fl_tensor *[]){fl_arange(0, 6, 1, FL_I64)}, 1);
    ds = fl_transform_dataset(labels, (const fl_transform_fn[]){fail_on_three}, 1, NULL);
    assert_int_equal(fl_dataset_get(ds, 2, &s), FL_OK);
    assert_values(s.fields[0], 0, 0, 20);
    assert_fails_status(fl_dataset_get(ds, 3, &s), FL_ERR_SHAPE, "fl_reshape");
    assert_fails_status(fl_dataset_get(ds, 4, &s), FL_ERR_VALUE,
                        "fl_transform_dataset: the transform of field 0 returned NULL without recording an error");
    fl_dataset_release(ds);

    assert_fails(fl_transform_dataset(rows(2), NULL, 1, NULL), FL_ERR_NULL, "transforms is NULL");
    assert_fails(fl_transform_dataset(rows(2), (const fl_transform_fn[]){NULL}, 9, NULL), FL_ERR_VALUE,
                 "needs 0 to 8 transforms, got 9");
}

/* ---- concat, merge, span, partition ---- */

static void concat_puts_datasets_end_to_end(void **state)
{
    fl_dataset *parts[] = {rows(3), fl_span_dataset(rows(5), 0, 0), fl_span_dataset(rows(5), 1, 2), rows(1)};
    fl_dataset *ds = fl_concat_dataset(parts, 4);
    assert_int_equal(fl_dataset_size(ds), 6);
    const int64_t expected[] = {0, 1, 2, 1, 2, 0};
    for (int64_t i = 0; i < 6; i++)
        assert_int_equal(label(ds, i), expected[i]);
    /* A batch across the boundary between sources. */
    fl_dataset *batches = fl_batch_dataset(ds, 4, false, NULL, NULL);
    fl_sample s;
    assert_int_equal(fl_dataset_get(batches, 0, &s), FL_OK);
    assert_values(s.fields[1], 0, 0, 0, 1, 2, 1);
    fl_dataset_release(batches);

    assert_fails(fl_concat_dataset(NULL, 2), FL_ERR_NULL, "fl_concat_dataset: sources is NULL");
    assert_fails(fl_concat_dataset((fl_dataset *[]){NULL}, 0), FL_ERR_VALUE, "needs at least one source, got 0");
    assert_fails(fl_concat_dataset((fl_dataset *[]){rows(2), NULL}, 2), FL_ERR_NULL, "sources[1] is NULL");
}

static void merge_puts_fields_side_by_side(void **state)
{
    fl_dataset *images = fl_tensor_dataset((fl_tensor *[]){fl_arange(0, 4, 1, FL_F32)}, 1);
    fl_dataset *ds = fl_merge_dataset((fl_dataset *[]){images, rows(4)}, 2);
    assert_int_equal(fl_dataset_size(ds), 4);
    fl_sample s;
    assert_int_equal(fl_dataset_get(ds, 2, &s), FL_OK);
    assert_int_equal(s.count, 3);
    assert_values(s.fields[0], 0, 0, 2);
    assert_values(s.fields[1], 0, 0, 6, 7, 8);
    assert_values(s.fields[2], 0, 0, 2);
    /* Batches go through each source's fast path. */
    fl_dataset *batches = fl_batch_dataset(fl_dataset_retain(ds), 2, false, NULL, NULL);
    count_index_selects(true);
    assert_int_equal(fl_dataset_get(batches, 1, &s), FL_OK);
    int calls = index_selects;
    count_index_selects(false);
    assert_int_equal(calls, 3);
    assert_values(s.fields[0], 0, 0, 2, 3);
    assert_values(s.fields[2], 0, 0, 2, 3);
    fl_dataset_release(batches);
    fl_dataset_release(ds);

    assert_fails(fl_merge_dataset((fl_dataset *[]){rows(4), rows(3)}, 2), FL_ERR_SHAPE,
                 "fl_merge_dataset: sources[0] has 4 samples but sources[1] has 3");
    fl_dataset *many[5] = {rows(2), rows(2), rows(2), rows(2), rows(2)};
    ds = fl_merge_dataset(many, 5);
    assert_fails_status(fl_dataset_get(ds, 0, &s), FL_ERR_VALUE, "the merged sample has more than 8 fields");
    fl_dataset_release(ds);
}

static void span_and_partition(void **state)
{
    fl_dataset *ds = fl_span_dataset(rows(10), 2, 3);
    assert_int_equal(fl_dataset_size(ds), 3);
    assert_int_equal(label(ds, 0), 2);
    assert_int_equal(label(ds, 2), 4);
    fl_dataset_release(ds);
    assert_fails(fl_span_dataset(rows(10), 8, 3), FL_ERR_INDEX,
                 "fl_span_dataset: samples [8, 8 + 3) are out of range for a tensor dataset of 10 samples");
    assert_fails(fl_span_dataset(rows(10), -1, 3), FL_ERR_INDEX, NULL);
    assert_fails(fl_span_dataset(rows(10), 0, -1), FL_ERR_INDEX, NULL);

    /* 10 samples over 3 ranks: 3 each, contiguous; sample 9 is left out. */
    for (int rank = 0; rank < 3; rank++) {
        ds = fl_partition_dataset(rows(10), rank, 3);
        assert_int_equal(fl_dataset_size(ds), 3);
        for (int64_t i = 0; i < 3; i++)
            assert_int_equal(label(ds, i), 3 * rank + i);
        fl_dataset_release(ds);
    }
    ds = fl_partition_dataset(rows(2), 2, 3); /* fewer samples than ranks */
    assert_int_equal(fl_dataset_size(ds), 0);
    fl_dataset_release(ds);
    assert_fails(fl_partition_dataset(rows(10), 3, 3), FL_ERR_VALUE,
                 "fl_partition_dataset: rank 3 is not in a world of size 3");
    assert_fails(fl_partition_dataset(rows(10), 0, 0), FL_ERR_VALUE, "world of size 0");
    assert_fails(fl_partition_dataset(NULL, 0, 1), FL_ERR_NULL, "fl_partition_dataset: the source dataset is NULL");
}

/* A validation span and a training span of one shuffled source: the training
 * pipeline's epochs reshuffle within its own span and never move a sample across. */
static void epochs_stop_at_a_split(void **state)
{
    enum { n = 40, held = 10 };
    fl_dataset *shuffled = fl_shuffle_dataset(rows(n), 7);
    fl_dataset *validation = fl_span_dataset(fl_dataset_retain(shuffled), 0, held);
    fl_dataset *picked = fl_resample_dataset(fl_dataset_retain(shuffled), (const int64_t[]){1, 3}, 2);
    fl_dataset *train = fl_shuffle_dataset(fl_span_dataset(shuffled, held, n - held), 8);
    int64_t before[held], first[n - held], picks[2] = {label(picked, 0), label(picked, 1)};
    bool in_validation[n] = {false};
    for (int64_t i = 0; i < held; i++) {
        before[i] = label(validation, i);
        in_validation[before[i]] = true;
    }
    for (int64_t i = 0; i < n - held; i++)
        first[i] = label(train, i);
    bool reshuffled = false;
    for (int64_t epoch = 1; epoch < 4; epoch++) {
        fl_dataset_set_epoch(train, epoch);
        fl_dataset_set_epoch(picked, epoch);
        for (int64_t i = 0; i < held; i++)
            assert_int_equal(label(validation, i), before[i]);
        for (int64_t i = 0; i < n - held; i++) {
            assert_false(in_validation[label(train, i)]);
            reshuffled |= label(train, i) != first[i];
        }
        assert_int_equal(label(picked, 0), picks[0]);
        assert_int_equal(label(picked, 1), picks[1]);
    }
    assert_true(reshuffled); /* the shuffle above the split still gets the epoch */

    /* A partition passes the epoch on: every rank reshuffles alike, shares disjoint. */
    fl_dataset *ranks[2] = {fl_partition_dataset(fl_shuffle_dataset(rows(n), 3), 0, 2),
                            fl_partition_dataset(fl_shuffle_dataset(rows(n), 3), 1, 2)};
    int64_t share0[n / 2];
    for (int64_t i = 0; i < n / 2; i++)
        share0[i] = label(ranks[0], i);
    bool moved = false;
    for (int r = 0; r < 2; r++)
        fl_dataset_set_epoch(ranks[r], 1);
    int seen[n] = {0};
    for (int r = 0; r < 2; r++) {
        for (int64_t i = 0; i < n / 2; i++) {
            seen[label(ranks[r], i)]++;
            moved |= r == 0 && label(ranks[r], i) != share0[i];
        }
    }
    for (int i = 0; i < n; i++)
        assert_int_equal(seen[i], 1);
    assert_true(moved);
    fl_dataset_release(ranks[0]);
    fl_dataset_release(ranks[1]);
    fl_dataset_release(validation);
    fl_dataset_release(picked);
    fl_dataset_release(train);
    assert_no_error();
}

/* A random split is drawn once from its seed: disjoint parts that cover the source
 * and keep their samples whatever epochs the pipelines above them start. */
static void random_split_is_fixed_by_its_seed(void **state)
{
    enum { n = 50 };
    fl_dataset *parts[3];
    assert_int_equal(fl_random_split(rows(n), (const int64_t[]){10, 0, 40}, 3, 9, parts), FL_OK);
    assert_int_equal(fl_dataset_size(parts[0]), 10);
    assert_int_equal(fl_dataset_size(parts[1]), 0);
    assert_int_equal(fl_dataset_size(parts[2]), 40);
    fl_dataset *train = fl_shuffle_dataset(fl_dataset_retain(parts[2]), 4);
    int64_t validation[10], training[40];
    int seen[n] = {0};
    bool in_order = true;
    for (int64_t i = 0; i < 10; i++) {
        validation[i] = label(parts[0], i);
        seen[validation[i]]++;
    }
    for (int64_t i = 0; i < 40; i++) {
        training[i] = label(parts[2], i);
        seen[training[i]]++;
        in_order &= i == 0 || training[i] > training[i - 1];
    }
    for (int i = 0; i < n; i++)
        assert_int_equal(seen[i], 1); /* disjoint, and every sample in one part */
    assert_false(in_order);
    bool reshuffled = false;
    for (int64_t epoch = 1; epoch < 4; epoch++) {
        fl_dataset_set_epoch(train, epoch);
        fl_dataset_set_epoch(parts[0], epoch);
        fl_dataset_set_epoch(parts[2], epoch);
        for (int64_t i = 0; i < 10; i++)
            assert_int_equal(label(parts[0], i), validation[i]);
        for (int64_t i = 0; i < 40; i++) {
            assert_int_equal(label(parts[2], i), training[i]);
            int64_t t = label(train, i);
            for (int64_t j = 0; j < 10; j++)
                assert_int_not_equal(t, validation[j]);
            reshuffled |= t != training[i];
        }
    }
    assert_true(reshuffled);
    /* Same seed, same split; another seed, another. */
    fl_dataset *again[2], *other[2];
    assert_int_equal(fl_random_split(rows(n), (const int64_t[]){10, 40}, 2, 9, again), FL_OK);
    assert_same_samples(again[0], parts[0]);
    assert_int_equal(fl_random_split(rows(n), (const int64_t[]){10, 40}, 2, 10, other), FL_OK);
    bool differs = false;
    for (int64_t i = 0; i < 10; i++)
        differs |= label(other[0], i) != validation[i];
    assert_true(differs);
    for (int k = 0; k < 2; k++) {
        fl_dataset_release(again[k]);
        fl_dataset_release(other[k]);
    }
    for (int k = 0; k < 3; k++)
        fl_dataset_release(parts[k]);
    fl_dataset_release(train);
    assert_no_error();

    /* On failure every part is NULL, whatever out held. */
    fl_dataset *keep0 = rows(1), *keep1 = rows(1), *bad[2] = {keep0, keep1};
    assert_fails_status(fl_random_split(rows(n), (const int64_t[]){10, 30}, 2, 1, bad), FL_ERR_VALUE,
                        "fl_random_split: the sizes add up to 40, not to the 50 samples of the tensor dataset");
    assert_null(bad[0]);
    assert_null(bad[1]);
    assert_fails_status(fl_random_split(rows(n), (const int64_t[]){-1, 51}, 2, 1, bad), FL_ERR_VALUE,
                        "sizes[0] = -1");
    assert_fails_status(fl_random_split(rows(n), (const int64_t[]){60}, 1, 1, bad), FL_ERR_VALUE, "sizes[0] = 60");
    assert_fails_status(fl_random_split(rows(n), NULL, 1, 1, bad), FL_ERR_NULL, "fl_random_split: sizes is NULL");
    assert_fails_status(fl_random_split(rows(n), (const int64_t[]){50}, 0, 1, bad), FL_ERR_VALUE, "at least one part");
    assert_fails_status(fl_random_split(NULL, (const int64_t[]){50}, 1, 1, bad), FL_ERR_NULL,
                        "fl_random_split: the source dataset is NULL");
    fl_dataset_release(keep0);
    fl_dataset_release(keep1);
}

/* ---- tokens ---- */

static void assert_window(fl_dataset *ds, int64_t i, const int64_t *expected_input, int64_t length)
{
    fl_sample s;
    assert_int_equal(fl_dataset_get(ds, i, &s), FL_OK);
    assert_int_equal(s.count, 2);
    assert_dtype(s.fields[0], FL_I64);
    assert_shape(s.fields[0], length);
    assert_shape(s.fields[1], length);
    int64_t in[16], target[16];
    assert_int_equal(fl_to_host(s.fields[0], in, sizeof in), FL_OK);
    assert_int_equal(fl_to_host(s.fields[1], target, sizeof target), FL_OK);
    for (int64_t j = 0; j < length; j++) {
        assert_int_equal(in[j], expected_input[j]);
        assert_int_equal(target[j], expected_input[j + 1]); /* the next token */
    }
}

static void token_windows_hold_inputs_and_next_tokens(void **state)
{
    /* 11 tokens 100 ... 110: windows of 4 side by side, then overlapping by 1. */
    fl_tensor *tokens = fl_arange(100, 111, 1, FL_I32);
    const int64_t seq[] = {100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110};
    fl_dataset *side = fl_token_dataset(tokens, 4, 4);
    assert_int_equal(fl_dataset_size(side), 2);
    assert_window(side, 0, seq, 4);
    assert_window(side, 1, seq + 4, 4);
    fl_dataset *overlapping = fl_token_dataset(tokens, 4, 3);
    assert_int_equal(fl_dataset_size(overlapping), 3);
    for (int i = 0; i < 3; i++)
        assert_window(overlapping, i, seq + 3 * i, 4);
    fl_dataset *exact = fl_token_dataset(fl_arange(100, 105, 1, FL_I64), 4, 1);
    assert_int_equal(fl_dataset_size(exact), 1);
    assert_window(exact, 0, seq, 4);

    /* Shuffled batches through the gather fast path, then prefetched: each row of a
     * batch is the window its get gives. */
    fl_dataset *shuffled = fl_shuffle_dataset(fl_dataset_retain(overlapping), 3);
    fl_dataset *batches = fl_prefetch_dataset(fl_batch_dataset(fl_dataset_retain(shuffled), 2, false, NULL, NULL), 2, 0);
    assert_int_equal(fl_dataset_size(batches), 2);
    for (int64_t b = 0; b < 2; b++) {
        fl_sample batch;
        assert_int_equal(fl_dataset_get(batches, b, &batch), FL_OK);
        int64_t rows_in_batch = b == 0 ? 2 : 1;
        assert_shape(batch.fields[0], rows_in_batch, 4);
        assert_shape(batch.fields[1], rows_in_batch, 4);
        for (int64_t r = 0; r < rows_in_batch; r++) {
            fl_sample one;
            assert_int_equal(fl_dataset_get(shuffled, 2 * b + r, &one), FL_OK);
            for (int f = 0; f < 2; f++)
                assert_close(fl_index(batch.fields[f], FL_INDEX(FL_AT(r))), one.fields[f], 0, 0);
        }
    }
    fl_dataset_release(batches);
    fl_dataset_release(shuffled);
    fl_dataset_release(side);
    fl_dataset_release(overlapping);
    fl_dataset_release(exact);
    assert_no_error();

    assert_fails(fl_token_dataset(fl_arange(0, 4, 1, FL_I64), 4, 1), FL_ERR_VALUE,
                 "fl_token_dataset: i64[4] holds 4 tokens: a window of 4 needs 5");
    assert_fails(fl_token_dataset(tokens, 0, 1), FL_ERR_VALUE, "length 0 and stride 1 must be positive");
    assert_fails(fl_token_dataset(tokens, 2, 0), FL_ERR_VALUE, "stride 0 must be positive");
    assert_fails(fl_token_dataset(fl_ones(FL_F32, FL_SHAPE(8)), 2, 1), FL_ERR_DTYPE,
                 "needs a 1-D u8, i32 or i64 tensor of token ids, got f32[8]");
    assert_fails(fl_token_dataset(fl_ones(FL_I64, FL_SHAPE(2, 8)), 2, 1), FL_ERR_DTYPE, "got i64[2, 8]");
    assert_fails(fl_token_dataset(T_I64(FL_SHAPE(4), 1, -2, 3, 4), 2, 1), FL_ERR_VALUE,
                 "token ids must be non-negative: i64[4] holds -2");
    assert_fails(fl_token_dataset(NULL, 2, 1), FL_ERR_NULL, "fl_token_dataset");
}

static void write_file(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, size, f), size);
    assert_int_equal(fclose(f), 0);
}

static void token_windows_from_a_file(void **state)
{
    char dir[] = "/tmp/flare_tokens_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char text[512], ints[512], odd[512], negative[512];
    snprintf(text, sizeof text, "%s/text.txt", dir);
    snprintf(ints, sizeof ints, "%s/ids.i32", dir);
    snprintf(odd, sizeof odd, "%s/odd.i32", dir);
    snprintf(negative, sizeof negative, "%s/negative.i64", dir);
    write_file(text, "hello world", 11);
    /* 300, 70000, 5, 2^31 - 1, 0, little-endian */
    const unsigned char le[] = {0x2c, 0x01, 0, 0, 0x70, 0x11, 0x01, 0, 5, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0};
    write_file(ints, le, sizeof le);
    write_file(odd, le, 10);
    const unsigned char neg[] = {1, 0, 0, 0, 0, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    write_file(negative, neg, sizeof neg);

    fl_dataset *chars = fl_token_dataset_from_file(text, FL_U8, 5, 5);
    assert_int_equal(fl_dataset_size(chars), 2);
    const int64_t hello[] = {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'};
    assert_window(chars, 0, hello, 5);
    assert_window(chars, 1, hello + 5, 5);
    fl_dataset_release(chars);

    fl_dataset *ids = fl_token_dataset_from_file(ints, FL_I32, 2, 1);
    assert_int_equal(fl_dataset_size(ids), 3);
    const int64_t values[] = {300, 70000, 5, 2147483647, 0};
    for (int i = 0; i < 3; i++)
        assert_window(ids, i, values + i, 2);
    fl_dataset_release(ids);
    assert_no_error();

    char expected[600];
    snprintf(expected, sizeof expected, "%s: 10 bytes are not a whole number of i32 tokens (2 stray bytes at offset 8)",
             odd);
    assert_fails(fl_token_dataset_from_file(odd, FL_I32, 1, 1), FL_ERR_IO, expected);
    snprintf(expected, sizeof expected, "%s: token 1 at offset 8 is -2", negative);
    assert_fails(fl_token_dataset_from_file(negative, FL_I64, 1, 1), FL_ERR_IO, expected);
    snprintf(expected, sizeof expected, "%s holds 11 tokens: a window of 11 needs 12", text);
    assert_fails(fl_token_dataset_from_file(text, FL_U8, 11, 1), FL_ERR_VALUE, expected);
    assert_fails(fl_token_dataset_from_file(text, FL_F32, 2, 1), FL_ERR_DTYPE, "tokens are u8, i32 or i64, not f32");
    snprintf(expected, sizeof expected, "%s/missing: cannot open", dir);
    char missing[512];
    snprintf(missing, sizeof missing, "%s/missing", dir);
    assert_fails(fl_token_dataset_from_file(missing, FL_U8, 2, 1), FL_ERR_IO, expected);
    assert_fails(fl_token_dataset_from_file(NULL, FL_U8, 2, 1), FL_ERR_NULL, "path is NULL");
    remove(text);
    remove(ints);
    remove(odd);
    remove(negative);
    rmdir(dir);
}

/* ---- prefetch ---- */

static fl_dataset *pipeline(int workers, int depth)
{
    fl_dataset *ds = fl_batch_dataset(fl_shuffle_dataset(rows(203), 11), 16, false, NULL, NULL);
    return workers ? fl_prefetch_dataset(ds, workers, depth) : ds;
}

static void prefetch_gives_the_source_samples_in_order(void **state)
{
    fl_dataset *reference = pipeline(0, 0);
    const int worker_counts[] = {1, 2, 3, 8};
    for (int w = 0; w < 4; w++) {
        for (int depth = 0; depth <= worker_counts[w] + 1; depth += worker_counts[w] + 1) {
            fl_dataset *ds = pipeline(worker_counts[w], depth);
            assert_same_samples(ds, reference);
            /* A second pass, from the start again. */
            assert_same_samples(ds, reference);
            /* Out of sequence: jumps forward and back. */
            fl_sample a, b;
            fl_scope scope = fl_scope_begin();
            const int64_t jumps[] = {7, 2, 3, 12, 0, 12};
            for (int j = 0; j < 6; j++) {
                assert_int_equal(fl_dataset_get(ds, jumps[j], &a), FL_OK);
                assert_int_equal(fl_dataset_get(reference, jumps[j], &b), FL_OK);
                assert_close(a.fields[1], b.fields[1], 0, 0);
            }
            fl_scope_end(scope);
            /* New epochs reach the shuffle beneath, and nothing built ahead is stale. */
            fl_dataset_set_epoch(ds, 5);
            fl_dataset_set_epoch(reference, 5);
            assert_same_samples(ds, reference);
            fl_dataset_set_epoch(ds, 0);
            fl_dataset_set_epoch(reference, 0);
            fl_dataset_release(ds);
        }
    }
    fl_dataset_release(reference);
    assert_no_error();
}

/* A random augmentation: noise added to the row. */
static fl_tensor *jitter(const fl_tensor *x, void *user)
{
    return fl_add(x, fl_rand(FL_F32, fl_ndim(x), fl_shape(x)));
}

/* The augmented rows of 2 epochs, batched, through `workers` prefetch threads (0: none),
 * the consumer drawing random numbers of its own between batches when `draws` (as a
 * training step's dropout does). */
static fl_tensor *augmented_epochs(int workers, bool draws)
{
    fl_manual_seed(99);
    fl_dataset *ds = fl_batch_dataset(fl_transform_dataset(rows(23), (const fl_transform_fn[]){jitter}, 1, NULL), 4,
                                      false, NULL, NULL);
    if (workers)
        ds = fl_prefetch_dataset(ds, workers, 0);
    fl_tensor *parts[12];
    int count = 0;
    for (int64_t epoch = 0; epoch < 2; epoch++) {
        fl_dataset_set_epoch(ds, epoch);
        for (int64_t i = 0; i < fl_dataset_size(ds); i++) {
            fl_sample s;
            assert_int_equal(fl_dataset_get(ds, i, &s), FL_OK);
            parts[count++] = s.fields[0];
            if (draws)
                fl_rand(FL_F32, FL_SHAPE(5));
        }
    }
    fl_dataset_release(ds);
    return fl_concat(parts, count, 0);
}

static void augmentation_is_reproducible_whatever_the_workers(void **state)
{
    fl_tensor *reference = augmented_epochs(0, false);
    for (int workers = 0; workers <= 2; workers++) {
        for (int repeat = 0; repeat < 3; repeat++)
            assert_close(augmented_epochs(workers, true), reference, 0, 0);
    }
    /* Each epoch draws anew, noise in [0, 1) on every row. */
    fl_tensor *x = fl_reshape(fl_arange(0, 69, 1, FL_F32), FL_SHAPE(23, 3));
    fl_tensor *epochs[2];
    assert_int_equal(fl_split(fl_sub(reference, fl_concat((fl_tensor *[]){x, x}, 2, 0)), (const int64_t[]){23, 23},
                              2, 0, epochs),
                     FL_OK);
    for (int e = 0; e < 2; e++)
        assert_true(fl_item(fl_min(epochs[e], NULL, 0, false)) >= 0 && fl_item(fl_max(epochs[e], NULL, 0, false)) < 1);
    assert_true(fl_item(fl_max(fl_abs(fl_sub(epochs[0], epochs[1])), NULL, 0, false)) > 0.01);
    assert_no_error();
}

static void prefetch_reports_worker_errors_on_get(void **state)
{
    fl_dataset *labels = fl_tensor_dataset((fl_tensor *[]){fl_arange(0, 8, 1, FL_I64)}, 1);
    fl_dataset *ds = fl_prefetch_dataset(fl_transform_dataset(labels, (const fl_transform_fn[]){fail_on_three}, 1,
                                                              NULL), 3, 0);
    fl_sample s;
    for (int64_t i = 0; i < 8; i++) {
        fl_status status = fl_dataset_get(ds, i, &s);
        if (i == 3) {
            assert_fails_status(status, FL_ERR_SHAPE, "fl_prefetch_dataset: sample 3: fl_reshape");
        } else if (i == 4) {
            assert_fails_status(status, FL_ERR_VALUE, "sample 4: fl_transform_dataset: the transform of field 0");
        } else {
            assert_int_equal(status, FL_OK);
            assert_values(s.fields[0], 0, 0, 10.0 * i);
        }
    }
    fl_dataset_release(ds);

    assert_fails(fl_prefetch_dataset(rows(4), 0, 0), FL_ERR_VALUE, "needs 1 to 256 workers");
    assert_fails(fl_prefetch_dataset(rows(4), 4, 2), FL_ERR_VALUE, "got 4 workers and depth 2");
    assert_fails(fl_prefetch_dataset(NULL, 2, 0), FL_ERR_NULL, "fl_prefetch_dataset: the source dataset is NULL");
}

static void prefetch_shuts_down_cleanly(void **state)
{
    /* Released at once, midway with workers busy, and after the end. */
    fl_dataset_release(pipeline(4, 0));
    fl_dataset *ds = pipeline(4, 8);
    fl_sample s;
    assert_int_equal(fl_dataset_get(ds, 0, &s), FL_OK);
    fl_dataset_release(ds);
    ds = pipeline(2, 0);
    for (int64_t i = 0; i < fl_dataset_size(ds); i++)
        assert_int_equal(fl_dataset_get(ds, i, &s), FL_OK);
    fl_dataset_release(ds);
    /* Nested: prefetch workers reading a prefetch dataset. */
    ds = fl_prefetch_dataset(fl_batch_dataset(fl_prefetch_dataset(rows(40), 2, 0), 4, false, NULL, NULL), 2, 0);
    fl_dataset *reference = fl_batch_dataset(rows(40), 4, false, NULL, NULL);
    assert_same_samples(ds, reference);
    fl_dataset_release(reference);
    fl_dataset_release(ds);
}

/* ---- datasets of one's own, ownership, and NULL propagation ---- */

static void datasets_of_ones_own(void **state)
{
    fl_dataset *ds = plain(rows(3), 2);
    assert_int_equal(label(ds, 2), 2);
    fl_dataset_release(ds);
    ds = plain(rows(3), FL_SAMPLE_MAX_FIELDS + 1);
    fl_sample s;
    assert_fails_status(fl_dataset_get(ds, 0, &s), FL_ERR_VALUE, "the plain dataset returned 9 fields (at most 8)");
    fl_dataset_release(ds);
    assert_fails(fl_dataset_new(NULL, NULL), FL_ERR_NULL, "fl_dataset_new: ops and its size and get entries");
    assert_fails(fl_dataset_new(&(fl_dataset_ops){.name = "nothing"}, NULL), FL_ERR_NULL, NULL);
}

static void wrappers_of_a_failed_dataset_keep_the_first_error(void **state)
{
    fl_dataset *ds = fl_prefetch_dataset(
        fl_batch_dataset(fl_transform_dataset(fl_shuffle_dataset(fl_tensor_dataset(NULL, 1), 1),
                                              (const fl_transform_fn[]){NULL}, 1, NULL),
                         4, false, NULL, NULL),
        2, 0);
    assert_fails(ds, FL_ERR_NULL, "fl_tensor_dataset: tensors is NULL");
    fl_dataset *sources[] = {rows(2), fl_span_dataset(fl_resample_dataset(NULL, NULL, 0), 0, 0)};
    assert_fails(fl_merge_dataset(sources, 2), FL_ERR_NULL, "fl_resample_dataset: the source dataset is NULL");
}

/* ---- a dataset written the natural way: get stores what tensor functions return ---- */

typedef struct natural_state {
    fl_tensor *x; /* f32 [n, 3] */
} natural_state;

static int64_t natural_size(fl_dataset *ds) { return fl_dim(((natural_state *)ds->state)->x, 0); }

/* Field 0: row index scaled by 2 (two temporaries); field 1: the same tensor again;
 * field 2: the whole tensor the dataset holds, retained. */
static fl_status natural_get(fl_dataset *ds, int64_t index, fl_sample *out)
{
    natural_state *st = ds->state;
    fl_tensor *row = fl_mul_scalar(fl_index(st->x, FL_INDEX(FL_AT(index))), 2);
    out->fields[0] = row;
    out->fields[1] = row;
    out->fields[2] = fl_retain(st->x);
    out->count = 3;
    return row ? FL_OK : fl_last_status();
}

static fl_status natural_get_batch(fl_dataset *ds, const int64_t *indices, int64_t count, fl_sample *out)
{
    natural_state *st = ds->state;
    fl_tensor *index = fl_from_data(indices, FL_I64, 1, &count);
    out->fields[0] = fl_mul_scalar(fl_index_select(st->x, 0, index), 2);
    out->count = 1;
    return out->fields[0] ? FL_OK : fl_last_status();
}

static void natural_release(fl_dataset *ds)
{
    natural_state *st = ds->state;
    fl_release(st->x);
    free(st);
}

static fl_dataset *natural(int64_t n, bool with_batch)
{
    static const fl_dataset_ops ops = {.name = "natural", .size = natural_size, .get = natural_get,
                                       .release = natural_release};
    static const fl_dataset_ops batch_ops = {.name = "natural", .size = natural_size, .get = natural_get,
                                             .get_batch = natural_get_batch, .release = natural_release};
    natural_state *st = malloc(sizeof *st);
    fl_scope scope = fl_scope_begin();
    st->x = fl_keep(fl_reshape(fl_arange(0, (double)(3 * n), 1, FL_F32), FL_SHAPE(n, 3)));
    fl_scope_end(scope);
    return fl_dataset_new(with_batch ? &batch_ops : &ops, st);
}

/* Inside the caller's scope, outside any, through wrappers and on prefetch workers:
 * the fields are right and nothing is released twice or leaked (ASan and LSan). */
static void a_natural_get_needs_no_scope_of_its_own(void **state)
{
    for (int with_batch = 0; with_batch < 2; with_batch++) {
        fl_dataset *ds = natural(6, with_batch);
        for (int i = 0; i < 6; i++) {
            fl_scope scope = fl_scope_begin();
            fl_sample s;
            assert_int_equal(fl_dataset_get(ds, i, &s), FL_OK);
            assert_int_equal(s.count, 3);
            assert_ptr_equal(s.fields[0], s.fields[1]);
            assert_close(s.fields[0], fl_mul_scalar(fl_arange(3.0 * i, 3.0 * i + 3, 1, FL_F32), 2), 0, 0);
            fl_scope_end(scope);
        }
        fl_sample s;
        assert_int_equal(fl_dataset_get(ds, 1, &s), FL_OK); /* outside any scope: the caller's */
        fl_sample_release(&s);
        assert_int_equal(fl_dataset_get_batch(ds, (const int64_t[]){2, 0}, 2, &s), FL_OK);
        fl_sample_release(&s);

        fl_dataset *loader = fl_prefetch_dataset(
            fl_batch_dataset(fl_shuffle_dataset(fl_dataset_retain(ds), 3), 4, false, NULL, NULL), 2, 0);
        for (int epoch = 0; epoch < 3; epoch++) {
            fl_dataset_set_epoch(loader, epoch);
            for (int64_t b = 0; b < fl_dataset_size(loader); b++) {
                fl_scope scope = fl_scope_begin();
                fl_sample batch;
                assert_int_equal(fl_dataset_get(loader, b, &batch), FL_OK);
                assert_int_equal(fl_item(fl_sum(batch.fields[0], NULL, 0, false)) > 0, 1);
                fl_scope_end(scope);
            }
        }
        fl_dataset_release(loader);
        fl_dataset_release(ds);
    }
}

/* Outside any scope the caller owns the fields (LeakSanitizer checks the release). */
static void samples_outside_a_scope_belong_to_the_caller(void **state)
{
    fl_dataset *ds = fl_batch_dataset(rows(5), 2, false, NULL, NULL);
    fl_sample s;
    assert_int_equal(fl_dataset_get(ds, 0, &s), FL_OK);
    assert_int_equal(s.count, 2);
    fl_sample_release(&s);
    assert_int_equal(fl_dataset_get_batch(ds, (const int64_t[]){0, 1}, 2, &s), FL_OK);
    fl_sample_release(&s);
    assert_int_equal(s.count, 0);
    fl_sample_release(NULL);
    fl_dataset_release(ds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        scoped_test(tensor_dataset_slices_rows),
        scoped_test(tensor_dataset_errors),
        scoped_test(batch_keeps_or_drops_the_partial_batch),
        scoped_test(batch_gathers_with_one_index_select_per_field),
        scoped_test(batch_with_a_collate_of_ones_own),
        scoped_test(shuffle_is_a_seeded_permutation),
        scoped_test(resample_reads_given_indices),
        scoped_test(transform_maps_fields),
        scoped_test(concat_puts_datasets_end_to_end),
        scoped_test(merge_puts_fields_side_by_side),
        scoped_test(span_and_partition),
        scoped_test(epochs_stop_at_a_split),
        scoped_test(random_split_is_fixed_by_its_seed),
        scoped_test(token_windows_hold_inputs_and_next_tokens),
        scoped_test(token_windows_from_a_file),
        scoped_test(prefetch_gives_the_source_samples_in_order),
        scoped_test(augmentation_is_reproducible_whatever_the_workers),
        scoped_test(prefetch_reports_worker_errors_on_get),
        scoped_test(prefetch_shuts_down_cleanly),
        scoped_test(datasets_of_ones_own),
        scoped_test(wrappers_of_a_failed_dataset_keep_the_first_error),
        cmocka_unit_test(samples_outside_a_scope_belong_to_the_caller),
        cmocka_unit_test(a_natural_get_needs_no_scope_of_its_own),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
