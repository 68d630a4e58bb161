/*
 * The lazy backend's table: graph building for the operations it fuses, and for
 * everything else a delegation to the CPU backend on materialized operands.
 *
 * Delegation goes through the table registered as "cpu" at call time, so an entry
 * of cpu replaced by registering a derived table is used here too wherever this
 * backend delegates (everything but the f32 elementwise work it fuses itself), and
 * the lazy backend stays small: it owns only what it does differently.
 */
#define _GNU_SOURCE /* PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP */
#include "lazy.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../cpu/cpu.h"


/* The table delegated to: the one registered as "cpu", whose storage fused passes
 * write into directly (a replacement registered under that name keeps cpu's release,
 * and so its storage). Its address never changes; its entries may. */
static const fl_backend *delegate(void)
{
    static const fl_backend *cpu;
    const fl_backend *found = __atomic_load_n(&cpu, __ATOMIC_ACQUIRE);
    if (!found) {
        found = fl_backend_find("cpu");
        __atomic_store_n(&cpu, found, __ATOMIC_RELEASE);
    }
    return found;
}

/* Materializing a node changes it and the nodes under it (they become values and
 * drop their operands), and graphs share nodes across threads: a tensor read by two
 * threads is computed by one, under this lock, which every entry that reads or
 * changes an operand's node holds. Recursive: materializing reaches entries that
 * take it again. */
static pthread_mutex_t graph_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

static void lock(void) { pthread_mutex_lock(&graph_lock); }

static void unlock(void) { pthread_mutex_unlock(&graph_lock); }

/* The int that expr gives, computed under the graph lock. */
#define LOCKED(expr)           \
    ({                         \
        lock();                \
        int rc_ = (expr);      \
        unlock();              \
        rc_;                   \
    })

/* Calls the cpu table's entry. A replaced cpu table may have left it NULL (a fused
 * kernel set aside, as backend.h suggests when its parts are replaced): the call is
 * then declined with FL_ERR_UNSUPPORTED, which the tensor layer answers by composing
 * where the entry is optional and reports where it is not. */
#define ON_CPU(entry, ...)                                                                              \
    ({                                                                                                  \
        const fl_backend *cpu_ = delegate();                                                            \
        cpu_->entry ? cpu_->entry(cpu_, __VA_ARGS__)                                                    \
                    : fl_backend_error(FL_ERR_UNSUPPORTED, "the cpu table has no entry '%s'", #entry); \
    })

/* ---- nodes ---- */

static lazy_tensor *node_new(fl_tensor *out, lazy_op op)
{
    lazy_tensor *l = calloc(1, sizeof *l);
    if (!l) {
        fl_backend_error(FL_ERR_MEMORY, "cannot allocate a lazy node");
        return NULL;
    }
    l->op = op;
    out->impl = l;
    return l;
}

int lazy_adopt(fl_tensor *out, fl_tensor *value)
{
    lazy_tensor *l = node_new(out, LAZY_VALUE);
    if (!l) {
        fl_release(value);
        return FL_ERR_MEMORY;
    }
    l->value = value;
    return 0;
}

static void lazy_release(const fl_backend *self, fl_tensor *t)
{
    lazy_tensor *l = t->impl;
    fl_release(l->value);
    fl_release(l->args[0]);
    fl_release(l->args[1]);
    fl_release(l->reduced);
    free(l);
    t->impl = NULL;
}

/* A fresh CPU handle with out's metadata, for a delegated primitive to fill. */
static fl_tensor *cpu_twin(const fl_tensor *out)
{
    fl_tensor *t = fl_tensor_alloc(delegate(), out->dtype, out->ndim, out->shape);
    if (!t)
        fl_backend_error(FL_ERR_MEMORY, "cannot allocate a tensor handle");
    return t;
}

/* The primitive each node stands for, which memory telemetry attributes the
 * allocations of its materialization to. */
#define LAZY_OP_NAME(op, primitive) primitive,
static const char *const op_names[LAZY_OP_COUNT] = {LAZY_OPS(LAZY_OP_NAME)};

/* A constant as a CPU tensor of one element viewed with zero strides in t's shape,
 * for a delegated primitive, which reads strided operands: the zeros that a gradient
 * is scattered into, or the scalar of a comparison, are never written out in full. */
static int broadcast_constant(const fl_tensor *t, float constant, fl_tensor **out)
{
    int64_t ones[FL_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++)
        ones[i] = 1;
    fl_tensor *one = fl_tensor_alloc(delegate(), FL_F32, t->ndim, ones), *value = cpu_twin(t);
    int rc = one && value ? ON_CPU(full, one, constant)
                          : fl_backend_error(FL_ERR_MEMORY, "cannot allocate a tensor handle");
    if (!rc)
        rc = ON_CPU(expand, value, one);
    fl_release(one);
    if (rc)
        fl_release(value);
    *out = rc ? NULL : value;
    return rc;
}

/* A reshape whose operand was materialized after it was made is a CPU view; a
 * constant is filled in, or, for a delegated primitive (operand true), viewed; anything
 * else runs as a fused pass. */
static int materialize(const fl_tensor *t, bool operand)
{
    lazy_tensor *l = t->impl;
    bool view = l->op == LAZY_RESHAPE && lazy_impl(l->args[0])->op == LAZY_VALUE;
    if (l->op != LAZY_CONSTANT && !view)
        return lazy_run(t);
    fl_tensor *value;
    if (view) {
        value = cpu_twin(t);
        int rc = value ? ON_CPU(reshape, value, lazy_impl(l->args[0])->value) : FL_ERR_MEMORY;
        if (rc) {
            fl_release(value);
            return rc;
        }
    } else if (operand) {
        int rc = broadcast_constant(t, l->constant, &value);
        if (rc)
            return rc;
    } else {
        value = cpu_twin(t);
        int rc = value ? ON_CPU(full, value, l->constant) : FL_ERR_MEMORY;
        if (rc) {
            fl_release(value);
            return rc;
        }
    }
    fl_release(l->args[0]);
    l->args[0] = NULL;
    l->op = LAZY_VALUE;
    l->value = value;
    return 0;
}

static int evaluate_locked(const fl_tensor *t, bool operand)
{
    lazy_tensor *l = t->impl;
    if (l->op == LAZY_VALUE)
        return 0;
    const char *operation = fl_memory_operation();
    fl_memory_set_operation(op_names[l->op]);
    int rc = materialize(t, operand);
    fl_memory_set_operation(operation);
    return rc;
}

static int evaluate(const fl_tensor *t, bool operand) { return LOCKED(evaluate_locked(t, operand)); }

static int lazy_eval(const fl_backend *self, fl_tensor *t) { return evaluate(t, false); }

/* The CPU tensor holding t's values for a CPU primitive to read, materializing t if
 * needed; NULL on failure (with the error recorded). The node changes, not its
 * values, hence the cast. */
static fl_tensor *value_of(const fl_tensor *t)
{
    lock();
    fl_tensor *value = evaluate_locked(t, true) ? NULL : lazy_impl(t)->value;
    unlock();
    return value;
}

/* Runs a delegated primitive's result into out: on success out takes the CPU tensor. */
static int finish(fl_tensor *out, fl_tensor *result, int rc)
{
    if (rc) {
        fl_release(result);
        return rc;
    }
    return lazy_adopt(out, result);
}

/* finish for a primitive of count outputs: out[k] takes result[k], or on failure
 * every result is released. */
static int adopt_all(int count, fl_tensor **out, fl_tensor **result, int rc)
{
    for (int k = 0; k < count; k++) {
        if (!rc) {
            rc = lazy_adopt(out[k], result[k]);
            continue;
        }
        fl_release(result[k]);
    }
    return rc;
}

#define MATERIALIZE(var, t)                     \
    fl_tensor *var = value_of(t);               \
    if (!var)                                   \
        return FL_ERR_MEMORY

#define CPU_OUT(var, out)                       \
    fl_tensor *var = cpu_twin(out);             \
    if (!var)                                   \
        return FL_ERR_MEMORY

/* ---- data movement and creation ---- */

static int lazy_from_host(const fl_backend *self, fl_tensor *out, const void *src)
{
    CPU_OUT(r, out);
    return finish(out, r, ON_CPU(from_host, r, src));
}

static int lazy_to_host(const fl_backend *self, const fl_tensor *t, void *dst)
{
    MATERIALIZE(v, t);
    return ON_CPU(to_host, v, dst);
}

/* Host access: a fresh value node, and the address of a value's CPU storage. A
 * pending node is computed first, as to_host would. */
static int lazy_empty(const fl_backend *self, fl_tensor *out)
{
    CPU_OUT(r, out);
    return finish(out, r, ON_CPU(empty, r));
}

static int lazy_host_data(const fl_backend *self, const fl_tensor *t, void **data)
{
    MATERIALIZE(v, t);
    return ON_CPU(host_data, v, data);
}

/* An f32 fill is a constant node: scalars for arithmetic cost no memory, and
 * zeros_like(x) is only written if it is read. */
static int lazy_full(const fl_backend *self, fl_tensor *out, double value)
{
    if (out->dtype != FL_F32) {
        CPU_OUT(r, out);
        return finish(out, r, ON_CPU(full, r, value));
    }
    lazy_tensor *l = node_new(out, LAZY_CONSTANT);
    if (!l)
        return FL_ERR_MEMORY;
    l->constant = (float)value;
    return 0;
}

static int lazy_arange(const fl_backend *self, fl_tensor *out, double start, double step)
{
    CPU_OUT(r, out);
    return finish(out, r, ON_CPU(arange, r, start, step));
}

static int lazy_random(const fl_backend *self, fl_tensor *out, fl_random_kind kind, uint64_t seed, uint64_t offset)
{
    CPU_OUT(r, out);
    return finish(out, r, ON_CPU(random, r, kind, seed, offset));
}

/* ---- layout: a constant keeps being a constant; anything else is materialized
 * and viewed by the CPU backend (except a reshape of a pending graph, below) ---- */

static int constant_like(fl_tensor *out, const fl_tensor *a)
{
    lazy_tensor *l = node_new(out, LAZY_CONSTANT);
    if (!l)
        return FL_ERR_MEMORY;
    l->constant = lazy_impl(a)->constant;
    return 0;
}

#define DELEGATE_UNARY(name)                                             \
    static int delegate_##name(const fl_backend *self, fl_tensor *out, const fl_tensor *a)       \
    {                                                                    \
        MATERIALIZE(va, a);                                              \
        CPU_OUT(r, out);                                                 \
        return finish(out, r, ON_CPU(name, r, va));            \
    }

#define DELEGATE_BINARY(name)                                                       \
    static int delegate_##name(const fl_backend *self, fl_tensor *out, const fl_tensor *a, const fl_tensor *b) \
    {                                                                               \
        MATERIALIZE(va, a);                                                         \
        MATERIALIZE(vb, b);                                                         \
        CPU_OUT(r, out);                                                            \
        return finish(out, r, ON_CPU(name, r, va, vb));                  \
    }

DELEGATE_UNARY(reshape)
DELEGATE_UNARY(expand)
DELEGATE_UNARY(cast)


static int lazy_expand(const fl_backend *self, fl_tensor *out, const fl_tensor *a)
{
    return LOCKED(lazy_impl(a)->op == LAZY_CONSTANT ? constant_like(out, a) : delegate_expand(self, out, a));
}

/* A conversion to f32 of a bool, integer or f64 value is deferred: a fused pass
 * reads the value and converts it on the way (a dropout mask is not written as f32
 * before it is scaled). Halves stay with cpu, which converts them its own way. */
static int cast_locked(const fl_backend *self, fl_tensor *out, const fl_tensor *a)
{
    lazy_op op = lazy_impl(a)->op;
    if (op == LAZY_CONSTANT && out->dtype == FL_F32)
        return constant_like(out, a);
    bool convertible = a->dtype == FL_BOOL || a->dtype == FL_U8 || a->dtype == FL_I32 || a->dtype == FL_I64 ||
                       a->dtype == FL_F64;
    if (out->dtype != FL_F32 || op != LAZY_VALUE || !convertible)
        return delegate_cast(self, out, a);
    lazy_tensor *l = node_new(out, LAZY_CAST);
    if (!l)
        return FL_ERR_MEMORY;
    l->args[0] = fl_retain(a);
    l->nodes = 1;
    return 0;
}

static int lazy_cast(const fl_backend *self, fl_tensor *out, const fl_tensor *a)
{
    return LOCKED(cast_locked(self, out, a));
}

static int lazy_permute(const fl_backend *self, fl_tensor *out, const fl_tensor *a, const int *axes)
{
    MATERIALIZE(va, a);
    CPU_OUT(r, out);
    return finish(out, r, ON_CPU(permute, r, va, axes));
}

static int lazy_slice(const fl_backend *self, fl_tensor *out, const fl_tensor *a, const int64_t *start, const int64_t *step)
{
    MATERIALIZE(va, a);
    CPU_OUT(r, out);
    return finish(out, r, ON_CPU(slice, r, va, start, step));
}

static int lazy_update_slice(const fl_backend *self, fl_tensor *out, const fl_tensor *base, const fl_tensor *src, const int64_t *start,
                             const int64_t *step)
{
    MATERIALIZE(vbase, base);
    MATERIALIZE(vsrc, src);
    CPU_OUT(r, out);
    return finish(out, r, ON_CPU(update_slice, r, vbase, vsrc, start, step));
}

static int lazy_concat(const fl_backend *self, fl_tensor *out, const fl_tensor *const *inputs, int count, int axis)
{
    const fl_tensor **values = malloc((size_t)(count ? count : 1) * sizeof *values);
    if (!values)
        return fl_backend_error(FL_ERR_MEMORY, "cannot allocate %d operands", count);
    for (int i = 0; i < count; i++)
        if (!(values[i] = value_of(inputs[i]))) {
            free(values);
            return FL_ERR_MEMORY;
        }
    fl_tensor *r = cpu_twin(out);
    int rc = r ? ON_CPU(concat, r, values, count, axis) : FL_ERR_MEMORY;
    free(values);
    return r ? finish(out, r, rc) : rc;
}

/* ---- indexing ---- */

static int lazy_where(const fl_backend *self, fl_tensor *out, const fl_tensor *cond, const fl_tensor *a, const fl_tensor *b)
{
    MATERIALIZE(vc, cond);
    MATERIALIZE(va, a);
    MATERIALIZE(vb, b);
    CPU_OUT(r, out);
    return finish(out, r, ON_CPU(where, r, vc, va, vb));
}

static int lazy_gather(const fl_backend *self, fl_tensor *out, const fl_tensor *a, int axis, const fl_tensor *index)
{
    MATERIALIZE(va, a);
    MATERIALIZE(vi, index);
    CPU_OUT(r, out);
    return finish(out, r, ON_CPU(gather, r, va, axis, vi));
}

static int lazy_scatter_add(const fl_backend *self, fl_tensor *out, const fl_tensor *base, int axis, const fl_tensor *index,
                            const fl_tensor *src)
{
    MATERIALIZE(vb, base);
    MATERIALIZE(vi, index);
    MATERIALIZE(vs, src);
    CPU_OUT(r, out);
    return finish(out, r, ON_CPU(scatter_add, r, vb, axis, vi, vs));
}

static int lazy_index_select(const fl_backend *self, fl_tensor *out, const fl_tensor *a, int axis, const fl_tensor *index)
{
    MATERIALIZE(va, a);
    MATERIALIZE(vi, index);
    CPU_OUT(r, out);
    return finish(out, r, ON_CPU(index_select, r, va, axis, vi));
}

/* ---- elementwise: f32 operations become graph nodes; the rest run now ---- */

/* Keeps the graph bounded: an operand whose graph is already large is materialized
 * before it becomes part of a larger one. */
static int bound(const fl_tensor *a, int other_nodes)
{
    lazy_tensor *l = lazy_impl(a);
    if (l->op > LAZY_CONSTANT && l->nodes + other_nodes + 1 > LAZY_MAX_NODES)
        return evaluate(a, false);
    return 0;
}

static int node_nodes(const fl_tensor *a) { return lazy_impl(a)->op > LAZY_CONSTANT ? lazy_impl(a)->nodes : 0; }

static int defer_locked(fl_tensor *out, lazy_op op, const fl_tensor *a, const fl_tensor *b)
{
    int rc = bound(a, b ? node_nodes(b) : 0);
    if (!rc && b)
        rc = bound(b, node_nodes(a));
    if (rc)
        return rc;
    lazy_tensor *l = node_new(out, op);
    if (!l)
        return FL_ERR_MEMORY;
    l->args[0] = fl_retain(a);
    l->args[1] = b ? fl_retain(b) : NULL;
    l->nodes = 1 + node_nodes(a) + (b ? node_nodes(b) : 0);
    return 0;
}

static int defer(fl_tensor *out, lazy_op op, const fl_tensor *a, const fl_tensor *b)
{
    return LOCKED(defer_locked(out, op, a, b));
}

/* A reshape keeps the row-major order, so a pending graph stays pending under the new
 * shape: attention's head split and a loss's flattening do not cut a fused chain.
 * A reshape of a reshape refers to the operation below both. It counts as a node, so
 * that a bounded graph also fits a program's slots. */
static int lazy_reshape_locked(const fl_backend *self, fl_tensor *out, const fl_tensor *a)
{
    const lazy_tensor *la = lazy_impl(a);
    if (la->op == LAZY_CONSTANT)
        return constant_like(out, a);
    const fl_tensor *below = la->op == LAZY_RESHAPE ? la->args[0] : a;
    int rc = la->op == LAZY_VALUE ? 0 : bound(below, 0);
    if (rc)
        return rc;
    if (lazy_impl(below)->op == LAZY_VALUE)
        return delegate_reshape(self, out, below);
    lazy_tensor *l = node_new(out, LAZY_RESHAPE);
    if (!l)
        return FL_ERR_MEMORY;
    l->args[0] = fl_retain(below);
    l->nodes = 1 + lazy_impl(below)->nodes;
    return 0;
}

static int lazy_reshape(const fl_backend *self, fl_tensor *out, const fl_tensor *a)
{
    return LOCKED(lazy_reshape_locked(self, out, a));
}

#define UNARY(name, OP)                                          \
    DELEGATE_UNARY(name)                                         \
    static int lazy_##name(const fl_backend *self, fl_tensor *out, const fl_tensor *a)   \
    {                                                            \
        if (out->dtype != FL_F32 || a->dtype != FL_F32)          \
            return delegate_##name(self, out, a);                      \
        return defer(out, OP, a, NULL);                          \
    }

#define BINARY(name, OP)                                                          \
    DELEGATE_BINARY(name)                                                         \
    static int lazy_##name(const fl_backend *self, fl_tensor *out, const fl_tensor *a, const fl_tensor *b) \
    {                                                                             \
        if (out->dtype != FL_F32 || a->dtype != FL_F32 || b->dtype != FL_F32)     \
            return delegate_##name(self, out, a, b);                                    \
        return defer(out, OP, a, b);                                              \
    }

UNARY(neg, LAZY_NEG)
UNARY(abs, LAZY_ABS)
UNARY(sign, LAZY_SIGN)
UNARY(exp, LAZY_EXP)
UNARY(log, LAZY_LOG)
UNARY(log1p, LAZY_LOG1P)
UNARY(sqrt, LAZY_SQRT)
UNARY(rsqrt, LAZY_RSQRT)
UNARY(sin, LAZY_SIN)
UNARY(cos, LAZY_COS)
UNARY(tanh, LAZY_TANH)
UNARY(sigmoid, LAZY_SIGMOID)
UNARY(erf, LAZY_ERF)
UNARY(floor, LAZY_FLOOR)
UNARY(ceil, LAZY_CEIL)
UNARY(round, LAZY_ROUND)
DELEGATE_UNARY(isnan)
DELEGATE_UNARY(isinf)
DELEGATE_UNARY(logical_not)

BINARY(add, LAZY_ADD)
BINARY(sub, LAZY_SUB)
BINARY(mul, LAZY_MUL)
BINARY(div, LAZY_DIV)
BINARY(pow, LAZY_POW)
BINARY(minimum, LAZY_MINIMUM)
BINARY(maximum, LAZY_MAXIMUM)
DELEGATE_BINARY(eq)
DELEGATE_BINARY(ne)
DELEGATE_BINARY(lt)
DELEGATE_BINARY(le)
DELEGATE_BINARY(logical_and)
DELEGATE_BINARY(logical_or)
DELEGATE_BINARY(matmul)

/* ---- reductions: a pending f32 graph is reduced in the pass that computes it ---- */

#define REDUCE(name, OP)                                                            \
    static int lazy_##name(const fl_backend *self, fl_tensor *out, const fl_tensor *a, unsigned axes)       \
    {                                                                               \
        if (a->dtype == FL_F32) {                                                   \
            int rc = LOCKED(lazy_impl(a)->op > LAZY_CONSTANT ? lazy_run_reduction(out, a, axes, OP) : -1); \
            if (rc >= 0)                                                            \
                return rc;                                                          \
        }                                                                           \
        MATERIALIZE(va, a);                                                         \
        CPU_OUT(r, out);                                                            \
        return finish(out, r, ON_CPU(name, r, va, axes));                 \
    }

REDUCE(sum, LAZY_SUM)
REDUCE(prod, LAZY_PROD)
REDUCE(max, LAZY_MAX)
REDUCE(min, LAZY_MIN)

#define DELEGATE_AXIS(name)                                                         \
    static int lazy_##name(const fl_backend *self, fl_tensor *out, const fl_tensor *a, int axis)            \
    {                                                                               \
        MATERIALIZE(va, a);                                                         \
        CPU_OUT(r, out);                                                            \
        return finish(out, r, ON_CPU(name, r, va, axis));                 \
    }

DELEGATE_AXIS(argmax)
DELEGATE_AXIS(argmin)
DELEGATE_AXIS(cumsum)

static int lazy_sort(const fl_backend *self, fl_tensor *values, fl_tensor *indices, const fl_tensor *a, int axis, bool descending)
{
    MATERIALIZE(va, a);
    CPU_OUT(rv, values);
    fl_tensor *ri = cpu_twin(indices);
    int rc = ri ? ON_CPU(sort, rv, ri, va, axis, descending) : FL_ERR_MEMORY;
    if (rc) {
        fl_release(rv);
        fl_release(ri);
        return rc;
    }
    rc = lazy_adopt(values, rv);
    return rc ? (fl_release(ri), rc) : lazy_adopt(indices, ri);
}

/* ---- convolution and pooling ---- */

static int lazy_conv2d(const fl_backend *self, fl_tensor *out, const fl_tensor *x, const fl_tensor *w, const fl_conv2d_desc *d)
{
    MATERIALIZE(vx, x);
    MATERIALIZE(vw, w);
    CPU_OUT(r, out);
    return finish(out, r, ON_CPU(conv2d, r, vx, vw, d));
}

static int lazy_conv2d_backward_input(const fl_backend *self, fl_tensor *dx, const fl_tensor *dy, const fl_tensor *w,
                                      const fl_conv2d_desc *d)
{
    MATERIALIZE(vdy, dy);
    MATERIALIZE(vw, w);
    CPU_OUT(r, dx);
    return finish(dx, r, ON_CPU(conv2d_backward_input, r, vdy, vw, d));
}

static int lazy_conv2d_backward_weight(const fl_backend *self, fl_tensor *dw, const fl_tensor *x, const fl_tensor *dy,
                                       const fl_conv2d_desc *d)
{
    MATERIALIZE(vx, x);
    MATERIALIZE(vdy, dy);
    CPU_OUT(r, dw);
    return finish(dw, r, ON_CPU(conv2d_backward_weight, r, vx, vdy, d));
}

static int lazy_pool2d(const fl_backend *self, fl_tensor *out, const fl_tensor *x, const fl_pool2d_desc *d)
{
    MATERIALIZE(vx, x);
    CPU_OUT(r, out);
    return finish(out, r, ON_CPU(pool2d, r, vx, d));
}

static int lazy_pool2d_backward(const fl_backend *self, fl_tensor *dx, const fl_tensor *dy, const fl_tensor *x, const fl_pool2d_desc *d)
{
    MATERIALIZE(vdy, dy);
    MATERIALIZE(vx, x);
    CPU_OUT(r, dx);
    return finish(dx, r, ON_CPU(pool2d_backward, r, vdy, vx, d));
}

/* ---- fused kernels ---- */

/* Softmax over the last axis runs on the cpu backend's fused kernel, which keeps a
 * row in cache for its maximum, its exponentials and its output. Composed, a pass
 * per statistic reads the row from memory three times and computes its input (a
 * bias add, a scale) three times. */
static int lazy_softmax_locked(const fl_backend *self, fl_tensor *out, const fl_tensor *a, bool logarithm)
{
    const fl_backend *cpu = delegate();
    if (!cpu->softmax) /* declined: the tensor layer composes softmax, and this backend fuses that */
        return FL_ERR_UNSUPPORTED;
    const lazy_tensor *la = lazy_impl(a);
    if (la->op <= LAZY_RESHAPE || la->op == LAZY_CAST || la->nodes > 2) {
        MATERIALIZE(va, a);
        CPU_OUT(r, out);
        return finish(out, r, cpu->softmax(cpu, r, va, logarithm));
    }
    /* A short graph (the logits' bias add, the scores' scale) is computed into a
     * temporary and stays pending: kept, the vocabulary's logits would hold 120 MB
     * until the backward pass, which does not read them. */
    fl_tensor *copy = fl_tensor_alloc(self, a->dtype, a->ndim, a->shape);
    if (!copy)
        return fl_backend_error(FL_ERR_MEMORY, "cannot allocate a tensor handle");
    lazy_tensor *l = node_new(copy, la->op); /* reports its own failure */
    if (!l) {
        fl_release(copy);
        return FL_ERR_MEMORY;
    }
    *l = *la;
    fl_retain(l->args[0]);
    if (l->args[1])
        fl_retain(l->args[1]);
    l->reduced = NULL;
    int rc = lazy_run(copy);
    fl_tensor *r = rc ? NULL : cpu_twin(out);
    rc = rc ? rc : r ? cpu->softmax(cpu, r, lazy_impl(copy)->value, logarithm) : FL_ERR_MEMORY;
    fl_release(copy);
    return finish(out, r, rc);
}

static int lazy_softmax(const fl_backend *self, fl_tensor *out, const fl_tensor *a, bool logarithm)
{
    return LOCKED(lazy_softmax_locked(self, out, a, logarithm));
}

/* GELU and its gradient are graph nodes, computed by gelu.h's formulas as the cpu
 * kernel computes them, but fused with the bias add before them and the dropout
 * after (forward), or with the gradient that flows in (backward). */
static int lazy_gelu(const fl_backend *self, fl_tensor *out, const fl_tensor *a, const fl_tensor *dy, bool approximate)
{
    if (a->dtype == FL_F32 && (!dy || dy->dtype == FL_F32))
        return defer(out, dy ? (approximate ? LAZY_GELU_TANH_GRAD : LAZY_GELU_GRAD)
                             : (approximate ? LAZY_GELU_TANH : LAZY_GELU),
                     a, dy);
    MATERIALIZE(va, a);
    fl_tensor *vdy = NULL;
    if (dy && !(vdy = value_of(dy)))
        return FL_ERR_MEMORY;
    CPU_OUT(r, out);
    return finish(out, r, ON_CPU(gelu, r, va, vdy, approximate));
}

/* The LSTM cell runs cpu's fused kernel on its materialized inputs: its outputs are
 * several, which the expression graph does not fuse. */
static int lazy_lstm_cell(const fl_backend *self, fl_tensor *gates, fl_tensor *c, fl_tensor *h, const fl_tensor *pre,
                          const fl_tensor *c_prev)
{
    MATERIALIZE(vpre, pre);
    MATERIALIZE(vc_prev, c_prev);
    fl_tensor *r[3] = {cpu_twin(gates), cpu_twin(c), cpu_twin(h)};
    int rc = r[0] && r[1] && r[2] ? ON_CPU(lstm_cell, r[0], r[1], r[2], vpre, vc_prev) : FL_ERR_MEMORY;
    return adopt_all(3, (fl_tensor *[]){gates, c, h}, r, rc);
}

static int lazy_lstm_cell_backward(const fl_backend *self, fl_tensor *dpre, fl_tensor *dc_prev, const fl_tensor *dh,
                                   const fl_tensor *dc, const fl_tensor *gates, const fl_tensor *c_prev,
                                   const fl_tensor *c)
{
    MATERIALIZE(vdh, dh);
    MATERIALIZE(vdc, dc);
    MATERIALIZE(vgates, gates);
    MATERIALIZE(vc_prev, c_prev);
    MATERIALIZE(vc, c);
    fl_tensor *r[2] = {cpu_twin(dpre), cpu_twin(dc_prev)};
    int rc = r[0] && r[1] ? ON_CPU(lstm_cell_backward, r[0], r[1], vdh, vdc, vgates, vc_prev, vc) : FL_ERR_MEMORY;
    return adopt_all(2, (fl_tensor *[]){dpre, dc_prev}, r, rc);
}

/* The LSTM recurrence runs cpu's fused kernel on its materialized inputs, for the
 * same reason; where cpu declines (f64, or a table without the kernel), so does this. */
static int lazy_lstm_sequence(const fl_backend *self, fl_tensor *states, fl_tensor *gates, const fl_tensor *xproj,
                              const fl_tensor *bias, const fl_tensor *h0, const fl_tensor *c0, const fl_tensor *w_hh,
                              bool reverse)
{
    MATERIALIZE(vx, xproj);
    fl_tensor *vb = NULL;
    if (bias && !(vb = value_of(bias)))
        return FL_ERR_MEMORY;
    MATERIALIZE(vh0, h0);
    MATERIALIZE(vc0, c0);
    MATERIALIZE(vw, w_hh);
    fl_tensor *r[2] = {cpu_twin(states), cpu_twin(gates)};
    int rc = r[0] && r[1] ? ON_CPU(lstm_sequence, r[0], r[1], vx, vb, vh0, vc0, vw, reverse) : FL_ERR_MEMORY;
    return adopt_all(2, (fl_tensor *[]){states, gates}, r, rc);
}

static int lazy_lstm_sequence_backward(const fl_backend *self, fl_tensor *dxproj, fl_tensor *dh0, fl_tensor *dc0,
                                       const fl_tensor *dstates, const fl_tensor *states, const fl_tensor *gates,
                                       const fl_tensor *h0, const fl_tensor *c0, const fl_tensor *w_hh, bool reverse)
{
    MATERIALIZE(vd, dstates);
    MATERIALIZE(vs, states);
    MATERIALIZE(vg, gates);
    MATERIALIZE(vh0, h0);
    MATERIALIZE(vc0, c0);
    MATERIALIZE(vw, w_hh);
    fl_tensor *r[3] = {cpu_twin(dxproj), cpu_twin(dh0), cpu_twin(dc0)};
    int rc = r[0] && r[1] && r[2] ? ON_CPU(lstm_sequence_backward, r[0], r[1], r[2], vd, vs, vg, vh0, vc0, vw, reverse)
                                  : FL_ERR_MEMORY;
    return adopt_all(3, (fl_tensor *[]){dxproj, dh0, dc0}, r, rc);
}

/* The gradient of cross-entropy runs cpu's kernel on its materialized inputs: composed,
 * this backend fuses the exponential and the product into one pass, but the
 * scatter_add after it still copies a tensor of the logits' size. */
static int lazy_cross_entropy_backward(const fl_backend *self, fl_tensor *dlogits, const fl_tensor *log_probs,
                                       const fl_tensor *index, const fl_tensor *scale, double smoothing)
{
    MATERIALIZE(vl, log_probs);
    MATERIALIZE(vi, index);
    MATERIALIZE(vs, scale);
    CPU_OUT(r, dlogits);
    return finish(dlogits, r, ON_CPU(cross_entropy_backward, r, vl, vi, vs, smoothing));
}

/* ---- the table ---- */

static const fl_backend lazy_backend_table = {
    .version = FL_BACKEND_VERSION,
    .table_size = sizeof(fl_backend),
    .name = "lazy",
    .release = lazy_release,
    .eval = lazy_eval,
    .from_host = lazy_from_host,
    .to_host = lazy_to_host,
    .full = lazy_full,
    .arange = lazy_arange,
    .random = lazy_random,
    .cast = lazy_cast,
    .reshape = lazy_reshape,
    .permute = lazy_permute,
    .expand = lazy_expand,
    .slice = lazy_slice,
    .update_slice = lazy_update_slice,
    .concat = lazy_concat,
    .where = lazy_where,
    .gather = lazy_gather,
    .scatter_add = lazy_scatter_add,
    .index_select = lazy_index_select,
    .neg = lazy_neg, .abs = lazy_abs, .sign = lazy_sign,
    .exp = lazy_exp, .log = lazy_log, .log1p = lazy_log1p, .sqrt = lazy_sqrt, .rsqrt = lazy_rsqrt,
    .sin = lazy_sin, .cos = lazy_cos, .tanh = lazy_tanh, .sigmoid = lazy_sigmoid, .erf = lazy_erf,
    .floor = lazy_floor, .ceil = lazy_ceil, .round = lazy_round,
    .isnan = delegate_isnan, .isinf = delegate_isinf, .logical_not = delegate_logical_not,
    .add = lazy_add, .sub = lazy_sub, .mul = lazy_mul, .div = lazy_div, .pow = lazy_pow,
    .minimum = lazy_minimum, .maximum = lazy_maximum,
    .eq = delegate_eq, .ne = delegate_ne, .lt = delegate_lt, .le = delegate_le,
    .logical_and = delegate_logical_and, .logical_or = delegate_logical_or,
    .sum = lazy_sum, .prod = lazy_prod, .max = lazy_max, .min = lazy_min,
    .argmax = lazy_argmax, .argmin = lazy_argmin, .cumsum = lazy_cumsum, .sort = lazy_sort,
    .matmul = delegate_matmul,
    .conv2d = lazy_conv2d,
    .conv2d_backward_input = lazy_conv2d_backward_input,
    .conv2d_backward_weight = lazy_conv2d_backward_weight,
    .pool2d = lazy_pool2d,
    .pool2d_backward = lazy_pool2d_backward,
    .softmax = lazy_softmax,
    .gelu = lazy_gelu,
    .lstm_cell = lazy_lstm_cell,
    .lstm_cell_backward = lazy_lstm_cell_backward,
    .lstm_sequence = lazy_lstm_sequence,
    .lstm_sequence_backward = lazy_lstm_sequence_backward,
    .cross_entropy_backward = lazy_cross_entropy_backward,
    .empty = lazy_empty,
    .host_data = lazy_host_data,
};

const fl_backend *fl_lazy_backend(void) { return &lazy_backend_table; }
