/*
 * Writing code that behaves like Flare's own: a module's forward, an autograd
 * function (fl_v_record), a loss, a dataset or a backend's helpers. Flare's layers
 * above the tensor layer are written with these functions, so an extension reports
 * errors, takes NULL arguments and hands out results exactly as they do.
 *
 * Errors: record one with fl_error and return NULL (or its status). The message reads
 * "fn: message", as Flare's do, and the first error since fl_clear_error wins, so a
 * NULL passed on from an earlier failure keeps that failure's message.
 *
 * Results: a public function returns a reference its caller's scope owns (tensor.h,
 * "Lifetimes"). A function that makes a tensor it owns (fl_retain'd, or kept with
 * fl_keep) passes it through fl_out; one written as a composition of public calls
 * runs them inside a scope of its own and returns with fl_scope_return, so its
 * intermediates are released and only the result reaches the caller.
 *
 *     fl_tensor *my_swish(const fl_tensor *x)
 *     {
 *         if (fl_null_args("my_swish", 1, x))
 *             return NULL;
 *         if (!fl_dtype_is_float(fl_dtype_of(x))) {
 *             char d[FL_DESC_SIZE];
 *             return fl_error(FL_ERR_DTYPE, "my_swish", "%s is not a float tensor",
 *                             fl_describe(x, d));
 *         }
 *         fl_scope s = fl_scope_begin();
 *         return fl_scope_return(s, fl_mul(x, fl_sigmoid(x)));
 *     }
 *
 * A backend reports a failure with fl_backend_error (backend.h) instead: the tensor
 * layer adds the operation and its operands to the message.
 */
#ifndef FLARE_EXTENSION_H
#define FLARE_EXTENSION_H

#include <stdbool.h>
#include <stdint.h>

#include "flare/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors ------------------------------------------------------------------------ */

/* Records status with the message "fn: " followed by fmt's expansion, unless an error
 * is already recorded on this thread (the first one wins). Calls the handler set with
 * fl_set_error_handler. Returns NULL, so a function can `return fl_error(...)`. */
void *fl_error(fl_status status, const char *fn, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* True if any of the count arguments (pointers, tensors or variables) is NULL. If no
 * error is recorded yet, the caller passed the NULL itself, and it records FL_ERR_NULL
 * naming fn and the argument's position; otherwise the NULL is an earlier failure's
 * result and is passed on without a new message. With checked handles on (below), also
 * true, with FL_ERR_RELEASED, if an argument is a released tensor or variable. */
bool fl_null_args(const char *fn, int count, ...);
/* True if the count tensors (NULLs are skipped) do not all live on one backend, after
 * recording FL_ERR_VALUE naming fn and two of the backends: "fn: operands on different
 * backends (cpu and opencl); move one with fl_to_backend". Every operation of several
 * tensors checks this before it computes, since no backend reads another's memory. */
bool fl_mixed_backends(const char *fn, int count, ...);

/* ---- checked handles ------------------------------------------------------------- */

/*
 * With checked handles on (FLARE_CHECK_HANDLES, docs/CONFIG.md; on by default in Debug
 * and sanitizer builds), a handle whose last reference is released is poisoned rather
 * than freed, and a later use fails with FL_ERR_RELEASED and a message saying what
 * released it: fl_release, fl_v_release, or fl_scope_end and which scope. The most
 * recent 16384 released handles are kept so; fl_null_args checks its arguments against
 * them, which is how every operation catches a released tensor or variable.
 */
bool fl_handles_checked(void);
/* Frees handle with free_fn, or with checked handles on keeps it poisoned as a
 * released `kind` ("tensor", "variable") that `by` (a function's name) released; the
 * scope being ended, if any, is named instead. For handle types of one's own. */
void fl_handle_retire(void *handle, const char *kind, const char *by, void (*free_fn)(void *handle));
/* True, after recording FL_ERR_RELEASED naming fn (unless an error is already
 * recorded), if checked handles are on and handle is a released handle. */
bool fl_handle_released(const char *fn, const void *handle);

/* ---- describing tensors in messages ---------------------------------------------- */

/* The size of a buffer for fl_describe and fl_describe_shape. */
#define FL_DESC_SIZE 96

/* Writes t as dtype and shape, "f32[2, 3]" ("NULL" for NULL), into buf (FL_DESC_SIZE
 * bytes) and returns buf. */
const char *fl_describe(const fl_tensor *t, char *buf);
/* Writes a shape as "[2, 3]" into buf (FL_DESC_SIZE bytes; a long shape is cut short)
 * and returns buf. */
const char *fl_describe_shape(int ndim, const int64_t *shape, char *buf);

/* ---- checking arguments ------------------------------------------------------------ */

/* True if a and b have the same shape (dtypes may differ); false if either is NULL. */
bool fl_same_shape(const fl_tensor *a, const fl_tensor *b);
/* Turns axis, possibly negative (-1 is the last), into an index in [0, ndim) in *out.
 * Out of range: false and FL_ERR_AXIS naming fn. */
bool fl_normalize_axis(const char *fn, int axis, int ndim, int *out);
/* The bit mask of axes[0..count) of an ndim-dimensional tensor (bit i for axis i,
 * negative axes counted from the end); axes NULL or count 0 means every axis. A bad
 * or repeated axis: false and FL_ERR_AXIS naming fn. */
bool fl_axes_mask(const char *fn, const int *axes, int count, int ndim, unsigned *mask);

/* ---- sizes ------------------------------------------------------------------------- */

/* *out = a * b, or a + b, for sizes computed from shapes (padded, tiled, joined,
 * convolved); false if the result does not fit in an int64_t (*out is then garbage). */
static inline bool fl_size_mul(int64_t a, int64_t b, int64_t *out) { return !__builtin_mul_overflow(a, b, out); }
static inline bool fl_size_add(int64_t a, int64_t b, int64_t *out) { return !__builtin_add_overflow(a, b, out); }

/* True if a tensor of dtype and shape can exist: a valid dtype, and 0 to FL_MAX_DIMS
 * non-negative sizes whose product times the element size (its bytes, and so every
 * element count, stride and byte offset) is at most PTRDIFF_MAX. A zero size empties the tensor but
 * its strides still multiply the other sizes, so the product is taken over the
 * non-zero ones. Otherwise false and FL_ERR_SHAPE naming fn, the shape and dtype.
 * Every tensor is checked when it is made; callers that form a shape from untrusted
 * input (a file, a layer's sizes) check it first for a message of their own. */
bool fl_check_size(const char *fn, fl_dtype dtype, int ndim, const int64_t *shape);

/* Bounds of an integer tensor's values known without reading them (it was made from
 * host values, or cast, reshaped or selected from such a tensor): true and every
 * value in [*low, *high], else false. Checks of class indices use it to skip reading
 * a device's memory. */
bool fl_known_bounds(const fl_tensor *t, int64_t *low, int64_t *high);

/* ---- handing results to the caller's scope ---------------------------------------- */

/* Takes a reference the caller owns and hands it to the innermost open scope, which
 * releases it when it ends; outside any scope the reference stays the caller's.
 * Returns t; NULL passes through. */
fl_tensor *fl_out(fl_tensor *t);

/* Ends scope (begun by the caller with fl_scope_begin), releasing what it holds except
 * result, which is handed to the scope around it as fl_out does. Returns result; a
 * NULL result (a failure inside the scope) passes through and its error stays. */
fl_tensor *fl_scope_return(fl_scope scope, fl_tensor *result);

/* ---- files written whole or not at all -------------------------------------------- */

/* A temporary beside path for a file that must appear whole or not at all (Flare's
 * safetensors, ARPA and WAV writers use it): path.tmp.<pid>.<n>, created exclusively, so
 * that concurrent writers (threads or processes) never share one, with a new file's
 * mode (0666 less the umask; mkstemp's 0600 would make the file private to its writer).
 * Returns its descriptor, open for writing, and its name in name (size bytes;
 * strlen(path) + 32 suffice), or -1 with errno set. The caller writes and syncs it,
 * then renames name onto path, or unlinks name on failure. */
int fl_temporary_file(const char *path, char *name, size_t size);

#ifdef __cplusplus
}
#endif

#endif
