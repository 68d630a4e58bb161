/*
 * The interpreter's operations over one tile of a fused pass (fuse.c), from the same
 * expressions as the compiled kernels (lazy.h) and the CPU backend's vector math.
 * Like the cpu backend's kernel families it is compiled once per instruction set
 * (CMakeLists.txt), and fuse.c runs the variant of the level the cpu kernels run
 * at, which is also the level kernels are compiled for: with or without fused
 * multiply-add alike (vecmath.h's VM_FMA), so a pass gives the same bits whether or
 * not its kernel has been compiled yet.
 */
#include <math.h>

#include "../cpu/cpu.h"
#include "../cpu/gelu.h"
#include "../cpu/vecmath.h"
#include "lazy.h"

/* y[i] = expr(x[i]) over n dense elements. */
#define UNARY_LOOP(expr)                          \
    for (int64_t i = 0; i < n; i++) {             \
        float x = a[i];                           \
        y[i] = (expr);                            \
    }

/* y[i] = expr(a, b) where each operand is dense or a single value (stride 0). */
#define BINARY_LOOP(expr)                                      \
    if (sa && sb)                                              \
        for (int64_t i = 0; i < n; i++) {                      \
            float x = a[i], z = b[i];                          \
            y[i] = (expr);                                     \
        }                                                      \
    else if (sa) {                                             \
        const float z = *b;                                    \
        for (int64_t i = 0; i < n; i++) {                      \
            float x = a[i];                                    \
            y[i] = (expr);                                     \
        }                                                      \
    } else {                                                   \
        const float x = *a;                                    \
        for (int64_t i = 0; i < n; i++) {                      \
            float z = b[i];                                    \
            y[i] = (expr);                                     \
        }                                                      \
    }

/* sin and cos as the CPU backend computes them: the vector form, then libm for the
 * arguments it does not reduce exactly. */
#define TRIG_LOOP(name)                               \
    do {                                              \
        UNARY_LOOP(vm_##name##f(x))                   \
        for (int64_t i = 0; i < n; i++)               \
            if (!vm_trig_in_range(a[i]))              \
                y[i] = name##f(a[i]);                 \
    } while (0)

void lazy_apply(lazy_op op, float *restrict y, const float *a, bool sa, const float *b, bool sb, int64_t n)
{
#define UNARY_CASE(op, expr) case op: UNARY_LOOP(expr) break;
#define BINARY_CASE(op, expr) case op: BINARY_LOOP(expr) break;
    switch (op) {
    LAZY_UNARY_EXPRESSIONS(UNARY_CASE)
    LAZY_BINARY_EXPRESSIONS(BINARY_CASE)
    case LAZY_SIN: TRIG_LOOP(sin); break;
    case LAZY_COS: TRIG_LOOP(cos); break;
    case LAZY_POW: BINARY_LOOP(z == 2.0f ? x * x : powf(x, z)) break;
    default: break;
    }
#undef UNARY_CASE
#undef BINARY_CASE
}
