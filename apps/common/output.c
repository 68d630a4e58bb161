/* What the training programs print and write as they run (output.h). */
#include "output.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <unistd.h>

void output_progress(int epoch, int64_t done, int64_t total, double loss, double per_second, const char *unit)
{
    if (!isatty(STDERR_FILENO))
        return;
    enum { WIDTH = 30 };
    int filled = (int)(WIDTH * done / (total ? total : 1));
    char bar[WIDTH + 1];
    for (int i = 0; i < WIDTH; i++)
        bar[i] = i < filled ? '=' : i == filled ? '>' : ' ';
    bar[WIDTH] = '\0';
    fprintf(stderr, "\repoch %d [%s] %" PRId64 "/%" PRId64 "  loss %.4f  %.0f %s/s ", epoch, bar, done, total, loss,
            per_second, unit);
    if (done == total)
        fputc('\n', stderr);
}

bool output_open(output_file *o, const char *program, const char *path)
{
    o->program = program, o->path = path;
    snprintf(o->tmp, sizeof o->tmp, "%s.tmp", path);
    if (!(o->f = fopen(o->tmp, "w")))
        fprintf(stderr, "%s: cannot write %s: %s\n", program, o->tmp, strerror(errno));
    return o->f != NULL;
}

int output_close(output_file *o, bool keep)
{
    /* fclose reports the write errors that buffering held back (a full disk). */
    bool closed = fclose(o->f) == 0;
    o->f = NULL;
    if (keep && closed && rename(o->tmp, o->path) == 0)
        return 0;
    int error = errno;
    remove(o->tmp);
    if (!keep)
        return 0;
    fprintf(stderr, "%s: cannot write %s: %s\n", o->program, o->path, strerror(error));
    return 1;
}
