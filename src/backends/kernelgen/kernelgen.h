/*
 * The device kernel generator: the source of elementwise kernels, fused or single,
 * and of reductions, written from the expression lists (expressions.h) in a device
 * language described by a dialect. It knows nothing of a runtime: it returns text,
 * which the OpenCL backend builds with clBuildProgram and a CUDA backend would build
 * with NVRTC, given a dialect of its own (what kg_dialect asks for is all it differs
 * in).
 *
 * A kernel's element i is the i-th element of its output in row-major order. Each
 * input ("leaf") is read either dense from an offset (element offset + i) or through
 * its strides over the output's shape, which is how a broadcast operand (stride 0) or
 * a permuted view is read without a copy.
 */
#ifndef FLARE_KERNELGEN_H
#define FLARE_KERNELGEN_H

#include <stdbool.h>
#include <stddef.h>

#include "flare/tensor.h"

#include "expressions.h"

typedef struct kg_dialect {
    const char *name;
    /* Text before every kernel: the language's spelling of vm_*, fabsf, ... and of the
     * helpers the typed expressions use. */
    const char *prelude;
    /* What f32 kernels add to read the cpu backend's vecmath.h (pasted after it), and
     * what f64 kernels add instead: vm_* as the language's double built-ins. */
    const char *f32_math, *f64_math;
    const char *kernel;  /* what starts a kernel: "__kernel void" */
    const char *global;  /* the qualifier of a pointer to device memory: "__global" */
    const char *index;   /* the flat index of the work item, a long: "(long)get_global_id(0)" */
    const char *shape_type; /* a vector of FL_MAX_DIMS longs passed by value: "long8" */
    const char *lanes[FL_MAX_DIMS]; /* its components: ".s0", ... */
} kg_dialect;

extern const kg_dialect kg_opencl;

/* The language's type of a dtype's elements (bool: "uchar"; f16, bf16: "ushort"). */
const char *kg_type(fl_dtype dtype);

/* Operations besides the fused f32 ones, on any dtype they accept: integer
 * arithmetic, comparisons, logic and float tests. KG_OP_BASE + k is the k-th. */
#define KG_TYPED_OPS(X)                                                                              \
    X(KG_NEG, "neg") X(KG_ABS, "abs") X(KG_SIGN, "sign") X(KG_ADD, "add") X(KG_SUB, "sub")           \
    X(KG_MUL, "mul") X(KG_POW, "pow") X(KG_MINIMUM, "minimum") X(KG_MAXIMUM, "maximum")              \
    X(KG_EQ, "eq") X(KG_NE, "ne") X(KG_LT, "lt") X(KG_LE, "le") X(KG_AND, "logical_and")             \
    X(KG_OR, "logical_or") X(KG_NOT, "logical_not") X(KG_ISNAN, "isnan") X(KG_ISINF, "isinf")        \
    X(KG_CONVERT, "cast")
#define KG_OP_BASE 1000
#define KG_ENUM(op, name) op,
enum { KG_TYPED_FIRST = KG_OP_BASE - 1, KG_TYPED_OPS(KG_ENUM) KG_TYPED_END };
#define KG_LEAF (-1)
#define KG_CONSTANT (-2)

#define KG_MAX_LEAVES 16
#define KG_MAX_SLOTS 64
#define KG_MAX_OUTPUTS 4

/* Slot of a program: a leaf (op KG_LEAF: leaf index in arg[0]), a constant (op
 * KG_CONSTANT: a kernel argument of the compute type), or an operation on earlier
 * slots: a lazy_op of expressions.h, computed in the program's compute type, or a
 * KG_* typed operation. */
typedef struct kg_slot {
    int op;
    int arg[2];
    fl_dtype dtype; /* the slot's value: the compute type, or what a typed op gives */
} kg_slot;

typedef struct kg_leaf {
    fl_dtype dtype;
    bool strided; /* read through strides; else dense from its offset */
} kg_leaf;

typedef struct kg_program {
    int ndim; /* of the output, for strided leaves */
    fl_dtype compute; /* f32 or f64: leaves read into lazy_op slots are converted to it */
    int nleaves, nslots, noutputs;
    kg_leaf leaves[KG_MAX_LEAVES];
    kg_slot slots[KG_MAX_SLOTS];
    int outputs[KG_MAX_OUTPUTS]; /* slots, each written dense to an output of its dtype */
} kg_program;

/* Writes the kernel "fused" computing p into source (size bytes). Its arguments, in
 * order: long n; the output's shape (shape_type); per leaf its buffer, its offset
 * (long, elements) and, if strided, its strides (shape_type); per constant slot, in
 * slot order, its value (compute type); per output its buffer and offset. Returns
 * false if the text does not fit or an operation has no expression for its dtype. */
bool kg_elementwise(const kg_dialect *d, const kg_program *p, char *source, size_t size);

/* Reductions, each an identity and a combination of an accumulator a and a value v,
 * in the accumulator's type T (the element type). */
#define KG_REDUCTIONS(X)                                                                         \
    X(LAZY_SUM, "sum", "(T)0", "a + v")                                                          \
    X(LAZY_PROD, "prod", "(T)1", "a * v")                                                        \
    X(LAZY_MAX, "max", "KG_LOWEST(T)", "(v > a || v != v) ? v : a")                              \
    X(LAZY_MIN, "min", "KG_HIGHEST(T)", "(v < a || v != v) ? v : a")

/* Writes the kernel "reduce" of rows, dense and contiguous: each row of k elements is
 * cut into chunks spans of equal length (the last shorter), and a work-group of
 * local_size (a power of two) reduces each, y[yo + row * chunks + chunk] receiving
 * it; with chunks 1, y[yo + row] = op over the row. Its arguments: long rows, long k,
 * long chunks, the input buffer and offset, the output buffer and offset. */
bool kg_reduce_rows(const kg_dialect *d, int op, fl_dtype dtype, int local_size, char *source, size_t size);

/* The definitions of reduction op on dtype, for kernels that accumulate with it
 * (a scatter-add): "#define T <type>", IDENTITY and COMBINE(a, v), the combination of
 * KG_REDUCTIONS (integer sums and products wrapping). False where op does not take
 * dtype: the half types (which reduce in f32) and sums and products of bool. */
bool kg_reduction_defines(int op, fl_dtype dtype, char *text, size_t size);

/* The kernels below read their input as [outer, k, inner] through strides and walk
 * k; their arguments: long outer, long k, long inner, the input buffer, its offset
 * and its strides so, sk, si (longs, elements), the output buffer and offset. The
 * output is dense, outer * inner elements (reductions) or the input's (scans). */

/* "reduce_columns": out[o * inner + i] = op over a[o, 0 .. k, i], one work item per
 * output, which walks k in order: for many outputs each reducing few elements. */
bool kg_reduce_columns(const kg_dialect *d, int op, fl_dtype dtype, char *source, size_t size);

/* Arg-extrema of op LAZY_MAX or LAZY_MIN, as i64 indices along k: the first element
 * that op's combination keeps over the others, a NaN taking the place of the
 * extreme. Two kernels: "arg_rows", a work-group of local_size (a power of two) per
 * output, and "arg_columns", a work item per output. */
bool kg_arg_reduce(const kg_dialect *d, int op, fl_dtype dtype, int local_size, char *source, size_t size);

/* Inclusive scans with op along k (cumsum with LAZY_SUM), out[o, j, i] = op over
 * a[o, 0 .. j, i]: "scan_lines", a work item per line walking it in order, and
 * "scan_groups", a work-group of local_size (a power of two) per line. */
bool kg_scan(const kg_dialect *d, int op, fl_dtype dtype, int local_size, char *source, size_t size);

#endif
