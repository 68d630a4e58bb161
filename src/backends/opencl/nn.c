/*
 * The fused kernels of the backend contract (flare/backend.h, "Fused kernels"):
 * softmax, batch norm forward and backward, GELU, the LSTM cell and recurrence. Their semantics are the cpu
 * backend's (cpu/softmax.c, batchnorm.c, gelu.c), and they compute with its formulas:
 * f32 kernels carry the cpu backend's vecmath.h and gelu.h, as generated kernels do.
 *
 * Reductions over a row or a channel run one work-group per row or channel, each
 * work item striding over it and the group combining its partial results in local
 * memory; the elementwise passes after them read the per-row or per-channel results
 * from device memory. Nothing waits for the device.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opencl.h"

/* Built into the library by CMakeLists.txt, as kernelgen.c reads them: the cpu
 * backend's vecmath.h and gelu.h as text, their includes removed. */
extern const char kernelgen_vecmath_text[], kernelgen_gelu_text[];

/* What an nn kernel's text is made from: its parts (static text, compared by address),
 * the dtype and the work-group size. */
typedef struct nn_source {
    const char *head, *body; /* head: the group reduction, or NULL */
    fl_dtype dtype;
    int local;
} nn_source;

/* After what a generated kernel of that type has (the dialect's prelude; for f32 the
 * cpu backend's vector math, for f64 vm_* as the built-ins; gelu.h), "#define T",
 * "#define SINGLE" (1 for f32) and "#define LOCAL local" (the work-group size of the
 * reducing kernels), then head and body. */
_Static_assert(sizeof(nn_source) == 2 * sizeof(char *) + 2 * sizeof(int), "a key has no padding");

static bool write_nn(char *source, size_t size, const void *arg)
{
    const nn_source *s = arg;
    const kg_dialect *d = &kg_opencl;
    bool single = s->dtype == FL_F32;
    int n = snprintf(source, size, "%s%s%s%s\n#define T %s\n#define SINGLE %d\n#define LOCAL %d\n%s%s", d->prelude,
                     single ? d->f32_math : d->f64_math, single ? kernelgen_vecmath_text : "", kernelgen_gelu_text,
                     kg_type(s->dtype), single, s->local, s->head ? s->head : "", s->body);
    if (n < 0 || (size_t)n >= size) {
        fl_backend_error(FL_ERR_BACKEND, "an nn kernel's source is longer than %zu bytes", size);
        return false;
    }
    return true;
}

static cl_kernel nn_kernel(const char *body, const char *name, fl_dtype dtype, int local)
{
    nn_source key = {NULL, body, dtype, local};
    return ocl_kernel_keyed(&key, sizeof key, name, write_nn, &key);
}

/* Refuses dtypes other than f32 and f64, and f64 on a device without doubles. */
static int check_float(const char *operation, fl_dtype dtype)
{
    if (dtype != FL_F32 && dtype != FL_F64)
        return fl_backend_error(FL_ERR_DTYPE, "%s takes f32 or f64, not %s", operation, fl_dtype_name(dtype));
    if (dtype == FL_F64) {
        ocl_device *dev = ocl_device_get();
        if (!dev)
            return FL_ERR_BACKEND;
        if (!dev->fp64)
            return fl_backend_error(FL_ERR_DTYPE, "%s: the OpenCL device %s has no double precision", operation,
                                    dev->name);
    }
    return 0;
}

/* The work-group size of a reduction over rows of n: a power of two that covers n,
 * from 16 (fewer idle work items than that cost nothing) to the device's launch size. */
static int group_size(int64_t n)
{
    int most = ocl_group_size(), local = 16;
    while (local < n && local < most)
        local *= 2;
    return local < most ? local : most;
}

/* Releases count tensors, NULL ones skipped. */
static void release_all(int count, fl_tensor **t)
{
    for (int i = 0; i < count; i++)
        if (t[i])
            fl_release(t[i]);
}

/* Contiguous values of count tensors into dense (NULL stays NULL); false after
 * fl_backend_error, with nothing held. */
static bool dense_all(int count, const fl_tensor *const *t, fl_tensor **dense)
{
    for (int i = 0; i < count; i++) {
        dense[i] = t[i] ? ocl_contiguous(t[i]) : NULL;
        if (t[i] && !dense[i]) {
            release_all(i, dense);
            return false;
        }
    }
    return true;
}

/* ---- softmax ---- */

/* The group's combination of each work item's v into part[0], which every work item
 * then reads; part is free again when it returns. */
static const char group_reduce_source[] =
    "#define GROUP_REDUCE(part, lane, v, COMBINE)                                 \\\n"
    "    do {                                                                     \\\n"
    "        part[lane] = v;                                                      \\\n"
    "        barrier(CLK_LOCAL_MEM_FENCE);                                        \\\n"
    "        for (int s_ = LOCAL / 2; s_ > 0; s_ >>= 1) {                         \\\n"
    "            if (lane < s_) { T a_ = part[lane], b_ = part[lane + s_]; part[lane] = COMBINE(a_, b_); } \\\n"
    "            barrier(CLK_LOCAL_MEM_FENCE);                                    \\\n"
    "        }                                                                    \\\n"
    "        v = part[0];                                                         \\\n"
    "        barrier(CLK_LOCAL_MEM_FENCE);                                        \\\n"
    "    } while (0)\n"
    "#define NN_ADD(a, b) ((a) + (b))\n"
    /* NaN never wins the maximum (the cpu backend's row maximum) */
    "#define NN_MAX(a, b) ((b) > (a) ? (b) : (a))\n";

/* One work-group per row of n: the row's maximum, the sum of exp(x - max), then the
 * row written. exp is the cpu backend's: for f32 its exp_nonpositive (vm_expf's
 * polynomial, arguments below -87 flushed to zero), for f64 the built-in. */
static const char softmax_source[] =
    "#if SINGLE\n"
    "static float nn_exp(float x) {\n"
    "    int32_t n;\n"
    "    float p = vm_exp_parts(vm_select(x < -87.0f, -87.0f, x), &n);\n"
    "    return vm_select(x < -87.0f, 0.0f, p * vm_pow2i(n));\n"
    "}\n"
    "#define nn_log vm_logf\n"
    "#else\n"
    "#define nn_exp exp\n"
    "#define nn_log log\n"
    "#endif\n"
    "__kernel __attribute__((reqd_work_group_size(LOCAL, 1, 1)))\n"
    "void softmax(long n, __global const T *a, long ao, __global T *y, long yo, int logarithm)\n"
    "{\n"
    "    __local T part[LOCAL];\n"
    "    long row = get_group_id(0);\n"
    "    int lane = get_local_id(0);\n"
    "    __global const T *x = a + ao + row * n;\n"
    "    __global T *out = y + yo + row * n;\n"
    "    T m = -INFINITY;\n"
    "    for (long j = lane; j < n; j += LOCAL) { T v = x[j]; m = NN_MAX(m, v); }\n"
    "    GROUP_REDUCE(part, lane, m, NN_MAX);\n"
    "    T s = 0;\n"
    "    for (long j = lane; j < n; j += LOCAL) s += nn_exp(x[j] - m);\n"
    "    GROUP_REDUCE(part, lane, s, NN_ADD);\n"
    "    if (logarithm) {\n"
    /* (x - m) - log s, not x - (m + log s), which rounds away small differences */
    "        T log_sum = nn_log(s);\n"
    "        for (long j = lane; j < n; j += LOCAL) out[j] = (x[j] - m) - log_sum;\n"
    "    } else {\n"
    "#if SINGLE\n"
    "        T scale = 1.0f / s;\n"
    "        for (long j = lane; j < n; j += LOCAL) out[j] = nn_exp(x[j] - m) * scale;\n"
    "#else\n"
    "        for (long j = lane; j < n; j += LOCAL) out[j] = nn_exp(x[j] - m) / s;\n"
    "#endif\n"
    "    }\n"
    "}\n";

/* A reducing kernel's body: the group reduction, then body. */
static cl_kernel reducing_kernel(const char *body, const char *name, fl_dtype dtype, int local)
{
    nn_source key = {group_reduce_source, body, dtype, local};
    return ocl_kernel_keyed(&key, sizeof key, name, write_nn, &key);
}

static int ocl_softmax(const fl_backend *self, fl_tensor *out, const fl_tensor *a, bool logarithm)
{
    (void)self;
    int rc = check_float("softmax", a->dtype);
    if (rc)
        return rc;
    fl_tensor *x = ocl_contiguous(a);
    if (!x)
        return FL_ERR_BACKEND;
    if ((rc = ocl_alloc(out))) {
        fl_release(x);
        return rc;
    }
    cl_long n = a->ndim ? a->shape[a->ndim - 1] : 1;
    size_t rows = n ? (size_t)(a->numel / n) : 0;
    int local = group_size(n);
    cl_kernel k = reducing_kernel(softmax_source, "softmax", a->dtype, local);
    if (!k) {
        fl_release(x);
        return FL_ERR_BACKEND;
    }
    cl_long xo = ocl_element_offset(x), yo = ocl_element_offset(out);
    cl_int log_flag = logarithm;
    ocl_arg args[] = {OCL_VALUE(n), OCL_MEM(ocl_impl(x)->buffer), OCL_VALUE(xo), OCL_MEM(ocl_impl(out)->buffer),
                      OCL_VALUE(yo), OCL_VALUE(log_flag)};
    size_t global = rows * (size_t)local, group = (size_t)local;
    rc = ocl_launch_nd("softmax", k, 1, &global, &group, 6, args);
    fl_release(x);
    return rc;
}

/* ---- batch norm ----
 * x [N, C, S...] is read as N runs of S values per channel: element (n, c, s) of the
 * dense x is at (n C + c) S + s. */

/* One work-group per channel: the mean, then the biased variance around it (two
 * passes: the sum of squares cancels when the mean is large against the spread). */
static const char bn_stats_source[] =
    "__kernel __attribute__((reqd_work_group_size(LOCAL, 1, 1)))\n"
    "void bn_stats(long n, long c, long s, __global const T *x, long xo, __global T *mean, long mo,\n"
    "              __global T *var, long vo)\n"
    "{\n"
    "    __local T part[LOCAL];\n"
    "    long ch = get_group_id(0), count = n * s;\n"
    "    int lane = get_local_id(0);\n"
    "    __global const T *xc = x + xo + ch * s;\n"
    "    T acc = 0;\n"
    "    for (long j = lane; j < count; j += LOCAL) acc += xc[(j / s) * c * s + j % s];\n"
    "    GROUP_REDUCE(part, lane, acc, NN_ADD);\n"
    "    T mu = acc / (T)count;\n"
    "    T sq = 0;\n"
    "    for (long j = lane; j < count; j += LOCAL) { T d = xc[(j / s) * c * s + j % s] - mu; sq += d * d; }\n"
    "    GROUP_REDUCE(part, lane, sq, NN_ADD);\n"
    "    if (lane == 0) { mean[mo + ch] = mu; var[vo + ch] = sq / (T)count; }\n"
    "}\n";

/* y = x scale + shift, scale = weight / sqrt(var + eps), shift = bias - mean scale;
 * affine bit 0: weight given, bit 1: bias given (else 1 and 0). */
static const char bn_apply_source[] =
    "__kernel void bn_apply(long total, long c, long s, __global const T *x, long xo, __global T *y, long yo,\n"
    "                       __global const T *mean, long mo, __global const T *var, long vo,\n"
    "                       __global const T *w, long wo, __global const T *b, long bo, int affine, T eps)\n"
    "{\n"
    "    long i = get_global_id(0);\n"
    "    if (i >= total) return;\n"
    "    long ch = i / s % c;\n"
    "    T weight = affine & 1 ? w[wo + ch] : (T)1, bias = affine & 2 ? b[bo + ch] : (T)0;\n"
    "    T scale = weight / sqrt(var[vo + ch] + eps), shift = bias - mean[mo + ch] * scale;\n"
    "    y[yo + i] = x[xo + i] * scale + shift;\n"
    "}\n";

/* One work-group per channel: sum dy and sum dy (x - mean) into sums[so + ch] and
 * sums[so + c + ch]; with bit 0 of want dweight = sum dy (x - mean) invstd, with bit 1
 * dbias = sum dy. */
static const char bn_grad_sums_source[] =
    "__kernel __attribute__((reqd_work_group_size(LOCAL, 1, 1)))\n"
    "void bn_grad_sums(long n, long c, long s, __global const T *dy, long dyo, __global const T *x, long xo,\n"
    "                  __global const T *mean, long mo, __global const T *invstd, long io, __global T *sums, long so,\n"
    "                  __global T *dw, long dwo, __global T *db, long dbo, int want)\n"
    "{\n"
    "    __local T part[LOCAL];\n"
    "    long ch = get_group_id(0), count = n * s;\n"
    "    int lane = get_local_id(0);\n"
    "    __global const T *dyc = dy + dyo + ch * s, *xc = x + xo + ch * s;\n"
    "    T mu = mean[mo + ch], a = 0, b = 0;\n"
    "    for (long j = lane; j < count; j += LOCAL) {\n"
    "        long at = (j / s) * c * s + j % s;\n"
    "        T g = dyc[at];\n"
    "        a += g;\n"
    "        b += g * (xc[at] - mu);\n"
    "    }\n"
    "    GROUP_REDUCE(part, lane, a, NN_ADD);\n"
    "    GROUP_REDUCE(part, lane, b, NN_ADD);\n"
    "    if (lane == 0) {\n"
    "        sums[so + ch] = a;\n"
    "        sums[so + c + ch] = b;\n"
    "        if (want & 1) dw[dwo + ch] = b * invstd[io + ch];\n"
    "        if (want & 2) db[dbo + ch] = a;\n"
    "    }\n"
    "}\n";

/* dx = weight invstd (dy - sum dy / M - (x - mean) invstd^2 sum dy (x - mean) / M)
 * in training (M values per channel), weight invstd dy otherwise. */
static const char bn_grad_input_source[] =
    "__kernel void bn_grad_input(long total, long c, long s, __global const T *dy, long dyo, __global const T *x,\n"
    "                            long xo, __global const T *mean, long mo, __global const T *invstd, long io,\n"
    "                            __global const T *w, long wo, int has_weight, __global const T *sums, long so,\n"
    "                            int training, __global T *dx, long dxo)\n"
    "{\n"
    "    long i = get_global_id(0);\n"
    "    if (i >= total) return;\n"
    "    long ch = i / s % c;\n"
    "    T inv = invstd[io + ch], scale = (has_weight ? w[wo + ch] : (T)1) * inv;\n"
    "    if (training) {\n"
    "        T count = (T)(total / c);\n"
    "        T mean_dy = sums[so + ch] / count, proj = sums[so + c + ch] / count * inv * inv;\n"
    "        dx[dxo + i] = scale * (dy[dyo + i] - mean_dy - (x[xo + i] - mean[mo + ch]) * proj);\n"
    "    } else {\n"
    "        dx[dxo + i] = scale * dy[dyo + i];\n"
    "    }\n"
    "}\n";

typedef struct bn_shape {
    cl_long n, c, s;
} bn_shape;

static bn_shape shape_of(const fl_tensor *x)
{
    bn_shape g = {x->shape[0], x->shape[1], 1};
    for (int i = 2; i < x->ndim; i++)
        g.s *= x->shape[i];
    return g;
}

/* A kernel argument for an optional tensor: its buffer and offset, or stand's (any
 * buffer, which the kernel does not touch) and 0. */
static void optional_arg(const fl_tensor *t, const fl_tensor *stand, ocl_arg *mem, cl_long *offset)
{
    *mem = OCL_MEM(ocl_impl(t ? t : stand)->buffer);
    *offset = t ? ocl_element_offset(t) : 0;
}

/* Allocates each of count outputs that is not NULL. */
static int alloc_all(int count, fl_tensor *const *outs)
{
    for (int i = 0; i < count; i++) {
        int rc = outs[i] ? ocl_alloc(outs[i]) : 0;
        if (rc)
            return rc;
    }
    return 0;
}

static int ocl_batch_norm(const fl_backend *self, fl_tensor *y, fl_tensor *save_mean, fl_tensor *save_var,
                          const fl_tensor *x, const fl_tensor *weight, const fl_tensor *bias,
                          const fl_tensor *running_mean, const fl_tensor *running_var, double eps)
{
    (void)self;
    int rc = check_float("batch_norm", x->dtype);
    if (rc)
        return rc;
    bool training = !running_mean;
    enum { X, WEIGHT, BIAS, MEAN, VAR, INPUTS };
    const fl_tensor *inputs[INPUTS] = {x, weight, bias, training ? NULL : running_mean,
                                       training ? NULL : running_var};
    fl_tensor *d[INPUTS];
    if (!dense_all(INPUTS, inputs, d))
        return FL_ERR_BACKEND;
    fl_tensor *outs[3] = {y, training ? save_mean : NULL, training ? save_var : NULL};
    if ((rc = alloc_all(3, outs))) {
        release_all(INPUTS, d);
        return rc;
    }
    fl_dtype dtype = x->dtype;
    bn_shape g = shape_of(x);
    const fl_tensor *mean = training ? save_mean : d[MEAN], *var = training ? save_var : d[VAR];
    if (training) {
        int local = group_size(g.n * g.s);
        cl_kernel k = reducing_kernel(bn_stats_source, "bn_stats", dtype, local);
        if (!k) {
            release_all(INPUTS, d);
            return FL_ERR_BACKEND;
        }
        cl_long xo = ocl_element_offset(d[X]), mo = ocl_element_offset(mean), vo = ocl_element_offset(var);
        ocl_arg args[] = {OCL_VALUE(g.n), OCL_VALUE(g.c), OCL_VALUE(g.s), OCL_MEM(ocl_impl(d[X])->buffer),
                          OCL_VALUE(xo), OCL_MEM(ocl_impl(mean)->buffer), OCL_VALUE(mo),
                          OCL_MEM(ocl_impl(var)->buffer), OCL_VALUE(vo)};
        size_t global = (size_t)g.c * (size_t)local, group = (size_t)local;
        if ((rc = ocl_launch_nd("batch_norm", k, 1, &global, &group, 9, args))) {
            release_all(INPUTS, d);
            return rc;
        }
    }
    cl_kernel k = nn_kernel(bn_apply_source, "bn_apply", dtype, 1);
    if (!k) {
        release_all(INPUTS, d);
        return FL_ERR_BACKEND;
    }
    cl_long total = x->numel, xo = ocl_element_offset(d[X]), yo = ocl_element_offset(y), mo = ocl_element_offset(mean),
            vo = ocl_element_offset(var), wo, bo;
    ocl_arg w_mem, b_mem;
    optional_arg(d[WEIGHT], d[X], &w_mem, &wo);
    optional_arg(d[BIAS], d[X], &b_mem, &bo);
    cl_int affine = (d[WEIGHT] ? 1 : 0) | (d[BIAS] ? 2 : 0);
    float eps_f = (float)eps;
    ocl_arg args[] = {OCL_VALUE(total), OCL_VALUE(g.c), OCL_VALUE(g.s), OCL_MEM(ocl_impl(d[X])->buffer),
                      OCL_VALUE(xo), OCL_MEM(ocl_impl(y)->buffer), OCL_VALUE(yo), OCL_MEM(ocl_impl(mean)->buffer),
                      OCL_VALUE(mo), OCL_MEM(ocl_impl(var)->buffer), OCL_VALUE(vo), w_mem, OCL_VALUE(wo), b_mem,
                      OCL_VALUE(bo), OCL_VALUE(affine), dtype == FL_F32 ? OCL_VALUE(eps_f) : OCL_VALUE(eps)};
    rc = ocl_launch("batch_norm", k, (size_t)total, 17, args);
    release_all(INPUTS, d);
    return rc;
}

static int ocl_batch_norm_backward(const fl_backend *self, fl_tensor *dx, fl_tensor *dweight, fl_tensor *dbias,
                                   const fl_tensor *dy, const fl_tensor *x, const fl_tensor *mean,
                                   const fl_tensor *invstd, const fl_tensor *weight, bool training)
{
    (void)self;
    int rc = check_float("batch_norm_backward", x->dtype);
    if (rc)
        return rc;
    enum { DY, X, MEAN, INVSTD, WEIGHT, INPUTS };
    const fl_tensor *inputs[INPUTS] = {dy, x, mean, invstd, weight};
    fl_tensor *d[INPUTS];
    if (!dense_all(INPUTS, inputs, d))
        return FL_ERR_BACKEND;
    fl_tensor *outs[3] = {dx, dweight, dbias};
    if ((rc = alloc_all(3, outs))) {
        release_all(INPUTS, d);
        return rc;
    }
    fl_dtype dtype = x->dtype;
    bn_shape g = shape_of(x);
    cl_long dyo = ocl_element_offset(d[DY]), xo = ocl_element_offset(d[X]), mo = ocl_element_offset(d[MEAN]),
            io = ocl_element_offset(d[INVSTD]);
    /* The per-channel sums, which dx needs in training and dweight and dbias are. */
    ocl_buffer *sums = NULL;
    cl_long so = 0;
    if (dweight || dbias || (dx && training)) {
        sums = ocl_buffer_new(2 * (size_t)g.c * ocl_element_size(dtype));
        if (!sums) {
            release_all(INPUTS, d);
            return FL_ERR_MEMORY;
        }
        so = (cl_long)(sums->offset / ocl_element_size(dtype));
        int local = group_size(g.n * g.s);
        cl_kernel k = reducing_kernel(bn_grad_sums_source, "bn_grad_sums", dtype, local);
        if (!k) {
            rc = FL_ERR_BACKEND;
            goto done;
        }
        cl_long dwo = dweight ? ocl_element_offset(dweight) : 0, dbo = dbias ? ocl_element_offset(dbias) : 0;
        cl_int want = (dweight ? 1 : 0) | (dbias ? 2 : 0);
        ocl_arg args[] = {OCL_VALUE(g.n), OCL_VALUE(g.c), OCL_VALUE(g.s), OCL_MEM(ocl_impl(d[DY])->buffer),
                          OCL_VALUE(dyo), OCL_MEM(ocl_impl(d[X])->buffer), OCL_VALUE(xo),
                          OCL_MEM(ocl_impl(d[MEAN])->buffer), OCL_VALUE(mo), OCL_MEM(ocl_impl(d[INVSTD])->buffer),
                          OCL_VALUE(io), OCL_MEM(sums), OCL_VALUE(so),
                          OCL_MEM(dweight ? ocl_impl(dweight)->buffer : sums), OCL_VALUE(dwo),
                          OCL_MEM(dbias ? ocl_impl(dbias)->buffer : sums), OCL_VALUE(dbo), OCL_VALUE(want)};
        size_t global = (size_t)g.c * (size_t)local, group = (size_t)local;
        if ((rc = ocl_launch_nd("batch_norm_backward", k, 1, &global, &group, 18, args)))
            goto done;
    }
    if (dx) {
        cl_kernel k = nn_kernel(bn_grad_input_source, "bn_grad_input", dtype, 1);
        if (!k) {
            rc = FL_ERR_BACKEND;
            goto done;
        }
        cl_long total = x->numel, wo, dxo = ocl_element_offset(dx);
        ocl_arg w_mem;
        optional_arg(d[WEIGHT], d[X], &w_mem, &wo);
        cl_int has_weight = d[WEIGHT] != NULL, train = training;
        ocl_arg args[] = {OCL_VALUE(total), OCL_VALUE(g.c), OCL_VALUE(g.s), OCL_MEM(ocl_impl(d[DY])->buffer),
                          OCL_VALUE(dyo), OCL_MEM(ocl_impl(d[X])->buffer), OCL_VALUE(xo),
                          OCL_MEM(ocl_impl(d[MEAN])->buffer), OCL_VALUE(mo), OCL_MEM(ocl_impl(d[INVSTD])->buffer),
                          OCL_VALUE(io), w_mem, OCL_VALUE(wo), OCL_VALUE(has_weight),
                          OCL_MEM(sums ? sums : ocl_impl(d[X])->buffer), OCL_VALUE(so), OCL_VALUE(train),
                          OCL_MEM(ocl_impl(dx)->buffer), OCL_VALUE(dxo)};
        rc = ocl_launch("batch_norm_backward", k, (size_t)total, 19, args);
    }
done:
    /* The queue is in order: a buffer released here is reused only by later kernels. */
    if (sums)
        ocl_buffer_release(sums);
    release_all(INPUTS, d);
    return rc;
}

/* ---- GELU ---- */

/* The fused expressions of expressions.h: on f32 a pending node, so that GELU fuses
 * with the operations around it; on f64 at once, in double. */
static int ocl_gelu(const fl_backend *self, fl_tensor *out, const fl_tensor *a, const fl_tensor *dy, bool approximate)
{
    (void)self;
    int rc = check_float("gelu", a->dtype);
    if (rc)
        return rc;
    if (dy && (dy->dtype != a->dtype || dy->ndim != a->ndim ||
               memcmp(dy->shape, a->shape, sizeof *a->shape * (size_t)a->ndim) != 0))
        return fl_backend_error(FL_ERR_SHAPE, "the gelu gradient needs dy of x's dtype and shape");
    int op = dy ? (approximate ? LAZY_GELU_TANH_GRAD : LAZY_GELU_GRAD) : (approximate ? LAZY_GELU_TANH : LAZY_GELU);
    return a->dtype == FL_F64 ? ocl_run_now("gelu", out, op, a, dy) : ocl_defer(out, op, a, dy);
}

/* ---- the LSTM cell ----
 * One work item per element of [N, H]: it reads the row's four preactivations (or
 * gates) of its column and writes every output of that column, with the cpu
 * kernel's activations (vecmath.h's for f32, the built-ins for f64) and its order of
 * products (cpu/lstm.c). */

static const char lstm_cell_source[] =
    "__kernel void lstm_cell(long total, long hs, __global const T *pre, long po, __global const T *cprev, long cpo,\n"
    "                        __global T *gates, long go, __global T *c, long co, __global T *h, long ho)\n"
    "{\n"
    "    long e = get_global_id(0);\n"
    "    if (e >= total) return;\n"
    "    long r = e / hs, j = e % hs;\n"
    "    __global const T *p = pre + po + r * 4 * hs + j;\n"
    "    __global T *a = gates + go + r * 4 * hs + j;\n"
    "    T i = vm_sigmoidf(p[0]), f = vm_sigmoidf(p[hs]), g = vm_tanhf(p[2 * hs]), o = vm_sigmoidf(p[3 * hs]);\n"
    "    T cell = f * cprev[cpo + e] + i * g;\n"
    "    a[0] = i; a[hs] = f; a[2 * hs] = g; a[3 * hs] = o;\n"
    "    c[co + e] = cell;\n"
    "    h[ho + e] = o * vm_tanhf(cell);\n"
    "}\n";

static const char lstm_cell_grad_source[] =
    "__kernel void lstm_cell_grad(long total, long hs, __global const T *dh, long dho, __global const T *dc, long dco,\n"
    "                             __global const T *gates, long go, __global const T *cprev, long cpo,\n"
    "                             __global const T *c, long co, __global T *dpre, long dpo, __global T *dcprev,\n"
    "                             long dcpo)\n"
    "{\n"
    "    long e = get_global_id(0);\n"
    "    if (e >= total) return;\n"
    "    long r = e / hs, j = e % hs;\n"
    "    __global const T *a = gates + go + r * 4 * hs + j;\n"
    "    __global T *d = dpre + dpo + r * 4 * hs + j;\n"
    "    T i = a[0], f = a[hs], g = a[2 * hs], o = a[3 * hs];\n"
    "    T t = vm_tanhf(c[co + e]), dhe = dh[dho + e];\n"
    "    T total_ = dc[dco + e] + (dhe * o) * (1 - t * t);\n"
    "    d[0] = (total_ * g) * (i - i * i);\n"
    "    d[hs] = (total_ * cprev[cpo + e]) * (f - f * f);\n"
    "    d[2 * hs] = (total_ * i) * (1 - g * g);\n"
    "    d[3 * hs] = (dhe * t) * (o - o * o);\n"
    "    dcprev[dcpo + e] = total_ * f;\n"
    "}\n";

static int ocl_lstm_cell(const fl_backend *self, fl_tensor *gates, fl_tensor *c, fl_tensor *h, const fl_tensor *pre,
                         const fl_tensor *c_prev)
{
    (void)self;
    int rc = check_float("lstm_cell", pre->dtype);
    if (rc)
        return rc;
    if (pre->ndim != 2 || c_prev->ndim != 2 || c_prev->dtype != pre->dtype || pre->shape[0] != c_prev->shape[0] ||
        pre->shape[1] != 4 * c_prev->shape[1])
        return fl_backend_error(FL_ERR_SHAPE, "lstm_cell needs pre [N, 4H] and c_prev [N, H] of one dtype");
    const fl_tensor *inputs[2] = {pre, c_prev};
    fl_tensor *d[2];
    if (!dense_all(2, inputs, d))
        return FL_ERR_BACKEND;
    fl_tensor *outs[3] = {gates, c, h};
    cl_kernel k = NULL;
    if (!(rc = alloc_all(3, outs)) && c_prev->numel > 0 &&
        !(rc = (k = nn_kernel(lstm_cell_source, "lstm_cell", pre->dtype, 1)) ? 0 : FL_ERR_BACKEND)) {
        cl_long total = c_prev->numel, hs = c_prev->shape[1], po = ocl_element_offset(d[0]),
                cpo = ocl_element_offset(d[1]), go = ocl_element_offset(gates), co = ocl_element_offset(c),
                ho = ocl_element_offset(h);
        ocl_arg args[] = {OCL_VALUE(total), OCL_VALUE(hs), OCL_MEM(ocl_impl(d[0])->buffer), OCL_VALUE(po),
                          OCL_MEM(ocl_impl(d[1])->buffer), OCL_VALUE(cpo), OCL_MEM(ocl_impl(gates)->buffer),
                          OCL_VALUE(go), OCL_MEM(ocl_impl(c)->buffer), OCL_VALUE(co), OCL_MEM(ocl_impl(h)->buffer),
                          OCL_VALUE(ho)};
        rc = ocl_launch("lstm_cell", k, (size_t)total, 12, args);
    }
    release_all(2, d);
    return rc;
}

static int ocl_lstm_cell_backward(const fl_backend *self, fl_tensor *dpre, fl_tensor *dc_prev, const fl_tensor *dh,
                                  const fl_tensor *dc, const fl_tensor *gates, const fl_tensor *c_prev,
                                  const fl_tensor *c)
{
    (void)self;
    int rc = check_float("lstm_cell_backward", gates->dtype);
    if (rc)
        return rc;
    enum { DH, DC, GATES, CPREV, C, INPUTS };
    const fl_tensor *inputs[INPUTS] = {dh, dc, gates, c_prev, c};
    int64_t rows = gates->ndim == 2 ? gates->shape[0] : -1, hs = gates->ndim == 2 ? gates->shape[1] / 4 : -1;
    for (int k = 0; k < INPUTS; k++)
        if (k != GATES && (inputs[k]->ndim != 2 || inputs[k]->shape[0] != rows || inputs[k]->shape[1] != hs ||
                           inputs[k]->dtype != gates->dtype || gates->shape[1] != 4 * hs))
            return fl_backend_error(FL_ERR_SHAPE,
                                    "lstm_cell_backward needs gates [N, 4H] and the rest [N, H] of one dtype");
    fl_tensor *d[INPUTS];
    if (!dense_all(INPUTS, inputs, d))
        return FL_ERR_BACKEND;
    fl_tensor *outs[2] = {dpre, dc_prev};
    cl_kernel k = NULL;
    if (!(rc = alloc_all(2, outs)) && c->numel > 0 &&
        !(rc = (k = nn_kernel(lstm_cell_grad_source, "lstm_cell_grad", gates->dtype, 1)) ? 0 : FL_ERR_BACKEND)) {
        cl_long total = c->numel, h = hs, offsets[INPUTS];
        for (int i = 0; i < INPUTS; i++)
            offsets[i] = ocl_element_offset(d[i]);
        cl_long dpo = ocl_element_offset(dpre), dcpo = ocl_element_offset(dc_prev);
        ocl_arg args[] = {OCL_VALUE(total), OCL_VALUE(h),
                          OCL_MEM(ocl_impl(d[DH])->buffer), OCL_VALUE(offsets[DH]),
                          OCL_MEM(ocl_impl(d[DC])->buffer), OCL_VALUE(offsets[DC]),
                          OCL_MEM(ocl_impl(d[GATES])->buffer), OCL_VALUE(offsets[GATES]),
                          OCL_MEM(ocl_impl(d[CPREV])->buffer), OCL_VALUE(offsets[CPREV]),
                          OCL_MEM(ocl_impl(d[C])->buffer), OCL_VALUE(offsets[C]),
                          OCL_MEM(ocl_impl(dpre)->buffer), OCL_VALUE(dpo),
                          OCL_MEM(ocl_impl(dc_prev)->buffer), OCL_VALUE(dcpo)};
        rc = ocl_launch("lstm_cell_backward", k, (size_t)total, 16, args);
    }
    release_all(INPUTS, d);
    return rc;
}

/* ---- the LSTM recurrence ----
 * One launch a step. A work-group takes one row r of the batch and UNITS consecutive
 * units j; its work items split the depth of the step's product into SLICES strided
 * parts, so that a launch has enough work items to fill a GPU, and neighbouring work
 * items read neighbouring words of the weights. Forward, each work item sums its part
 * of the four dot products of h_prev's row r with unit j's rows of W_hh (from a
 * transposed copy made once a call), the group adds the parts in local memory, and
 * the first slice adds the step's input projection and the bias ((x + b) + the
 * product, the cpu kernel's order) and runs lstm_cell's arithmetic. Backward, in the
 * reverse order, the parts are of dh_next, the product of the step after's
 * preactivation gradients with column j of W_hh; then the cell's gradient. dc flows
 * from step to step through dc0, which ends holding its gradient, and one more launch
 * gives dh0 from the last step's gradients. A step of a language model's layer is a
 * few microseconds of arithmetic, where the composition pays a CLBlast product, an
 * add and a cell, each a launch. The queue runs in order, so each launch sees the one
 * before it done; nothing waits for the device. */

static const char lstm_transpose_source[] =
    "__kernel void lstm_transpose(long rows, long cols, __global const T *w, long wo, __global T *wt, long wto)\n"
    "{\n"
    "    long e = get_global_id(0);\n"
    "    if (e >= rows * cols) return;\n"
    "    long m = e / cols, k = e % cols;\n"
    "    wt[wto + k * rows + m] = w[wo + e];\n"
    "}\n";

/* Which row, unit and slice a work item has (the unit may be past hs: such work items
 * only take part in the group's barrier). */
#define LSTM_PLACE                                                                                          \
    "#define UNITS (LOCAL < 32 ? LOCAL : 32)\n"                                                             \
    "#define SLICES (LOCAL / UNITS)\n"                                                                      \
    "    long blocks = (hs + UNITS - 1) / UNITS, group = get_group_id(0);\n"                                \
    "    int lid = get_local_id(0), slice = lid / UNITS;\n"                                                 \
    "    long r = group / blocks, j = (group % blocks) * UNITS + lid % UNITS;\n"                            \
    "    bool unit = j < hs;\n"

/* Adds the slices' parts of s (local part[LOCAL]) into slice 0's s, in slice order. */
#define LSTM_GATHER(s)                                                                                      \
    "    part[lid] = " s ";\n"                                                                              \
    "    barrier(CLK_LOCAL_MEM_FENCE);\n"                                                                   \
    "    if (slice == 0) for (int q = 1; q < SLICES; q++) " s " += part[lid + q * UNITS];\n"                \
    "    barrier(CLK_LOCAL_MEM_FENCE);\n"

static const char lstm_step_source[] =
    "__kernel void lstm_step(long rows, long hs, __global const T *x, long xo, __global const T *bias, long bo,\n"
    "                        int biased, __global const T *hp, long hpo, __global const T *cp, long cpo,\n"
    "                        __global const T *wt, long wto, __global T *gates, long go, __global T *c, long co,\n"
    "                        __global T *h, long ho)\n"
    "{\n"
    "    __local T part[LOCAL];\n"
    LSTM_PLACE
    "    T s0 = 0, s1 = 0, s2 = 0, s3 = 0;\n"
    "    if (unit) {\n"
    "        __global const T *hr = hp + hpo + r * hs;\n"
    "        for (long k = slice; k < hs; k += SLICES) {\n"
    "            __global const T *w = wt + wto + k * 4 * hs + j;\n"
    "            T v = hr[k];\n"
    "            s0 += v * w[0]; s1 += v * w[hs]; s2 += v * w[2 * hs]; s3 += v * w[3 * hs];\n"
    "        }\n"
    "    }\n"
    LSTM_GATHER("s0") LSTM_GATHER("s1") LSTM_GATHER("s2") LSTM_GATHER("s3")
    "    if (!unit || slice != 0) return;\n"
    "    long e = r * hs + j;\n"
    "    __global const T *xr = x + xo + r * 4 * hs + j;\n"
    "    __global const T *b = bias + bo + j;\n"
    "    T p0 = (xr[0] + (biased ? b[0] : (T)0)) + s0, p1 = (xr[hs] + (biased ? b[hs] : (T)0)) + s1;\n"
    "    T p2 = (xr[2 * hs] + (biased ? b[2 * hs] : (T)0)) + s2;\n"
    "    T p3 = (xr[3 * hs] + (biased ? b[3 * hs] : (T)0)) + s3;\n"
    "    T i = vm_sigmoidf(p0), f = vm_sigmoidf(p1), g = vm_tanhf(p2), o = vm_sigmoidf(p3);\n"
    "    T cell = f * cp[cpo + e] + i * g;\n"
    "    __global T *a = gates + go + r * 4 * hs + j;\n"
    "    a[0] = i; a[hs] = f; a[2 * hs] = g; a[3 * hs] = o;\n"
    "    c[co + e] = cell;\n"
    "    h[ho + e] = o * vm_tanhf(cell);\n"
    "}\n";

/* dh of element (r, j) from the step after, summed by the group: row r of its
 * preactivation gradients da [N, 4H] times column j of W_hh [4H, H]. */
#define LSTM_DH_NEXT                                                                                        \
    "    T dh_next = 0;\n"                                                                                   \
    "    if (unit && !first)\n"                                                                             \
    "        for (long m = slice; m < 4 * hs; m += SLICES)\n"                                              \
    "            dh_next += da[dao + r * 4 * hs + m] * w[wo + m * hs + j];\n"                               \
    LSTM_GATHER("dh_next")

static const char lstm_step_grad_source[] =
    "__kernel void lstm_step_grad(long rows, long hs, int first, __global const T *dh, long dho,\n"
    "                             __global const T *dc, long dco, __global const T *gates, long go,\n"
    "                             __global const T *cp, long cpo, __global const T *c, long co,\n"
    "                             __global const T *da, long dao, __global const T *w, long wo,\n"
    "                             __global T *dcn, long dcno, __global T *d, long dpo)\n"
    "{\n"
    "    __local T part[LOCAL];\n"
    LSTM_PLACE
    LSTM_DH_NEXT
    "    if (!unit || slice != 0) return;\n"
    "    long e = r * hs + j;\n"
    "    __global const T *a = gates + go + r * 4 * hs + j;\n"
    "    T i = a[0], f = a[hs], g = a[2 * hs], o = a[3 * hs];\n"
    "    T sum = dh[dho + e] + dh_next, t = vm_tanhf(c[co + e]);\n"
    "    T total_ = (dc[dco + e] + (first ? (T)0 : dcn[dcno + e])) + (sum * o) * (1 - t * t);\n"
    "    __global T *dr = d + dpo + r * 4 * hs + j;\n"
    "    dr[0] = (total_ * g) * (i - i * i);\n"
    "    dr[hs] = (total_ * cp[cpo + e]) * (f - f * f);\n"
    "    dr[2 * hs] = (total_ * i) * (1 - g * g);\n"
    "    dr[3 * hs] = (sum * t) * (o - o * o);\n"
    "    dcn[dcno + e] = total_ * f;\n"
    "}\n";

static const char lstm_dh0_source[] =
    "__kernel void lstm_dh0(long rows, long hs, __global const T *da, long dao, __global const T *w, long wo,\n"
    "                       __global T *dh0, long dho)\n"
    "{\n"
    "    __local T part[LOCAL];\n"
    "    const int first = 0;\n"
    LSTM_PLACE
    LSTM_DH_NEXT
    "    if (unit && slice == 0) dh0[dho + r * hs + j] = dh_next;\n"
    "}\n";

/* The global size of the recurrence's kernels (work-groups of ocl_group_size()):
 * ceil(hs / UNITS) groups for each of rows. */
static size_t lstm_global(int64_t rows, int64_t hs, int local)
{
    int64_t units = local < 32 ? local : 32;
    return (size_t)(rows * ((hs + units - 1) / units)) * (size_t)local;
}

/* The step before step t in the order the recurrence runs; -1 for its first. */
static int64_t step_before(int64_t t, int64_t steps, bool reverse)
{
    return reverse ? (t + 1 < steps ? t + 1 : -1) : t - 1;
}

static int ocl_lstm_sequence(const fl_backend *self, fl_tensor *states, fl_tensor *gates_out, const fl_tensor *xproj,
                             const fl_tensor *bias, const fl_tensor *h0, const fl_tensor *c0, const fl_tensor *w_hh,
                             bool reverse)
{
    (void)self;
    int rc = check_float("lstm_sequence", xproj->dtype);
    if (rc)
        return rc;
    enum { X, H0, C0, W, BIAS, INPUTS };
    const fl_tensor *inputs[INPUTS] = {xproj, h0, c0, w_hh, bias};
    int64_t steps = xproj->ndim == 3 ? xproj->shape[0] : -1, rows = xproj->ndim == 3 ? xproj->shape[1] : -1,
            hs = xproj->ndim == 3 ? xproj->shape[2] / 4 : -1;
    bool shaped = xproj->ndim == 3 && xproj->shape[2] == 4 * hs && w_hh->ndim == 2 && w_hh->shape[0] == 4 * hs &&
                  w_hh->shape[1] == hs && (!bias || (bias->ndim == 1 && bias->shape[0] == 4 * hs));
    for (int k = H0; k <= C0; k++)
        shaped = shaped && inputs[k]->ndim == 2 && inputs[k]->shape[0] == rows && inputs[k]->shape[1] == hs;
    for (int k = H0; k < INPUTS; k++)
        shaped = shaped && (!inputs[k] || inputs[k]->dtype == xproj->dtype);
    if (!shaped)
        return fl_backend_error(FL_ERR_SHAPE, "lstm_sequence needs xproj [T, N, 4H], bias [4H], h0 and c0 [N, H] "
                                              "and w_hh [4H, H] of one dtype");
    fl_tensor *outs[2] = {states, gates_out};
    if ((rc = alloc_all(2, outs)) || xproj->numel == 0)
        return rc;
    fl_tensor *d[INPUTS];
    if (!dense_all(INPUTS, inputs, d))
        return FL_ERR_BACKEND;
    size_t element = ocl_element_size(xproj->dtype);
    ocl_buffer *wt = ocl_buffer_new((size_t)(4 * hs * hs) * element);
    cl_kernel transpose = NULL, step = NULL;
    int local = ocl_group_size();
    if (!wt || !(transpose = nn_kernel(lstm_transpose_source, "lstm_transpose", xproj->dtype, 1)) ||
        !(step = nn_kernel(lstm_step_source, "lstm_step", xproj->dtype, local))) {
        rc = FL_ERR_BACKEND;
        goto done;
    }
    /* a buffer's offset is in bytes, of a 512-byte aligned block */
    cl_long n = rows, h = hs, four = 4 * hs, wo = ocl_element_offset(d[W]), wto = (cl_long)(wt->offset / element);
    ocl_arg targs[] = {OCL_VALUE(four), OCL_VALUE(h), OCL_MEM(ocl_impl(d[W])->buffer), OCL_VALUE(wo), OCL_MEM(wt),
                       OCL_VALUE(wto)};
    rc = ocl_launch("lstm_sequence", transpose, (size_t)(4 * hs * hs), (int)(sizeof targs / sizeof *targs), targs);
    ocl_arg bias_mem;
    cl_long bo;
    optional_arg(d[BIAS], d[X], &bias_mem, &bo);
    cl_int biased = d[BIAS] != NULL;
    cl_long base = ocl_element_offset(states), layer = steps * rows * hs;
    size_t global = lstm_global(rows, hs, local), group = (size_t)local;
    for (int64_t s = 0; !rc && s < steps; s++) {
        int64_t t = reverse ? steps - 1 - s : s, before = step_before(t, steps, reverse);
        const fl_tensor *hp = before < 0 ? d[H0] : states, *cp = before < 0 ? d[C0] : states;
        cl_long xo = ocl_element_offset(d[X]) + t * rows * 4 * hs,
                hpo = before < 0 ? ocl_element_offset(d[H0]) : base + before * rows * hs,
                cpo = before < 0 ? ocl_element_offset(d[C0]) : base + layer + before * rows * hs,
                go = ocl_element_offset(gates_out) + t * rows * 4 * hs, co = base + layer + t * rows * hs,
                ho = base + t * rows * hs;
        ocl_arg args[] = {OCL_VALUE(n), OCL_VALUE(h), OCL_MEM(ocl_impl(d[X])->buffer), OCL_VALUE(xo), bias_mem,
                          OCL_VALUE(bo), OCL_VALUE(biased), OCL_MEM(ocl_impl(hp)->buffer), OCL_VALUE(hpo),
                          OCL_MEM(ocl_impl(cp)->buffer), OCL_VALUE(cpo), OCL_MEM(wt), OCL_VALUE(wto),
                          OCL_MEM(ocl_impl(gates_out)->buffer), OCL_VALUE(go), OCL_MEM(ocl_impl(states)->buffer),
                          OCL_VALUE(co), OCL_MEM(ocl_impl(states)->buffer), OCL_VALUE(ho)};
        rc = ocl_launch_nd("lstm_sequence", step, 1, &global, &group, (int)(sizeof args / sizeof *args), args);
    }
done:
    if (wt)
        ocl_buffer_release(wt);
    release_all(INPUTS, d);
    return rc;
}

static int ocl_lstm_sequence_backward(const fl_backend *self, fl_tensor *dxproj, fl_tensor *dh0, fl_tensor *dc0,
                                      const fl_tensor *dstates, const fl_tensor *states, const fl_tensor *gates,
                                      const fl_tensor *h0, const fl_tensor *c0, const fl_tensor *w_hh, bool reverse)
{
    (void)self;
    int rc = check_float("lstm_sequence_backward", gates->dtype);
    if (rc)
        return rc;
    enum { GATES, DSTATES, STATES, C0, W, INPUTS };
    const fl_tensor *inputs[INPUTS] = {gates, dstates, states, c0, w_hh};
    int64_t steps = gates->ndim == 3 ? gates->shape[0] : -1, rows = gates->ndim == 3 ? gates->shape[1] : -1,
            hs = gates->ndim == 3 ? gates->shape[2] / 4 : -1;
    bool shaped = gates->ndim == 3 && gates->shape[2] == 4 * hs && c0->ndim == 2 && c0->shape[0] == rows &&
                  c0->shape[1] == hs && w_hh->ndim == 2 && w_hh->shape[0] == 4 * hs && w_hh->shape[1] == hs &&
                  h0->dtype == gates->dtype;
    for (int k = DSTATES; k <= STATES; k++)
        shaped = shaped && inputs[k]->ndim == 3 && inputs[k]->shape[0] == 2 * steps &&
                 inputs[k]->shape[1] == rows && inputs[k]->shape[2] == hs;
    for (int k = DSTATES; k < INPUTS; k++)
        shaped = shaped && inputs[k]->dtype == gates->dtype;
    if (!shaped)
        return fl_backend_error(FL_ERR_SHAPE, "lstm_sequence_backward needs gates [T, N, 4H], dstates and states "
                                              "[2T, N, H], c0 [N, H] and w_hh [4H, H] of one dtype");
    fl_tensor *outs[3] = {dxproj, dh0, dc0};
    if ((rc = alloc_all(3, outs)) || dh0->numel == 0)
        return rc;
    fl_tensor *d[INPUTS];
    if (!dense_all(INPUTS, inputs, d))
        return FL_ERR_BACKEND;
    int local = ocl_group_size();
    cl_kernel grad = nn_kernel(lstm_step_grad_source, "lstm_step_grad", gates->dtype, local),
              first_dh = grad ? nn_kernel(lstm_dh0_source, "lstm_dh0", gates->dtype, local) : NULL;
    if (!first_dh) {
        release_all(INPUTS, d);
        return FL_ERR_BACKEND;
    }
    cl_long n = rows, h = hs, wo = ocl_element_offset(d[W]), layer = steps * rows * hs,
            dbase = ocl_element_offset(d[DSTATES]), sbase = ocl_element_offset(d[STATES]),
            dco0 = ocl_element_offset(dc0), dpbase = ocl_element_offset(dxproj);
    cl_long after_offset = 0;
    size_t global = lstm_global(rows, hs, local), group = (size_t)local;
    for (int64_t s = 0; !rc && s < steps; s++) {
        int64_t t = reverse ? s : steps - 1 - s, before = step_before(t, steps, reverse);
        cl_int first = s == 0;
        const fl_tensor *cp = before < 0 ? d[C0] : d[STATES];
        cl_long dho = dbase + t * rows * hs, dco = dbase + layer + t * rows * hs,
                go = ocl_element_offset(d[GATES]) + t * rows * 4 * hs,
                cpo = before < 0 ? ocl_element_offset(d[C0]) : sbase + layer + before * rows * hs,
                co = sbase + layer + t * rows * hs, dpo = dpbase + t * rows * 4 * hs;
        ocl_arg args[] = {OCL_VALUE(n), OCL_VALUE(h), OCL_VALUE(first),
                          OCL_MEM(ocl_impl(d[DSTATES])->buffer), OCL_VALUE(dho),
                          OCL_MEM(ocl_impl(d[DSTATES])->buffer), OCL_VALUE(dco),
                          OCL_MEM(ocl_impl(d[GATES])->buffer), OCL_VALUE(go),
                          OCL_MEM(ocl_impl(cp)->buffer), OCL_VALUE(cpo),
                          OCL_MEM(ocl_impl(d[STATES])->buffer), OCL_VALUE(co),
                          OCL_MEM(ocl_impl(dxproj)->buffer), OCL_VALUE(after_offset),
                          OCL_MEM(ocl_impl(d[W])->buffer), OCL_VALUE(wo),
                          OCL_MEM(ocl_impl(dc0)->buffer), OCL_VALUE(dco0),
                          OCL_MEM(ocl_impl(dxproj)->buffer), OCL_VALUE(dpo)};
        rc = ocl_launch_nd("lstm_sequence_backward", grad, 1, &global, &group, (int)(sizeof args / sizeof *args),
                           args);
        after_offset = dpo;
    }
    cl_long dh0o = ocl_element_offset(dh0);
    ocl_arg args[] = {OCL_VALUE(n), OCL_VALUE(h), OCL_MEM(ocl_impl(dxproj)->buffer), OCL_VALUE(after_offset),
                      OCL_MEM(ocl_impl(d[W])->buffer), OCL_VALUE(wo), OCL_MEM(ocl_impl(dh0)->buffer),
                      OCL_VALUE(dh0o)};
    if (!rc)
        rc = ocl_launch_nd("lstm_sequence_backward", first_dh, 1, &global, &group, (int)(sizeof args / sizeof *args),
                           args);
    release_all(INPUTS, d);
    return rc;
}

void ocl_register_nn(fl_backend *b)
{
    b->softmax = ocl_softmax;
    b->batch_norm = ocl_batch_norm;
    b->batch_norm_backward = ocl_batch_norm_backward;
    b->gelu = ocl_gelu;
    b->lstm_cell = ocl_lstm_cell;
    b->lstm_cell_backward = ocl_lstm_cell_backward;
    b->lstm_sequence = ocl_lstm_sequence;
    b->lstm_sequence_backward = ocl_lstm_sequence_backward;
}
