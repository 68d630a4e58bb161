/*
 * The OpenCL backend's sort: every line along one axis sorted, stably, on the device.
 *
 * Values of every dtype become unsigned 64-bit keys whose order is the values' order,
 * as on the cpu backend (cpu/sort.c): NaN above +inf, -0.0 equal to 0.0, and a
 * descending sort complements the keys, so NaN comes first and equal values keep
 * their order either way. Keys are computed from the bits, so f64 sorts on a device
 * without double arithmetic.
 *
 * A line is cut into blocks of a work-group's size; each block is sorted in local
 * memory by counting, for every element, the elements before it in (key, position)
 * order, which is a total order and so stable. Sorted runs are then merged in pairs,
 * one pass per doubling of their length: every element finds its place in the
 * merged run by a binary search in the other run (counting strictly smaller keys
 * from the left run, smaller or equal from the right: ties keep the left first).
 * Each pass is one launch over all elements of all lines. A line that fits in one
 * block is written out by the block kernel itself.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opencl.h"

/* The longest block, a work-group's size (fewer where the device takes fewer). */
#define BLOCK_MAX 256
#define TEXT(x) #x
#define TEXT_OF(x) TEXT(x)

/* The keys of each dtype, from T, an unsigned or signed integer of the element's size. */
static const char *key_source(fl_dtype dtype)
{
    switch (dtype) {
    case FL_BOOL:
    case FL_U8: return "static ulong kg_key(T b) { return (ulong)b; }\n";
    case FL_I32: return "static ulong kg_key(T b) { return (ulong)(long)b ^ 0x8000000000000000UL; }\n";
    case FL_I64: return "static ulong kg_key(T b) { return (ulong)b ^ 0x8000000000000000UL; }\n";
    case FL_F32:
        return "static ulong kg_key(T b)\n"
               "{\n"
               "    uint u = (uint)b;\n"
               "    if ((u & 0x7fffffffu) > 0x7f800000u) return ULONG_MAX; /* NaN */\n"
               "    if ((u & 0x7fffffffu) == 0) u = 0; /* -0.0 sorts with 0.0 */\n"
               "    return (ulong)(u & 0x80000000u ? ~u : u | 0x80000000u);\n"
               "}\n";
    case FL_F64:
        return "static ulong kg_key(T b)\n"
               "{\n"
               "    ulong u = (ulong)b;\n"
               "    if ((u & 0x7fffffffffffffffUL) > 0x7ff0000000000000UL) return ULONG_MAX;\n"
               "    if ((u & 0x7fffffffffffffffUL) == 0) u = 0;\n"
               "    return u & 0x8000000000000000UL ? ~u : u | 0x8000000000000000UL;\n"
               "}\n";
    default: return NULL;
    }
}

/* Lines are [outer, length, inner] of a dense input; line g is (g / inner, g % inner),
 * its element j at (o * length + j) * inner + i. Scratch keys and positions are
 * line-major: line * length + j. */
static const char sort_kernels[] =
    "#define AT(line, j) (((line) / inner * length + (j)) * inner + (line) % inner)\n"
    "__kernel void sort_block(long lines, long length, long inner, long blocks, __global const T *x, long xo,\n"
    "                         ulong flip, int final, __global ulong *keys, long ko, __global long *at, long po,\n"
    "                         __global T *values, long vo, __global long *indices, long io)\n"
    "{\n"
    "    __local ulong block_keys[" TEXT_OF(BLOCK_MAX) "];\n"
    "    long group = get_group_id(0);\n"
    "    int lane = get_local_id(0), size = get_local_size(0);\n"
    "    long line = group / blocks, start = group % blocks * size, j = start + lane;\n"
    "    bool live = line < lines && j < length;\n"
    "    ulong key = live ? kg_key(x[xo + AT(line, j)]) ^ flip : 0;\n"
    "    block_keys[lane] = key;\n"
    "    barrier(CLK_LOCAL_MEM_FENCE);\n"
    "    if (!live) return;\n"
    "    long count = length - start < size ? length - start : size;\n"
    "    long rank = 0;\n"
    "    for (int t = 0; t < count; t++) {\n"
    "        ulong other = block_keys[t];\n"
    "        rank += other < key || (other == key && t < lane);\n"
    "    }\n"
    "    if (final) {\n"
    "        values[vo + AT(line, start + rank)] = x[xo + AT(line, j)];\n"
    "        indices[io + AT(line, start + rank)] = j;\n"
    "    } else {\n"
    "        keys[ko + line * length + start + rank] = key;\n"
    "        at[po + line * length + start + rank] = j;\n"
    "    }\n"
    "}\n"
    "__kernel void sort_merge(long lines, long length, long width, __global const ulong *keys, long ko,\n"
    "                         __global const long *at, long po, __global ulong *merged, long mo,\n"
    "                         __global long *moved, long qo)\n"
    "{\n"
    "    long g = get_global_id(0);\n"
    "    if (g >= lines * length) return;\n"
    "    long line = g / length, j = g % length;\n"
    "    __global const ulong *k = keys + ko + line * length;\n"
    "    ulong key = k[j];\n"
    "    long left = j / (2 * width) * (2 * width);\n"
    "    long mid = left + width < length ? left + width : length;\n"
    "    long right = left + 2 * width < length ? left + 2 * width : length;\n"
    "    long lo, hi, place;\n"
    "    if (j < mid) {\n"
    "        for (lo = mid, hi = right; lo < hi;) {\n"
    "            long m = (lo + hi) / 2;\n"
    "            if (k[m] < key) lo = m + 1; else hi = m;\n"
    "        }\n"
    "        place = j + (lo - mid);\n"
    "    } else {\n"
    "        for (lo = left, hi = mid; lo < hi;) {\n"
    "            long m = (lo + hi) / 2;\n"
    "            if (k[m] <= key) lo = m + 1; else hi = m;\n"
    "        }\n"
    "        place = left + (j - mid) + (lo - left);\n"
    "    }\n"
    "    merged[mo + line * length + place] = key;\n"
    "    moved[qo + line * length + place] = at[po + line * length + j];\n"
    "}\n"
    "__kernel void sort_write(long lines, long length, long inner, __global const T *x, long xo,\n"
    "                         __global const long *at, long po, __global T *values, long vo,\n"
    "                         __global long *indices, long io)\n"
    "{\n"
    "    long g = get_global_id(0);\n"
    "    if (g >= lines * length) return;\n"
    "    long line = g / length, j = g % length;\n"
    "    long from = at[po + g];\n"
    "    values[vo + AT(line, j)] = x[xo + AT(line, from)];\n"
    "    indices[io + AT(line, j)] = from;\n"
    "}\n";

/* The integer dtype of T for dtype: the elements are moved and keyed as their bits. */
static fl_dtype bits_dtype(fl_dtype dtype)
{
    return dtype == FL_F32 ? FL_I32 : dtype == FL_F64 ? FL_I64 : dtype;
}

int ocl_sort(const fl_backend *self, fl_tensor *values, fl_tensor *indices, const fl_tensor *a, int axis,
             bool descending)
{
    (void)self;
    if (values->dtype != a->dtype || indices->dtype != FL_I64)
        return fl_backend_error(FL_ERR_DTYPE, "sort gives %s values and i64 indices, not %s and %s",
                                fl_dtype_name(a->dtype), fl_dtype_name(values->dtype), fl_dtype_name(indices->dtype));
    const char *key = key_source(a->dtype);
    if (!key)
        return fl_backend_error(FL_ERR_DTYPE, "sort has no %s kernel", fl_dtype_name(a->dtype));
    size_t size = strlen(key) + sizeof sort_kernels;
    char *body = malloc(size);
    if (!body)
        return fl_backend_error(FL_ERR_MEMORY, "out of host memory for a kernel's source");
    snprintf(body, size, "%s%s", key, sort_kernels);
    fl_dtype bits = bits_dtype(a->dtype);
    cl_kernel block = ocl_kernel_for(body, "sort_block", bits);
    cl_kernel merge = block ? ocl_kernel_for(body, "sort_merge", bits) : NULL;
    cl_kernel write = merge ? ocl_kernel_for(body, "sort_write", bits) : NULL;
    free(body);
    if (!write)
        return FL_ERR_BACKEND;
    int rc = ocl_alloc(values);
    if (rc || (rc = ocl_alloc(indices)) || a->numel == 0)
        return rc;
    fl_tensor *x = ocl_contiguous(a);
    if (!x)
        return FL_ERR_BACKEND;
    cl_long length = a->ndim ? a->shape[axis] : 1, inner = 1;
    for (int i = axis + 1; i < a->ndim; i++)
        inner *= a->shape[i];
    cl_long lines = a->numel / length;
    size_t group = 1;
    while (group < BLOCK_MAX && (cl_long)group < length && group * 2 <= ocl_device_get()->local_size)
        group *= 2;
    cl_long blocks = (length + (cl_long)group - 1) / (cl_long)group;
    cl_int final = blocks == 1;
    cl_ulong flip = descending ? ~(cl_ulong)0 : 0;
    cl_long xo = ocl_element_offset(x), vo = ocl_element_offset(values), io = ocl_element_offset(indices);
    const ocl_tensor *xt = ocl_impl(x), *vt = ocl_impl(values), *it = ocl_impl(indices);
    /* Scratch: keys and positions, twice, for the merge passes to move between. */
    size_t n = (size_t)a->numel;
    ocl_buffer *keys[2] = {NULL, NULL}, *at[2] = {NULL, NULL};
    for (int s = 0; s < 2 && !final; s++)
        if (!(keys[s] = ocl_buffer_new(n * 8)) || !(at[s] = ocl_buffer_new(n * 8))) {
            rc = FL_ERR_MEMORY;
            break;
        }
    ocl_buffer *kb = final ? vt->buffer : keys[0], *pb = final ? it->buffer : at[0]; /* unused when final */
    cl_long ko = final ? 0 : (cl_long)(kb ? kb->offset / 8 : 0), po = final ? 0 : (cl_long)(pb ? pb->offset / 8 : 0);
    if (!rc) {
        ocl_arg args[] = {OCL_VALUE(lines), OCL_VALUE(length), OCL_VALUE(inner), OCL_VALUE(blocks),
                          OCL_MEM(xt->buffer), OCL_VALUE(xo), OCL_VALUE(flip), OCL_VALUE(final),
                          OCL_MEM(kb), OCL_VALUE(ko), OCL_MEM(pb), OCL_VALUE(po),
                          OCL_MEM(vt->buffer), OCL_VALUE(vo), OCL_MEM(it->buffer), OCL_VALUE(io)};
        size_t global = (size_t)(lines * blocks) * group;
        rc = ocl_launch_nd("sort", block, 1, &global, &group, 16, args);
    }
    int from = 0;
    for (cl_long width = (cl_long)group; !rc && !final && width < length; width *= 2, from ^= 1) {
        cl_long ki = (cl_long)(keys[from]->offset / 8), pi = (cl_long)(at[from]->offset / 8);
        cl_long kt = (cl_long)(keys[from ^ 1]->offset / 8), pt = (cl_long)(at[from ^ 1]->offset / 8);
        ocl_arg args[] = {OCL_VALUE(lines), OCL_VALUE(length), OCL_VALUE(width),
                          OCL_MEM(keys[from]), OCL_VALUE(ki), OCL_MEM(at[from]), OCL_VALUE(pi),
                          OCL_MEM(keys[from ^ 1]), OCL_VALUE(kt), OCL_MEM(at[from ^ 1]), OCL_VALUE(pt)};
        rc = ocl_launch("sort", merge, n, 11, args);
    }
    if (!rc && !final) {
        cl_long pi = (cl_long)(at[from]->offset / 8);
        ocl_arg args[] = {OCL_VALUE(lines), OCL_VALUE(length), OCL_VALUE(inner), OCL_MEM(xt->buffer), OCL_VALUE(xo),
                          OCL_MEM(at[from]), OCL_VALUE(pi), OCL_MEM(vt->buffer), OCL_VALUE(vo),
                          OCL_MEM(it->buffer), OCL_VALUE(io)};
        rc = ocl_launch("sort", write, n, 11, args);
    }
    /* The queue is in order: the scratch may go back to the pool before the kernels run. */
    for (int s = 0; s < 2; s++) {
        ocl_buffer_release(keys[s]);
        ocl_buffer_release(at[s]);
    }
    fl_release(x);
    return rc;
}
