/*
 * The CPU backend's fills and casts: full, and cast between every pair of dtypes.
 * A kernel family like the others (cpu.h, CPU_FAMILIES): these loops stream memory
 * and the compiler vectorizes them, so they are built per instruction set.
 */
#include <omp.h>
#include <string.h>

#include "cpu.h"

#define FILL(type, v)                                                                   \
    do {                                                                                \
        type *p = cpu_data(out), x = (v);                                               \
        _Pragma("omp parallel for simd num_threads(threads) if(threads > 1) schedule(static)") \
        for (int64_t i = 0; i < n; i++)                                                 \
            p[i] = x;                                                                   \
    } while (0)

static int cpu_full(const fl_backend *self, fl_tensor *out, double value)
{
    int rc = cpu_alloc(out);
    if (rc)
        return rc;
    int64_t n = out->numel;
    int threads = n >= CPU_PARALLEL_GRAIN ? cpu_threads() : 1;
    switch (out->dtype) {
    case FL_BOOL: FILL(_Bool, value != 0); break;
    case FL_U8: FILL(uint8_t, (uint8_t)value); break;
    case FL_I32: FILL(int32_t, (int32_t)value); break;
    case FL_I64: FILL(int64_t, (int64_t)value); break;
    case FL_F16: FILL(uint16_t, fl_float_to_half((float)value)); break;
    case FL_BF16: FILL(uint16_t, fl_float_to_bf16((float)value)); break;
    case FL_F32: FILL(float, (float)value); break;
    case FL_F64: FILL(double, value); break;
    default: return fl_backend_error(FL_ERR_DTYPE, "cannot fill dtype %d", out->dtype);
    }
    return 0;
}

/* ---- casts: a typed loop for every pair of the six native dtypes; the 16-bit
 * floats go through f32 ---- */

#define CONVERT_LOOP(dst_type, src_type)                                                 \
    do {                                                                                 \
        dst_type *d = dst;                                                               \
        const src_type *s = src;                                                         \
        _Pragma("omp parallel for simd num_threads(threads) if(threads > 1) schedule(static)") \
        for (int64_t i = 0; i < n; i++)                                                  \
            d[i] = (dst_type)s[i];                                                       \
    } while (0)

#define CONVERT_FROM(src_type)                                  \
    switch (dst_dtype) {                                        \
    case FL_BOOL: CONVERT_LOOP(_Bool, src_type); break;         \
    case FL_U8: CONVERT_LOOP(uint8_t, src_type); break;         \
    case FL_I32: CONVERT_LOOP(int32_t, src_type); break;        \
    case FL_I64: CONVERT_LOOP(int64_t, src_type); break;        \
    case FL_F32: CONVERT_LOOP(float, src_type); break;          \
    case FL_F64: CONVERT_LOOP(double, src_type); break;         \
    default: break;                                             \
    }

static void convert_native(void *dst, fl_dtype dst_dtype, const void *src, fl_dtype src_dtype, int64_t n)
{
    int threads = n >= CPU_PARALLEL_GRAIN ? cpu_threads() : 1;
    switch (src_dtype) {
    case FL_BOOL: CONVERT_FROM(_Bool); break;
    case FL_U8: CONVERT_FROM(uint8_t); break;
    case FL_I32: CONVERT_FROM(int32_t); break;
    case FL_I64: CONVERT_FROM(int64_t); break;
    case FL_F32: CONVERT_FROM(float); break;
    case FL_F64: CONVERT_FROM(double); break;
    default: break;
    }
}

static void half_to_f32(float *d, const uint16_t *s, int64_t n, bool brain)
{
    int threads = n >= CPU_PARALLEL_GRAIN ? cpu_threads() : 1;
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
    for (int64_t i = 0; i < n; i++)
        d[i] = brain ? fl_bf16_to_float(s[i]) : fl_half_to_float(s[i]);
}

static void f32_to_half(uint16_t *d, const float *s, int64_t n, bool brain)
{
    int threads = n >= CPU_PARALLEL_GRAIN ? cpu_threads() : 1;
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
    for (int64_t i = 0; i < n; i++)
        d[i] = brain ? fl_float_to_bf16(s[i]) : fl_float_to_half(s[i]);
}

static bool is_half(fl_dtype d) { return d == FL_F16 || d == FL_BF16; }

static int cpu_cast(const fl_backend *self, fl_tensor *out, const fl_tensor *a)
{
    int rc = cpu_alloc(out);
    if (rc)
        return rc;
    int64_t n = a->numel;
    if (n == 0)
        return 0;
    if (a->dtype == out->dtype) {
        cpu_copy_to_dense(cpu_data(out), a);
        return 0;
    }
    void *scratch, *staged = NULL;
    const void *src = cpu_dense(a, &scratch);
    if (!src)
        return fl_backend_error(FL_ERR_MEMORY, "no memory for a dense copy");
    fl_dtype src_dtype = a->dtype;
    if (is_half(src_dtype)) {
        staged = cpu_scratch_alloc((size_t)n * sizeof(float));
        if (!staged) {
            cpu_scratch_free(scratch);
            return fl_backend_error(FL_ERR_MEMORY, "no memory for a cast");
        }
        half_to_f32(staged, src, n, src_dtype == FL_BF16);
        src = staged;
        src_dtype = FL_F32;
    }
    if (is_half(out->dtype)) {
        const float *f = src;
        float *tmp = NULL;
        if (src_dtype != FL_F32) {
            f = tmp = cpu_scratch_alloc((size_t)n * sizeof(float));
            if (tmp)
                convert_native(tmp, FL_F32, src, src_dtype, n);
        }
        if (f)
            f32_to_half(cpu_data(out), f, n, out->dtype == FL_BF16);
        else
            rc = fl_backend_error(FL_ERR_MEMORY, "no memory for a cast");
        cpu_scratch_free(tmp);
    } else if (src_dtype == out->dtype) {
        memcpy(cpu_data(out), src, (size_t)n * cpu_element_size(out->dtype));
    } else {
        convert_native(cpu_data(out), out->dtype, src, src_dtype, n);
    }
    cpu_scratch_free(staged);
    cpu_scratch_free(scratch);
    return rc;
}

void cpu_register_convert(fl_backend *b)
{
    b->full = cpu_full;
    b->cast = cpu_cast;
}
