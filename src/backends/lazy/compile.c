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
 * Where kernels live: the kernel_cache setting (FLARE_KERNEL_CACHE, docs/CONFIG.md),
 * a directory private to the user: one created here is 0700, and one owned by
 * someone else or writable by group or others is refused (kernels then stay
 * interpreted), since whoever can write there chooses code this process runs. Each
 * kernel is <hash>.so, with its source beside it as <hash>.c. The object ends with a
 * trailer recording the hash of its source and of its own bytes; a cached object is
 * loaded only if it is the user's, not writable by others, and its trailer matches
 * the kernel asked for and the bytes before it. A truncated, corrupted, foreign or
 * swapped object is compiled again. The hashes (FNV-1a) detect accidents, not an attacker: one who can write the
 * user's private directory could also rewrite the trailer.
 *
 * Each compilation writes its files under temporary names, <hash>.<pid>.c/.so/.log,
 * and renames them when done, so that no process loads a partly written object;
 * temporaries of a process that is gone (killed while compiling) are removed the next
 * time the cache is opened.
 *
 * When: the lazy_compile setting, async (the default), compiles on a background
 * thread, and the interpreter runs the program until its kernel is ready; sync
 * compiles before the pass that first needs it; off never compiles. A program is
 * compiled only when a pass covers at least LAZY_COMPILE_MIN elements (small passes
 * are dominated by their setup). A failed compilation is logged once, with the
 * compiler's output, and its program stays interpreted.
 *
 * Shutdown (fl_shutdown, and at exit or unload): running compilers are stopped, each
 * compiling thread removes its own temporaries, and the background thread is joined.
 * A compilation stopped this way is not a failure: its program is compiled again if a
 * later pass asks for it.
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
#include <time.h>
#include <unistd.h>

#include "flare/profile.h"

#include "flare/config.h"
#include "lazy.h"

extern char **environ;

/* Built into the library by CMakeLists.txt. */
extern const char lazy_kernel_headers[], lazy_kernel_compiler[], lazy_kernel_flags[];
extern const char *const lazy_kernel_levels[][2];

/* The instruction-set flags of the level the cpu kernels run at (cpu_kernels): the
 * kernels are compiled for it, so that they round as the interpreter (apply.c) of
 * that level does, fused multiply-add or not. */
static const char *level_flags(void)
{
    for (int i = 0; lazy_kernel_levels[i][0]; i++)
        if (strcmp(lazy_kernel_levels[i][0], cpu_kernels()) == 0)
            return lazy_kernel_levels[i][1];
    return "";
}

#define SOURCE_MAX 16384
#define TABLE_SIZE 1024 /* kernels per process; past it, programs stay interpreted */

typedef enum {
    KERNEL_IDLE,      /* to be compiled when next asked for (a compilation was stopped) */
    KERNEL_COMPILING, /* queued or being compiled */
    KERNEL_READY,
    KERNEL_FAILED,
} kernel_state;

typedef struct kernel_entry {
    uint64_t hash;
    char *body; /* the generated function, to tell colliding hashes apart */
    kernel_state state;
    lazy_kernel fn;
    struct kernel_entry *next_queued;
} kernel_entry;

/* A compiler now running, on the list that shutdown stops. */
typedef struct compiler {
    pid_t pid;
    struct compiler *next;
} compiler;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t queued = PTHREAD_COND_INITIALIZER; /* work for the worker, or stopping */
static pthread_cond_t settled = PTHREAD_COND_INITIALIZER; /* a compilation ended */
static kernel_entry table[TABLE_SIZE];
static int entries;
static kernel_entry *queue_head, *queue_tail;
static pthread_t worker_thread;
static bool worker_running, failure_reported;
static pid_t owner; /* the process whose worker and compilers these are (not a fork's child) */
static bool stopping;  /* shutdown under way: nothing new is spawned */
static int compiling;  /* compilations between their start and their cleanup */
static compiler *running;
static int mode = -1; /* LAZY_COMPILE_*, or -1 until the setting is read */
static const char *compiler_override;
static uint64_t compiled, loaded;

/* ---- settings ---- */

static int mode_now(void)
{
    int m = __atomic_load_n(&mode, __ATOMIC_RELAXED);
    if (m >= 0)
        return m;
    const char *v = fl_config_current()->lazy_compile;
    m = strcmp(v, "sync") == 0 ? LAZY_COMPILE_SYNC : strcmp(v, "off") == 0 ? LAZY_COMPILE_OFF : LAZY_COMPILE_ASYNC;
    __atomic_store_n(&mode, m, __ATOMIC_RELAXED);
    return m;
}

void lazy_compile_set_mode(int m) { __atomic_store_n(&mode, m, __ATOMIC_RELAXED); }

void lazy_compile_set_compiler(const char *cc)
{
    pthread_mutex_lock(&lock);
    compiler_override = cc;
    pthread_mutex_unlock(&lock);
}

/* Under the lock. */
static const char *compiler_now(void)
{
    const char *cc = compiler_override ? compiler_override : fl_config_current()->compiler;
    return cc ? cc : lazy_kernel_compiler;
}

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

static uint64_t fnv1a_bytes(const unsigned char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* What every kernel of this process shares, found once: the cache directory (created
 * if missing; "" if there is none to be had), and the hash of the text every kernel's
 * hash starts from: the processor's identity and feature flags (kernels are built for
 * the machine, -march=native, and a cache shared between machines must not hand one
 * the other's instructions), the built-in headers and the compiler's flags. */
static char dir[4096];
static uint64_t shared_hash;

/* Why dir cannot hold kernels, or NULL if it can. */
static const char *refusal(const struct stat *st, char *why, size_t size)
{
    if (!S_ISDIR(st->st_mode))
        return "it is not a directory";
    if (st->st_uid != geteuid()) {
        snprintf(why, size, "it is owned by user %d, not by this process's user %d", (int)st->st_uid, (int)geteuid());
        return why;
    }
    if (st->st_mode & (S_IWGRP | S_IWOTH)) {
        snprintf(why, size, "it is writable by %s (mode %03o)", st->st_mode & S_IWOTH ? "others" : "its group",
                 (unsigned)(st->st_mode & 0777));
        return why;
    }
    return NULL;
}

static void find_cache_dir(void)
{
    snprintf(dir, sizeof dir, "%s", fl_config_current()->kernel_cache);
    for (char *p = dir + 1; *p; p++) /* mkdir -p */
        if (*p == '/') {
            *p = 0;
            mkdir(dir, 0700);
            *p = '/';
        }
    struct stat st;
    char why[128];
    const char *reason = mkdir(dir, 0700) != 0 && errno != EEXIST ? strerror(errno)
                         : stat(dir, &st) != 0                  ? strerror(errno)
                                                                : refusal(&st, why, sizeof why);
    if (reason) {
        fl_log_message(FL_LOG_WARNING, "the lazy backend does not use the kernel cache %s: %s; its passes stay interpreted",
                dir, reason);
        dir[0] = 0;
        return;
    }
    /* Temporaries are named <hash>.<pid>.c, .so and .log: those of a process that is
     * gone (killed while compiling) are removed. */
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
    shared_hash = fnv1a(fnv1a(fnv1a(h, lazy_kernel_headers), lazy_kernel_flags), level_flags());
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

/* What a kernel's object ends with. */
typedef struct trailer {
    char magic[16];
    uint64_t source_hash, object_hash, object_size;
} trailer;

static const char trailer_magic[16] = "flare kernel 1\n";

#define OBJECT_MAX (64 << 20)

/* Reads the file open as fd (at most OBJECT_MAX bytes) into a new buffer. */
static unsigned char *read_all(int fd, size_t size)
{
    unsigned char *bytes = malloc(size ? size : 1);
    size_t got = 0;
    for (ssize_t n; bytes && got < size; got += (size_t)n)
        if ((n = pread(fd, bytes + got, size - got, (off_t)got)) <= 0) {
            free(bytes);
            return NULL;
        }
    return bytes;
}

/* Appends the trailer to the object just compiled; false on a failed write. */
static bool seal(const char *path, uint64_t hash)
{
    int fd = open(path, O_RDWR | O_CLOEXEC);
    struct stat st;
    bool sealed = false;
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size > 0 && st.st_size <= OBJECT_MAX) {
        unsigned char *bytes = read_all(fd, (size_t)st.st_size);
        if (bytes) {
            trailer t = {.source_hash = hash, .object_hash = fnv1a_bytes(bytes, (size_t)st.st_size),
                         .object_size = (uint64_t)st.st_size};
            memcpy(t.magic, trailer_magic, sizeof t.magic);
            sealed = pwrite(fd, &t, sizeof t, st.st_size) == (ssize_t)sizeof t;
            free(bytes);
        }
    }
    if (fd >= 0 && close(fd) != 0)
        sealed = false;
    return sealed;
}

/* The kernel in the cache as <hash>.so, if it is there and verified (see the top of
 * the file), else NULL. dlopen opens it again by name (a /proc/self/fd name would be
 * taken by glibc for an earlier kernel's read through the same descriptor number),
 * so the file loaded is checked to be the one verified. */
static lazy_kernel load_once(uint64_t hash, bool *replaced)
{
    char path[PATH_SIZE];
    path_of(path, sizeof path, hash, ".so");
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return NULL;
    struct stat st;
    const char *reason = NULL;
    unsigned char *bytes = NULL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        reason = "it is not a regular file";
    else if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)))
        reason = "it is someone else's, or writable by others";
    else if (st.st_size < (off_t)sizeof(trailer) || st.st_size > OBJECT_MAX ||
             !(bytes = read_all(fd, (size_t)st.st_size)))
        reason = "it could not be read";
    trailer t;
    if (bytes) {
        size_t size = (size_t)st.st_size - sizeof t;
        memcpy(&t, bytes + size, sizeof t);
        if (memcmp(t.magic, trailer_magic, sizeof t.magic) != 0)
            reason = ""; /* from an older Flare: compiled again, quietly */
        else if (t.source_hash != hash)
            reason = "it was compiled from another source";
        else if (t.object_size != size || t.object_hash != fnv1a_bytes(bytes, size))
            reason = "its bytes do not match the hash recorded when it was compiled";
        free(bytes);
    }
    void *library = NULL;
    struct stat now;
    if (!reason && !(library = dlopen(path, RTLD_NOW | RTLD_LOCAL)))
        fl_log_message(FL_LOG_WARNING, "the lazy backend could not load the kernel %s: %s", path, dlerror());
    else if (library && (stat(path, &now) != 0 || now.st_ino != st.st_ino || now.st_dev != st.st_dev)) {
        dlclose(library); /* replaced since it was verified (another process compiled it too) */
        library = NULL;
        *replaced = true;
    }
    close(fd);
    if (reason && *reason)
        fl_log_message(FL_LOG_WARNING, "the lazy backend does not load the cached kernel %s: %s; compiling it again", path,
                reason);
    return library ? (lazy_kernel)dlsym(library, "flare_kernel") : NULL;
}

static lazy_kernel load(uint64_t hash)
{
    lazy_kernel fn = NULL;
    bool replaced = true;
    for (int tries = 0; !fn && replaced && tries < 3; tries++) {
        replaced = false;
        fn = load_once(hash, &replaced);
    }
    return fn;
}

/* Under the lock: forgets a worker and compilers inherited through fork, which
 * belong to the parent. */
static void adopt_after_fork(void)
{
    if (owner == getpid())
        return;
    owner = getpid();
    worker_running = false;
    running = NULL;
    compiling = 0;
    for (kernel_entry *e = queue_head; e; e = e->next_queued)
        e->state = KERNEL_IDLE;
    queue_head = queue_tail = NULL;
}

typedef enum { COMPILE_DONE, COMPILE_FAILED, COMPILE_STOPPED } compile_result;

/* The first bytes of the compiler's output, for the log. */
static void read_head(const char *path, char *out, size_t size)
{
    out[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    size_t n = fread(out, 1, size - 1, f);
    out[n] = 0;
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == ' '))
        out[--n] = 0;
    fclose(f);
}

/* Compiles the kernel's source into <hash>.so in the cache. Its temporaries are gone
 * when this returns, whatever the result; a failed compiler's output is kept as
 * <hash>.log. */
static compile_result compile(uint64_t hash, const char *body)
{
    char source[PATH_SIZE], temporary[PATH_SIZE], output[PATH_SIZE], library[PATH_SIZE];
    char suffix[64];
    int pid_now = (int)getpid();
    snprintf(suffix, sizeof suffix, ".%d.c", pid_now);
    path_of(source, sizeof source, hash, suffix);
    snprintf(suffix, sizeof suffix, ".%d.so", pid_now);
    path_of(temporary, sizeof temporary, hash, suffix);
    snprintf(suffix, sizeof suffix, ".%d.log", pid_now);
    path_of(output, sizeof output, hash, suffix);
    path_of(library, sizeof library, hash, ".so");
    FILE *f = fopen(source, "w");
    if (!f)
        return COMPILE_FAILED;
    bool written = fputs(lazy_kernel_headers, f) >= 0 && fputs("#define LAZY_T float\n", f) >= 0 &&
                   fputs(body, f) >= 0;
    if (fclose(f) != 0 || !written) {
        unlink(source);
        return COMPILE_FAILED;
    }
    /* argv: the compiler, its flags one by one, -o temporary, source */
    char flags[512], cc[1024], *argv[48];
    snprintf(flags, sizeof flags, "%s %s", lazy_kernel_flags, level_flags());
    int argc = 0;
    argv[argc++] = cc;
    for (char *save, *t = strtok_r(flags, " ", &save); t && argc < 40; t = strtok_r(NULL, " ", &save))
        argv[argc++] = t;
    argv[argc++] = "-o";
    argv[argc++] = temporary;
    argv[argc++] = source;
    argv[argc] = NULL;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, output, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    posix_spawnattr_t attributes; /* its own process group: stopping it stops the compiler's children too */
    posix_spawnattr_init(&attributes);
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attributes, 0);
    compiler me = {0};
    int status = -1, spawn_error = 0;
    pthread_mutex_lock(&lock);
    snprintf(cc, sizeof cc, "%s", compiler_now());
    if (!stopping)
        spawn_error = posix_spawnp(&me.pid, argv[0], &actions, &attributes, argv, environ);
    bool spawned = !stopping && spawn_error == 0;
    if (spawned) {
        me.next = running;
        running = &me;
    }
    pthread_mutex_unlock(&lock);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
    while (spawned && waitpid(me.pid, &status, 0) < 0 && errno == EINTR)
        ;
    pthread_mutex_lock(&lock);
    for (compiler **c = &running; *c; c = &(*c)->next)
        if (*c == &me) {
            *c = me.next;
            break;
        }
    bool stopped = stopping;
    pthread_mutex_unlock(&lock);
    compile_result result = COMPILE_DONE;
    char why[PATH_SIZE + 1664] = "";
    if (stopped && status != 0) {
        result = COMPILE_STOPPED;
    } else if (!spawned) {
        result = COMPILE_FAILED;
        snprintf(why, sizeof why, "it could not be started: %s", strerror(spawn_error));
    } else if (status != 0) {
        result = COMPILE_FAILED;
        char head[1536], log[PATH_SIZE];
        read_head(output, head, sizeof head);
        path_of(log, sizeof log, hash, ".log");
        rename(output, log);
        bool signaled = WIFSIGNALED(status);
        snprintf(why, sizeof why, "%s %d; its output, kept in %s:\n%s\n", signaled ? "signal" : "exit status",
                 signaled ? WTERMSIG(status) : WEXITSTATUS(status), log, head[0] ? head : "(none)");
    } else if (!seal(temporary, hash) || rename(temporary, library) != 0) {
        result = COMPILE_FAILED;
        snprintf(why, sizeof why, "its object could not be written to the cache: %s", strerror(errno));
    }
    if (result == COMPILE_FAILED) {
        pthread_mutex_lock(&lock);
        bool first = !failure_reported;
        failure_reported = true;
        pthread_mutex_unlock(&lock);
        if (first)
            fl_log_message(FL_LOG_WARNING,
                    "the lazy backend could not compile a fused kernel with '%s' (%s); such passes stay interpreted. "
                    "FLARE_LAZY_COMPILE=off stops trying.",
                    cc, why);
    }
    char kept[PATH_SIZE]; /* the source stays beside its library, for whoever wants to read it */
    path_of(kept, sizeof kept, hash, ".c");
    if (result != COMPILE_DONE || rename(source, kept) != 0)
        unlink(source);
    unlink(temporary);
    unlink(output);
    return result;
}

/* Compiles e (not under the lock, counted in compiling by the caller) and publishes
 * the result. */
static void build(kernel_entry *e)
{
    fl_profile_push("lazy kernel compile");
    compile_result result = compile(e->hash, e->body);
    lazy_kernel fn = result == COMPILE_DONE ? load(e->hash) : NULL;
    fl_profile_pop();
    pthread_mutex_lock(&lock);
    e->fn = fn;
    kernel_state state = fn ? KERNEL_READY : result == COMPILE_STOPPED ? KERNEL_IDLE : KERNEL_FAILED;
    __atomic_store_n(&e->state, state, __ATOMIC_RELEASE);
    compiled += fn != NULL;
    compiling--;
    pthread_cond_broadcast(&settled);
    pthread_mutex_unlock(&lock);
}

static void *worker(void *unused)
{
    (void)unused;
    pthread_mutex_lock(&lock);
    for (;;) {
        while (!queue_head && !stopping)
            pthread_cond_wait(&queued, &lock);
        if (stopping)
            break;
        kernel_entry *e = queue_head;
        queue_head = e->next_queued;
        if (!queue_head)
            queue_tail = NULL;
        compiling++;
        pthread_mutex_unlock(&lock);
        build(e);
        pthread_mutex_lock(&lock);
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

/* Under the lock: signals every running compiler's process group. */
static void signal_compilers(int signal)
{
    for (compiler *c = running; c; c = c->next)
        kill(-c->pid, signal);
}

void lazy_compile_shutdown(void)
{
    pthread_mutex_lock(&lock);
    adopt_after_fork();
    stopping = true;
    pthread_cond_broadcast(&queued);
    /* SIGTERM lets the compiler driver remove its own temporaries (in /tmp); one that
     * has not ended within a second is killed. */
    signal_compilers(SIGTERM);
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 1;
    while (compiling && pthread_cond_timedwait(&settled, &lock, &deadline) == 0)
        ;
    signal_compilers(SIGKILL);
    while (compiling)
        pthread_cond_wait(&settled, &lock);
    for (kernel_entry *e = queue_head; e; e = e->next_queued)
        e->state = KERNEL_IDLE;
    queue_head = queue_tail = NULL;
    bool join = worker_running;
    worker_running = false;
    pthread_mutex_unlock(&lock);
    if (join)
        pthread_join(worker_thread, NULL);
    pthread_mutex_lock(&lock);
    stopping = false;
    pthread_mutex_unlock(&lock);
}

/* fl_shutdown's stop for the compiler (registered when the worker first starts). */
static void stop_compiling(void *unused)
{
    (void)unused;
    lazy_compile_shutdown();
}

/* A program that never calls fl_shutdown must not leave a compiler running and its
 * temporaries behind as it exits, nor a thread running in code being unmapped as the
 * library is unloaded: the same shutdown then. It returns at once if no compilation
 * was started. */
__attribute__((destructor)) static void shutdown_at_exit(void) { lazy_compile_shutdown(); }

/* Under the lock: puts e on the worker's queue, starting the worker if needed. */
static void enqueue(kernel_entry *e)
{
    adopt_after_fork();
    if (!worker_running) {
        fl_at_shutdown(stop_compiling, NULL);
        worker_running = pthread_create(&worker_thread, NULL, worker, NULL) == 0;
        if (!worker_running) {
            e->state = KERNEL_FAILED;
            return;
        }
    }
    e->state = KERNEL_COMPILING;
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
        e->state = KERNEL_COMPILING; /* others interpret it while it is looked for */
        pthread_mutex_unlock(&lock);
        lazy_kernel fn = load(hash); /* not under the lock: it may log */
        pthread_mutex_lock(&lock);
        e->fn = fn;
        e->state = fn ? KERNEL_READY : KERNEL_IDLE;
        loaded += fn != NULL;
    }
    if (e->state == KERNEL_IDLE && !stopping) {
        if (m == LAZY_COMPILE_ASYNC) {
            enqueue(e);
        } else {
            e->state = KERNEL_COMPILING;
            compiling++;
            pthread_mutex_unlock(&lock);
            build(e);
            pthread_mutex_lock(&lock);
        }
    }
    lazy_kernel fn = e->state == KERNEL_READY ? e->fn : NULL;
    pthread_mutex_unlock(&lock);
    return fn;
}
