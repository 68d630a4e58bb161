/* Elementwise operations: values against PyTorch (tests/fixtures/gen_elementwise.py)
 * on edge values for every dtype, the accuracy of the vectorized f32 math over the
 * whole float range, dtype promotion, broadcasting, strided operands, the parallel
 * paths, and the errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"

#define FIXTURES "elementwise.bin"

static fl_tensor *ref(const char *name) { return fixture(FIXTURES, name); }

static fl_tensor *ref2(const char *prefix, const char *suffix)
{
    char name[64];
    snprintf(name, sizeof name, "%s_%s", prefix, suffix);
    return ref(name);
}

typedef fl_tensor *(*unary_fn)(const fl_tensor *);
typedef fl_tensor *(*binary_fn)(const fl_tensor *, const fl_tensor *);

static const struct {
    const char *name;
    unary_fn fn;
} unary_ops[] = {
    {"neg", fl_neg},     {"abs", fl_abs},     {"sign", fl_sign},   {"exp", fl_exp},         {"log", fl_log},
    {"log1p", fl_log1p}, {"sqrt", fl_sqrt},   {"rsqrt", fl_rsqrt}, {"sin", fl_sin},         {"cos", fl_cos},
    {"tanh", fl_tanh},   {"sigmoid", fl_sigmoid}, {"erf", fl_erf}, {"floor", fl_floor},     {"ceil", fl_ceil},
    {"round", fl_round}, {"isnan", fl_isnan}, {"isinf", fl_isinf},
};

static const struct {
    const char *name;
    binary_fn fn;
} binary_ops[] = {
    {"add", fl_add}, {"sub", fl_sub}, {"mul", fl_mul}, {"div", fl_div}, {"pow", fl_pow},
    {"minimum", fl_minimum}, {"maximum", fl_maximum}, {"eq", fl_eq}, {"ne", fl_ne}, {"lt", fl_lt},
    {"le", fl_le}, {"gt", fl_gt}, {"ge", fl_ge},
};

/* Fails unless t and expected agree in the sign of every zero. */
static void assert_zero_signs(const fl_tensor *t, const fl_tensor *expected, const char *what)
{
    int64_t n = fl_numel(expected);
    double *got = malloc((size_t)n * sizeof(double)), *want = malloc((size_t)n * sizeof(double));
    fl_scope scope = fl_scope_begin();
    assert_int_equal(fl_to_host(fl_cast(t, FL_F64), got, (size_t)n * sizeof(double)), FL_OK);
    assert_int_equal(fl_to_host(fl_cast(expected, FL_F64), want, (size_t)n * sizeof(double)), FL_OK);
    fl_scope_end(scope);
    for (int64_t i = 0; i < n; i++)
        if (want[i] == 0 && signbit(got[i]) != signbit(want[i]))
            fail_msg("%s, element %lld: got %g, expected %g", what, (long long)i, got[i], want[i]);
    free(got);
    free(want);
}

/* Fails unless t equals expected exactly, integers compared as i64 (which f64 could
 * not hold). */
static void assert_exact(const fl_tensor *t, const fl_tensor *expected)
{
    assert_dtype(t, fl_dtype_of(expected));
    support_assert_shape(t, fl_ndim(expected), fl_shape(expected), __FILE__, __LINE__);
    size_t bytes = (size_t)fl_numel(expected) * sizeof(int64_t);
    int64_t *got = malloc(bytes + 1), *want = malloc(bytes + 1);
    fl_scope scope = fl_scope_begin();
    assert_int_equal(fl_to_host(fl_cast(t, FL_I64), got, bytes), FL_OK);
    assert_int_equal(fl_to_host(fl_cast(expected, FL_I64), want, bytes), FL_OK);
    fl_scope_end(scope);
    assert_memory_equal(got, want, bytes);
    free(got);
    free(want);
}

/* ---- values against PyTorch ---- */

static void unary_float_ops_match_pytorch(void **state)
{
    const char *dtypes[] = {"f32", "f64"};
    for (int d = 0; d < 2; d++) {
        fl_tensor *x = ref2("x", dtypes[d]);
        /* f32 to within a few ulp of the correctly rounded result; f64 uses libm. */
        double rtol = d == 0 ? 2e-6 : 1e-14;
        for (size_t i = 0; i < sizeof unary_ops / sizeof unary_ops[0]; i++) {
            fl_tensor *got = unary_ops[i].fn(x), *want = ref2(unary_ops[i].name, dtypes[d]);
            assert_dtype(got, fl_dtype_of(want));
            assert_close(got, want, rtol, 0);
            assert_zero_signs(got, want, unary_ops[i].name);
        }
    }
    assert_no_error();
}

static void binary_float_ops_match_pytorch(void **state)
{
    const char *dtypes[] = {"f32", "f64"};
    for (int d = 0; d < 2; d++) {
        fl_tensor *a = ref2("a", dtypes[d]), *b = ref2("b", dtypes[d]);
        for (size_t i = 0; i < sizeof binary_ops / sizeof binary_ops[0]; i++) {
            fl_tensor *got = binary_ops[i].fn(a, b), *want = ref2(binary_ops[i].name, dtypes[d]);
            assert_dtype(got, fl_dtype_of(want));
            /* Correctly rounded; pow (libm's) to within an ulp. */
            double rtol = strcmp(binary_ops[i].name, "pow") ? 0 : d == 0 ? 1.2e-7 : 2.3e-16;
            assert_close(got, want, rtol, 0);
            assert_zero_signs(got, want, binary_ops[i].name);
        }
    }
    assert_no_error();
}

static void integer_ops_wrap_as_pytorch(void **state)
{
    const char *dtypes[] = {"u8", "i32", "i64"};
    const char *binary[] = {"add", "sub", "mul", "minimum", "maximum", "eq", "lt", "le", "gt", "ge"};
    const binary_fn binary_fns[] = {fl_add, fl_sub, fl_mul, fl_minimum, fl_maximum, fl_eq, fl_lt, fl_le, fl_gt, fl_ge};
    for (int d = 0; d < 3; d++) {
        fl_tensor *a = ref2("ia", dtypes[d]), *b = ref2("ib", dtypes[d]), *x = ref2("ix", dtypes[d]);
        for (int i = 0; i < 10; i++) {
            fl_tensor *got = binary_fns[i](a, b), *want = ref2(binary[i], dtypes[d]);
            assert_dtype(got, fl_dtype_of(want));
            assert_exact(got, want);
        }
        const char *unary[] = {"neg", "abs", "sign"};
        const unary_fn unary_fns[] = {fl_neg, fl_abs, fl_sign};
        for (int i = 0; i < 3; i++) {
            fl_tensor *got = unary_fns[i](x), *want = ref2(unary[i], dtypes[d]);
            assert_dtype(got, fl_dtype_of(want));
            assert_exact(got, want);
        }
        assert_exact(fl_pow(ref2("pbase", dtypes[d]), ref2("pexp", dtypes[d])), ref2("pow", dtypes[d]));
    }
    assert_no_error();
}

static void bool_ops_are_logical(void **state)
{
    fl_tensor *a = T_BOOL(FL_SHAPE(4), 0, 0, 1, 1), *b = T_BOOL(FL_SHAPE(4), 0, 1, 0, 1);
    assert_values(fl_logical_and(a, b), 0, 0, 0, 0, 0, 1);
    assert_values(fl_logical_or(a, b), 0, 0, 0, 1, 1, 1);
    assert_values(fl_logical_not(a), 0, 0, 1, 1, 0, 0);
    /* PyTorch: bool + bool is logical or, bool * bool logical and, still bool. */
    fl_tensor *sum = fl_add(a, b), *product = fl_mul(a, b);
    assert_dtype(sum, FL_BOOL);
    assert_values(sum, 0, 0, 0, 1, 1, 1);
    assert_dtype(product, FL_BOOL);
    assert_values(product, 0, 0, 0, 0, 0, 1);
    assert_values(fl_eq(a, b), 0, 0, 1, 0, 0, 1);
    assert_values(fl_gt(a, b), 0, 0, 0, 0, 1, 0);
    assert_values(fl_maximum(a, b), 0, 0, 0, 1, 1, 1);
    /* Logical operations of numbers test for non-zero. */
    assert_values(fl_logical_and(T_F32(FL_SHAPE(3), 0, 2, NAN), T_I32(FL_SHAPE(3), 5, 5, 5)), 0, 0, 0, 1, 1);
    assert_values(fl_logical_not(T_I32(FL_SHAPE(2), 0, 3)), 0, 0, 1, 0);
    assert_no_error();
}

/* ---- accuracy of the vectorized f32 math ---- */

static double ulps(float got, double want)
{
    float w = (float)want;
    if (isnan(w))
        return isnan(got) ? 0 : INFINITY;
    if (isinf(w) || w == 0)
        return got == w && signbit(got) == signbit(w) ? 0 : fabs(got - want) / 0x1p-149;
    double ulp = fabsf(w) < 0x1p-126f ? 0x1p-149 : nextafterf(fabsf(w), INFINITY) - fabsf(w);
    return isnan(got) ? INFINITY : fabs(got - want) / ulp;
}

static double reference_sigmoid(double x) { return 1 / (1 + exp(-x)); }

/* Every 4099th bit pattern of the float range (about a million values, all signs
 * and exponents, subnormals, inf, nan) against double-precision libm. */
static void f32_math_is_within_two_ulp_everywhere(void **state)
{
    enum { STRIDE = 4099 };
    int64_t n = (int64_t)((1ull << 32) / STRIDE) + 3;
    float *x = malloc((size_t)n * sizeof(float)), *y = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n - 3; i++) {
        uint32_t bits = (uint32_t)(i * STRIDE);
        memcpy(&x[i], &bits, sizeof bits);
    }
    x[n - 3] = INFINITY;
    x[n - 2] = -INFINITY;
    x[n - 1] = 0x1.62e42ep+6f; /* the last float whose exp is finite */
    fl_tensor *t = fl_from_data(x, FL_F32, 1, &n);
    const struct {
        const char *name;
        unary_fn fn;
        double (*reference)(double);
        double max_ulps;
    } functions[] = {
        {"exp", fl_exp, exp, 1.5},        {"log", fl_log, log, 1},        {"log1p", fl_log1p, log1p, 2},
        {"tanh", fl_tanh, tanh, 2},       {"erf", fl_erf, erf, 2},        {"sin", fl_sin, sin, 2},
        {"cos", fl_cos, cos, 2},          {"sigmoid", fl_sigmoid, reference_sigmoid, 2.5},
        {"floor", fl_floor, floor, 0},    {"ceil", fl_ceil, ceil, 0},     {"sqrt", fl_sqrt, sqrt, 0.5},
    };
    for (size_t f = 0; f < sizeof functions / sizeof functions[0]; f++) {
        fl_scope scope = fl_scope_begin();
        assert_int_equal(fl_to_host(functions[f].fn(t), y, (size_t)n * sizeof(float)), FL_OK);
        fl_scope_end(scope);
        double worst = 0;
        int64_t at = 0;
        for (int64_t i = 0; i < n; i++) {
            double e = ulps(y[i], functions[f].reference(x[i]));
            if (e > worst) {
                worst = e;
                at = i;
            }
        }
        if (worst > functions[f].max_ulps)
            fail_msg("%s(%a) = %a, expected %a: %.2f ulp", functions[f].name, x[at], y[at],
                     (float)functions[f].reference(x[at]), worst);
    }
    free(x);
    free(y);
}

/* ---- dtypes ---- */

static void dtypes_promote_as_pytorch(void **state)
{
    fl_tensor *i32 = T_I32(FL_SHAPE(3), 1, -2, 7), *f32 = T_F32(FL_SHAPE(3), 0.5f, 0.25f, 2);
    fl_tensor *u8 = T_U8(FL_SHAPE(3), 250, 3, 4);

    fl_tensor *r = fl_add(i32, f32);
    assert_dtype(r, FL_F32);
    assert_values(r, 0, 0, 1.5, -1.75, 9);
    r = fl_add(u8, i32);
    assert_dtype(r, FL_I32);
    assert_values(r, 0, 0, 251, 1, 11);
    r = fl_add(u8, u8);
    assert_dtype(r, FL_U8);
    assert_values(r, 0, 0, 244, 6, 8); /* wraps, as NumPy */
    r = fl_div(i32, T_I32(FL_SHAPE(3), 2, 4, 7));
    assert_dtype(r, FL_F32);
    assert_values(r, 0, 0, 0.5, -0.5, 1);
    r = fl_mul_scalar(i32, 0.5);
    assert_dtype(r, FL_F32);
    assert_values(r, 0, 0, 0.5, -1, 3.5);
    r = fl_mul_scalar(i32, 3); /* a weak integer scalar keeps the dtype */
    assert_dtype(r, FL_I32);
    assert_values(r, 0, 0, 3, -6, 21);
    r = fl_add_scalar(u8, 10);
    assert_dtype(r, FL_U8);
    assert_values(r, 0, 0, 4, 13, 14);
    r = fl_add_scalar(T_BOOL(FL_SHAPE(2), 0, 1), 2);
    assert_dtype(r, FL_I64);
    assert_values(r, 0, 0, 2, 3);
    r = fl_exp(i32); /* float functions of integers compute in f32 */
    assert_dtype(r, FL_F32);
    assert_values(r, 1e-6, 0, exp(1), exp(-2), exp(7));
    r = fl_sqrt(T_BOOL(FL_SHAPE(2), 0, 1));
    assert_dtype(r, FL_F32);
    assert_values(r, 0, 0, 0, 1);
    assert_dtype(fl_floor(i32), FL_I32);
    assert_dtype(fl_add(i32, T_I64(FL_SHAPE(1), 1)), FL_I64);
    assert_dtype(fl_add(f32, T_F64(FL_SHAPE(1), 1)), FL_F64);
    assert_dtype(fl_lt(i32, f32), FL_BOOL);
    assert_values(fl_isnan(i32), 0, 0, 0, 0, 0);
    assert_values(fl_isinf(u8), 0, 0, 0, 0, 0);

    /* f16 and bf16 compute in f32 and come back in their own dtype. */
    fl_tensor *h = fl_cast(T_F32(FL_SHAPE(3), 0.5f, -1, 2), FL_F16);
    r = fl_exp(h);
    assert_dtype(r, FL_F16);
    assert_values(r, 1e-3, 0, exp(0.5), exp(-1), exp(2));
    r = fl_add(h, h);
    assert_dtype(r, FL_F16);
    assert_values(r, 0, 0, 1, -2, 4);
    r = fl_mul(h, f32);
    assert_dtype(r, FL_F32);
    assert_values(r, 0, 0, 0.25, -0.25, 4);
    fl_tensor *bf = fl_cast(T_F32(FL_SHAPE(3), 1, 3, 5), FL_BF16);
    r = fl_add(bf, h);
    assert_dtype(r, FL_F32); /* f16 with bf16 */
    r = fl_neg(bf);
    assert_dtype(r, FL_BF16);
    assert_values(r, 0, 0, -1, -3, -5);
    assert_no_error();
}

static void scalar_forms_and_composites(void **state)
{
    fl_tensor *x = T_F32(FL_SHAPE(5), -2, -0.5f, 0, 1.5f, NAN);
    assert_values(fl_add_scalar(x, 1), 0, 0, -1, 0.5, 1, 2.5, NAN);
    assert_values(fl_sub_scalar(x, 1), 0, 0, -3, -1.5, -1, 0.5, NAN);
    assert_values(fl_mul_scalar(x, -2), 0, 0, 4, 1, -0.0, -3, NAN);
    assert_values(fl_div_scalar(x, 4), 0, 0, -0.5, -0.125, 0, 0.375, NAN);
    assert_values(fl_pow_scalar(x, 2), 0, 0, 4, 0.25, 0, 2.25, NAN);
    assert_values(fl_pow_scalar(x, 0.5), 1e-7, 0, NAN, NAN, 0, sqrt(1.5), NAN);
    assert_values(fl_pow_scalar(x, 0), 0, 0, 1, 1, 1, 1, 1); /* as C and PyTorch: nan^0 is 1 */
    assert_values(fl_maximum_scalar(x, 0), 0, 0, 0, 0, 0, 1.5, NAN);
    assert_values(fl_minimum_scalar(x, 0), 0, 0, -2, -0.5, 0, 0, NAN);
    assert_values(fl_clamp(x, -1, 1), 0, 0, -1, -0.5, 0, 1, NAN);
    assert_values(fl_square(x), 0, 0, 4, 0.25, 0, 2.25, NAN);
    assert_values(fl_reciprocal(x), 0, 0, -0.5, -2, INFINITY, 1 / 1.5f, NAN);
    fl_tensor *i = T_I32(FL_SHAPE(3), -3, 0, 5);
    assert_values(fl_clamp(i, -1, 2), 0, 0, -1, 0, 2);
    assert_dtype(fl_clamp(i, -1, 2), FL_I32);
    assert_values(fl_square(i), 0, 0, 9, 0, 25);
    assert_dtype(fl_reciprocal(i), FL_F32);
    assert_values(fl_reciprocal(i), 1e-7, 0, -1 / 3.0, INFINITY, 0.2);
    assert_values(fl_pow_scalar(i, 2), 0, 0, 9, 0, 25);
    assert_dtype(fl_pow_scalar(i, 2), FL_I32);
    /* low > high: every element is high, as torch.clamp and numpy.clip. */
    assert_values(fl_clamp(i, 3, 1), 0, 0, 1, 1, 1);
    assert_values(fl_clamp(x, 2, 1), 0, 0, 1, 1, 1, 1, NAN);
    /* Bounds past an integer dtype's range clamp nothing on their side, as in PyTorch. */
    assert_values(fl_clamp(i, -1e10, 1e10), 0, 0, -3, 0, 5);
    assert_dtype(fl_clamp(i, -1e10, 1e10), FL_I32);
    assert_values(fl_clamp(T_U8(FL_SHAPE(3), 0, 7, 255), -5, 300), 0, 0, 0, 7, 255);
    assert_values(fl_clamp(T_U8(FL_SHAPE(3), 0, 7, 255), 3, 300), 0, 0, 3, 7, 255);
    assert_no_error();
}

/* An integer to a negative integer power is refused, as PyTorch and NumPy do, on every
 * backend: the check is the tensor layer's. */
static void negative_integer_powers_are_refused(void **state)
{
    fl_tensor *i = T_I32(FL_SHAPE(4), 2, 0, -1, 3);
    assert_fails(fl_pow_scalar(i, -1), FL_ERR_VALUE, "fl_pow_scalar: integers to negative integer powers");
    assert_fails(fl_pow(i, T_I32(FL_SHAPE(4), 1, 2, -1, 0)), FL_ERR_VALUE,
                 "fl_pow: integers to negative integer powers are not allowed (i32[4] ** i32[4] holds -1)");
    assert_fails(fl_pow(T_I64(FL_SHAPE(1), 2), T_I64(FL_SHAPE(1), -3)), FL_ERR_VALUE, "fl_pow");
    assert_fails(fl_pow(T_U8(FL_SHAPE(1), 2), T_I32(FL_SHAPE(1), -3)), FL_ERR_VALUE, "fl_pow");
    assert_fails(fl_pow_scalar(T_BOOL(FL_SHAPE(1), 1), -2), FL_ERR_VALUE, "fl_pow_scalar");
    /* Non-negative integer exponents, and float ones, still work. */
    assert_values(fl_pow(i, T_I32(FL_SHAPE(4), 1, 2, 3, 0)), 0, 0, 2, 0, -1, 1);
    assert_values(fl_pow(i, T_U8(FL_SHAPE(1), 2)), 0, 0, 4, 0, 1, 9);
    assert_values(fl_pow(i, fl_zeros(FL_I32, FL_SHAPE(0, 4))), 0, 0);
    fl_tensor *f = fl_pow_scalar(i, -0.5); /* a fraction makes it f32 */
    assert_dtype(f, FL_F32);
    assert_values(f, 1e-6, 0, 1 / sqrt(2), INFINITY, NAN, 1 / sqrt(3));
    assert_values(fl_pow(i, T_F32(FL_SHAPE(1), -1)), 1e-7, 0, 0.5, INFINITY, -1, 1 / 3.0);
    assert_values(fl_pow(T_F32(FL_SHAPE(1), 2), T_I32(FL_SHAPE(1), -1)), 0, 0, 0.5);
    assert_no_error();
}

/* An integer scalar outside the range of the dtype it takes would be converted with
 * undefined behaviour in C (UBSan reports it): it is refused. */
static void out_of_range_scalars_are_refused(void **state)
{
    fl_tensor *i = T_I32(FL_SHAPE(2), 1, 2), *u = T_U8(FL_SHAPE(2), 1, 2);
    assert_fails(fl_add_scalar(i, 3e9), FL_ERR_VALUE, "fl_add_scalar: 3000000000 does not fit i32[2]'s dtype i32");
    assert_fails(fl_mul_scalar(i, -0x1p31 - 1), FL_ERR_VALUE, "fl_mul_scalar");
    assert_fails(fl_sub_scalar(u, 256), FL_ERR_VALUE, "does not fit u8[2]'s dtype u8");
    assert_fails(fl_add_scalar(u, -1), FL_ERR_VALUE, "fl_add_scalar");
    assert_fails(fl_maximum_scalar(i, 1e18), FL_ERR_VALUE, "fl_maximum_scalar");
    /* Filling a tensor is the same conversion. */
    assert_fails(fl_full(3e9, FL_I32, FL_SHAPE(2)), FL_ERR_VALUE, "fl_full: 3000000000 does not fit the dtype i32");
    assert_fails(fl_scalar(-1, FL_U8), FL_ERR_VALUE, "fl_scalar");
    assert_fails(fl_full(NAN, FL_I64, FL_SHAPE(1)), FL_ERR_VALUE, "fl_full");
    assert_values(fl_full(-2147483648.0, FL_I32, FL_SHAPE(1)), 0, 0, -2147483648.0);
    /* The ends of the ranges fit. */
    assert_values(fl_maximum_scalar(i, 2147483647.0), 0, 0, 2147483647.0, 2147483647.0);
    assert_values(fl_minimum_scalar(i, -2147483648.0), 0, 0, -2147483648.0, -2147483648.0);
    assert_values(fl_maximum_scalar(u, 255), 0, 0, 255, 255);
    assert_values(fl_add_scalar(T_I64(FL_SHAPE(1), 0), -0x1p63), 0, 0, -0x1p63);
    /* Division computes in floating point: a large divisor is fine. */
    fl_tensor *q = fl_div_scalar(i, 4e9);
    assert_dtype(q, FL_F32);
    assert_values(q, 1e-7, 0, 0.25e-9, 0.5e-9);
    /* Past 2^63 the value is no integer: the result is f32, as for a fraction. */
    assert_dtype(fl_add_scalar(i, 1e19), FL_F32);
    assert_dtype(fl_add_scalar(T_I64(FL_SHAPE(1), 1), -0x1p63 - 4096), FL_F32);
    assert_dtype(fl_add_scalar(i, INFINITY), FL_F32);
    assert_dtype(fl_add_scalar(u, NAN), FL_F32);
    assert_no_error();
}

/* ---- broadcasting ---- */

static void broadcasting_matches_numpy(void **state)
{
    const char *cases[] = {"col_row", "bias", "outer3", "scalar", "empty"};
    for (int i = 0; i < 5; i++) {
        char a[64], b[64], want[64];
        snprintf(a, sizeof a, "bc_%s_a", cases[i]);
        snprintf(b, sizeof b, "bc_%s_b", cases[i]);
        snprintf(want, sizeof want, "bc_%s_sub", cases[i]);
        assert_close(fl_sub(ref(a), ref(b)), ref(want), 0, 0);
    }
    assert_shape(fl_sub(ref("bc_empty_a"), ref("bc_empty_b")), 0, 3);
    fl_tensor *zero_d = fl_add(fl_scalar(2, FL_F32), fl_scalar(3, FL_F32));
    assert_int_equal(fl_ndim(zero_d), 0);
    assert_true(fl_item(zero_d) == 5);
    assert_no_error();
}

/* Sizes past the parallel threshold, where each thread takes a span of the output
 * that starts and ends inside rows. */
static void large_broadcasts_split_across_threads(void **state)
{
    enum { R = 301, C = 211 };
    fl_tensor *m = fl_reshape(fl_arange(0, R * C, 1, FL_F32), FL_SHAPE(R, C));
    fl_tensor *row = fl_arange(0, C, 1, FL_F32), *col = fl_reshape(fl_arange(0, R, 1, FL_F32), FL_SHAPE(R, 1));
    float *got = malloc(R * C * sizeof(float));
    const int threads = fl_num_threads();
    for (int t = 1; t <= 3; t++) {
        fl_set_num_threads(t);
        fl_scope scope = fl_scope_begin();
        assert_int_equal(fl_to_host(fl_sub(m, row), got, R * C * sizeof(float)), FL_OK);
        for (int i = 0; i < R * C; i++)
            assert_true(got[i] == (float)(i - i % C));
        assert_int_equal(fl_to_host(fl_mul(col, row), got, R * C * sizeof(float)), FL_OK); /* outer product */
        for (int i = 0; i < R * C; i++)
            assert_true(got[i] == (float)((i / C) * (i % C)));
        assert_int_equal(fl_to_host(fl_sub(m, col), got, R * C * sizeof(float)), FL_OK);
        for (int i = 0; i < R * C; i++)
            assert_true(got[i] == (float)(i - i / C));
        assert_int_equal(fl_to_host(fl_exp(fl_mul_scalar(m, -1e-5)), got, R * C * sizeof(float)), FL_OK);
        for (int i = 0; i < R * C; i++)
            assert_true(fabs(got[i] - exp(-1e-5 * i)) <= 5e-7 * exp(-1e-5 * i));
        _Bool *mask = (_Bool *)got; /* bool output, split across threads */
        assert_int_equal(fl_to_host(fl_gt(m, fl_scalar(1000, FL_F32)), mask, R * C), FL_OK);
        for (int i = 0; i < R * C; i++)
            assert_int_equal(mask[i], i > 1000);
        fl_scope_end(scope);
    }
    fl_set_num_threads(threads);
    free(got);
    assert_no_error();
}

/* ---- strided operands (views made by the backend directly) ---- */

static fl_tensor *backend_view(const fl_tensor *t, const int *axes, const int64_t *start, const int64_t *step)
{
    const fl_backend *backend = fl_default_backend();
    int64_t shape[FL_MAX_DIMS];
    int ndim = fl_ndim(t);
    for (int i = 0; i < ndim; i++)
        shape[i] = axes ? fl_shape(t)[axes[i]]
                        : (step[i] > 0 ? (fl_shape(t)[i] - start[i] + step[i] - 1) / step[i]
                                       : start[i] / -step[i] + 1);
    fl_tensor *view = fl_tensor_alloc(backend, fl_dtype_of(t), ndim, shape);
    int rc = axes ? backend->permute(backend, view, t, axes) : backend->slice(backend, view, t, start, step);
    assert_int_equal(rc, 0);
    return view;
}

static void strided_operands_are_read_in_place(void **state)
{
    enum { R = 190, C = 230 }; /* large enough for the parallel path */
    fl_tensor *m = fl_reshape(fl_arange(0, R * C, 1, FL_F64), FL_SHAPE(R, C));
    fl_tensor *mt = backend_view(m, (const int[]){1, 0}, NULL, NULL); /* [C, R], strides (1, C) */
    fl_tensor *ones = fl_ones(FL_F64, FL_SHAPE(C, R));
    double *got = malloc(R * C * sizeof(double));
    fl_tensor *sum = fl_add(mt, ones);
    assert_shape(sum, C, R);
    fl_to_host(sum, got, R * C * sizeof(double));
    for (int i = 0; i < C; i++)
        for (int j = 0; j < R; j++)
            assert_true(got[i * R + j] == j * C + i + 1);
    fl_to_host(fl_neg(mt), got, R * C * sizeof(double));
    for (int i = 0; i < C; i++)
        for (int j = 0; j < R; j++)
            assert_true(got[i * R + j] == -(double)(j * C + i));
    /* A transposed view with itself transposed back: both strided. */
    fl_tensor *mtt = backend_view(mt, (const int[]){1, 0}, NULL, NULL);
    assert_close(fl_sub(mtt, m), fl_zeros(FL_F64, FL_SHAPE(R, C)), 0, 0);

    /* Every other column, rows reversed: a negative stride and a stride of 2. */
    fl_tensor *s = backend_view(m, NULL, (const int64_t[]){R - 1, 1}, (const int64_t[]){-1, 2});
    assert_shape(s, R, C / 2);
    fl_tensor *y = fl_mul(s, fl_scalar(2, FL_F64));
    fl_to_host(y, got, R * (C / 2) * sizeof(double));
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C / 2; j++)
            assert_true(got[i * (C / 2) + j] == 2.0 * ((R - 1 - i) * C + 1 + 2 * j));
    /* A small strided case, on the single-thread path. */
    fl_tensor *small = fl_reshape(T_F32(FL_SHAPE(6), 1, 2, 3, 4, 5, 6), FL_SHAPE(2, 3));
    fl_tensor *st = backend_view(small, (const int[]){1, 0}, NULL, NULL);
    assert_values(fl_add(st, T_F32(FL_SHAPE(2), 10, 20)), 0, 0, 11, 24, 12, 25, 13, 26);
    assert_values(fl_exp(st), 1e-6, 0, exp(1), exp(4), exp(2), exp(5), exp(3), exp(6));
    fl_release(st);
    fl_release(s);
    fl_release(mtt);
    fl_release(mt);
    free(got);
    assert_no_error();
}

/* ---- special values and signs ---- */

static void signed_zeros_and_special_values(void **state)
{
    fl_tensor *z = T_F32(FL_SHAPE(6), 0.0f, -0.0f, -0.5f, 0.5f, -0.2f, INFINITY);
    fl_tensor *want_neg = T_F32(FL_SHAPE(6), -0.0f, 0.0f, 0.5f, -0.5f, 0.2f, -INFINITY);
    assert_zero_signs(fl_neg(z), want_neg, "neg");
    assert_close(fl_neg(z), want_neg, 0, 0);
    assert_zero_signs(fl_ceil(z), T_F32(FL_SHAPE(6), 0.0f, -0.0f, -0.0f, 1, -0.0f, INFINITY), "ceil");
    assert_zero_signs(fl_round(z), T_F32(FL_SHAPE(6), 0.0f, -0.0f, -0.0f, 0.0f, -0.0f, INFINITY), "round");
    assert_values(fl_round(T_F32(FL_SHAPE(4), 0.5f, 1.5f, 2.5f, -2.5f)), 0, 0, 0, 2, 2, -2); /* half to even */
    assert_values(fl_log(T_F32(FL_SHAPE(5), 0, -0.0f, -1, INFINITY, NAN)), 0, 0, -INFINITY, -INFINITY, NAN,
                  INFINITY, NAN);
    assert_values(fl_exp(T_F32(FL_SHAPE(4), -INFINITY, INFINITY, 100, -200)), 0, 0, 0, INFINITY, INFINITY, 0);
    assert_values(fl_sqrt(T_F64(FL_SHAPE(3), -1, 4, INFINITY)), 0, 0, NAN, 2, INFINITY);
    assert_values(fl_sign(T_F32(FL_SHAPE(4), -3, 0, NAN, INFINITY)), 0, 0, -1, 0, 0, 1); /* PyTorch's sign(nan) */
    assert_values(fl_sigmoid(T_F32(FL_SHAPE(3), -INFINITY, INFINITY, 0)), 0, 0, 0, 1, 0.5);
    assert_values(fl_tanh(T_F32(FL_SHAPE(3), -INFINITY, INFINITY, 50)), 0, 0, -1, 1, 1);
    assert_values(fl_erf(T_F32(FL_SHAPE(3), -INFINITY, INFINITY, 5)), 0, 0, -1, 1, 1);
    assert_values(fl_sin(T_F32(FL_SHAPE(3), INFINITY, NAN, 1e30f)), 1e-6, 0, NAN, NAN, sinf(1e30f));
    /* minimum and maximum propagate nan from either side. */
    fl_tensor *a = T_F32(FL_SHAPE(3), NAN, 1, 2), *b = T_F32(FL_SHAPE(3), 1, NAN, 3);
    assert_values(fl_minimum(a, b), 0, 0, NAN, NAN, 2);
    assert_values(fl_maximum(a, b), 0, 0, NAN, NAN, 3);
    assert_values(fl_abs(T_I32(FL_SHAPE(2), INT32_MIN, -5)), 0, 0, (double)INT32_MIN, 5); /* wraps, as NumPy */
    assert_no_error();
}

/* ---- errors ---- */

/* fl_add_scaled is alpha a + beta b: the backend's fused kernel (backend.h,
 * add_scaled) gives the composition's values to rounding, dense, strided (which the
 * cpu kernel declines), broadcast, across dtypes, large enough for threads, and with
 * special values; without the entry the composition runs. */
static void add_scaled_matches_the_composition(void **state)
{
    fl_backend composing = support_derive(fl_default_backend()->name);
    composing.add_scaled = NULL;
    fl_tensor *a = fl_randn(FL_F32, FL_SHAPE(300, 257)), *b = fl_randn(FL_F32, FL_SHAPE(300, 257));
    fl_tensor *special = T_F32(FL_SHAPE(6), NAN, INFINITY, -INFINITY, 0, -0.0f, 1e38f);
    const fl_tensor *pairs[][2] = {
        {a, b},
        {fl_cast(a, FL_F64), fl_cast(b, FL_F64)},
        {fl_transpose(a, 0, 1), fl_transpose(b, 0, 1)},
        {a, fl_randn(FL_F32, FL_SHAPE(257))},
        {fl_cast(a, FL_F64), b},
        {special, fl_ones(FL_F32, FL_SHAPE(6))},
        {T_I32(FL_SHAPE(3), 1, 2, 3), T_I32(FL_SHAPE(3), 4, 5, 6)},
    };
    const double scales[][2] = {{1, -0.01}, {0.9, 1}, {-2.5, 0.5}, {0, 3}};
    for (int i = 0; i < 7; i++)
        for (int k = 0; k < 4; k++) {
            double alpha = scales[k][0], beta = scales[k][1];
            fl_tensor *fused = fl_add_scaled(pairs[i][0], alpha, pairs[i][1], beta);
            fl_backend original = support_override(&composing);
            fl_tensor *composed = fl_add_scaled(pairs[i][0], alpha, pairs[i][1], beta);
            support_override(&original);
            fl_tensor *by_hand = fl_add(fl_mul_scalar(pairs[i][0], alpha), fl_mul_scalar(pairs[i][1], beta));
            assert_dtype(fused, fl_dtype_of(by_hand));
            assert_close(fused, by_hand, 1e-6, 1e-6);
            assert_close(composed, by_hand, 0, 0);
        }
    assert_values(fl_add_scaled(T_F32(FL_SHAPE(2), 1, 2), 2, T_F32(FL_SHAPE(2), 10, 20), -0.5), 0, 0, -3, -6);
    assert_fails(fl_add_scaled(a, 1, fl_randn(FL_F32, FL_SHAPE(2, 2)), 1), FL_ERR_SHAPE, "do not broadcast");
    assert_fails(fl_add_scaled(NULL, 1, b, 1), FL_ERR_NULL, "fl_add_scaled");
}

static void errors_are_clear(void **state)
{
    fl_tensor *a = fl_zeros(FL_F32, FL_SHAPE(2, 3)), *b = fl_zeros(FL_I32, FL_SHAPE(4));
    assert_fails(fl_add(a, b), FL_ERR_SHAPE, "fl_add: shapes f32[2, 3] and i32[4] do not broadcast");
    assert_fails(fl_gt(a, fl_zeros(FL_F32, FL_SHAPE(2, 2))), FL_ERR_SHAPE, "fl_gt");
    fl_tensor *flags = T_BOOL(FL_SHAPE(2), 0, 1);
    assert_fails(fl_neg(flags), FL_ERR_DTYPE, "fl_neg: is not defined for bool tensors");
    assert_fails(fl_sub(flags, flags), FL_ERR_DTYPE, "fl_sub");
    assert_fails(fl_abs(flags), FL_ERR_DTYPE, "fl_abs");
    assert_fails(fl_pow(flags, flags), FL_ERR_DTYPE, "fl_pow");

    /* NULL given directly is an error naming the argument; NULL from an earlier
     * failure flows through silently and the first error is kept. */
    assert_fails(fl_add(NULL, a), FL_ERR_NULL, "fl_add: argument 1 is NULL");
    assert_fails(fl_exp(NULL), FL_ERR_NULL, "fl_exp");
    assert_fails(fl_mul_scalar(NULL, 2), FL_ERR_NULL, "fl_mul_scalar");
    fl_tensor *bad = fl_add(a, b);
    assert_null(fl_exp(fl_mul(bad, a)));
    assert_null(fl_clamp(bad, 0, 1));
    assert_fails(fl_add_scalar(bad, 1), FL_ERR_SHAPE, "fl_add: shapes");

    /* Operands on different backends. */
    static fl_backend other;
    if (!fl_backend_find("elementwise-other")) {
        other = *fl_backend_find("cpu");
        other.name = "elementwise-other";
        assert_int_equal(fl_backend_register(&other), FL_OK);
    }
    fl_tensor *elsewhere = fl_to_backend(a, "elementwise-other");
    assert_non_null(elsewhere);
    char expected[160];
    snprintf(expected, sizeof expected, "different backends (%s and elementwise-other)", fl_backend_name(a));
    assert_fails(fl_add(a, elsewhere), FL_ERR_VALUE, expected);

    /* A kernel asked for a dtype it has no loop for says so, and the tensor layer
     * names the operation, the inputs and the output. */
    fl_backend derived = support_derive(fl_default_backend()->name);
    derived.exp = derived.logical_not; /* a bool-only kernel in exp's place */
    fl_backend original = support_override(&derived);
    snprintf(expected, sizeof expected, "fl_exp: logical_not has no f32 kernel (backend %s; inputs f32[2, 3]",
             derived.name);
    assert_fails(fl_exp(a), FL_ERR_DTYPE, expected);
    /* An unimplemented entry is reported, not called. */
    derived = support_derive(fl_default_backend()->name);
    derived.exp = original.exp;
    derived.add = NULL;
    support_override(&derived);
    assert_fails(fl_add(a, a), FL_ERR_UNSUPPORTED, "does not implement the primitive 'add'");
    support_override(&original);
}

/* ---- the per-call cost stays small ---- */

/* Run outside any scope, where results belong to the caller. */
static void small_operations_leave_nothing_behind(void **state)
{
    fl_memory_stats before, after;
    fl_memory_stats_get(&before);
    fl_tensor *a = T_F32(FL_SHAPE(4), 1, 2, 3, 4);
    for (int i = 0; i < 1000; i++)
        fl_release(fl_add(a, a));
    fl_scope scope = fl_scope_begin();
    for (int i = 0; i < 1000; i++)
        fl_exp(fl_add(fl_mul_scalar(a, 2), a));
    fl_scope_end(scope);
    fl_release(a);
    fl_memory_stats_get(&after);
    assert_int_equal(after.in_use, before.in_use);
    assert_int_equal(after.allocations - before.allocations, after.frees - before.frees);
    assert_no_error();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        scoped_test(unary_float_ops_match_pytorch),
        scoped_test(binary_float_ops_match_pytorch),
        scoped_test(integer_ops_wrap_as_pytorch),
        scoped_test(bool_ops_are_logical),
        scoped_test(f32_math_is_within_two_ulp_everywhere),
        scoped_test(dtypes_promote_as_pytorch),
        scoped_test(scalar_forms_and_composites),
        scoped_test(negative_integer_powers_are_refused),
        scoped_test(out_of_range_scalars_are_refused),
        scoped_test(broadcasting_matches_numpy),
        scoped_test(large_broadcasts_split_across_threads),
        scoped_test(strided_operands_are_read_in_place),
        scoped_test(signed_zeros_and_special_values),
        scoped_test(add_scaled_matches_the_composition),
        scoped_test(errors_are_clear),
        cmocka_unit_test(small_operations_leave_nothing_behind),
    };
    return cmocka_run_group_tests_name("elementwise", tests, NULL, NULL);
}
