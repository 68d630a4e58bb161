#include "support.h"

#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "flare/extension.h"

static double *read_f64(const fl_tensor *t)
{
    double *values = malloc((size_t)(fl_numel(t) ? fl_numel(t) : 1) * sizeof(double));
    fl_scope scope = fl_scope_begin();
    fl_tensor *d = fl_cast(t, FL_F64);
    if (!d || !values || fl_to_host(d, values, (size_t)fl_numel(t) * sizeof(double)) != FL_OK) {
        free(values);
        values = NULL;
    }
    fl_scope_end(scope);
    return values;
}

void support_assert_shape(const fl_tensor *t, int ndim, const int64_t *shape, const char *file, int line)
{
    if (!t) {
        print_error("%s:%d: tensor is NULL: %s\n", file, line, fl_last_error());
        _fail(file, line);
    }
    int same = fl_ndim(t) == ndim;
    for (int i = 0; same && i < ndim; i++)
        same = fl_shape(t)[i] == shape[i];
    if (!same) {
        print_error("%s:%d: shape mismatch: got %d dims [", file, line, fl_ndim(t));
        for (int i = 0; i < fl_ndim(t); i++)
            print_error("%s%lld", i ? ", " : "", (long long)fl_shape(t)[i]);
        print_error("], expected %d dims [", ndim);
        for (int i = 0; i < ndim; i++)
            print_error("%s%lld", i ? ", " : "", (long long)shape[i]);
        print_error("]\n");
        _fail(file, line);
    }
}

static int value_matches(double got, double want, double rtol, double atol)
{
    if (isnan(want))
        return isnan(got);
    if (isinf(want))
        return got == want;
    return fabs(got - want) <= atol + rtol * fabs(want);
}

static void compare(const double *got, const double *want, int64_t n, double rtol, double atol, const char *file,
                    int line)
{
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (!value_matches(got[i], want[i], rtol, atol)) {
            if (first < 0)
                first = i;
            bad++;
        }
    if (bad) {
        print_error("%s:%d: %lld of %lld values differ; first at flat index %lld: got %.9g, expected %.9g\n", file,
                       line, (long long)bad, (long long)n, (long long)first, got[first], want[first]);
        _fail(file, line);
    }
}

void support_assert_values(const fl_tensor *t, const double *expected, int64_t count, double rtol, double atol,
                           const char *file, int line)
{
    if (!t) {
        print_error("%s:%d: tensor is NULL: %s\n", file, line, fl_last_error());
        _fail(file, line);
    }
    if (fl_numel(t) != count) {
        print_error("%s:%d: %lld values, expected %lld\n", file, line, (long long)fl_numel(t), (long long)count);
        _fail(file, line);
    }
    double *got = read_f64(t);
    if (!got) {
        print_error("%s:%d: cannot read values: %s\n", file, line, fl_last_error());
        _fail(file, line);
    }
    compare(got, expected, count, rtol, atol, file, line);
    free(got);
}

void support_assert_close(const fl_tensor *t, const fl_tensor *expected, double rtol, double atol, const char *file,
                          int line)
{
    if (!t || !expected) {
        print_error("%s:%d: tensor is NULL: %s\n", file, line, fl_last_error());
        _fail(file, line);
    }
    support_assert_shape(t, fl_ndim(expected), fl_shape(expected), file, line);
    double *got = read_f64(t), *want = read_f64(expected);
    if (!got || !want) {
        print_error("%s:%d: cannot read values: %s\n", file, line, fl_last_error());
        _fail(file, line);
    }
    compare(got, want, fl_numel(t), rtol, atol, file, line);
    free(got);
    free(want);
}

void support_assert_dtype(const fl_tensor *t, fl_dtype dtype, const char *file, int line)
{
    if (!t || fl_dtype_of(t) != dtype) {
        print_error("%s:%d: dtype %s, expected %s (%s)\n", file, line, t ? fl_dtype_name(fl_dtype_of(t)) : "NULL",
                       fl_dtype_name(dtype), fl_last_error());
        _fail(file, line);
    }
}

void support_assert_fails(int failed, fl_status status, const char *contains, const char *file, int line)
{
    if (!failed) {
        print_error("%s:%d: expected a failure with status '%s'\n", file, line, fl_status_name(status));
        _fail(file, line);
    }
    if (fl_last_status() != status) {
        print_error("%s:%d: status '%s', expected '%s' (message: %s)\n", file, line,
                       fl_status_name(fl_last_status()), fl_status_name(status), fl_last_error());
        _fail(file, line);
    }
    if (contains && !strstr(fl_last_error(), contains)) {
        print_error("%s:%d: message '%s' does not mention '%s'\n", file, line, fl_last_error(), contains);
        _fail(file, line);
    }
    fl_clear_error();
}

void support_assert_no_error(const char *file, int line)
{
    if (fl_last_status() != FL_OK) {
        print_error("%s:%d: unexpected error: %s\n", file, line, fl_last_error());
        _fail(file, line);
    }
}

/* ---- fixtures: "FLFX", u32 version 1, u32 count, then per tensor: u16 name length,
 * name, u8 dtype (fl_dtype), u8 ndim, i64 shape[ndim], the values row-major ---- */

fl_tensor *fixture(const char *file, const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", FLARE_FIXTURES, file);
    FILE *f = fopen(path, "rb");
    if (!f) {
        print_error("cannot open fixture file %s\n", path);
        return NULL;
    }
    char magic[4];
    uint32_t version, count;
    fl_tensor *found = NULL;
    if (fread(magic, 1, 4, f) != 4 || memcmp(magic, "FLFX", 4) || fread(&version, 4, 1, f) != 1 ||
        fread(&count, 4, 1, f) != 1) {
        print_error("%s is not a fixture file\n", path);
        fclose(f);
        return NULL;
    }
    for (uint32_t i = 0; i < count && !found; i++) {
        uint16_t len;
        char key[256];
        uint8_t dtype, ndim;
        int64_t shape[FL_MAX_DIMS], numel = 1;
        if (fread(&len, 2, 1, f) != 1 || len >= sizeof key || fread(key, 1, len, f) != len ||
            fread(&dtype, 1, 1, f) != 1 || fread(&ndim, 1, 1, f) != 1 || ndim > FL_MAX_DIMS ||
            fread(shape, 8, ndim, f) != ndim)
            break;
        key[len] = '\0';
        for (int d = 0; d < ndim; d++)
            numel *= shape[d];
        size_t bytes = (size_t)numel * fl_dtype_size((fl_dtype)dtype);
        if (strcmp(key, name) != 0) {
            fseek(f, (long)bytes, SEEK_CUR);
            continue;
        }
        void *data = malloc(bytes ? bytes : 1);
        if (data && fread(data, 1, bytes, f) == bytes)
            found = fl_from_data(data, (fl_dtype)dtype, ndim, shape);
        free(data);
        break;
    }
    fclose(f);
    if (!found)
        print_error("fixture %s has no tensor '%s'\n", path, name);
    return found;
}

static _Thread_local fl_scope test_scope;

int support_scope_setup(void **state)
{
    (void)state;
    fl_clear_error();
    test_scope = fl_scope_begin();
    return 0;
}

int support_scope_teardown(void **state)
{
    (void)state;
    fl_scope_end(test_scope);
    fl_clear_error();
    return 0;
}

const char *support_other_backend(void)
{
    return strcmp(fl_default_backend()->name, "cpu") == 0 ? "lazy" : "cpu";
}

bool support_same_bytes(const fl_tensor *a, const fl_tensor *b)
{
    if (!a || !b || fl_dtype_of(a) != fl_dtype_of(b) || !fl_same_shape(a, b))
        return false;
    size_t bytes = (size_t)fl_numel(a) * fl_dtype_size(fl_dtype_of(a));
    unsigned char *x = malloc(bytes + 1), *y = malloc(bytes + 1);
    bool same = x && y && fl_to_host(a, x, bytes) == FL_OK && fl_to_host(b, y, bytes) == FL_OK &&
                memcmp(x, y, bytes) == 0;
    free(x);
    free(y);
    return same;
}

fl_backend support_derive(const char *name)
{
    const fl_backend *base = fl_backend_find(name);
    assert_non_null(base);
    fl_backend derived;
    fl_backend_derive(&derived, base, base->name);
    return derived;
}

fl_backend support_override(const fl_backend *table)
{
    const fl_backend *registered = fl_backend_find(table->name);
    assert_non_null(registered);
    fl_backend replaced = *registered;
    assert_int_equal(fl_backend_register(table), FL_OK);
    return replaced;
}

extern char **environ;

static void read_back(FILE *f, char *out, size_t size)
{
    rewind(f);
    size_t n = fread(out, 1, size - 1, f);
    out[n] = 0;
    fclose(f);
}

int support_run_self(const char *scenario, const char *const *env, char *out, char *err, size_t size)
{
    size_t count = 0, extra = 0;
    while (environ[count])
        count++;
    while (env[extra])
        extra++;
    char **envp = calloc(count + extra + 1, sizeof *envp);
    size_t n = 0;
    for (size_t i = 0; i < count; i++) {
        bool replaced = false;
        for (size_t j = 0; j < extra && !replaced; j++) {
            size_t name = strcspn(env[j], "=");
            replaced = strncmp(environ[i], env[j], name) == 0 && environ[i][name] == '=';
        }
        if (!replaced)
            envp[n++] = environ[i];
    }
    size_t first_copy = n; /* posix_spawn takes non-const strings: copies, freed below */
    for (size_t j = 0; j < extra; j++)
        if (strchr(env[j], '='))
            envp[n++] = strdup(env[j]);
    FILE *o = tmpfile(), *e = tmpfile();
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fileno(o), STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, fileno(e), STDERR_FILENO);
    char exe[4096];
    ssize_t length = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[length > 0 ? length : 0] = 0;
    char *argv[] = {exe, strdup(scenario), NULL};
    pid_t pid;
    int status = -1;
    if (posix_spawn(&pid, exe, &actions, NULL, argv, envp) == 0)
        while (waitpid(pid, &status, 0) < 0)
            ;
    posix_spawn_file_actions_destroy(&actions);
    for (size_t i = first_copy; i < n; i++)
        free(envp[i]);
    free(envp);
    free(argv[1]);
    read_back(o, out, size);
    read_back(e, err, size);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
