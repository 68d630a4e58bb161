/*
 * The device kernel generator (kernelgen.h). Each slot of a program becomes one
 * local value, computed by its operation's expression with x and z bound to its
 * operands, so the expression lists are pasted in as they are written.
 */
#include "kernelgen.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Built into the library by CMakeLists.txt: the cpu backend's vecmath.h and gelu.h,
 * their includes removed, so that device kernels compute with the formulas of the cpu
 * backend (f32), to its accuracy. */
extern const char kernelgen_vecmath_text[], kernelgen_gelu_text[];

static const char opencl_prelude[] =
    "#ifdef cl_khr_fp64\n"
    "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
    "#endif\n"
    /* Each operation rounds on its own, as on the cpu backend. */
    "#pragma OPENCL FP_CONTRACT OFF\n"
    "#define fabsf fabs\n"
    "#define sqrtf sqrt\n"
    "#define nearbyintf rint\n"
    "#define copysignf copysign\n"
    "#define floorf floor\n"
    "#define ceilf ceil\n"
    "#define expf exp\n"
    "#define logf log\n"
    "#define sinf sin\n"
    "#define cosf cos\n"
    "#define powf(x, y) ((y) == 2 ? (x) * (x) : pow(x, y))\n"
    "#undef M_SQRT1_2\n"
    "#define M_SQRT1_2 0.707106781186547524400844362104849039\n"
    "#define KG_CAT2(a, b) a##b\n"
    "#define KG_CAT(a, b) KG_CAT2(a, b)\n"
    "#define KG_LOWEST(T) KG_CAT(kg_lowest_, T)\n"
    "#define KG_HIGHEST(T) KG_CAT(kg_highest_, T)\n"
    "#define kg_lowest_float (-INFINITY)\n"
    "#define kg_highest_float INFINITY\n"
    "#define kg_lowest_double (-(double)INFINITY)\n"
    "#define kg_highest_double ((double)INFINITY)\n"
    "#define kg_lowest_uchar 0\n"
    "#define kg_highest_uchar 255\n"
    "#define kg_lowest_int INT_MIN\n"
    "#define kg_highest_int INT_MAX\n"
    "#define kg_lowest_long LONG_MIN\n"
    "#define kg_highest_long LONG_MAX\n"
    /* Integer powers by squaring, wrapping as unsigned arithmetic does; negative
     * exponents never get here (the tensor layer refuses them). */
    "static long kg_ipow(long b, long e) {\n"
    "    ulong r = 1, s = (ulong)b;\n"
    "    while (e > 0) { if (e & 1) r *= s; s *= s; e >>= 1; }\n"
    "    return (long)r;\n"
    "}\n"
    /* bfloat16 by its bits; float to bfloat16 rounds to nearest even and keeps NaNs. */
    "static float kg_bf16_load(ushort b) { return as_float((uint)b << 16); }\n"
    "static ushort kg_bf16_store(float f) {\n"
    "    uint u = as_uint(f);\n"
    "    if (isnan(f)) return (ushort)((u >> 16) | 0x40);\n"
    "    return (ushort)((u + 0x7fff + ((u >> 16) & 1)) >> 16);\n"
    "}\n";

/* f32 kernels run the cpu backend's vecmath.h, which needs C's fixed-width types and
 * memcpy for its bit casts. */
static const char opencl_f32_math[] =
    "typedef uint uint32_t;\n"
    "typedef int int32_t;\n"
    "static void kg_copy4(__private uchar *d, const __private uchar *s) { d[0] = s[0]; d[1] = s[1]; d[2] = s[2]; d[3] = s[3]; }\n"
    "#define memcpy(d, s, n) kg_copy4((__private uchar *)(d), (const __private uchar *)(s))\n";

/* f64 kernels spell the vector math as the built-ins, which take doubles. */
static const char opencl_f64_math[] =
    "#define vm_expf exp\n"
    "#define vm_logf log\n"
    "#define vm_log1pf log1p\n"
    "#define vm_tanhf tanh\n"
    "#define vm_sigmoidf(x) (1 / (1 + exp(-(x))))\n"
    "#define vm_erff erf\n"
    "#define vm_floorf floor\n"
    "#define vm_ceilf ceil\n";

const kg_dialect kg_opencl = {
    .name = "OpenCL C 1.2",
    .prelude = opencl_prelude,
    .f32_math = opencl_f32_math,
    .f64_math = opencl_f64_math,
    .kernel = "__kernel void",
    .global = "__global",
    .index = "(long)get_global_id(0)",
    .shape_type = "long8",
    .lanes = {".s0", ".s1", ".s2", ".s3", ".s4", ".s5", ".s6", ".s7"},
};

const char *kg_type(fl_dtype dtype)
{
    static const char *const names[FL_DTYPE_COUNT] = {
        [FL_BOOL] = "uchar", [FL_U8] = "uchar", [FL_I32] = "int",   [FL_I64] = "long",
        [FL_F16] = "ushort", [FL_BF16] = "ushort", [FL_F32] = "float", [FL_F64] = "double",
    };
    return names[dtype];
}

static const char *unsigned_type(fl_dtype dtype)
{
    return dtype == FL_I32 ? "uint" : dtype == FL_I64 ? "ulong" : "uchar";
}

static bool is_float(fl_dtype d) { return d == FL_F32 || d == FL_F64; }

/* A text buffer that remembers running out. */
typedef struct text {
    char *at;
    size_t left;
    bool full;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...)
{
    if (t->full)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->at, t->left, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= t->left) {
        t->full = true;
        return;
    }
    t->at += n;
    t->left -= (size_t)n;
}

/* The expression of a fused operation, or NULL. */
static const char *fused_expression(int op)
{
    switch (op) {
#define CASE(op, expr) \
    case op:           \
        return #expr;
        LAZY_UNARY_EXPRESSIONS(CASE)
        LAZY_BINARY_EXPRESSIONS(CASE)
        LAZY_LIBM_EXPRESSIONS(CASE)
#undef CASE
    default:
        return NULL;
    }
}

/* The expression of a typed operation on operands of dtype d (x, z), into buf, or
 * false where the operation does not take d. */
static bool typed_expression(int op, fl_dtype d, char *buf, size_t size)
{
    const char *T = kg_type(d), *U = unsigned_type(d);
    bool f = is_float(d), integer = d == FL_U8 || d == FL_I32 || d == FL_I64;
    int n = -1;
    switch (op) {
    case KG_NEG:
        n = f ? snprintf(buf, size, "-x") : integer ? snprintf(buf, size, "(%s)(-(%s)x)", T, U) : -1;
        break;
    case KG_ABS:
        n = f ? snprintf(buf, size, "fabs(x)") : integer ? snprintf(buf, size, "(x < 0 ? (%s)(-(%s)x) : x)", T, U) : -1;
        break;
    case KG_SIGN:
        n = f || integer ? snprintf(buf, size, "(%s)((x > 0) - (x < 0))", T) : -1;
        break;
    case KG_ADD:
    case KG_SUB:
    case KG_MUL: {
        char c = op == KG_ADD ? '+' : op == KG_SUB ? '-' : '*';
        /* on bool: or, exclusive or, and (the cpu backend's rule) */
        const char *logical = op == KG_ADD ? "x | z" : op == KG_SUB ? "(uchar)(x != z)" : "x & z";
        n = f         ? snprintf(buf, size, "x %c z", c)
            : integer ? snprintf(buf, size, "(%s)((%s)x %c (%s)z)", T, U, c, U)
                      : snprintf(buf, size, "%s", logical);
        break;
    }
    case KG_POW:
        n = f ? snprintf(buf, size, "powf(x, z)") : integer ? snprintf(buf, size, "(%s)kg_ipow(x, z)", T) : -1;
        break;
    case KG_MINIMUM:
        n = snprintf(buf, size, f ? "(x < z || x != x ? x : z)" : d == FL_BOOL ? "x & z" : "(x < z ? x : z)");
        break;
    case KG_MAXIMUM:
        n = snprintf(buf, size, f ? "(x > z || x != x ? x : z)" : d == FL_BOOL ? "x | z" : "(x > z ? x : z)");
        break;
    case KG_EQ: n = snprintf(buf, size, "(uchar)(x == z)"); break;
    case KG_NE: n = snprintf(buf, size, "(uchar)(x != z)"); break;
    case KG_LT: n = snprintf(buf, size, "(uchar)(x < z)"); break;
    case KG_LE: n = snprintf(buf, size, "(uchar)(x <= z)"); break;
    case KG_AND: n = d == FL_BOOL ? snprintf(buf, size, "(uchar)(x && z)") : -1; break;
    case KG_OR: n = d == FL_BOOL ? snprintf(buf, size, "(uchar)(x || z)") : -1; break;
    case KG_NOT: n = d == FL_BOOL ? snprintf(buf, size, "(uchar)!x") : -1; break;
    case KG_ISNAN: n = f ? snprintf(buf, size, "(uchar)(isnan(x) != 0)") : -1; break;
    case KG_ISINF: n = f ? snprintf(buf, size, "(uchar)(isinf(x) != 0)") : -1; break;
    default: break;
    }
    return n >= 0 && (size_t)n < size;
}

/* The conversion of x (dtype from, read as kg_type(from)) to dtype to, into buf. */
static void conversion(fl_dtype from, fl_dtype to, char *buf, size_t size)
{
    /* through float for the half types; to bool is "not zero" */
    char value[96];
    if (from == FL_F16)
        snprintf(value, sizeof value, "vload_half(0, (const __private half *)&x)");
    else if (from == FL_BF16)
        snprintf(value, sizeof value, "kg_bf16_load(x)");
    else
        snprintf(value, sizeof value, "x");
    if (to == FL_BOOL)
        snprintf(buf, size, "(uchar)(%s != 0)", value);
    else if (to == FL_F16)
        snprintf(buf, size, "kg_half_bits((float)(%s))", value);
    else if (to == FL_BF16)
        snprintf(buf, size, "kg_bf16_store((float)(%s))", value);
    else if ((from == FL_F32 || from == FL_F64 || from == FL_F16 || from == FL_BF16) && to == FL_U8)
        /* through int, so that -2 wraps to 254 as on the cpu backend and in PyTorch: a
         * float converted straight to uchar out of its range is undefined in OpenCL C,
         * and NVIDIA's gives 0 */
        snprintf(buf, size, "(uchar)(int)(%s)", value);
    else
        snprintf(buf, size, "(%s)(%s)", kg_type(to), value);
}

bool kg_elementwise(const kg_dialect *d, const kg_program *p, char *source, size_t size)
{
    text t = {source, size, false};
    const char *CT = kg_type(p->compute);
    if (p->compute == FL_F64)
        put(&t, "%s%s%s\n", d->prelude, d->f64_math, kernelgen_gelu_text);
    else
        put(&t, "%s%s%s%s\n", d->prelude, d->f32_math, kernelgen_vecmath_text, kernelgen_gelu_text);
    put(&t, "#define LAZY_T %s\n", CT);
    put(&t, "static ushort kg_half_bits(float f) { ushort h; vstore_half_rte(f, 0, (__private half *)&h); return h; }\n");
    put(&t, "%s fused(long n, %s shape", d->kernel, d->shape_type);
    bool strided = false;
    for (int k = 0; k < p->nleaves; k++) {
        put(&t, ", %s const %s *l%d, long o%d", d->global, kg_type(p->leaves[k].dtype), k, k);
        if (p->leaves[k].strided) {
            put(&t, ", %s s%d", d->shape_type, k);
            strided = true;
        }
    }
    for (int j = 0; j < p->nslots; j++)
        if (p->slots[j].op == KG_CONSTANT)
            put(&t, ", %s c%d", CT, j);
    for (int k = 0; k < p->noutputs; k++)
        put(&t, ", %s %s *y%d, long yo%d", d->global, kg_type(p->slots[p->outputs[k]].dtype), k, k);
    put(&t, ")\n{\n    long i = %s;\n    if (i >= n) return;\n", d->index);
    if (strided) {
        put(&t, "    long r = i, c;\n");
        for (int k = 0; k < p->nleaves; k++)
            if (p->leaves[k].strided)
                put(&t, "    long p%d = o%d;\n", k, k);
        for (int dim = p->ndim - 1; dim >= 0; dim--) {
            put(&t, "    c = r %% shape%s; r /= shape%s;\n", d->lanes[dim], d->lanes[dim]);
            for (int k = 0; k < p->nleaves; k++)
                if (p->leaves[k].strided)
                    put(&t, "    p%d += c * s%d%s;\n", k, k, d->lanes[dim]);
        }
    }
    for (int j = 0; j < p->nslots; j++) {
        const kg_slot *s = &p->slots[j];
        const char *T = kg_type(s->dtype);
        if (s->op == KG_LEAF) {
            int k = s->arg[0];
            if (p->leaves[k].strided)
                put(&t, "    const %s v%d = l%d[p%d];\n", T, j, k, k);
            else
                put(&t, "    const %s v%d = l%d[o%d + i];\n", T, j, k, k);
        } else if (s->op == KG_CONSTANT) {
            put(&t, "    const %s v%d = c%d;\n", T, j, j);
        } else if (s->op < KG_OP_BASE) {
            const char *expr = fused_expression(s->op);
            if (!expr)
                return false;
            put(&t, "    %s v%d;\n    { const %s x = (%s)v%d;", T, j, CT, CT, s->arg[0]);
            if (s->arg[1] >= 0)
                put(&t, " const %s z = (%s)v%d;", CT, CT, s->arg[1]);
            put(&t, " v%d = %s; }\n", j, expr);
        } else {
            fl_dtype in = p->slots[s->arg[0]].dtype;
            char expr[160];
            if (s->op == KG_CONVERT)
                conversion(in, s->dtype, expr, sizeof expr);
            else if (!typed_expression(s->op, in, expr, sizeof expr))
                return false;
            put(&t, "    %s v%d;\n    { const %s x = v%d;", T, j, kg_type(in), s->arg[0]);
            if (s->arg[1] >= 0)
                put(&t, " const %s z = v%d;", kg_type(in), s->arg[1]);
            put(&t, " v%d = %s; }\n", j, expr);
        }
    }
    for (int k = 0; k < p->noutputs; k++)
        put(&t, "    y%d[yo%d + i] = v%d;\n", k, k, p->outputs[k]);
    put(&t, "}\n");
    return !t.full;
}

/* "#define T", "#define IDENTITY" and "#define COMBINE(a, v)" of reduction op on
 * dtype, from KG_REDUCTIONS; false where op does not take dtype. */
static bool reduction_defines(text *t, int op, fl_dtype dtype)
{
    const char *identity = NULL, *combine = NULL;
    switch (op) {
#define CASE(id, name, ident, comb) \
    case id:                        \
        identity = ident;           \
        combine = comb;             \
        break;
        KG_REDUCTIONS(CASE)
#undef CASE
    default:
        return false;
    }
    /* The half types reduce in f32; sums and products of bool are i64 sums (the
     * tensor layer's rule), as on the cpu backend. */
    if (dtype == FL_F16 || dtype == FL_BF16 || (dtype == FL_BOOL && (op == LAZY_SUM || op == LAZY_PROD)))
        return false;
    /* Integer sums and products wrap, as unsigned arithmetic (the cpu backend's rule). */
    bool wrap = !is_float(dtype) && (op == LAZY_SUM || op == LAZY_PROD);
    put(t, "#define T %s\n#define IDENTITY (%s)\n", kg_type(dtype), identity);
    if (wrap)
        put(t, "#define COMBINE(a, v) ((T)((%s)(a) %c (%s)(v)))\n", unsigned_type(dtype), op == LAZY_SUM ? '+' : '*',
            unsigned_type(dtype));
    else
        put(t, "#define COMBINE(a, v) (%s)\n", combine);
    return true;
}

bool kg_reduction_defines(int op, fl_dtype dtype, char *text_out, size_t size)
{
    text t = {text_out, size, false};
    return reduction_defines(&t, op, dtype) && !t.full;
}

bool kg_reduce_rows(const kg_dialect *d, int op, fl_dtype dtype, int local_size, char *source, size_t size)
{
    text t = {source, size, false};
    put(&t, "%s\n", d->prelude);
    if (!reduction_defines(&t, op, dtype))
        return false;
    put(&t,
        "%s __attribute__((reqd_work_group_size(%d, 1, 1)))\n"
        "reduce(long rows, long k, long chunks, %s const T *a, long ao, %s T *y, long yo)\n"
        "{\n"
        "    __local T part[%d];\n"
        "    long g = get_group_id(0), row = g / chunks, chunk = g %% chunks;\n"
        "    long span = (k + chunks - 1) / chunks, begin = chunk * span, end = min(begin + span, k);\n"
        "    int lane = get_local_id(0);\n"
        "    T acc = IDENTITY;\n"
        "    if (row < rows) {\n"
        "        %s const T *x = a + ao + row * k;\n"
        "        for (long j = begin + lane; j < end; j += %d) { T v = x[j]; T a = acc; acc = COMBINE(a, v); }\n"
        "    }\n"
        "    part[lane] = acc;\n"
        "    barrier(CLK_LOCAL_MEM_FENCE);\n"
        "    for (int s = %d / 2; s > 0; s >>= 1) {\n"
        "        if (lane < s) { T a = part[lane], v = part[lane + s]; part[lane] = COMBINE(a, v); }\n"
        "        barrier(CLK_LOCAL_MEM_FENCE);\n"
        "    }\n"
        "    if (lane == 0 && row < rows) y[yo + g] = part[0];\n"
        "}\n",
        d->kernel, local_size, d->global, d->global, local_size, d->global, local_size, local_size);
    return !t.full;
}

/* The arguments of the strided kernels below: an input read as [outer, k, inner]
 * through strides, and a dense output. */
#define STRIDED_PARAMETERS "long outer, long k, long inner, %s const T *a, long ao, long so, long sk, long si, %s "

bool kg_reduce_columns(const kg_dialect *d, int op, fl_dtype dtype, char *source, size_t size)
{
    text t = {source, size, false};
    put(&t, "%s\n", d->prelude);
    if (!reduction_defines(&t, op, dtype))
        return false;
    put(&t,
        "%s reduce_columns(" STRIDED_PARAMETERS "T *y, long yo)\n"
        "{\n"
        "    long g = %s;\n"
        "    if (g >= outer * inner) return;\n"
        "    %s const T *x = a + ao + g / inner * so + g %% inner * si;\n"
        "    T acc = IDENTITY;\n"
        "    for (long j = 0; j < k; j++) { T v = x[j * sk]; T a = acc; acc = COMBINE(a, v); }\n"
        "    y[yo + g] = acc;\n"
        "}\n",
        d->kernel, d->global, d->global, d->index, d->global);
    return !t.full;
}

bool kg_arg_reduce(const kg_dialect *d, int op, fl_dtype dtype, int local_size, char *source, size_t size)
{
    if (op != LAZY_MAX && op != LAZY_MIN)
        return false;
    text t = {source, size, false};
    put(&t, "%s\n", d->prelude);
    if (!reduction_defines(&t, op, dtype))
        return false;
    /* v at iv replaces the candidate a at ia where the combination keeps v and not
     * a value equal to a (NaN counting as equal to NaN), or where they are equal and
     * v comes first: the first extreme, and the first NaN, as on the cpu backend. */
    put(&t,
        "#define KG_SAME(x, z) ((x) == (z) || ((x) != (x) && (z) != (z)))\n"
        "static bool kg_takes(T a, long ia, T v, long iv)\n"
        "{\n"
        "    if (KG_SAME(a, v)) return iv < ia;\n"
        "    T c = COMBINE(a, v);\n"
        "    return !KG_SAME(c, a);\n"
        "}\n"
        "%s __attribute__((reqd_work_group_size(%d, 1, 1)))\n"
        "arg_rows(" STRIDED_PARAMETERS "long *y, long yo)\n"
        "{\n"
        "    __local T best[%d];\n"
        "    __local long at[%d];\n"
        "    long row = get_group_id(0);\n"
        "    int lane = get_local_id(0);\n"
        "    T b = IDENTITY;\n"
        "    long ib = LONG_MAX;\n"
        "    if (row < outer * inner) {\n"
        "        %s const T *x = a + ao + row / inner * so + row %% inner * si;\n"
        "        for (long j = lane; j < k; j += %d) {\n"
        "            T v = x[j * sk];\n"
        "            if (kg_takes(b, ib, v, j)) { b = v; ib = j; }\n"
        "        }\n"
        "    }\n"
        "    best[lane] = b;\n"
        "    at[lane] = ib;\n"
        "    barrier(CLK_LOCAL_MEM_FENCE);\n"
        "    for (int s = %d / 2; s > 0; s >>= 1) {\n"
        "        if (lane < s && kg_takes(best[lane], at[lane], best[lane + s], at[lane + s])) {\n"
        "            best[lane] = best[lane + s];\n"
        "            at[lane] = at[lane + s];\n"
        "        }\n"
        "        barrier(CLK_LOCAL_MEM_FENCE);\n"
        "    }\n"
        "    if (lane == 0 && row < outer * inner) y[yo + row] = at[0];\n"
        "}\n"
        "%s arg_columns(" STRIDED_PARAMETERS "long *y, long yo)\n"
        "{\n"
        "    long g = %s;\n"
        "    if (g >= outer * inner) return;\n"
        "    %s const T *x = a + ao + g / inner * so + g %% inner * si;\n"
        "    T b = IDENTITY;\n"
        "    long ib = LONG_MAX;\n"
        "    for (long j = 0; j < k; j++) { T v = x[j * sk]; if (kg_takes(b, ib, v, j)) { b = v; ib = j; } }\n"
        "    y[yo + g] = ib;\n"
        "}\n",
        d->kernel, local_size, d->global, d->global, local_size, local_size, d->global, local_size, local_size,
        d->kernel, d->global, d->global, d->index, d->global);
    return !t.full;
}

bool kg_scan(const kg_dialect *d, int op, fl_dtype dtype, int local_size, char *source, size_t size)
{
    text t = {source, size, false};
    put(&t, "%s\n", d->prelude);
    if (!reduction_defines(&t, op, dtype))
        return false;
    put(&t,
        "%s scan_lines(" STRIDED_PARAMETERS "T *y, long yo)\n"
        "{\n"
        "    long g = %s;\n"
        "    if (g >= outer * inner) return;\n"
        "    %s const T *x = a + ao + g / inner * so + g %% inner * si;\n"
        "    %s T *out = y + yo + g / inner * k * inner + g %% inner;\n"
        "    T acc = IDENTITY;\n"
        "    for (long j = 0; j < k; j++) { T v = x[j * sk]; T a = acc; acc = COMBINE(a, v); out[j * inner] = acc; }\n"
        "}\n"
        /* A line a work-group at a time, in blocks of the group's size: each block is
         * scanned in local memory (Hillis and Steele) and continues the carry. */
        "%s __attribute__((reqd_work_group_size(%d, 1, 1)))\n"
        "scan_groups(" STRIDED_PARAMETERS "T *y, long yo)\n"
        "{\n"
        "    __local T part[%d];\n"
        "    long line = get_group_id(0);\n"
        "    int lane = get_local_id(0);\n"
        "    bool live = line < outer * inner;\n"
        "    %s const T *x = a + ao + line / inner * so + line %% inner * si;\n"
        "    %s T *out = y + yo + line / inner * k * inner + line %% inner;\n"
        "    T carry = IDENTITY;\n"
        "    for (long base = 0; base < k; base += %d) {\n"
        "        long j = base + lane;\n"
        "        part[lane] = live && j < k ? x[j * sk] : IDENTITY;\n"
        "        barrier(CLK_LOCAL_MEM_FENCE);\n"
        "        for (int s = 1; s < %d; s <<= 1) {\n"
        "            T earlier = lane >= s ? part[lane - s] : IDENTITY;\n"
        "            barrier(CLK_LOCAL_MEM_FENCE);\n"
        "            if (lane >= s) { T a = earlier, v = part[lane]; part[lane] = COMBINE(a, v); }\n"
        "            barrier(CLK_LOCAL_MEM_FENCE);\n"
        "        }\n"
        "        if (live && j < k) { T a = carry, v = part[lane]; out[j * inner] = COMBINE(a, v); }\n"
        "        { T a = carry, v = part[%d - 1]; carry = COMBINE(a, v); }\n"
        "        barrier(CLK_LOCAL_MEM_FENCE);\n"
        "    }\n"
        "}\n",
        d->kernel, d->global, d->global, d->index, d->global, d->global, d->kernel, local_size, d->global, d->global,
        local_size, d->global, d->global, local_size, local_size, local_size);
    return !t.full;
}
