/*
 * The unary and binary elementwise entries. f32 operations with an expression in
 * kernelgen/expressions.h become pending nodes (fuse.c); f64 ones run the same
 * expressions in double at once; integer, boolean and comparison operations run the
 * generator's typed expressions at once.
 */
#include "opencl.h"

/* Runs op on a (and b) now, as a one-operation program: a lazy_op in the compute
 * type of the operands (f32 or f64) or a KG_* typed op. */
int ocl_run_now(const char *name, fl_tensor *out, int op, const fl_tensor *a, const fl_tensor *b)
{
    const fl_tensor *leaves[2] = {a, b};
    int nleaves = b ? 2 : 1;
    for (int k = 0; k < nleaves; k++)
        if (!ocl_value(leaves[k]))
            return FL_ERR_BACKEND;
    int rc = ocl_alloc(out);
    if (rc)
        return rc;
    kg_program p = {.ndim = out->ndim, .compute = a->dtype == FL_F64 ? FL_F64 : FL_F32, .nleaves = nleaves};
    for (int k = 0; k < nleaves; k++) {
        p.leaves[k] = (kg_leaf){leaves[k]->dtype, !ocl_impl(leaves[k])->contiguous};
        p.slots[p.nslots++] = (kg_slot){KG_LEAF, {k, -1}, leaves[k]->dtype};
    }
    p.slots[p.nslots++] = (kg_slot){op, {0, b ? 1 : -1}, out->dtype};
    p.outputs[p.noutputs++] = p.nslots - 1;
    return ocl_run_program(name, &p, leaves, NULL, &out);
}

static bool is_float(fl_dtype d) { return d == FL_F32 || d == FL_F64; }

/* An f32 or f64 operation with a fused expression: pending on f32, else now. */
static int float_op(const char *name, fl_tensor *out, int op, const fl_tensor *a, const fl_tensor *b)
{
    if (a->dtype == FL_F32)
        return ocl_defer(out, op, a, b);
    return ocl_run_now(name, out, op, a, b);
}

#define FLOAT_UNARY(name, op)                                                                   \
    static int ocl_##name(const fl_backend *self, fl_tensor *out, const fl_tensor *a)           \
    {                                                                                           \
        (void)self;                                                                             \
        if (!is_float(a->dtype))                                                                \
            return fl_backend_error(FL_ERR_DTYPE, #name " takes f32 or f64 on opencl");         \
        return float_op(#name, out, op, a, NULL);                                               \
    }

/* Operations with a typed form for the dtypes the fused list does not cover. */
#define NUMERIC_UNARY(name, op, typed)                                                          \
    static int ocl_##name(const fl_backend *self, fl_tensor *out, const fl_tensor *a)           \
    {                                                                                           \
        (void)self;                                                                             \
        return is_float(a->dtype) ? float_op(#name, out, op, a, NULL) : ocl_run_now(#name, out, typed, a, NULL); \
    }

#define TYPED_UNARY(name, typed)                                                                \
    static int ocl_##name(const fl_backend *self, fl_tensor *out, const fl_tensor *a)           \
    {                                                                                           \
        (void)self;                                                                             \
        return ocl_run_now(#name, out, typed, a, NULL);                                             \
    }

#define NUMERIC_BINARY(name, op, typed)                                                                    \
    static int ocl_##name(const fl_backend *self, fl_tensor *out, const fl_tensor *a, const fl_tensor *b)  \
    {                                                                                                      \
        (void)self;                                                                                        \
        return is_float(a->dtype) ? float_op(#name, out, op, a, b) : ocl_run_now(#name, out, typed, a, b);     \
    }

#define TYPED_BINARY(name, typed)                                                                          \
    static int ocl_##name(const fl_backend *self, fl_tensor *out, const fl_tensor *a, const fl_tensor *b)  \
    {                                                                                                      \
        (void)self;                                                                                        \
        return ocl_run_now(#name, out, typed, a, b);                                                           \
    }

NUMERIC_UNARY(neg, LAZY_NEG, KG_NEG)
NUMERIC_UNARY(abs, LAZY_ABS, KG_ABS)
NUMERIC_UNARY(sign, LAZY_SIGN, KG_SIGN)
FLOAT_UNARY(exp, LAZY_EXP)
FLOAT_UNARY(log, LAZY_LOG)
FLOAT_UNARY(log1p, LAZY_LOG1P)
FLOAT_UNARY(sqrt, LAZY_SQRT)
FLOAT_UNARY(rsqrt, LAZY_RSQRT)
FLOAT_UNARY(sin, LAZY_SIN)
FLOAT_UNARY(cos, LAZY_COS)
FLOAT_UNARY(tanh, LAZY_TANH)
FLOAT_UNARY(sigmoid, LAZY_SIGMOID)
FLOAT_UNARY(erf, LAZY_ERF)
FLOAT_UNARY(floor, LAZY_FLOOR)
FLOAT_UNARY(ceil, LAZY_CEIL)
FLOAT_UNARY(round, LAZY_ROUND)
TYPED_UNARY(isnan, KG_ISNAN)
TYPED_UNARY(isinf, KG_ISINF)
TYPED_UNARY(logical_not, KG_NOT)

NUMERIC_BINARY(add, LAZY_ADD, KG_ADD)
NUMERIC_BINARY(sub, LAZY_SUB, KG_SUB)
NUMERIC_BINARY(mul, LAZY_MUL, KG_MUL)
NUMERIC_BINARY(pow, LAZY_POW, KG_POW)
NUMERIC_BINARY(minimum, LAZY_MINIMUM, KG_MINIMUM)
NUMERIC_BINARY(maximum, LAZY_MAXIMUM, KG_MAXIMUM)
TYPED_BINARY(eq, KG_EQ)
TYPED_BINARY(ne, KG_NE)
TYPED_BINARY(lt, KG_LT)
TYPED_BINARY(le, KG_LE)
TYPED_BINARY(logical_and, KG_AND)
TYPED_BINARY(logical_or, KG_OR)

/* The tensor layer divides integers in floating point, so div sees floats only. */
static int ocl_div(const fl_backend *self, fl_tensor *out, const fl_tensor *a, const fl_tensor *b)
{
    (void)self;
    if (!is_float(a->dtype))
        return fl_backend_error(FL_ERR_DTYPE, "div takes f32 or f64 on opencl");
    return float_op("div", out, LAZY_DIV, a, b);
}

void ocl_register_elementwise(fl_backend *b)
{
#define SET(name) b->name = ocl_##name;
    SET(neg) SET(abs) SET(sign) SET(exp) SET(log) SET(log1p) SET(sqrt) SET(rsqrt) SET(sin) SET(cos) SET(tanh)
    SET(sigmoid) SET(erf) SET(floor) SET(ceil) SET(round) SET(isnan) SET(isinf) SET(logical_not)
    SET(add) SET(sub) SET(mul) SET(div) SET(pow) SET(minimum) SET(maximum) SET(eq) SET(ne) SET(lt) SET(le)
    SET(logical_and) SET(logical_or)
#undef SET
}
