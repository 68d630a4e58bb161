/*
 * What the training programs (apps/mnist, apps/lm) print and write as they run: a
 * progress bar on a terminal, and files that appear whole or not at all.
 */
#ifndef FLARE_OUTPUT_H
#define FLARE_OUTPUT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Redraws "epoch E [=====>    ] done/total  loss L  N UNIT/s" on stderr, ending the
 * line after the last step; nothing when stderr is not a terminal, so that logs and
 * pipes get only the per-epoch lines. */
void output_progress(int epoch, int64_t done, int64_t total, double loss, double per_second, const char *unit);

/* A text file written under PATH.tmp and renamed onto PATH when complete, so that a
 * run that fails or is killed never leaves a truncated PATH (nor replaces a good one). */
typedef struct output_file {
    FILE *f;
    const char *program, *path; /* program: for messages */
    char tmp[4096];
} output_file;

/* Opens PATH.tmp for writing; false after "PROGRAM: cannot write PATH.tmp: why" on stderr. */
bool output_open(output_file *o, const char *program, const char *path);
/* Closes the file and, with keep, renames it onto its path; without keep, or when that
 * fails, removes the temporary. Returns 0, or 1 after "PROGRAM: cannot write PATH: why". */
int output_close(output_file *o, bool keep);

#endif
