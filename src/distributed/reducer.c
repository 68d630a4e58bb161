/* The coalescing all-reduce of many tensors, written once above the engines: tensors
 * are copied into flat buckets, each bucket is reduced by one collective, and the
 * results are views of the reduced buckets (on a backend with host access; others
 * stage the bucket in host memory). */
#include <stdlib.h>
#include <string.h>

#include "../tensor/internal.h" /* fl__host_output */
#include "internal.h"

typedef struct slot {
    fl_dtype dtype;
    int ndim;
    int64_t shape[FL_MAX_DIMS];
    int64_t numel;
    int bucket;
    int64_t offset; /* in elements, within the bucket */
    bool added;     /* in this round */
    const fl_backend *backend; /* of the tensor added this round: where its result goes */
} slot;

typedef struct bucket {
    fl_dtype dtype;
    int64_t numel;
    int members;
    int pending;    /* members not yet added in this round */
    const fl_backend *backend; /* of the first tensor added this round: where the flat buffer lives */
    fl__host_output flat; /* this round's buffer, 1-D */
    fl_tensor *reduced;   /* the flat buffer once reduced */
    void *work;     /* the engine's pending all-reduce */
} bucket;

struct fl_dist_reducer {
    fl_dist_op op;
    int count;
    slot *slots;
    int bucket_count;
    bucket *buckets;
    int next_start; /* buckets start in index order, the same on every rank */
    fl_distributed *engine; /* the engine this round's buckets went to */
};

fl_dist_reducer *fl_dist_reducer_new(const fl_tensor *const *templates, int count, fl_dist_op op,
                                     size_t bucket_bytes)
{
    const char *fn = "fl_dist_reducer_new";
    if (!templates || count <= 0)
        return fl_error(templates ? FL_ERR_VALUE : FL_ERR_NULL, fn, "needs a list of at least one tensor (got %s, %d)",
                        templates ? "a list" : "NULL", count);
    for (int i = 0; i < count; i++)
        if (fl_null_args(fn, 1, templates[i]) || !fl__dist_accepts(fn, templates[i], op))
            return NULL;
    fl_dist_reducer *r = calloc(1, sizeof *r);
    if (r) {
        r->slots = calloc((size_t)count, sizeof *r->slots);
        r->buckets = calloc((size_t)count, sizeof *r->buckets); /* at most one per tensor */
    }
    if (!r || !r->slots || !r->buckets) {
        fl_dist_reducer_free(r);
        return fl_error(FL_ERR_MEMORY, fn, "cannot allocate a reducer of %d tensors", count);
    }
    r->op = op;
    r->count = count;
    /* Last to first: backward makes the last layers' gradients first. One open bucket
     * per dtype, closed once it holds bucket_bytes. */
    int open[FL_DTYPE_COUNT];
    for (int d = 0; d < FL_DTYPE_COUNT; d++)
        open[d] = -1;
    for (int i = count - 1; i >= 0; i--) {
        const fl_tensor *t = templates[i];
        slot *s = &r->slots[i];
        s->dtype = t->dtype;
        s->ndim = t->ndim;
        memcpy(s->shape, t->shape, sizeof s->shape);
        s->numel = t->numel;
        s->backend = t->backend;
        if (open[t->dtype] < 0) {
            open[t->dtype] = r->bucket_count++;
            r->buckets[open[t->dtype]].dtype = t->dtype;
            r->buckets[open[t->dtype]].backend = t->backend;
        }
        bucket *b = &r->buckets[open[t->dtype]];
        s->bucket = open[t->dtype];
        s->offset = b->numel;
        b->numel += t->numel;
        b->members++;
        b->pending++;
        if (bucket_bytes > 0 && (size_t)b->numel * fl_dtype_size(b->dtype) >= bucket_bytes)
            open[t->dtype] = -1;
    }
    return r;
}

int fl_dist_reducer_bucket_count(const fl_dist_reducer *reducer) { return reducer ? reducer->bucket_count : 0; }

/* Starts, in order, every bucket whose tensors are all in and whose predecessors started. */
static bool start_ready(const char *fn, fl_dist_reducer *r)
{
    while (r->next_start < r->bucket_count && r->buckets[r->next_start].pending == 0) {
        bucket *b = &r->buckets[r->next_start];
        if (!r->engine && !(r->engine = fl__dist_engine(fn)))
            return false;
        if (!fl__dist_implements(fn, r->engine, r->engine->all_reduce != NULL, "all_reduce"))
            return false;
        void *data = b->flat.data;
        int rc = r->engine->all_reduce(r->engine, data, data, b->numel, b->dtype, fl__dist_engine_op(r->op), &b->work);
        if (!fl__dist_check(fn, rc))
            return false;
        r->next_start++;
    }
    return true;
}

fl_status fl_dist_reducer_add(fl_dist_reducer *reducer, int index, const fl_tensor *t)
{
    const char *fn = "fl_dist_reducer_add";
    if (!reducer) {
        fl_error(FL_ERR_NULL, fn, "the reducer is NULL");
        return FL_ERR_NULL;
    }
    if (fl_null_args(fn, 1, t))
        return fl_last_status();
    if (index < 0 || index >= reducer->count) {
        fl_error(FL_ERR_INDEX, fn, "index %d is not one of the reducer's %d tensors", index, reducer->count);
        return FL_ERR_INDEX;
    }
    slot *s = &reducer->slots[index];
    char got[FL_DESC_SIZE], want[FL_DESC_SIZE];
    if (t->dtype != s->dtype || t->ndim != s->ndim || memcmp(t->shape, s->shape, (size_t)s->ndim * sizeof *s->shape)) {
        fl_describe_shape(s->ndim, s->shape, want);
        fl_error(FL_ERR_SHAPE, fn, "tensor %d is %s, but its template is %s%s", index, fl_describe(t, got),
                 fl_dtype_name(s->dtype), want);
        return FL_ERR_SHAPE;
    }
    if (s->added) {
        fl_error(FL_ERR_VALUE, fn, "tensor %d was already added in this round", index);
        return FL_ERR_VALUE;
    }
    bucket *b = &reducer->buckets[s->bucket];
    /* Buffers and results follow the tensors given, so that a model moved to another
     * backend after its reducer was made gets its gradients back where it now is. */
    if (!b->flat.tensor) {
        b->backend = t->backend;
        if (!fl__host_output_begin(fn, &b->flat, b->backend, b->dtype, 1, &b->numel))
            return fl_last_status();
    }
    s->backend = t->backend;
    void *dst = (char *)b->flat.data + s->offset * (int64_t)fl_dtype_size(s->dtype);
    if (fl_to_host(t, dst, (size_t)t->numel * fl_dtype_size(t->dtype)) != FL_OK)
        return fl_last_status();
    s->added = true;
    b->pending--;
    return start_ready(fn, reducer) ? FL_OK : fl_last_status();
}

/* Ends the round and readies every bucket for the next. With drain, it first waits for
 * the buckets that started (a collective cannot be abandoned midway); after a failed
 * wait it does not, since the job is over and each wait would last the timeout. */
static void end_round(const char *fn, fl_dist_reducer *r, bool drain)
{
    for (int i = 0; i < r->bucket_count; i++) {
        bucket *b = &r->buckets[i];
        if (b->work && drain)
            drain = fl__dist_wait(fn, r->engine, b->work);
        b->work = NULL;
        fl__host_output_abandon(&b->flat);
        fl_release(b->reduced);
        b->reduced = NULL;
        b->pending = b->members;
    }
    for (int i = 0; i < r->count; i++)
        r->slots[i].added = false;
    r->next_start = 0;
    r->engine = NULL;
}

/* Tensor index's values in its reduced bucket, on the backend it was added from: a view
 * where the backend makes one, handed to the caller's scope like any result. */
static fl_tensor *result(const char *fn, fl_dist_reducer *r, int index)
{
    slot *s = &r->slots[index];
    fl_scope scope = fl_scope_begin();
    const fl_tensor *flat = r->buckets[s->bucket].reduced;
    fl_tensor *view = fl_reshape(fl_index(flat, FL_INDEX(FL_RANGE(s->offset, s->offset + s->numel))), s->ndim, s->shape);
    if (view && view->backend != s->backend)
        view = fl_to_backend(view, s->backend->name);
    return fl_scope_return(scope, view);
}

fl_status fl_dist_reducer_finish(fl_dist_reducer *reducer, fl_tensor **out)
{
    const char *fn = "fl_dist_reducer_finish";
    if (!reducer) {
        fl_error(FL_ERR_NULL, fn, "the reducer is NULL");
        return FL_ERR_NULL;
    }
    if (!out) {
        end_round(fn, reducer, true);
        fl_error(FL_ERR_NULL, fn, "the output list is NULL");
        return FL_ERR_NULL;
    }
    for (int i = 0; i < reducer->count; i++)
        if (!reducer->slots[i].added) {
            end_round(fn, reducer, true);
            fl_error(FL_ERR_VALUE, fn, "tensor %d of %d was not added in this round", i, reducer->count);
            return FL_ERR_VALUE;
        }
    if (reducer->next_start < reducer->bucket_count) { /* the add that should have started it failed */
        end_round(fn, reducer, false);
        fl_error(FL_ERR_DISTRIBUTED, fn, "bucket %d of %d could not start its all-reduce", reducer->next_start,
                 reducer->bucket_count);
        return FL_ERR_DISTRIBUTED;
    }
    fl_distributed *engine = reducer->engine;
    for (int i = 0; i < reducer->bucket_count; i++) {
        bucket *b = &reducer->buckets[i];
        if (!fl__dist_wait(fn, engine, b->work)) {
            b->work = NULL;
            end_round(fn, reducer, false);
            return fl_last_status();
        }
        b->work = NULL;
        if (reducer->op == FL_DIST_MEAN)
            fl__dist_divide(b->flat.data, b->numel, b->dtype, engine->size(engine));
        if (!(b->reduced = fl__host_output_finish(fn, &b->flat))) {
            end_round(fn, reducer, false);
            return fl_last_status();
        }
    }
    fl_status status = FL_OK;
    for (int i = 0; i < reducer->count; i++) {
        out[i] = status == FL_OK ? result(fn, reducer, i) : NULL;
        if (!out[i])
            status = fl_last_status();
    }
    for (int i = 0; i < reducer->count && status != FL_OK; i++) {
        fl_release(out[i]); /* all or nothing */
        out[i] = NULL;
    }
    end_round(fn, reducer, true);
    return status;
}

void fl_dist_reducer_free(fl_dist_reducer *reducer)
{
    if (!reducer)
        return;
    if (reducer->buckets)
        end_round("fl_dist_reducer_free", reducer, true);
    free(reducer->slots);
    free(reducer->buckets);
    free(reducer);
}

fl_status fl_all_reduce_many(const fl_tensor *const *tensors, int count, fl_dist_op op, size_t bucket_bytes,
                             fl_tensor **out)
{
    const char *fn = "fl_all_reduce_many";
    if (!out) {
        fl_error(FL_ERR_NULL, fn, "the output list is NULL");
        return FL_ERR_NULL;
    }
    fl_dist_reducer *r = fl_dist_reducer_new(tensors, count, op, bucket_bytes);
    if (!r)
        return fl_last_status();
    fl_status status = FL_OK;
    for (int i = 0; i < count && status == FL_OK; i++)
        status = fl_dist_reducer_add(r, i, tensors[i]);
    if (status == FL_OK)
        status = fl_dist_reducer_finish(r, out);
    fl_dist_reducer_free(r);
    return status;
}
