/*
 * Fusion on the device: f32 elementwise operations are recorded as pending nodes, and
 * a pending graph runs as one generated kernel when something reads it. The kernel
 * reads each leaf (a value, through its strides if it is a view) once, keeps every
 * intermediate in registers, and writes the node asked for, and with it every pending
 * node of the graph that is also held from outside it (autograd keeps intermediates
 * for the backward pass): those would otherwise be computed again when read.
 *
 * Materializing a node changes it and the nodes under it, and graphs are shared
 * between threads, so it happens under one lock, which every reader of a node's
 * state holds (ocl_value).
 */
#define _GNU_SOURCE /* PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "opencl.h"

static pthread_mutex_t graph_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

void ocl_graph_lock(void) { pthread_mutex_lock(&graph_lock); }
void ocl_graph_unlock(void) { pthread_mutex_unlock(&graph_lock); }

static int nodes_of(const fl_tensor *t)
{
    const ocl_tensor *o = ocl_impl(t);
    return o->state == OCL_PENDING ? o->nodes : 0;
}

int ocl_defer(fl_tensor *out, int op, const fl_tensor *a, const fl_tensor *b)
{
    ocl_graph_lock();
    /* A graph past its size runs its bigger operand first. */
    if (nodes_of(a) + (b ? nodes_of(b) : 0) + 1 > OCL_MAX_NODES) {
        const fl_tensor *big = b && nodes_of(b) > nodes_of(a) ? b : a;
        if (!ocl_value(big)) {
            ocl_graph_unlock();
            return FL_ERR_BACKEND;
        }
    }
    ocl_tensor *o = calloc(1, sizeof *o);
    if (!o) {
        ocl_graph_unlock();
        return fl_backend_error(FL_ERR_MEMORY, "out of host memory for a pending operation");
    }
    o->state = OCL_PENDING;
    o->op = op;
    o->args[0] = fl_retain(a);
    o->args[1] = b ? fl_retain(b) : NULL;
    int n = 1 + nodes_of(a) + (b ? nodes_of(b) : 0);
    o->nodes = n > OCL_MAX_NODES ? OCL_MAX_NODES : n;
    out->impl = o;
    ocl_graph_unlock();
    return 0;
}

/* ---- building a program from a graph ---- */

typedef struct builder {
    kg_program p;
    const fl_tensor *leaves[KG_MAX_LEAVES];
    const fl_tensor *nodes[KG_MAX_SLOTS]; /* the tensor of each slot */
    int refs[KG_MAX_SLOTS];               /* references to each slot's tensor from inside the graph */
    double constants[KG_MAX_SLOTS];
    int nconstants;
    bool overflow;
} builder;

static int slot_of(builder *g, const fl_tensor *t)
{
    for (int j = 0; j < g->p.nslots; j++)
        if (g->nodes[j] == t) {
            g->refs[j]++;
            return j;
        }
    return -1;
}

static int add_slot(builder *g, const fl_tensor *t, kg_slot s)
{
    if (g->p.nslots == KG_MAX_SLOTS) {
        g->overflow = true;
        return 0;
    }
    int j = g->p.nslots++;
    g->p.slots[j] = s;
    g->nodes[j] = t;
    g->refs[j] = 1;
    return j;
}

/* The slot computing t, adding it and what it needs. */
static int visit(builder *g, const fl_tensor *t)
{
    int j = slot_of(g, t);
    if (j >= 0 || g->overflow)
        return j < 0 ? 0 : j;
    const ocl_tensor *o = ocl_impl(t);
    if (o->state == OCL_CONSTANT) {
        j = add_slot(g, t, (kg_slot){KG_CONSTANT, {-1, -1}, FL_F32});
        if (!g->overflow)
            g->constants[g->nconstants++] = o->constant;
        return j;
    }
    if (o->state == OCL_VALUE) {
        if (g->p.nleaves == KG_MAX_LEAVES) {
            g->overflow = true;
            return 0;
        }
        int k = g->p.nleaves++;
        g->leaves[k] = t;
        g->p.leaves[k] = (kg_leaf){t->dtype, !o->contiguous};
        return add_slot(g, t, (kg_slot){KG_LEAF, {k, -1}, t->dtype});
    }
    int x = visit(g, o->args[0]);
    int z = o->args[1] ? visit(g, o->args[1]) : -1;
    return add_slot(g, t, (kg_slot){o->op, {x, z}, FL_F32});
}

/* A pending node turned into the value of buffer out (a fresh contiguous tensor). */
static void become_value(const fl_tensor *t, fl_tensor *value)
{
    ocl_tensor *o = ocl_impl(t), *v = ocl_impl(value);
    for (int i = 0; i < 2; i++)
        if (o->args[i]) {
            fl_release(o->args[i]);
            o->args[i] = NULL;
        }
    o->state = OCL_VALUE;
    o->buffer = v->buffer;
    v->buffer = NULL;
    o->offset = 0;
    o->contiguous = true;
    ocl_dense_strides(t->ndim, t->shape, o->strides);
}

static int materialize(const fl_tensor *t);

/* Memory telemetry attributes what a node allocates when it runs to the primitive
 * that made it, as if it had run then. */
int ocl_materialize(const fl_tensor *t)
{
#define NAME(op, primitive) primitive,
    static const char *const primitives[] = {LAZY_OPS(NAME)};
#undef NAME
    ocl_tensor *o = ocl_impl(t);
    if (o->state == OCL_VALUE)
        return 0;
    const char *previous = fl_memory_operation();
    fl_memory_set_operation(o->state == OCL_CONSTANT ? "full" : primitives[o->op]);
    int rc = materialize(t);
    fl_memory_set_operation(previous);
    return rc;
}

static int materialize(const fl_tensor *t)
{
    ocl_tensor *o = ocl_impl(t);
    fl_tensor *out = fl_tensor_alloc(t->backend, t->dtype, t->ndim, t->shape);
    if (!out)
        return fl_backend_error(FL_ERR_MEMORY, "out of host memory");
    int rc;
    if (o->state == OCL_CONSTANT) {
        rc = ocl_alloc(out);
        if (!rc)
            rc = ocl_fill_value(out, o->constant);
        if (!rc)
            become_value(t, out);
        fl_release(out);
        return rc;
    }
    builder *g = calloc(1, sizeof *g);
    if (!g) {
        fl_release(out);
        return fl_backend_error(FL_ERR_MEMORY, "out of host memory");
    }
    g->p.ndim = t->ndim;
    g->p.compute = FL_F32;
    int root = visit(g, t);
    if (g->overflow) {
        /* Too many leaves for one kernel: run the operands first, then this node. */
        free(g);
        fl_release(out);
        for (int i = 0; i < 2; i++)
            if (o->args[i] && (rc = ocl_materialize(o->args[i])))
                return rc;
        return ocl_materialize(t);
    }
    /* The outputs: t, and pending nodes held from outside the graph. Those past the
     * kernel's outputs run after it, each by itself: left pending, a node that is
     * read only through later nodes (an optimizer's parameter, whose update reads it
     * at every step) would grow by a step's operations each step, and each step
     * would build a new program. */
    fl_tensor *outputs[KG_MAX_OUTPUTS] = {out};
    const fl_tensor *written[KG_MAX_OUTPUTS] = {t};
    fl_tensor *after[KG_MAX_SLOTS];
    int nafter = 0;
    g->p.outputs[g->p.noutputs++] = root;
    rc = ocl_alloc(out);
    for (int j = 0; j < g->p.nslots && !rc; j++) {
        const fl_tensor *n = g->nodes[j];
        if (j == root || ocl_impl(n)->state != OCL_PENDING)
            continue;
        /* refs[j] counts the edges into it from the graph (the first visit included);
         * a reference count above that is a holder outside the graph. */
        if (n->refcount <= g->refs[j])
            continue;
        if (g->p.noutputs == KG_MAX_OUTPUTS) {
            after[nafter++] = fl_retain(n);
            continue;
        }
        fl_tensor *extra = fl_tensor_alloc(t->backend, n->dtype, n->ndim, n->shape);
        if (!extra || (rc = ocl_alloc(extra))) {
            fl_release(extra);
            rc = rc ? rc : FL_ERR_MEMORY;
            break;
        }
        outputs[g->p.noutputs] = extra;
        written[g->p.noutputs] = n;
        g->p.outputs[g->p.noutputs++] = j;
    }
    if (!rc)
        rc = ocl_run_program("fused elementwise", &g->p, g->leaves, g->constants, outputs);
    for (int k = 0; k < g->p.noutputs; k++) {
        if (!rc && outputs[k])
            become_value(written[k], outputs[k]);
        fl_release(outputs[k]);
    }
    free(g);
    for (int k = 0; k < nafter; k++) { /* one may have run with another */
        if (!rc && ocl_impl(after[k])->state == OCL_PENDING)
            rc = ocl_materialize(after[k]);
        fl_release(after[k]);
    }
    return rc;
}
