/*
 * The CPU backend's unary and binary elementwise kernels.
 *
 * Each operation is a table of row functions, one per dtype. A row function computes
 * n outputs from operands that advance by a fixed stride each; it has a separate
 * loop for the strides that matter (1 and 0: dense data and a broadcast value) so
 * that the compiler vectorizes each one, and a general strided loop for the rest.
 *
 * The driver (run) never copies an operand. The tensor layer hands it inputs
 * expanded to the output's shape, with zero strides on broadcast axes; the driver
 * merges the axes that every operand walks through as one (so [N, C] + [C] becomes
 * rows of C with a dense and a broadcast operand, and contiguous tensors become one
 * row), then calls the row function for each stretch of the innermost axis. Large
 * outputs are cut into equal spans of the flat output, one per thread.
 */
#include <math.h>
#include <omp.h>

#include "cpu.h"
#include "vecmath.h"

typedef void (*unary_row)(void *restrict y, const void *x, int64_t sx, int64_t n);
typedef void (*binary_row)(void *restrict y, const void *a, int64_t sa, const void *b, int64_t sb, int64_t n);
/* The row of a unary or a binary operation, as the walk below calls either. */
typedef union row_kernel {
    unary_row unary;
    binary_row binary;
} row_kernel;

/* ---- the driver ---- */

/* The output's shape with its axes merged, and each input's strides over it. The
 * output itself is fresh and contiguous. */
typedef struct walk {
    int ndim, ninputs;
    int64_t shape[FL_MAX_DIMS];
    int64_t strides[2][FL_MAX_DIMS]; /* elements */
    const char *data[2];
    size_t size[2], out_size; /* bytes per element */
} walk;

static void walk_init(walk *w, const fl_tensor *out, int ninputs, const fl_tensor *const *inputs)
{
    w->ndim = 0;
    w->ninputs = ninputs;
    w->out_size = cpu_element_size(out->dtype);
    for (int k = 0; k < ninputs; k++) {
        w->data[k] = cpu_data(inputs[k]);
        w->size[k] = cpu_element_size(inputs[k]->dtype);
    }
    for (int i = 0; i < out->ndim; i++) {
        if (out->shape[i] == 1)
            continue;
        bool merge = w->ndim > 0;
        for (int k = 0; k < ninputs && merge; k++)
            merge = w->strides[k][w->ndim - 1] == cpu_impl(inputs[k])->strides[i] * out->shape[i];
        int d = merge ? w->ndim - 1 : w->ndim++;
        w->shape[d] = merge ? w->shape[d] * out->shape[i] : out->shape[i];
        for (int k = 0; k < ninputs; k++)
            w->strides[k][d] = cpu_impl(inputs[k])->strides[i];
    }
    if (w->ndim == 0) { /* a single element */
        w->ndim = 1;
        w->shape[0] = 1;
        for (int k = 0; k < ninputs; k++)
            w->strides[k][0] = 0;
    }
}

/* Computes outputs [begin, end) of the flat output, a stretch of the innermost axis
 * at a time, carrying the outer index like an odometer. */
static void walk_span(const walk *w, void *out, row_kernel row, int64_t begin, int64_t end)
{
    int last = w->ndim - 1;
    int64_t inner = w->shape[last], index[FL_MAX_DIMS], offset[2] = {0, 0};
    int64_t outer = begin / inner, col = begin % inner;
    for (int d = last; d >= 0; d--) {
        index[d] = d == last ? col : outer % w->shape[d];
        if (d != last)
            outer /= w->shape[d];
        for (int k = 0; k < w->ninputs; k++)
            offset[k] += index[d] * w->strides[k][d];
    }
    char *y = (char *)out + begin * (int64_t)w->out_size;
    for (int64_t pos = begin; pos < end;) {
        int64_t n = inner - index[last] < end - pos ? inner - index[last] : end - pos;
        const void *a = w->data[0] + offset[0] * (int64_t)w->size[0];
        if (w->ninputs == 1)
            row.unary(y, a, w->strides[0][last], n);
        else
            row.binary(y, a, w->strides[0][last], w->data[1] + offset[1] * (int64_t)w->size[1],
                              w->strides[1][last], n);
        pos += n;
        y += n * (int64_t)w->out_size;
        for (int k = 0; k < w->ninputs; k++)
            offset[k] += n * w->strides[k][last];
        index[last] += n;
        /* Carry into the outer axes. */
        for (int d = last; d > 0 && index[d] == w->shape[d]; d--) {
            for (int k = 0; k < w->ninputs; k++)
                offset[k] += w->strides[k][d - 1] - w->shape[d] * w->strides[k][d];
            index[d] = 0;
            index[d - 1]++;
        }
    }
}

static int no_kernel(const char *name, const fl_tensor *a)
{
    return fl_backend_error(FL_ERR_DTYPE, "%s has no %s kernel", name, fl_dtype_name(a->dtype));
}

/* The calling thread's span [*begin, *end) of n elements of size bytes, in the team
 * running it: equal spans, rounded to whole cache lines so that threads never write
 * to the same one. */
static void thread_span(int64_t n, int64_t size, int64_t *begin, int64_t *end)
{
    int64_t t = omp_get_thread_num(), count = omp_get_num_threads(), align = 64 / size;
    *begin = (n * t / count) / align * align;
    *end = t == count - 1 ? n : (n * (t + 1) / count) / align * align;
}

static int run(fl_tensor *out, int ninputs, const fl_tensor *const *inputs, row_kernel row)
{
    int rc = cpu_alloc(out);
    if (rc || out->numel == 0)
        return rc;
    int64_t n = out->numel;
    bool dense = cpu_contiguous(inputs[0]) && (ninputs == 1 || cpu_contiguous(inputs[1]));
    if (dense && n < CPU_PARALLEL_GRAIN) { /* the common small case, with nothing to set up */
        if (ninputs == 1)
            row.unary(cpu_data(out), cpu_data(inputs[0]), 1, n);
        else
            row.binary(cpu_data(out), cpu_data(inputs[0]), 1, cpu_data(inputs[1]), 1, n);
        return 0;
    }
    walk w;
    walk_init(&w, out, ninputs, inputs);
    void *y = cpu_data(out);
    int threads = n >= CPU_PARALLEL_GRAIN ? cpu_threads() : 1;
    if (threads == 1) {
        walk_span(&w, y, row, 0, n);
        return 0;
    }
#pragma omp parallel num_threads(threads)
    {
        int64_t begin, end;
        thread_span(n, (int64_t)w.out_size, &begin, &end);
        if (begin < end)
            walk_span(&w, y, row, begin, end);
    }
    return 0;
}

static int run_unary(fl_tensor *out, const fl_tensor *a, const unary_row *rows, const char *name)
{
    if (!rows[a->dtype])
        return no_kernel(name, a);
    return run(out, 1, &a, (row_kernel){.unary = rows[a->dtype]});
}

static int run_binary(fl_tensor *out, const fl_tensor *a, const fl_tensor *b, const binary_row *rows,
                      const char *name)
{
    if (!rows[a->dtype])
        return no_kernel(name, a);
    const fl_tensor *inputs[2] = {a, b};
    return run(out, 2, inputs, (row_kernel){.binary = rows[a->dtype]});
}

/* ---- row functions ---- */

/* Each row function carries a mark: CPU_STREAMING (cpu.h) where the operation is
 * cheap enough per element that the loop waits on memory, FULL_WIDTH where it has
 * arithmetic to do. */
#define FULL_WIDTH

/* y[i] = expr of x = x[i * sx]: a dense loop and a strided one. */
#define UNARY_ROW(mark, fn, in_type, out_type, expr)                                      \
    mark static void fn(void *restrict y_, const void *x_, int64_t sx, int64_t n)         \
    {                                                                                     \
        out_type *restrict y = y_;                                                        \
        const in_type *px = x_;                                                           \
        if (sx == 1)                                                                      \
            for (int64_t i = 0; i < n; i++) {                                             \
                in_type x = px[i];                                                        \
                y[i] = (out_type)(expr);                                                  \
            }                                                                             \
        else                                                                              \
            for (int64_t i = 0; i < n; i++) {                                             \
                in_type x = px[i * sx];                                                   \
                y[i] = (out_type)(expr);                                                  \
            }                                                                             \
    }

/* y[i] = expr of a = a[i * sa] and b = b[i * sb]: dense with dense, dense with a
 * broadcast value on either side, and the general strided loop. Every binary
 * operation here is cheap enough per element to stream: even div of 1e6 floats took
 * 0.96-0.97 of its time at full width (an observation, two in-process A/B runs);
 * pow's common case is x * x, and its libm calls do not vectorize at any width. The
 * dense loop takes two vectors per iteration, as PyTorch's does: 1.5-2.5% faster on
 * add and mul of 1e6 floats (an observation, /tmp builds A/B'd in one process). */
#define BINARY_ROW(fn, in_type, out_type, expr)                                                \
    CPU_STREAMING static void fn(void *restrict y_, const void *a_, int64_t sa, const void *b_, int64_t sb, int64_t n) \
    {                                                                                          \
        out_type *restrict y = y_;                                                             \
        const in_type *pa = a_, *pb = b_;                                                      \
        if (sa == 1 && sb == 1)                                                                \
            _Pragma("GCC unroll 2")                                                            \
            for (int64_t i = 0; i < n; i++) {                                                  \
                in_type a = pa[i], b = pb[i];                                                  \
                y[i] = (out_type)(expr);                                                       \
            }                                                                                  \
        else if (sa == 1 && sb == 0) {                                                         \
            const in_type b = *pb;                                                             \
            for (int64_t i = 0; i < n; i++) {                                                  \
                in_type a = pa[i];                                                             \
                y[i] = (out_type)(expr);                                                       \
            }                                                                                  \
        } else if (sa == 0 && sb == 1) {                                                       \
            const in_type a = *pa;                                                             \
            for (int64_t i = 0; i < n; i++) {                                                  \
                in_type b = pb[i];                                                             \
                y[i] = (out_type)(expr);                                                       \
            }                                                                                  \
        } else                                                                                 \
            for (int64_t i = 0; i < n; i++) {                                                  \
                in_type a = pa[i * sa], b = pb[i * sb];                                        \
                y[i] = (out_type)(expr);                                                       \
            }                                                                                  \
    }

/* Signed integer arithmetic wraps, as in NumPy and PyTorch; C leaves overflow
 * undefined, so it is done in the unsigned type of the same width. */
#define WRAP(type, utype, expr) ((type)(utype)(expr))

/* ---- unary operations ---- */

/* Each operation defines its row functions and a table of them by dtype; a missing
 * entry is a dtype the operation does not accept. Signed integer expressions are
 * macros of (type, utype); u8 has its own, as NumPy's: -x wraps, abs(x) is x. */
#define UNARY_FLOAT_ROWS(mark, name, fexpr, dexpr)           \
    UNARY_ROW(mark, name##_f32, float, float, fexpr)         \
    UNARY_ROW(mark, name##_f64, double, double, dexpr)
#define UNARY_INT_ROWS(mark, name, EXPR, uexpr)                             \
    UNARY_ROW(mark, name##_u8, uint8_t, uint8_t, uexpr)                     \
    UNARY_ROW(mark, name##_i32, int32_t, int32_t, EXPR(int32_t, uint32_t))  \
    UNARY_ROW(mark, name##_i64, int64_t, int64_t, EXPR(int64_t, uint64_t))
#define FLOAT_ENTRIES(name) [FL_F32] = name##_f32, [FL_F64] = name##_f64
#define INT_ENTRIES(name) [FL_U8] = name##_u8, [FL_I32] = name##_i32, [FL_I64] = name##_i64

#define UNARY_FLOAT_OP(name, fexpr, dexpr)                                                    \
    UNARY_FLOAT_ROWS(FULL_WIDTH, name, fexpr, dexpr)                                          \
    static int cpu_##name(const fl_backend *self, fl_tensor *out, const fl_tensor *a)                                 \
    {                                                                                         \
        static const unary_row rows[FL_DTYPE_COUNT] = {FLOAT_ENTRIES(name)};                  \
        return run_unary(out, a, rows, #name);                                                \
    }
#define UNARY_NUMERIC_OP(name, fexpr, dexpr, IEXPR, uexpr)                                    \
    UNARY_FLOAT_ROWS(CPU_STREAMING, name, fexpr, dexpr)                                       \
    UNARY_INT_ROWS(CPU_STREAMING, name, IEXPR, uexpr)                                         \
    static int cpu_##name(const fl_backend *self, fl_tensor *out, const fl_tensor *a)                                 \
    {                                                                                         \
        static const unary_row rows[FL_DTYPE_COUNT] = {FLOAT_ENTRIES(name), INT_ENTRIES(name)}; \
        return run_unary(out, a, rows, #name);                                                \
    }

#define INT_NEG(type, utype) WRAP(type, utype, -(utype)x)
#define INT_ABS(type, utype) (x < 0 ? WRAP(type, utype, -(utype)x) : x)
#define INT_SIGN(type, utype) ((x > 0) - (x < 0))

UNARY_NUMERIC_OP(neg, -x, -x, INT_NEG, -x)
UNARY_NUMERIC_OP(abs, fabsf(x), fabs(x), INT_ABS, x)
/* sign(nan) is 0 as in PyTorch (NumPy gives nan); sign(-0) is 0. */
UNARY_NUMERIC_OP(sign, (float)((x > 0) - (x < 0)), (double)((x > 0) - (x < 0)), INT_SIGN, x > 0)
UNARY_FLOAT_OP(exp, vm_expf(x), exp(x))
UNARY_FLOAT_OP(log, vm_logf(x), log(x))
UNARY_FLOAT_OP(log1p, vm_log1pf(x), log1p(x))
UNARY_FLOAT_OP(sqrt, sqrtf(x), sqrt(x))
UNARY_FLOAT_OP(rsqrt, 1.0f / sqrtf(x), 1.0 / sqrt(x))
UNARY_FLOAT_OP(tanh, vm_tanhf(x), tanh(x))
UNARY_FLOAT_OP(sigmoid, vm_sigmoidf(x), 1.0 / (1.0 + exp(-x)))
UNARY_FLOAT_OP(erf, vm_erff(x), erf(x))
UNARY_FLOAT_OP(floor, vm_floorf(x), floor(x))
UNARY_FLOAT_OP(ceil, vm_ceilf(x), ceil(x))
UNARY_FLOAT_OP(round, nearbyintf(x), nearbyint(x)) /* the default rounding mode: half to even */

/* sin and cos: the vector form, then libm for the rare arguments it does not reduce
 * exactly (huge, inf, nan). The check is a second pass over the input, which is in
 * cache. */
#define TRIG_OP(name)                                                                    \
    UNARY_ROW(FULL_WIDTH, name##_vector_f32, float, float, vm_##name##f(x))              \
    static void name##_f32(void *restrict y_, const void *x_, int64_t sx, int64_t n)     \
    {                                                                                    \
        name##_vector_f32(y_, x_, sx, n);                                                \
        float *y = y_;                                                                   \
        const float *x = x_;                                                             \
        bool outside = false;                                                            \
        for (int64_t i = 0; i < n; i++)                                                  \
            outside |= !vm_trig_in_range(x[i * sx]);                                     \
        if (outside)                                                                     \
            for (int64_t i = 0; i < n; i++)                                              \
                if (!vm_trig_in_range(x[i * sx]))                                        \
                    y[i] = name##f(x[i * sx]);                                           \
    }                                                                                    \
    UNARY_ROW(FULL_WIDTH, name##_f64, double, double, name(x))                           \
    static int cpu_##name(const fl_backend *self, fl_tensor *out, const fl_tensor *a)                            \
    {                                                                                    \
        static const unary_row rows[FL_DTYPE_COUNT] = {FLOAT_ENTRIES(name)};             \
        return run_unary(out, a, rows, #name);                                           \
    }

TRIG_OP(sin)
TRIG_OP(cos)

UNARY_ROW(CPU_STREAMING, isnan_f32, float, _Bool, x != x)
UNARY_ROW(CPU_STREAMING, isnan_f64, double, _Bool, x != x)
UNARY_ROW(CPU_STREAMING, isinf_f32, float, _Bool, fabsf(x) == INFINITY)
UNARY_ROW(CPU_STREAMING, isinf_f64, double, _Bool, fabs(x) == INFINITY)
UNARY_ROW(CPU_STREAMING, logical_not_bool, _Bool, _Bool, !x)

static int cpu_isnan(const fl_backend *self, fl_tensor *out, const fl_tensor *a)
{
    static const unary_row rows[FL_DTYPE_COUNT] = {FLOAT_ENTRIES(isnan)};
    return run_unary(out, a, rows, "isnan");
}

static int cpu_isinf(const fl_backend *self, fl_tensor *out, const fl_tensor *a)
{
    static const unary_row rows[FL_DTYPE_COUNT] = {FLOAT_ENTRIES(isinf)};
    return run_unary(out, a, rows, "isinf");
}

static int cpu_logical_not(const fl_backend *self, fl_tensor *out, const fl_tensor *a)
{
    static const unary_row rows[FL_DTYPE_COUNT] = {[FL_BOOL] = logical_not_bool};
    return run_unary(out, a, rows, "logical_not");
}

/* ---- binary operations ---- */

#define BINARY_ROWS(name, out_f32, out_f64, out_int, fexpr, dexpr, IEXPR)           \
    BINARY_ROW(name##_f32, float, out_f32, fexpr)                                   \
    BINARY_ROW(name##_f64, double, out_f64, dexpr)                                  \
    BINARY_ROW(name##_u8, uint8_t, out_int(uint8_t), IEXPR(uint8_t, uint8_t))       \
    BINARY_ROW(name##_i32, int32_t, out_int(int32_t), IEXPR(int32_t, uint32_t))     \
    BINARY_ROW(name##_i64, int64_t, out_int(int64_t), IEXPR(int64_t, uint64_t))
#define SAME(type) type
#define BOOL_OUT(type) _Bool

#define BINARY_OP(name, fexpr, dexpr, IEXPR, bexpr)                                          \
    BINARY_ROWS(name, float, double, SAME, fexpr, dexpr, IEXPR)                              \
    BINARY_ROW(name##_bool, _Bool, _Bool, bexpr)                                             \
    static int cpu_##name(const fl_backend *self, fl_tensor *out, const fl_tensor *a, const fl_tensor *b)            \
    {                                                                                        \
        static const binary_row rows[FL_DTYPE_COUNT] = {FLOAT_ENTRIES(name), INT_ENTRIES(name), \
                                                        [FL_BOOL] = name##_bool};            \
        return run_binary(out, a, b, rows, #name);                                           \
    }

#define INT_ADD(type, utype) WRAP(type, utype, (utype)a + (utype)b)
#define INT_SUB(type, utype) WRAP(type, utype, (utype)a - (utype)b)
#define INT_MUL(type, utype) WRAP(type, utype, (utype)a * (utype)b)
#define INT_MIN_(type, utype) (a < b ? a : b)
#define INT_MAX_(type, utype) (a > b ? a : b)

/* Bool arithmetic is logical, as in PyTorch: True + True is True. The tensor layer
 * rejects bool sub. */
BINARY_OP(add, a + b, a + b, INT_ADD, a | b)
BINARY_OP(sub, a - b, a - b, INT_SUB, a != b)
BINARY_OP(mul, a * b, a * b, INT_MUL, a & b)
/* NaN wins in both operand positions, as torch.minimum and numpy.minimum. */
BINARY_OP(minimum, a < b || a != a ? a : b, a < b || a != a ? a : b, INT_MIN_, a & b)
BINARY_OP(maximum, a > b || a != a ? a : b, a > b || a != a ? a : b, INT_MAX_, a | b)

BINARY_ROW(div_f32, float, float, a / b)
BINARY_ROW(div_f64, double, double, a / b)

/* The tensor layer divides integers in floating point, so div sees floats only. */
static int cpu_div(const fl_backend *self, fl_tensor *out, const fl_tensor *a, const fl_tensor *b)
{
    static const binary_row rows[FL_DTYPE_COUNT] = {FLOAT_ENTRIES(div)};
    return run_binary(out, a, b, rows, "div");
}

/* Integer powers by squaring, wrapping on overflow. The tensor layer refuses negative
 * exponents (as PyTorch and NumPy do); a backend called directly with one gets the
 * truncated result (1 for base 1, +-1 for base -1, else 0) rather than undefined shifts. */
static inline int64_t int_pow(int64_t base, int64_t exponent)
{
    if (exponent < 0)
        return base == 1 ? 1 : base == -1 ? (exponent % 2 ? -1 : 1) : 0;
    uint64_t result = 1, b = (uint64_t)base;
    while (exponent) {
        if (exponent & 1)
            result *= b;
        b *= b;
        exponent >>= 1;
    }
    return (int64_t)result;
}

#define INT_POW(type, utype) ((type)int_pow(a, b))
/* x ** 2 is common (squares, variances) and exact as x * x; powf does not vectorize. */
BINARY_ROWS(pow, float, double, SAME, b == 2.0f ? a * a : powf(a, b), b == 2.0 ? a * a : pow(a, b), INT_POW)

static int cpu_pow(const fl_backend *self, fl_tensor *out, const fl_tensor *a, const fl_tensor *b)
{
    static const binary_row rows[FL_DTYPE_COUNT] = {FLOAT_ENTRIES(pow), INT_ENTRIES(pow)};
    return run_binary(out, a, b, rows, "pow");
}

#define COMPARE_OP(name, op)                                                                 \
    BINARY_ROWS(name, _Bool, _Bool, BOOL_OUT, a op b, a op b, COMPARE_##name)                \
    BINARY_ROW(name##_bool, _Bool, _Bool, a op b)                                            \
    static int cpu_##name(const fl_backend *self, fl_tensor *out, const fl_tensor *a, const fl_tensor *b)            \
    {                                                                                        \
        static const binary_row rows[FL_DTYPE_COUNT] = {FLOAT_ENTRIES(name), INT_ENTRIES(name), \
                                                        [FL_BOOL] = name##_bool};            \
        return run_binary(out, a, b, rows, #name);                                           \
    }
#define COMPARE_eq(type, utype) (a == b)
#define COMPARE_ne(type, utype) (a != b)
#define COMPARE_lt(type, utype) (a < b)
#define COMPARE_le(type, utype) (a <= b)

COMPARE_OP(eq, ==)
COMPARE_OP(ne, !=)
COMPARE_OP(lt, <)
COMPARE_OP(le, <=)

BINARY_ROW(logical_and_bool, _Bool, _Bool, a & b)
BINARY_ROW(logical_or_bool, _Bool, _Bool, a | b)

static int cpu_logical_and(const fl_backend *self, fl_tensor *out, const fl_tensor *a, const fl_tensor *b)
{
    static const binary_row rows[FL_DTYPE_COUNT] = {[FL_BOOL] = logical_and_bool};
    return run_binary(out, a, b, rows, "logical_and");
}

static int cpu_logical_or(const fl_backend *self, fl_tensor *out, const fl_tensor *a, const fl_tensor *b)
{
    static const binary_row rows[FL_DTYPE_COUNT] = {[FL_BOOL] = logical_or_bool};
    return run_binary(out, a, b, rows, "logical_or");
}

/* alpha a + beta b as add_scaled and sgd_update both round it: beta b rounded, then
 * one fused multiply-add where the machine has it. Written out, so that the compiler's
 * choice of which product to fuse cannot differ between the two kernels: SGD's step
 * in place gives the composition's bits. */
#if defined(__FMA__)
static inline float scaled_sum_f32(float a, float alpha, float b, float beta)
{
    return __builtin_fmaf(a, alpha, b * beta);
}
static inline double scaled_sum_f64(double a, double alpha, double b, double beta)
{
    return __builtin_fma(a, alpha, b * beta);
}
#else
static inline float scaled_sum_f32(float a, float alpha, float b, float beta) { return a * alpha + b * beta; }
static inline double scaled_sum_f64(double a, double alpha, double b, double beta) { return a * alpha + b * beta; }
#endif

/* out = alpha a + beta b (backend.h, add_scaled), for dense f32 and f64 operands; the
 * scalars are taken in the operands' dtype, as mul_scalar takes them. It streams
 * memory, as add does. Other operands are declined, for the tensor layer to compose. */
#define ADD_SCALED_SPAN(fn, type, sum)                                                             \
    CPU_STREAMING static void fn(type *restrict y, const type *restrict a, const type *restrict b,  \
                                 type alpha, type beta, int64_t n)                                 \
    {                                                                                              \
        for (int64_t i = 0; i < n; i++)                                                            \
            y[i] = sum(a[i], alpha, b[i], beta);                                                   \
    }
ADD_SCALED_SPAN(add_scaled_f32, float, scaled_sum_f32)
ADD_SCALED_SPAN(add_scaled_f64, double, scaled_sum_f64)

static int cpu_add_scaled(const fl_backend *self, fl_tensor *out, const fl_tensor *a, const fl_tensor *b, double alpha,
                          double beta)
{
    if ((a->dtype != FL_F32 && a->dtype != FL_F64) || b->dtype != a->dtype || !cpu_contiguous(a) ||
        !cpu_contiguous(b))
        return fl_backend_error(FL_ERR_UNSUPPORTED, "add_scaled has kernels for dense f32 and f64 operands");
    int rc = cpu_alloc(out);
    if (rc || out->numel == 0)
        return rc;
    int64_t n = out->numel, size = (int64_t)cpu_element_size(a->dtype);
    char *y = cpu_data(out);
    const char *pa = cpu_data(a), *pb = cpu_data(b);
    int threads = n >= CPU_PARALLEL_GRAIN ? cpu_threads() : 1;
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        int64_t begin, end;
        thread_span(n, size, &begin, &end);
        if (begin < end && a->dtype == FL_F32)
            add_scaled_f32((float *)y + begin, (const float *)pa + begin, (const float *)pb + begin, (float)alpha,
                           (float)beta, end - begin);
        else if (begin < end)
            add_scaled_f64((double *)y + begin, (const double *)pa + begin, (const double *)pb + begin, alpha, beta,
                           end - begin);
    }
    return 0;
}

/* ---- the optimizers' steps in place (sgd_update, adam_update) ----
 *
 * Each writes a parameter and its state where it finds them, in one pass where the
 * composition makes several, each writing a new tensor. A span kernel takes the
 * written tensors' storage and the gradient's from element begin; step_in_place
 * checks that every written tensor may be written and runs the span of each thread. */

typedef void (*step_span)(char *const *written, const char *grad, const void *desc, int64_t begin, int64_t n);

/* Whether t alone holds its storage, from its start: what may be written in place. */
static bool sole_dense_owner(const fl_tensor *t)
{
    const cpu_tensor *c = cpu_impl(t);
    return cpu_contiguous(t) && c->offset == 0 && c->storage->refcount == 1;
}

/* Runs the step over written[0..count) (the parameter first; a NULL one is an absent
 * state, handed on as NULL) and grad, all of one float dtype; declines, having
 * written nothing, unless each written tensor alone holds storage of its own and the
 * gradient is dense. */
static int step_in_place(const char *entry, fl_tensor *const *written, int count, const fl_tensor *grad,
                         step_span f32, step_span f64, const void *desc)
{
    char *storage[4] = {NULL};
    bool takes = (written[0]->dtype == FL_F32 || written[0]->dtype == FL_F64) && cpu_contiguous(grad);
    for (int i = 0; i < count && takes; i++) {
        if (!written[i])
            continue;
        takes = sole_dense_owner(written[i]);
        for (int j = 0; j < i; j++)
            takes = takes && (!written[j] || cpu_impl(written[i])->storage != cpu_impl(written[j])->storage);
        storage[i] = cpu_data(written[i]);
    }
    if (!takes)
        return fl_backend_error(FL_ERR_UNSUPPORTED, "%s writes only dense tensors that alone hold their storage, "
                                                    "with a dense gradient", entry);
    int64_t n = written[0]->numel, size = (int64_t)cpu_element_size(written[0]->dtype);
    step_span span = written[0]->dtype == FL_F32 ? f32 : f64;
    const char *g = cpu_data(grad);
    int threads = n >= CPU_PARALLEL_GRAIN ? cpu_threads() : 1;
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        int64_t begin, end;
        thread_span(n, size, &begin, &end);
        if (begin < end)
            span(storage, g, desc, begin, end - begin);
    }
    return 0;
}

/* SGD with momentum: param, then the momentum buffer. */
#define SGD_SPAN(fn, type, sum)                                                                                \
    CPU_STREAMING static void fn##_rows(type *restrict p, type *restrict buf, const type *restrict g,           \
                                        const fl_sgd_desc *d, int64_t n)                                       \
    {                                                                                                          \
        type lr = (type)-d->lr, momentum = (type)d->momentum, damped = (type)(1 - d->dampening);                \
        type decay = (type)d->weight_decay;                                                                    \
        bool decays = d->weight_decay != 0, nesterov = d->nesterov;                                            \
        for (int64_t i = 0; i < n; i++) {                                                                      \
            type grad = decays ? sum(g[i], 1, p[i], decay) : g[i];                                             \
            type b = sum(buf[i], momentum, grad, damped);                                                      \
            buf[i] = b;                                                                                        \
            p[i] = sum(p[i], 1, nesterov ? sum(grad, 1, b, momentum) : b, lr);                                 \
        }                                                                                                      \
    }                                                                                                          \
    static void fn(char *const *w, const char *g, const void *d, int64_t begin, int64_t n)                     \
    {                                                                                                          \
        fn##_rows((type *)w[0] + begin, (type *)w[1] + begin, (const type *)g + begin, d, n);                   \
    }
SGD_SPAN(sgd_f32, float, scaled_sum_f32)
SGD_SPAN(sgd_f64, double, scaled_sum_f64)

static int cpu_sgd_update(const fl_backend *self, fl_tensor *param, fl_tensor *buffer, const fl_tensor *grad,
                          const fl_sgd_desc *d)
{
    return step_in_place("sgd_update", (fl_tensor *[]){param, buffer}, 2, grad, sgd_f32, sgd_f64, d);
}

/* Adam and AdamW: param, exp_avg, exp_avg_sq, then AMSGrad's max_exp_avg_sq or NULL.
 * Each operation is rounded as the composition's kernel rounds it: the compiler must
 * not fuse a product into the sum after it (GCC's fp-contract, on by default; clang's
 * FP_CONTRACT, which contracts within an expression by default), and weight decay's
 * sum is add_scaled's. */
#if defined(__clang__)
#define SEPARATE_ROUNDINGS
#define SEPARATE_ROUNDINGS_IN_BODY _Pragma("STDC FP_CONTRACT OFF")
#else
#define SEPARATE_ROUNDINGS __attribute__((optimize("fp-contract=off")))
#define SEPARATE_ROUNDINGS_IN_BODY
#endif
#define ADAM_SPAN(fn, type, sum, root)                                                                          \
    SEPARATE_ROUNDINGS CPU_STREAMING static void fn##_rows(type *restrict p, type *restrict m, type *restrict v, \
                                                           type *restrict vmax, const type *restrict g,         \
                                                           const fl_adam_desc *d, int64_t n)                    \
    {                                                                                                           \
        SEPARATE_ROUNDINGS_IN_BODY                                                                              \
        type shrink = (type)(1 - d->lr * d->weight_decay), decay = (type)d->weight_decay;                       \
        type keep1 = (type)(1 - d->beta1), beta2 = (type)d->beta2, keep2 = (type)(1 - d->beta2);                \
        type correction2 = (type)sqrt(1 - pow(d->beta2, d->step)), eps = (type)d->eps;                          \
        type rate = (type)(d->lr / (1 - pow(d->beta1, d->step)));                                               \
        bool decays = d->weight_decay != 0, decoupled = d->decoupled;                                           \
        for (int64_t i = 0; i < n; i++) {                                                                       \
            type value = p[i], grad = g[i];                                                                     \
            if (decays && decoupled)                                                                            \
                value = value * shrink;                                                                         \
            else if (decays)                                                                                    \
                grad = sum(grad, 1, value, decay);                                                              \
            type mean = m[i] + (grad - m[i]) * keep1;                                                           \
            type square = v[i] * beta2 + (grad * keep2) * grad;                                                 \
            m[i] = mean;                                                                                        \
            v[i] = square;                                                                                      \
            if (vmax) { /* the maximum kernel's rule, NaN winning */                                            \
                square = vmax[i] > square || vmax[i] != vmax[i] ? vmax[i] : square;                             \
                vmax[i] = square;                                                                               \
            }                                                                                                   \
            p[i] = value - (mean / (root(square) / correction2 + eps)) * rate;                                  \
        }                                                                                                       \
    }                                                                                                           \
    static void fn(char *const *w, const char *g, const void *d, int64_t begin, int64_t n)                      \
    {                                                                                                           \
        fn##_rows((type *)w[0] + begin, (type *)w[1] + begin, (type *)w[2] + begin,                             \
                  w[3] ? (type *)w[3] + begin : NULL, (const type *)g + begin, d, n);                           \
    }
ADAM_SPAN(adam_f32, float, scaled_sum_f32, sqrtf)
ADAM_SPAN(adam_f64, double, scaled_sum_f64, sqrt)

static int cpu_adam_update(const fl_backend *self, fl_tensor *param, fl_tensor *exp_avg, fl_tensor *exp_avg_sq,
                           fl_tensor *max_exp_avg_sq, const fl_tensor *grad, const fl_adam_desc *d)
{
    return step_in_place("adam_update", (fl_tensor *[]){param, exp_avg, exp_avg_sq, max_exp_avg_sq}, 4, grad,
                         adam_f32, adam_f64, d);
}

void cpu_register_elementwise(fl_backend *b)
{
    b->add_scaled = cpu_add_scaled;
    b->sgd_update = cpu_sgd_update;
    b->adam_update = cpu_adam_update;
    b->neg = cpu_neg;
    b->abs = cpu_abs;
    b->sign = cpu_sign;
    b->exp = cpu_exp;
    b->log = cpu_log;
    b->log1p = cpu_log1p;
    b->sqrt = cpu_sqrt;
    b->rsqrt = cpu_rsqrt;
    b->sin = cpu_sin;
    b->cos = cpu_cos;
    b->tanh = cpu_tanh;
    b->sigmoid = cpu_sigmoid;
    b->erf = cpu_erf;
    b->floor = cpu_floor;
    b->ceil = cpu_ceil;
    b->round = cpu_round;
    b->isnan = cpu_isnan;
    b->isinf = cpu_isinf;
    b->logical_not = cpu_logical_not;
    b->add = cpu_add;
    b->sub = cpu_sub;
    b->mul = cpu_mul;
    b->div = cpu_div;
    b->pow = cpu_pow;
    b->minimum = cpu_minimum;
    b->maximum = cpu_maximum;
    b->eq = cpu_eq;
    b->ne = cpu_ne;
    b->lt = cpu_lt;
    b->le = cpu_le;
    b->logical_and = cpu_logical_and;
    b->logical_or = cpu_logical_or;
}
