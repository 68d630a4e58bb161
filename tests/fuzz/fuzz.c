/* What the fuzz targets share (fuzz.h). */
#include "fuzz.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flare/config.h"
#include "flare/tensor.h"

void fuzz_setup(void)
{
    static int done;
    if (done)
        return;
    done = 1;
    fl_config config = {.size = sizeof config, .backend = "cpu", .memory = "plain", .num_threads = 1};
    if (fl_init(&config) != FL_OK)
        abort();
}

/* Two scratch paths in $TMPDIR (or /tmp), unique to the process; removed at exit. */
static char scratch[2][4096];

static void remove_scratch(void)
{
    for (int i = 0; i < 2; i++)
        if (scratch[i][0])
            unlink(scratch[i]);
}

const char *fuzz_path(int which)
{
    if (!scratch[which][0]) {
        const char *dir = getenv("TMPDIR");
        snprintf(scratch[which], sizeof scratch[which], "%s/flare-fuzz-%d-%d", dir && *dir ? dir : "/tmp", (int)getpid(),
                 which);
        if (!scratch[!which][0])
            atexit(remove_scratch);
    }
    return scratch[which];
}

const char *fuzz_file(const uint8_t *data, size_t size)
{
    /* Opened afresh each time: a reader's writer may have renamed another file over it. */
    const char *path = fuzz_path(0);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size) || close(fd) != 0) {
        perror(path);
        abort();
    }
    return path;
}

int fuzz_verbose;

void fuzz_check_error(int failed)
{
    if (fuzz_verbose)
        printf("  %s\n", failed ? fl_last_error() : "read");
    if (failed && fl_last_status() == FL_OK) {
        fprintf(stderr, "a reader failed without an error message\n");
        abort();
    }
    if (!failed && fl_last_status() != FL_OK) {
        fprintf(stderr, "a reader succeeded but left an error: %s\n", fl_last_error());
        abort();
    }
    fl_clear_error();
}
