/* Philox-4x32-10 (Salmon et al., SC'11): a counter-based generator, so element i of a
 * draw depends only on (seed, offset + i / 4, i % 4) and never on the thread count. */
#include <math.h>

#include "cpu.h"

typedef struct philox_block {
    uint32_t lane[4];
} philox_block;

static inline philox_block philox(uint64_t counter, uint64_t seed)
{
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return (philox_block){{c0, c1, c2, c3}};
}

/* [0, 1) with 24 (f32) or 32 (f64) random bits. */
static inline double unit(uint32_t x, bool single) { return single ? (double)(x >> 8) * 0x1p-24 : x * 0x1p-32; }

static void draw_block(philox_block b, fl_random_kind kind, bool single, double out[4])
{
    if (kind == FL_RANDOM_UNIFORM) {
        for (int j = 0; j < 4; j++)
            out[j] = unit(b.lane[j], single);
        return;
    }
    for (int j = 0; j < 4; j += 2) {
        double u1 = ((double)b.lane[j] + 1.0) * 0x1p-32; /* (0, 1]: log is finite */
        double u2 = b.lane[j + 1] * 0x1p-32;
        double r = sqrt(-2.0 * log(u1));
        out[j] = r * cos(2 * M_PI * u2);
        out[j + 1] = r * sin(2 * M_PI * u2);
    }
}

/* Uniform f32 values, the bulk of a training step's draws (dropout), BATCH blocks at
 * a time, each value the same as philox and unit give it above. With AVX-512 the
 * rounds run on 16 counters at once (the compiler does not vectorize the 32 x 32-bit
 * products' high halves by itself); elsewhere, one block after another. */
#define BATCH 16

#if defined(__AVX512F__)
#include <immintrin.h>

/* The high and low halves of the 16 products a * m. */
static inline void multiply_halves(__m512i a, __m512i m, __m512i *hi, __m512i *lo)
{
    __m512i even = _mm512_mul_epu32(a, m), odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
    *lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
    *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
}

/* unit(x, true) on 16 lanes */
static inline __m512 unit_f32(__m512i x)
{
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(x, 8)), _mm512_set1_ps(0x1p-24f));
}

static void uniform_f32_batch(uint64_t counter, uint64_t seed, float *out)
{
    const __m512i j = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512i c0 = _mm512_add_epi32(_mm512_set1_epi32((int)(uint32_t)counter), j);
    __mmask16 carried = _mm512_cmplt_epu32_mask(c0, j); /* the low word wrapped */
    __m512i high = _mm512_set1_epi32((int)(uint32_t)(counter >> 32));
    __m512i c1 = _mm512_mask_add_epi32(high, carried, high, _mm512_set1_epi32(1));
    __m512i c2 = _mm512_setzero_si512(), c3 = _mm512_setzero_si512();
    const __m512i m0 = _mm512_set1_epi32((int)0xD2511F53u), m1 = _mm512_set1_epi32((int)0xCD9E8D57u);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        __m512i hi0, lo0, hi1, lo1;
        multiply_halves(c0, m0, &hi0, &lo0);
        multiply_halves(c2, m1, &hi1, &lo1);
        c0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32((int)k0));
        c2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32((int)k1));
        c1 = lo1;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    /* Lane l of block b goes to out[4 b + l]: transpose the four lane vectors. In each
     * 128-bit quarter q, r[i] holds block 4 q + i. */
    __m512 v0 = unit_f32(c0), v1 = unit_f32(c1), v2 = unit_f32(c2), v3 = unit_f32(c3);
    __m512 a = _mm512_unpacklo_ps(v0, v1), b = _mm512_unpacklo_ps(v2, v3);
    __m512 c = _mm512_unpackhi_ps(v0, v1), d = _mm512_unpackhi_ps(v2, v3);
    __m512 r0 = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
    __m512 r1 = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
    __m512 r2 = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(c), _mm512_castps_pd(d)));
    __m512 r3 = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(c), _mm512_castps_pd(d)));
    __m512 t0 = _mm512_shuffle_f32x4(r0, r1, _MM_SHUFFLE(1, 0, 1, 0));
    __m512 t1 = _mm512_shuffle_f32x4(r2, r3, _MM_SHUFFLE(1, 0, 1, 0));
    __m512 t2 = _mm512_shuffle_f32x4(r0, r1, _MM_SHUFFLE(3, 2, 3, 2));
    __m512 t3 = _mm512_shuffle_f32x4(r2, r3, _MM_SHUFFLE(3, 2, 3, 2));
    _mm512_storeu_ps(out, _mm512_shuffle_f32x4(t0, t1, _MM_SHUFFLE(2, 0, 2, 0)));
    _mm512_storeu_ps(out + 16, _mm512_shuffle_f32x4(t0, t1, _MM_SHUFFLE(3, 1, 3, 1)));
    _mm512_storeu_ps(out + 32, _mm512_shuffle_f32x4(t2, t3, _MM_SHUFFLE(2, 0, 2, 0)));
    _mm512_storeu_ps(out + 48, _mm512_shuffle_f32x4(t2, t3, _MM_SHUFFLE(3, 1, 3, 1)));
}
#endif

/* n uniform f32 values, one block at a time from counter on. */
static void uniform_f32_blocks(uint64_t counter, uint64_t seed, float *out, int64_t n)
{
    for (int64_t i = 0; i < n; i += 4) {
        philox_block b = philox(counter + (uint64_t)(i / 4), seed);
        for (int l = 0; l < 4 && i + l < n; l++)
            out[i + l] = (float)unit(b.lane[l], true);
    }
}

#if !defined(__AVX512F__)
static void uniform_f32_batch(uint64_t counter, uint64_t seed, float *out)
{
    uniform_f32_blocks(counter, seed, out, 4 * BATCH);
}
#endif

static void uniform_f32(float *out, int64_t n, uint64_t seed, uint64_t offset, int threads)
{
    int64_t batches = n / (4 * BATCH), done = batches * 4 * BATCH;
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
    for (int64_t b = 0; b < batches; b++)
        uniform_f32_batch(offset + (uint64_t)(b * BATCH), seed, out + b * 4 * BATCH);
    uniform_f32_blocks(offset + (uint64_t)(done / 4), seed, out + done, n - done); /* a partial batch */
}

static int cpu_random(const fl_backend *self, fl_tensor *out, fl_random_kind kind, uint64_t seed, uint64_t offset)
{
    int rc = cpu_alloc(out);
    if (rc)
        return rc;
    if (out->dtype != FL_F32 && out->dtype != FL_F64)
        return fl_backend_error(FL_ERR_DTYPE, "random values are f32 or f64");
    bool single = out->dtype == FL_F32;
    int64_t n = out->numel, blocks = (n + 3) / 4;
    int threads = n >= CPU_PARALLEL_GRAIN / 8 ? cpu_threads() : 1;
    float *f = cpu_data(out);
    double *d = cpu_data(out);
    if (single && kind == FL_RANDOM_UNIFORM) {
        uniform_f32(f, n, seed, offset, threads);
        return 0;
    }
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
    for (int64_t k = 0; k < blocks; k++) {
        double v[4];
        draw_block(philox(offset + (uint64_t)k, seed), kind, single, v);
        for (int j = 0; j < 4 && 4 * k + j < n; j++) {
            if (single)
                f[4 * k + j] = (float)v[j];
            else
                d[4 * k + j] = v[j];
        }
    }
    return 0;
}

void cpu_register_random(fl_backend *b) { b->random = cpu_random; }
