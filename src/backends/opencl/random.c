/*
 * Random numbers: Philox-4x32-10 (Salmon et al., SC'11) keyed by the seed, element i
 * from lane i % 4 of the block at counter offset + i / 4, one work item per block.
 * The values are the cpu backend's (cpu/random.c) bit for bit where the arithmetic
 * is exact (every uniform draw); normals use its Box-Muller formulas in double, so
 * they differ from it only where the device's log, cos and sin round differently
 * from the host's libm. A device without doubles computes normals in float, to
 * within a few float ulps of the angle's rounding.
 */
#include <stdio.h>

#include "opencl.h"

/* SINGLE: f32 output. T: the output type. R: the type normals compute in (double
 * where the device has it, as the cpu backend computes them). */
static const char random_source[] =
    "#ifdef cl_khr_fp64\n"
    "typedef double R;\n"
    "#define TWO_PI (2 * M_PI)\n"
    "#define EXP2_M32 0x1p-32\n"
    "#else\n"
    "typedef float R;\n"
    "#define TWO_PI (2 * M_PI_F)\n"
    "#define EXP2_M32 0x1p-32f\n"
    "#endif\n"
    "__kernel void philox_random(long n, __global T *y, long yo, ulong seed, ulong offset, int normal)\n"
    "{\n"
    "    long k = get_global_id(0);\n"
    "    if (k >= (n + 3) / 4) return;\n"
    "    ulong counter = offset + (ulong)k;\n"
    "    uint c0 = (uint)counter, c1 = (uint)(counter >> 32), c2 = 0, c3 = 0;\n"
    "    uint k0 = (uint)seed, k1 = (uint)(seed >> 32);\n"
    "    for (int round = 0; round < 10; round++) {\n"
    "        uint h0 = mul_hi(0xD2511F53u, c0), l0 = 0xD2511F53u * c0;\n"
    "        uint h1 = mul_hi(0xCD9E8D57u, c2), l1 = 0xCD9E8D57u * c2;\n"
    "        c0 = h1 ^ c1 ^ k0;\n"
    "        c2 = h0 ^ c3 ^ k1;\n"
    "        c1 = l1;\n"
    "        c3 = l0;\n"
    "        k0 += 0x9E3779B9u;\n"
    "        k1 += 0xBB67AE85u;\n"
    "    }\n"
    "    uint lane[4] = {c0, c1, c2, c3};\n"
    "    T v[4];\n"
    "    if (!normal) {\n"
    /* [0, 1) with 24 (f32) or 32 (f64) random bits: exact in either type */
    "        for (int j = 0; j < 4; j++)\n"
    "#if SINGLE\n"
    "            v[j] = (float)(lane[j] >> 8) * 0x1p-24f;\n"
    "#else\n"
    "            v[j] = (double)lane[j] * 0x1p-32;\n"
    "#endif\n"
    "    } else {\n"
    "        for (int j = 0; j < 4; j += 2) {\n"
    "            R u2 = (R)lane[j + 1] * EXP2_M32;\n"
    "#ifdef cl_khr_fp64\n"
    "            R u1 = ((R)lane[j] + 1) * EXP2_M32; /* (0, 1]: log is finite */\n"
    "            R r = sqrt(-2 * log(u1));\n"
    "#else\n"
    /* u1 = (lane + 1) 2^-32 rounds to 1 in float near 1: there log(u1) is
     * log1p(-(2^32 - 1 - lane) 2^-32), whose argument float holds */
    "            R l = lane[j] < 0x80000000u ? log(((R)lane[j] + 1) * EXP2_M32) : log1p(-(R)(~lane[j]) * EXP2_M32);\n"
    "            R r = sqrt(-2 * l);\n"
    "#endif\n"
    "            v[j] = (T)(r * cos(TWO_PI * u2));\n"
    "            v[j + 1] = (T)(r * sin(TWO_PI * u2));\n"
    "        }\n"
    "    }\n"
    "    for (int j = 0; j < 4 && 4 * k + j < n; j++)\n"
    "        y[yo + 4 * k + j] = v[j];\n"
    "}\n";

static int ocl_random(const fl_backend *self, fl_tensor *out, fl_random_kind kind, uint64_t seed, uint64_t offset)
{
    (void)self;
    if (out->dtype != FL_F32 && out->dtype != FL_F64)
        return fl_backend_error(FL_ERR_DTYPE, "random values are f32 or f64, not %s", fl_dtype_name(out->dtype));
    ocl_device *dev = ocl_device_get();
    if (!dev)
        return FL_ERR_BACKEND;
    if (out->dtype == FL_F64 && !dev->fp64)
        return fl_backend_error(FL_ERR_DTYPE, "random: the OpenCL device %s has no double precision", dev->name);
    int rc = ocl_alloc(out);
    if (rc)
        return rc;
    const char *body = out->dtype == FL_F32 ? "#define SINGLE 1\n" : "#define SINGLE 0\n";
    char source[sizeof random_source + 32];
    snprintf(source, sizeof source, "%s%s", body, random_source);
    cl_kernel k = ocl_kernel_for(source, "philox_random", out->dtype);
    if (!k)
        return FL_ERR_BACKEND;
    const ocl_tensor *o = ocl_impl(out);
    cl_long n = out->numel, yo = ocl_element_offset(out);
    cl_ulong key = seed, counter = offset;
    cl_int normal = kind == FL_RANDOM_NORMAL;
    ocl_arg args[] = {OCL_VALUE(n), OCL_MEM(o->buffer), OCL_VALUE(yo), OCL_VALUE(key), OCL_VALUE(counter),
                      OCL_VALUE(normal)};
    return ocl_launch("random", k, (size_t)((n + 3) / 4), 6, args);
}

void ocl_register_random(fl_backend *b) { b->random = ocl_random; }
