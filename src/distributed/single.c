/* The single-process engine: a job of one rank, where every collective is a copy. It
 * needs no initialization, so it also serves before fl_distributed_init. */
#include <string.h>

#include "internal.h"

static int single_init(fl_distributed *d) { return 0; }
static void single_shutdown(fl_distributed *d) {}
static int single_rank(const fl_distributed *d) { return 0; }
static int single_size(const fl_distributed *d) { return 1; }

static int copy(const void *send, void *recv, int64_t count, fl_dtype dtype, void **work)
{
    *work = NULL;
    if (send != recv && count > 0)
        memcpy(recv, send, (size_t)count * fl_dtype_size(dtype));
    return 0;
}

static int single_all_reduce(fl_distributed *d, const void *send, void *recv, int64_t count, fl_dtype dtype,
                             fl_dist_op op, void **work)
{
    return copy(send, recv, count, dtype, work);
}

static int single_broadcast(fl_distributed *d, void *buffer, int64_t count, fl_dtype dtype, int root, void **work)
{
    *work = NULL;
    return 0;
}

static int single_all_gather(fl_distributed *d, const void *send, void *recv, int64_t count, fl_dtype dtype,
                             void **work)
{
    return copy(send, recv, count, dtype, work);
}

static int single_reduce_scatter(fl_distributed *d, const void *send, void *recv, int64_t count, fl_dtype dtype,
                                 fl_dist_op op, void **work)
{
    return copy(send, recv, count, dtype, work);
}

static int single_barrier(fl_distributed *d, void **work)
{
    *work = NULL;
    return 0;
}

/* Never called: every collective completes at once and leaves no work. */
static int single_wait(fl_distributed *d, void *work, double timeout) { return 0; }

static fl_distributed single_engine = {
    .version = FL_DISTRIBUTED_VERSION,
    .table_size = sizeof(fl_distributed),
    .name = "single",
    .init = single_init,
    .shutdown = single_shutdown,
    .rank = single_rank,
    .size = single_size,
    .all_reduce = single_all_reduce,
    .broadcast = single_broadcast,
    .all_gather = single_all_gather,
    .reduce_scatter = single_reduce_scatter,
    .barrier = single_barrier,
    .wait = single_wait,
};

fl_distributed *fl__distributed_single(void) { return &single_engine; }
