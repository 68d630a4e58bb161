/*
 * What the programs read whole: a file's bytes in one buffer.
 */
#ifndef FLARE_INPUT_H
#define FLARE_INPUT_H

#include <stddef.h>

/* The bytes of the file at path ("-": standard input), malloc'd (free() them) and
 * followed by a NUL that *size does not count; NULL when it cannot be opened or read,
 * or memory runs out, with errno saying why. */
char *input_read_all(const char *path, size_t *size);

#endif
