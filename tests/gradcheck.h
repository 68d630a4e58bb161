/*
 * Finite-difference checks of gradients, for every differentiable function.
 *
 * The function's output is reduced to a scalar by a weighted sum with fixed
 * pseudo-random weights, so the gradient of every output element counts; its gradient
 * with respect to each floating-point input is compared with central differences of
 * step 1e-6 in f64.
 */
#ifndef FLARE_TEST_GRADCHECK_H
#define FLARE_TEST_GRADCHECK_H

#include "flare/autograd.h"
#include "support.h"

/* The function under test, of count variables; ctx is passed through. */
typedef fl_variable *(*gradcheck_fn)(fl_variable *const *x, void *ctx);

/* Checks fn at inputs (f64 tensors for the ones to differentiate; inputs of other
 * dtypes, such as indices, are passed as constants). */
#define assert_gradcheck(fn, ctx, ...) \
    support_gradcheck((fn), (ctx), (fl_tensor *const[]){__VA_ARGS__}, \
                      (int)(sizeof((fl_tensor *[]){__VA_ARGS__}) / sizeof(fl_tensor *)), __FILE__, __LINE__)
void support_gradcheck(gradcheck_fn fn, void *ctx, fl_tensor *const *inputs, int count, const char *file, int line);

/* A random f64 tensor with values in [low, high), from a fixed seed (for test inputs). */
fl_tensor *gradcheck_input(double low, double high, int ndim, const int64_t *shape);

#endif
