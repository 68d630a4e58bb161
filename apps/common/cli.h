/*
 * The command line of Flare's programs (apps/ and bench/): getopt_long, strict
 * numbers and one way to refuse. A program lists its options in getopt_long's
 * table (--help and -h need no entry) and loops:
 *
 *     cli c = {.program = "mnist", .usage = "mnist [--epochs N] ...", .options = options};
 *     for (int key; (key = cli_next(&c, argc, argv)) != -1;)
 *         switch (key) {
 *         case 'e': o.epochs = (int)cli_integer(&c, 0, 1000); break;
 *         ...
 *         }
 *
 * Every mistake ends the program with status 2, after "PROGRAM: what is wrong" and
 * the usage on stderr; --help (or -h) prints the usage on stdout and ends with 0. The
 * programs are not the library: exiting from here is theirs to do.
 */
#ifndef FLARE_CLI_H
#define FLARE_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>

#include "flare/tensor_map.h"

typedef struct cli {
    const char *program; /* for messages */
    const char *usage;   /* what follows "usage: "; lines after the first indented */
    const struct option *options;
    int operands;        /* how many arguments may follow the options (SPACING ...) */
    char option[64];     /* the option being read, "--epochs", for messages */
} cli;

/* getopt_long's next option (its table's val), or -1 after the last, when the
 * operands are argv[optind..argc); an option's value is in optarg. Unknown options,
 * missing values and more operands than c->operands end the program. */
int cli_next(cli *c, int argc, char **argv);

/* The current option's value as a whole number in [low, high]: decimal, or
 * hexadecimal after 0x; "1e6", "3x", "" and " 3" are refused, not truncated. */
long long cli_integer(const cli *c, long long low, long long high);
/* The same for a text that is not an option's value (what names it: "SPACING"). */
long long cli_integer_of(const cli *c, const char *what, const char *text, long long low, long long high);
/* The current option's value as a number in [low, high] (strtod's syntax, whole). */
double cli_number(const cli *c, double low, double high);

/* --backend NAME: makes the current option's value, which must name a registered
 * backend ("cpu", "lazy", "opencl", ...), the default backend, on which the program
 * then makes its tensors. It takes precedence over FLARE_BACKEND. */
void cli_backend(const cli *c);
/* What the usages say of --backend, as their last line. */
#define CLI_BACKEND_HELP "--backend NAME: compute on backend NAME (cpu, lazy, opencl; default FLARE_BACKEND, else cpu)"

/* A checkpoint's metadata value under key as a whole number in [low, high], in the
 * same strict form as cli_integer's decimals (no sign, space or trailing text); false
 * if it is absent or anything else. For the programs' own checkpoint headers. */
bool cli_metadata_integer(const fl_tensor_map *map, const char *key, int64_t low, int64_t high, int64_t *out);

/* Prints "PROGRAM: message" and the usage on stderr and ends the program with status 2. */
_Noreturn void cli_fail(const cli *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
