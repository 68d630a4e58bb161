/*
 * Run by tests/test_distributed.c under `mpirun -np 2`: checks every collective of the
 * "mpi" engine with values whose results are exact, or acts out a fault.
 *
 *   dist_check collectives     every collective; exit status 0 if all checks pass
 *   dist_check hang SECONDS    rank 1 sleeps; rank 0's all-reduce must time out
 *   dist_check die SECONDS     rank 1 exits abruptly; rank 0's all-reduce must fail
 *   dist_check killed SECONDS  rank 1 is killed by SIGKILL; the same
 *   dist_check checkpoint SECONDS PATH
 *                              rank 0 saves checkpoints to PATH over and over, each
 *                              with every parameter equal to its "step", until the
 *                              job ends: rank 1 exits abruptly meanwhile
 *   dist_check data_parallel   2 ranks x batch B train as 1 process x batch 2B
 *
 * Tensors are made on the default backend (FLARE_BACKEND), so the same checks run on
 * a device backend, whose tensors the layer stages through host memory.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "flare/backend.h"
#include "flare/distributed.h"
#include "flare/io.h"
#include "flare/nn.h"
#include "flare/optim.h"
#include "checkpoint_model.h"

static int failures;
static int rank;

#define CHECK(cond) \
    do { \
        if (!(cond)) { \
            fprintf(stderr, "rank %d: check failed at %s:%d: %s (%s)\n", rank, __FILE__, __LINE__, #cond, \
                    fl_last_error()); \
            failures++; \
        } \
    } while (0)

/* True if t holds exactly expected (count values, read as f64) and lives on the
 * default backend (FLARE_BACKEND), where every input here is made: collectives give
 * their results on their input's backend. */
static bool equals(const fl_tensor *t, const double *expected, int64_t count)
{
    if (!t || fl_numel(t) != count || strcmp(fl_backend_name(t), fl_default_backend()->name) != 0)
        return false;
    fl_tensor *wide = fl_cast(t, FL_F64);
    double *values = malloc((size_t)count * sizeof *values + 1);
    bool same = wide && values && fl_to_host(wide, values, (size_t)count * sizeof *values) == FL_OK;
    for (int64_t i = 0; same && i < count; i++)
        same = values[i] == expected[i];
    free(values);
    return same;
}

static void check_all_reduce(int size)
{
    static const fl_dtype dtypes[] = {FL_F32, FL_F64, FL_I32, FL_I64};
    for (int d = 0; d < 4; d++) {
        /* Rank r holds (r + 1) * [1, 2, 3, 4, 5, 6]; the ranks' sum is size(size+1)/2 times that. */
        fl_tensor *x = fl_mul(fl_arange(1, 7, 1, dtypes[d]), fl_scalar(rank + 1, dtypes[d]));
        x = fl_reshape(x, FL_SHAPE(2, 3));
        double total = size * (size + 1) / 2.0, sum[6], max[6], min[6], mean[6];
        for (int i = 0; i < 6; i++)
            sum[i] = total * (i + 1), max[i] = size * (i + 1.0), min[i] = i + 1.0, mean[i] = sum[i] / size;
        fl_tensor *s = fl_all_reduce(x, FL_DIST_SUM);
        CHECK(equals(s, sum, 6) && fl_dtype_of(s) == dtypes[d] && fl_ndim(s) == 2);
        CHECK(equals(fl_all_reduce(x, FL_DIST_MAX), max, 6));
        CHECK(equals(fl_all_reduce(x, FL_DIST_MIN), min, 6));
        if (fl_dtype_is_float(dtypes[d]))
            CHECK(equals(fl_all_reduce(x, FL_DIST_MEAN), mean, 6));
        /* A strided view goes through a staged copy. */
        CHECK(equals(fl_transpose(fl_all_reduce(fl_transpose(x, 0, 1), FL_DIST_SUM), 0, 1), sum, 6));
        /* Two requests in flight at once, waited for in reverse order. */
        fl_dist_request *a = fl_all_reduce_async(x, FL_DIST_SUM);
        fl_dist_request *b = fl_all_reduce_async(x, FL_DIST_MAX);
        CHECK(a && b);
        CHECK(equals(fl_dist_wait(b), max, 6));
        CHECK(equals(fl_dist_wait(a), sum, 6));
    }
}

static void check_many(int size)
{
    /* Mixed sizes and dtypes, buckets of 64 bytes: several tensors per bucket, tensors
     * larger than a bucket, and two dtypes interleaved. */
    enum { COUNT = 7 };
    const int64_t lengths[COUNT] = {1, 40, 3, 100, 7, 16, 5};
    fl_tensor *tensors[COUNT], *out[COUNT];
    for (int i = 0; i < COUNT; i++) {
        fl_dtype dtype = i % 3 == 1 ? FL_F64 : FL_F32;
        tensors[i] = fl_add(fl_arange(0, (double)lengths[i], 1, dtype), fl_scalar(100 * i + rank, dtype));
    }
    for (size_t bucket_bytes = 0; bucket_bytes <= 64; bucket_bytes += 64) {
        fl_dist_op op = bucket_bytes ? FL_DIST_MEAN : FL_DIST_SUM;
        CHECK(fl_all_reduce_many((const fl_tensor *const *)tensors, COUNT, op, bucket_bytes, out) == FL_OK);
        for (int i = 0; i < COUNT; i++) {
            double expected[100];
            for (int64_t j = 0; j < lengths[i]; j++) {
                /* sum over r of (j + 100 i + r) */
                double sum = size * (j + 100.0 * i) + size * (size - 1) / 2.0;
                expected[j] = op == FL_DIST_MEAN ? sum / size : sum;
            }
            CHECK(equals(out[i], expected, lengths[i]));
        }
    }
    /* A reducer over several rounds, tensors added in reverse order, as backward does. */
    fl_dist_reducer *reducer = fl_dist_reducer_new((const fl_tensor *const *)tensors, COUNT, FL_DIST_SUM, 64);
    CHECK(reducer && fl_dist_reducer_bucket_count(reducer) > 2);
    for (int round = 0; round < 3 && reducer; round++) {
        for (int i = COUNT - 1; i >= 0; i--)
            CHECK(fl_dist_reducer_add(reducer, i, fl_mul(tensors[i], fl_scalar(round + 1, FL_F32))) == FL_OK);
        CHECK(fl_dist_reducer_finish(reducer, out) == FL_OK);
        for (int i = 0; i < COUNT; i++) {
            double expected[100];
            for (int64_t j = 0; j < lengths[i]; j++)
                expected[j] = (round + 1) * (size * (j + 100.0 * i) + size * (size - 1) / 2.0);
            CHECK(equals(out[i], expected, lengths[i]));
        }
    }
    fl_dist_reducer_free(reducer);
}

static void check_others(int size)
{
    /* Broadcast from each root: every rank ends with root's [root, root + 1, root + 2]. */
    for (int root = 0; root < size; root++) {
        fl_tensor *mine = fl_arange(rank, rank + 3, 1, FL_I64);
        double expected[3] = {root, root + 1, root + 2};
        CHECK(equals(fl_broadcast(mine, root), expected, 3));
    }
    CHECK(!fl_broadcast(fl_zeros(FL_F32, FL_SHAPE(2)), size) && fl_last_status() == FL_ERR_VALUE);
    fl_clear_error();

    /* All-gather: rank r contributes [10 r, 10 r + 1]; the result is every rank's, in order. */
    fl_tensor *gathered = fl_all_gather(fl_arange(10 * rank, 10 * rank + 2, 1, FL_I32));
    double expected[16];
    for (int r = 0; r < size; r++)
        expected[2 * r] = 10 * r, expected[2 * r + 1] = 10 * r + 1;
    CHECK(equals(gathered, expected, 2 * size) && fl_shape(gathered)[0] == 2 * size);
    fl_tensor *scalars = fl_all_gather(fl_scalar(rank * 2.5, FL_F64));
    for (int r = 0; r < size; r++)
        expected[r] = r * 2.5;
    CHECK(equals(scalars, expected, size) && fl_ndim(scalars) == 1);

    /* Reduce-scatter of [size * 2, 3] holding (r + 1) * (0..): rank r keeps rows 2r, 2r + 1 summed. */
    fl_tensor *rows = fl_reshape(fl_mul(fl_arange(0, size * 6, 1, FL_F32), fl_scalar(rank + 1, FL_F32)),
                                 FL_SHAPE(size * 2, 3));
    fl_tensor *mine = fl_reduce_scatter(rows, FL_DIST_SUM);
    fl_tensor *mean = fl_reduce_scatter(rows, FL_DIST_MEAN);
    double sum[6], average[6];
    for (int i = 0; i < 6; i++)
        sum[i] = (6 * rank + i) * size * (size + 1) / 2.0, average[i] = sum[i] / size;
    CHECK(equals(mine, sum, 6) && fl_shape(mine)[0] == 2 && fl_shape(mine)[1] == 3);
    CHECK(equals(mean, average, 6));

    CHECK(fl_barrier() == FL_OK);
}

static int collectives(void)
{
    int size = fl_distributed_size();
    CHECK(strcmp(fl_distributed_engine_name(), "mpi") == 0);
    CHECK(size == 2);
    fl_scope scope = fl_scope_begin();
    check_all_reduce(size);
    check_many(size);
    check_others(size);
    fl_scope_end(scope);
    return failures ? 1 : 0;
}

/* Rank 1 misbehaves; rank 0 reports what its all-reduce said and exits with status 3
 * if the all-reduce failed as it should. */
static int fault(const char *mode)
{
    if (rank == 1) {
        if (strcmp(mode, "die") == 0)
            _exit(7);
        if (strcmp(mode, "killed") == 0)
            raise(SIGKILL);
        sleep(120);
        return 0;
    }
    fl_tensor *x = fl_ones(FL_F32, FL_SHAPE(4));
    fl_tensor *y = fl_all_reduce(x, FL_DIST_SUM);
    fprintf(stderr, "rank 0: fl_all_reduce %s: %s\n", y ? "succeeded" : "failed", fl_last_error());
    bool failed = !y && fl_last_status() == FL_ERR_DISTRIBUTED;
    /* Later collectives refuse at once instead of waiting again. */
    fl_clear_error();
    bool refused = fl_barrier() == FL_ERR_DISTRIBUTED && strstr(fl_last_error(), "an earlier collective failed");
    fl_release(x);
    fl_release(y);
    return failed && refused ? 3 : 1;
}

/* ---- a fault while rank 0 writes a checkpoint ---- */

/* Rank 0 saves without pause; rank 1 dies once the first save is done, and mpirun then
 * ends rank 0, most likely in the middle of a save. Whatever PATH holds afterwards must
 * be a whole checkpoint. Returns 1 if the job was not ended within a minute. */
static int checkpoint(const char *path)
{
    fl_module *model = checkpoint_model();
    fl_parameters *p = fl_module_parameters(model);
    time_t deadline = time(NULL) + 60;
    for (long step = 0; rank == 0 && !failures && time(NULL) < deadline; step++) {
        fl_scope scope = fl_scope_begin();
        for (size_t i = 0; i < p->count; i++)
            CHECK(fl_v_set_value(p->items[i], fl_full_like(fl_v_value(p->items[i]), (double)step)) == FL_OK);
        char text[32];
        snprintf(text, sizeof text, "%ld", step);
        CHECK(fl_checkpoint_save(path, model, NULL, (const char *[]){"step", text, NULL}) == FL_OK);
        fl_scope_end(scope);
        if (step == 0)
            CHECK(fl_barrier() == FL_OK);
    }
    if (rank == 1) {
        CHECK(fl_barrier() == FL_OK);
        usleep(300 * 1000);
        _exit(7);
    }
    fl_parameters_free(p);
    fl_module_release(model);
    return 1;
}

/* ---- data-parallel training ---- */

enum { BATCH = 4, STEPS = 5, FEATURES = 6, CLASSES = 3 };

static fl_module *small_model(uint64_t seed)
{
    fl_manual_seed(seed);
    return fl_nn_sequential(FL_MODULES(fl_nn_linear(FEATURES, 8, true), fl_nn_tanh(), fl_nn_linear(8, CLASSES, true)));
}

/* STEPS steps of SGD with momentum; each step's batch is rows [first, first + rows) of
 * the step's 2 * BATCH rows. dp may be NULL (one process). */
static void train(fl_module *model, fl_data_parallel *dp, int64_t first, int64_t rows)
{
    fl_parameters *p = fl_module_parameters(model);
    fl_optimizer *opt = fl_sgd(p->items, p->count, &(fl_sgd_options){.lr = 0.1, .momentum = 0.9});
    fl_manual_seed(42);
    fl_tensor *x = fl_keep(fl_randn(FL_F32, FL_SHAPE(STEPS, 2 * BATCH, FEATURES)));
    fl_tensor *y = fl_keep(fl_randint(0, CLASSES, FL_I64, FL_SHAPE(STEPS, 2 * BATCH)));
    for (int64_t s = 0; s < STEPS; s++) {
        fl_scope scope = fl_scope_begin();
        fl_tensor *xs = fl_index(x, FL_INDEX(FL_AT(s), FL_RANGE(first, first + rows)));
        fl_tensor *ys = fl_index(y, FL_INDEX(FL_AT(s), FL_RANGE(first, first + rows)));
        fl_variable *loss = fl_nn_cross_entropy(fl_module_forward(model, fl_v_new(xs, false)), ys, NULL);
        CHECK(fl_v_backward(loss, NULL, false) == FL_OK);
        if (dp)
            CHECK(fl_data_parallel_sync(dp) == FL_OK);
        CHECK(fl_optimizer_step(opt) == FL_OK);
        fl_optimizer_zero_grad(opt);
        fl_scope_end(scope);
    }
    fl_release(x);
    fl_release(y);
    fl_optimizer_free(opt);
    fl_parameters_free(p);
}

static int data_parallel(void)
{
    fl_scope scope = fl_scope_begin();
    fl_module *replica = small_model(rank + 1); /* data-parallel must broadcast rank 0's weights */
    CHECK(replica != NULL);
    if (!replica)
        return 1;
    /* Small buckets, so that several all-reduces overlap backward. */
    fl_data_parallel *dp = fl_data_parallel_new(replica, 64);
    CHECK(dp != NULL);
    CHECK(fl_data_parallel_bucket_count(dp) > 1);
    train(replica, dp, rank * BATCH, BATCH);

    /* Rank 0's initial weights, trained in one process on the whole batches. */
    fl_module *whole = small_model(1);
    CHECK(whole != NULL);
    if (!whole)
        return 1;
    train(whole, NULL, 0, 2 * BATCH);

    fl_parameters *a = fl_module_parameters(replica), *b = fl_module_parameters(whole);
    for (size_t i = 0; i < a->count; i++) {
        fl_tensor *diff = fl_max(fl_abs(fl_sub(fl_v_value(a->items[i]), fl_v_value(b->items[i]))), FL_ALL_AXES, false);
        double d = fl_item(diff);
        if (!(d < 1e-5))
            fprintf(stderr, "rank %d: %s differs by %g\n", rank, a->names[i], d);
        CHECK(d < 1e-5);
    }
    fl_parameters_free(a);
    fl_parameters_free(b);
    fl_module_release(whole);
    fl_data_parallel_free(dp);
    fl_module_release(replica);
    fl_scope_end(scope);
    return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s collectives | data_parallel | hang|die|killed SECONDS | checkpoint SECONDS PATH\n",
                argv[0]);
        return 2;
    }
    if (argc > 2 && fl_distributed_set_timeout(atof(argv[2])) != FL_OK)
        return 2;
    if (fl_distributed_init(NULL) != FL_OK) {
        fprintf(stderr, "%s\n", fl_last_error());
        return 2;
    }
    rank = fl_distributed_rank();
    int status = strcmp(argv[1], "collectives") == 0     ? collectives()
                 : strcmp(argv[1], "data_parallel") == 0 ? data_parallel()
                 : strcmp(argv[1], "checkpoint") == 0    ? argc > 3 ? checkpoint(argv[3]) : 2
                                                         : fault(argv[1]);
    /* After a fault, shutdown does not wait for the peer; exiting ends the job. */
    fl_distributed_shutdown();
    return status;
}
