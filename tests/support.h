/*
 * What the tests share: cmocka, value and shape assertions, error assertions, and the
 * fixture reader. Fixtures are generated once from NumPy/PyTorch by the committed
 * scripts tests/fixtures/gen_*.py (`make fixtures`) and read here by name.
 */
#ifndef FLARE_TEST_SUPPORT_H
#define FLARE_TEST_SUPPORT_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "flare/backend.h"
#include "flare/memory.h"
#include "flare/tensor.h"

/* Builds a tensor from a literal list of values: T_F32(FL_SHAPE(2, 2), 1, 2, 3, 4). */
#define T_F32(ndim_shape, ...) fl_from_data((const float[]){__VA_ARGS__}, FL_F32, ndim_shape)
#define T_F64(ndim_shape, ...) fl_from_data((const double[]){__VA_ARGS__}, FL_F64, ndim_shape)
#define T_I32(ndim_shape, ...) fl_from_data((const int32_t[]){__VA_ARGS__}, FL_I32, ndim_shape)
#define T_I64(ndim_shape, ...) fl_from_data((const int64_t[]){__VA_ARGS__}, FL_I64, ndim_shape)
#define T_U8(ndim_shape, ...) fl_from_data((const uint8_t[]){__VA_ARGS__}, FL_U8, ndim_shape)
#define T_BOOL(ndim_shape, ...) fl_from_data((const _Bool[]){__VA_ARGS__}, FL_BOOL, ndim_shape)

/* Fails unless t is non-NULL with exactly this shape. */
#define assert_shape(t, ...) support_assert_shape((t), FL_SHAPE(__VA_ARGS__), __FILE__, __LINE__)
void support_assert_shape(const fl_tensor *t, int ndim, const int64_t *shape, const char *file, int line);
/* Fails unless t's values (read as f64) match expected within atol + rtol * |expected|;
 * NaNs match NaNs and infinities match exactly. */
#define assert_values(t, rtol, atol, ...) \
    support_assert_values((t), (const double[]){__VA_ARGS__}, \
                          (int64_t)(sizeof((double[]){__VA_ARGS__}) / sizeof(double)), rtol, atol, __FILE__, __LINE__)
void support_assert_values(const fl_tensor *t, const double *expected, int64_t count, double rtol, double atol,
                           const char *file, int line);
/* Derives a table from the one registered as name, under the same name, for a test to
 * override entries of and then register with support_override, which returns a copy
 * of what the name held: support_override(&copy) puts it back. */
fl_backend support_derive(const char *name);
/* A backend other than the default one, on every row of the test matrix: "lazy" when
 * the default is "cpu", "cpu" otherwise. */
const char *support_other_backend(void);
/* True if a and b have one dtype and shape and the same bytes (read with fl_to_host),
 * whatever backends they live on. */
bool support_same_bytes(const fl_tensor *a, const fl_tensor *b);
fl_backend support_override(const fl_backend *table);
/* Compares two tensors of equal shape element by element, as assert_values. */
#define assert_close(t, expected, rtol, atol) support_assert_close((t), (expected), rtol, atol, __FILE__, __LINE__)
void support_assert_close(const fl_tensor *t, const fl_tensor *expected, double rtol, double atol, const char *file,
                          int line);
#define assert_dtype(t, d) support_assert_dtype((t), (d), __FILE__, __LINE__)
void support_assert_dtype(const fl_tensor *t, fl_dtype dtype, const char *file, int line);
/* Fails unless result is NULL (or a status) and the recorded error has this status
 * and mentions `contains` (if not NULL); then clears the error. */
#define assert_fails(result, status, contains) \
    support_assert_fails((result) == NULL, (status), (contains), __FILE__, __LINE__)
#define assert_fails_status(code, status, contains) \
    support_assert_fails((code) != FL_OK, (status), (contains), __FILE__, __LINE__)
void support_assert_fails(int failed, fl_status status, const char *contains, const char *file, int line);
/* Fails if an error is recorded, printing it. */
#define assert_no_error() support_assert_no_error(__FILE__, __LINE__)
void support_assert_no_error(const char *file, int line);

/* The tensor stored as `name` in tests/fixtures/<file> (in the scope, if one is open). */
fl_tensor *fixture(const char *file, const char *name);

/* cmocka group set-up/tear-down that open and close a scope around each test, so the
 * tests need not release what they make. */
int support_scope_setup(void **state);
int support_scope_teardown(void **state);
#define scoped_test(f) cmocka_unit_test_setup_teardown(f, support_scope_setup, support_scope_teardown)

/* Runs this test program again, as `program scenario` in a fresh process (one that has
 * not read Flare's settings yet), with the NAME=VALUE entries of env (NULL-ended; a
 * bare NAME unsets it) over this environment. Its stdout and stderr are returned in
 * out and err (each of `size` bytes), and its exit status (-1 if it did not exit). */
int support_run_self(const char *scenario, const char *const *env, char *out, char *err, size_t size);

#endif
