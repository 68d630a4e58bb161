/* What the programs read whole (input.h). */
#include "input.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *input_read_all(const char *path, size_t *size)
{
    bool standard_input = strcmp(path, "-") == 0;
    FILE *f = standard_input ? stdin : fopen(path, "rb");
    if (!f)
        return NULL;
    char *buffer = NULL;
    size_t capacity = 0, n = 0;
    bool failed = false;
    for (;;) {
        if (n + 65536 > capacity) {
            char *grown = realloc(buffer, capacity = 2 * capacity + 65536);
            if (!grown) {
                failed = true;
                errno = ENOMEM;
                break;
            }
            buffer = grown;
        }
        size_t got = fread(buffer + n, 1, capacity - n, f);
        n += got;
        if (got == 0)
            break;
    }
    failed = failed || ferror(f);
    if (!standard_input)
        fclose(f);
    if (failed) {
        free(buffer);
        return NULL;
    }
    buffer[n] = 0; /* the loop above left room: it reads until a read with room returns nothing */
    *size = n;
    return buffer;
}
