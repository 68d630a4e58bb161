/*
 * Flare's settings and its log (flare/config.h). Every environment variable the
 * library reads is read in this file, and docs/CONFIG.md lists them all.
 *
 * The settings are read once, so that every part of the library sees the same ones
 * and fl_init can tell whether it came too late. Strings are copied into fixed
 * buffers: the settings live as long as the process and allocate nothing.
 */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "internal.h"

typedef struct settings {
    fl_config config; /* its strings point into the buffers below (see link) */
    char backend[64], memory[16], conv_algorithm[16], lazy_compile[8], distributed[64], cpu_kernels[16];
    char compiler[1024], kernel_cache[4096];
} settings;

static settings current;
static bool read_once; /* current is set; fl_init is too late */
/* One reading at a time, into scratch (too large for a thread's stack), which
 * publish copies into current. */
static pthread_mutex_t reading = PTHREAD_MUTEX_INITIALIZER;
static settings scratch;

/* What went wrong while reading: fl_init reports the first problem as its error;
 * a first use logs each one and takes the setting's default instead. */
#define MAX_PROBLEMS 16
typedef struct reader {
    bool strict, environment; /* fl_init's; from the environment, not an fl_config */
    int count;
    char problems[MAX_PROBLEMS][320];
} reader;

static void problem(reader *r, const char *env, const char *field, const char *fallback, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void problem(reader *r, const char *env, const char *field, const char *fallback, const char *fmt, ...)
{
    if (r->count == MAX_PROBLEMS || (r->strict && r->count == 1))
        return;
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    char *out = r->problems[r->count++];
    if (r->environment)
        snprintf(out, sizeof r->problems[0], "%s %s%s%s", env, what, r->strict ? "" : "; using ",
                 r->strict ? "" : fallback);
    else
        snprintf(out, sizeof r->problems[0], "config->%s %s", field, what);
}

#define PROBLEM(r, field, env, fallback, ...) problem(r, env, #field, fallback, __VA_ARGS__)

/* Copies a string setting; "" and NULL are both the default. False if too long. */
static bool copy(char *buffer, size_t size, const char *value)
{
    buffer[0] = 0;
    if (!value)
        return true;
    if (strlen(value) >= size)
        return false;
    strcpy(buffer, value);
    return true;
}

/* Copies value if it is one of the choices (NULL-terminated, the first the default). */
static bool choose(char *buffer, size_t size, const char *value, const char *const *choices)
{
    if (!value || !*value)
        value = choices[0];
    for (int i = 0; choices[i]; i++)
        if (strcmp(value, choices[i]) == 0)
            return copy(buffer, size, value);
    copy(buffer, size, choices[0]);
    return false;
}

static bool launched_by_mpirun(void)
{
    /* Open MPI's launcher, then MPICH's Hydra and any PMIx launcher. */
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

/* The kernel cache's default: $XDG_CACHE_HOME/flare/kernels, else
 * ~/.cache/flare/kernels, else a directory of the user's in /tmp. */
static void default_kernel_cache(char *buffer, size_t size)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n = xdg && *xdg     ? snprintf(buffer, size, "%s/flare/kernels", xdg)
            : home && *home ? snprintf(buffer, size, "%s/.cache/flare/kernels", home)
                            : snprintf(buffer, size, "/tmp/flare-kernels-%d", (int)getuid());
    if (n < 0 || (size_t)n >= size)
        snprintf(buffer, size, "/tmp/flare-kernels-%d", (int)getuid());
}

/* Room left in the kernel cache's path for a kernel's file name (compile.c). */
#define KERNEL_NAME_ROOM 64

static const char *const memories[] = {"caching", "plain", NULL};
static const char *const conv_algorithms[] = {"winograd", "direct", NULL};
static const char *const compile_modes[] = {"async", "sync", "off", NULL};
static const char *const cpu_levels[] = {"best", "x86-64-v4", "x86-64-v3", "x86-64", NULL};

/* Checks c and resolves it into s (whose strings link() then points at). */
static void resolve(const fl_config *c, settings *s, reader *r)
{
    memset(s, 0, sizeof *s);
    if (!copy(s->backend, sizeof s->backend, c->backend))
        PROBLEM(r, backend, "FLARE_BACKEND", "cpu", "is longer than %zu bytes", sizeof s->backend - 1);
    if (!choose(s->memory, sizeof s->memory, c->memory, memories))
        PROBLEM(r, memory, "FLARE_MEMORY", "caching", "is '%s', neither 'caching' nor 'plain'", c->memory);
    s->config.num_threads = c->num_threads;
    if (c->num_threads < 0 || c->num_threads > FL_MAX_THREADS) {
        PROBLEM(r, num_threads, "FLARE_NUM_THREADS", "one per processor", "is %d; it must be 0 to %d",
                c->num_threads, FL_MAX_THREADS);
        s->config.num_threads = 0;
    }
    if (!choose(s->conv_algorithm, sizeof s->conv_algorithm, c->conv_algorithm, conv_algorithms))
        PROBLEM(r, conv_algorithm, "FLARE_CONV_ALGORITHM", "winograd", "is '%s', neither 'winograd' nor 'direct'",
                c->conv_algorithm);
    if (!choose(s->lazy_compile, sizeof s->lazy_compile, c->lazy_compile, compile_modes))
        PROBLEM(r, lazy_compile, "FLARE_LAZY_COMPILE", "async", "is '%s', none of 'async', 'sync', 'off'",
                c->lazy_compile);
    if (!choose(s->cpu_kernels, sizeof s->cpu_kernels, c->cpu_kernels, cpu_levels))
        PROBLEM(r, cpu_kernels, "FLARE_CPU_KERNELS", "best", "is '%s', none of 'best', 'x86-64-v4', 'x86-64-v3', 'x86-64'",
                c->cpu_kernels);
    if (!copy(s->kernel_cache, sizeof s->kernel_cache - KERNEL_NAME_ROOM, c->kernel_cache))
        PROBLEM(r, kernel_cache, "FLARE_KERNEL_CACHE", "the default", "is longer than %zu bytes",
                sizeof s->kernel_cache - KERNEL_NAME_ROOM - 1);
    if (!s->kernel_cache[0])
        default_kernel_cache(s->kernel_cache, sizeof s->kernel_cache - KERNEL_NAME_ROOM);
    if (!copy(s->compiler, sizeof s->compiler, c->compiler))
        PROBLEM(r, compiler, "FLARE_CC", "the built-in compiler", "is longer than %zu bytes", sizeof s->compiler - 1);
    if (!copy(s->distributed, sizeof s->distributed, c->distributed))
        PROBLEM(r, distributed, "FLARE_DISTRIBUTED", "the default", "is longer than %zu bytes",
                sizeof s->distributed - 1);
    if (!s->distributed[0])
        strcpy(s->distributed, launched_by_mpirun() ? "mpi" : "single");
    s->config.dist_timeout = c->dist_timeout == 0 ? 300 : c->dist_timeout < 0 ? -1 : c->dist_timeout;
    if (isnan(c->dist_timeout) || isinf(c->dist_timeout)) {
        PROBLEM(r, dist_timeout, "FLARE_DIST_TIMEOUT", "300", "is %g; it must be a finite number of seconds",
                c->dist_timeout);
        s->config.dist_timeout = 300;
    }
    s->config.profile = c->profile;
    s->config.opencl_device = c->opencl_device;
    if (c->opencl_device < 0) {
        PROBLEM(r, opencl_device, "FLARE_OPENCL_DEVICE", "the first GPU", "is %d; it must be a device index + 1",
                c->opencl_device);
        s->config.opencl_device = 0;
    }
#ifdef FLARE_CHECK_HANDLES_DEFAULT
    s->config.check_handles = c->check_handles ? (c->check_handles > 0 ? 1 : -1) : 1;
#else
    s->config.check_handles = c->check_handles > 0 ? 1 : -1;
#endif
    s->config.log = c->log;
    s->config.log_user = c->log_user;
    s->config.size = sizeof s->config;
}

static void point_strings(settings *s)
{
    s->config.backend = s->backend[0] ? s->backend : NULL;
    s->config.memory = s->memory;
    s->config.conv_algorithm = s->conv_algorithm;
    s->config.lazy_compile = s->lazy_compile;
    s->config.kernel_cache = s->kernel_cache;
    s->config.compiler = s->compiler[0] ? s->compiler : NULL;
    s->config.distributed = s->distributed;
    s->config.cpu_kernels = s->cpu_kernels;
}

/* The environment as an fl_config: numbers parsed, names passed on for resolve. */
static void read_environment(settings *s, reader *r)
{
    r->environment = true;
    fl_config c = {.size = sizeof c};
    c.backend = getenv("FLARE_BACKEND");
    c.memory = getenv("FLARE_MEMORY");
    c.conv_algorithm = getenv("FLARE_CONV_ALGORITHM");
    c.lazy_compile = getenv("FLARE_LAZY_COMPILE");
    c.kernel_cache = getenv("FLARE_KERNEL_CACHE");
    c.compiler = getenv("FLARE_CC");
    c.distributed = getenv("FLARE_DISTRIBUTED");
    c.cpu_kernels = getenv("FLARE_CPU_KERNELS");
    const char *v = getenv("FLARE_NUM_THREADS");
    if (v && *v) {
        char *end;
        long n = strtol(v, &end, 10);
        if (*end || n < 0 || n > FL_MAX_THREADS)
            PROBLEM(r, num_threads, "FLARE_NUM_THREADS", "one per processor",
                    "is '%s', not a whole number of threads from 0 to %d", v, FL_MAX_THREADS);
        else
            c.num_threads = (int)n;
    }
    v = getenv("FLARE_DIST_TIMEOUT");
    if (v && *v) {
        char *end;
        double t = strtod(v, &end);
        if (*end || !(t >= 0) || isinf(t))
            PROBLEM(r, dist_timeout, "FLARE_DIST_TIMEOUT", "300", "is '%s', not a number of seconds >= 0", v);
        else
            c.dist_timeout = t == 0 ? -1 : t; /* the variable's 0 waits forever */
    }
    v = getenv("FLARE_OPENCL_DEVICE");
    if (v && *v) {
        char *end;
        long n = strtol(v, &end, 10);
        if (*end || n < 0 || n > 4096)
            PROBLEM(r, opencl_device, "FLARE_OPENCL_DEVICE", "the first GPU", "is '%s', not a device index (clinfo -l)",
                    v);
        else
            c.opencl_device = (int)n + 1;
    }
    v = getenv("FLARE_PROFILE");
    c.profile = v && *v && strcmp(v, "0") != 0;
    v = getenv("FLARE_CHECK_HANDLES");
    if (v && *v) {
        if (strcmp(v, "0") == 0 || strcmp(v, "1") == 0)
            c.check_handles = *v == '1' ? 1 : -1;
        else
            PROBLEM(r, check_handles, "FLARE_CHECK_HANDLES", "the build's default", "is '%s', neither '0' nor '1'", v);
    }
    v = getenv("FLARE_LOG");
    if (v && *v && strcmp(v, "none") != 0) {
        c.log = fl_log_stderr;
        /* whoever set it wants to see messages: this one too */
        if (strcmp(v, "stderr") != 0)
            PROBLEM(r, log, "FLARE_LOG", "stderr", "is '%s', neither 'stderr' nor 'none'", v);
    }
    if (!r->strict || r->count == 0)
        resolve(&c, s, r);
}

/* Under reading: publishes s unless settings were read already; true if it did. */
static bool publish(const settings *s)
{
    if (read_once)
        return false;
    current = *s;
    point_strings(&current);
    __atomic_store_n(&read_once, true, __ATOMIC_RELEASE);
    fl__profile_configure(current.config.profile);
    fl__handles_configure(current.config.check_handles > 0);
    return true;
}

const fl_config *fl_config_current(void)
{
    if (__builtin_expect(__atomic_load_n(&read_once, __ATOMIC_ACQUIRE), 1))
        return &current.config;
    reader r = {.strict = false};
    pthread_mutex_lock(&reading);
    if (!__atomic_load_n(&read_once, __ATOMIC_ACQUIRE)) {
        read_environment(&scratch, &r);
        publish(&scratch);
    }
    pthread_mutex_unlock(&reading);
    for (int i = 0; i < r.count; i++)
        fl_log_message(FL_LOG_WARNING, "%s", r.problems[i]);
    return &current.config;
}

fl_status fl_init(const fl_config *config)
{
    const char *fn = "fl_init";
    reader r = {.strict = true};
    pthread_mutex_lock(&reading);
    if (config) {
        fl_config c = {0};
        if (config->size < sizeof c.size || config->size > sizeof c) {
            pthread_mutex_unlock(&reading);
            fl_error(FL_ERR_VALUE, fn, "config->size is %zu; set it to sizeof(fl_config), %zu", config->size,
                      sizeof c);
            return FL_ERR_VALUE;
        }
        memcpy(&c, config, config->size); /* an older, shorter fl_config leaves the rest default */
        resolve(&c, &scratch, &r);
    } else {
        read_environment(&scratch, &r);
    }
    bool published = r.count == 0 && publish(&scratch);
    pthread_mutex_unlock(&reading);
    if (r.count) {
        fl_error(FL_ERR_VALUE, fn, "%s", r.problems[0]);
        return FL_ERR_VALUE;
    }
    if (!published) {
        fl_error(FL_ERR_VALUE, fn,
                  "Flare has read its settings already (at its first use); call fl_init before anything else");
        return FL_ERR_VALUE;
    }
    return FL_OK;
}

/* ---- shutdown ---- */

#define MAX_STOPS 16
static struct {
    void (*stop)(void *user);
    void *user;
} stops[MAX_STOPS];
static int stop_count;
static pthread_mutex_t stops_lock = PTHREAD_MUTEX_INITIALIZER;

fl_status fl_at_shutdown(void (*stop)(void *user), void *user)
{
    if (!stop) {
        fl_error(FL_ERR_NULL, "fl_at_shutdown", "the stop function is NULL");
        return FL_ERR_NULL;
    }
    fl_status status = FL_OK;
    pthread_mutex_lock(&stops_lock);
    bool known = false;
    for (int i = 0; i < stop_count; i++)
        known = known || (stops[i].stop == stop && stops[i].user == user);
    if (!known && stop_count == MAX_STOPS)
        status = FL_ERR_MEMORY;
    else if (!known)
        stops[stop_count].stop = stop, stops[stop_count++].user = user;
    pthread_mutex_unlock(&stops_lock);
    if (status != FL_OK)
        fl_error(status, "fl_at_shutdown", "at most %d stops can be registered", MAX_STOPS);
    return status;
}

void fl_shutdown(void)
{
    pthread_mutex_lock(&stops_lock);
    int count = stop_count;
    pthread_mutex_unlock(&stops_lock);
    for (int i = count - 1; i >= 0; i--) /* entries below count never change */
        stops[i].stop(stops[i].user);
}

/* ---- the log ---- */

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static bool log_set; /* by fl_set_log, which overrides the configuration */
static fl_log_fn log_fn;
static void *log_user;

void fl_set_log(fl_log_fn fn, void *user)
{
    pthread_mutex_lock(&log_lock);
    log_set = true;
    log_fn = fn;
    log_user = user;
    pthread_mutex_unlock(&log_lock);
}

void fl_log_stderr(fl_log_level level, const char *message, void *user)
{
    (void)user;
    fprintf(stderr, "flare: %s%s\n", level == FL_LOG_ERROR ? "error: " : "", message);
}

void fl_log_message(fl_log_level level, const char *fmt, ...)
{
    const fl_config *c = fl_config_current();
    pthread_mutex_lock(&log_lock);
    fl_log_fn fn = log_set ? log_fn : c->log;
    void *user = log_set ? log_user : c->log_user;
    pthread_mutex_unlock(&log_lock);
    if (!fn)
        return;
    char message[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    fn(level, message, user);
}
