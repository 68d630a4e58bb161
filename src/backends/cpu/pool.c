/*
 * The CPU backend's 2-D max and average pooling, forward and backward, on NCHW.
 *
 * Each (image, channel) plane is independent, so planes are spread over threads and
 * the backward pass needs no atomics. Max pooling's backward pass recomputes each
 * window's argmax from x rather than keeping indices from the forward pass: the
 * interface stays stateless and the scan costs about what reading indices would.
 * The window rules are PyTorch's: max skips padding and takes the first maximum (a
 * NaN wins); average divides by the window clipped to the padded input when padding
 * counts, else by its part inside the input.
 */
#include <math.h>
#include <string.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

#include "cpu.h"

typedef struct plane_geometry {
    int64_t H, W, P, Q;
    fl_pool2d_desc d;
} plane_geometry;

/* The window of output (p, q): rows [h0, h1) and columns [w0, w1) inside the input,
 * and the size avg pooling divides by. */
typedef struct window {
    int64_t h0, h1, w0, w1, divisor;
} window;

static inline window window_at(const plane_geometry *g, int64_t p, int64_t q)
{
    const fl_pool2d_desc *d = &g->d;
    int64_t h0 = p * d->stride[0] - d->padding[0], w0 = q * d->stride[1] - d->padding[1];
    int64_t h1 = h0 + d->kernel[0], w1 = w0 + d->kernel[1];
    int64_t h1_padded = h1 < g->H + d->padding[0] ? h1 : g->H + d->padding[0];
    int64_t w1_padded = w1 < g->W + d->padding[1] ? w1 : g->W + d->padding[1];
    int64_t padded_size = (h1_padded - h0) * (w1_padded - w0);
    window w = {h0 > 0 ? h0 : 0, h1 < g->H ? h1 : g->H, w0 > 0 ? w0 : 0, w1 < g->W ? w1 : g->W, 0};
    w.divisor = d->count_include_pad ? padded_size : (w.h1 - w.h0) * (w.w1 - w.w0);
    return w;
}

/* The 2x2, stride-2, unpadded max pooling of CNNs, in a form the compiler vectorizes. */
#define MAX2X2_PLANE(type)                                                                \
    static void max2x2_plane_##type(const type *x, type *y, const plane_geometry *g)     \
    {                                                                                     \
        for (int64_t p = 0; p < g->P; p++) {                                              \
            const type *r0 = x + 2 * p * g->W, *r1 = r0 + g->W;                           \
            type *out = y + p * g->Q;                                                     \
            _Pragma("omp simd")                                                           \
            for (int64_t q = 0; q < g->Q; q++) {                                          \
                type a = r0[2 * q], b = r0[2 * q + 1], c = r1[2 * q], e = r1[2 * q + 1];  \
                type m = b > a || isnan(b) ? b : a;                                       \
                m = c > m || isnan(c) ? c : m;                                            \
                out[q] = e > m || isnan(e) ? e : m;                                       \
            }                                                                             \
        }                                                                                 \
    }

/* Its backward pass: every input element belongs to at most one window, so each one
 * is written once (gradient or zero) and dx needs no clearing first, except for a
 * last odd row or column that no window covers. The window's four values are
 * compared in row order; to_b, to_c, to_e say whether b, c, e took the maximum over
 * it (a NaN always takes it), and the last one that did is the argmax. */
#define MAX2X2_BACKWARD_ROW(type)                                                         \
    static void max2x2_backward_row_##type(const type *grad, const type *r0, const type *r1, \
                                           type *d0, type *d1, int64_t Q)                 \
    {                                                                                     \
        for (int64_t q = 0; q < Q; q++) {                                                 \
            type a = r0[2 * q], b = r0[2 * q + 1], c = r1[2 * q], e = r1[2 * q + 1];     \
            bool to_b = (b > a) | isnan(b);                                               \
            type m = to_b ? b : a;                                                        \
            bool to_c = (c > m) | isnan(c);                                               \
            m = to_c ? c : m;                                                             \
            bool to_e = (e > m) | isnan(e);                                               \
            type gq = grad[q], zero = 0;                                                  \
            d1[2 * q + 1] = to_e ? gq : zero;                                             \
            d1[2 * q] = to_c & !to_e ? gq : zero;                                         \
            d0[2 * q + 1] = to_b & !to_c & !to_e ? gq : zero;                             \
            d0[2 * q] = !to_b & !to_c & !to_e ? gq : zero;                                \
        }                                                                                 \
    }

#ifndef __AVX512F__
MAX2X2_BACKWARD_ROW(float)
#endif
MAX2X2_BACKWARD_ROW(double)

#ifdef __AVX512F__
/* GCC does not vectorize the row above (its stride-2 loads and stores defeat it), so
 * with AVX-512 sixteen windows go at a time: the even and odd columns of a row pair
 * are split apart, compared lane by lane, and the four gradient vectors interleaved
 * back. Masks cover the last, partial block. */
static void max2x2_backward_row_avx512(const float *grad, const float *r0, const float *r1, float *d0,
                                       float *d1, int64_t Q)
{
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    const __m512i low = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i high = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    for (int64_t q = 0; q < Q; q += 16) {
        int64_t n = Q - q < 16 ? Q - q : 16;
        __mmask16 out = (__mmask16)((1u << n) - 1);
        __mmask16 in_lo = (__mmask16)(n >= 8 ? 0xFFFF : (1u << 2 * n) - 1);
        __mmask16 in_hi = (__mmask16)(n > 8 ? (1u << 2 * (n - 8)) - 1 : 0);
        const float *p0 = r0 + 2 * q, *p1 = r1 + 2 * q;
        __m512 x0 = _mm512_maskz_loadu_ps(in_lo, p0), x1 = _mm512_maskz_loadu_ps(in_hi, p0 + 16);
        __m512 x2 = _mm512_maskz_loadu_ps(in_lo, p1), x3 = _mm512_maskz_loadu_ps(in_hi, p1 + 16);
        __m512 a = _mm512_permutex2var_ps(x0, even, x1), b = _mm512_permutex2var_ps(x0, odd, x1);
        __m512 c = _mm512_permutex2var_ps(x2, even, x3), e = _mm512_permutex2var_ps(x2, odd, x3);
        __mmask16 to_b = _mm512_cmp_ps_mask(b, a, _CMP_GT_OQ) | _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q);
        __m512 m = _mm512_mask_blend_ps(to_b, a, b);
        __mmask16 to_c = _mm512_cmp_ps_mask(c, m, _CMP_GT_OQ) | _mm512_cmp_ps_mask(c, c, _CMP_UNORD_Q);
        m = _mm512_mask_blend_ps(to_c, m, c);
        __mmask16 to_e = _mm512_cmp_ps_mask(e, m, _CMP_GT_OQ) | _mm512_cmp_ps_mask(e, e, _CMP_UNORD_Q);
        __m512 g = _mm512_maskz_loadu_ps(out, grad + q);
        __m512 ge = _mm512_maskz_mov_ps(to_e, g);
        __m512 gc = _mm512_maskz_mov_ps(to_c & ~to_e, g);
        __m512 gb = _mm512_maskz_mov_ps(to_b & ~to_c & ~to_e, g);
        __m512 ga = _mm512_maskz_mov_ps(~(to_b | to_c | to_e), g);
        float *o0 = d0 + 2 * q, *o1 = d1 + 2 * q;
        _mm512_mask_storeu_ps(o0, in_lo, _mm512_permutex2var_ps(ga, low, gb));
        _mm512_mask_storeu_ps(o0 + 16, in_hi, _mm512_permutex2var_ps(ga, high, gb));
        _mm512_mask_storeu_ps(o1, in_lo, _mm512_permutex2var_ps(gc, low, ge));
        _mm512_mask_storeu_ps(o1 + 16, in_hi, _mm512_permutex2var_ps(gc, high, ge));
    }
}
#endif

static void max2x2_backward_plane_float(const float *dy, const float *x, float *dx, const plane_geometry *g)
{
    for (int64_t p = 0; p < g->P; p++) {
        const float *r0 = x + 2 * p * g->W, *r1 = r0 + g->W, *grad = dy + p * g->Q;
        float *d0 = dx + 2 * p * g->W, *d1 = d0 + g->W;
#ifdef __AVX512F__
        max2x2_backward_row_avx512(grad, r0, r1, d0, d1, g->Q);
#else
        max2x2_backward_row_float(grad, r0, r1, d0, d1, g->Q);
#endif
        if (2 * g->Q < g->W)
            d0[g->W - 1] = d1[g->W - 1] = 0;
    }
    if (2 * g->P < g->H)
        memset(dx + (g->H - 1) * g->W, 0, (size_t)g->W * sizeof(float));
}

static void max2x2_backward_plane_double(const double *dy, const double *x, double *dx, const plane_geometry *g)
{
    for (int64_t p = 0; p < g->P; p++) {
        const double *r0 = x + 2 * p * g->W, *r1 = r0 + g->W, *grad = dy + p * g->Q;
        double *d0 = dx + 2 * p * g->W, *d1 = d0 + g->W;
        max2x2_backward_row_double(grad, r0, r1, d0, d1, g->Q);
        if (2 * g->Q < g->W)
            d0[g->W - 1] = d1[g->W - 1] = 0;
    }
    if (2 * g->P < g->H)
        memset(dx + (g->H - 1) * g->W, 0, (size_t)g->W * sizeof(double));
}

/* The argmax of a window into the plane: the first maximum in row
 * order, or the last NaN, as PyTorch picks it. */
#define ARGMAX(type)                                                                      \
    static inline int64_t argmax_##type(const type *x, const plane_geometry *g, window w) \
    {                                                                                     \
        int64_t best = w.h0 * g->W + w.w0;                                                \
        type max = -INFINITY;                                                             \
        for (int64_t h = w.h0; h < w.h1; h++)                                             \
            for (int64_t v = w.w0; v < w.w1; v++) {                                       \
                type value = x[h * g->W + v];                                             \
                if (value > max || isnan(value)) {                                        \
                    max = value;                                                          \
                    best = h * g->W + v;                                                  \
                }                                                                         \
            }                                                                             \
        return best;                                                                      \
    }

#define POOL_PLANE(type)                                                                  \
    static void pool_plane_##type(const type *x, type *y, const plane_geometry *g)       \
    {                                                                                     \
        for (int64_t p = 0; p < g->P; p++)                                                \
            for (int64_t q = 0; q < g->Q; q++) {                                          \
                window w = window_at(g, p, q);                                            \
                if (g->d.kind == FL_POOL_MAX) {                                           \
                    y[p * g->Q + q] = w.h0 < w.h1 && w.w0 < w.w1                          \
                                          ? x[argmax_##type(x, g, w)] : (type)-INFINITY;   \
                    continue;                                                             \
                }                                                                         \
                type sum = 0;                                                             \
                for (int64_t h = w.h0; h < w.h1; h++)                                     \
                    for (int64_t v = w.w0; v < w.w1; v++)                                 \
                        sum += x[h * g->W + v];                                           \
                y[p * g->Q + q] = w.divisor > 0 ? sum / (type)w.divisor : 0;              \
            }                                                                             \
    }

/* dx is zeroed by the caller; overlapping windows add up. */
#define POOL_BACKWARD_PLANE(type)                                                         \
    static void pool_backward_plane_##type(const type *dy, const type *x, type *dx,      \
                                           const plane_geometry *g)                       \
    {                                                                                     \
        for (int64_t p = 0; p < g->P; p++)                                                \
            for (int64_t q = 0; q < g->Q; q++) {                                          \
                window w = window_at(g, p, q);                                            \
                type grad = dy[p * g->Q + q];                                             \
                if (w.h0 >= w.h1 || w.w0 >= w.w1)                                         \
                    continue;                                                             \
                if (g->d.kind == FL_POOL_MAX) {                                           \
                    dx[argmax_##type(x, g, w)] += grad;                                   \
                    continue;                                                             \
                }                                                                         \
                grad /= (type)w.divisor;                                                  \
                for (int64_t h = w.h0; h < w.h1; h++)                                     \
                    for (int64_t v = w.w0; v < w.w1; v++)                                 \
                        dx[h * g->W + v] += grad;                                         \
            }                                                                             \
    }

MAX2X2_PLANE(float)
MAX2X2_PLANE(double)
ARGMAX(float)
ARGMAX(double)
POOL_PLANE(float)
POOL_PLANE(double)
POOL_BACKWARD_PLANE(float)
POOL_BACKWARD_PLANE(double)

static bool is_max2x2(const plane_geometry *g)
{
    const fl_pool2d_desc *d = &g->d;
    return d->kind == FL_POOL_MAX && d->kernel[0] == 2 && d->kernel[1] == 2 && d->stride[0] == 2 &&
           d->stride[1] == 2 && d->padding[0] == 0 && d->padding[1] == 0 && 2 * g->P <= g->H && 2 * g->Q <= g->W;
}

/* Planes go to threads in static blocks; a plane is too little work to split. */
#define FOR_EACH_PLANE(planes, work, body)                                                  \
    do {                                                                                    \
        int threads_ = (work) >= CPU_PARALLEL_GRAIN && (planes) > 1 ? cpu_threads() : 1;    \
        _Pragma("omp parallel for num_threads(threads_) if(threads_ > 1) schedule(static)") \
        for (int64_t plane = 0; plane < (planes); plane++)                                  \
            body;                                                                           \
    } while (0)

static int cpu_pool2d(const fl_backend *self, fl_tensor *y, const fl_tensor *x, const fl_pool2d_desc *d)
{
    int rc = cpu_alloc(y);
    if (rc || y->numel == 0)
        return rc;
    if (y->dtype != FL_F32 && y->dtype != FL_F64)
        return fl_backend_error(FL_ERR_DTYPE, "pool2d has no %s kernel", fl_dtype_name(y->dtype));
    void *scratch;
    const void *xd = cpu_dense(x, &scratch);
    if (!xd)
        return fl_backend_error(FL_ERR_MEMORY, "no memory for a dense copy of x");
    plane_geometry g = {x->shape[2], x->shape[3], y->shape[2], y->shape[3], *d};
    int64_t planes = x->shape[0] * x->shape[1], in_plane = g.H * g.W, out_plane = g.P * g.Q;
    bool fast = is_max2x2(&g);
    if (y->dtype == FL_F32) {
        const float *in = xd;
        float *out = cpu_data(y);
        FOR_EACH_PLANE(planes, x->numel, {
            if (fast)
                max2x2_plane_float(in + plane * in_plane, out + plane * out_plane, &g);
            else
                pool_plane_float(in + plane * in_plane, out + plane * out_plane, &g);
        });
    } else {
        const double *in = xd;
        double *out = cpu_data(y);
        FOR_EACH_PLANE(planes, x->numel, {
            if (fast)
                max2x2_plane_double(in + plane * in_plane, out + plane * out_plane, &g);
            else
                pool_plane_double(in + plane * in_plane, out + plane * out_plane, &g);
        });
    }
    cpu_scratch_free(scratch);
    return 0;
}

static int cpu_pool2d_backward(const fl_backend *self, fl_tensor *dx, const fl_tensor *dy, const fl_tensor *x, const fl_pool2d_desc *d)
{
    int rc = cpu_alloc(dx);
    if (rc || dx->numel == 0)
        return rc;
    if (dx->dtype != FL_F32 && dx->dtype != FL_F64)
        return fl_backend_error(FL_ERR_DTYPE, "pool2d_backward has no %s kernel", fl_dtype_name(dx->dtype));
    void *scratch_dy, *scratch_x = NULL;
    const void *dyd = cpu_dense(dy, &scratch_dy), *xd = dyd ? cpu_dense(x, &scratch_x) : NULL;
    if (!xd) {
        cpu_scratch_free(scratch_dy);
        return fl_backend_error(FL_ERR_MEMORY, "no memory for a dense copy of an operand");
    }
    plane_geometry g = {x->shape[2], x->shape[3], dy->shape[2], dy->shape[3], *d};
    int64_t planes = x->shape[0] * x->shape[1], in_plane = g.H * g.W, out_plane = g.P * g.Q;
    size_t element = cpu_element_size(dx->dtype);
    char *out = cpu_data(dx);
    bool fast = is_max2x2(&g);
    /* Each thread zeroes the planes it then fills, while they are in its cache. */
    if (dx->dtype == FL_F32) {
        const float *gy = dyd, *in = xd;
        FOR_EACH_PLANE(planes, x->numel, {
            float *plane_dx = (float *)out + plane * in_plane;
            if (fast) {
                max2x2_backward_plane_float(gy + plane * out_plane, in + plane * in_plane, plane_dx, &g);
                continue;
            }
            memset(plane_dx, 0, (size_t)in_plane * element);
            pool_backward_plane_float(gy + plane * out_plane, in + plane * in_plane, plane_dx, &g);
        });
    } else {
        const double *gy = dyd, *in = xd;
        FOR_EACH_PLANE(planes, x->numel, {
            double *plane_dx = (double *)out + plane * in_plane;
            if (fast) {
                max2x2_backward_plane_double(gy + plane * out_plane, in + plane * in_plane, plane_dx, &g);
                continue;
            }
            memset(plane_dx, 0, (size_t)in_plane * element);
            pool_backward_plane_double(gy + plane * out_plane, in + plane * in_plane, plane_dx, &g);
        });
    }
    cpu_scratch_free(scratch_dy);
    cpu_scratch_free(scratch_x);
    return 0;
}

void cpu_register_pool(fl_backend *b)
{
    b->pool2d = cpu_pool2d;
    b->pool2d_backward = cpu_pool2d_backward;
}
