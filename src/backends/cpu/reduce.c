/*
 * The CPU backend's reductions (sum, prod, max, min, argmax, argmin) and cumsum.
 *
 * A reduction over any set of axes is done in passes of one shape,
 *
 *     out[o, i] = op over k of x[o, k, i]        (o: any outer axes, i: contiguous)
 *
 * each pass removing one run of adjacent reduced axes, innermost first. A pass has
 * two kernels, both vectorized by the compiler through independent lanes:
 *  - rows (no i): every output reduces one contiguous row into LANES accumulators;
 *  - columns: every output row accumulates whole input rows, a tile at a time.
 * Passes parallelize over independent outputs. When there are too few outputs to
 * share, the reduced axis is cut into chunks of a fixed length and the partial
 * results are combined by a second pass, so the result never depends on the
 * number of threads.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cpu.h"

typedef enum reduce_op { OP_SUM, OP_PROD, OP_MAX, OP_MIN, OP_COUNT } reduce_op;

/* out = op over x[0..length). */
typedef void (*row_kernel)(const void *x, int64_t length, void *out);
/* out[0..inner) = op over k of x[k * stride + (0..inner)]. */
typedef void (*column_kernel)(const void *x, int64_t length, int64_t stride, int64_t inner, void *out);

typedef struct kernels {
    row_kernel row;
    column_kernel columns;
} kernels;

/* 128 bytes of accumulators: four 256-bit registers, since the row kernels stream
 * (CPU_STREAMING). Enough independent sums to hide the add latency, few enough that
 * rows in cache do not pay for a long tail; docs/BENCHMARKS.md ("Vector width") has
 * the measurements behind the number. */
#define LANES(type) (128 / (int)sizeof(type))
/* The width of a column tile: a few kilobytes of outputs stay in L1 while the
 * input rows stream past. */
#define TILE_BYTES 1024
/* A reduced axis is cut into chunks of this many elements when the outputs alone
 * are too few to keep every thread busy. */
#define CHUNK_ELEMENTS 16384
#define FEW_TASKS 16

/* NaN propagates through max and min: once an accumulator holds NaN no comparison
 * replaces it, and a NaN operand always replaces the accumulator. */
#define COMBINE_SUM(a, b) ((a) + (b))
#define COMBINE_PROD(a, b) ((a) * (b))
#define COMBINE_MAX(a, b) ((b) > (a) || (b) != (b) ? (b) : (a))
#define COMBINE_MIN(a, b) ((b) < (a) || (b) != (b) ? (b) : (a))

#define REDUCE_KERNELS(name, type, identity, COMBINE)                                                  \
    static inline type name##_combine(type a, type b) { return (type)(COMBINE(a, b)); }                \
                                                                                                       \
    CPU_STREAMING static void name##_row(const void *src, int64_t length, void *out)                   \
    {                                                                                                  \
        const type *x = src;                                                                           \
        type acc[LANES(type)];                                                                         \
        for (int k = 0; k < LANES(type); k++)                                                          \
            acc[k] = identity;                                                                         \
        int64_t i = 0;                                                                                 \
        for (; i + LANES(type) <= length; i += LANES(type))                                            \
            for (int k = 0; k < LANES(type); k++)                                                      \
                acc[k] = name##_combine(acc[k], x[i + k]);                                             \
        for (int k = 0; i < length; i++, k++)                                                          \
            acc[k] = name##_combine(acc[k], x[i]);                                                     \
        for (int width = LANES(type) / 2; width > 0; width /= 2)                                       \
            for (int k = 0; k < width; k++)                                                            \
                acc[k] = name##_combine(acc[k], acc[k + width]);                                       \
        *(type *)out = acc[0];                                                                         \
    }                                                                                                  \
                                                                                                       \
    static void name##_columns(const void *src, int64_t length, int64_t stride, int64_t inner, void *dst) \
    {                                                                                                  \
        const type *x = src;                                                                           \
        type *restrict out = dst;                                                                      \
        for (int64_t j = 0; j < inner; j++)                                                            \
            out[j] = identity;                                                                         \
        int64_t k = 0;                                                                                 \
        /* Four rows at a time: a quarter of the traffic on the outputs. */                           \
        for (; k + 4 <= length; k += 4) {                                                              \
            const type *restrict r0 = x + k * stride, *restrict r1 = r0 + stride;                      \
            const type *restrict r2 = r1 + stride, *restrict r3 = r2 + stride;                         \
            for (int64_t j = 0; j < inner; j++)                                                        \
                out[j] = name##_combine(out[j], name##_combine(name##_combine(r0[j], r1[j]),           \
                                                               name##_combine(r2[j], r3[j])));         \
        }                                                                                              \
        for (; k < length; k++) {                                                                      \
            const type *restrict r = x + k * stride;                                                   \
            for (int64_t j = 0; j < inner; j++)                                                        \
                out[j] = name##_combine(out[j], r[j]);                                                 \
        }                                                                                              \
    }

#define ARITHMETIC_KERNELS(suffix, type)                              \
    REDUCE_KERNELS(sum_##suffix, type, (type)0, COMBINE_SUM)          \
    REDUCE_KERNELS(prod_##suffix, type, (type)1, COMBINE_PROD)
#define EXTREMUM_KERNELS(suffix, type, lowest, highest)               \
    REDUCE_KERNELS(max_##suffix, type, lowest, COMBINE_MAX)           \
    REDUCE_KERNELS(min_##suffix, type, highest, COMBINE_MIN)

ARITHMETIC_KERNELS(u8, uint8_t)
ARITHMETIC_KERNELS(i32, int32_t)
ARITHMETIC_KERNELS(i64, int64_t)
ARITHMETIC_KERNELS(f32, float)
ARITHMETIC_KERNELS(f64, double)
EXTREMUM_KERNELS(bool, _Bool, false, true)
EXTREMUM_KERNELS(u8, uint8_t, 0, UINT8_MAX)
EXTREMUM_KERNELS(i32, int32_t, INT32_MIN, INT32_MAX)
EXTREMUM_KERNELS(i64, int64_t, INT64_MIN, INT64_MAX)
EXTREMUM_KERNELS(f32, float, -INFINITY, INFINITY)
EXTREMUM_KERNELS(f64, double, -INFINITY, INFINITY)

#define K(name) {name##_row, name##_columns}
/* Sums and products of bool are not kernels: the tensor layer sums in i64. */
static const kernels kernel_table[OP_COUNT][FL_DTYPE_COUNT] = {
    [OP_SUM] = {[FL_U8] = K(sum_u8), [FL_I32] = K(sum_i32), [FL_I64] = K(sum_i64), [FL_F32] = K(sum_f32),
                [FL_F64] = K(sum_f64)},
    [OP_PROD] = {[FL_U8] = K(prod_u8), [FL_I32] = K(prod_i32), [FL_I64] = K(prod_i64), [FL_F32] = K(prod_f32),
                 [FL_F64] = K(prod_f64)},
    [OP_MAX] = {[FL_BOOL] = K(max_bool), [FL_U8] = K(max_u8), [FL_I32] = K(max_i32), [FL_I64] = K(max_i64),
                [FL_F32] = K(max_f32), [FL_F64] = K(max_f64)},
    [OP_MIN] = {[FL_BOOL] = K(min_bool), [FL_U8] = K(min_u8), [FL_I32] = K(min_i32), [FL_I64] = K(min_i64),
                [FL_F32] = K(min_f32), [FL_F64] = K(min_f64)},
};
#undef K

static const char *const op_names[OP_COUNT] = {"sum", "prod", "max", "min"};

/* ---- layouts and passes ---- */

/* A strided layout with each axis marked reduced or kept; size-1 axes dropped and
 * neighbours of the same kind merged where their strides allow. */
typedef struct layout {
    int ndim;
    int64_t shape[FL_MAX_DIMS], strides[FL_MAX_DIMS];
    bool reduced[FL_MAX_DIMS];
} layout;

static layout make_layout(int ndim, const int64_t *shape, const int64_t *strides, const bool *reduced)
{
    layout l = {0};
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 1)
            continue;
        int last = l.ndim - 1;
        if (last >= 0 && l.reduced[last] == reduced[i] && l.strides[last] == strides[i] * shape[i]) {
            l.shape[last] *= shape[i];
            l.strides[last] = strides[i];
            continue;
        }
        l.shape[l.ndim] = shape[i];
        l.strides[l.ndim] = strides[i];
        l.reduced[l.ndim] = reduced[i];
        l.ndim++;
    }
    return l;
}

static layout tensor_layout(const fl_tensor *t, unsigned mask, bool dense)
{
    int64_t strides[FL_MAX_DIMS];
    bool reduced[FL_MAX_DIMS];
    if (dense)
        cpu_dense_strides(t->ndim, t->shape, strides);
    else
        memcpy(strides, cpu_impl(t)->strides, sizeof strides);
    for (int i = 0; i < t->ndim; i++)
        reduced[i] = mask >> i & 1;
    return make_layout(t->ndim, t->shape, strides, reduced);
}

/* One pass: out[o, i] = op over k < length of x[offset(o) + k * stride + i]. */
typedef struct pass {
    int outer_ndim;
    int64_t outer_shape[FL_MAX_DIMS], outer_strides[FL_MAX_DIMS];
    int64_t outer, length, stride, inner;
} pass;

static int last_reduced(const layout *l)
{
    for (int i = l->ndim - 1; i >= 0; i--)
        if (l->reduced[i])
            return i;
    return -1;
}

/* Plans the pass that removes the innermost reduced axis of l. The kernels need
 * what follows it to be one contiguous axis, or nothing and a contiguous reduced
 * axis; false if l is not like that (a dense copy always is). */
static bool plan_pass(const layout *l, pass *p)
{
    int r = last_reduced(l);
    int trailing = l->ndim - 1 - r;
    if (trailing > 1 || (trailing == 1 && l->strides[r + 1] != 1) || (trailing == 0 && l->strides[r] != 1))
        return false;
    p->outer_ndim = r;
    p->outer = 1;
    for (int i = 0; i < r; i++) {
        p->outer_shape[i] = l->shape[i];
        p->outer_strides[i] = l->strides[i];
        p->outer *= l->shape[i];
    }
    p->length = l->shape[r];
    p->stride = l->strides[r];
    p->inner = trailing ? l->shape[r + 1] : 1;
    return true;
}

/* The layout of a pass's dense output: its outer axes, then the inner one. */
static layout pass_output_layout(const layout *l, const pass *p)
{
    int64_t shape[FL_MAX_DIMS], strides[FL_MAX_DIMS];
    bool reduced[FL_MAX_DIMS];
    int n = p->outer_ndim;
    memcpy(shape, p->outer_shape, (size_t)n * sizeof *shape);
    memcpy(reduced, l->reduced, (size_t)n * sizeof *reduced);
    shape[n] = p->inner;
    reduced[n] = false;
    cpu_dense_strides(n + 1, shape, strides);
    return make_layout(n + 1, shape, strides, reduced);
}

static int64_t outer_offset(const pass *p, int64_t o)
{
    int64_t offset = 0;
    for (int i = p->outer_ndim - 1; i >= 0; i--) {
        offset += o % p->outer_shape[i] * p->outer_strides[i];
        o /= p->outer_shape[i];
    }
    return offset;
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static int threads_for(int64_t work) { return work >= CPU_PARALLEL_GRAIN ? cpu_threads() : 1; }

/* Runs one pass over the first `length` elements of the reduced axis. */
static void run_pass(kernels k, size_t size, const pass *p, const char *src, char *dst, int threads)
{
    if (p->inner == 1) {
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
        for (int64_t o = 0; o < p->outer; o++)
            k.row(src + outer_offset(p, o) * size, p->length, dst + o * size);
        return;
    }
    int64_t tile = TILE_BYTES / (int64_t)size, tiles = ceil_div(p->inner, tile);
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
    for (int64_t task = 0; task < p->outer * tiles; task++) {
        int64_t o = task / tiles, j = task % tiles * tile;
        int64_t width = p->inner - j < tile ? p->inner - j : tile;
        k.columns(src + (outer_offset(p, o) + j) * size, p->length, p->stride, width,
                  dst + (o * p->inner + j) * size);
    }
}

/* A pass with a long reduced axis and few outputs: fixed-length chunks reduce in
 * parallel into partials[chunk][o, i], which a column pass then combines in order. */
static int run_chunked_pass(kernels k, size_t size, const pass *p, const char *src, char *dst, int threads)
{
    int64_t chunks = ceil_div(p->length, CHUNK_ELEMENTS), outputs = p->outer * p->inner;
    char *partials = cpu_scratch_alloc((size_t)(chunks * outputs) * size);
    if (!partials)
        return fl_backend_error(FL_ERR_MEMORY, "no memory for the partial results of a reduction");
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
    for (int64_t c = 0; c < chunks; c++) {
        pass piece = *p;
        int64_t start = c * CHUNK_ELEMENTS;
        piece.length = p->length - start < CHUNK_ELEMENTS ? p->length - start : CHUNK_ELEMENTS;
        run_pass(k, size, &piece, src + start * p->stride * (int64_t)size, partials + c * outputs * (int64_t)size, 1);
    }
    pass combine = {.outer = 1, .length = chunks, .stride = outputs, .inner = outputs};
    run_pass(k, size, &combine, partials, dst, threads_for(chunks * outputs));
    cpu_scratch_free(partials);
    return 0;
}

static int reduce(fl_tensor *out, const fl_tensor *a, unsigned mask, reduce_op op)
{
    kernels k = kernel_table[op][a->dtype];
    if (!k.row)
        return fl_backend_error(FL_ERR_DTYPE, "%s has no %s kernel", op_names[op], fl_dtype_name(a->dtype));
    int rc = cpu_alloc(out);
    if (rc || out->numel == 0)
        return rc;
    size_t size = cpu_element_size(a->dtype);
    char *result = cpu_data(out);
    if (a->numel == 0) { /* an empty reduced axis: every output is the identity */
        k.row(NULL, 0, result);
        for (int64_t i = 1; i < out->numel; i++)
            memcpy(result + i * (int64_t)size, result, size);
        return 0;
    }
    layout l = tensor_layout(a, mask, false);
    if (last_reduced(&l) < 0) { /* only size-1 axes are reduced */
        cpu_copy_to_dense(result, a);
        return 0;
    }
    pass p;
    void *scratch = NULL, *temp = NULL;
    const char *src = cpu_data(a);
    if (!plan_pass(&l, &p)) {
        src = cpu_dense(a, &scratch);
        if (!src)
            return fl_backend_error(FL_ERR_MEMORY, "no memory for a dense copy of the input");
        l = tensor_layout(a, mask, true);
        plan_pass(&l, &p);
    }
    for (;;) {
        layout next = pass_output_layout(&l, &p);
        bool last = last_reduced(&next) < 0;
        char *dst = last ? result : cpu_scratch_alloc((size_t)(p.outer * p.inner) * size);
        if (!dst) {
            rc = fl_backend_error(FL_ERR_MEMORY, "no memory for the partial results of a reduction");
            break;
        }
        int threads = threads_for(p.outer * p.length * p.inner);
        bool few_tasks = p.outer * ceil_div(p.inner * (int64_t)size, TILE_BYTES) < FEW_TASKS;
        if (few_tasks && p.length >= 2 * CHUNK_ELEMENTS)
            rc = run_chunked_pass(k, size, &p, src, dst, threads);
        else
            run_pass(k, size, &p, src, dst, threads);
        cpu_scratch_free(temp);
        temp = last ? NULL : dst;
        if (rc || last)
            break;
        src = dst;
        l = next;
        plan_pass(&l, &p);
    }
    cpu_scratch_free(temp);
    cpu_scratch_free(scratch);
    return rc;
}

static int cpu_sum(const fl_backend *self, fl_tensor *out, const fl_tensor *a, unsigned axes) { return reduce(out, a, axes, OP_SUM); }
static int cpu_prod(const fl_backend *self, fl_tensor *out, const fl_tensor *a, unsigned axes) { return reduce(out, a, axes, OP_PROD); }
static int cpu_max(const fl_backend *self, fl_tensor *out, const fl_tensor *a, unsigned axes) { return reduce(out, a, axes, OP_MAX); }
static int cpu_min(const fl_backend *self, fl_tensor *out, const fl_tensor *a, unsigned axes) { return reduce(out, a, axes, OP_MIN); }

/* ---- single-axis operations on a dense [outer, length, inner] view ---- */

typedef struct axis_view {
    int64_t outer, length, inner;
} axis_view;

static axis_view view_along(const fl_tensor *t, int axis)
{
    axis_view v = {1, t->ndim ? t->shape[axis] : 1, 1};
    for (int i = 0; i < axis; i++)
        v.outer *= t->shape[i];
    for (int i = axis + 1; i < t->ndim; i++)
        v.inner *= t->shape[i];
    return v;
}

/* ---- argmax, argmin: the first extreme; a NaN counts as more extreme than any number ---- */

#define BETTER_MAX(v, best) ((v) > (best) || ((v) != (v) && (best) == (best)))
#define BETTER_MIN(v, best) ((v) < (best) || ((v) != (v) && (best) == (best)))

#define ARG_KERNEL(name, type, BETTER)                                                          \
    static void name(const void *src, axis_view v, int64_t *out, int threads)                   \
    {                                                                                           \
        const type *x = src;                                                                    \
        enum { TILE = TILE_BYTES / sizeof(type) };                                              \
        int64_t tiles = (v.inner + TILE - 1) / TILE;                                            \
        _Pragma("omp parallel for num_threads(threads) if(threads > 1) schedule(static)")      \
        for (int64_t task = 0; task < v.outer * tiles; task++) {                                \
            int64_t o = task / tiles, j0 = task % tiles * TILE;                                 \
            int64_t width = v.inner - j0 < TILE ? v.inner - j0 : TILE;                          \
            const type *base = x + o * v.length * v.inner + j0;                                 \
            int64_t *index = out + o * v.inner + j0;                                            \
            type best[TILE];                                                                    \
            for (int64_t j = 0; j < width; j++) {                                               \
                best[j] = base[j];                                                              \
                index[j] = 0;                                                                   \
            }                                                                                   \
            for (int64_t k = 1; k < v.length; k++) {                                            \
                const type *row = base + k * v.inner;                                           \
                for (int64_t j = 0; j < width; j++)                                             \
                    if (BETTER(row[j], best[j])) {                                              \
                        best[j] = row[j];                                                       \
                        index[j] = k;                                                           \
                    }                                                                           \
            }                                                                                   \
        }                                                                                       \
    }

#define ARG_KERNELS(suffix, type)                         \
    ARG_KERNEL(argmax_##suffix, type, BETTER_MAX)         \
    ARG_KERNEL(argmin_##suffix, type, BETTER_MIN)

ARG_KERNELS(bool, _Bool)
ARG_KERNELS(u8, uint8_t)
ARG_KERNELS(i32, int32_t)
ARG_KERNELS(i64, int64_t)
ARG_KERNELS(f32, float)
ARG_KERNELS(f64, double)

typedef void (*arg_kernel)(const void *x, axis_view v, int64_t *out, int threads);

static const arg_kernel arg_table[2][FL_DTYPE_COUNT] = {
    {[FL_BOOL] = argmax_bool, [FL_U8] = argmax_u8, [FL_I32] = argmax_i32, [FL_I64] = argmax_i64,
     [FL_F32] = argmax_f32, [FL_F64] = argmax_f64},
    {[FL_BOOL] = argmin_bool, [FL_U8] = argmin_u8, [FL_I32] = argmin_i32, [FL_I64] = argmin_i64,
     [FL_F32] = argmin_f32, [FL_F64] = argmin_f64},
};

static int arg_extremum(fl_tensor *out, const fl_tensor *a, int axis, bool minimum)
{
    const char *name = minimum ? "argmin" : "argmax";
    arg_kernel kernel = arg_table[minimum][a->dtype];
    if (!kernel)
        return fl_backend_error(FL_ERR_DTYPE, "%s has no %s kernel", name, fl_dtype_name(a->dtype));
    axis_view v = view_along(a, axis);
    if (v.length == 0 && out->numel > 0)
        return fl_backend_error(FL_ERR_SHAPE, "%s of an empty axis", name);
    int rc = cpu_alloc(out);
    if (rc || out->numel == 0)
        return rc;
    void *scratch;
    const void *x = cpu_dense(a, &scratch);
    if (!x)
        return fl_backend_error(FL_ERR_MEMORY, "no memory for a dense copy of the input");
    kernel(x, v, cpu_data(out), threads_for(a->numel));
    cpu_scratch_free(scratch);
    return 0;
}

static int cpu_argmax(const fl_backend *self, fl_tensor *out, const fl_tensor *a, int axis) { return arg_extremum(out, a, axis, false); }
static int cpu_argmin(const fl_backend *self, fl_tensor *out, const fl_tensor *a, int axis) { return arg_extremum(out, a, axis, true); }

/* ---- cumsum ---- */

#define CUMSUM_KERNEL(suffix, type)                                                             \
    static void cumsum_##suffix(const void *src, axis_view v, void *dst, int threads)           \
    {                                                                                           \
        const type *x = src;                                                                    \
        type *y = dst;                                                                          \
        enum { TILE = TILE_BYTES / sizeof(type) };                                              \
        int64_t tiles = (v.inner + TILE - 1) / TILE;                                            \
        _Pragma("omp parallel for num_threads(threads) if(threads > 1) schedule(static)")      \
        for (int64_t task = 0; task < v.outer * tiles; task++) {                                \
            int64_t o = task / tiles, j0 = task % tiles * TILE;                                 \
            int64_t width = v.inner - j0 < TILE ? v.inner - j0 : TILE;                          \
            const type *in = x + o * v.length * v.inner + j0;                                   \
            type *restrict sums = y + o * v.length * v.inner + j0;                              \
            if (v.inner == 1) {                                                                 \
                type running = 0;                                                               \
                for (int64_t k = 0; k < v.length; k++)                                          \
                    sums[k] = running = (type)(running + in[k]);                                \
                continue;                                                                       \
            }                                                                                   \
            for (int64_t j = 0; j < width && v.length > 0; j++)                                 \
                sums[j] = in[j];                                                                \
            for (int64_t k = 1; k < v.length; k++)                                              \
                for (int64_t j = 0; j < width; j++)                                             \
                    sums[k * v.inner + j] = (type)(sums[(k - 1) * v.inner + j] + in[k * v.inner + j]); \
        }                                                                                       \
    }

CUMSUM_KERNEL(u8, uint8_t)
CUMSUM_KERNEL(i32, int32_t)
CUMSUM_KERNEL(i64, int64_t)
CUMSUM_KERNEL(f32, float)
CUMSUM_KERNEL(f64, double)

typedef void (*cumsum_kernel)(const void *x, axis_view v, void *out, int threads);

static const cumsum_kernel cumsum_table[FL_DTYPE_COUNT] = {
    [FL_U8] = cumsum_u8, [FL_I32] = cumsum_i32, [FL_I64] = cumsum_i64, [FL_F32] = cumsum_f32, [FL_F64] = cumsum_f64,
};

static int cpu_cumsum(const fl_backend *self, fl_tensor *out, const fl_tensor *a, int axis)
{
    cumsum_kernel kernel = cumsum_table[a->dtype];
    if (!kernel)
        return fl_backend_error(FL_ERR_DTYPE, "cumsum has no %s kernel", fl_dtype_name(a->dtype));
    int rc = cpu_alloc(out);
    if (rc || out->numel == 0)
        return rc;
    void *scratch;
    const void *x = cpu_dense(a, &scratch);
    if (!x)
        return fl_backend_error(FL_ERR_MEMORY, "no memory for a dense copy of the input");
    kernel(x, view_along(a, axis), cpu_data(out), threads_for(a->numel));
    cpu_scratch_free(scratch);
    return 0;
}

void cpu_register_reduce(fl_backend *b)
{
    b->sum = cpu_sum;
    b->prod = cpu_prod;
    b->max = cpu_max;
    b->min = cpu_min;
    b->argmax = cpu_argmax;
    b->argmin = cpu_argmin;
    b->cumsum = cpu_cumsum;
    b->sort = cpu_sort;
}
