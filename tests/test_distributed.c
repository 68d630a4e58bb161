/* The distributed layer: the single-process engine and the glue above every engine
 * (validation, staging of strided tensors, means, the coalescing reducer, the failed
 * state) in this process, then the MPI engine's collectives and faults under
 * `mpirun -np 2`, running tests/mpi/dist_check.c (again with its tensors on the
 * opencl backend), and the model benchmark (apps/benchmark) trained data-parallel. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "flare/distributed.h"
#include "flare/io.h"
#include "mpi/checkpoint_model.h"
#include "support.h"

/* ---- the single-process engine ---- */

static void one_process_before_init(void **state)
{
    assert_false(fl_distributed_is_initialized());
    assert_string_equal(fl_distributed_engine_name(), "single");
    assert_int_equal(fl_distributed_rank(), 0);
    assert_int_equal(fl_distributed_size(), 1);
    fl_distributed_shutdown(); /* harmless when not initialized */
}

static void single_engine_collectives_are_copies(void **state)
{
    assert_int_equal(fl_distributed_init("single"), FL_OK);
    assert_true(fl_distributed_is_initialized());
    fl_tensor *x = T_F32(FL_SHAPE(2, 3), 1, 2, 3, 4, 5, 6);
    for (fl_dist_op op = FL_DIST_SUM; op <= FL_DIST_MIN; op++) {
        fl_tensor *y = fl_all_reduce(x, op);
        assert_shape(y, 2, 3);
        assert_values(y, 0, 0, 1, 2, 3, 4, 5, 6);
        assert_ptr_not_equal(y, x); /* a new tensor: collectives never change their input */
    }
    assert_values(fl_all_reduce(T_I64(FL_SHAPE(2), -5, 7), FL_DIST_SUM), 0, 0, -5, 7);
    assert_values(fl_all_reduce(T_F64(FL_SHAPE(1), 0.25), FL_DIST_MEAN), 0, 0, 0.25);
    fl_dist_request *r = fl_all_reduce_async(T_I32(FL_SHAPE(3), 1, 2, 3), FL_DIST_MAX);
    assert_non_null(r);
    fl_tensor *z = fl_dist_wait(r);
    assert_dtype(z, FL_I32);
    assert_values(z, 0, 0, 1, 2, 3);
    /* A strided view is staged densely. */
    assert_values(fl_all_reduce(fl_transpose(x, 0, 1), FL_DIST_SUM), 0, 0, 1, 4, 2, 5, 3, 6);
    assert_values(fl_broadcast(x, 0), 0, 0, 1, 2, 3, 4, 5, 6);
    fl_tensor *g = fl_all_gather(x);
    assert_shape(g, 2, 3);
    assert_values(g, 0, 0, 1, 2, 3, 4, 5, 6);
    assert_shape(fl_all_gather(fl_scalar(7, FL_F32)), 1);
    assert_values(fl_reduce_scatter(x, FL_DIST_MEAN), 0, 0, 1, 2, 3, 4, 5, 6);
    assert_values(fl_all_reduce(fl_zeros(FL_F32, FL_SHAPE(0, 3)), FL_DIST_SUM), 0, 0);
    assert_int_equal(fl_barrier(), FL_OK);
    assert_no_error();
    fl_distributed_shutdown();
    assert_false(fl_distributed_is_initialized());
}

static void choosing_the_engine(void **state)
{
    assert_fails_status(fl_distributed_init("nccl"), FL_ERR_VALUE, "no distributed engine named 'nccl'");
    /* ctest sets no FLARE_DISTRIBUTED and runs no mpirun; FLARE_DISTRIBUTED itself is
     * read with the other settings (tests/test_config.c) */
    assert_int_equal(fl_distributed_init(NULL), FL_OK);
    assert_string_equal(fl_distributed_engine_name(), "single");
    assert_fails_status(fl_distributed_init(NULL), FL_ERR_VALUE, "'single' engine is already initialized");
    fl_distributed_shutdown();
    assert_false(fl_distributed_is_initialized());
    assert_non_null(fl_distributed_find("mpi"));
    assert_null(fl_distributed_find(NULL));
    assert_fails_status(fl_distributed_register(fl_distributed_find("single")), FL_ERR_VALUE, "already registered");
    assert_fails_status(fl_distributed_register(NULL), FL_ERR_NULL, "fl_distributed_register");
}

static void the_timeout(void **state)
{
    assert_true(fl_distributed_timeout() == 300); /* ctest does not set FLARE_DIST_TIMEOUT */
    assert_int_equal(fl_distributed_set_timeout(2.5), FL_OK);
    assert_true(fl_distributed_timeout() == 2.5);
    assert_int_equal(fl_distributed_set_timeout(0), FL_OK); /* forever */
    assert_fails_status(fl_distributed_set_timeout(-1), FL_ERR_VALUE, "fl_distributed_set_timeout");
    assert_fails_status(fl_distributed_set_timeout(NAN), FL_ERR_VALUE, "finite and >= 0");
    assert_fails_status(fl_distributed_set_timeout(INFINITY), FL_ERR_VALUE, "finite");
    assert_true(fl_distributed_timeout() == 0);
    assert_int_equal(fl_distributed_set_timeout(300), FL_OK);
}

static void bad_arguments(void **state)
{
    fl_tensor *x = T_F32(FL_SHAPE(4), 1, 2, 3, 4);
    assert_fails(fl_all_reduce(NULL, FL_DIST_SUM), FL_ERR_NULL, "fl_all_reduce");
    assert_fails(fl_all_reduce(T_BOOL(FL_SHAPE(1), 1), FL_DIST_SUM), FL_ERR_DTYPE,
                 "fl_all_reduce: collectives take f32, f64, i32 or i64 tensors, not bool[1]");
    assert_fails(fl_all_reduce(fl_cast(x, FL_F16), FL_DIST_SUM), FL_ERR_DTYPE, "f16[4]");
    assert_fails(fl_all_reduce_async(T_I32(FL_SHAPE(1), 1), FL_DIST_MEAN), FL_ERR_DTYPE,
                 "fl_all_reduce_async: a mean needs a float tensor, not i32[1]");
    assert_fails(fl_all_reduce(x, (fl_dist_op)9), FL_ERR_VALUE, "unknown reduction 9");
    assert_fails(fl_dist_wait(NULL), FL_ERR_NULL, "fl_dist_wait");
    assert_fails(fl_broadcast(x, 1), FL_ERR_VALUE, "fl_broadcast: root 1 is not a rank of this job of 1");
    assert_fails(fl_broadcast(x, -1), FL_ERR_VALUE, "root -1");
    assert_fails(fl_all_gather(T_U8(FL_SHAPE(1), 1)), FL_ERR_DTYPE, "fl_all_gather");
    assert_fails(fl_reduce_scatter(fl_scalar(1, FL_F32), FL_DIST_SUM), FL_ERR_SHAPE,
                 "fl_reduce_scatter: the first axis of f32[] must divide among 1 ranks");
}

/* ---- the reducer ---- */

static void many_tensors_in_buckets(void **state)
{
    fl_tensor *t[5] = {
        T_F32(FL_SHAPE(2, 2), 1, 2, 3, 4), T_F64(FL_SHAPE(3), 5, 6, 7), T_F32(FL_SHAPE(1), 8),
        fl_transpose(T_F32(FL_SHAPE(2, 3), 1, 2, 3, 4, 5, 6), 0, 1), T_I64(FL_SHAPE(2), 9, 10),
    };
    fl_tensor *out[5];
    for (size_t bucket_bytes = 0; bucket_bytes <= 16; bucket_bytes += 4) {
        assert_int_equal(fl_all_reduce_many((const fl_tensor *const *)t, 5, FL_DIST_SUM, bucket_bytes, out), FL_OK);
        assert_shape(out[0], 2, 2);
        assert_values(out[0], 0, 0, 1, 2, 3, 4);
        assert_dtype(out[1], FL_F64);
        assert_values(out[1], 0, 0, 5, 6, 7);
        assert_values(out[2], 0, 0, 8);
        assert_shape(out[3], 3, 2);
        assert_values(out[3], 0, 0, 1, 4, 2, 5, 3, 6);
        assert_dtype(out[4], FL_I64);
        assert_values(out[4], 0, 0, 9, 10);
    }
    /* One bucket per dtype without a limit; one per tensor with a tiny limit. */
    fl_dist_reducer *r = fl_dist_reducer_new((const fl_tensor *const *)t, 5, FL_DIST_SUM, 0);
    assert_int_equal(fl_dist_reducer_bucket_count(r), 3);
    fl_dist_reducer_free(r);
    r = fl_dist_reducer_new((const fl_tensor *const *)t, 5, FL_DIST_SUM, 1);
    assert_int_equal(fl_dist_reducer_bucket_count(r), 5);
    fl_dist_reducer_free(r);
    /* f32 tensors 0, 2, 3 (16, 4 and 24 bytes) from last to first in 24-byte buckets: {3}, {2, 0}. */
    r = fl_dist_reducer_new((const fl_tensor *const *)t, 5, FL_DIST_SUM, 24);
    assert_int_equal(fl_dist_reducer_bucket_count(r), 4);
    fl_dist_reducer_free(r);
    assert_no_error();
}

static void a_reducer_over_rounds(void **state)
{
    fl_tensor *t[3] = {fl_zeros(FL_F32, FL_SHAPE(2)), fl_zeros(FL_F32, FL_SHAPE(3)), fl_zeros(FL_F32, FL_SHAPE(1))};
    fl_dist_reducer *r = fl_dist_reducer_new((const fl_tensor *const *)t, 3, FL_DIST_MEAN, 8);
    assert_non_null(r);
    fl_tensor *out[3];
    for (int round = 1; round <= 3; round++) {
        assert_int_equal(fl_dist_reducer_add(r, 2, fl_full(round, FL_F32, FL_SHAPE(1))), FL_OK);
        assert_int_equal(fl_dist_reducer_add(r, 0, fl_full(10 * round, FL_F32, FL_SHAPE(2))), FL_OK);
        assert_int_equal(fl_dist_reducer_add(r, 1, fl_arange(0, 3, 1, FL_F32)), FL_OK);
        assert_int_equal(fl_dist_reducer_finish(r, out), FL_OK);
        assert_values(out[0], 0, 0, 10 * round, 10 * round);
        assert_values(out[1], 0, 0, 0, 1, 2);
        assert_values(out[2], 0, 0, round);
    }
    /* Results outlive the reducer and the next round: they own their bucket. */
    fl_tensor *kept = out[1];
    assert_int_equal(fl_dist_reducer_add(r, 1, fl_full(-1, FL_F32, FL_SHAPE(3))), FL_OK);
    fl_dist_reducer_free(r); /* mid-round */
    assert_values(kept, 0, 0, 0, 1, 2);
    assert_no_error();
}

static void reducer_errors(void **state)
{
    fl_tensor *t[2] = {fl_zeros(FL_F32, FL_SHAPE(2)), fl_zeros(FL_I32, FL_SHAPE(1))};
    fl_tensor *out[2];
    assert_fails(fl_dist_reducer_new(NULL, 2, FL_DIST_SUM, 0), FL_ERR_NULL, "fl_dist_reducer_new");
    assert_fails(fl_dist_reducer_new((const fl_tensor *const *)t, 0, FL_DIST_SUM, 0), FL_ERR_VALUE, "got a list, 0");
    assert_fails(fl_dist_reducer_new((const fl_tensor *const *)t, 2, FL_DIST_MEAN, 0), FL_ERR_DTYPE,
                 "a mean needs a float tensor, not i32[1]");
    fl_tensor *with_null[2] = {t[0], NULL};
    assert_fails(fl_dist_reducer_new((const fl_tensor *const *)with_null, 2, FL_DIST_SUM, 0), FL_ERR_NULL,
                 "fl_dist_reducer_new");
    assert_fails_status(fl_all_reduce_many((const fl_tensor *const *)t, 2, FL_DIST_SUM, 0, NULL), FL_ERR_NULL,
                        "output list");

    fl_dist_reducer *r = fl_dist_reducer_new((const fl_tensor *const *)t, 2, FL_DIST_SUM, 0);
    assert_fails_status(fl_dist_reducer_add(NULL, 0, t[0]), FL_ERR_NULL, "the reducer is NULL");
    assert_fails_status(fl_dist_reducer_add(r, 0, NULL), FL_ERR_NULL, "fl_dist_reducer_add");
    assert_fails_status(fl_dist_reducer_add(r, 2, t[0]), FL_ERR_INDEX, "index 2 is not one of the reducer's 2");
    assert_fails_status(fl_dist_reducer_add(r, 0, t[1]), FL_ERR_SHAPE,
                        "fl_dist_reducer_add: tensor 0 is i32[1], but its template is f32[2]");
    assert_fails_status(fl_dist_reducer_add(r, 0, fl_zeros(FL_F32, FL_SHAPE(1, 2))), FL_ERR_SHAPE, "f32[1, 2]");
    assert_int_equal(fl_dist_reducer_add(r, 0, t[0]), FL_OK);
    assert_fails_status(fl_dist_reducer_add(r, 0, t[0]), FL_ERR_VALUE, "tensor 0 was already added");
    assert_fails_status(fl_dist_reducer_finish(r, out), FL_ERR_VALUE, "tensor 1 of 2 was not added");
    assert_fails_status(fl_dist_reducer_finish(NULL, out), FL_ERR_NULL, "the reducer is NULL");
    assert_fails_status(fl_dist_reducer_finish(r, NULL), FL_ERR_NULL, "the output list is NULL");
    /* A failed round leaves the reducer ready for the next. */
    assert_int_equal(fl_dist_reducer_add(r, 1, t[1]), FL_OK);
    assert_int_equal(fl_dist_reducer_add(r, 0, t[0]), FL_OK);
    assert_int_equal(fl_dist_reducer_finish(r, out), FL_OK);
    assert_int_equal(fl_dist_reducer_bucket_count(NULL), 0);
    fl_dist_reducer_free(r);
    fl_dist_reducer_free(NULL);
}

/* ---- the glue above an engine: a fake job of 4 ranks whose waits can fail ---- */

static bool fake_fails;
static int fake_shutdowns;

static int fake_init(fl_distributed *d) { return 0; }
static void fake_shutdown(fl_distributed *d) { fake_shutdowns++; }
static int fake_rank(const fl_distributed *d) { return 2; }
static int fake_size(const fl_distributed *d) { return 4; }

/* Every rank holds the same values, so a sum is 4 times them. */
static int fake_all_reduce(fl_distributed *d, const void *send, void *recv, int64_t count, fl_dtype dtype,
                           fl_dist_op op, void **work)
{
    for (int64_t i = 0; i < count; i++)
        ((float *)recv)[i] = ((const float *)send)[i] * (op == FL_DIST_SUM ? 4 : 1);
    *work = d; /* something to wait for */
    return 0;
}

static int fake_wait(fl_distributed *d, void *work, double timeout)
{
    return fake_fails ? fl_distributed_error(FL_ERR_DISTRIBUTED, "rank 2: all-reduce timed out: rank 3 did not arrive")
                      : 0;
}

static fl_distributed fake = {
    .version = FL_DISTRIBUTED_VERSION, .table_size = sizeof(fl_distributed),
    .name = "fake", .init = fake_init, .shutdown = fake_shutdown, .rank = fake_rank, .size = fake_size,
    .all_reduce = fake_all_reduce, .wait = fake_wait,
};

static void means_divide_by_the_engines_size(void **state)
{
    if (!fl_distributed_find("fake"))
        assert_int_equal(fl_distributed_register(&fake), FL_OK);
    assert_int_equal(fl_distributed_init("fake"), FL_OK);
    assert_int_equal(fl_distributed_rank(), 2);
    assert_int_equal(fl_distributed_size(), 4);
    fl_tensor *x = T_F32(FL_SHAPE(3), 1, 2, 6);
    assert_values(fl_all_reduce(x, FL_DIST_SUM), 0, 0, 4, 8, 24);
    assert_values(fl_all_reduce(x, FL_DIST_MEAN), 0, 0, 1, 2, 6);
    fl_tensor *out[2];
    const fl_tensor *many[2] = {x, x};
    assert_int_equal(fl_all_reduce_many(many, 2, FL_DIST_MEAN, 0, out), FL_OK);
    assert_values(out[1], 0, 0, 1, 2, 6);
    assert_fails(fl_reduce_scatter(T_F32(FL_SHAPE(6), 1, 2, 3, 4, 5, 6), FL_DIST_SUM), FL_ERR_SHAPE,
                 "f32[6] must divide among 4 ranks");
    fl_distributed_shutdown();
    assert_int_equal(fake_shutdowns, 1);
}

/* The engine table's contract: one list makes it; an engine of another header, or
 * without an entry every engine needs, is refused; a collective it leaves out is an
 * error naming it. */
static void engines_are_checked_when_registered(void **state)
{
    assert_string_equal(fl_distributed_entry_name(0), "init");
    assert_string_equal(fl_distributed_entry_name(9), "wait");
    assert_null(fl_distributed_entry_name(10));
    assert_int_equal(fl_distributed_engine_size(FL_DISTRIBUTED_VERSION), sizeof(fl_distributed));
    fl_distributed other = fake;
    other.name = "other-header";
    other.table_size = sizeof other - sizeof(void *);
    assert_fails_status(fl_distributed_register(&other), FL_ERR_VALUE, "compiled against a different distributed.h");
    other.table_size = sizeof other;
    other.version = FL_DISTRIBUTED_VERSION + 1;
    assert_fails_status(fl_distributed_register(&other), FL_ERR_VALUE, "knows versions 1 to");
    other.version = FL_DISTRIBUTED_VERSION;
    other.wait = NULL;
    assert_fails_status(fl_distributed_register(&other), FL_ERR_VALUE, "engine 'other-header' has no wait entry");
    assert_null(fl_distributed_find("other-header"));

    if (!fl_distributed_find("fake"))
        assert_int_equal(fl_distributed_register(&fake), FL_OK);
    assert_int_equal(fl_distributed_init("fake"), FL_OK);
    assert_fails(fl_broadcast(T_F32(FL_SHAPE(1), 1), 0), FL_ERR_UNSUPPORTED,
                 "fl_broadcast: the distributed engine 'fake' does not implement broadcast");
    assert_fails_status(fl_barrier(), FL_ERR_UNSUPPORTED, "does not implement barrier");
    fl_distributed_shutdown();
}

/* The layer reaches a backend only through its table: on a backend without host
 * access (a device backend, say) collectives stage through host memory with
 * to_host and from_host, and the results live on that backend. */
static void collectives_on_a_backend_without_host_access(void **state)
{
    if (!fl_distributed_find("fake"))
        assert_int_equal(fl_distributed_register(&fake), FL_OK);
    assert_int_equal(fl_distributed_init("fake"), FL_OK);
    fl_backend device;
    fl_backend_derive(&device, fl_backend_find("cpu"), "no-host-access");
    device.empty = NULL;
    device.host_data = NULL;
    if (!fl_backend_find("no-host-access"))
        assert_int_equal(fl_backend_register(&device), FL_OK);
    fl_tensor *x = fl_to_backend(T_F32(FL_SHAPE(3), 1, 2, 6), "no-host-access");
    fl_tensor *sum = fl_all_reduce(x, FL_DIST_SUM);
    assert_values(sum, 0, 0, 4, 8, 24);
    assert_string_equal(fl_backend_name(sum), "no-host-access");
    fl_tensor *out[2];
    const fl_tensor *many[2] = {x, fl_to_backend(T_F32(FL_SHAPE(1), 8), "no-host-access")};
    assert_int_equal(fl_all_reduce_many(many, 2, FL_DIST_MEAN, 0, out), FL_OK);
    assert_values(out[0], 0, 0, 1, 2, 6);
    assert_values(out[1], 0, 0, 8);
    assert_string_equal(fl_backend_name(out[0]), "no-host-access");
    fl_distributed_shutdown();
}

static void a_failed_collective_ends_the_job(void **state)
{
    if (!fl_distributed_find("fake"))
        assert_int_equal(fl_distributed_register(&fake), FL_OK);
    fake_shutdowns = 0;
    assert_int_equal(fl_distributed_init("fake"), FL_OK);
    fake_fails = true;
    fl_tensor *x = T_F32(FL_SHAPE(1), 1);
    assert_fails(fl_all_reduce(x, FL_DIST_SUM), FL_ERR_DISTRIBUTED,
                 "fl_all_reduce: rank 2: all-reduce timed out: rank 3 did not arrive");
    fake_fails = false;
    assert_fails(fl_all_reduce(x, FL_DIST_SUM), FL_ERR_DISTRIBUTED,
                 "fl_all_reduce: an earlier collective failed; the job cannot continue");
    assert_fails_status(fl_barrier(), FL_ERR_DISTRIBUTED, "fl_barrier: an earlier collective failed");
    fl_tensor *out[1];
    assert_fails_status(fl_all_reduce_many((const fl_tensor *const *)&x, 1, FL_DIST_SUM, 0, out), FL_ERR_DISTRIBUTED,
                        "fl_dist_reducer_add: an earlier collective failed");
    fl_dist_reducer *r = fl_dist_reducer_new((const fl_tensor *const *)&x, 1, FL_DIST_SUM, 0);
    assert_fails_status(fl_dist_reducer_add(r, 0, x), FL_ERR_DISTRIBUTED, "an earlier collective failed");
    assert_fails_status(fl_dist_reducer_finish(r, out), FL_ERR_DISTRIBUTED,
                        "fl_dist_reducer_finish: bucket 0 of 1 could not start its all-reduce");
    fl_dist_reducer_free(r);
    fl_distributed_shutdown(); /* does not wait for the lost peers */
    assert_int_equal(fake_shutdowns, 0);
    /* A new job starts clean. */
    assert_int_equal(fl_distributed_init("single"), FL_OK);
    assert_values(fl_all_reduce(x, FL_DIST_SUM), 0, 0, 1);
    fl_distributed_shutdown();
}

/* ---- the MPI engine, under mpirun ---- */

typedef struct job {
    int status;     /* mpirun's exit status, or -1 */
    double seconds; /* how long it ran */
    char output[16384];
} job;

/* Skips the test (with a message) when mpirun is absent. */
static bool have_mpirun(void)
{
    if (access(MPIRUN, X_OK) == 0)
        return true;
    print_message("skipping: mpirun is absent (Debian packages openmpi-bin, libopenmpi-dev)\n");
    return false;
}

/* Runs `mpirun ... -np 2 <arguments>` (for instance DIST_CHECK_ARGUMENTS("collectives")),
 * stopping it after 120 s whatever happens. Root may run it only when told so. */
#define DIST_CHECK_ARGUMENTS(arguments) DIST_CHECK " " arguments
/* environment ("NAME=value ...", or "") is set for mpirun, which passes it on to the ranks. */
static void run_job_in(const char *environment, const char *arguments, job *j)
{
    char command[1024];
    /* Under the sanitizers the ranks check memory errors but not leaks: Open MPI keeps
     * allocations until exit in plugins it unloads (unnamed frames, which cannot be
     * suppressed), and a job ended by a fault abandons its requests by design. The
     * layer's own code is leak-checked in this process, through the engines above. */
    snprintf(command, sizeof command,
             "%s ASAN_OPTIONS=detect_leaks=0 timeout -k 5 120 %s --allow-run-as-root --oversubscribe --bind-to none "
             "-np 2 %s 2>&1",
             environment, MPIRUN, arguments);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    FILE *pipe = popen(command, "r");
    assert_non_null(pipe);
    size_t n = fread(j->output, 1, sizeof j->output - 1, pipe);
    j->output[n] = '\0';
    while (fgetc(pipe) != EOF) /* the rest, unread, so that the job is not stopped by a full pipe */
        ;
    int status = pclose(pipe);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    j->status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    j->seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    print_message("%s%smpirun ... %s: status %d after %.1f s\n%s", environment, *environment ? " " : "", arguments,
                  j->status, j->seconds, j->output);
}

static void run_job(const char *arguments, job *j) { run_job_in("", arguments, j); }

static void mpi_collectives_under_mpirun(void **state)
{
    if (!have_mpirun())
        skip();
    job j;
    run_job(DIST_CHECK_ARGUMENTS("collectives"), &j);
    assert_int_equal(j.status, 0);
    assert_null(strstr(j.output, "check failed"));
}

/* Two processes with batch B each end with the parameters of one process with batch
 * 2B (data-parallel training, src/nn/data_parallel.c). */
static void two_ranks_train_as_one_with_twice_the_batch(void **state)
{
    if (!have_mpirun())
        skip();
    job j;
    run_job(DIST_CHECK_ARGUMENTS("data_parallel"), &j);
    assert_int_equal(j.status, 0);
    assert_null(strstr(j.output, "check failed"));
}

/* The opencl backend's tensors have no host address (its host_data declines): the
 * same collectives and data-parallel training, with every rank's tensors there,
 * stage through host memory. Skipped, saying why once, where opencl has no device. */
static bool have_opencl(void)
{
    static int usable = -1;
    if (usable < 0) {
        fl_scope scope = fl_scope_begin();
        usable = fl_to_backend(fl_zeros(FL_F32, FL_SHAPE(1)), "opencl") != NULL;
        fl_scope_end(scope);
        if (!usable)
            print_message("skipping the opencl runs: no tensor can be made on the opencl backend (%s)\n",
                          fl_last_error());
        fl_clear_error();
    }
    return usable;
}

static void mpi_collectives_on_opencl(void **state)
{
    if (!have_mpirun() || !have_opencl())
        skip();
    job j;
    run_job_in("FLARE_BACKEND=opencl", DIST_CHECK_ARGUMENTS("collectives"), &j);
    assert_int_equal(j.status, 0);
    assert_null(strstr(j.output, "check failed"));
}

static void two_ranks_train_as_one_on_opencl(void **state)
{
    if (!have_mpirun() || !have_opencl())
        skip();
    job j;
    run_job_in("FLARE_BACKEND=opencl", DIST_CHECK_ARGUMENTS("data_parallel"), &j);
    assert_int_equal(j.status, 0);
    assert_null(strstr(j.output, "check failed"));
}

static void a_hung_rank_is_named_within_the_timeout(void **state)
{
    if (!have_mpirun())
        skip();
    job j;
    run_job(DIST_CHECK_ARGUMENTS("hang 2"), &j);
    assert_non_null(strstr(j.output, "rank 0: fl_all_reduce failed: fl_all_reduce: rank 0: all-reduce #0 timed out "
                                     "after 2 s: rank 1 did not arrive"));
    assert_int_not_equal(j.status, 0);
    /* 2 s of timeout, 0.2 s of asking around, and mpirun's start and end on a busy machine. */
    assert_true(j.seconds < 30);
}

static void a_dead_rank_stops_the_job(void **state)
{
    if (!have_mpirun())
        skip();
    /* By default mpirun ends the job as soon as a rank exits without finishing, and
     * names it: "Process name: [[jobid,1],1]" (job 1's vpid 1, that is rank 1). */
    job j;
    run_job(DIST_CHECK_ARGUMENTS("die 2"), &j);
    assert_int_not_equal(j.status, 0);
    assert_true(j.seconds < 30);
    assert_non_null(strstr(j.output, ",1],1]"));
    assert_non_null(strstr(j.output, "Exit code:    7"));
}

static void a_killed_rank_stops_the_job(void **state)
{
    if (!have_mpirun())
        skip();
    job j;
    run_job(DIST_CHECK_ARGUMENTS("killed 2"), &j);
    assert_int_not_equal(j.status, 0);
    assert_true(j.seconds < 30);
    assert_non_null(strstr(j.output, "process rank 1 with PID"));
    assert_non_null(strstr(j.output, "exited on signal 9"));
}

static void a_dead_rank_is_named_when_mpirun_lets_the_job_run_on(void **state)
{
    if (!have_mpirun())
        skip();
    /* Told not to end the job, mpirun leaves rank 0 waiting for the dead rank 1: Flare's
     * timeout ends the wait and names it. */
    job j;
    run_job("--mca orte_abort_on_non_zero_status 0 " DIST_CHECK_ARGUMENTS("die 2"), &j);
    assert_non_null(strstr(j.output, "rank 0: fl_all_reduce failed: fl_all_reduce: rank 0: all-reduce #0 timed out "
                                     "after 2 s: rank 1 did not arrive"));
    assert_true(j.seconds < 30);
}

/* Removes dir and the files in it (no subfolders). */
static void remove_folder(const char *dir)
{
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            remove(path);
    }
    if (d)
        closedir(d);
    rmdir(dir);
}

/* mpirun ends rank 0 while it saves checkpoints without pause: the checkpoint left is
 * a whole one, of a single step (a save is written aside and renamed into place). An
 * interrupted save may leave its temporary file, never a torn checkpoint. */
static void no_checkpoint_is_left_half_written(void **state)
{
    if (!have_mpirun())
        skip();
    char dir[] = "/tmp/flare-dist-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256], arguments[512];
    snprintf(path, sizeof path, "%s/model.ckpt", dir);
    snprintf(arguments, sizeof arguments, "%s checkpoint 5 %s", DIST_CHECK, path);
    job j;
    run_job(arguments, &j);
    assert_int_not_equal(j.status, 0);
    assert_non_null(strstr(j.output, ",1],1]")); /* rank 1 ended the job */

    fl_module *model = checkpoint_model();
    fl_tensor_map *file = NULL;
    fl_status loaded = fl_checkpoint_load(path, model, NULL, &file);
    const char *step = loaded == FL_OK ? fl_tensor_map_metadata(file, "step") : NULL;
    int leftovers = -3; /* ".", ".." and the checkpoint */
    DIR *d = opendir(dir);
    while (d && readdir(d))
        leftovers++;
    if (d)
        closedir(d);
    print_message("the checkpoint of step %s is whole; %d interrupted save%s left a temporary file\n",
                  step ? step : "?", leftovers, leftovers == 1 ? "" : "s");
    fl_parameters *p = fl_module_parameters(model);
    for (size_t i = 0; step && i < p->count; i++) {
        const fl_tensor *value = fl_v_value(p->items[i]);
        assert_true(fl_item(fl_all(fl_eq(value, fl_full_like(value, atof(step))), FL_ALL_AXES, false)) != 0);
    }
    fl_parameters_free(p);
    fl_tensor_map_free(file);
    fl_module_release(model);
    remove_folder(dir);
    assert_int_equal(loaded, FL_OK);
    assert_non_null(step);
}

/* The model benchmark trains data-parallel under mpirun with its --distributed flag: it
 * succeeds, only rank 0 reports, and the ranks end with identical parameters (the
 * benchmark compares them and fails otherwise). */
static void the_benchmark_trains_data_parallel(void **state)
{
    if (!have_mpirun())
        skip();
    job j;
    /* The smallest model, with batch norm: its running statistics stay each rank's own. */
    run_job(BENCHMARK " --model resnet50 --size tiny --warmup 1 --iters 2 --threads 1 --peak-gflops 1 --distributed",
            &j);
    assert_int_equal(j.status, 0);
    assert_non_null(strstr(j.output, "data-parallel over 2 processes"));
    assert_non_null(strstr(j.output, "the slowest rank's"));
    assert_non_null(strstr(j.output, "parameters identical on all 2 ranks"));
    const char *report = strstr(j.output, "iterations after");
    assert_non_null(report);
    assert_null(strstr(report + 1, "iterations after")); /* one report, rank 0's */
}

/* The MNIST example trains data-parallel under mpirun with its --distributed flag (on a
 * slice of Fashion-MNIST); rank 0 alone writes the report, with the epoch's loss
 * averaged over both ranks' images. */
static void the_mnist_example_trains_data_parallel(void **state)
{
    if (!have_mpirun())
        skip();
    if (access("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", R_OK) != 0) {
        print_message("skipping: Fashion-MNIST is absent (Debian package dataset-fashion-mnist)\n");
        skip();
    }
    char dir[] = "/tmp/flare-dist-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char report[256], arguments[512];
    snprintf(report, sizeof report, "%s/mnist.json", dir);
    snprintf(arguments, sizeof arguments,
             "%s --distributed --threads 1 --train-limit 128 --batch 32 --epochs 1 --no-eval --json %s", MNIST,
             report);
    job j;
    run_job(arguments, &j);
    FILE *f = fopen(report, "r");
    char text[1024] = "";
    if (f) {
        text[fread(text, 1, sizeof text - 1, f)] = '\0';
        fclose(f);
    }
    remove_folder(dir);
    assert_int_equal(j.status, 0);
    assert_non_null(strstr(j.output, "batch 32 x 2 processes"));
    assert_non_null(strstr(text, "\"epoch\": 1"));
    assert_non_null(strstr(text, "\"train_loss\""));
}

int main(void)
{
    unsetenv("FLARE_DIST_TIMEOUT");
    const struct CMUnitTest tests[] = {
        scoped_test(one_process_before_init),
        scoped_test(single_engine_collectives_are_copies),
        scoped_test(choosing_the_engine),
        scoped_test(the_timeout),
        scoped_test(bad_arguments),
        scoped_test(many_tensors_in_buckets),
        scoped_test(a_reducer_over_rounds),
        scoped_test(reducer_errors),
        scoped_test(means_divide_by_the_engines_size),
        scoped_test(collectives_on_a_backend_without_host_access),
        scoped_test(engines_are_checked_when_registered),
        scoped_test(a_failed_collective_ends_the_job),
        scoped_test(mpi_collectives_under_mpirun),
        scoped_test(two_ranks_train_as_one_with_twice_the_batch),
        scoped_test(mpi_collectives_on_opencl),
        scoped_test(two_ranks_train_as_one_on_opencl),
        scoped_test(a_hung_rank_is_named_within_the_timeout),
        scoped_test(a_dead_rank_stops_the_job),
        scoped_test(a_killed_rank_stops_the_job),
        scoped_test(a_dead_rank_is_named_when_mpirun_lets_the_job_run_on),
        scoped_test(no_checkpoint_is_left_half_written),
        scoped_test(the_benchmark_trains_data_parallel),
        scoped_test(the_mnist_example_trains_data_parallel),
    };
    return cmocka_run_group_tests_name("distributed", tests, NULL, NULL);
}
