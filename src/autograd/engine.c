/*
 * The tape: recording nodes, and the backward pass over them.
 *
 * Backward is Kahn's algorithm over the nodes reachable from the root. A first walk
 * counts, for every node and leaf, the contributions it will receive; a node runs when
 * all of its have arrived, so its gradient function runs once, on the complete
 * gradient, and leaves' hooks fire when their gradient is final. A node's gradient
 * is released as soon as its function has run, and (without retain_graph) so is
 * everything it saved.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ---- nodes ---- */

static void node_free_saved(fl_node *node)
{
    for (int i = 0; i < node->nsaved; i++)
        fl_release(node->saved[i]);
    free(node->saved);
    node->saved = NULL;
    node->nsaved = 0;
}

/* Drops the node's references to its inputs, appending the nodes that die with them
 * to a work list, so that releasing a long chain does not recurse. */
static bool node_drop_edges(fl_node *node, fl_node ***dying, size_t *count, size_t *capacity)
{
    for (int i = 0; i < node->nedges; i++) {
        fl_edge *e = &node->edges[i];
        fl_v_release(e->leaf);
        e->leaf = NULL;
        fl_node *child = e->node;
        e->node = NULL;
        if (!child || __atomic_sub_fetch(&child->refcount, 1, __ATOMIC_ACQ_REL) != 0)
            continue;
        if (*count == *capacity) {
            size_t grown = *capacity ? 2 * *capacity : 64;
            fl_node **list = realloc(*dying, grown * sizeof *list);
            if (!list) /* leak the rest of the chain rather than crash */
                return false;
            *dying = list;
            *capacity = grown;
        }
        (*dying)[(*count)++] = child;
    }
    return true;
}

void fl__node_release(fl_node *node)
{
    if (!node || __atomic_sub_fetch(&node->refcount, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    fl_node **dying = NULL;
    size_t count = 0, capacity = 0;
    for (fl_node *n = node; n; n = count ? dying[--count] : NULL) {
        node_drop_edges(n, &dying, &count, &capacity);
        node_free_saved(n);
        fl_release(n->grad);
        free(n->edges);
        free(n);
    }
    free(dying);
}

/* ---- recording ---- */

fl_variable *fl_v_record(const fl_tensor *value, fl_variable *const *inputs, int ninputs, fl_grad_fn grad_fn,
                         const fl_tensor *const *saved, int nsaved, const void *context, size_t context_size)
{
    if (!value) /* the forward computation failed and recorded why */
        return fl_null_args("fl_v_record", 1, value), NULL;
    if (ninputs < 0 || nsaved < 0 || (ninputs > 0 && !inputs) || (nsaved > 0 && !saved))
        return fl_error(FL_ERR_VALUE, "fl_v_record", "invalid lists of %d inputs and %d saved tensors", ninputs,
                        nsaved);
    bool any = false;
    for (int i = 0; i < ninputs; i++) {
        if (fl_null_args("fl_v_record", 1, inputs[i]))
            return NULL;
        any |= inputs[i]->requires_grad;
    }
    for (int i = 0; i < nsaved; i++)
        if (fl_null_args("fl_v_record", 1, saved[i]))
            return NULL;
    if (!any || !fl_grad_enabled())
        return fl__v_out(fl__v_new_owned(value, false, NULL));
    if (!grad_fn)
        return fl_error(FL_ERR_NULL, "fl_v_record", "no gradient function");

    fl_node *node = calloc(1, sizeof *node + context_size);
    fl_edge *edges = calloc((size_t)ninputs, sizeof *edges);
    fl_tensor **kept = nsaved ? calloc((size_t)nsaved, sizeof *kept) : NULL;
    if (!node || !edges || (nsaved && !kept)) {
        free(node), free(edges), free(kept);
        return fl_error(FL_ERR_MEMORY, "fl_v_record", "out of memory");
    }
    node->refcount = 1;
    node->grad_fn = grad_fn;
    node->nedges = ninputs;
    node->edges = edges;
    for (int i = 0; i < ninputs; i++) {
        fl_variable *in = inputs[i];
        fl_edge *e = &edges[i];
        if (!in->requires_grad)
            continue;
        if (in->node)
            e->node = (__atomic_add_fetch(&in->node->refcount, 1, __ATOMIC_RELAXED), in->node);
        else
            e->leaf = fl_v_retain(in);
        e->dtype = in->value->dtype;
        e->ndim = in->value->ndim;
        memcpy(e->shape, in->value->shape, sizeof e->shape);
    }
    node->nsaved = nsaved;
    node->saved = kept;
    for (int i = 0; i < nsaved; i++)
        kept[i] = fl_retain(saved[i]);
    node->context_size = context_size;
    if (context_size)
        memcpy(node->context, context, context_size);

    fl_variable *v = fl__v_new_owned(value, true, node);
    if (!v)
        fl__node_release(node);
    return fl__v_out(v);
}

/* ---- backward ---- */

static unsigned pass_counter;

typedef struct node_list {
    fl_node **items;
    size_t count, capacity;
} node_list;

static bool push(node_list *list, fl_node *node)
{
    if (list->count == list->capacity) {
        size_t grown = list->capacity ? 2 * list->capacity : 64;
        fl_node **items = realloc(list->items, grown * sizeof *items);
        if (!items)
            return false;
        list->items = items;
        list->capacity = grown;
    }
    list->items[list->count++] = node;
    return true;
}

/* Visits every node reachable from root once, counting the contributions each node
 * and leaf will receive. The nodes are retained in `all` for the pass. */
static fl_status count_contributions(fl_node *root, unsigned pass, node_list *all)
{
    node_list stack = {0};
    root->pass = pass;
    root->pending = 0;
    __atomic_add_fetch(&root->refcount, 1, __ATOMIC_RELAXED);
    if (!push(all, root) || !push(&stack, root))
        goto oom;
    while (stack.count) {
        fl_node *n = stack.items[--stack.count];
        for (int i = 0; i < n->nedges; i++) {
            fl_edge *e = &n->edges[i];
            if (e->leaf) {
                if (e->leaf->pass != pass) {
                    e->leaf->pass = pass;
                    e->leaf->pending = 0;
                }
                e->leaf->pending++;
            } else if (e->node) {
                fl_node *child = e->node;
                if (child->pass != pass) {
                    child->pass = pass;
                    child->pending = 0;
                    __atomic_add_fetch(&child->refcount, 1, __ATOMIC_RELAXED);
                    if (!push(all, child) || !push(&stack, child))
                        goto oom;
                }
                child->pending++;
            }
        }
    }
    free(stack.items);
    return FL_OK;
oom:
    free(stack.items);
    return fl_error(FL_ERR_MEMORY, "fl_v_backward", "out of memory"), FL_ERR_MEMORY;
}

/* g summed over the axes along which it was broadcast from shape, then converted to
 * dtype: the gradient of an input that was broadcast in the forward. */
static fl_tensor *reduce_to_input(fl_tensor *g, const fl_edge *e)
{
    if (!g)
        return NULL;
    int extra = g->ndim - e->ndim;
    bool same = extra == 0 && memcmp(g->shape, e->shape, (size_t)e->ndim * sizeof *e->shape) == 0;
    if (!same) {
        int axes[FL_MAX_DIMS], count = 0;
        bool ok = extra >= 0;
        for (int i = 0; ok && i < g->ndim; i++) {
            if (i < extra)
                axes[count++] = i;
            else if (e->shape[i - extra] == 1 && g->shape[i] != 1)
                axes[count++] = i;
            else if (e->shape[i - extra] != g->shape[i])
                ok = false;
        }
        if (!ok) {
            char a[FL_DESC_SIZE], b[FL_DESC_SIZE];
            return fl_error(FL_ERR_SHAPE, "fl_v_backward",
                             "a gradient function returned %s for an input of shape %s", fl_describe(g, a),
                             fl_describe_shape(e->ndim, e->shape, b));
        }
        g = fl_reshape(fl_sum(g, axes, count, false), e->ndim, e->shape);
    }
    return g && g->dtype != e->dtype ? fl_cast(g, e->dtype) : g;
}

/* *slot += g, keeping the sum out of the current scope. */
static fl_status accumulate(fl_tensor **slot, fl_tensor *g)
{
    fl_tensor *sum = *slot ? fl_add(*slot, g) : g;
    if (!sum)
        return fl_last_status();
    fl_tensor *kept = fl_keep(sum);
    fl_release(*slot);
    *slot = kept;
    return FL_OK;
}

static void leaf_received(fl_variable *leaf)
{
    if (--leaf->pending == 0)
        for (int i = 0; i < leaf->nhooks; i++)
            leaf->hooks[i].fn(leaf, leaf->hooks[i].user);
}

/* Runs one node's gradient function and passes the results on. */
static fl_status run_node(fl_node *n, bool retain_graph, node_list *ready)
{
    fl_status status = FL_OK;
    /* A function may have any number of inputs: the arrays come from the heap. */
    size_t count = n->nedges > 0 ? (size_t)n->nedges : 1;
    bool *needs = calloc(count, sizeof *needs);
    fl_tensor **grads = calloc(count, sizeof *grads);
    if (!needs || !grads) {
        free(needs);
        free(grads);
        return fl_error(FL_ERR_MEMORY, "fl_v_backward", "out of memory for the %d gradients of a node", n->nedges),
               FL_ERR_MEMORY;
    }
    for (int i = 0; i < n->nedges; i++) {
        needs[i] = n->edges[i].node || n->edges[i].leaf;
        grads[i] = NULL;
    }
    fl_scope scope = fl_scope_begin();
    if (n->grad) {
        fl_grad g = {
            .output_grad = n->grad,
            .saved = n->saved,
            .context = n->context,
            .ninputs = n->nedges,
            .needs_grad = needs,
            .input_grads = grads,
        };
        n->grad_fn(&g);
    }
    for (int i = 0; i < n->nedges && status == FL_OK; i++) {
        fl_edge *e = &n->edges[i];
        if (!needs[i])
            continue;
        fl_tensor *g = grads[i];
        if (!g && fl_last_status() != FL_OK) { /* the gradient function failed */
            status = fl_last_status();
            break;
        }
        if (g) {
            g = reduce_to_input(g, e);
            status = g ? accumulate(e->leaf ? &e->leaf->grad : &e->node->grad, g) : fl_last_status();
        }
        if (e->leaf)
            leaf_received(e->leaf);
        else if (--e->node->pending == 0 && !push(ready, e->node))
            status = (fl_error(FL_ERR_MEMORY, "fl_v_backward", "out of memory"), FL_ERR_MEMORY);
    }
    fl_scope_end(scope);
    free(needs);
    free(grads);
    fl_release(n->grad);
    n->grad = NULL;
    if (!retain_graph) {
        node_free_saved(n);
        n->freed = true;
    }
    return status;
}

fl_status fl_v_backward(fl_variable *root, const fl_tensor *grad, bool retain_graph)
{
    if (fl_null_args("fl_v_backward", 1, root))
        return fl_last_status();
    char a[FL_DESC_SIZE], b[FL_DESC_SIZE];
    if (!root->requires_grad)
        return fl_error(FL_ERR_VALUE, "fl_v_backward", "the variable %s does not require a gradient",
                         fl_describe(root->value, a)),
               FL_ERR_VALUE;
    if (grad && fl_mixed_backends("fl_v_backward", 2, root->value, grad))
        return FL_ERR_VALUE;
    if (grad && !fl_same_shape(grad, root->value))
        return fl_error(FL_ERR_SHAPE, "fl_v_backward", "the gradient %s does not match the root %s",
                         fl_describe(grad, a), fl_describe(root->value, b)),
               FL_ERR_SHAPE;
    if (!grad && root->value->numel != 1)
        return fl_error(FL_ERR_SHAPE, "fl_v_backward",
                        "a gradient must be given for a root of more than one element, %s",
                         fl_describe(root->value, a)),
               FL_ERR_SHAPE;
    if (root->node && root->node->freed)
        return fl_error(FL_ERR_VALUE, "fl_v_backward",
                        "the graph was freed by an earlier backward; pass retain_graph to go through it again"),
               FL_ERR_VALUE;

    fl_scope scope = fl_scope_begin();
    fl_tensor *seed = grad ? fl_cast(grad, root->value->dtype) : fl_ones_like(root->value);
    fl_status status = seed ? FL_OK : fl_last_status();
    if (status == FL_OK && !root->node) { /* a leaf: its own gradient is the seed */
        status = accumulate(&root->grad, seed);
        for (int i = 0; status == FL_OK && i < root->nhooks; i++)
            root->hooks[i].fn(root, root->hooks[i].user);
    }
    if (status != FL_OK || !root->node) {
        fl_scope_end(scope);
        return status;
    }

    unsigned pass = __atomic_add_fetch(&pass_counter, 1, __ATOMIC_RELAXED);
    node_list all = {0}, ready = {0};
    status = count_contributions(root->node, pass, &all);
    if (status == FL_OK)
        status = accumulate(&root->node->grad, seed);
    if (status == FL_OK && !push(&ready, root->node))
        status = (fl_error(FL_ERR_MEMORY, "fl_v_backward", "out of memory"), FL_ERR_MEMORY);
    while (status == FL_OK && ready.count) {
        fl_node *n = ready.items[--ready.count];
        if (n->freed)
            status = (fl_error(FL_ERR_VALUE, "fl_v_backward",
                               "part of the graph was freed by an earlier backward; pass retain_graph"),
                      FL_ERR_VALUE);
        else
            status = run_node(n, retain_graph, &ready);
    }
    /* After a failure, gradients parked on nodes that never ran are dropped. */
    for (size_t i = 0; i < all.count; i++) {
        fl_release(all.items[i]->grad);
        all.items[i]->grad = NULL;
        fl__node_release(all.items[i]);
    }
    free(all.items);
    free(ready.items);
    fl_scope_end(scope);
    return status;
}
