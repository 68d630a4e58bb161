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

static int cpu_random(fl_tensor *out, fl_random_kind kind, uint64_t seed, uint64_t offset)
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
