/*
 * The CPU backend's fused LSTM cell and recurrence, and their gradients (backend.h,
 * lstm_cell and lstm_sequence).
 *
 * Composed of primitives, a step of an LSTM is about ten calls forward and as many
 * backward over [N, 4H] and [N, H] tensors, which at a language model's sizes
 * ([20, 1024]) cost more in calls, forks and temporaries than in arithmetic; here each
 * row is read once and its outputs written once. The activations are the elementwise
 * kernels' own (vm_sigmoidf and vm_tanhf for f32, libm's for f64), except in the
 * recurrence built for AVX-512 or AVX2, whose cells use 16- or 8-lane versions of the
 * same functions; the products are taken in the composition's order, so the results
 * agree with it to rounding.
 */
#include <cblas.h>
#include <dnnl.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "cpu.h"
#include "vecmath.h"

#define SIGMOID_F64(x) (1.0 / (1.0 + exp(-(x))))

/* Row r of pre [N, 4H] and c_prev [N, H] to gates, c and h. */
#define CELL_ROWS(type, sigmoid, tanh_fn)                                                            \
    do {                                                                                             \
        const type *restrict p_ = prev, *restrict cp_ = cprevv;                                      \
        type *restrict a_ = gatesv, *restrict c_ = cv, *restrict h_ = hv;                            \
        _Pragma("omp parallel for num_threads(threads) if(threads > 1) schedule(static)")            \
        for (int64_t r = 0; r < rows; r++) {                                                         \
            const type *restrict p = p_ + r * 4 * hs;                                                \
            const type *restrict cp = cp_ + r * hs;                                                  \
            type *restrict a = a_ + r * 4 * hs, *restrict c = c_ + r * hs, *restrict h = h_ + r * hs; \
            _Pragma("omp simd")                                                                      \
            for (int64_t j = 0; j < hs; j++) {                                                       \
                type i = sigmoid(p[j]), f = sigmoid(p[hs + j]), g = tanh_fn(p[2 * hs + j]),          \
                     o = sigmoid(p[3 * hs + j]);                                                     \
                type cell = f * cp[j] + i * g;                                               \
                a[j] = i;                                                                            \
                a[hs + j] = f;                                                                       \
                a[2 * hs + j] = g;                                                                   \
                a[3 * hs + j] = o;                                                                   \
                c[j] = cell;                                                                         \
                h[j] = o * tanh_fn(cell);                                                            \
            }                                                                                        \
        }                                                                                            \
    } while (0)

/* Row r of the gradient: dc' = dc + dh o (1 - tanh(c)^2), then each gate's. */
#define CELL_GRAD_ROWS(type, tanh_fn)                                                                \
    do {                                                                                             \
        const type *restrict dh_ = dhv, *restrict dc_ = dcv, *restrict a_ = gatesv;                  \
        const type *restrict cp_ = cprevv, *restrict c_ = cv;                                        \
        type *restrict d_ = dprev, *restrict dcp_ = dcprevv;                                         \
        _Pragma("omp parallel for num_threads(threads) if(threads > 1) schedule(static)")            \
        for (int64_t r = 0; r < rows; r++) {                                                         \
            const type *restrict dh = dh_ + r * hs, *restrict dc = dc_ + r * hs;                     \
            const type *restrict a = a_ + r * 4 * hs, *restrict cp = cp_ + r * hs;                   \
            const type *restrict c = c_ + r * hs;                                                    \
            type *restrict d = d_ + r * 4 * hs, *restrict dcp = dcp_ + r * hs;                       \
            _Pragma("omp simd")                                                                      \
            for (int64_t j = 0; j < hs; j++) {                                                       \
                type i = a[j], f = a[hs + j], g = a[2 * hs + j], o = a[3 * hs + j];                  \
                type t = tanh_fn(c[j]);                                                              \
                type total = dc[j] + (dh[j] * o) * (1 - t * t);                                      \
                d[j] = (total * g) * (i - i * i);                                                    \
                d[hs + j] = (total * cp[j]) * (f - f * f);                                           \
                d[2 * hs + j] = (total * i) * (1 - g * g);                                           \
                d[3 * hs + j] = (dh[j] * t) * (o - o * o);                                           \
                dcp[j] = total * f;                                                                  \
            }                                                                                        \
        }                                                                                            \
    } while (0)

static int check_dtypes(const char *what, int count, const fl_tensor *const *in)
{
    if (in[0]->dtype != FL_F32 && in[0]->dtype != FL_F64)
        return fl_backend_error(FL_ERR_DTYPE, "%s takes f32 or f64, not %s", what, fl_dtype_name(in[0]->dtype));
    for (int k = 1; k < count; k++)
        if (in[k]->dtype != in[0]->dtype)
            return fl_backend_error(FL_ERR_DTYPE, "%s needs inputs of one dtype", what);
    return 0;
}

static int threads_for(int64_t elements) { return elements >= CPU_PARALLEL_GRAIN ? cpu_threads() : 1; }

static int cpu_lstm_cell(const fl_backend *self, fl_tensor *gates, fl_tensor *c_out, fl_tensor *h_out,
                         const fl_tensor *pre, const fl_tensor *c_prev)
{
    const fl_tensor *in[2] = {pre, c_prev};
    int rc = check_dtypes("lstm_cell", 2, in);
    if (rc)
        return rc;
    if (pre->ndim != 2 || c_prev->ndim != 2 || pre->shape[1] != 4 * c_prev->shape[1] ||
        pre->shape[0] != c_prev->shape[0])
        return fl_backend_error(FL_ERR_SHAPE, "lstm_cell needs pre [N, 4H] and c_prev [N, H]");
    if ((rc = cpu_alloc(gates)) || (rc = cpu_alloc(c_out)) || (rc = cpu_alloc(h_out)) || pre->numel == 0)
        return rc;
    const void *data[2];
    void *scratch[2];
    if ((rc = cpu_dense_all(2, in, data, scratch)))
        return rc;
    const void *prev = data[0], *cprevv = data[1];
    void *gatesv = cpu_data(gates), *cv = cpu_data(c_out), *hv = cpu_data(h_out);
    int64_t rows = pre->shape[0], hs = c_prev->shape[1];
    int threads = threads_for(pre->numel);
    if (pre->dtype == FL_F32)
        CELL_ROWS(float, vm_sigmoidf, vm_tanhf);
    else
        CELL_ROWS(double, SIGMOID_F64, tanh);
    cpu_scratch_free_all(2, scratch);
    return 0;
}

static int cpu_lstm_cell_backward(const fl_backend *self, fl_tensor *dpre, fl_tensor *dc_prev, const fl_tensor *dh_in,
                                  const fl_tensor *dc_in, const fl_tensor *gates, const fl_tensor *c_prev,
                                  const fl_tensor *c_in)
{
    const fl_tensor *in[5] = {gates, dh_in, dc_in, c_prev, c_in};
    int rc = check_dtypes("lstm_cell_backward", 5, in);
    if (rc)
        return rc;
    int64_t rows = gates->ndim == 2 ? gates->shape[0] : -1, hs = gates->ndim == 2 ? gates->shape[1] / 4 : -1;
    for (int k = 1; k < 5; k++)
        if (in[k]->ndim != 2 || in[k]->shape[0] != rows || in[k]->shape[1] != hs || gates->shape[1] != 4 * hs)
            return fl_backend_error(FL_ERR_SHAPE, "lstm_cell_backward needs gates [N, 4H] and the rest [N, H]");
    if ((rc = cpu_alloc(dpre)) || (rc = cpu_alloc(dc_prev)) || gates->numel == 0)
        return rc;
    const void *data[5];
    void *scratch[5];
    if ((rc = cpu_dense_all(5, in, data, scratch)))
        return rc;
    const void *gatesv = data[0], *dhv = data[1], *dcv = data[2], *cprevv = data[3], *cv = data[4];
    void *dprev = cpu_data(dpre), *dcprevv = cpu_data(dc_prev);
    int threads = threads_for(gates->numel);
    if (gates->dtype == FL_F32)
        CELL_GRAD_ROWS(float, vm_tanhf);
    else
        CELL_GRAD_ROWS(double, tanh);
    cpu_scratch_free_all(5, scratch);
    return 0;
}

/* ---- the recurrence of a layer (lstm_sequence) ----
 *
 * The threads split the hidden units, not the steps: thread p owns units [a, b) and
 * computes, at every step, the four gates of those units (one single-threaded gemm
 * into its own preactivations), their cell and its slice of h_t and c_t. Only h_t is
 * shared: the next step's product reads all of it, so the threads meet once a step
 * at a barrier. Backward, thread p computes the gates' gradients of its units, and
 * after the barrier its columns of dh_prev = dpre W_hh, which is all its next step
 * needs. One parallel region for the whole sequence replaces a fork and a join per
 * product, and no step allocates. */

/* The units of thread p of count: a split of hs on multiples of 16 where hs allows. */
static void units_of(int p, int count, int64_t hs, int64_t *first, int64_t *end)
{
    int64_t grain = hs >= 16 * (int64_t)count ? 16 : 1, blocks = (hs + grain - 1) / grain;
    *first = blocks * p / count * grain;
    *end = p + 1 == count ? hs : blocks * (p + 1) / count * grain;
}

/* Threads for a recurrence whose step multiplies [rows, hs] by [hs, 4 hs]: one per
 * 16 units at most, and one where a step's product is too small to share. */
static int sequence_threads(int64_t rows, int64_t hs)
{
    int threads = cpu_threads();
    if (rows * hs * 4 * hs < 16 * 1024)
        return 1;
    return hs / 16 < threads ? (int)(hs / 16 > 0 ? hs / 16 : 1) : threads;
}

/* Asks for rows x count floats, row r at base + r * stride, to be brought into the
 * cache: the step's inputs written long before (the input projection, the saved gates
 * and states), requested ahead of the cell that reads them. locality is
 * __builtin_prefetch's, which must be a constant (hence a macro): 2 for the core's L2,
 * 3 for its L1. */
#define prefetch_rows(base, rows, stride, count, locality)                                  \
    do {                                                                                   \
        for (int64_t r_ = 0; r_ < (rows); r_++)                                            \
            for (int64_t k_ = 0; k_ < (count); k_ += 16)                                   \
                __builtin_prefetch((base) + r_ * (stride) + k_, 0, (locality));            \
    } while (0)

/* The forward asks for the input projection's row CELL_AHEAD rows before the cell
 * that reads it, and for the first rows before the step's product. Requested all
 * before the product, as the backward's inputs are, they were evicted from L2 again
 * on machines whose L2 the product's operand fills (512 KiB a core, AMD Zen 3) before
 * the cells read them. */
#define CELL_AHEAD 2

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
/* The cell's activations on vectors, five per unit forward and one backward, in fewer
 * instructions than vecmath.h's, which are written to vectorize from scalar code and
 * build 2^n from integer bits with selects around it. The reduction and the
 * polynomials are vm_exp_parts' and vm_tanhf's, so the results stay within a few ulp
 * of theirs, and NaN passes through (tests/test_nn_sequence.c compares the recurrence
 * with the composition, whose activations are vecmath.h's, at every instruction set).
 * They are written once over the few operations below, which each instruction set
 * defines: 16 lanes on AVX-512, 8 on AVX2 with FMA. */
#define VECTOR_CELLS 1

/* vecmath.h's polynomials, highest degree first */
static const float exp_poly[6] = {VM_EXP_P5, VM_EXP_P4, VM_EXP_P3, VM_EXP_P2, VM_EXP_P1, VM_EXP_P0};
static const float tanh_poly[5] = {VM_TANH_Q4, VM_TANH_Q3, VM_TANH_Q2, VM_TANH_Q1, VM_TANH_Q0};
#endif

#if defined(__AVX512F__)
typedef __m512 vec;
typedef __mmask16 vlanes; /* the lanes of a block that lie in the row */
#define VEC_WIDTH 16
#define V(op) _mm512_##op
#define V_ROUND(x) _mm512_roundscale_ps((x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
/* yes where a pred b, else no */
#define V_WHERE(a, b, pred, yes, no) _mm512_mask_blend_ps(_mm512_cmp_ps_mask((a), (b), (pred)), (no), (yes))
#define V_LOAD(m, p) _mm512_maskz_loadu_ps((m), (p))
#define V_STORE(m, p, v) _mm512_mask_storeu_ps((p), (m), (v))

static inline vlanes lanes_of(int64_t j, int64_t count)
{
    return count - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (count - j)) - 1);
}

static inline vec v_abs(vec x) { return _mm512_abs_ps(x); }

/* p 2^n for integral n in [-150, 0]: scalef rounds once into the subnormals. */
static inline vec v_scale(vec p, vec n) { return _mm512_scalef_ps(p, n); }

static inline vec v_copysign(vec magnitude, vec x)
{
    __m512i sign = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN));
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(magnitude), sign));
}
#elif defined(__AVX2__) && defined(__FMA__)
typedef __m256 vec;
/* Masked moves are slow on some machines (AMD's stores), so a block whose lanes all
 * lie in the row uses plain ones and only a row's partial last block the mask. */
typedef struct vlanes {
    bool full;
    __m256i mask;
} vlanes;
#define VEC_WIDTH 8
#define V(op) _mm256_##op
#define V_ROUND(x) _mm256_round_ps((x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define V_WHERE(a, b, pred, yes, no) _mm256_blendv_ps((no), (yes), _mm256_cmp_ps((a), (b), (pred)))
#define V_LOAD(m, p) ((m).full ? _mm256_loadu_ps(p) : _mm256_maskload_ps((p), (m).mask))
#define V_STORE(m, p, v)                             \
    do {                                             \
        if ((m).full)                                \
            _mm256_storeu_ps((p), (v));              \
        else                                         \
            _mm256_maskstore_ps((p), (m).mask, (v)); \
    } while (0)

static inline vlanes lanes_of(int64_t j, int64_t count)
{
    int64_t left = count - j < 8 ? count - j : 8;
    return (vlanes){left == 8, _mm256_cmpgt_epi32(_mm256_set1_epi32((int)left), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))};
}

static inline vec v_abs(vec x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }

/* p 2^n for integral n in [-150, 0]: without scalef, 2^n is built in the exponent
 * field in two halves, each a normal number, so that a result in the subnormals
 * rounds once, as scalef's does. */
static inline vec v_scale(vec p, vec n)
{
    __m256i whole = _mm256_cvtps_epi32(n), half = _mm256_srai_epi32(whole, 1), bias = _mm256_set1_epi32(127);
    __m256 first = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, bias), 23));
    __m256 second = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(whole, half), bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, first), second);
}

static inline vec v_copysign(vec magnitude, vec x)
{
    return _mm256_or_ps(magnitude, _mm256_and_ps(x, _mm256_set1_ps(-0.0f)));
}
#endif

#if defined(VECTOR_CELLS)
/* e^x for x <= 0 or NaN (NaN gives an unspecified value; callers pass NaN through). */
static inline vec exp_of_nonpositive(vec x)
{
    x = V(max_ps)(x, V(set1_ps)(-104.0f));
    vec n = V_ROUND(V(mul_ps)(x, V(set1_ps)(1.44269504088896341f)));
    vec r = V(fmadd_ps)(n, V(set1_ps)(-VM_LN2_HI), x);
    r = V(fmadd_ps)(n, V(set1_ps)(VM_LN2_LO), r);
    vec p = V(set1_ps)(exp_poly[0]);
    for (int k = 1; k < 6; k++)
        p = V(fmadd_ps)(p, r, V(set1_ps)(exp_poly[k]));
    p = V(add_ps)(V(fmadd_ps)(p, V(mul_ps)(r, r), r), V(set1_ps)(1.0f));
    return v_scale(p, n);
}

static inline vec pass_nan(vec x, vec y) { return V_WHERE(x, x, _CMP_UNORD_Q, x, y); }

/* 1 / (1 + e^-x) as vm_sigmoidf: from e = e^-|x|, 1 / (1 + e) or e / (1 + e). */
static inline vec v_sigmoid(vec x)
{
    vec zero = V(setzero_ps)(), one = V(set1_ps)(1.0f);
    vec e = exp_of_nonpositive(V(sub_ps)(zero, v_abs(x)));
    vec top = V_WHERE(x, zero, _CMP_LT_OQ, e, one);
    return pass_nan(x, V(div_ps)(top, V(add_ps)(one, e)));
}

/* tanh as vm_tanhf: x + x^3 P(x^2) up to |x| = 0.625, (1 - e) / (1 + e) with
 * e = e^-2|x| above, x's sign. */
static inline vec v_tanh(vec x)
{
    vec ax = v_abs(x), z = V(mul_ps)(x, x), one = V(set1_ps)(1.0f);
    vec e = exp_of_nonpositive(V(mul_ps)(ax, V(set1_ps)(-2.0f)));
    vec large = V(div_ps)(V(sub_ps)(one, e), V(add_ps)(one, e));
    vec p = V(set1_ps)(tanh_poly[0]);
    for (int k = 1; k < 5; k++)
        p = V(fmadd_ps)(p, z, V(set1_ps)(tanh_poly[k]));
    vec small = V(fmadd_ps)(V(mul_ps)(p, z), ax, ax);
    vec magnitude = V_WHERE(ax, V(set1_ps)(0.625f), _CMP_GT_OQ, large, small);
    return pass_nan(x, v_copysign(magnitude, x));
}
#endif

/* Index of the step before step t in the order the recurrence runs; -1 for its first. */
static int64_t previous_step(int64_t t, int64_t steps, bool reverse)
{
    return reverse ? (t + 1 < steps ? t + 1 : -1) : t - 1;
}

/* packed [hs, 4u] row-major, rows ld apart = the columns of W_hh^T ([hs, 4hs]) of
 * units [a, a + u) of each gate, gate after gate: four transposed copies, which
 * OpenBLAS makes in blocks (a plain loop is several times slower, its power-of-two
 * strides colliding in the cache). */
static void pack_gate_columns(float *packed, int64_t ld, const float *w, int64_t hs, int64_t a, int64_t u)
{
    for (int g = 0; g < 4; g++)
        cblas_somatcopy(CblasRowMajor, CblasTrans, (blasint)u, (blasint)hs, 1.0f, w + (g * hs + a) * hs,
                        (blasint)hs, packed + g * u, (blasint)ld);
}

/* The rows of the operands copied for the per-step products lie 16 floats further
 * apart than their width: 128 units a thread would put them a power of two apart
 * (2 KiB forward, 512 bytes backward), which oneDNN's AVX2 sgemm reads more slowly,
 * the lines of successive rows sharing cache sets. */
#define PACKED_PAD 16

static int decline_f64(const char *what, const fl_tensor *t)
{
    return t->dtype == FL_F32 ? 0
                              : fl_backend_error(FL_ERR_UNSUPPORTED, "%s has an f32 kernel, not %s", what,
                                                 fl_dtype_name(t->dtype));
}

/* One row of a step, units [a, a + u) (the pointers start at unit a): the
 * preactivations p [4 u] (this thread's product, gate after gate) plus x [4 hs] and
 * the bias become the gates [4 hs], then c and h from c_prev. */
static void cell_row(const float *restrict p, const float *restrict x, const float *restrict bias,
                     const float *restrict c_prev, float *restrict gates, float *restrict c, float *restrict h,
                     int64_t u, int64_t hs)
{
#if defined(VECTOR_CELLS)
    for (int64_t j = 0; j < u; j += VEC_WIDTH) {
        vlanes m = lanes_of(j, u);
#define PRE(g) V(add_ps)(V(add_ps)(V_LOAD(m, x + (g) * hs + j), V_LOAD(m, bias + (g) * hs + j)), V_LOAD(m, p + (g) * u + j))
        vec i = v_sigmoid(PRE(0)), f = v_sigmoid(PRE(1)), g = v_tanh(PRE(2)), o = v_sigmoid(PRE(3));
#undef PRE
        vec cell = V(add_ps)(V(mul_ps)(f, V_LOAD(m, c_prev + j)), V(mul_ps)(i, g));
        V_STORE(m, gates + j, i);
        V_STORE(m, gates + hs + j, f);
        V_STORE(m, gates + 2 * hs + j, g);
        V_STORE(m, gates + 3 * hs + j, o);
        V_STORE(m, c + j, cell);
        V_STORE(m, h + j, V(mul_ps)(o, v_tanh(cell)));
    }
#else
#pragma omp simd
    for (int64_t j = 0; j < u; j++) {
        float i = vm_sigmoidf((x[j] + bias[j]) + p[j]), f = vm_sigmoidf((x[hs + j] + bias[hs + j]) + p[u + j]),
              g = vm_tanhf((x[2 * hs + j] + bias[2 * hs + j]) + p[2 * u + j]),
              o = vm_sigmoidf((x[3 * hs + j] + bias[3 * hs + j]) + p[3 * u + j]);
        float cell = f * c_prev[j] + i * g;
        gates[j] = i;
        gates[hs + j] = f;
        gates[2 * hs + j] = g;
        gates[3 * hs + j] = o;
        c[j] = cell;
        h[j] = o * vm_tanhf(cell);
    }
#endif
}

/* The gradient of one row, units [a, a + u): from the step's dh and dc [u] plus what
 * flows back from the step after (dh_next, dc_next), the preactivations' gradients
 * d [4 hs]; dc_next becomes the gradient flowing into c_prev. */
static void cell_gradient_row(float *restrict d, const float *restrict dh_next, float *restrict dc_next,
                              const float *restrict act, const float *restrict c_prev, const float *restrict c,
                              const float *restrict dh_in, const float *restrict dc_in, int64_t u, int64_t hs)
{
#if defined(VECTOR_CELLS)
    const vec one = V(set1_ps)(1.0f);
    for (int64_t j = 0; j < u; j += VEC_WIDTH) {
        vlanes m = lanes_of(j, u);
        vec i = V_LOAD(m, act + j), f = V_LOAD(m, act + hs + j), g = V_LOAD(m, act + 2 * hs + j),
            o = V_LOAD(m, act + 3 * hs + j);
        vec dh = V(add_ps)(V_LOAD(m, dh_in + j), V_LOAD(m, dh_next + j)), tc = v_tanh(V_LOAD(m, c + j));
        vec total = V(add_ps)(V(add_ps)(V_LOAD(m, dc_in + j), V_LOAD(m, dc_next + j)),
                              V(mul_ps)(V(mul_ps)(dh, o), V(sub_ps)(one, V(mul_ps)(tc, tc))));
        V_STORE(m, d + j, V(mul_ps)(V(mul_ps)(total, g), V(sub_ps)(i, V(mul_ps)(i, i))));
        V_STORE(m, d + hs + j, V(mul_ps)(V(mul_ps)(total, V_LOAD(m, c_prev + j)), V(sub_ps)(f, V(mul_ps)(f, f))));
        V_STORE(m, d + 2 * hs + j, V(mul_ps)(V(mul_ps)(total, i), V(sub_ps)(one, V(mul_ps)(g, g))));
        V_STORE(m, d + 3 * hs + j, V(mul_ps)(V(mul_ps)(dh, tc), V(sub_ps)(o, V(mul_ps)(o, o))));
        V_STORE(m, dc_next + j, V(mul_ps)(total, f));
    }
#else
#pragma omp simd
    for (int64_t j = 0; j < u; j++) {
        float i = act[j], f = act[hs + j], g = act[2 * hs + j], o = act[3 * hs + j];
        float dh = dh_in[j] + dh_next[j], tc = vm_tanhf(c[j]);
        float total = (dc_in[j] + dc_next[j]) + (dh * o) * (1 - tc * tc);
        d[j] = (total * g) * (i - i * i);
        d[hs + j] = (total * c_prev[j]) * (f - f * f);
        d[2 * hs + j] = (total * i) * (1 - g * g);
        d[3 * hs + j] = (dh * tc) * (o - o * o);
        dc_next[j] = total * f;
    }
#endif
}

static int cpu_lstm_sequence(const fl_backend *self, fl_tensor *states, fl_tensor *gates_out, const fl_tensor *xproj,
                             const fl_tensor *bias, const fl_tensor *h0, const fl_tensor *c0, const fl_tensor *w_hh,
                             bool reverse)
{
    const fl_tensor *in[5] = {xproj, h0, c0, w_hh, bias};
    int inputs = bias ? 5 : 4;
    int rc = decline_f64("lstm_sequence", xproj);
    if (rc || (rc = check_dtypes("lstm_sequence", inputs, in)))
        return rc;
    int64_t steps = xproj->shape[0], rows = xproj->shape[1], hs = xproj->shape[2] / 4;
    if (xproj->ndim != 3 || h0->ndim != 2 || h0->shape[0] != rows || h0->shape[1] != hs || c0->ndim != 2 ||
        c0->shape[0] != rows || c0->shape[1] != hs || w_hh->ndim != 2 || w_hh->shape[0] != 4 * hs ||
        w_hh->shape[1] != hs || xproj->shape[2] != 4 * hs || (bias && (bias->ndim != 1 || bias->shape[0] != 4 * hs)))
        return fl_backend_error(FL_ERR_SHAPE,
                                "lstm_sequence needs xproj [T, N, 4H], bias [4H], h0 and c0 [N, H], w_hh [4H, H]");
    if ((rc = cpu_alloc(states)) || (rc = cpu_alloc(gates_out)) || xproj->numel == 0)
        return rc;
    const void *data[5];
    void *scratch[5];
    if ((rc = cpu_dense_all(inputs, in, data, scratch)))
        return rc;
    const float *x = data[0], *h_init = data[1], *c_init = data[2], *w = data[3];
    float *out = cpu_data(states), *acts = cpu_data(gates_out);
    int threads = sequence_threads(rows, hs);
    /* Each thread's W_hh^T columns [hs, 4 units], packed so that its gemm reads a
     * row-major operand (rows PACKED_PAD apart past its width); then its
     * preactivations [rows, 4 units]. */
    float *packed = cpu_scratch_alloc((size_t)(hs * (4 * hs + PACKED_PAD * threads)) * sizeof *packed);
    float *pre = cpu_scratch_alloc((size_t)(4 * hs * rows) * sizeof *pre);
    float *zeros = bias ? NULL : cpu_scratch_alloc((size_t)(4 * hs) * sizeof *zeros);
    const float *biases = bias ? data[4] : zeros;
    bool failed = false;
    if (zeros)
        memset(zeros, 0, (size_t)(4 * hs) * sizeof *zeros);
    if (!packed || !pre || !biases) {
        rc = fl_backend_error(FL_ERR_MEMORY, "no memory for lstm_sequence's %lld x %lld scratch", (long long)hs,
                              (long long)(4 * hs));
        goto done;
    }
#pragma omp parallel num_threads(threads) if (threads > 1) reduction(|| : failed)
    {
        int count = omp_get_num_threads(), p = omp_get_thread_num();
        int64_t a, b;
        units_of(p, count, hs, &a, &b);
        int64_t u = b - a, width = 4 * u, ld = width + PACKED_PAD;
        float *wp = packed + (4 * a + PACKED_PAD * p) * hs, *pp = pre + 4 * a * rows;
        pack_gate_columns(wp, ld, w, hs, a, u);
#pragma omp barrier
        for (int64_t s = 0; s < steps; s++) {
            int64_t t = reverse ? steps - 1 - s : s, before = previous_step(t, steps, reverse);
            const float *h_prev = before < 0 ? h_init : out + before * rows * hs;
            const float *c_prev = before < 0 ? c_init : out + (steps + before) * rows * hs;
            float *h_t = out + t * rows * hs, *c_t = out + (steps + t) * rows * hs;
            const float *x_t = x + t * rows * 4 * hs;
            float *act_t = acts + t * rows * 4 * hs;
            for (int g = 0; g < 4 && u > 0; g++)
                prefetch_rows(x_t + g * hs + a, rows < CELL_AHEAD ? rows : CELL_AHEAD, 4 * hs, u, 2);
            if (u > 0 && dnnl_sgemm('N', 'N', rows, width, hs, 1.0f, h_prev, hs, wp, ld, 0.0f, pp, width) !=
                             dnnl_success)
                failed = true;
            for (int64_t r = 0; r < rows && u > 0; r++) {
                for (int g = 0; g < 4 && r + CELL_AHEAD < rows; g++)
                    prefetch_rows(x_t + (r + CELL_AHEAD) * 4 * hs + g * hs + a, 1, 0, u, 3);
                cell_row(pp + r * width, x_t + r * 4 * hs + a, biases + a, c_prev + r * hs + a,
                         act_t + r * 4 * hs + a, c_t + r * hs + a, h_t + r * hs + a, u, hs);
            }
#pragma omp barrier
        }
    }
    if (failed)
        rc = fl_backend_error(FL_ERR_BACKEND, "oneDNN sgemm failed in lstm_sequence");
done:
    cpu_scratch_free(packed);
    cpu_scratch_free(pre);
    cpu_scratch_free(zeros);
    cpu_scratch_free_all(inputs, scratch);
    return rc;
}

static int cpu_lstm_sequence_backward(const fl_backend *self, fl_tensor *dxproj, fl_tensor *dh0, fl_tensor *dc0,
                                      const fl_tensor *dstates, const fl_tensor *states, const fl_tensor *gates,
                                      const fl_tensor *h0, const fl_tensor *c0, const fl_tensor *w_hh, bool reverse)
{
    /* h0 only has its dtype checked: the gradient never reads it */
    const fl_tensor *in[6] = {gates, dstates, states, c0, w_hh, h0};
    int rc = decline_f64("lstm_sequence_backward", gates);
    if (rc || (rc = check_dtypes("lstm_sequence_backward", 6, in)))
        return rc;
    int64_t steps = gates->ndim == 3 ? gates->shape[0] : -1, rows = gates->ndim == 3 ? gates->shape[1] : -1,
            hs = gates->ndim == 3 ? gates->shape[2] / 4 : -1;
    if (gates->ndim != 3 || gates->shape[2] != 4 * hs || dstates->ndim != 3 || dstates->shape[0] != 2 * steps ||
        dstates->shape[1] != rows || dstates->shape[2] != hs || states->ndim != 3 ||
        states->shape[0] != 2 * steps || states->shape[1] != rows || states->shape[2] != hs || c0->ndim != 2 ||
        c0->shape[0] != rows || c0->shape[1] != hs || w_hh->ndim != 2 || w_hh->shape[0] != 4 * hs ||
        w_hh->shape[1] != hs)
        return fl_backend_error(FL_ERR_SHAPE, "lstm_sequence_backward needs gates [T, N, 4H], dstates and states "
                                              "[2T, N, H], c0 [N, H] and w_hh [4H, H]");
    if ((rc = cpu_alloc(dxproj)) || (rc = cpu_alloc(dh0)) || (rc = cpu_alloc(dc0)) || dh0->numel == 0)
        return rc;
    const void *data[5];
    void *scratch[5];
    if ((rc = cpu_dense_all(5, in, data, scratch)))
        return rc;
    const float *acts = data[0], *dout = data[1], *out = data[2], *c_init = data[3], *w = data[4];
    float *dpre = cpu_data(dxproj), *dh_first = cpu_data(dh0), *dc_first = cpu_data(dc0);
    int threads = sequence_threads(rows, hs);
    /* Each thread's dh and dc flowing into the step before, [rows, units]; and its
     * columns of W_hh [4H, units], copied with rows PACKED_PAD apart past their width. */
    float *carry = cpu_scratch_alloc((size_t)(2 * rows * hs) * sizeof *carry);
    float *columns = cpu_scratch_alloc((size_t)(4 * hs * (hs + PACKED_PAD * threads)) * sizeof *columns);
    bool failed = false;
    if (!carry || !columns) {
        rc = fl_backend_error(FL_ERR_MEMORY, "no memory for lstm_sequence_backward's scratch");
        goto done;
    }
#pragma omp parallel num_threads(threads) if (threads > 1) reduction(|| : failed)
    {
        int64_t a, b;
        int p = omp_get_thread_num();
        units_of(p, omp_get_num_threads(), hs, &a, &b);
        int64_t u = b - a, ld = u + PACKED_PAD;
        float *wc = columns + 4 * hs * (a + PACKED_PAD * p);
        for (int64_t r = 0; r < 4 * hs; r++)
            memcpy(wc + r * ld, w + r * hs + a, (size_t)u * sizeof *wc);
        float *dh_next = carry + 2 * a * rows, *dc_next = dh_next + u * rows;
        for (int64_t k = 0; k < 2 * u * rows; k++)
            dh_next[k] = 0;
        for (int64_t s = 0; s < steps; s++) {
            int64_t t = reverse ? s : steps - 1 - s, before = previous_step(t, steps, reverse);
            const float *c_prev = before < 0 ? c_init : out + (steps + before) * rows * hs;
            const float *c_t = out + (steps + t) * rows * hs, *act_t = acts + t * rows * 4 * hs;
            const float *dh_t = dout + t * rows * hs, *dc_t = dout + (steps + t) * rows * hs;
            float *d_t = dpre + t * rows * 4 * hs;
            for (int64_t r = 0; r < rows && u > 0; r++)
                cell_gradient_row(d_t + r * 4 * hs + a, dh_next + r * u, dc_next + r * u, act_t + r * 4 * hs + a,
                                  c_prev + r * hs + a, c_t + r * hs + a, dh_t + r * hs + a, dc_t + r * hs + a, u, hs);
#pragma omp barrier
            if (before >= 0 && u > 0) {
                for (int g = 0; g < 4; g++)
                    prefetch_rows(acts + before * rows * 4 * hs + g * hs + a, rows, 4 * hs, u, 2);
                prefetch_rows(dout + before * rows * hs + a, rows, hs, u, 2);
                prefetch_rows(dout + (steps + before) * rows * hs + a, rows, hs, u, 2);
                prefetch_rows(c_prev + a, rows, hs, u, 2);
            }
            /* dh_prev[:, a:b] = dpre_t [rows, 4H] W_hh[:, a:b] */
            if (u > 0 && dnnl_sgemm('N', 'N', rows, u, 4 * hs, 1.0f, d_t, 4 * hs, wc, ld, 0.0f, dh_next, u) !=
                             dnnl_success)
                failed = true;
        }
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < u; j++) {
                dh_first[r * hs + a + j] = dh_next[r * u + j];
                dc_first[r * hs + a + j] = dc_next[r * u + j];
            }
    }
    if (failed)
        rc = fl_backend_error(FL_ERR_BACKEND, "oneDNN sgemm failed in lstm_sequence_backward");
done:
    cpu_scratch_free(carry);
    cpu_scratch_free(columns);
    cpu_scratch_free_all(5, scratch);
    return rc;
}

void cpu_register_lstm(fl_backend *b)
{
    b->lstm_cell = cpu_lstm_cell;
    b->lstm_cell_backward = cpu_lstm_cell_backward;
    b->lstm_sequence = cpu_lstm_sequence;
    b->lstm_sequence_backward = cpu_lstm_sequence_backward;
}
