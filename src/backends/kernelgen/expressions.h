/*
 * The elementwise operations that fused kernels compute, each written once as an
 * expression in its operands x and z. Every generator of kernels reads these lists:
 * the lazy backend's interpreter (lazy/apply.c) expands them into loops, its compiler
 * (lazy/compile.c) writes them as C text, and the device generator
 * (kernelgen/kernelgen.c) writes them as OpenCL C, so an operation added here reaches
 * all of them. vm_* are the cpu backend's vecmath.h and GELU_* its gelu.h on the CPU;
 * a device generator maps them to its language's built-ins.
 */
#ifndef FLARE_KERNELGEN_EXPRESSIONS_H
#define FLARE_KERNELGEN_EXPRESSIONS_H

/* The type the expressions compute in: float on the CPU (the lazy backend fuses f32
 * only); a device kernel defines it as its compute type, so that f64 kernels keep
 * GELU's constants in double. */
#ifndef LAZY_T
#define LAZY_T float
#endif

/* Every kind of node, in enum order, with the backend primitive it stands for (memory
 * telemetry attributes a node's materialization to it): X(op, primitive name). */
#define LAZY_OPS(X)                                                                          \
    X(LAZY_VALUE, "value") /* materialized: value holds the CPU tensor */                    \
    X(LAZY_CONSTANT, "full")                                                                 \
    /* a pending operation's values under another shape: row-major order is kept, so in   \
     * a fused pass it is its operand's values, and written out it is a view of them */    \
    X(LAZY_RESHAPE, "reshape")                                                               \
    /* an f32 conversion of a value of another dtype (bool, u8, i32, i64, f64): a fused    \
     * pass reads the value and converts it as it goes, like a leaf */                     \
    X(LAZY_CAST, "cast")                                                                     \
    /* unary, f32 */                                                                       \
    X(LAZY_NEG, "neg") X(LAZY_ABS, "abs") X(LAZY_SIGN, "sign") X(LAZY_EXP, "exp")            \
    X(LAZY_LOG, "log") X(LAZY_LOG1P, "log1p") X(LAZY_SQRT, "sqrt") X(LAZY_RSQRT, "rsqrt")    \
    X(LAZY_SIN, "sin") X(LAZY_COS, "cos") X(LAZY_TANH, "tanh") X(LAZY_SIGMOID, "sigmoid")    \
    X(LAZY_ERF, "erf") X(LAZY_GELU, "gelu") X(LAZY_GELU_TANH, "gelu") X(LAZY_FLOOR, "floor") \
    X(LAZY_CEIL, "ceil") X(LAZY_ROUND, "round")                                              \
    /* binary, f32 */                                                                      \
    X(LAZY_ADD, "add") X(LAZY_SUB, "sub") X(LAZY_MUL, "mul") X(LAZY_DIV, "div")              \
    X(LAZY_POW, "pow") X(LAZY_MINIMUM, "minimum") X(LAZY_MAXIMUM, "maximum")                 \
    X(LAZY_GELU_GRAD, "gelu") X(LAZY_GELU_TANH_GRAD, "gelu") /* of (x, dy) */

#define LAZY_ENUM_ENTRY(op, primitive) op,
typedef enum lazy_op { LAZY_OPS(LAZY_ENUM_ENTRY) LAZY_OP_COUNT } lazy_op;

#define LAZY_FIRST_BINARY LAZY_ADD

/* sin, cos and pow are in LAZY_LIBM_EXPRESSIONS: their vector forms fall back to libm
 * for some arguments, which the lazy interpreter does and its compiled kernels do not,
 * so only the interpreter and device generators use that list. */
#define LAZY_UNARY_EXPRESSIONS(X)                                                   \
    X(LAZY_NEG, -x)                                                                 \
    X(LAZY_ABS, fabsf(x))                                                           \
    X(LAZY_SIGN, (LAZY_T)((x > 0) - (x < 0)))                                        \
    X(LAZY_EXP, vm_expf(x))                                                         \
    X(LAZY_LOG, vm_logf(x))                                                         \
    X(LAZY_LOG1P, vm_log1pf(x))                                                     \
    X(LAZY_SQRT, sqrtf(x))                                                          \
    X(LAZY_RSQRT, 1.0f / sqrtf(x))                                                  \
    X(LAZY_TANH, vm_tanhf(x))                                                       \
    X(LAZY_SIGMOID, vm_sigmoidf(x))                                                 \
    X(LAZY_ERF, vm_erff(x))                                                         \
    X(LAZY_GELU, GELU_VALUE(LAZY_T, x, vm_erff))                                     \
    X(LAZY_GELU_TANH, GELU_TANH_VALUE(LAZY_T, x, GELU_TANH_TERM(LAZY_T, x, vm_tanhf))) \
    X(LAZY_FLOOR, vm_floorf(x))                                                     \
    X(LAZY_CEIL, vm_ceilf(x))                                                       \
    X(LAZY_ROUND, nearbyintf(x))

#define LAZY_BINARY_EXPRESSIONS(X)                                                            \
    X(LAZY_ADD, x + z)                                                                        \
    X(LAZY_SUB, x - z)                                                                        \
    X(LAZY_MUL, x * z)                                                                        \
    X(LAZY_DIV, x / z)                                                                        \
    X(LAZY_MINIMUM, x < z || x != x ? x : z)                                                  \
    X(LAZY_MAXIMUM, x > z || x != x ? x : z)                                                  \
    X(LAZY_GELU_GRAD, z * GELU_SLOPE(LAZY_T, x, vm_erff, vm_expf))                             \
    X(LAZY_GELU_TANH_GRAD, z * GELU_TANH_SLOPE(LAZY_T, x, GELU_TANH_TERM(LAZY_T, x, vm_tanhf)))

/* The reductions a fused pass or a device kernel computes (kernelgen.h has their
 * identities and combinations). */
enum { LAZY_SUM, LAZY_PROD, LAZY_MAX, LAZY_MIN };

#define LAZY_LIBM_EXPRESSIONS(X) \
    X(LAZY_SIN, sinf(x))         \
    X(LAZY_COS, cosf(x))         \
    X(LAZY_POW, powf(x, z))

#endif
