/* Settings and the log (flare/config.h): the environment read once, fl_init's checks,
 * bad values logged, and nothing written to stderr unless asked. Settings are read
 * once per process, so each case runs in a fresh one (support_run_self). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flare/config.h"
#include "flare/distributed.h"
#include "flare/profile.h"
#include "support.h"

#define OUTPUT 16384
static char out[OUTPUT], err[OUTPUT];

#define RUN(scenario, ...) support_run_self(scenario, (const char *const[]){__VA_ARGS__, NULL}, out, err, OUTPUT)

/* ---- scenarios, run in the child ---- */

static char logged[4096];
static int log_calls;

static void capture(fl_log_level level, const char *message, void *user)
{
    log_calls++;
    snprintf(logged + strlen(logged), sizeof logged - strlen(logged), "%s%s|", level == FL_LOG_ERROR ? "E:" : "W:",
             message);
    (void)user;
}

#define EXPECT(cond)                                                                                    \
    do {                                                                                                \
        if (!(cond)) {                                                                                  \
            printf("%s:%d: %s (last error: %s; log: %s)\n", __FILE__, __LINE__, #cond, fl_last_error(), \
                   logged);                                                                             \
            return 1;                                                                                   \
        }                                                                                               \
    } while (0)

static int from_environment(void)
{
    EXPECT(fl_num_threads() == 3);
    EXPECT(fl_distributed_init(NULL) == FL_ERR_VALUE && strstr(fl_last_error(), "'tcp'"));
    fl_clear_error();
    EXPECT(fl_distributed_timeout() == 0); /* FLARE_DIST_TIMEOUT=0: forever */
    EXPECT(fl_init(NULL) == FL_ERR_VALUE && strstr(fl_last_error(), "call fl_init before anything else"));
    return 0;
}

static int bad_environment_is_logged(void)
{
    fl_set_log(capture, NULL);
    EXPECT(fl_num_threads() == (int)sysconf(_SC_NPROCESSORS_ONLN));
    EXPECT(log_calls == 3);
    EXPECT(strstr(logged, "W:FLARE_NUM_THREADS is 'abc', not a whole number of threads from 0 to 1024; "
                          "using one per processor|"));
    EXPECT(strstr(logged, "W:FLARE_MEMORY is 'fast', neither 'caching' nor 'plain'; using caching|"));
    EXPECT(strstr(logged, "W:FLARE_DIST_TIMEOUT is '-1', not a number of seconds >= 0; using 300|"));
    EXPECT(fl_distributed_timeout() == 300);
    EXPECT(strcmp(fl_memory_manager_current()->name, "caching") == 0);
    return 0;
}

static int init_rejects_a_bad_environment(void)
{
    EXPECT(fl_init(NULL) == FL_ERR_VALUE);
    EXPECT(strstr(fl_last_error(), "fl_init: FLARE_LAZY_COMPILE is 'fast', none of 'async', 'sync', 'off'"));
    fl_clear_error();
    /* nothing changed: a good configuration is still taken */
    EXPECT(fl_init(&(fl_config){.size = sizeof(fl_config), .num_threads = 2}) == FL_OK);
    EXPECT(fl_num_threads() == 2);
    return 0;
}

static int explicit_configuration(void)
{
    struct {
        fl_config config;
        const char *message;
    } bad[] = {
        {{.size = 0}, "config->size is 0; set it to sizeof(fl_config)"},
        {{.size = sizeof(fl_config) + 8}, "config->size"},
        {{.size = sizeof(fl_config), .num_threads = -1}, "config->num_threads is -1; it must be 0 to 1024"},
        {{.size = sizeof(fl_config), .num_threads = 1025}, "config->num_threads is 1025; it must be 0 to 1024"},
        {{.size = sizeof(fl_config), .memory = "pooled"}, "config->memory is 'pooled'"},
        {{.size = sizeof(fl_config), .conv_algorithm = "fft"}, "config->conv_algorithm is 'fft'"},
        {{.size = sizeof(fl_config), .lazy_compile = "later"}, "config->lazy_compile is 'later'"},
        {{.size = sizeof(fl_config), .dist_timeout = 1.0 / 0.0}, "config->dist_timeout is inf"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        EXPECT(fl_init(&bad[i].config) == FL_ERR_VALUE);
        EXPECT(strstr(fl_last_error(), bad[i].message));
        fl_clear_error();
    }
    EXPECT(fl_init(NULL) == FL_OK); /* none of them changed anything */
    EXPECT(fl_num_threads() == 5);
    return 0;
}

static int explicit_configuration_ignores_the_environment(void)
{
    fl_config config = {.size = sizeof config, .num_threads = 2, .memory = "plain", .dist_timeout = -1,
                        .log = capture};
    char name[] = "tcp";
    config.distributed = name;
    EXPECT(fl_init(&config) == FL_OK);
    name[0] = 'x'; /* copied */
    EXPECT(fl_num_threads() == 2);
    EXPECT(strcmp(fl_memory_manager_current()->name, "plain") == 0);
    EXPECT(fl_distributed_timeout() == 0);
    EXPECT(fl_distributed_init(NULL) == FL_ERR_VALUE && strstr(fl_last_error(), "'tcp'"));
    fl_clear_error();
    EXPECT(fl_init(&config) == FL_ERR_VALUE);
    EXPECT(log_calls == 0); /* FLARE_CONV_ALGORITHM=fft in the environment is not read */
    return 0;
}

/* The environment's FLARE_PROFILE=1 still prints the profile at exit (on stderr). */
static int profile_from_environment(void)
{
    EXPECT(fl_profile_enabled());
    fl_scope scope = fl_scope_begin();
    fl_add(fl_scalar(1, FL_F32), fl_scalar(2, FL_F32));
    fl_scope_end(scope);
    return 0;
}

static int touch_settings(void)
{
    fl_num_threads();
    return 0;
}

static int scenario(const char *name)
{
    static const struct {
        const char *name;
        int (*run)(void);
    } scenarios[] = {
        {"from_environment", from_environment},
        {"bad_environment_is_logged", bad_environment_is_logged},
        {"init_rejects_a_bad_environment", init_rejects_a_bad_environment},
        {"explicit_configuration", explicit_configuration},
        {"explicit_configuration_ignores_the_environment", explicit_configuration_ignores_the_environment},
        {"profile_from_environment", profile_from_environment},
        {"touch_settings", touch_settings},
    };
    for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++)
        if (strcmp(name, scenarios[i].name) == 0)
            return scenarios[i].run();
    printf("no scenario %s\n", name);
    return 2;
}

/* ---- tests, run in the parent ---- */

#define EXPECT_CHILD(status)                                    \
    do {                                                        \
        if ((status) != 0)                                      \
            print_error("child said: %s\nstderr: %s\n", out, err); \
        assert_int_equal(status, 0);                            \
    } while (0)

static void settings_come_from_the_environment(void **state)
{
    EXPECT_CHILD(RUN("from_environment", "FLARE_NUM_THREADS=3", "FLARE_DISTRIBUTED=tcp", "FLARE_DIST_TIMEOUT=0"));
    assert_string_equal(err, "");
}

static void bad_values_are_logged_not_printed(void **state)
{
    EXPECT_CHILD(RUN("bad_environment_is_logged", "FLARE_NUM_THREADS=abc", "FLARE_MEMORY=fast",
                     "FLARE_DIST_TIMEOUT=-1", "FLARE_LOG"));
    assert_string_equal(err, "");
    /* without a callback, nothing at all */
    EXPECT_CHILD(RUN("touch_settings", "FLARE_NUM_THREADS=abc", "FLARE_LOG"));
    assert_string_equal(err, "");
    /* FLARE_LOG=stderr asks for them on stderr */
    EXPECT_CHILD(RUN("touch_settings", "FLARE_NUM_THREADS=abc", "FLARE_LOG=stderr"));
    assert_non_null(strstr(err, "flare: FLARE_NUM_THREADS is 'abc'"));
    EXPECT_CHILD(RUN("touch_settings", "FLARE_LOG=yes"));
    assert_non_null(strstr(err, "flare: FLARE_LOG is 'yes', neither 'stderr' nor 'none'; using stderr"));
}

static void fl_init_checks_what_it_is_given(void **state)
{
    EXPECT_CHILD(RUN("init_rejects_a_bad_environment", "FLARE_LAZY_COMPILE=fast"));
    EXPECT_CHILD(RUN("explicit_configuration", "FLARE_NUM_THREADS=5"));
    EXPECT_CHILD(RUN("explicit_configuration_ignores_the_environment", "FLARE_NUM_THREADS=5",
                     "FLARE_CONV_ALGORITHM=fft", "FLARE_DIST_TIMEOUT=9"));
    assert_string_equal(err, "");
}

static void the_profile_is_printed_at_exit_when_asked(void **state)
{
    EXPECT_CHILD(RUN("profile_from_environment", "FLARE_PROFILE=1"));
    assert_non_null(strstr(err, "flare profile:"));
    assert_non_null(strstr(err, "add"));
    EXPECT_CHILD(RUN("touch_settings", "FLARE_PROFILE=0"));
    assert_string_equal(err, "");
}

/* Runs f with fd 2 sent to a file, and returns what was written there. */
static void with_stderr_captured(void (*f)(void), char *written, size_t size)
{
    fflush(stderr);
    FILE *capture_file = tmpfile();
    int saved = dup(STDERR_FILENO);
    dup2(fileno(capture_file), STDERR_FILENO);
    f();
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    rewind(capture_file);
    written[fread(written, 1, size - 1, capture_file)] = 0;
    fclose(capture_file);
}

static void misuse_of_a_caching_manager(void)
{
    fl_memory_manager *m = fl_memory_caching(SIZE_MAX, SIZE_MAX);
    void *p = m->alloc(m, 1000);
    int not_its_own;
    m->free(m, &not_its_own, sizeof not_its_own);
    m->destroy(m); /* with p in use: kept */
    m->free(m, p, 1000);
    m->destroy(m);
}

static void the_memory_manager_logs_through_the_callback(void **state)
{
    logged[0] = 0;
    log_calls = 0;
    fl_set_log(capture, NULL);
    char written[1024];
    with_stderr_captured(misuse_of_a_caching_manager, written, sizeof written);
    fl_set_log(NULL, NULL);
    assert_string_equal(written, "");
    assert_int_equal(log_calls, 2);
    assert_non_null(strstr(logged, "E:caching memory manager: 0x"));
    assert_non_null(strstr(logged, "was not allocated by it; ignored|"));
    assert_non_null(strstr(logged, "W:caching memory manager destroyed with 1024 bytes in use; kept alive|"));
}

int main(int argc, char **argv)
{
    if (argc > 1)
        return scenario(argv[1]);
    const struct CMUnitTest tests[] = {
        scoped_test(settings_come_from_the_environment),
        scoped_test(bad_values_are_logged_not_printed),
        scoped_test(fl_init_checks_what_it_is_given),
        scoped_test(the_profile_is_printed_at_exit_when_asked),
        scoped_test(the_memory_manager_logs_through_the_callback),
    };
    return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
