/* The fuzz targets of the readers of outside bytes (tests/fuzz/README.md). Each target
 * is one file defining LLVMFuzzerTestOneInput; it is linked either with libFuzzer
 * (make fuzz) or with replay.c, which feeds it the committed corpus and regression
 * files under ctest. */
#ifndef FLARE_FUZZ_H
#define FLARE_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Sets Flare up for fuzzing once: the cpu backend on one thread, and the plain memory
 * manager, so that AddressSanitizer sees every tensor's own allocation. */
void fuzz_setup(void);

/* Scratch file paths of this process (which: 0 or 1), removed at exit. */
const char *fuzz_path(int which);

/* Writes bytes to the scratch file fuzz_path(0) and returns its path: the readers take
 * paths. */
const char *fuzz_file(const uint8_t *data, size_t size);

/* Checks that a failed call left an error message, then clears it; a failure without
 * a message aborts, so that the fuzzer reports it. */
void fuzz_check_error(int failed);

/* Non-zero: fuzz_check_error prints what the reader said (the replay driver's -v). */
extern int fuzz_verbose;

#endif
