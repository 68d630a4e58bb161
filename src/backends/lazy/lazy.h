/*
 * The lazy backend: operations build an expression graph; values are computed only
 * when something reads them (to_host, eval, or an operation this backend does not
 * fuse, which then runs on the CPU backend). Chains of f32 elementwise operations,
 * with their broadcast operands and constants, are fused into one pass over memory
 * in cache-sized tiles (fuse.c); a reduction over trailing axes of such a chain is
 * fused into the same pass.
 *
 * A tensor is a node: either a value (a CPU tensor, possibly a strided view), a
 * constant (an f32 fill, which costs no memory until it is read), or a pending
 * operation on other lazy tensors, which it holds references to. Materializing a
 * node turns it into a value and drops its operands, so the graph behind it is freed.
 */
#ifndef FLARE_LAZY_H
#define FLARE_LAZY_H

#include <stdbool.h>
#include <stdint.h>

#include "flare/backend.h"

#include "../cpu/cpu.h"
#include "../kernelgen/expressions.h"
#include "flare/profile.h" /* fl_lazy_traffic */

typedef struct lazy_tensor {
    lazy_op op;
    fl_tensor *value;   /* the CPU tensor, once materialized */
    fl_tensor *args[2]; /* a pending operation's operands (lazy tensors of the same shape,
                           or for a reshape of the same size) */
    float constant;
    int nodes; /* pending operations in the graph below, repeats counted, saturating */
    int passes; /* fused passes that computed this pending node without keeping it, saturating */
    /* A copy of the last fused reduction of this pending node, whose values never
     * change: the same reduction asked again (layer norm's mean, then fl_var's own)
     * is a copy of it instead of a pass. */
    fl_tensor *reduced;
    unsigned reduced_axes;
    int reduced_op;
} lazy_tensor;

/* A graph may hold at most this many pending operations: a longer one is cut by
 * materializing an operand first, so that a loop that never reads its values keeps
 * memory bounded, and a fused program stays small enough for its tiles to stay in
 * cache. */
#define LAZY_MAX_NODES 48

static inline lazy_tensor *lazy_impl(const fl_tensor *t) { return (lazy_tensor *)t->impl; }

/* fuse.c: computes the pending node t (and every pending node under it that is held
 * from outside the graph) in one pass; t becomes a value. Returns 0 or an fl_status. */
int lazy_run(const fl_tensor *t);
/* out (f32, reduced axes kept as size 1) = op over the axes of the pending node a,
 * fused with a's graph. Returns -1 if the reduction is not of a fusable form (the
 * caller then materializes a and delegates), else 0 or an fl_status. */
int lazy_run_reduction(fl_tensor *out, const fl_tensor *a, unsigned axes, int op);

/* apply.c: y = op over n elements of a (and b for binary operations), each dense or,
 * where sa or sb is false, one value for all (its stride is 0). Compiled per
 * instruction set like the cpu kernels (cpu.h, CPU_FAMILIES); lazy_interpreter
 * (fuse.c) is the one of the level the cpu kernels run at. */
#ifdef CPU_VARIANT
#define lazy_apply CPU_JOIN(lazy_apply, CPU_VARIANT)
#endif
typedef void (*lazy_apply_fn)(lazy_op op, float *restrict y, const float *a, bool sa, const float *b, bool sb,
                              int64_t n);
void lazy_apply(lazy_op op, float *restrict y, const float *a, bool sa, const float *b, bool sb, int64_t n);

/* compile.c: a fused program as one compiled loop. Slot i of a kernel is an input
 * (read from in[i]: a leaf, a converted cast or a constant, one value for the tile if
 * scalar), a reshape (its operand's values), or an operation of fuse.c's apply on
 * slots arg[0] and arg[1]; an output is also written to out[i]. */
typedef struct lazy_kernel_slot {
    int op;
    int arg[2];
    bool input, scalar, output;
} lazy_kernel_slot;

typedef void (*lazy_kernel)(long n, const float *const *in, float *const *out);

/* The compiled kernel of the program, or NULL: not compilable, not compiled yet (it
 * is being compiled in the background), or compiling failed. */
lazy_kernel lazy_kernel_for(const lazy_kernel_slot *slots, int count);

/* Passes over fewer elements stay interpreted. */
#define LAZY_COMPILE_MIN (1 << 16)

enum { LAZY_COMPILE_OFF, LAZY_COMPILE_SYNC, LAZY_COMPILE_ASYNC };
/* Override the lazy_compile and compiler settings (tests; NULL: the setting's). */
void lazy_compile_set_mode(int mode);
void lazy_compile_set_compiler(const char *cc);
/* Stops running compilers, removes their temporaries and joins the background
 * thread (fl_shutdown). */
void lazy_compile_shutdown(void);

typedef struct lazy_compile_stats {
    uint64_t compiled, loaded, failed; /* kernels compiled, loaded from the cache, failed */
} lazy_compile_stats;
lazy_compile_stats lazy_compile_stats_get(void);

/* lazy.c: wraps a CPU tensor (taking the reference) as the value of out. */
int lazy_adopt(fl_tensor *out, fl_tensor *value);

#endif
