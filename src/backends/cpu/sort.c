/*
 * The CPU backend's sort: a stable merge sort of every line along one axis.
 *
 * Values of every dtype are first mapped to unsigned 64-bit keys whose order is the
 * values' order (NaN above +inf, as NumPy sorts it; -0.0 equal to 0.0), so that one
 * sort serves all dtypes. A descending sort complements the keys, which keeps equal
 * values in their original order and puts NaN first, as torch.sort does.
 */
#include <math.h>
#include <string.h>

#include "cpu.h"

typedef struct entry {
    uint64_t key;
    int64_t index;
} entry;

#define SIGN_BIT (UINT64_C(1) << 63)

static uint64_t float_key(double v)
{
    if (isnan(v))
        return UINT64_MAX;
    if (v == 0)
        v = 0; /* -0.0 sorts with 0.0 */
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    /* Negative floats order backwards as integers: flip them all; flip only the
     * sign of positive ones so that they land above. */
    return bits & SIGN_BIT ? ~bits : bits | SIGN_BIT;
}

static uint64_t key_of(const void *x, int64_t i, fl_dtype dtype)
{
    switch (dtype) {
    case FL_BOOL: return ((const _Bool *)x)[i];
    case FL_U8: return ((const uint8_t *)x)[i];
    case FL_I32: return (uint64_t)(int64_t)((const int32_t *)x)[i] ^ SIGN_BIT;
    case FL_I64: return (uint64_t)((const int64_t *)x)[i] ^ SIGN_BIT;
    case FL_F32: return float_key(((const float *)x)[i]);
    default: return float_key(((const double *)x)[i]);
    }
}

/* Short runs are insertion-sorted, then merged bottom-up between a and scratch.
 * Returns the buffer that holds the result. */
#define RUN 16

static entry *merge_sort(entry *a, entry *scratch, int64_t n)
{
    for (int64_t start = 0; start < n; start += RUN) {
        int64_t end = start + RUN < n ? start + RUN : n;
        for (int64_t i = start + 1; i < end; i++) {
            entry e = a[i];
            int64_t j = i;
            for (; j > start && a[j - 1].key > e.key; j--)
                a[j] = a[j - 1];
            a[j] = e;
        }
    }
    entry *from = a, *to = scratch;
    for (int64_t width = RUN; width < n; width *= 2) {
        for (int64_t left = 0; left < n; left += 2 * width) {
            int64_t mid = left + width < n ? left + width : n;
            int64_t right = left + 2 * width < n ? left + 2 * width : n;
            int64_t i = left, j = mid, k = left;
            /* Ties take from the left run: that is what makes the sort stable. */
            while (i < mid && j < right)
                to[k++] = from[j].key < from[i].key ? from[j++] : from[i++];
            while (i < mid)
                to[k++] = from[i++];
            while (j < right)
                to[k++] = from[j++];
        }
        entry *swap = from;
        from = to;
        to = swap;
    }
    return from;
}

/* Registered by cpu_register_reduce (reduce.c). */
int cpu_sort(const fl_backend *self, fl_tensor *values, fl_tensor *indices, const fl_tensor *a, int axis, bool descending)
{
    if (a->dtype == FL_F16 || a->dtype == FL_BF16)
        return fl_backend_error(FL_ERR_DTYPE, "sort has no %s kernel", fl_dtype_name(a->dtype));
    int rc = cpu_alloc(values);
    if (rc || (rc = cpu_alloc(indices)) || a->numel == 0)
        return rc;
    int64_t outer = 1, length = a->ndim ? a->shape[axis] : 1, inner = 1;
    for (int i = 0; i < axis; i++)
        outer *= a->shape[i];
    for (int i = axis + 1; i < a->ndim; i++)
        inner *= a->shape[i];
    void *scratch;
    const char *x = cpu_dense(a, &scratch);
    if (!x)
        return fl_backend_error(FL_ERR_MEMORY, "no memory for a dense copy of the input");
    size_t size = cpu_element_size(a->dtype);
    char *sorted = cpu_data(values);
    int64_t *positions = cpu_data(indices);
    int threads = a->numel >= CPU_PARALLEL_GRAIN && outer * inner > 1 ? cpu_threads() : 1;
    bool out_of_memory = false;
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        entry *buffer = cpu_scratch_alloc(2 * (size_t)length * sizeof(entry));
        if (!buffer) {
#pragma omp atomic write
            out_of_memory = true;
        }
#pragma omp for schedule(static)
        for (int64_t line = 0; line < outer * inner; line++) {
            if (!buffer)
                continue;
            int64_t o = line / inner, i = line % inner, base = o * length * inner + i;
            for (int64_t k = 0; k < length; k++) {
                uint64_t key = key_of(x, base + k * inner, a->dtype);
                buffer[k] = (entry){descending ? ~key : key, k};
            }
            entry *result = merge_sort(buffer, buffer + length, length);
            for (int64_t k = 0; k < length; k++) {
                int64_t at = base + k * inner;
                memcpy(sorted + at * (int64_t)size, x + (base + result[k].index * inner) * (int64_t)size, size);
                positions[at] = result[k].index;
            }
        }
        cpu_scratch_free(buffer);
    }
    cpu_scratch_free(scratch);
    return out_of_memory ? fl_backend_error(FL_ERR_MEMORY, "no memory to sort lines of %lld", (long long)length) : 0;
}
