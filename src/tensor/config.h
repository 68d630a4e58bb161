/*
 * The private side of flare/config.h: the settings in effect, and the log.
 */
#ifndef FLARE_TENSOR_CONFIG_H
#define FLARE_TENSOR_CONFIG_H

#include "flare/config.h"

/* The settings in effect, read from the environment on the first call unless fl_init
 * came first. Every field is resolved: memory, conv_algorithm and lazy_compile are one
 * of their names, kernel_cache the directory to use, distributed the engine's name;
 * backend and compiler may be NULL (the built-in choice). */
const fl_config *fl__config(void);

/* Formats a message for the log callback, if there is one. */
void fl__log(fl_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* profile.c: turns the profile on, with its report at exit, as FLARE_PROFILE asks. */
void fl__profile_configure(bool on);

#endif
