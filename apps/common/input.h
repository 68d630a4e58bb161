/*
 * What the programs read whole: a file's bytes in one buffer.
 */
#ifndef FLARE_INPUT_H
#define FLARE_INPUT_H

#include <stddef.h>

/* The bytes of the file at path, malloc'd (free() them), their count in *size; NULL
 * when it cannot be opened or read, or memory runs out, with errno saying why. */
char *input_read_all(const char *path, size_t *size);

#endif
