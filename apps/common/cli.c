/* The command line of Flare's programs (cli.h). */
#include "cli.h"

#include <ctype.h>
#include <stdbool.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flare/backend.h"

static void print_usage(const cli *c, FILE *out) { fprintf(out, "usage: %s\n", c->usage); }

_Noreturn void cli_fail(const cli *c, const char *fmt, ...)
{
    fprintf(stderr, "%s: ", c->program);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    print_usage(c, stderr);
    exit(2);
}

int cli_next(cli *c, int argc, char **argv)
{
    int index = -1;
    opterr = 0; /* the messages are ours */
    int key = getopt_long(argc, argv, ":h", c->options, &index);
    if (index >= 0)
        snprintf(c->option, sizeof c->option, "--%s", c->options[index].name);
    else
        snprintf(c->option, sizeof c->option, "-%c", optopt);
    /* --help needs no entry in the table: getopt_long reports it as unknown. */
    if (key == 'h' || (key == '?' && optopt == 0 && strcmp(argv[optind - 1], "--help") == 0)) {
        print_usage(c, stdout);
        exit(0);
    }
    if (key == '?')
        cli_fail(c, "unknown or ambiguous option '%s'", argv[optind - 1]);
    if (key == ':')
        cli_fail(c, "%s needs a value", argv[optind - 1]);
    if (key == -1 && argc - optind > c->operands)
        cli_fail(c, "unexpected argument '%s'", argv[optind + c->operands]);
    return key;
}

long long cli_integer_of(const cli *c, const char *what, const char *text, long long low, long long high)
{
    const char *digits = text + (text[0] == '-');
    bool hex = digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X');
    char *end = NULL;
    errno = 0;
    long long v = 0;
    /* strtoll alone would skip spaces, take a sign of its own and read "010" as octal. */
    if (hex ? isxdigit((unsigned char)digits[2]) : isdigit((unsigned char)digits[0]))
        v = strtoll(text, &end, hex ? 16 : 10);
    if (!end || *end || errno || v < low || v > high)
        cli_fail(c, "%s wants a whole number in [%lld, %lld], not '%s'", what, low, high, text);
    return v;
}

long long cli_integer(const cli *c, long long low, long long high)
{
    return cli_integer_of(c, c->option, optarg, low, high);
}

void cli_backend(const cli *c)
{
    if (!fl_backend_find(optarg))
        cli_fail(c, "%s: no backend named '%s' (cpu, lazy and opencl are built in)", c->option, optarg);
    if (fl_set_default_backend(optarg) != FL_OK)
        cli_fail(c, "%s %s: %s", c->option, optarg, fl_last_error());
}

double cli_number(const cli *c, double low, double high)
{
    char *end;
    errno = 0;
    double v = strtod(optarg, &end);
    if (isspace((unsigned char)optarg[0]) || end == optarg || *end || errno || !(v >= low && v <= high))
        cli_fail(c, "%s wants a number in [%g, %g], not '%s'", c->option, low, high, optarg);
    return v;
}

bool cli_metadata_integer(const fl_tensor_map *map, const char *key, int64_t low, int64_t high, int64_t *out)
{
    const char *s = fl_tensor_map_metadata(map, key);
    char *end;
    errno = 0;
    long long v = s && *s >= '0' && *s <= '9' ? strtoll(s, &end, 10) : -1;
    if (!s || errno || *end || v < low || v > high)
        return false;
    *out = v;
    return true;
}
