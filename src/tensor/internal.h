/*
 * What the files of the tensor layer share: handle allocation, error recording,
 * argument checks, broadcasting and the dispatch of a primitive.
 *
 * Convention: functions named fl__* return references the caller owns (never
 * registered in a scope); public functions wrap them with fl_out (extension.h), which
 * hands the result to the innermost scope if one is open. What code outside the
 * tensor layer needs to behave like it (errors, argument checks, results) is public,
 * in extension.h.
 */
#ifndef FLARE_TENSOR_INTERNAL_H
#define FLARE_TENSOR_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "flare/backend.h"
#include "flare/extension.h"
#include "flare/memory.h"
#include "flare/tensor.h"

/* ---- handles ---- */

/* A tensor's value never changes; its reference count and its backend's state (a
 * deferred value made concrete by eval) do. They are the handle's mutable part, as
 * an object's reference count is in CPython, so functions that take a const tensor
 * may still retain or evaluate it: this is the one place that drops the const. */
static inline fl_tensor *fl__mutable(const fl_tensor *t) { return (fl_tensor *)(uintptr_t)t; }

fl_tensor *fl__new(const fl_backend *backend, fl_dtype dtype, int ndim, const int64_t *shape);

/* handles.c: whether checked handles are on (fl_handles_checked without reading the
 * settings, for the paths where a handle exists, so they were read). */
extern bool fl__handles_on;
static inline bool fl__checked(void) { return __builtin_expect(__atomic_load_n(&fl__handles_on, __ATOMIC_RELAXED), 0); }
/* handles.c: turns checked handles on or off (config.c, once). */
void fl__handles_configure(bool on);
/* handles.c: while ending is true, handles this thread retires are recorded as
 * released by fl_scope_end of the scope at depth, opened by call serial of
 * fl_scope_begin. */
void fl__handles_scope_ending(int64_t serial, int depth, bool ending);

/* ---- errors ---- */

/* The status and message a backend left with fl_backend_error, cleared on read. */
fl_status fl__take_backend_error(char *message, size_t size);

/* NumPy broadcasting of two shapes into out (FL_MAX_DIMS entries). */
bool fl__broadcast_shapes(int andim, const int64_t *ashape, int bndim, const int64_t *bshape, int *ndim,
                          int64_t *out);
/* True if a and b can meet in one operation: they live on one backend. */
bool fl__same_backend(const fl_tensor *a, const fl_tensor *b);

/* ---- dispatch ---- */

/* Calls a backend primitive for a fresh output and finishes it: on failure the output
 * is freed and the error recorded with the operation, shapes and dtypes; on success
 * the output (owned by the caller) is returned. The memory-telemetry operation is
 * set to op for the duration of the call. */
#define FL_PRIMITIVE(entry) offsetof(fl_backend, entry)
/* The type of a table entry, for the pointer fl__primitive returns. */
#define FL_ENTRY_TYPE(entry) __typeof__(((const fl_backend *)0)->entry)
/* The function pointer at offset in t's backend table, or NULL (and an error). The
 * caller begins the operation (fl__begin) right before calling it. */
void *fl__primitive(const char *fn, const fl_backend *backend, size_t offset, const char *entry_name);
fl_tensor *fl__finish(const char *fn, fl_tensor *out, int rc, int ninputs, const fl_tensor *const *inputs);
/* Whether an optional fused kernel declined its call (rc FL_ERR_UNSUPPORTED, the
 * backend.h way of saying "compose this one"): then its message is dropped and the
 * operation fl__begin opened is ended, and the caller releases its outputs and
 * composes. Otherwise nothing is done and the caller finishes as usual. */
bool fl__declined(int rc);
/* Names the operation now running, for memory telemetry and the profile; fl__end ends
 * it (fl__finish calls it). Called right before the backend entry, after the casts,
 * expands and checks that prepare its operands: those are operations of their own,
 * and nothing between the two can leave the operation open. */
void fl__begin(const char *operation);
void fl__end(void);
/* profile.c: a primitive's frame in the operation profile. */
void fl__profile_begin(const char *primitive);
void fl__profile_end(void);

/* Owned conversions used to prepare operands; they return t itself (retained) when
 * there is nothing to do. */
fl_tensor *fl__cast(const fl_tensor *t, fl_dtype dtype);
/* Value bounds of integer tensors (struct fl_tensor's bounded): out gets t's, or the
 * bounds of the numel values of out's dtype at data. Both ignore a NULL out. */
void fl__bound_like(fl_tensor *out, const fl_tensor *t);
void fl__bound_from_host(fl_tensor *out, const void *data);

/* Host access to tensors through the backends' optional entries (backend.h, version
 * 2), for layers that hand memory to code outside Flare and never look inside a
 * backend. fl__host_data: the host address of t's values through host_data, or NULL
 * (and no error) where the backend has none for t. */
void *fl__host_data(const fl_tensor *t);
/* Where a producer writes a new tensor's values: the tensor's own storage where its
 * backend gives host access (empty, then host_data), else host memory that finish
 * copies in with from_host. */
typedef struct fl__host_output {
    fl_tensor *tensor; /* the result, owned */
    void *data;        /* where the producer writes tensor's values */
    void *staging;     /* host memory, when the backend has no host access */
} fl__host_output;
bool fl__host_output_begin(const char *fn, fl__host_output *out, const fl_backend *backend, fl_dtype dtype, int ndim,
                           const int64_t *shape);
/* The filled tensor, owned; NULL and an error naming fn. out is empty afterwards. */
fl_tensor *fl__host_output_finish(const char *fn, fl__host_output *out);
void fl__host_output_abandon(fl__host_output *out);
fl_tensor *fl__expand(const fl_tensor *t, int ndim, const int64_t *shape);
/* index as i64, checked to hold only values in [0, size); owned. axis >= 0 names the
 * axis of t indexed; axis < 0 means size counts classes (t unused). The check reads
 * the values to the host unless their bounds are known: backends rely on it and never
 * see a bad index. */
fl_tensor *fl__checked_index(const char *fn, const fl_tensor *index, const fl_tensor *t, int axis, int64_t size);
fl_tensor *fl__reshape(const fl_tensor *t, int ndim, const int64_t *shape);
/* A tensor of value on a given backend. */
fl_tensor *fl__full(const fl_backend *backend, double value, fl_dtype dtype, int ndim, const int64_t *shape);
/* Whether value converts to dtype without leaving its range (an out-of-range or
 * non-finite double converted to an integer type is undefined behaviour in C). */
bool fl__scalar_fits(double value, fl_dtype dtype);
/* The dtype computations happen in: f16 and bf16 compute in f32. */
fl_dtype fl__compute_dtype(fl_dtype dtype);
/* The default float dtype that integer inputs to float functions compute in. */
#define FL_DEFAULT_FLOAT FL_F32

/* ---- fused kernels for the layers above (batchnorm.c) ---- */

/* True if x's backend has both batch-norm kernels and takes x's dtype (f32, f64). */
bool fl__batch_norm_fusable(const fl_tensor *x);
/* The backend's batch_norm and batch_norm_backward (backend.h) on x's backend, begun
 * as operations; the caller ends them with fl__finish on one of the outputs. */
int fl__batch_norm(fl_tensor *y, fl_tensor *save_mean, fl_tensor *save_var, const fl_tensor *x,
                   const fl_tensor *weight, const fl_tensor *bias, const fl_tensor *running_mean,
                   const fl_tensor *running_var, double eps);
int fl__batch_norm_backward(fl_tensor *dx, fl_tensor *dweight, fl_tensor *dbias, const fl_tensor *dy,
                            const fl_tensor *x, const fl_tensor *mean, const fl_tensor *invstd,
                            const fl_tensor *weight, bool training);

/* ---- fused kernels for the optimizers (elementwise.c) ---- */

/* One step of SGD with momentum written into param and buffer, through the backend's
 * sgd_update (backend.h), where it has one, param and buffer are f32 or f64 tensors
 * that nothing else references (an fl_tensor reference count of 1: a variable's
 * value, an optimizer's buffer), and the backend takes them. param is const as a
 * variable hands out its value: the tensor layer, which alone decides when a tensor's
 * values may change, writes it only once nothing else can see it. FL_OK; or
 * FL_ERR_UNSUPPORTED, having changed nothing and recorded no error, for the caller to
 * compose the step; or another status with an error recorded naming fn. */
fl_status fl__sgd_update(const char *fn, const fl_tensor *param, fl_tensor *buffer, const fl_tensor *grad,
                         const fl_sgd_desc *d);

/* One step of Adam or AdamW written into param and its state (max_exp_avg_sq NULL
 * without amsgrad), through the backend's adam_update (backend.h) under
 * fl__sgd_update's conditions, for every tensor written; its results likewise. */
fl_status fl__adam_update(const char *fn, const fl_tensor *param, fl_tensor *exp_avg, fl_tensor *exp_avg_sq,
                          fl_tensor *max_exp_avg_sq, const fl_tensor *grad, const fl_adam_desc *d);

/* ---- random ---- */

/* Reserves count Philox counters from the global generator; returns the seed and the
 * first counter. */
void fl__random_reserve(uint64_t count, uint64_t *seed, uint64_t *offset);

#endif
