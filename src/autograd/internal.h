/* What the files of the autograd layer share: the variable and node records. */
#ifndef FLARE_AUTOGRAD_INTERNAL_H
#define FLARE_AUTOGRAD_INTERNAL_H

#include <stddef.h>

#include "flare/autograd.h"
#include "flare/backend.h" /* struct fl_tensor */
#include "flare/extension.h"

typedef struct fl_node fl_node;

/* Where the gradient of one input goes: the node that computed the input, or the
 * input itself when it is a leaf that accumulates a gradient. The input's shape and
 * dtype let the engine sum a broadcast gradient down and convert it. */
typedef struct fl_edge {
    fl_node *node;
    fl_variable *leaf;
    fl_dtype dtype;
    int ndim;
    int64_t shape[FL_MAX_DIMS];
} fl_edge;

struct fl_node {
    int refcount;
    fl_grad_fn grad_fn;
    int nedges;
    fl_edge *edges;   /* one per input; both targets NULL for inputs without gradient */
    int nsaved;
    fl_tensor **saved;
    bool freed;       /* a backward without retain_graph has run it and dropped what it saved */
    /* Backward-pass state. */
    unsigned pass;    /* the pass that last visited the node */
    int pending;      /* contributions still to arrive in this pass */
    fl_tensor *grad;  /* the gradient of the node's output, summed so far */
    size_t context_size;
    max_align_t context[]; /* the forward's context bytes */
};

typedef struct hook {
    fl_grad_hook fn;
    void *user;
} hook;

struct fl_variable {
    int refcount;
    bool requires_grad;
    fl_tensor *value;
    fl_tensor *grad; /* leaves only */
    fl_node *node;   /* NULL for leaves */
    int nhooks;
    hook *hooks;
    /* Backward-pass state of a leaf. */
    unsigned pass;
    int pending;
};

/* A variable the caller owns (not registered in a scope); node is taken over. */
fl_variable *fl__v_new_owned(const fl_tensor *value, bool requires_grad, fl_node *node);
/* Registers v with the innermost scope, if any. */
fl_variable *fl__v_out(fl_variable *v);
void fl__node_release(fl_node *node);


#endif
