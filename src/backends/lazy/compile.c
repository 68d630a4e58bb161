/*
 * Compiled kernels: a fused program's operations as one C loop, compiled at run time
 * by the system's C compiler and cached by the hash of its source.
 *
 * The interpreter (fuse.c) runs a tile's operations one after another, each a loop
 * over the tile that stores its result: a chain of k operations makes k passes over
 * L1 or L2, and the memory streams of its leaves and outputs are touched in bursts
 * between them, which the hardware prefetchers follow badly. A compiled kernel keeps
 * every intermediate value in a register and streams each leaf and output once, in
 * one vectorized loop. The interpreter still prepares each tile (broadcast leaves
 * gathered, casts converted) and hands the kernel dense arrays.
 *
 * A kernel is the loop body only; its source inlines the cpu backend's vecmath.h and
 * gelu.h, built into the library as text, so that it computes every operation with
 * the same formulas as the interpreter and the cpu kernels. It is compiled with
 * -ffp-contract=off, so that each operation rounds on its own as it does there.
 *
 * Where kernels live: $FLARE_KERNEL_CACHE, else $XDG_CACHE_HOME/flare/kernels, else
 * ~/.cache/flare/kernels, one <hash>.so per kernel, written under a temporary name
 * and renamed, so that a process never loads a partly written one, with its source
 * beside it as <hash>.c. A later process loads them instead of compiling again.
 *
 * When: FLARE_LAZY_COMPILE=async (the default) compiles on a background thread, and
 * the interpreter runs the program until its kernel is ready; =sync compiles before
 * the pass that first needs it; =off never compiles. A program is compiled only when
 * a pass covers at least LAZY_COMPILE_MIN elements (small passes are dominated by
 * their setup). A failed compilation is reported once, with the compiler's log, and
 * its program stays interpreted.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "flare/profile.h"

#include "lazy.h"

extern char **environ;

/* Built into the library by CMakeLists.txt. */
extern const char lazy_kernel_headers[], lazy_kernel_compiler[], lazy_kernel_flags[];

#define SOURCE_MAX 16384
#define TABLE_SIZE 1024 /* kernels per process; past it, programs stay interpreted */

typedef enum { KERNEL_COMPILING, KERNEL_READY, KERNEL_FAILED } kernel_state;

typedef struct kernel_entry {
    uint64_t hash;
    char *body; /* the generated function, to tell colliding hashes apart */
    kernel_state state;
    lazy_kernel fn;
    struct kernel_entry *next_queued;
} kernel_entry;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t queued = PTHREAD_COND_INITIALIZER;
static kernel_entry table[TABLE_SIZE];
static int entries;
static kernel_entry *queue_head, *queue_tail;
static bool worker_started, failure_reported;
static int mode = -1; /* LAZY_COMPILE_*, or -1 until FLARE_LAZY_COMPILE is read */
static uint64_t compiled, loaded;
/* The compiler now running and the kernel it compiles, whose temporaries exiting
 * removes: a compilation the process did not wait for leaves nothing behind. */
static pid_t child;
static uint64_t child_hash;

/* ---- settings ---- */

static int mode_now(void)
{
    int m = __atomic_load_n(&mode, __ATOMIC_RELAXED);
    if (m >= 0)
        return m;
    const char *v = getenv("FLARE_LAZY_COMPILE");
    m = !v || !*v || strcmp(v, "async") == 0 ? LAZY_COMPILE_ASYNC
        : strcmp(v, "sync") == 0            ? LAZY_COMPILE_SYNC
        : strcmp(v, "off") == 0             ? LAZY_COMPILE_OFF
                                            : -1;
    if (m < 0) {
        fprintf(stderr, "flare: FLARE_LAZY_COMPILE='%s' is none of async, sync, off; using async\n", v);
        m = LAZY_COMPILE_ASYNC;
    }
    __atomic_store_n(&mode, m, __ATOMIC_RELAXED);
    return m;
}

void lazy_compile_set_mode(int m) { __atomic_store_n(&mode, m, __ATOMIC_RELAXED); }

lazy_compile_stats lazy_compile_stats_get(void)
{
    pthread_mutex_lock(&lock);
    lazy_compile_stats s = {.compiled = compiled, .loaded = loaded};
    for (int i = 0; i < entries; i++)
        s.failed += table[i].state == KERNEL_FAILED;
    pthread_mutex_unlock(&lock);
    return s;
}

static uint64_t fnv1a(uint64_t h, const char *s)
{
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* What every kernel of this process shares, found once: the cache directory (created
 * if missing; "" if there is none to be had), and the hash of the text every kernel's
 * hash starts from: the processor's identity and feature flags (kernels are built for
 * the machine, -march=native, and a cache shared between machines must not hand one
 * the other's instructions), the built-in headers and the compiler's flags. */
static char dir[4096];
static uint64_t shared_hash;

static void find_cache_dir(void)
{
    const char *v = getenv("FLARE_KERNEL_CACHE"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n = v && *v         ? snprintf(dir, sizeof dir, "%s", v)
            : xdg && *xdg   ? snprintf(dir, sizeof dir, "%s/flare/kernels", xdg)
            : home && *home ? snprintf(dir, sizeof dir, "%s/.cache/flare/kernels", home)
                            : snprintf(dir, sizeof dir, "/tmp/flare-kernels-%d", (int)getuid());
    if (n <= 0 || n >= (int)sizeof dir - 64) {
        dir[0] = 0;
        return;
    }
    for (char *p = dir + 1; *p; p++) /* mkdir -p */
        if (*p == '/') {
            *p = 0;
            mkdir(dir, 0755);
            *p = '/';
        }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        dir[0] = 0;
        return;
    }
    /* Temporaries are named <hash>.<pid>.c and .so: those of a process that is gone
     * (killed while compiling) are removed. */
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        char *dot = strchr(e->d_name, '.');
        long pid = dot ? strtol(dot + 1, &dot, 10) : 0;
        if (pid > 0 && *dot == '.' && kill((pid_t)pid, 0) != 0 && errno == ESRCH)
            unlinkat(dirfd(d), e->d_name, 0);
    }
    if (d)
        closedir(d);
}

static void hash_shared_text(void)
{
    uint64_t h = 0xcbf29ce484222325ull;
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[8192];
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0 || strncmp(line, "flags", 5) == 0)
            h = fnv1a(h, line);
        if (strncmp(line, "flags", 5) == 0)
            break;
    }
    if (f)
        fclose(f);
    shared_hash = fnv1a(fnv1a(h, lazy_kernel_headers), lazy_kernel_flags);
}

static void set_up(void)
{
    find_cache_dir();
    hash_shared_text();
}

static const char *cache_dir(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, set_up);
    return dir;
}

/* A file in the cache: the directory, a 16-digit hash and a short suffix. */
#define PATH_SIZE (sizeof dir + 128)

/* ---- source ---- */


/* The expression of an operation, as lazy.h lists it; NULL for those left to the
 * interpreter. */
static const char *expression(int op)
{
#define TEXT(op, expr) case op: return #expr;
    switch (op) {
    LAZY_UNARY_EXPRESSIONS(TEXT)
    LAZY_BINARY_EXPRESSIONS(TEXT)
    default: return NULL;
    }
#undef TEXT
}

#define APPEND(...)                                                                  \
    do {                                                                             \
        int n_ = snprintf(out + used, SOURCE_MAX - (size_t)used, __VA_ARGS__);       \
        if (n_ < 0 || (used += n_) >= SOURCE_MAX)                                     \
            return false;                                                            \
    } while (0)

/* Writes the kernel's function into out; false if the program has an operation
 * without a compiled form, or the source would not fit. */
static bool generate(const lazy_kernel_slot *slots, int count, char *out)
{
    int used = 0;
    APPEND("void flare_kernel(long n, const float *const *in, float *const *out)\n{\n");
    for (int i = 0; i < count; i++) {
        const lazy_kernel_slot *s = &slots[i];
        if (s->input && s->scalar)
            APPEND("    const float c%d = in[%d][0];\n", i, i);
        else if (s->input)
            APPEND("    const float *restrict in%d = in[%d];\n", i, i);
        if (s->output)
            APPEND("    float *restrict out%d = out[%d];\n", i, i);
    }
    APPEND("#pragma omp simd\n    for (long k = 0; k < n; k++) {\n");
    for (int i = 0; i < count; i++) {
        const lazy_kernel_slot *s = &slots[i];
        if (s->input && s->scalar) {
            APPEND("        const float s%d = c%d;\n", i, i);
        } else if (s->input) {
            APPEND("        const float s%d = in%d[k];\n", i, i);
        } else if (s->op == LAZY_RESHAPE) {
            APPEND("        const float s%d = s%d;\n", i, s->arg[0]);
        } else {
            const char *e = expression(s->op);
            if (!e)
                return false;
            int b = s->arg[1] >= 0 ? s->arg[1] : s->arg[0];
            APPEND("        const float s%d = ({ const float x = s%d, z = s%d; (void)z; %s; });\n", i, s->arg[0], b, e);
        }
        if (s->output)
            APPEND("        out%d[k] = s%d;\n", i, i);
    }
    APPEND("    }\n}\n");
    return true;
}

/* ---- compiling and loading ---- */

static void path_of(char *path, size_t size, uint64_t hash, const char *suffix)
{
    snprintf(path, size, "%s/%016llx%s", cache_dir(), (unsigned long long)hash, suffix);
}

static lazy_kernel load(const char *path)
{
    void *library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    return library ? (lazy_kernel)dlsym(library, "flare_kernel") : NULL;
}

/* Compiles the kernel's source into <hash>.so in the cache; returns the loaded
 * function, or NULL with the compiler's output left in <hash>.log. */
static lazy_kernel compile(uint64_t hash, const char *body)
{
    char source[PATH_SIZE], library[PATH_SIZE], temporary[PATH_SIZE], log[PATH_SIZE];
    char suffix[64];
    snprintf(suffix, sizeof suffix, ".%d.c", (int)getpid());
    path_of(source, sizeof source, hash, suffix);
    snprintf(suffix, sizeof suffix, ".%d.so", (int)getpid());
    path_of(temporary, sizeof temporary, hash, suffix);
    path_of(library, sizeof library, hash, ".so");
    path_of(log, sizeof log, hash, ".log");
    FILE *f = fopen(source, "w");
    if (!f)
        return NULL;
    bool written = fputs(lazy_kernel_headers, f) >= 0 && fputs(body, f) >= 0;
    if (fclose(f) != 0 || !written) {
        unlink(source);
        return NULL;
    }
    /* argv: the compiler, its flags one by one, -o temporary, source */
    char flags[512], compiler[PATH_SIZE], *argv[48];
    snprintf(flags, sizeof flags, "%s", lazy_kernel_flags);
    const char *cc = getenv("FLARE_CC");
    if (snprintf(compiler, sizeof compiler, "%s", cc && *cc ? cc : lazy_kernel_compiler) >= (int)sizeof compiler) {
        unlink(source);
        return NULL;
    }
    int argc = 0;
    argv[argc++] = compiler;
    for (char *save, *t = strtok_r(flags, " ", &save); t && argc < 40; t = strtok_r(NULL, " ", &save))
        argv[argc++] = t;
    argv[argc++] = "-o";
    argv[argc++] = temporary;
    argv[argc++] = source;
    argv[argc] = NULL;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    posix_spawnattr_t attributes; /* its own process group: exiting kills the compiler's children too */
    posix_spawnattr_init(&attributes);
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attributes, 0);
    pid_t pid;
    int status = -1;
    pthread_mutex_lock(&lock);
    bool spawned = posix_spawnp(&pid, argv[0], &actions, &attributes, argv, environ) == 0;
    if (spawned) {
        child = pid;
        child_hash = hash;
    }
    pthread_mutex_unlock(&lock);
    if (spawned)
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
    pthread_mutex_lock(&lock);
    child = 0;
    pthread_mutex_unlock(&lock);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
    if (status != 0 || rename(temporary, library) != 0) {
        unlink(source);
        unlink(temporary);
        return NULL;
    }
    unlink(log);
    char kept[PATH_SIZE]; /* the source stays beside its library, for whoever wants to read it */
    path_of(kept, sizeof kept, hash, ".c");
    if (rename(source, kept) != 0)
        unlink(source);
    return load(library);
}

static void report_failure(uint64_t hash)
{
    char log[PATH_SIZE];
    path_of(log, sizeof log, hash, ".log");
    fprintf(stderr,
            "flare: the lazy backend could not compile a fused kernel with '%s' (its output: %s); such passes "
            "stay interpreted. FLARE_LAZY_COMPILE=off stops trying.\n",
            getenv("FLARE_CC") ? getenv("FLARE_CC") : lazy_kernel_compiler, log);
}

/* Compiles e (not under the lock) and publishes the result. */
static void build(kernel_entry *e)
{
    fl_profile_push("lazy kernel compile");
    lazy_kernel fn = compile(e->hash, e->body);
    fl_profile_pop();
    pthread_mutex_lock(&lock);
    e->fn = fn;
    __atomic_store_n(&e->state, fn ? KERNEL_READY : KERNEL_FAILED, __ATOMIC_RELEASE);
    compiled += fn != NULL;
    bool report = !fn && !failure_reported;
    failure_reported |= report;
    pthread_mutex_unlock(&lock);
    if (report)
        report_failure(e->hash);
}

static void *worker(void *unused)
{
    (void)unused;
    for (;;) {
        pthread_mutex_lock(&lock);
        while (!queue_head)
            pthread_cond_wait(&queued, &lock);
        kernel_entry *e = queue_head;
        queue_head = e->next_queued;
        if (!queue_head)
            queue_tail = NULL;
        pthread_mutex_unlock(&lock);
        build(e);
    }
    return NULL;
}

static void stop_compiling(void)
{
    pthread_mutex_lock(&lock);
    if (child > 0) {
        kill(-child, SIGKILL);
        waitpid(child, NULL, 0);
        char suffixes[3][32], path[PATH_SIZE];
        snprintf(suffixes[0], sizeof suffixes[0], ".%d.c", (int)getpid());
        snprintf(suffixes[1], sizeof suffixes[1], ".%d.so", (int)getpid());
        snprintf(suffixes[2], sizeof suffixes[2], ".log");
        for (int i = 0; i < 3; i++) {
            path_of(path, sizeof path, child_hash, suffixes[i]);
            unlink(path);
        }
        child = 0;
    }
    pthread_mutex_unlock(&lock);
}

/* Under the lock: puts e on the worker's queue, starting the worker if needed. */
static void enqueue(kernel_entry *e)
{
    if (!worker_started) {
        atexit(stop_compiling);
        pthread_t thread;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        worker_started = pthread_create(&thread, &attr, worker, NULL) == 0;
        pthread_attr_destroy(&attr);
        if (!worker_started) {
            e->state = KERNEL_FAILED;
            return;
        }
    }
    e->next_queued = NULL;
    *(queue_tail ? &queue_tail->next_queued : &queue_head) = e;
    queue_tail = e;
    pthread_cond_signal(&queued);
}

lazy_kernel lazy_kernel_for(const lazy_kernel_slot *slots, int count)
{
    int m = mode_now();
    if (m == LAZY_COMPILE_OFF)
        return NULL;
    char body[SOURCE_MAX];
    if (!generate(slots, count, body))
        return NULL;
    if (!cache_dir()[0])
        return NULL;
    uint64_t hash = fnv1a(shared_hash, body);
    pthread_mutex_lock(&lock);
    kernel_entry *e = NULL;
    for (int i = 0; i < entries && !e; i++)
        if (table[i].hash == hash && strcmp(table[i].body, body) == 0)
            e = &table[i];
    if (!e) {
        if (entries == TABLE_SIZE || !(table[entries].body = strdup(body))) {
            pthread_mutex_unlock(&lock);
            return NULL;
        }
        e = &table[entries++];
        e->hash = hash;
        char library[PATH_SIZE];
        path_of(library, sizeof library, hash, ".so");
        if ((e->fn = access(library, R_OK) == 0 ? load(library) : NULL)) {
            e->state = KERNEL_READY;
            loaded++;
        } else if (m == LAZY_COMPILE_ASYNC) {
            e->state = KERNEL_COMPILING;
            enqueue(e);
        } else {
            e->state = KERNEL_COMPILING;
            pthread_mutex_unlock(&lock);
            build(e);
            pthread_mutex_lock(&lock);
        }
    }
    lazy_kernel fn = e->state == KERNEL_READY ? e->fn : NULL;
    pthread_mutex_unlock(&lock);
    return fn;
}
