/*
 * The distributed interface: collective operations across the processes of one job,
 * behind a table of function pointers (an engine), swappable like the tensor backend
 * and the memory manager. Flare ships two engines:
 *
 *  - "single": one process, the default; every collective is the identity (a copy),
 *    so code written for many processes runs unchanged in one;
 *  - "mpi": the MPI library the job was launched with (mpirun), on CPU memory.
 *
 * Engines move dense host buffers; the functions below take tensors of any backend,
 * hand the engine their memory without a copy where the backend gives host access
 * (backend.h, host_data), stage it through host memory where it does not, and return
 * new tensors on the input's backend (tensors are values: a collective never changes
 * its input). An engine for device memory (NCCL) would be an appended entry.
 *
 * Faults. Every collective waits at most fl_distributed_timeout() seconds. On timeout
 * it fails with FL_ERR_DISTRIBUTED and a message naming the ranks that did not
 * arrive; a peer that died makes the collective fail the same way. After a failure the
 * engine refuses further collectives (the job's state is no longer consistent), and
 * the process should report and exit: mpirun then ends the remaining ranks.
 *
 * Collectives must be called by every rank, in the same order, with tensors of the
 * same dtype and shape (all-reduce, broadcast, reduce-scatter) or dtype (all-gather).
 */
#ifndef FLARE_DISTRIBUTED_H
#define FLARE_DISTRIBUTED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "flare/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Dtypes the collectives accept: f32, f64, i32 and i64. */
typedef enum fl_dist_op {
    FL_DIST_SUM,
    FL_DIST_MEAN, /* float dtypes only: the sum divided by the number of ranks */
    FL_DIST_MAX,
    FL_DIST_MIN,
} fl_dist_op;

/* PyTorch DistributedDataParallel's default bucket size. */
#define FL_DIST_DEFAULT_BUCKET_BYTES ((size_t)25 << 20)

/* ---- the engine interface ------------------------------------------------------ */

typedef struct fl_distributed fl_distributed;

/*
 * Every collective starts the operation and returns a handle to its pending work in
 * *work (engine-defined; NULL if the engine completed it already); wait completes it.
 * The blocking functions are start-then-wait, so that one wait, the engine's, enforces
 * the timeout for all of them. Buffers are dense host memory of count elements of
 * dtype; all_reduce's send may equal recv (in place). Reduce operations are SUM, MAX
 * and MIN: MEAN is a SUM divided above the engine. Entries return 0, or a non-zero
 * fl_status after fl_distributed_error().
 *
 * The table is one list, X(version, return type, name, parameters), which makes the
 * struct and the entry names; entries are appended, never reordered, and the layer
 * reads an entry only if the engine's version is at least the entry's. Thread safety:
 * the layer calls an engine from one thread at a time (collectives must be called in
 * the same order on every rank, so a program issues them from one thread); a
 * request's wait may come from another thread than its start.
 */
#define FL_DISTRIBUTED_ENTRIES(X)                                                                           \
    /* Joins the job the process was launched in. */                                                      \
    X(1, int, init, (fl_distributed * d))                                                                   \
    /* Leaves the job; called once, by every rank, after its last collective. */                          \
    X(1, void, shutdown, (fl_distributed * d))                                                              \
    X(1, int, rank, (const fl_distributed *d))                                                              \
    X(1, int, size, (const fl_distributed *d))                                                              \
    X(1, int, all_reduce,                                                                                   \
      (fl_distributed * d, const void *send, void *recv, int64_t count, fl_dtype dtype, fl_dist_op op,     \
       void **work))                                                                                        \
    X(1, int, broadcast, (fl_distributed * d, void *buffer, int64_t count, fl_dtype dtype, int root, void **work)) \
    /* recv holds size * count elements: rank r's send at r * count. */                                   \
    X(1, int, all_gather,                                                                                   \
      (fl_distributed * d, const void *send, void *recv, int64_t count, fl_dtype dtype, void **work))       \
    /* send holds size * count elements; rank r receives the reduction of block r. */                     \
    X(1, int, reduce_scatter,                                                                               \
      (fl_distributed * d, const void *send, void *recv, int64_t count, fl_dtype dtype, fl_dist_op op,     \
       void **work))                                                                                        \
    X(1, int, barrier, (fl_distributed * d, void **work))                                                   \
    /* Completes and frees work, waiting at most timeout seconds (0: no limit). On timeout or a           \
     * peer's failure the error names the ranks at fault. */                                              \
    X(1, int, wait, (fl_distributed * d, void *work, double timeout))

/* The version of struct fl_distributed this header declares. */
#define FL_DISTRIBUTED_VERSION 1

#define FL__DISTRIBUTED_ENTRY(version, type, name, params) type(*name) params;

struct fl_distributed {
    /* What the engine was written against: FL_DISTRIBUTED_VERSION and
     * sizeof(fl_distributed) of that header, checked by fl_distributed_register. */
    int version;
    size_t table_size;
    const char *name;
    void *state;
    FL_DISTRIBUTED_ENTRIES(FL__DISTRIBUTED_ENTRY)
};

/* sizeof(fl_distributed) as version declared it, or 0 for a version that does not
 * exist. */
size_t fl_distributed_engine_size(int version);
/* The name of entry i, in table order, or NULL past the end. */
const char *fl_distributed_entry_name(int i);

/* Records an error from inside an engine; the function the user called is added.
 * Returns status for convenience. */
int fl_distributed_error(fl_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Engines are registered by name; "single" and "mpi" are built in. Registration keeps
 * the pointer (an engine is an object with state): the table must outlive its use and
 * is not changed while registered. One whose version and size do not match, or
 * without an entry, is refused with a message. */
fl_status fl_distributed_register(fl_distributed *engine);
fl_distributed *fl_distributed_find(const char *name);

/* ---- the job ------------------------------------------------------------------- */

/* Starts the engine named engine, or if NULL the one FLARE_DISTRIBUTED names, or else
 * "mpi" when the process was launched by mpirun and "single" otherwise. MPI is
 * initialized only here, and only by the "mpi" engine. Before init (and after
 * shutdown) the job is a single process: rank 0 of 1, and collectives act as the
 * "single" engine's. Calling init twice is an error. */
fl_status fl_distributed_init(const char *engine);
/* Leaves the job (a no-op if not initialized). After a failed collective it does not
 * wait for the other ranks, which may be gone or hung. */
void fl_distributed_shutdown(void);
bool fl_distributed_is_initialized(void);
const char *fl_distributed_engine_name(void); /* "single" before init */
int fl_distributed_rank(void);
int fl_distributed_size(void);

/* The longest a collective waits for the other ranks, in seconds (0: forever).
 * Initially FLARE_DIST_TIMEOUT if set, else 300. */
fl_status fl_distributed_set_timeout(double seconds);
double fl_distributed_timeout(void);

/* ---- collectives on tensors ----------------------------------------------------- */

/* The reduction of t over all ranks, as a new tensor of t's dtype and shape. */
fl_tensor *fl_all_reduce(const fl_tensor *t, fl_dist_op op);

/* Asynchronous all-reduce: starts the operation and returns at once; the result comes
 * from fl_dist_wait, which must be called exactly once per request (it frees it).
 * t is retained until then. NULL on failure. */
typedef struct fl_dist_request fl_dist_request;
fl_dist_request *fl_all_reduce_async(const fl_tensor *t, fl_dist_op op);
fl_tensor *fl_dist_wait(fl_dist_request *request);

/* Root's t, on every rank (each passes a tensor of the same dtype and shape). */
fl_tensor *fl_broadcast(const fl_tensor *t, int root);
/* Every rank's t concatenated along axis 0, in rank order: [n, ...] gives
 * [size * n, ...]; a 0-d t gives [size] (PyTorch's all_gather_into_tensor). */
fl_tensor *fl_all_gather(const fl_tensor *t);
/* t of shape [size * n, ...] reduced over ranks; rank r keeps rows [r * n, (r + 1) * n)
 * (PyTorch's reduce_scatter_tensor). */
fl_tensor *fl_reduce_scatter(const fl_tensor *t, fl_dist_op op);
fl_status fl_barrier(void);

/* ---- coalesced all-reduce of many tensors ------------------------------------- */

/*
 * A reducer all-reduces a fixed list of tensors (a model's gradients, say) coalesced
 * into buckets of about bucket_bytes, and can start each bucket while the others are
 * still being computed. Tensors are given as templates (dtype and shape; e.g. the
 * parameters), and are assigned to buckets from last to first, since backward
 * produces the gradients of the last layers first; a bucket holds one dtype.
 *
 * Each round: fl_dist_reducer_add every tensor once, in any order, then
 * fl_dist_reducer_finish. A bucket is copied and its all-reduce started as soon as all
 * its tensors have been added, provided every earlier bucket has started (all ranks
 * must start buckets in the same order). The results are views of the reduced
 * buckets, so reading them copies nothing.
 */
typedef struct fl_dist_reducer fl_dist_reducer;
/* count templates of dtype f32, f64, i32 or i64; bucket_bytes 0 means one bucket per
 * dtype. NULL on bad input or out of memory. */
fl_dist_reducer *fl_dist_reducer_new(const fl_tensor *const *templates, int count, fl_dist_op op,
                                     size_t bucket_bytes);
/* Gives tensor index's value for this round (its template's dtype and shape; any
 * backend: its result comes back on the backend it was given on). */
fl_status fl_dist_reducer_add(fl_dist_reducer *reducer, int index, const fl_tensor *t);
/* Waits for every bucket and stores the count results in out, in template order (new
 * tensors, owned like any result: by the innermost scope if one is open). Fails if a
 * tensor was not added. The reducer is then ready for another round. */
fl_status fl_dist_reducer_finish(fl_dist_reducer *reducer, fl_tensor **out);
int fl_dist_reducer_bucket_count(const fl_dist_reducer *reducer);
void fl_dist_reducer_free(fl_dist_reducer *reducer);

/* One round of a reducer over tensors: out[i] is the reduction of tensors[i]. */
fl_status fl_all_reduce_many(const fl_tensor *const *tensors, int count, fl_dist_op op, size_t bucket_bytes,
                             fl_tensor **out);

#ifdef __cplusplus
}
#endif

#endif
