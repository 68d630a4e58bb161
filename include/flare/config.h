/*
 * Process-wide settings, the log, and shutdown.
 *
 * Settings. Flare reads its settings once, when it first needs one: from the FLARE_*
 * environment variables (docs/CONFIG.md lists every variable Flare reads, with its
 * values and default), or from the fl_config given to fl_init before that. A program
 * that calls neither gets the environment's settings; a program that passes its own
 * fl_config gets exactly those, and no FLARE_* variable is read. A bad value in the
 * environment is logged (below) and its default used; a bad value in an fl_config is
 * an error from fl_init, which then changes nothing.
 *
 *     fl_config config = {.size = sizeof config, .num_threads = 4, .lazy_compile = "sync"};
 *     if (fl_init(&config) != FL_OK)
 *         fprintf(stderr, "%s\n", fl_last_error());
 *
 * Log. Flare writes nothing to stderr or stdout. What it would warn about (a bad
 * setting, a kernel that did not compile, a memory manager destroyed while in use)
 * goes to the log callback, which by default is none: such messages are dropped.
 * fl_set_log installs one; FLARE_LOG=stderr (or config.log = fl_log_stderr) prints
 * them to stderr.
 *
 * Shutdown. The lazy backend compiles kernels on a thread of its own, with the
 * system's compiler as a child process. fl_shutdown stops that compiler, removes its
 * temporary files and joins the thread; a program may call it before exiting (if it
 * does not, the same happens as the library is unloaded at exit). A backend or an
 * extension that runs work of its own in the background registers how to stop it
 * with fl_at_shutdown, as the lazy backend does.
 */
#ifndef FLARE_CONFIG_H
#define FLARE_CONFIG_H

#include <stddef.h>

#include "flare/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fl_log_level {
    FL_LOG_ERROR,   /* a misuse Flare ignored (a block freed to the wrong manager) */
    FL_LOG_WARNING, /* something did not work as asked and Flare carries on without it */
} fl_log_level;

/* Receives one message, without a trailing newline. It may be called from any thread,
 * concurrently, and must not call fl_set_log. */
typedef void (*fl_log_fn)(fl_log_level level, const char *message, void *user);

/* Every field's zero is its default, so `{.size = sizeof config}` is the defaults. A
 * string is copied by fl_init. Each field is named after its environment variable. */
typedef struct fl_config {
    size_t size;                /* sizeof(fl_config): lets later versions append fields */
    const char *backend;        /* FLARE_BACKEND: the default backend's name; NULL: "cpu" */
    const char *memory;         /* FLARE_MEMORY: "caching" (NULL) or "plain" */
    int num_threads;            /* FLARE_NUM_THREADS: 0: one per online processor */
    const char *conv_algorithm; /* FLARE_CONV_ALGORITHM: "winograd" (NULL) or "direct" */
    const char *lazy_compile;   /* FLARE_LAZY_COMPILE: "async" (NULL), "sync" or "off" */
    const char *kernel_cache;   /* FLARE_KERNEL_CACHE: NULL: $XDG_CACHE_HOME/flare/kernels, ... */
    const char *compiler;       /* FLARE_CC: NULL: the compiler that built Flare */
    const char *distributed;    /* FLARE_DISTRIBUTED: NULL: "mpi" under mpirun, else "single" */
    double dist_timeout;        /* FLARE_DIST_TIMEOUT: seconds; 0: 300; negative: wait forever */
    bool profile;               /* FLARE_PROFILE: profile every operation, and print it at exit */
    fl_log_fn log;              /* FLARE_LOG=stderr: fl_log_stderr; NULL: no log */
    void *log_user;             /* passed to log */
    /* FLARE_CPU_KERNELS: the cpu kernels' instruction set, "best" (NULL: the best the
     * machine runs), or a lower "x86-64-v3" or "x86-64" (docs/ARCHITECTURE.md) */
    const char *cpu_kernels;
    /* FLARE_CHECK_HANDLES: 1 poisons released tensors and variables so that a later use
     * fails with FL_ERR_RELEASED (extension.h, "checked handles"); -1 off; 0 the build's
     * default: on in Debug and sanitizer builds, off otherwise. Resolved to 1 or -1. */
    int check_handles;
    /* FLARE_OPENCL_DEVICE: the opencl backend's device, by its index in the list of
     * every platform's devices (clinfo -l order); in the field the index plus one, 0
     * (unset) choosing the first GPU, else the first device */
    int opencl_device;
} fl_config;

/* Sets the configuration (NULL: the environment's). It must come before anything else
 * of Flare reads a setting: afterwards it fails with FL_ERR_VALUE and changes nothing. */
fl_status fl_init(const fl_config *config);

/* The settings in effect, read from the environment on the first call unless fl_init
 * came first; for backends and extensions, which read settings only through it. Every
 * field is resolved: memory, conv_algorithm and lazy_compile are one of their names,
 * kernel_cache the directory to use, distributed the engine's name; backend and
 * compiler may be NULL (the built-in choice). */
const fl_config *fl_config_current(void);

/* Runs every stop registered with fl_at_shutdown, most recent first: the lazy
 * backend's compiler is stopped and its thread joined. Idempotent; Flare stays usable,
 * and what a later operation starts again is stopped by the next fl_shutdown. */
void fl_shutdown(void);
/* Registers stop(user) with fl_shutdown; registering the same pair again does
 * nothing. Thread-safe; FL_ERR_MEMORY past 16 registrations. */
fl_status fl_at_shutdown(void (*stop)(void *user), void *user);

/* Installs the log callback (NULL: none), replacing the configuration's. A message
 * being logged as it changes may still reach the previous one. */
void fl_set_log(fl_log_fn fn, void *user);
/* A log callback that prints "flare: <message>" to stderr. */
void fl_log_stderr(fl_log_level level, const char *message, void *user);
/* Formats a message for the log callback, if there is one: how backends and
 * extensions warn without writing to stderr. */
void fl_log_message(fl_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif

#endif
