/*
 * Fused passes: a pending graph of f32 elementwise operations is compiled into a
 * program of slots (its leaves and operations, operands first) and interpreted a
 * tile at a time. A tile is a run of TILE consecutive output elements; every
 * operation of the program runs over the whole tile with a vectorized loop (the
 * CPU backend's vecmath), so intermediate values live in a few kilobytes of cache
 * instead of in memory. Leaves are read in place when dense, or gathered through
 * their strides (broadcast operands); constants are read as scalars. Tiles are
 * shared among threads; each thread has its own scratch.
 *
 * A reduction over trailing axes of a pending graph is the same program with the
 * root's tile folded into a partial result instead of written out. Partial results
 * are combined in a fixed order, so results do not depend on the thread count.
 *
 * Which intermediate values are written out: the root, and every pending node that
 * something outside the graph holds (its reference count exceeds its uses in the
 * graph) and would cost more to compute again than to read back (worth_keeping).
 * Such a node will most likely be read later (an optimizer's new moments next to the
 * new weights), and writing it now, while its tile is in cache, saves a second pass
 * that would read all of its inputs again. But a held node computed cheaply from
 * one narrow input (bools or bytes) and scalars stays pending: a later pass reads
 * that input, a quarter of the stored values (a dropout mask, kept for the backward
 * pass, is read there as its 1-byte comparison, never written as 4-byte floats).
 * The same rule for f32 inputs measured slower on a training step: a held value that
 * a matmul reads later costs a pass of its own instead of a write in this one.
 *
 * A reduction writes nothing out at first: its input is often a temporary (the
 * squares of a variance). But a held node that an earlier pass already computed is
 * being read again, and will likely be read once more: layer norm reduces its input
 * for the mean, again for the variance, and then normalizes it, so the chain that
 * produced it (a residual sum, a bias) is computed twice instead of four times.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "flare/profile.h"

#include "../cpu/cpu.h"
#include "../cpu/gelu.h"
#include "../cpu/vecmath.h"
#include "lazy.h"

/* 8 KiB of floats: a program of a dozen slots keeps its tiles in L2. */
#define TILE 2048
#define MAX_SLOTS (2 * LAZY_MAX_NODES + 2)

typedef struct slot {
    const fl_tensor *node;
    lazy_op op; /* LAZY_VALUE or LAZY_CAST: a leaf in memory; LAZY_CONSTANT; LAZY_RESHAPE;
                   or an operation */
    int arg[2];
    int uses;
    float constant;
    /* a leaf: its dtype (f32 unless a cast's), first element and strides over the
     * root's shape, axes merged */
    fl_dtype dtype;
    const void *data;
    bool dense;
    int ndim;
    int64_t shape[FL_MAX_DIMS], strides[FL_MAX_DIMS];
    int64_t distinct; /* elements a leaf really has (broadcast axes count once) */
    /* a node whose values are written out: an operation's own memory, or for a
     * reshape a view of its operand's */
    fl_tensor *store;
} slot;

typedef struct program {
    int count;
    slot slots[MAX_SLOTS];
    int64_t numel;
} program;

/* ---- compiling ---- */

static void plan_leaf(slot *s, const fl_tensor *value)
{
    s->dtype = value->dtype;
    s->data = cpu_data(value);
    s->dense = cpu_contiguous(value);
    s->ndim = 0;
    s->distinct = 1;
    const int64_t *strides = cpu_impl(value)->strides;
    for (int i = 0; i < value->ndim; i++) {
        if (value->shape[i] == 1)
            continue;
        if (strides[i] != 0)
            s->distinct *= value->shape[i];
        int last = s->ndim - 1;
        if (last >= 0 && s->strides[last] == strides[i] * value->shape[i]) {
            s->shape[last] *= value->shape[i];
            s->strides[last] = strides[i];
        } else {
            s->shape[s->ndim] = value->shape[i];
            s->strides[s->ndim++] = strides[i];
        }
    }
    if (s->ndim == 0) {
        s->ndim = 1;
        s->shape[0] = 1;
        s->strides[0] = 0;
    }
}

/* Adds node (and, for an operation, its operands first) to the program; returns
 * its slot, or -1 if the program is full. */
static int add_node(program *p, const fl_tensor *node)
{
    for (int i = 0; i < p->count; i++)
        if (p->slots[i].node == node) {
            p->slots[i].uses++;
            return i;
        }
    const lazy_tensor *l = lazy_impl(node);
    int arg[2] = {-1, -1};
    if (l->op > LAZY_CONSTANT && l->op != LAZY_CAST)
        for (int k = 0; k < 2 && l->args[k]; k++)
            if ((arg[k] = add_node(p, l->args[k])) < 0)
                return -1;
    if (p->count == MAX_SLOTS)
        return -1;
    slot *s = &p->slots[p->count];
    memset(s, 0, sizeof *s);
    s->node = node;
    s->op = l->op;
    s->arg[0] = arg[0];
    s->arg[1] = arg[1];
    s->uses = 1;
    s->constant = l->constant;
    if (l->op == LAZY_VALUE)
        plan_leaf(s, l->value);
    else if (l->op == LAZY_CAST)
        plan_leaf(s, lazy_impl(l->args[0])->value);
    return p->count++;
}

static bool compile(program *p, const fl_tensor *root)
{
    p->count = 0;
    p->numel = root->numel;
    if (add_node(p, root) < 0)
        return fl_backend_error(FL_ERR_VALUE, "a lazy graph needs more than %d slots", MAX_SLOTS), false;
    p->slots[p->count - 1].uses--; /* the root's own entry is not a use */
    return true;
}

/* dst[i] = the leaf's element at offset + i * step, as f32, for i < n; f32 the way
 * C converts, as the CPU backend's cast does. */
static void load(const slot *s, float *restrict dst, int64_t offset, int64_t step, int64_t n)
{
#define LOAD_AS(T)                                          \
    do {                                                    \
        const T *src = (const T *)s->data + offset;         \
        for (int64_t i = 0; i < n; i++)                     \
            dst[i] = (float)src[i * step];                  \
    } while (0)
    switch (s->dtype) {
    case FL_F32:
        if (step == 1) {
            memcpy(dst, (const float *)s->data + offset, (size_t)n * sizeof *dst);
        } else if (step == 0) { /* a broadcast axis: one value, stored n times */
            const float v = ((const float *)s->data)[offset];
            for (int64_t i = 0; i < n; i++)
                dst[i] = v;
        } else {
            LOAD_AS(float);
        }
        break;
    case FL_BOOL:
    case FL_U8: LOAD_AS(uint8_t); break;
    case FL_I32: LOAD_AS(int32_t); break;
    case FL_I64: LOAD_AS(int64_t); break;
    case FL_F64: LOAD_AS(double); break;
    default: break; /* lazy_cast defers no other dtype */
    }
#undef LOAD_AS
}

/* Copies a leaf's elements [begin, begin + n) (in the root's row-major order) into
 * dst as f32, a run of the innermost axis at a time. */
static void gather(const slot *s, float *restrict dst, int64_t begin, int64_t n)
{
    int last = s->ndim - 1;
    int64_t index[FL_MAX_DIMS], rest = begin, offset = 0;
    for (int d = last; d >= 0; d--) {
        index[d] = rest % s->shape[d];
        rest /= s->shape[d];
        offset += index[d] * s->strides[d];
    }
    int64_t step = s->strides[last];
    for (int64_t done = 0; done < n;) {
        int64_t run = s->shape[last] - index[last] < n - done ? s->shape[last] - index[last] : n - done;
        load(s, dst + done, offset, step, run);
        done += run;
        offset += run * step;
        index[last] += run;
        for (int d = last; d > 0 && index[d] == s->shape[d]; d--) {
            offset += s->strides[d - 1] - s->shape[d] * s->strides[d];
            index[d] = 0;
            index[d - 1]++;
        }
    }
}

/* The interpreter's tile operations of the level the cpu kernels run at (apply.c). */
#ifdef FLARE_CPU_DISPATCH
#define DECLARE_APPLY(variant, isa) \
    void CPU_JOIN(lazy_apply, variant)(lazy_op, float *restrict, const float *, bool, const float *, bool, int64_t);
CPU_VARIANTS(DECLARE_APPLY)
#define APPLY_ENTRY(variant, isa) {isa, CPU_JOIN(lazy_apply, variant)},
static const struct {
    const char *isa;
    lazy_apply_fn apply;
} applies[] = {CPU_VARIANTS(APPLY_ENTRY)};

static lazy_apply_fn find_interpreter(void)
{
    size_t count = sizeof applies / sizeof applies[0], i = 0;
    while (i < count - 1 && strcmp(applies[i].isa, cpu_kernels()) != 0)
        i++;
    return applies[i].apply;
}
#else
static lazy_apply_fn find_interpreter(void) { return lazy_apply; }
#endif

static lazy_apply_fn interpreter(void)
{
    static lazy_apply_fn found;
    lazy_apply_fn apply = __atomic_load_n(&found, __ATOMIC_ACQUIRE);
    if (!apply)
        __atomic_store_n(&found, apply = find_interpreter(), __ATOMIC_RELEASE);
    return apply;
}

/* Runs the program over elements [begin, begin + n): afterwards value[i] points at
 * slot i's values for the tile, dense (step[i] true) or a single value. */
static void run_tile(const program *p, lazy_kernel kernel, float *scratch, int64_t begin, int64_t n,
                     const float **value, bool *step)
{
    float *out[MAX_SLOTS];
    lazy_apply_fn interpret = interpreter();
    for (int i = 0; i < p->count; i++) {
        const slot *s = &p->slots[i];
        float *own = scratch + (int64_t)i * TILE;
        if (s->op == LAZY_CONSTANT) {
            value[i] = &s->constant;
            step[i] = false;
        } else if (s->op == LAZY_RESHAPE) {
            value[i] = value[s->arg[0]];
            step[i] = step[s->arg[0]];
        } else if (s->op == LAZY_VALUE && s->dtype == FL_F32) {
            bool single = s->ndim == 1 && s->strides[0] == 0;
            step[i] = !single;
            if (single)
                value[i] = s->data;
            else if (s->dense)
                value[i] = (const float *)s->data + begin;
            else {
                gather(s, own, begin, n);
                value[i] = own;
            }
        } else if (s->op == LAZY_CAST) {
            /* Converted into the tile, or straight into its own memory if written out. */
            bool single = s->ndim == 1 && s->strides[0] == 0;
            float *y = s->store ? (float *)cpu_data(s->store) + begin : own;
            if (single) {
                load(s, y, 0, 0, s->store ? n : 1);
            } else if (s->dense) {
                load(s, y, begin, 1, n);
            } else {
                gather(s, y, begin, n);
            }
            step[i] = !single;
            value[i] = y;
        } else if (kernel) { /* computed below, with every other operation */
            step[i] = true;
            value[i] = out[i] = s->store ? (float *)cpu_data(s->store) + begin : own;
        } else {
            int a = s->arg[0], b = s->arg[1] >= 0 ? s->arg[1] : a;
            step[i] = step[a] || step[b];
            float *y = s->store && step[i] ? (float *)cpu_data(s->store) + begin : own;
            interpret(s->op, y, value[a], step[a], value[b], step[b], step[i] ? n : 1);
            if (s->store && !step[i]) {
                float *stored = (float *)cpu_data(s->store) + begin;
                for (int64_t k = 0; k < n; k++)
                    stored[k] = y[0];
            }
            value[i] = y;
        }
    }
    if (kernel)
        kernel((long)n, (const float *const *)value, out);
}

/* ---- traffic ---- */

static fl_lazy_traffic traffic;

fl_lazy_traffic fl_lazy_traffic_get(void) { return traffic; }
void fl_lazy_traffic_reset(void) { memset(&traffic, 0, sizeof traffic); }

/* Adds the program's traffic: fused, each leaf read once and each stored slot
 * written once; unfused, every operation reading its operands and writing its
 * result. A reduction adds its own read of the root and its outputs. */
static void count_traffic(const program *p, int64_t reduced_outputs)
{
    uint64_t fused_read = 0, fused_written = 0, unfused_read = 0, unfused_written = 0, operations = 0,
             recomputed = 0;
    uint64_t bytes[MAX_SLOTS];
    for (int i = 0; i < p->count; i++) {
        const slot *s = &p->slots[i];
        if (s->op > LAZY_RESHAPE && lazy_impl(s->node)->passes > 0)
            recomputed++;
        if (s->op == LAZY_VALUE) {
            bytes[i] = (uint64_t)s->distinct * sizeof(float);
            fused_read += bytes[i];
        } else if (s->op == LAZY_CAST) { /* read as a leaf; unfused, an operation of its own */
            uint64_t source = (uint64_t)s->distinct * cpu_element_size(s->dtype);
            bytes[i] = (uint64_t)p->numel * sizeof(float);
            fused_read += source;
            fused_written += s->store ? bytes[i] : 0;
            unfused_read += source;
            unfused_written += bytes[i];
            operations++;
        } else if (s->op == LAZY_CONSTANT) {
            bytes[i] = sizeof(float);
        } else if (s->op == LAZY_RESHAPE) {
            bytes[i] = bytes[s->arg[0]];
        } else {
            bytes[i] = (uint64_t)p->numel * sizeof(float);
            unfused_read += bytes[s->arg[0]] + (s->arg[1] >= 0 ? bytes[s->arg[1]] : 0);
            unfused_written += bytes[i];
            fused_written += s->store ? bytes[i] : 0;
            operations++;
        }
    }
    if (reduced_outputs) {
        unfused_read += (uint64_t)p->numel * sizeof(float);
        unfused_written += (uint64_t)reduced_outputs * sizeof(float);
        fused_written += (uint64_t)reduced_outputs * sizeof(float);
    }
    __atomic_add_fetch(&traffic.fused_read, fused_read, __ATOMIC_RELAXED);
    __atomic_add_fetch(&traffic.fused_written, fused_written, __ATOMIC_RELAXED);
    __atomic_add_fetch(&traffic.unfused_read, unfused_read, __ATOMIC_RELAXED);
    __atomic_add_fetch(&traffic.unfused_written, unfused_written, __ATOMIC_RELAXED);
    __atomic_add_fetch(&traffic.operations, operations, __ATOMIC_RELAXED);
    __atomic_add_fetch(&traffic.recomputed, recomputed, __ATOMIC_RELAXED);
    __atomic_add_fetch(&traffic.passes, 1, __ATOMIC_RELAXED);
}

/* ---- elementwise passes ---- */

static float *scratch_for(const program *p) { return aligned_alloc(64, (size_t)p->count * TILE * sizeof(float)); }

/* Gives slot i memory to be written to. A reshape writes nothing itself: it is a view
 * of its operand, which is written out too unless it is already a value (it was
 * materialized after the reshape was made). */
static int store_slot(program *p, int i)
{
    slot *s = &p->slots[i];
    if (s->store)
        return 0;
    const fl_tensor *below = NULL;
    if (s->op == LAZY_RESHAPE) {
        slot *b = &p->slots[s->arg[0]];
        int rc = b->op == LAZY_VALUE ? 0 : store_slot(p, s->arg[0]);
        if (rc)
            return rc;
        below = b->op == LAZY_VALUE ? lazy_impl(b->node)->value : b->store;
    }
    fl_tensor *value = fl_tensor_alloc(fl_cpu_backend(), FL_F32, s->node->ndim, s->node->shape);
    if (!value)
        return fl_backend_error(FL_ERR_MEMORY, "cannot allocate a tensor handle");
    int rc = below ? fl_cpu_backend()->reshape(fl_cpu_backend(), value, below) : cpu_alloc(value);
    if (rc) {
        fl_release(value);
        return rc;
    }
    s->store = value;
    return 0;
}

/* Whether computing slot i again costs more than reading its values back: its graph
 * reads two or more full-size inputs (a residual sum of a bias-added product), or
 * evaluates a transcendental function. Recomputing a bias-added product reads one
 * input, as reading it back would, and writing it out would cost memory and a pass's
 * worth of writes (the 120 MB of a vocabulary's logits). */
static bool worth_keeping(const program *p, int i, uint64_t (*inputs)[2], bool *costly, bool *narrow)
{
    const slot *s = &p->slots[i];
    inputs[i][0] = inputs[i][1] = 0;
    costly[i] = false;
    narrow[i] = true;
    if (s->op == LAZY_VALUE || s->op == LAZY_CAST) {
        if (s->distinct * 2 > p->numel) {
            inputs[i][i / 64] = 1ull << (i % 64);
            narrow[i] = fl_dtype_size(s->dtype) < sizeof(float);
        }
    } else if (s->op != LAZY_CONSTANT) {
        for (int k = 0; k < 2 && s->arg[k] >= 0; k++) {
            inputs[i][0] |= inputs[s->arg[k]][0];
            inputs[i][1] |= inputs[s->arg[k]][1];
            costly[i] |= costly[s->arg[k]];
            narrow[i] &= narrow[s->arg[k]];
        }
        costly[i] |= s->op >= LAZY_EXP && s->op <= LAZY_GELU_TANH && s->op != LAZY_SQRT && s->op != LAZY_RSQRT;
        costly[i] |= s->op == LAZY_POW || s->op == LAZY_GELU_GRAD || s->op == LAZY_GELU_TANH_GRAD;
    }
    return costly[i] || __builtin_popcountll(inputs[i][0]) + __builtin_popcountll(inputs[i][1]) >= 2;
}

/* Gives memory to the slots whose values the pass writes out: in an elementwise pass
 * the root and every node held from outside the graph but one of a narrow input; in a
 * reduction (which writes out no root) a held node that an earlier pass computed too,
 * if computing it a third time would cost more than reading it. */
static int choose_stores(program *p, bool reduction)
{
    uint64_t inputs[MAX_SLOTS][2];
    bool costly[MAX_SLOTS], narrow[MAX_SLOTS];
    _Static_assert(MAX_SLOTS <= 128, "a slot's inputs are a 128-bit set");
    for (int i = 0; i < p->count; i++) {
        slot *s = &p->slots[i];
        bool worth = worth_keeping(p, i, inputs, costly, narrow);
        if (s->op <= LAZY_CONSTANT)
            continue;
        bool held = __atomic_load_n(&s->node->refcount, __ATOMIC_RELAXED) > s->uses;
        bool store = reduction ? held && lazy_impl(s->node)->passes > 0 && worth
                               : i == p->count - 1 || (held && (worth || !narrow[i]));
        int rc = store ? store_slot(p, i) : 0;
        if (rc)
            return rc;
    }
    return 0;
}

/* After a pass (rc 0) stored nodes become values and let go of their graphs, and the
 * others remember that they were computed; after a failure the stores are dropped.
 * Slots come operands first, so letting go can free only slots already passed (a
 * reshape's operand that nothing else holds), never one still to come. */
static void finish_pass(program *p, int rc)
{
    for (int i = 0; i < p->count; i++) {
        slot *s = &p->slots[i];
        lazy_tensor *l = lazy_impl(s->node);
        if (!s->store) {
            if (!rc && s->op > LAZY_CONSTANT && l->passes < 1000)
                l->passes++;
            continue;
        }
        if (rc) {
            fl_release(s->store);
            continue;
        }
        fl_release(l->args[0]);
        fl_release(l->args[1]);
        fl_release(l->reduced);
        l->args[0] = l->args[1] = l->reduced = NULL;
        l->op = LAZY_VALUE;
        l->value = s->store;
    }
}

/* The program's compiled kernel (compile.c), if it has one ready and the pass is
 * long enough to gain from it; else NULL, and the tiles are interpreted. */
static lazy_kernel kernel_of(const program *p)
{
    if (p->numel < LAZY_COMPILE_MIN)
        return NULL;
    lazy_kernel_slot k[MAX_SLOTS];
    for (int i = 0; i < p->count; i++) {
        const slot *s = &p->slots[i];
        bool single = (s->op == LAZY_VALUE || s->op == LAZY_CAST) && s->ndim == 1 && s->strides[0] == 0;
        k[i] = (lazy_kernel_slot){.op = s->op, .arg = {s->arg[0], s->arg[1]}};
        k[i].input = s->op == LAZY_VALUE || s->op == LAZY_CAST || s->op == LAZY_CONSTANT;
        k[i].scalar = s->op == LAZY_CONSTANT || (single && !(s->op == LAZY_CAST && s->store));
        k[i].output = !k[i].input && s->op != LAZY_RESHAPE && s->store;
    }
    /* The root's values, which a reduction folds, come out of the kernel too. */
    int root = p->count - 1;
    while (p->slots[root].op == LAZY_RESHAPE)
        root = p->slots[root].arg[0];
    k[root].output |= !k[root].input;
    return lazy_kernel_for(k, p->count);
}

static int run(const fl_tensor *t);

int lazy_run(const fl_tensor *t)
{
    fl_profile_push("lazy fused pass");
    int rc = run(t);
    fl_profile_pop();
    return rc;
}

static int run(const fl_tensor *t)
{
    program *p = malloc(sizeof *p);
    if (!p)
        return fl_backend_error(FL_ERR_MEMORY, "cannot allocate a lazy program");
    int rc = compile(p, t) ? 0 : FL_ERR_VALUE;
    if (!rc)
        rc = choose_stores(p, false);
    lazy_kernel kernel = rc ? NULL : kernel_of(p);
    int64_t n = p->numel, tiles = (n + TILE - 1) / TILE;
    int threads = n >= CPU_PARALLEL_GRAIN ? cpu_threads() : 1;
    bool failed = false;
    if (!rc && n > 0) {
#pragma omp parallel num_threads(threads) if (threads > 1)
        {
            float *scratch = scratch_for(p);
            const float *value[MAX_SLOTS];
            bool step[MAX_SLOTS];
            if (!scratch)
                failed = true;
#pragma omp for schedule(static)
            for (int64_t tile = 0; tile < tiles; tile++)
                if (scratch) {
                    int64_t begin = tile * TILE;
                    run_tile(p, kernel, scratch, begin, n - begin < TILE ? n - begin : TILE, value, step);
                }
            free(scratch);
        }
        if (failed)
            rc = fl_backend_error(FL_ERR_MEMORY, "no memory for the scratch of a fused pass");
    }
    if (!rc)
        count_traffic(p, 0);
    finish_pass(p, rc);
    free(p);
    return rc;
}

/* ---- reductions ---- */

/* The combination of two partial results, as the CPU backend's: NaN propagates
 * through max and min. */
static inline double combine(int op, double acc, double x)
{
    switch (op) {
    case LAZY_SUM: return acc + x;
    case LAZY_PROD: return acc * x;
    case LAZY_MAX: return x > acc || x != x ? x : acc;
    default: return x < acc || x != x ? x : acc;
    }
}

static double identity(int op)
{
    return op == LAZY_SUM ? 0.0 : op == LAZY_PROD ? 1.0 : op == LAZY_MAX ? -INFINITY : INFINITY;
}

#define LANES 16
#define FOLD(COMBINE)                                                     \
    do {                                                                  \
        float acc[LANES];                                                 \
        for (int k = 0; k < LANES; k++)                                   \
            acc[k] = start;                                               \
        int64_t i = 0;                                                    \
        for (; i + LANES <= n; i += LANES)                                \
            for (int k = 0; k < LANES; k++)                               \
                acc[k] = COMBINE(acc[k], x[i + k]);                       \
        for (int k = 0; i < n; i++, k++)                                  \
            acc[k] = COMBINE(acc[k], x[i]);                               \
        double r = start;                                                 \
        for (int k = 0; k < LANES; k++)                                   \
            r = combine(op, r, acc[k]);                                   \
        return r;                                                         \
    } while (0)

#define SUM_(a, b) ((a) + (b))
#define PROD_(a, b) ((a) * (b))
#define MAX_(a, b) ((b) > (a) || (b) != (b) ? (b) : (a))
#define MIN_(a, b) ((b) < (a) || (b) != (b) ? (b) : (a))

/* op over a tile's n values; a single value (dense false) stands for n copies. */
static double fold_tile(int op, const float *x, bool dense, int64_t n)
{
    float start = (float)identity(op);
    if (!dense) {
        double r = identity(op);
        for (int64_t i = 0; i < n; i++)
            r = combine(op, r, *x);
        return r;
    }
    switch (op) {
    case LAZY_SUM: FOLD(SUM_);
    case LAZY_PROD: FOLD(PROD_);
    case LAZY_MAX: FOLD(MAX_);
    default: FOLD(MIN_);
    }
}

/* *copy = a new dense CPU tensor with t's values (t dense f32). */
static int copy_of(const fl_tensor *t, fl_tensor **copy)
{
    fl_tensor *c = fl_tensor_alloc(fl_cpu_backend(), FL_F32, t->ndim, t->shape);
    int rc = c ? cpu_alloc(c) : fl_backend_error(FL_ERR_MEMORY, "cannot allocate a tensor handle");
    if (rc) {
        fl_release(c);
        return rc;
    }
    memcpy(cpu_data(c), cpu_data(t), (size_t)t->numel * sizeof(float));
    *copy = c;
    return 0;
}

static int copy_reduction(fl_tensor *out, const fl_tensor *reduced)
{
    fl_tensor *value;
    int rc = copy_of(reduced, &value);
    return rc ? rc : lazy_adopt(out, value);
}

static int run_reduction(fl_tensor *out, const fl_tensor *a, unsigned axes, int op);

int lazy_run_reduction(fl_tensor *out, const fl_tensor *a, unsigned axes, int op)
{
    fl_profile_push("lazy fused reduction");
    int rc = run_reduction(out, a, axes, op);
    fl_profile_pop();
    return rc;
}

static int run_reduction(fl_tensor *out, const fl_tensor *a, unsigned axes, int op)
{
    /* Fusable when the reduced axes are the trailing ones (size-1 axes aside): every
     * output then reduces one contiguous run of the flat input. */
    int first = a->ndim;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != 1 && (axes & (1u << i))) {
            first = i;
            break;
        }
    int64_t inner = 1;
    for (int i = 0; i < a->ndim; i++) {
        bool reduced = (axes & (1u << i)) && a->shape[i] != 1;
        if (a->shape[i] != 1 && i > first && !reduced)
            return -1;
        if (i >= first)
            inner *= a->shape[i];
    }
    if (a->numel == 0 || first == a->ndim)
        return -1;
    lazy_tensor *la = lazy_impl(a);
    if (la->reduced && la->reduced_axes == axes && la->reduced_op == op)
        return copy_reduction(out, la->reduced);
    /* A row longer than a tile is cut into tiles, each folded into a partial result;
     * shorter rows are taken a band at a time, as many as fill a tile, so that short
     * rows (softmax over 128 keys) do not pay a tile's overhead each. */
    int64_t rows = a->numel / inner, per_row = (inner + TILE - 1) / TILE;
    int64_t band = per_row == 1 ? TILE / inner : 1;
    int64_t items = per_row == 1 ? (rows + band - 1) / band : rows * per_row;

    program *p = malloc(sizeof *p);
    if (p)
        p->count = 0;
    double *partial = malloc((size_t)(rows * per_row) * sizeof *partial);
    fl_tensor *result = fl_tensor_alloc(fl_cpu_backend(), FL_F32, out->ndim, out->shape);
    int rc = p && partial && result ? cpu_alloc(result) : fl_backend_error(FL_ERR_MEMORY, "no memory for a reduction");
    if (!rc && !compile(p, a))
        rc = FL_ERR_VALUE;
    if (!rc)
        rc = choose_stores(p, true);
    lazy_kernel kernel = rc ? NULL : kernel_of(p);
    int threads = a->numel >= CPU_PARALLEL_GRAIN ? cpu_threads() : 1;
    bool failed = false;
    if (!rc) {
#pragma omp parallel num_threads(threads) if (threads > 1)
        {
            float *scratch = scratch_for(p);
            const float *value[MAX_SLOTS];
            bool step[MAX_SLOTS];
            if (!scratch)
                failed = true;
#pragma omp for schedule(static)
            for (int64_t item = 0; item < items; item++)
                if (scratch && per_row > 1) {
                    int64_t row = item / per_row, col = item % per_row * TILE;
                    int64_t n = inner - col < TILE ? inner - col : TILE;
                    run_tile(p, kernel, scratch, row * inner + col, n, value, step);
                    partial[item] = fold_tile(op, value[p->count - 1], step[p->count - 1], n);
                } else if (scratch) {
                    int64_t row = item * band, count = rows - row < band ? rows - row : band;
                    run_tile(p, kernel, scratch, row * inner, count * inner, value, step);
                    const float *root = value[p->count - 1];
                    bool dense = step[p->count - 1];
                    for (int64_t r = 0; r < count; r++)
                        partial[row + r] = fold_tile(op, dense ? root + r * inner : root, dense, inner);
                }
            free(scratch);
        }
        if (failed)
            rc = fl_backend_error(FL_ERR_MEMORY, "no memory for the scratch of a fused pass");
    }
    if (!rc) {
        float *y = cpu_data(result);
        for (int64_t row = 0; row < rows; row++) {
            double acc = identity(op);
            for (int64_t j = 0; j < per_row; j++)
                acc = combine(op, acc, partial[row * per_row + j]);
            y[row] = (float)acc;
        }
        count_traffic(p, rows);
    }
    if (p)
        finish_pass(p, rc);
    free(p);
    free(partial);
    if (rc) {
        fl_release(result);
        return rc;
    }
    if (la->op != LAZY_VALUE) { /* the root was not kept: the pass may be asked for again */
        fl_release(la->reduced);
        la->reduced = NULL;
        if (!copy_of(result, &la->reduced)) {
            la->reduced_axes = axes;
            la->reduced_op = op;
        }
    }
    return lazy_adopt(out, result);
}
