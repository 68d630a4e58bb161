/* The CPU backend's unary and binary elementwise kernels. */
#include <math.h>
#include <stdlib.h>

#include "cpu.h"

/* Operands are made dense first (a view copies once); the loops then run flat. */
typedef struct operands {
    const void *a, *b;
    void *scratch_a, *scratch_b;
} operands;

static int dense_operands(operands *o, const fl_tensor *a, const fl_tensor *b)
{
    o->scratch_b = NULL;
    o->a = cpu_dense(a, &o->scratch_a);
    o->b = b ? cpu_dense(b, &o->scratch_b) : NULL;
    if (!o->a || (b && !o->b)) {
        cpu_scratch_free(o->scratch_a);
        cpu_scratch_free(o->scratch_b);
        return fl_backend_error(FL_ERR_MEMORY, "no memory for a dense copy of an operand");
    }
    return 0;
}

static void release_operands(operands *o)
{
    cpu_scratch_free(o->scratch_a);
    cpu_scratch_free(o->scratch_b);
}

#define THREADS(n) ((n) >= CPU_PARALLEL_GRAIN ? cpu_threads() : 1)

#define UNARY_LOOP(in_type, out_type, expr)                                                         \
    do {                                                                                            \
        const in_type *x_ = o.a;                                                                    \
        out_type *y_ = cpu_data(out);                                                               \
        int64_t n_ = out->numel;                                                                    \
        int threads_ = THREADS(n_);                                                                 \
        _Pragma("omp parallel for simd num_threads(threads_) if(threads_ > 1) schedule(static)")   \
        for (int64_t i = 0; i < n_; i++) {                                                          \
            in_type x = x_[i];                                                                      \
            y_[i] = (out_type)(expr);                                                               \
        }                                                                                           \
    } while (0)

#define BINARY_LOOP(in_type, out_type, expr)                                                        \
    do {                                                                                            \
        const in_type *a_ = o.a, *b_ = o.b;                                                         \
        out_type *y_ = cpu_data(out);                                                               \
        int64_t n_ = out->numel;                                                                    \
        int threads_ = THREADS(n_);                                                                 \
        _Pragma("omp parallel for simd num_threads(threads_) if(threads_ > 1) schedule(static)")   \
        for (int64_t i = 0; i < n_; i++) {                                                          \
            in_type a = a_[i], b = b_[i];                                                           \
            y_[i] = (out_type)(expr);                                                               \
        }                                                                                           \
    } while (0)

/* Dispatch on the input dtype. The expression sees x (unary) or a and b (binary). */
#define FLOAT_CASES(LOOP, out_same, fexpr, dexpr)                          \
    case FL_F32: LOOP(float, out_same(float), fexpr); break;               \
    case FL_F64: LOOP(double, out_same(double), dexpr); break;
#define INT_CASES(LOOP, out_same, expr)                                    \
    case FL_U8: LOOP(uint8_t, out_same(uint8_t), expr); break;             \
    case FL_I32: LOOP(int32_t, out_same(int32_t), expr); break;            \
    case FL_I64: LOOP(int64_t, out_same(int64_t), expr); break;
#define SAME(type) type
#define BOOL_OUT(type) _Bool

#define KERNEL_BEGIN(name, ...)                                            \
    static int cpu_##name(fl_tensor *out, __VA_ARGS__)                     \
    {                                                                      \
        int rc = cpu_alloc(out);                                           \
        operands o;                                                        \
        if (rc || (rc = dense_operands(&o, a, B_OPERAND)))                 \
            return rc;                                                     \
        switch (a->dtype) {
#define KERNEL_END(name)                                                   \
        default:                                                           \
            rc = fl_backend_error(FL_ERR_DTYPE, #name " has no %s kernel", \
                                  fl_dtype_name(a->dtype));                \
        }                                                                  \
        release_operands(&o);                                              \
        return rc;                                                         \
    }

/* ---- unary ---- */

#define B_OPERAND NULL
#define UNARY_FLOAT(name, fexpr, dexpr)                                  \
    KERNEL_BEGIN(name, const fl_tensor *a)                               \
    FLOAT_CASES(UNARY_LOOP, SAME, fexpr, dexpr)                          \
    KERNEL_END(name)
#define UNARY_NUMERIC(name, fexpr, dexpr, iexpr)                         \
    KERNEL_BEGIN(name, const fl_tensor *a)                               \
    FLOAT_CASES(UNARY_LOOP, SAME, fexpr, dexpr)                          \
    INT_CASES(UNARY_LOOP, SAME, iexpr)                                   \
    KERNEL_END(name)

UNARY_NUMERIC(neg, -x, -x, -x)
UNARY_NUMERIC(abs, fabsf(x), fabs(x), x < 0 ? -x : x)
UNARY_NUMERIC(sign, (x > 0) - (x < 0), (x > 0) - (x < 0), (x > 0) - (x < 0))
UNARY_FLOAT(exp, expf(x), exp(x))
UNARY_FLOAT(log, logf(x), log(x))
UNARY_FLOAT(log1p, log1pf(x), log1p(x))
UNARY_FLOAT(sqrt, sqrtf(x), sqrt(x))
UNARY_FLOAT(rsqrt, 1.0f / sqrtf(x), 1.0 / sqrt(x))
UNARY_FLOAT(sin, sinf(x), sin(x))
UNARY_FLOAT(cos, cosf(x), cos(x))
UNARY_FLOAT(tanh, tanhf(x), tanh(x))
UNARY_FLOAT(sigmoid, 1.0f / (1.0f + expf(-x)), 1.0 / (1.0 + exp(-x)))
UNARY_FLOAT(erf, erff(x), erf(x))
UNARY_FLOAT(floor, floorf(x), floor(x))
UNARY_FLOAT(ceil, ceilf(x), ceil(x))
UNARY_FLOAT(round, nearbyintf(x), nearbyint(x)) /* the default rounding mode: half to even */

KERNEL_BEGIN(isnan, const fl_tensor *a)
FLOAT_CASES(UNARY_LOOP, BOOL_OUT, isnan(x), isnan(x))
KERNEL_END(isnan)

KERNEL_BEGIN(isinf, const fl_tensor *a)
FLOAT_CASES(UNARY_LOOP, BOOL_OUT, isinf(x), isinf(x))
KERNEL_END(isinf)

KERNEL_BEGIN(logical_not, const fl_tensor *a)
case FL_BOOL: UNARY_LOOP(_Bool, _Bool, !x); break;
KERNEL_END(logical_not)

#undef B_OPERAND

/* ---- binary ---- */

#define B_OPERAND b
#define BINARY_NUMERIC(name, fexpr, dexpr, iexpr, bexpr)                 \
    KERNEL_BEGIN(name, const fl_tensor *a, const fl_tensor *b)           \
    FLOAT_CASES(BINARY_LOOP, SAME, fexpr, dexpr)                         \
    INT_CASES(BINARY_LOOP, SAME, iexpr)                                  \
    case FL_BOOL: BINARY_LOOP(_Bool, _Bool, bexpr); break;               \
    KERNEL_END(name)
#define COMPARE(name, expr)                                              \
    KERNEL_BEGIN(name, const fl_tensor *a, const fl_tensor *b)           \
    FLOAT_CASES(BINARY_LOOP, BOOL_OUT, expr, expr)                       \
    INT_CASES(BINARY_LOOP, BOOL_OUT, expr)                               \
    case FL_BOOL: BINARY_LOOP(_Bool, _Bool, expr); break;                \
    KERNEL_END(name)

/* Integer division by zero is undefined in C; PyTorch raises, NumPy gives 0. The
 * tensor layer divides integers in floating point, so div sees floats only. */
static inline int64_t int_pow(int64_t base, int64_t exponent)
{
    if (exponent < 0)
        return base == 1 ? 1 : base == -1 ? (exponent % 2 ? -1 : 1) : 0;
    int64_t result = 1;
    while (exponent) {
        if (exponent & 1)
            result *= base;
        base *= base;
        exponent >>= 1;
    }
    return result;
}

BINARY_NUMERIC(add, a + b, a + b, a + b, a || b)
BINARY_NUMERIC(sub, a - b, a - b, a - b, a != b)
BINARY_NUMERIC(mul, a * b, a * b, a * b, a && b)
BINARY_NUMERIC(minimum, (a < b || isnan(a)) ? a : b, (a < b || isnan(a)) ? a : b, a < b ? a : b, a && b)
BINARY_NUMERIC(maximum, (a > b || isnan(a)) ? a : b, (a > b || isnan(a)) ? a : b, a > b ? a : b, a || b)

KERNEL_BEGIN(div, const fl_tensor *a, const fl_tensor *b)
FLOAT_CASES(BINARY_LOOP, SAME, a / b, a / b)
KERNEL_END(div)

KERNEL_BEGIN(pow, const fl_tensor *a, const fl_tensor *b)
FLOAT_CASES(BINARY_LOOP, SAME, powf(a, b), pow(a, b))
INT_CASES(BINARY_LOOP, SAME, int_pow(a, b))
KERNEL_END(pow)

COMPARE(eq, a == b)
COMPARE(ne, a != b)
COMPARE(lt, a < b)
COMPARE(le, a <= b)

KERNEL_BEGIN(logical_and, const fl_tensor *a, const fl_tensor *b)
case FL_BOOL: BINARY_LOOP(_Bool, _Bool, a && b); break;
KERNEL_END(logical_and)

KERNEL_BEGIN(logical_or, const fl_tensor *a, const fl_tensor *b)
case FL_BOOL: BINARY_LOOP(_Bool, _Bool, a || b); break;
KERNEL_END(logical_or)

void cpu_register_elementwise(fl_backend *b)
{
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
