/* The distributed layer's glue: the registry of engines, the job's state (engine,
 * timeout, failure) and the collectives on tensors, written once above the engines. */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flare/config.h"
#include "../tensor/internal.h" /* host access: fl__host_data, fl__host_output */
#include "internal.h"

/* ---- errors ---- */

int fl_distributed_error(fl_status status, const char *fmt, ...)
{
    char message[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    return fl_backend_error(status, "%s", message);
}

/* ---- the registry ---- */

#define MAX_ENGINES 8

static fl_distributed *engines[MAX_ENGINES];
static int engine_count;
static pthread_once_t builtins_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;

static void register_builtins(void)
{
    fl_distributed_register(fl__distributed_single());
    fl_distributed_register(fl__distributed_mpi());
}

#define NAME_OF(version, type, name, params) #name,
#define END_OF(version, type, name, params) offsetof(fl_distributed, name) + sizeof(void *),
#define VERSION_OF(version, type, name, params) version,
static const char *const entry_names[] = {FL_DISTRIBUTED_ENTRIES(NAME_OF)};
static const size_t entry_ends[] = {FL_DISTRIBUTED_ENTRIES(END_OF)};
static const unsigned char entry_versions[] = {FL_DISTRIBUTED_ENTRIES(VERSION_OF)};
#define ENTRY_COUNT ((int)(sizeof entry_names / sizeof entry_names[0]))

const char *fl_distributed_entry_name(int i) { return i >= 0 && i < ENTRY_COUNT ? entry_names[i] : NULL; }

size_t fl_distributed_engine_size(int version)
{
    if (version < 1 || version > FL_DISTRIBUTED_VERSION)
        return 0;
    size_t size = 0;
    for (int i = 0; i < ENTRY_COUNT; i++)
        if (entry_versions[i] <= version)
            size = entry_ends[i];
    return size;
}

/* The first entry every engine needs that engine leaves NULL, or NULL if none. The
 * collectives may be NULL: calling one is then an error naming the engine. */
static const char *missing_entry(const fl_distributed *engine)
{
    return !engine->init ? "init" : !engine->shutdown ? "shutdown" : !engine->rank ? "rank" : !engine->size ? "size"
           : !engine->wait ? "wait" : NULL;
}

bool fl__dist_implements(const char *fn, const fl_distributed *engine, bool implemented, const char *entry_name)
{
    if (!implemented)
        fl_error(FL_ERR_UNSUPPORTED, fn, "the distributed engine '%s' does not implement %s", engine->name,
                 entry_name);
    return implemented;
}

fl_status fl_distributed_register(fl_distributed *engine)
{
    const char *fn = "fl_distributed_register";
    if (!engine || !engine->name) {
        fl_error(FL_ERR_NULL, fn, "the engine or its name is NULL");
        return FL_ERR_NULL;
    }
    size_t expected = fl_distributed_engine_size(engine->version);
    if (!expected || engine->table_size != expected) {
        fl_error(FL_ERR_VALUE, fn,
                 "engine '%s' says version %d with a table of %zu bytes; this library knows versions 1 to %d "
                 "(version %d has %zu): it was compiled against a different distributed.h",
                 engine->name, engine->version, engine->table_size, FL_DISTRIBUTED_VERSION, engine->version, expected);
        return FL_ERR_VALUE;
    }
    const char *missing = missing_entry(engine);
    if (missing) {
        fl_error(FL_ERR_VALUE, fn, "engine '%s' has no %s entry", engine->name, missing);
        return FL_ERR_VALUE;
    }
    fl_status status = FL_OK;
    pthread_mutex_lock(&registry_lock);
    for (int i = 0; i < engine_count; i++)
        if (strcmp(engines[i]->name, engine->name) == 0)
            status = FL_ERR_VALUE;
    if (status == FL_OK && engine_count == MAX_ENGINES)
        status = FL_ERR_MEMORY;
    if (status == FL_OK)
        engines[engine_count++] = engine;
    pthread_mutex_unlock(&registry_lock);
    if (status == FL_ERR_VALUE)
        fl_error(status, "fl_distributed_register", "an engine named '%s' is already registered", engine->name);
    else if (status != FL_OK)
        fl_error(status, "fl_distributed_register", "at most %d engines can be registered", MAX_ENGINES);
    return status;
}

fl_distributed *fl_distributed_find(const char *name)
{
    pthread_once(&builtins_once, register_builtins);
    fl_distributed *found = NULL;
    pthread_mutex_lock(&registry_lock);
    for (int i = 0; name && i < engine_count && !found; i++)
        if (strcmp(engines[i]->name, name) == 0)
            found = engines[i];
    pthread_mutex_unlock(&registry_lock);
    return found;
}

/* ---- the job ---- */

static fl_distributed *active;  /* the initialized engine, or NULL */
static bool failed;             /* a collective failed: the job is no longer consistent */
static double timeout_seconds = NAN;

fl_status fl_distributed_init(const char *name)
{
    const char *fn = "fl_distributed_init";
    if (active) {
        fl_error(FL_ERR_VALUE, fn, "the '%s' engine is already initialized", active->name);
        return FL_ERR_VALUE;
    }
    if (!name)
        name = fl_config_current()->distributed;
    fl_distributed *engine = fl_distributed_find(name);
    if (!engine) {
        fl_error(FL_ERR_VALUE, fn, "no distributed engine named '%s' is registered", name);
        return FL_ERR_VALUE;
    }
    if (!fl__dist_check(fn, engine->init(engine)))
        return fl_last_status();
    active = engine;
    failed = false;
    return FL_OK;
}

void fl_distributed_shutdown(void)
{
    if (!active)
        return;
    /* A leaving rank would wait for peers that may be gone or hung: after a failure
     * the process exits without the engine's farewell, and the launcher ends the rest. */
    if (!failed)
        active->shutdown(active);
    active = NULL;
}

bool fl_distributed_is_initialized(void) { return active != NULL; }

static fl_distributed *current(void) { return active ? active : fl__distributed_single(); }

const char *fl_distributed_engine_name(void) { return current()->name; }
int fl_distributed_rank(void) { return current()->rank(current()); }
int fl_distributed_size(void) { return current()->size(current()); }

fl_status fl_distributed_set_timeout(double seconds)
{
    if (!(seconds >= 0) || isinf(seconds)) {
        fl_error(FL_ERR_VALUE, "fl_distributed_set_timeout", "the timeout must be finite and >= 0 seconds, not %g",
                 seconds);
        return FL_ERR_VALUE;
    }
    timeout_seconds = seconds;
    return FL_OK;
}

double fl_distributed_timeout(void)
{
    if (isnan(timeout_seconds)) {
        double configured = fl_config_current()->dist_timeout;
        timeout_seconds = configured < 0 ? 0 : configured; /* 0 waits forever */
    }
    return timeout_seconds;
}

fl_distributed *fl__dist_engine(const char *fn)
{
    if (failed)
        return fl_error(FL_ERR_DISTRIBUTED, fn, "an earlier collective failed; the job cannot continue");
    return current();
}

bool fl__dist_check(const char *fn, int rc)
{
    if (rc == 0)
        return true;
    char message[1024];
    fl_status status = fl__take_backend_error(message, sizeof message);
    if (status == FL_OK) /* an engine that failed without saying why */
        status = (fl_status)rc;
    if (status == FL_ERR_DISTRIBUTED && active)
        failed = true;
    fl_error(status, fn, "%s", *message ? message : "the engine failed");
    return false;
}

bool fl__dist_wait(const char *fn, fl_distributed *engine, void *work)
{
    return !work || fl__dist_check(fn, engine->wait(engine, work, fl_distributed_timeout()));
}

/* ---- tensors to and from host buffers ---- */

bool fl__dist_accepts(const char *fn, const fl_tensor *t, fl_dist_op op)
{
    char desc[FL_DESC_SIZE];
    if (t->dtype != FL_F32 && t->dtype != FL_F64 && t->dtype != FL_I32 && t->dtype != FL_I64) {
        fl_error(FL_ERR_DTYPE, fn, "collectives take f32, f64, i32 or i64 tensors, not %s", fl_describe(t, desc));
        return false;
    }
    if ((unsigned)op > FL_DIST_MIN) {
        fl_error(FL_ERR_VALUE, fn, "unknown reduction %d", (int)op);
        return false;
    }
    if (op == FL_DIST_MEAN && !fl_dtype_is_float(t->dtype)) {
        fl_error(FL_ERR_DTYPE, fn, "a mean needs a float tensor, not %s", fl_describe(t, desc));
        return false;
    }
    return true;
}

void fl__dist_divide(void *data, int64_t count, fl_dtype dtype, int size)
{
    if (dtype == FL_F32) {
        float *x = data, n = (float)size;
        for (int64_t i = 0; i < count; i++)
            x[i] /= n;
    } else {
        double *x = data, n = (double)size;
        for (int64_t i = 0; i < count; i++)
            x[i] /= n;
    }
}

const void *fl__dist_host_input(const char *fn, const fl_tensor *t, void **scratch)
{
    *scratch = NULL;
    if (fl_eval(t) != FL_OK)
        return NULL;
    static const char nothing; /* empty tensors may have no storage; NULL means failure here */
    if (t->numel == 0)
        return &nothing;
    const void *direct = fl__host_data(t);
    if (direct)
        return direct;
    size_t bytes = (size_t)t->numel * fl_dtype_size(t->dtype);
    *scratch = malloc(bytes);
    if (!*scratch)
        return fl_error(FL_ERR_MEMORY, fn, "no memory to stage %zu bytes", bytes);
    if (fl_to_host(t, *scratch, bytes) != FL_OK) {
        free(*scratch);
        *scratch = NULL;
        return NULL;
    }
    return *scratch;
}

/* ---- collectives ---- */

typedef enum collective { ALL_REDUCE, BROADCAST, ALL_GATHER, REDUCE_SCATTER } collective;

struct fl_dist_request {
    fl_distributed *engine;
    void *work;
    fl_tensor *input;  /* retained while the engine may read its storage */
    void *scratch;     /* input's staged copy, if it had to be made */
    fl__host_output result; /* on the input's backend */
    fl_dist_op op;
};

static void request_free(fl_dist_request *r)
{
    fl_release(r->input);
    fl__host_output_abandon(&r->result);
    free(r->scratch);
    free(r);
}

static fl_dist_request *start(const char *fn, collective kind, const fl_tensor *t, fl_dist_op op, int root)
{
    if (fl_null_args(fn, 1, t) || !fl__dist_accepts(fn, t, op))
        return NULL;
    fl_distributed *engine = fl__dist_engine(fn);
    static const char *const entries[] = {"all_reduce", "broadcast", "all_gather", "reduce_scatter"};
    if (!engine)
        return NULL;
    int rank = engine->rank(engine), size = engine->size(engine);
    char desc[FL_DESC_SIZE];
    int ndim = t->ndim;
    int64_t shape[FL_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    if (kind == BROADCAST && (root < 0 || root >= size))
        return fl_error(FL_ERR_VALUE, fn, "root %d is not a rank of this job of %d", root, size);
    if (kind == ALL_GATHER) {
        if (ndim == 0)
            shape[ndim++] = 1;
        shape[0] *= size;
    }
    if (kind == REDUCE_SCATTER) {
        if (ndim == 0 || shape[0] % size != 0)
            return fl_error(FL_ERR_SHAPE, fn, "the first axis of %s must divide among %d ranks", fl_describe(t, desc),
                            size);
        shape[0] /= size;
    }
    bool implemented = kind == ALL_REDUCE   ? engine->all_reduce != NULL
                       : kind == BROADCAST  ? engine->broadcast != NULL
                       : kind == ALL_GATHER ? engine->all_gather != NULL
                                            : engine->reduce_scatter != NULL;
    if (!fl__dist_implements(fn, engine, implemented, entries[kind]))
        return NULL;

    fl_dist_request *r = calloc(1, sizeof *r);
    if (!r)
        return fl_error(FL_ERR_MEMORY, fn, "cannot allocate a request");
    r->engine = engine;
    r->op = op;
    r->input = fl_retain(t);
    const void *send = fl__dist_host_input(fn, t, &r->scratch);
    if (!send || !fl__host_output_begin(fn, &r->result, t->backend, t->dtype, ndim, shape)) {
        request_free(r);
        return NULL;
    }
    void *recv = r->result.data;
    int64_t count = r->result.tensor->numel;
    fl_dist_op engine_op = fl__dist_engine_op(op);
    int rc = 0;
    switch (kind) {
    case ALL_REDUCE:
        rc = engine->all_reduce(engine, send, recv, count, t->dtype, engine_op, &r->work);
        break;
    case BROADCAST:
        if (rank == root && count > 0)
            memcpy(recv, send, (size_t)count * fl_dtype_size(t->dtype));
        rc = engine->broadcast(engine, recv, count, t->dtype, root, &r->work);
        break;
    case ALL_GATHER:
        rc = engine->all_gather(engine, send, recv, t->numel, t->dtype, &r->work);
        break;
    case REDUCE_SCATTER:
        rc = engine->reduce_scatter(engine, send, recv, count, t->dtype, engine_op, &r->work);
        break;
    }
    if (!fl__dist_check(fn, rc)) {
        request_free(r);
        return NULL;
    }
    return r;
}

static fl_tensor *finish(const char *fn, fl_dist_request *r)
{
    fl_tensor *result = NULL;
    if (fl__dist_wait(fn, r->engine, r->work)) {
        const fl_tensor *t = r->result.tensor;
        if (r->op == FL_DIST_MEAN)
            fl__dist_divide(r->result.data, t->numel, t->dtype, r->engine->size(r->engine));
        result = fl__host_output_finish(fn, &r->result);
    }
    request_free(r);
    return fl_out(result);
}

fl_tensor *fl_all_reduce(const fl_tensor *t, fl_dist_op op)
{
    fl_dist_request *r = start("fl_all_reduce", ALL_REDUCE, t, op, 0);
    return r ? finish("fl_all_reduce", r) : NULL;
}

fl_dist_request *fl_all_reduce_async(const fl_tensor *t, fl_dist_op op)
{
    return start("fl_all_reduce_async", ALL_REDUCE, t, op, 0);
}

fl_tensor *fl_dist_wait(fl_dist_request *request)
{
    if (!request)
        return fl_error(FL_ERR_NULL, "fl_dist_wait", "the request is NULL");
    return finish("fl_dist_wait", request);
}

fl_tensor *fl_broadcast(const fl_tensor *t, int root)
{
    fl_dist_request *r = start("fl_broadcast", BROADCAST, t, FL_DIST_SUM, root);
    return r ? finish("fl_broadcast", r) : NULL;
}

fl_tensor *fl_all_gather(const fl_tensor *t)
{
    fl_dist_request *r = start("fl_all_gather", ALL_GATHER, t, FL_DIST_SUM, 0);
    return r ? finish("fl_all_gather", r) : NULL;
}

fl_tensor *fl_reduce_scatter(const fl_tensor *t, fl_dist_op op)
{
    fl_dist_request *r = start("fl_reduce_scatter", REDUCE_SCATTER, t, op, 0);
    return r ? finish("fl_reduce_scatter", r) : NULL;
}

fl_status fl_barrier(void)
{
    const char *fn = "fl_barrier";
    fl_distributed *engine = fl__dist_engine(fn);
    void *work = NULL;
    if (!engine || !fl__dist_implements(fn, engine, engine->barrier != NULL, "barrier") ||
        !fl__dist_check(fn, engine->barrier(engine, &work)) || !fl__dist_wait(fn, engine, work))
        return fl_last_status();
    return FL_OK;
}
