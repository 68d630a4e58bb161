/* The CPU backend's arange and its copying primitives: concat, update_slice, where,
 * gather, scatter_add and index_select.
 *
 * Copies move elements by size (1, 2, 4 or 8 bytes), so every dtype, f16 and bf16
 * included, takes the same path; only scatter_add computes. Inputs may be any strided
 * view (transposed, sliced, expanded); outputs are fresh dense tensors. Index tensors
 * hold i64 values the tensor layer has already checked to be in range. */
#include <string.h>

#include "cpu.h"

#define THREADS(n) ((n) >= CPU_PARALLEL_GRAIN ? cpu_threads() : 1)

/* ---- arange ---- */

#define ARANGE(type)                                          \
    do {                                                      \
        type *p = cpu_data(out);                              \
        for (int64_t i = 0; i < out->numel; i++)              \
            p[i] = (type)(start + (double)i * step);          \
    } while (0)

static int cpu_arange(const fl_backend *self, fl_tensor *out, double start, double step)
{
    int rc = cpu_alloc(out);
    if (rc)
        return rc;
    switch (out->dtype) {
    case FL_U8: ARANGE(uint8_t); break;
    case FL_I32: ARANGE(int32_t); break;
    case FL_I64: ARANGE(int64_t); break;
    case FL_F32: ARANGE(float); break;
    case FL_F64: ARANGE(double); break;
    default: return fl_backend_error(FL_ERR_DTYPE, "arange has no %s kernel", fl_dtype_name(out->dtype));
    }
    return 0;
}

static int cpu_concat(const fl_backend *self, fl_tensor *out, const fl_tensor *const *inputs, int count, int axis)
{
    int rc = cpu_alloc(out);
    if (rc)
        return rc;
    int64_t strides[FL_MAX_DIMS];
    cpu_dense_strides(out->ndim, out->shape, strides);
    size_t size = cpu_element_size(out->dtype);
    char *base = cpu_data(out);
    int64_t position = 0;
    for (int i = 0; i < count; i++) {
        const fl_tensor *in = inputs[i];
        cpu_copy_strided(base + position * strides[axis] * (int64_t)size, strides, cpu_data(in), cpu_impl(in)->strides,
                     in->ndim, in->shape, size);
        position += in->shape[axis];
    }
    return 0;
}

static int cpu_update_slice(const fl_backend *self, fl_tensor *out, const fl_tensor *base, const fl_tensor *src, const int64_t *start,
                            const int64_t *step)
{
    int rc = cpu_alloc(out);
    if (rc || out->numel == 0)
        return rc;
    cpu_copy_to_dense(cpu_data(out), base);
    if (src->numel == 0)
        return 0;
    int64_t dense[FL_MAX_DIMS], region[FL_MAX_DIMS], offset = 0;
    cpu_dense_strides(out->ndim, out->shape, dense);
    for (int i = 0; i < out->ndim; i++) {
        offset += start[i] * dense[i];
        region[i] = dense[i] * step[i];
    }
    size_t size = cpu_element_size(out->dtype);
    cpu_copy_strided((char *)cpu_data(out) + offset * (int64_t)size, region, cpu_data(src), cpu_impl(src)->strides,
                 src->ndim, src->shape, size);
    return 0;
}

/* ---- where ---- */

#define SELECT_ROW(type)                                                     \
    do {                                                                     \
        type *y_ = (type *)y;                                                \
        const type *a_ = (const type *)a_row, *b_ = (const type *)b_row;     \
        for (int64_t j = 0; j < inner; j++)                                  \
            y_[j] = SELECT_BITS(type, c[j * step[0]], a_[j * step[1]], b_[j * step[2]]); \
    } while (0)

/* c ? a : b on the bit patterns, both sides loaded: a branch here mispredicts on
 * every sign change of a ReLU's input, and GCC does not turn the ?: of two loads
 * into a vector blend by itself. */
#define SELECT_BITS(type, c, a, b) ((type)(((a) & -(type)(c)) | ((b) & ~-(type)(c))))

/* The common case, every operand dense: one flat loop the compiler vectorizes. */
#define SELECT_DENSE(type)                                                                     \
    do {                                                                                       \
        type *y_ = cpu_data(out);                                                              \
        const type *a_ = cpu_data(a), *b_ = cpu_data(b);                                       \
        const _Bool *c_ = cpu_data(cond);                                                      \
        _Pragma("omp parallel for simd num_threads(threads) if(threads > 1) schedule(static)") \
        for (int64_t i = 0; i < n; i++)                                                        \
            y_[i] = SELECT_BITS(type, c_[i], a_[i], b_[i]);                                    \
    } while (0)

static int cpu_where(const fl_backend *self, fl_tensor *out, const fl_tensor *cond, const fl_tensor *a, const fl_tensor *b)
{
    int rc = cpu_alloc(out);
    if (rc || out->numel == 0)
        return rc;
    if (cpu_contiguous(cond) && cpu_contiguous(a) && cpu_contiguous(b)) {
        int64_t n = out->numel;
        int threads = THREADS(n);
        switch (cpu_element_size(out->dtype)) {
        case 1: SELECT_DENSE(uint8_t); break;
        case 2: SELECT_DENSE(uint16_t); break;
        case 4: SELECT_DENSE(uint32_t); break;
        default: SELECT_DENSE(uint64_t); break;
        }
        return 0;
    }
    const cpu_tensor *operands[3] = {cpu_impl(cond), cpu_impl(a), cpu_impl(b)};
    int ndim = out->ndim;
    int64_t inner = ndim ? out->shape[ndim - 1] : 1, rows = out->numel / inner, step[3] = {0, 0, 0};
    for (int k = 0; k < 3 && ndim; k++)
        step[k] = operands[k]->strides[ndim - 1];
    size_t size = cpu_element_size(out->dtype);
    int threads = rows > 1 ? THREADS(out->numel) : 1;
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        int64_t offsets[3] = {0, 0, 0}, rest = r;
        for (int i = ndim - 2; i >= 0; i--) {
            int64_t coord = rest % out->shape[i];
            rest /= out->shape[i];
            for (int k = 0; k < 3; k++)
                offsets[k] += coord * operands[k]->strides[i];
        }
        const _Bool *c = (const _Bool *)cpu_data(cond) + offsets[0];
        const char *a_row = (const char *)cpu_data(a) + offsets[1] * (int64_t)size;
        const char *b_row = (const char *)cpu_data(b) + offsets[2] * (int64_t)size;
        char *y = (char *)cpu_data(out) + r * inner * (int64_t)size;
        switch (size) {
        case 1: SELECT_ROW(uint8_t); break;
        case 2: SELECT_ROW(uint16_t); break;
        case 4: SELECT_ROW(uint32_t); break;
        default: SELECT_ROW(uint64_t); break;
        }
    }
    return 0;
}

/* ---- gather, scatter_add, index_select ----
 *
 * Each walks an index-shaped space split around the indexed axis into (outer, k,
 * inner): outer runs over the axes before it, inner over the axes after it. The
 * element offsets of the outer and inner coordinates in a strided tensor are
 * tabulated once, so the inner loops do no division. */

typedef struct axis_split {
    int64_t outer, length, inner;
    int64_t *outer_offsets, *inner_offsets; /* in elements, of the tensor tabulated */
} axis_split;

/* Tabulates the offsets in a tensor of the given strides of every coordinate of
 * shape's axes [from, to). */
static void tabulate(int64_t *table, const int64_t *shape, const int64_t *strides, int from, int to)
{
    table[0] = 0;
    int64_t n = 1;
    for (int i = to - 1; i >= from; i--) {
        /* Coordinates of axis i vary slowest among [i, to): prefix the table so far. */
        for (int64_t c = shape[i] - 1; c >= 0; c--)
            for (int64_t k = 0; k < n; k++)
                table[c * n + k] = table[k] + c * strides[i];
        n *= shape[i];
    }
}

static int split_around(axis_split *s, const int64_t *shape, int ndim, int axis, const int64_t *strides)
{
    s->outer = s->inner = 1;
    for (int i = 0; i < axis; i++)
        s->outer *= shape[i];
    for (int i = axis + 1; i < ndim; i++)
        s->inner *= shape[i];
    s->length = shape[axis];
    s->outer_offsets = cpu_scratch_alloc((size_t)(s->outer + 1) * sizeof(int64_t));
    s->inner_offsets = cpu_scratch_alloc((size_t)(s->inner + 1) * sizeof(int64_t));
    if (!s->outer_offsets || !s->inner_offsets) {
        cpu_scratch_free(s->outer_offsets);
        cpu_scratch_free(s->inner_offsets);
        return fl_backend_error(FL_ERR_MEMORY, "no memory for offset tables");
    }
    tabulate(s->outer_offsets, shape, strides, 0, axis);
    tabulate(s->inner_offsets, shape, strides, axis + 1, ndim);
    return 0;
}

static void split_free(axis_split *s)
{
    cpu_scratch_free(s->outer_offsets);
    cpu_scratch_free(s->inner_offsets);
}

#define GATHER_LOOP(type)                                                                       \
    do {                                                                                        \
        const type *a_ = cpu_data(a);                                                           \
        type *y_ = cpu_data(out);                                                               \
        _Pragma("omp parallel for num_threads(threads) if(threads > 1) schedule(static)")      \
        for (int64_t ok = 0; ok < s.outer * s.length; ok++) {                                   \
            int64_t o = ok / s.length, base = s.outer_offsets[o];                               \
            const int64_t *idx = positions + ok * s.inner;                                          \
            type *y = y_ + ok * s.inner;                                                        \
            for (int64_t j = 0; j < s.inner; j++)                                               \
                y[j] = a_[base + idx[j] * stride + s.inner_offsets[j]];                         \
        }                                                                                       \
    } while (0)

/* out (index's shape) takes a's element at the index value along axis and out's own
 * coordinates elsewhere. */
static int cpu_gather(const fl_backend *self, fl_tensor *out, const fl_tensor *a, int axis, const fl_tensor *index)
{
    int rc = cpu_alloc(out);
    if (rc || out->numel == 0)
        return rc;
    void *scratch;
    const int64_t *positions = cpu_dense(index, &scratch);
    if (!positions)
        return fl_backend_error(FL_ERR_MEMORY, "no memory for a dense copy of the index");
    /* a's offsets are tabulated over the index's shape: out's coordinates address a. */
    axis_split s;
    if ((rc = split_around(&s, out->shape, out->ndim, axis, cpu_impl(a)->strides))) {
        cpu_scratch_free(scratch);
        return rc;
    }
    int64_t stride = cpu_impl(a)->strides[axis];
    int threads = s.outer * s.length > 1 ? THREADS(out->numel) : 1;
    switch (cpu_element_size(out->dtype)) {
    case 1: GATHER_LOOP(uint8_t); break;
    case 2: GATHER_LOOP(uint16_t); break;
    case 4: GATHER_LOOP(uint32_t); break;
    default: GATHER_LOOP(uint64_t); break;
    }
    split_free(&s);
    cpu_scratch_free(scratch);
    return 0;
}

/* Writes that collide differ only along axis, so threads split the outer and inner
 * coordinates (inner in blocks, for locality) and each walks the axis in order: no
 * races, and the sums are the same for any thread count. */
#define SCATTER_BLOCK 256
#define SCATTER_ADD_LOOP(type)                                                                  \
    do {                                                                                        \
        type *y_ = cpu_data(out);                                                               \
        const type *src_ = values;                                                              \
        _Pragma("omp parallel for num_threads(threads) if(threads > 1) schedule(static)")      \
        for (int64_t ob = 0; ob < s.outer * blocks; ob++) {                                     \
            int64_t o = ob / blocks, from = ob % blocks * SCATTER_BLOCK;                        \
            int64_t to = from + SCATTER_BLOCK < s.inner ? from + SCATTER_BLOCK : s.inner;       \
            type *y = y_ + s.outer_offsets[o];                                                  \
            for (int64_t k = 0; k < s.length; k++) {                                            \
                int64_t row = (o * s.length + k) * s.inner;                                     \
                for (int64_t j = from; j < to; j++)                                             \
                    y[s.inner_offsets[j] + positions[row + j] * stride] += src_[row + j];           \
            }                                                                                   \
        }                                                                                       \
    } while (0)

/* Slices split into runs of this many elements among the threads: a quarter of an
 * embedding row of 256. */
#define SLICE_BLOCK 64
#define SLICE_ADD_LOOP(type)                                                                    \
    do {                                                                                        \
        type *y_ = cpu_data(out);                                                               \
        const type *src_ = cpu_data(src);                                                       \
        _Pragma("omp parallel for num_threads(threads) if(threads > 1) schedule(static)")      \
        for (int64_t ob = 0; ob < outer * blocks; ob++) {                                       \
            int64_t o = ob / blocks, from = ob % blocks * SLICE_BLOCK;                          \
            int64_t to = from + SLICE_BLOCK < inner ? from + SLICE_BLOCK : inner;               \
            for (int64_t k = 0; k < length; k++) {                                              \
                type *restrict y = y_ + (o * out->shape[axis] + positions[k * step]) * inner;   \
                const type *restrict x = src_ + (o * length + k) * inner;                       \
                for (int64_t j = from; j < to; j++)                                             \
                    y[j] += x[j];                                                               \
            }                                                                                   \
        }                                                                                       \
    } while (0)

/* The scatter of an index_select's gradient (an embedding's): one position per slice
 * along axis, broadcast over whole slices (stride 0 on every other axis), a
 * contiguous float src. Each slice is added as a run, without the dense copy of the
 * index (eight bytes for each element added) or a lookup per element. The threads
 * split the slices' elements, so repeated positions still sum in order. Returns
 * false, having done nothing, for any other case. */
static bool scatter_slices(fl_tensor *out, int axis, const fl_tensor *index, const fl_tensor *src)
{
    const int64_t *index_strides = cpu_impl(index)->strides;
    if ((out->dtype != FL_F32 && out->dtype != FL_F64) || !cpu_contiguous(src) || !cpu_contiguous(out))
        return false;
    int64_t outer = 1, inner = 1, length = index->shape[axis], step = index_strides[axis];
    for (int i = 0; i < out->ndim; i++) {
        if (i == axis)
            continue;
        if (index->shape[i] != out->shape[i] || (index_strides[i] != 0 && index->shape[i] > 1))
            return false;
        if (i < axis)
            outer *= out->shape[i];
        else
            inner *= out->shape[i];
    }
    const int64_t *positions = cpu_data(index);
    int64_t blocks = (inner + SLICE_BLOCK - 1) / SLICE_BLOCK;
    int threads = outer * blocks > 1 ? THREADS(index->numel) : 1;
    if (out->dtype == FL_F32)
        SLICE_ADD_LOOP(float);
    else
        SLICE_ADD_LOOP(double);
    return true;
}

/* out = base, then out[index[p] along axis, p elsewhere] += src[p] for every p of
 * index's shape (src has index's shape). */
static int cpu_scatter_add(const fl_backend *self, fl_tensor *out, const fl_tensor *base, int axis, const fl_tensor *index,
                           const fl_tensor *src)
{
    int rc = cpu_alloc(out);
    if (rc || out->numel == 0)
        return rc;
    cpu_copy_to_dense(cpu_data(out), base);
    if (index->numel == 0 || scatter_slices(out, axis, index, src))
        return 0;
    void *index_scratch, *src_scratch = NULL;
    const int64_t *positions = cpu_dense(index, &index_scratch);
    const void *values = positions ? cpu_dense(src, &src_scratch) : NULL;
    axis_split s = {0};
    int64_t strides[FL_MAX_DIMS];
    cpu_dense_strides(out->ndim, out->shape, strides);
    if (!values)
        rc = fl_backend_error(FL_ERR_MEMORY, "no memory for dense copies of the index and source");
    else
        rc = split_around(&s, index->shape, index->ndim, axis, strides);
    if (rc == 0) {
        int64_t stride = strides[axis];
        int64_t blocks = (s.inner + SCATTER_BLOCK - 1) / SCATTER_BLOCK;
        int threads = s.outer * blocks > 1 ? THREADS(index->numel) : 1;
        switch (out->dtype) {
        case FL_BOOL: SCATTER_ADD_LOOP(_Bool); break;
        case FL_U8: SCATTER_ADD_LOOP(uint8_t); break;
        case FL_I32: SCATTER_ADD_LOOP(int32_t); break;
        case FL_I64: SCATTER_ADD_LOOP(int64_t); break;
        case FL_F32: SCATTER_ADD_LOOP(float); break;
        case FL_F64: SCATTER_ADD_LOOP(double); break;
        default: rc = fl_backend_error(FL_ERR_DTYPE, "scatter_add has no %s kernel", fl_dtype_name(out->dtype));
        }
        split_free(&s);
    }
    cpu_scratch_free(index_scratch);
    cpu_scratch_free(src_scratch);
    return rc;
}

#define SELECT_ELEMENTS(type)                                                    \
    do {                                                                         \
        type *y_ = (type *)y;                                                    \
        const type *a_ = (const type *)a_data + from;                            \
        for (int64_t j = 0; j < s.inner; j++)                                    \
            y_[j] = a_[s.inner_offsets[j]];                                      \
    } while (0)

/* out[o, k, j] = a[o, index[k], j]: whole slices, so when a's inner axes are dense
 * (an embedding table [vocab, dim] along axis 0) each is one memcpy. */
static int cpu_index_select(const fl_backend *self, fl_tensor *out, const fl_tensor *a, int axis, const fl_tensor *index)
{
    int rc = cpu_alloc(out);
    if (rc || out->numel == 0)
        return rc;
    void *scratch;
    const int64_t *positions = cpu_dense(index, &scratch);
    if (!positions)
        return fl_backend_error(FL_ERR_MEMORY, "no memory for a dense copy of the index");
    axis_split s;
    if ((rc = split_around(&s, a->shape, a->ndim, axis, cpu_impl(a)->strides))) {
        cpu_scratch_free(scratch);
        return rc;
    }
    bool dense_slices = true;
    for (int64_t j = 0; j < s.inner && dense_slices; j++)
        dense_slices = s.inner_offsets[j] == j;
    size_t size = cpu_element_size(a->dtype);
    int64_t count = index->numel, stride = cpu_impl(a)->strides[axis];
    const char *a_data = cpu_data(a);
    char *y_data = cpu_data(out);
    int threads = s.outer * count > 1 ? THREADS(out->numel) : 1;
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
    for (int64_t ok = 0; ok < s.outer * count; ok++) {
        int64_t o = ok / count, k = ok % count;
        int64_t from = s.outer_offsets[o] + positions[k] * stride;
        char *y = y_data + ok * s.inner * (int64_t)size;
        if (dense_slices) {
            memcpy(y, a_data + from * (int64_t)size, (size_t)s.inner * size);
            continue;
        }
        switch (size) {
        case 1: SELECT_ELEMENTS(uint8_t); break;
        case 2: SELECT_ELEMENTS(uint16_t); break;
        case 4: SELECT_ELEMENTS(uint32_t); break;
        default: SELECT_ELEMENTS(uint64_t); break;
        }
    }
    split_free(&s);
    cpu_scratch_free(scratch);
    return 0;
}

void cpu_register_index(fl_backend *b)
{
    b->arange = cpu_arange;
    b->concat = cpu_concat;
    b->update_slice = cpu_update_slice;
    b->where = cpu_where;
    b->gather = cpu_gather;
    b->scatter_add = cpu_scatter_add;
    b->index_select = cpu_index_select;
}
