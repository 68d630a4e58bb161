/*
 * The private side of flare/config.h.
 */
#ifndef FLARE_TENSOR_CONFIG_H
#define FLARE_TENSOR_CONFIG_H

#include "flare/config.h"

/* profile.c: turns the profile on, with its report at exit, as FLARE_PROFILE asks. */
void fl__profile_configure(bool on);

#endif
