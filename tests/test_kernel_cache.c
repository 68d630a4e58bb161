/* The lazy backend's kernel cache and compiler, seen from outside a process: a
 * process that exits (or calls fl_shutdown) while a kernel compiles reports no
 * failure and leaves no temporaries; the cache directory is private and a shared one
 * is refused; a tampered object is compiled again, not loaded. Each case runs its
 * own processes on a cache of its own (support_run_self). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/lazy/lazy.h"
#include "flare/config.h"
#include "support.h"

#define OUTPUT 16384
static char out[OUTPUT], err[OUTPUT];

/* ---- the child: one pass big enough to be compiled ---- */

static int child(const char *how)
{
    fl_scope scope = fl_scope_begin();
    fl_tensor *x = fl_keep(fl_to_backend(fl_randn(FL_F32, FL_SHAPE(300, 257)), "lazy"));
    fl_tensor *y = fl_keep(fl_tanh(fl_exp(fl_mul_scalar(fl_abs(x), 0.5))));
    fl_scope_end(scope);
    fl_status status = fl_eval(y);
    fl_release(y);
    fl_release(x);
    if (status != FL_OK) {
        printf("%s\n", fl_last_error());
        return 1;
    }
    if (strcmp(how, "shutdown") == 0)
        fl_shutdown();
    lazy_compile_stats s = lazy_compile_stats_get();
    printf("compiled=%llu loaded=%llu failed=%llu\n", (unsigned long long)s.compiled, (unsigned long long)s.loaded,
           (unsigned long long)s.failed);
    return 0; /* "exit": with the compilation, if any, still running */
}

/* ---- the parent ---- */

static char base[] = "/tmp/flare-kernel-cache-XXXXXX";

static int setup(void **state)
{
    return mkdtemp(base) ? 0 : -1;
}

static int teardown(void **state)
{
    char command[256];
    snprintf(command, sizeof command, "chmod -R u+w %s; rm -rf %s", base, base);
    return system(command) == 0 ? 0 : -1;
}

/* Runs the child on cache dir with FLARE_LAZY_COMPILE=mode; returns its status. */
static int run(const char *how, const char *dir, const char *mode)
{
    char cache[512], compile[64];
    snprintf(cache, sizeof cache, "FLARE_KERNEL_CACHE=%s", dir);
    snprintf(compile, sizeof compile, "FLARE_LAZY_COMPILE=%s", mode);
    return support_run_self(how, (const char *const[]){cache, compile, "FLARE_LOG=stderr", "FLARE_CC", NULL}, out, err,
                            OUTPUT);
}

/* Counts dir's files whose names end in suffix, and those named <hash>.<pid>.*. */
static int count(const char *dir, const char *suffix, int *temporaries)
{
    DIR *d = opendir(dir);
    int n = 0;
    *temporaries = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t length = strlen(e->d_name), s = strlen(suffix);
        n += length > s && strcmp(e->d_name + length - s, suffix) == 0;
        char *dot = strchr(e->d_name, '.');
        long pid = dot ? strtol(dot + 1, &dot, 10) : 0;
        *temporaries += pid > 0 && *dot == '.';
    }
    if (d)
        closedir(d);
    return n;
}

static void exiting_while_compiling_leaves_nothing_behind(void **state)
{
    const char *hows[] = {"exit", "shutdown"};
    for (int i = 0; i < 24; i++) {
        char dir[256];
        snprintf(dir, sizeof dir, "%s/exit-%d", base, i);
        assert_int_equal(run(hows[i % 2], dir, "async"), 0);
        if (strstr(err, "could not compile"))
            print_error("run %d: %s", i, err);
        assert_null(strstr(err, "could not compile"));
        assert_non_null(strstr(out, "failed=0"));
        int temporaries;
        count(dir, ".so", &temporaries);
        assert_int_equal(temporaries, 0);
    }
    /* and the kernel compiles when it is given the time */
    char dir[256];
    snprintf(dir, sizeof dir, "%s/exit-sync", base);
    assert_int_equal(run("exit", dir, "sync"), 0);
    assert_non_null(strstr(out, "compiled=1 loaded=0 failed=0"));
    assert_string_equal(err, "");
}

static void the_cache_is_private_to_the_user(void **state)
{
    char dir[256];
    snprintf(dir, sizeof dir, "%s/new/kernels", base);
    assert_int_equal(run("exit", dir, "sync"), 0);
    struct stat st;
    assert_int_equal(stat(dir, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    snprintf(dir, sizeof dir, "%s/new", base);
    assert_int_equal(stat(dir, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);

    /* a directory others may write to is refused: kernels stay interpreted */
    snprintf(dir, sizeof dir, "%s/shared", base);
    assert_int_equal(mkdir(dir, 0700), 0);
    assert_int_equal(chmod(dir, 0770), 0);
    assert_int_equal(run("exit", dir, "sync"), 0);
    assert_non_null(strstr(out, "compiled=0 loaded=0 failed=0"));
    assert_non_null(strstr(err, "does not use the kernel cache"));
    assert_non_null(strstr(err, "it is writable by its group (mode 770)"));
    int temporaries;
    assert_int_equal(count(dir, "", &temporaries), 2); /* . and .. */
    assert_int_equal(chmod(dir, 0703), 0);
    assert_int_equal(run("exit", dir, "sync"), 0);
    assert_non_null(strstr(err, "it is writable by others (mode 703)"));
    /* and one owned by someone else, where the test may hand one over */
    if (geteuid() == 0) {
        assert_int_equal(chmod(dir, 0700), 0);
        assert_int_equal(chown(dir, 65534, 65534), 0);
        assert_int_equal(run("exit", dir, "sync"), 0);
        assert_non_null(strstr(err, "it is owned by user 65534"));
        assert_non_null(strstr(out, "compiled=0 loaded=0 failed=0"));
    }
}

/* Flips one byte in the middle of the only kernel object in dir. */
static void tamper(const char *dir, long offset_from_end)
{
    DIR *d = opendir(dir);
    char path[512] = "";
    for (struct dirent *e; d && (e = readdir(d));)
        if (strstr(e->d_name, ".so"))
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    closedir(d);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long at = offset_from_end ? ftell(f) - offset_from_end : ftell(f) / 2;
    fseek(f, at, SEEK_SET);
    int c = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(c ^ 0x40, f);
    fclose(f);
}

static void a_tampered_object_is_compiled_again(void **state)
{
    char dir[256];
    snprintf(dir, sizeof dir, "%s/tamper", base);
    assert_int_equal(run("exit", dir, "sync"), 0);
    assert_non_null(strstr(out, "compiled=1 loaded=0 failed=0"));
    assert_int_equal(run("exit", dir, "sync"), 0);
    assert_non_null(strstr(out, "compiled=0 loaded=1 failed=0"));
    assert_string_equal(err, "");
    tamper(dir, 0);
    assert_int_equal(run("exit", dir, "sync"), 0);
    assert_non_null(strstr(out, "compiled=1 loaded=0 failed=0"));
    assert_non_null(strstr(err, "does not load the cached kernel"));
    assert_non_null(strstr(err, "its bytes do not match the hash recorded when it was compiled"));
    assert_int_equal(run("exit", dir, "sync"), 0);
    assert_non_null(strstr(out, "compiled=0 loaded=1 failed=0")); /* the new one is good */
    tamper(dir, 20); /* the trailer's record of the source */
    assert_int_equal(run("exit", dir, "sync"), 0);
    assert_non_null(strstr(out, "compiled=1 loaded=0 failed=0"));
    assert_non_null(strstr(err, "it was compiled from another source"));
}

int main(int argc, char **argv)
{
    if (argc > 1)
        return child(argv[1]);
    const struct CMUnitTest tests[] = {
        scoped_test(exiting_while_compiling_leaves_nothing_behind),
        scoped_test(the_cache_is_private_to_the_user),
        scoped_test(a_tampered_object_is_compiled_again),
    };
    return cmocka_run_group_tests_name("kernel cache", tests, setup, teardown);
}
