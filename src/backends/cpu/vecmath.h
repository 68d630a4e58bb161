/*
 * Single-precision math functions that the compiler can vectorize.
 *
 * libm's expf, logf, tanhf, erff, sinf and cosf are calls that no loop around them
 * can vectorize. These are branch-free versions of the same functions: range
 * reduction and polynomials from Cephes (S. Moshier), erf from N. Juffa's
 * faithfully-rounded erff, every branch a select. Inlined into a loop over floats,
 * GCC turns each into straight-line AVX-512 (or AVX2, SSE) code.
 *
 * Accuracy: within 2 ulp of the correctly rounded result on the whole float range
 * (tests/test_elementwise.c sweeps them against double-precision libm). Special
 * values follow C99 Annex F as libm does: exp(-inf) = 0, exp(x) overflows to inf and
 * underflows through the subnormals to 0, log(0) = -inf, log(x < 0) = nan, NaN
 * propagates, the sign of zero is kept by the odd functions.
 *
 * sin and cos reduce their argument with a three-part pi/4 (Cody-Waite), exact only
 * for |x| <= VM_TRIG_LIMIT; callers recompute larger arguments (and inf, nan) with
 * libm, which reduces exactly (Payne-Hanek). vm_trig_in_range says which.
 */
#ifndef FLARE_CPU_VECMATH_H
#define FLARE_CPU_VECMATH_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* a * b + c in one rounding where the hardware has it; the polynomials are
 * accurate either way. */
#ifdef __FMA__
#define VM_FMA(a, b, c) __builtin_fmaf((a), (b), (c))
#else
#define VM_FMA(a, b, c) ((a) * (b) + (c))
#endif

static inline uint32_t vm_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float vm_float(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* c ? a : b, computed as bit operations on both a and b. A plain ?: would do, but
 * GCC may turn it back into a branch around one side's arithmetic, and then will
 * not vectorize the loop unless floating-point exceptions can be ignored
 * (-fno-trapping-math). */
static inline float vm_select(bool c, float a, float b)
{
    uint32_t mask = -(uint32_t)c;
    return vm_float((vm_bits(a) & mask) | (vm_bits(b) & ~mask));
}

/* ln 2 = VM_LN2_HI - VM_LN2_LO, its high part exact in 9 bits, for the reductions
 * of exp and log; e^r = 1 + r + r^2 P(r) for |r| <= ln2 / 2, with P's coefficients
 * VM_EXP_Pk of r^k; tanh(x) = x + x^3 Q(x^2) for |x| <= 0.625, with Q's VM_TANH_Qk of
 * (x^2)^k (Cephes' expf and tanhf). Named, because the LSTM recurrence's vector cells
 * (lstm.c) evaluate the same polynomials with intrinsics. */
#define VM_LN2_HI 0.693359375f
#define VM_LN2_LO 2.12194440e-4f
#define VM_EXP_P5 1.9875691500e-4f
#define VM_EXP_P4 1.3981999507e-3f
#define VM_EXP_P3 8.3334519073e-3f
#define VM_EXP_P2 4.1665795894e-2f
#define VM_EXP_P1 1.6666665459e-1f
#define VM_EXP_P0 5.0000001201e-1f
#define VM_TANH_Q4 -5.70498872745e-3f
#define VM_TANH_Q3 2.06390887954e-2f
#define VM_TANH_Q2 -5.37397155531e-2f
#define VM_TANH_Q1 1.33314422036e-1f
#define VM_TANH_Q0 -3.33332819422e-1f

/* 2^n for n in [-126, 127], built in the exponent field. */
static inline float vm_pow2i(int32_t n) { return vm_float((uint32_t)(n + 127) << 23); }

/* The two factors of e^x = e^r 2^n, for x already clamped to [-104, 89]: n = round(x /
 * ln2) in *n, and e^r (|r| <= ln2 / 2) by a degree-7 polynomial as the result. */
static inline float vm_exp_parts(float x, int32_t *n)
{
    const float shifter = 0x1.8p23f; /* adding it rounds to an integer held in the low mantissa bits */
    float k = VM_FMA(x, 1.44269504088896341f, shifter);
    *n = (int32_t)(vm_bits(k) - vm_bits(shifter));
    k -= shifter;
    float r = VM_FMA(k, -VM_LN2_HI, x);
    r = VM_FMA(k, VM_LN2_LO, r);
    float p = VM_EXP_P5;
    p = VM_FMA(p, r, VM_EXP_P4);
    p = VM_FMA(p, r, VM_EXP_P3);
    p = VM_FMA(p, r, VM_EXP_P2);
    p = VM_FMA(p, r, VM_EXP_P1);
    p = VM_FMA(p, r, VM_EXP_P0);
    return VM_FMA(p, r * r, r) + 1.0f;
}

/* e^x. 2^n applied in two halves so that results in the subnormal range round only
 * once. */
static inline float vm_expf(float x)
{
    float xc = vm_select(x < -104.0f, -104.0f, x); /* comparisons are false for nan, which passes through */
    xc = vm_select(xc > 89.0f, 89.0f, xc);
    int32_t n;
    float p = vm_exp_parts(xc, &n);
    int32_t low = n / 2;
    float y = p * vm_pow2i(low) * vm_pow2i(n - low);
    y = vm_select(x > 88.72283172607421875f, INFINITY, y); /* past ln(FLT_MAX) */
    y = vm_select(x < -103.972084045410156f, 0.0f, y);     /* below ln(2^-150): rounds to zero */
    return y;
}

/* log(x). x = m 2^e with m in [sqrt(1/2), sqrt(2)); log(m) by a polynomial in m - 1. */
static inline float vm_logf(float x)
{
    /* Subnormals are normalized first. */
    float scaled = x * 0x1p23f;
    bool subnormal = x < 0x1p-126f;
    float xn = vm_select(subnormal, scaled, x);
    uint32_t bits = vm_bits(xn);
    float e = (float)((int32_t)(bits >> 23) - 126) - vm_select(subnormal, 23.0f, 0.0f);
    float m = vm_float((bits & 0x007fffffu) | 0x3f000000u); /* in [0.5, 1) */
    bool low = m < 0.707106781186547524f;
    e -= vm_select(low, 1.0f, 0.0f);
    float f = vm_select(low, m + m, m) - 1.0f;
    float z = f * f;
    float p = 7.0376836292e-2f;
    p = VM_FMA(p, f, -1.1514610310e-1f);
    p = VM_FMA(p, f, 1.1676998740e-1f);
    p = VM_FMA(p, f, -1.2420140846e-1f);
    p = VM_FMA(p, f, 1.4249322787e-1f);
    p = VM_FMA(p, f, -1.6668057665e-1f);
    p = VM_FMA(p, f, 2.0000714765e-1f);
    p = VM_FMA(p, f, -2.4999993993e-1f);
    p = VM_FMA(p, f, 3.3333331174e-1f);
    float y = p * f * z;
    y = VM_FMA(e, -VM_LN2_LO, y);
    y = VM_FMA(z, -0.5f, y);
    y = f + y;
    y = VM_FMA(e, VM_LN2_HI, y);
    y = vm_select(x == INFINITY, INFINITY, y);
    y = vm_select(x == 0.0f, -INFINITY, y);
    y = vm_select(x < 0.0f, NAN, y);
    y = vm_select(x != x, x, y);
    return y;
}

/* log(1 + x): log(u) for u = 1 + x, corrected for the rounding of u to first order
 * (u - 1 - x is exact, so the correction recovers the lost bits of x). */
static inline float vm_log1pf(float x)
{
    float u = 1.0f + x;
    float y = vm_logf(u) - ((u - 1.0f) - x) / vm_select(u == 0.0f, 1.0f, u);
    y = vm_select(u == 1.0f, x, y); /* tiny x, and -0 */
    y = vm_select(x == INFINITY, INFINITY, y);
    y = vm_select(x == -1.0f, -INFINITY, y);
    return y;
}

/* tanh(x): an odd polynomial near 0, else 1 - 2 / (e^2|x| + 1) with x's sign. */
static inline float vm_tanhf(float x)
{
    float ax = fabsf(x);
    float z = x * x;
    float p = VM_TANH_Q4;
    p = VM_FMA(p, z, VM_TANH_Q3);
    p = VM_FMA(p, z, VM_TANH_Q2);
    p = VM_FMA(p, z, VM_TANH_Q1);
    p = VM_FMA(p, z, VM_TANH_Q0);
    float small = VM_FMA(p * z, x, x);
    float large = 1.0f - 2.0f / (vm_expf(ax + ax) + 1.0f);
    return copysignf(vm_select(ax > 0.625f, large, small), x); /* tanh(-0) is -0 */
}

/* 1 / (1 + e^-x), computed from e = e^-|x| so that nothing overflows: 1 / (1 + e)
 * for x >= 0 and e / (1 + e) below, which keeps the subnormal tail near -88. */
static inline float vm_sigmoidf(float x)
{
    float e = vm_expf(-fabsf(x));
    float y = vm_select(x >= 0.0f, 1.0f, e) / (1.0f + e);
    return vm_select(x != x, x, y);
}

/* erf(x): x (1 + P(x^2)) for |x| <= 475/512, else 1 - e^Q(|x|) with x's sign, and
 * exactly +-1 past 3.92, where erfc(x) < 2^-25. P (degree 6) and Q (degree 7) are
 * minimax fits made with Lawson's algorithm against mpmath; their own error is
 * under 0.01 ulp, so the float arithmetic dominates. */
static inline float vm_erff(float x)
{
    float t = fabsf(x), s = x * x;
    float tq = vm_select(t < 3.92f, t, 3.92f); /* keeps the fit in its range; nan passes */
    float q = -2.125273932e-05f;
    q = VM_FMA(q, tq, 4.362727050e-04f);
    q = VM_FMA(q, tq, -4.179768730e-03f);
    q = VM_FMA(q, tq, 2.514217794e-02f);
    q = VM_FMA(q, tq, -1.083149984e-01f);
    q = VM_FMA(q, tq, -6.333154440e-01f);
    q = VM_FMA(q, tq, -1.129530430e+00f);
    q = VM_FMA(q, tq, 1.778721780e-04f);
    float large = copysignf(vm_select(t < 3.92f, 1.0f - vm_expf(q), 1.0f), x);
    float p = 8.359989442e-05f;
    p = VM_FMA(p, s, -8.140937425e-04f);
    p = VM_FMA(p, s, 5.200942978e-03f);
    p = VM_FMA(p, s, -2.685939521e-02f);
    p = VM_FMA(p, s, 1.128369644e-01f);
    p = VM_FMA(p, s, -3.761263490e-01f);
    p = VM_FMA(p, s, 1.283791661e-01f);
    float small = VM_FMA(p, x, x);
    return vm_select(t > 0.927734375f, large, small);
}

/* floor and ceil from round-to-nearest, as libm's floorf and ceilf do not vectorize
 * unless inexact exceptions may be ignored (-fno-trapping-math). The result always
 * has x's sign (floor(-0.5) is -1, ceil(-0.5) is -0). */
static inline float vm_floorf(float x)
{
    float r = nearbyintf(x);
    return copysignf(vm_select(r > x, r - 1.0f, r), x);
}

static inline float vm_ceilf(float x)
{
    float r = nearbyintf(x);
    return copysignf(vm_select(r < x, r + 1.0f, r), x);
}

/* ---- sin and cos ---- */

/* With fused multiply-add, |x| - j pi/4 is exact in its first step (j is an integer
 * below 2^14 and pi/4 is split into three floats of 24 bits), and the reduced
 * argument is good to 2^-59 absolute: within an ulp even next to the multiples of
 * pi. Without it the products round, so only |x| < pi/4 (j = 0, no reduction) is
 * computed here. */
#ifdef __FMA__
#define VM_TRIG_LIMIT 8192.0f
#else
#define VM_TRIG_LIMIT 0.78f
#endif

static inline bool vm_trig_in_range(float x) { return fabsf(x) <= VM_TRIG_LIMIT; }

/* |x| = q pi/2 + r with |r| <= pi/4; the sine and cosine of r by polynomials.
 * Out-of-range x gives a finite placeholder: callers replace it. */
typedef struct vm_trig {
    float sin_r, cos_r;
    uint32_t quadrant;
} vm_trig;

static inline vm_trig vm_trig_reduce(float x)
{
    float ax = fabsf(x);
    ax = vm_select(ax <= VM_TRIG_LIMIT, ax, 0.0f); /* also nan */
    int32_t j = (int32_t)(ax * 1.27323954473516f); /* 4 / pi */
    j = (j + 1) & ~1;
    float y = (float)j;
    float r = VM_FMA(y, -0x1.921fb6p-1f, ax);
    r = VM_FMA(y, 0x1.777a5cp-26f, r);
    r = VM_FMA(y, 0x1.ee59dap-51f, r);
    float z = r * r;
    float s = -1.9515295891e-4f;
    s = VM_FMA(s, z, 8.3321608736e-3f);
    s = VM_FMA(s, z, -1.6666654611e-1f);
    s = VM_FMA(s * z, r, r);
    float c = 2.443315711809948e-5f;
    c = VM_FMA(c, z, -1.388731625493765e-3f);
    c = VM_FMA(c, z, 4.166664568298827e-2f);
    c = VM_FMA(c * z, z, VM_FMA(z, -0.5f, 1.0f));
    return (vm_trig){s, c, (uint32_t)j >> 1};
}

/* sin |x| is (sin r, cos r, -sin r, -cos r) by quadrant; sin is odd. */
static inline float vm_sinf(float x)
{
    vm_trig t = vm_trig_reduce(x);
    float y = vm_select(t.quadrant & 1, t.cos_r, t.sin_r);
    uint32_t negate = ((t.quadrant & 2) << 30) ^ (vm_bits(x) & 0x80000000u);
    return vm_float(vm_bits(y) ^ negate);
}

/* cos |x| is (cos r, -sin r, -cos r, sin r) by quadrant. */
static inline float vm_cosf(float x)
{
    vm_trig t = vm_trig_reduce(x);
    float y = vm_select(t.quadrant & 1, t.sin_r, t.cos_r);
    uint32_t negate = ((t.quadrant + 1) & 2) << 30;
    return vm_float(vm_bits(y) ^ negate);
}

#endif
