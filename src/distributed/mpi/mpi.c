/*
 * The MPI engine: collectives of the MPI library the job was launched with (mpirun).
 *
 * Every collective is MPI's non-blocking form, completed by polling MPI_Test, so that
 * a wait can give up after the timeout instead of hanging with a dead or stuck peer.
 * Knowing whom we waited for costs nothing until then: on timeout (or an MPI error),
 * the waiting rank asks every other rank, on a communicator of its own, which
 * collective it is in. Ranks waiting in a collective answer from their polling loop;
 * a rank that is hung, dead or busy outside Flare does not, and is named.
 */
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../internal.h"

enum { TAG_QUERY = 1, TAG_REPLY = 2 };

typedef struct mpi_state {
    MPI_Comm comm;    /* the collectives */
    MPI_Comm control; /* queries about who is where, apart from the collectives' traffic */
    int rank, size;
    bool finalize;    /* we initialized MPI, so we finalize it */
    int64_t sequence; /* collectives started by this rank, so far */
    int64_t waiting;  /* the collective this rank waits in, or -1 */
} mpi_state;

typedef struct mpi_work {
    MPI_Request request;
    int64_t sequence;
    const char *what;
} mpi_work;

static mpi_state state = {.comm = MPI_COMM_NULL, .control = MPI_COMM_NULL, .waiting = -1};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *mpi_message(int rc, char *buf)
{
    int length = 0;
    if (MPI_Error_string(rc, buf, &length) != MPI_SUCCESS)
        snprintf(buf, MPI_MAX_ERROR_STRING, "MPI error %d", rc);
    return buf;
}

static int mpi_init(fl_distributed *d)
{
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (finalized)
        return fl_distributed_error(FL_ERR_DISTRIBUTED, "MPI was shut down in this process and cannot start again");
    char buf[MPI_MAX_ERROR_STRING];
    if (!initialized) {
        /* Only the thread that calls Flare's collectives calls MPI, never two at once. */
        int provided = 0;
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        if (rc != MPI_SUCCESS)
            return fl_distributed_error(FL_ERR_DISTRIBUTED, "MPI_Init_thread failed: %s", mpi_message(rc, buf));
        state.finalize = true;
    }
    /* Our own communicators: Flare's traffic never matches a user's MPI messages, and
     * errors come back to us as codes instead of aborting the job. */
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &state.comm);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_dup(MPI_COMM_WORLD, &state.control);
    if (rc != MPI_SUCCESS)
        return fl_distributed_error(FL_ERR_DISTRIBUTED, "MPI_Comm_dup failed: %s", mpi_message(rc, buf));
    MPI_Comm_set_errhandler(state.comm, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(state.control, MPI_ERRORS_RETURN);
    MPI_Comm_rank(state.comm, &state.rank);
    MPI_Comm_size(state.comm, &state.size);
    state.sequence = 0;
    state.waiting = -1;
    return 0;
}

static void mpi_shutdown(fl_distributed *d)
{
    MPI_Comm_free(&state.control);
    MPI_Comm_free(&state.comm);
    if (state.finalize)
        MPI_Finalize();
    state.finalize = false;
}

static int mpi_rank(const fl_distributed *d) { return state.rank; }
static int mpi_size(const fl_distributed *d) { return state.size; }

/* ---- starting collectives ---- */

static MPI_Datatype mpi_type(fl_dtype dtype)
{
    switch (dtype) {
    case FL_F32: return MPI_FLOAT;
    case FL_F64: return MPI_DOUBLE;
    case FL_I32: return MPI_INT32_T;
    default: return MPI_INT64_T;
    }
}

static MPI_Op mpi_op(fl_dist_op op) { return op == FL_DIST_MAX ? MPI_MAX : op == FL_DIST_MIN ? MPI_MIN : MPI_SUM; }

/* Makes the work record and checks what MPI cannot take: counts are ints. */
static int begin(const char *what, int64_t count, mpi_work **work)
{
    if (count > INT32_MAX)
        return fl_distributed_error(FL_ERR_VALUE, "MPI moves at most %d elements at once, not %lld", INT32_MAX,
                                    (long long)count);
    *work = malloc(sizeof **work);
    if (!*work)
        return fl_distributed_error(FL_ERR_MEMORY, "cannot allocate a request");
    **work = (mpi_work){.request = MPI_REQUEST_NULL, .sequence = state.sequence++, .what = what};
    return 0;
}

static int started(int rc, mpi_work *w, void **work)
{
    if (rc != MPI_SUCCESS) {
        char buf[MPI_MAX_ERROR_STRING];
        fl_distributed_error(FL_ERR_DISTRIBUTED, "rank %d: %s #%lld could not start: %s", state.rank, w->what,
                             (long long)w->sequence, mpi_message(rc, buf));
        free(w);
        return FL_ERR_DISTRIBUTED;
    }
    *work = w;
    return 0;
}

static int mpi_all_reduce(fl_distributed *d, const void *send, void *recv, int64_t count, fl_dtype dtype,
                          fl_dist_op op, void **work)
{
    mpi_work *w;
    int rc = begin("all-reduce", count, &w);
    if (rc)
        return rc;
    rc = MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, mpi_type(dtype), mpi_op(op), state.comm,
                        &w->request);
    return started(rc, w, work);
}

static int mpi_broadcast(fl_distributed *d, void *buffer, int64_t count, fl_dtype dtype, int root, void **work)
{
    mpi_work *w;
    int rc = begin("broadcast", count, &w);
    if (rc)
        return rc;
    return started(MPI_Ibcast(buffer, (int)count, mpi_type(dtype), root, state.comm, &w->request), w, work);
}

static int mpi_all_gather(fl_distributed *d, const void *send, void *recv, int64_t count, fl_dtype dtype,
                          void **work)
{
    mpi_work *w;
    int rc = begin("all-gather", count, &w);
    if (rc)
        return rc;
    MPI_Datatype type = mpi_type(dtype);
    return started(MPI_Iallgather(send, (int)count, type, recv, (int)count, type, state.comm, &w->request), w, work);
}

static int mpi_reduce_scatter(fl_distributed *d, const void *send, void *recv, int64_t count, fl_dtype dtype,
                              fl_dist_op op, void **work)
{
    mpi_work *w;
    int rc = begin("reduce-scatter", count, &w);
    if (rc)
        return rc;
    rc = MPI_Ireduce_scatter_block(send, recv, (int)count, mpi_type(dtype), mpi_op(op), state.comm, &w->request);
    return started(rc, w, work);
}

static int mpi_barrier(fl_distributed *d, void **work)
{
    mpi_work *w;
    int rc = begin("barrier", 0, &w);
    if (rc)
        return rc;
    return started(MPI_Ibarrier(state.comm, &w->request), w, work);
}

/* ---- waiting, and finding whom we wait for ---- */

/* Tells every rank that asked which collective this rank waits in. */
static void answer_queries(void)
{
    for (;;) {
        int pending = 0;
        MPI_Status status;
        if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_QUERY, state.control, &pending, &status) != MPI_SUCCESS || !pending)
            return;
        int64_t asked;
        MPI_Recv(&asked, 1, MPI_INT64_T, status.MPI_SOURCE, TAG_QUERY, state.control, MPI_STATUS_IGNORE);
        /* Eight bytes go eagerly: the send completes without the asker's help. */
        MPI_Send(&state.waiting, 1, MPI_INT64_T, status.MPI_SOURCE, TAG_REPLY, state.control);
    }
}

/* Asks every other rank where it is, waits up to grace seconds for the answers, and
 * describes the ranks that are not waiting in this collective. */
static void find_absent(const mpi_work *w, double grace, char *out, size_t size)
{
    int64_t *where = malloc((size_t)state.size * sizeof *where);
    MPI_Request *queries = malloc((size_t)state.size * sizeof *queries);
    if (!where || !queries) {
        snprintf(out, size, "(no memory to find the absent ranks)");
        free(where);
        free(queries);
        return;
    }
    int answered = 1;
    for (int r = 0; r < state.size; r++) {
        where[r] = r == state.rank ? w->sequence : -2; /* -2: no answer */
        queries[r] = MPI_REQUEST_NULL;
        if (r != state.rank &&
            MPI_Isend(&w->sequence, 1, MPI_INT64_T, r, TAG_QUERY, state.control, &queries[r]) != MPI_SUCCESS)
            queries[r] = MPI_REQUEST_NULL;
    }
    for (double deadline = now() + grace; answered < state.size && now() < deadline;) {
        answer_queries();
        int pending = 0;
        MPI_Status status;
        if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_REPLY, state.control, &pending, &status) == MPI_SUCCESS && pending) {
            int64_t sequence;
            MPI_Recv(&sequence, 1, MPI_INT64_T, status.MPI_SOURCE, TAG_REPLY, state.control, MPI_STATUS_IGNORE);
            if (where[status.MPI_SOURCE] == -2)
                answered++;
            where[status.MPI_SOURCE] = sequence;
        } else {
            sched_yield();
        }
    }
    /* Unanswered queries stay posted: the job is over, and MPI frees them at exit. */
    for (int r = 0; r < state.size; r++)
        if (queries[r] != MPI_REQUEST_NULL)
            MPI_Request_free(&queries[r]);

    char list[256] = "";
    size_t listed = 0;
    int absent = 0;
    for (int r = 0; r < state.size && listed < sizeof list; r++)
        if (where[r] == -2)
            listed += (size_t)snprintf(list + listed, sizeof list - listed, "%s%d", absent++ ? ", " : "", r);
    size_t n = 0;
    if (absent)
        n = (size_t)snprintf(out, size, "rank%s %s did not arrive (hung, dead, or busy outside Flare)",
                             absent > 1 ? "s" : "", list);
    bool astray = false;
    for (int r = 0; r < state.size && n < size; r++)
        if (where[r] >= 0 && where[r] != w->sequence) {
            n += (size_t)snprintf(out + n, size - n, "%srank %d waits in collective #%lld instead", n ? "; " : "", r,
                                  (long long)where[r]);
            astray = true;
        }
    if (!absent && !astray)
        snprintf(out, size, "every rank is waiting in it");
    free(where);
    free(queries);
}

static int fail(const mpi_work *w, double timeout, int rc)
{
    /* Long enough for a rank that polls to answer, short next to the timeout. */
    double grace = timeout > 0 ? timeout / 10 : 1;
    grace = grace < 0.2 ? 0.2 : grace > 2 ? 2 : grace;
    char absent[512], buf[MPI_MAX_ERROR_STRING];
    find_absent(w, grace, absent, sizeof absent);
    if (rc == MPI_SUCCESS)
        return fl_distributed_error(FL_ERR_DISTRIBUTED, "rank %d: %s #%lld timed out after %g s: %s", state.rank,
                                    w->what, (long long)w->sequence, timeout, absent);
    return fl_distributed_error(FL_ERR_DISTRIBUTED, "rank %d: %s #%lld failed: %s: %s", state.rank, w->what,
                                (long long)w->sequence, mpi_message(rc, buf), absent);
}

static int mpi_wait(fl_distributed *d, void *work, double timeout)
{
    mpi_work *w = work;
    state.waiting = w->sequence;
    double start = now();
    int result = 0;
    for (long polls = 0;; polls++) {
        int done = 0;
        int rc = MPI_Test(&w->request, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
            result = fail(w, timeout, rc);
            break;
        }
        if (done)
            break;
        /* Spin while a collective is quick; past that, share the core and listen. */
        if (polls < 1000)
            continue;
        double waited = now() - start;
        if (waited > 0.01) {
            answer_queries();
            sched_yield();
        }
        if (timeout > 0 && waited > timeout) {
            result = fail(w, timeout, MPI_SUCCESS);
            break;
        }
    }
    state.waiting = -1;
    /* A failed request is left to MPI: cancelling a collective is not allowed. */
    free(w);
    return result;
}

static fl_distributed mpi_engine = {
    .version = FL_DISTRIBUTED_VERSION,
    .table_size = sizeof(fl_distributed),
    .name = "mpi",
    .init = mpi_init,
    .shutdown = mpi_shutdown,
    .rank = mpi_rank,
    .size = mpi_size,
    .all_reduce = mpi_all_reduce,
    .broadcast = mpi_broadcast,
    .all_gather = mpi_all_gather,
    .reduce_scatter = mpi_reduce_scatter,
    .barrier = mpi_barrier,
    .wait = mpi_wait,
};

fl_distributed *fl__distributed_mpi(void) { return &mpi_engine; }
