/* The model of the distributed checkpoint test, which tests/mpi/dist_check.c saves and
 * tests/test_distributed.c loads back: 8 MB, so that a save lasts long enough to be
 * interrupted. */
#ifndef FLARE_TESTS_CHECKPOINT_MODEL_H
#define FLARE_TESTS_CHECKPOINT_MODEL_H

#include "flare/nn.h"

static inline fl_module *checkpoint_model(void) { return fl_nn_linear(1024, 2048, true); }

#endif
