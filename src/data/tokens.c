/* The token dataset: windows of a token sequence, each with its next-token targets,
 * for language models. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataset.h"

typedef struct token_dataset {
    fl_tensor *tokens; /* i64 [n] */
    int64_t length, stride, count;
} token_dataset;

static int64_t token_size(fl_dataset *ds)
{
    token_dataset *t = ds->state;
    return t->count;
}

/* Window i: inputs tokens[s, s + length), targets one further, s = i * stride. */
static fl_status token_get(fl_dataset *ds, int64_t index, fl_sample *out)
{
    token_dataset *t = ds->state;
    int64_t s = index * t->stride;
    out->fields[0] = fl_index(t->tokens, FL_INDEX(FL_RANGE(s, s + t->length)));
    out->fields[1] = fl_index(t->tokens, FL_INDEX(FL_RANGE(s + 1, s + 1 + t->length)));
    out->count = 2;
    if (!out->fields[0] || !out->fields[1])
        return fl__dataset_failure("fl_token_dataset", "fl_index");
    return FL_OK;
}

/* The batch's windows in one gather per field: the positions start + j for each
 * window and each j < length, as a [count, length] index. */
static fl_status token_get_batch(fl_dataset *ds, const int64_t *indices, int64_t count, fl_sample *out)
{
    token_dataset *t = ds->state;
    if ((uint64_t)count > SIZE_MAX / sizeof(int64_t) / (uint64_t)t->length)
        return fl_error(FL_ERR_MEMORY, "fl_token_dataset", "a batch of %lld windows is too large", (long long)count),
               FL_ERR_MEMORY;
    int64_t *positions = malloc((size_t)(count * t->length) * sizeof *positions + 1);
    if (!positions)
        return fl_error(FL_ERR_MEMORY, "fl_token_dataset", "cannot allocate a batch of %lld windows", (long long)count),
               FL_ERR_MEMORY;
    for (int64_t i = 0; i < count; i++)
        for (int64_t j = 0; j < t->length; j++)
            positions[i * t->length + j] = indices[i] * t->stride + j;
    int64_t n = count * t->length;
    fl_tensor *at = fl_to_backend(fl_from_data(positions, FL_I64, 1, &n), fl_backend_name(t->tokens));
    free(positions);
    fl_tensor *next = fl_add_scalar(at, 1);
    out->fields[0] = fl_reshape(fl_index_select(t->tokens, 0, at), FL_SHAPE(count, t->length));
    out->fields[1] = fl_reshape(fl_index_select(t->tokens, 0, next), FL_SHAPE(count, t->length));
    out->count = 2;
    if (!out->fields[0] || !out->fields[1])
        return fl__dataset_failure("fl_token_dataset", "fl_index_select");
    return FL_OK;
}

static void token_release(fl_dataset *ds)
{
    token_dataset *t = ds->state;
    fl_release(t->tokens);
    free(t);
}

static const fl_dataset_ops token_ops = {
    .name = "token",
    .size = token_size,
    .get = token_get,
    .get_batch = token_get_batch,
    .release = token_release,
};

/* Takes over tokens (i64 [n], checked). */
static fl_dataset *windows(const char *fn, const char *what, fl_tensor *tokens, int64_t length, int64_t stride)
{
    int64_t n = tokens->shape[0];
    if (n < length + 1) {
        fl_release(tokens);
        return fl_error(FL_ERR_VALUE, fn, "%s holds %lld tokens: a window of %lld needs %lld (its targets run one "
                        "further)", what, (long long)n, (long long)length, (long long)length + 1);
    }
    token_dataset *t = calloc(1, sizeof *t);
    if (!t) {
        fl_release(tokens);
        return fl_error(FL_ERR_MEMORY, fn, "cannot allocate a dataset");
    }
    t->tokens = tokens;
    t->length = length;
    t->stride = stride;
    t->count = (n - length - 1) / stride + 1;
    return fl__dataset_make(fn, &token_ops, t);
}

static bool check_window(const char *fn, int64_t length, int64_t stride)
{
    if (length < 1 || stride < 1)
        return fl_error(FL_ERR_VALUE, fn, "length %lld and stride %lld must be positive", (long long)length,
                        (long long)stride),
               false;
    return true;
}

fl_dataset *fl_token_dataset(const fl_tensor *tokens, int64_t length, int64_t stride)
{
    static const char fn[] = "fl_token_dataset";
    if (fl_null_args(fn, 1, tokens) || !check_window(fn, length, stride))
        return NULL;
    char d[FL_DESC_SIZE];
    if (tokens->ndim != 1 || !fl_dtype_is_integer(tokens->dtype))
        return fl_error(FL_ERR_DTYPE, fn, "needs a 1-D u8, i32 or i64 tensor of token ids, got %s",
                        fl_describe(tokens, d));
    fl_scope scope = fl_scope_begin();
    fl_tensor *ids = fl_keep(fl_cast(tokens, FL_I64));
    double lowest = tokens->numel ? fl_item(fl_min(ids, FL_ALL_AXES, false)) : 0;
    fl_scope_end(scope);
    if (!ids || isnan(lowest)) {
        fl_release(ids);
        return NULL;
    }
    if (lowest < 0) {
        fl_release(ids);
        return fl_error(FL_ERR_VALUE, fn, "token ids must be non-negative: %s holds %.0f", fl_describe(tokens, d),
                        lowest);
    }
    return windows(fn, fl_describe(tokens, d), ids, length, stride);
}

fl_dataset *fl_token_dataset_from_file(const char *path, fl_dtype dtype, int64_t length, int64_t stride)
{
    static const char fn[] = "fl_token_dataset_from_file";
    if (!path)
        return fl_error(FL_ERR_NULL, fn, "path is NULL");
    if (!check_window(fn, length, stride))
        return NULL;
    if (dtype != FL_U8 && dtype != FL_I32 && dtype != FL_I64)
        return fl_error(FL_ERR_DTYPE, fn, "%s: tokens are u8, i32 or i64, not %s", path,
                        dtype >= 0 && dtype < FL_DTYPE_COUNT ? fl_dtype_name(dtype) : "an unknown dtype");
    FILE *file = fopen(path, "rb");
    if (!file)
        return fl_error(FL_ERR_IO, fn, "%s: cannot open: %s", path, strerror(errno));
    unsigned char *bytes = NULL;
    size_t size = 0, capacity = 0;
    for (;;) {
        if (size == capacity) {
            capacity = capacity ? 2 * capacity : 1 << 16;
            unsigned char *grown = realloc(bytes, capacity);
            if (!grown) {
                free(bytes);
                fclose(file);
                return fl_error(FL_ERR_MEMORY, fn, "%s: cannot allocate %zu bytes", path, capacity);
            }
            bytes = grown;
        }
        size_t got = fread(bytes + size, 1, capacity - size, file);
        size += got;
        if (got == 0)
            break;
    }
    bool failed = ferror(file);
    fclose(file);
    if (failed) {
        free(bytes);
        return fl_error(FL_ERR_IO, fn, "%s: read error at offset %zu", path, size);
    }
    size_t width = fl_dtype_size(dtype);
    if (size % width) {
        free(bytes);
        return fl_error(FL_ERR_IO, fn, "%s: %zu bytes are not a whole number of %s tokens (%zu stray bytes at "
                        "offset %zu)", path, size, fl_dtype_name(dtype), size % width, size - size % width);
    }
    int64_t n = (int64_t)(size / width);
    int64_t *ids = malloc((size_t)(n ? n : 1) * sizeof *ids);
    if (!ids) {
        free(bytes);
        return fl_error(FL_ERR_MEMORY, fn, "%s: cannot allocate %lld tokens", path, (long long)n);
    }
    /* Little-endian, as NumPy's tofile writes on x86 and ARM, whatever this machine is. */
    for (int64_t i = 0; i < n; i++) {
        uint64_t v = 0;
        for (size_t b = 0; b < width; b++)
            v |= (uint64_t)bytes[(size_t)i * width + b] << (8 * b);
        ids[i] = dtype == FL_I32 ? (int64_t)(int32_t)(uint32_t)v : (int64_t)v;
        if (ids[i] < 0) {
            fl_error(FL_ERR_IO, fn, "%s: token %lld at offset %zu is %lld; token ids are non-negative", path,
                     (long long)i, (size_t)i * width, (long long)ids[i]);
            free(bytes);
            free(ids);
            return NULL;
        }
    }
    free(bytes);
    fl_tensor *tokens = fl_keep(fl_from_data(ids, FL_I64, 1, &n)); /* the dataset's own, whatever scope is open */
    free(ids);
    if (!tokens)
        return NULL;
    return windows(fn, path, tokens, length, stride);
}
