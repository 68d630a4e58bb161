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
    else if ((from == FL_F32 || from == FL_F64 || from == FL_F16 || from == FL_BF16) &&
             (to == FL_U8 || to == FL_I32 || to == FL_I64))
        snprintf(buf, size, "(%s)(%s)", kg_type(to), value); /* truncates toward zero, as C does */
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

bool kg_reduce_rows(const kg_dialect *d, int op, fl_dtype dtype, int local_size, char *source, size_t size)
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
    if (dtype == FL_F16 || dtype == FL_BF16)
        return false;
    text t = {source, size, false};
    const char *T = kg_type(dtype);
    /* Integer sums and products wrap, as unsigned arithmetic (the cpu backend's rule). */
    bool wrap = !is_float(dtype) && (op == LAZY_SUM || op == LAZY_PROD);
    put(&t, "%s\n#define T %s\n", d->prelude, T);
    if (wrap)
        put(&t, "#define COMBINE(a, v) ((T)((%s)(a) %c (%s)(v)))\n", unsigned_type(dtype), op == LAZY_SUM ? '+' : '*',
            unsigned_type(dtype));
    else
        put(&t, "#define COMBINE(a, v) (%s)\n", combine);
    put(&t,
        "%s __attribute__((reqd_work_group_size(%d, 1, 1)))\n"
        "void reduce(long rows, long k, %s const T *a, long ao, %s T *y, long yo)\n"
        "{\n"
        "    __local T part[%d];\n"
        "    long row = get_group_id(0);\n"
        "    int lane = get_local_id(0);\n"
        "    T acc = %s;\n"
        "    if (row < rows) {\n"
        "        %s const T *x = a + ao + row * k;\n"
        "        for (long j = lane; j < k; j += %d) { T v = x[j]; T a = acc; acc = COMBINE(a, v); }\n"
        "    }\n"
        "    part[lane] = acc;\n"
        "    barrier(CLK_LOCAL_MEM_FENCE);\n"
        "    for (int s = %d / 2; s > 0; s >>= 1) {\n"
        "        if (lane < s) { T a = part[lane], v = part[lane + s]; part[lane] = COMBINE(a, v); }\n"
        "        barrier(CLK_LOCAL_MEM_FENCE);\n"
        "    }\n"
        "    if (lane == 0 && row < rows) y[yo + row] = part[0];\n"
        "}\n",
        d->kernel, local_size, d->global, d->global, local_size, identity, d->global, local_size, local_size);
    return !t.full;
}
