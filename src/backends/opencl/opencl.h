/*
 * The OpenCL backend's per-tensor state and the helpers its kernel files share.
 *
 * A tensor is either a value, a strided view of a reference-counted device buffer
 * (views share the buffer, as on the cpu backend), or pending: an f32 elementwise
 * operation on other tensors, or an f32 constant, that has not run yet. Pending
 * operations chain into a graph that runs as one generated kernel when something
 * reads it (fuse.c), the way the lazy backend fuses on the CPU; everything else
 * enqueues its kernel at once. Nothing waits for the device except to_host.
 *
 * Each kernel family lives in its own file and fills its entries of the table in an
 * ocl_register_*() function called from opencl.c. A kernel file reads its operands
 * through ocl_value() (which runs pending work first) and makes its outputs with
 * ocl_alloc().
 */
#ifndef FLARE_OPENCL_H
#define FLARE_OPENCL_H

#include <stdbool.h>
#include <stdint.h>

#include "flare/backend.h"

#include "../kernelgen/kernelgen.h"
#include "runtime.h"

typedef enum ocl_state { OCL_VALUE, OCL_CONSTANT, OCL_PENDING } ocl_state;

typedef struct ocl_tensor {
    ocl_state state;
    /* a value */
    ocl_buffer *buffer;
    int64_t offset;               /* elements */
    int64_t strides[FL_MAX_DIMS]; /* elements; 0 on broadcast axes */
    bool contiguous;              /* row-major dense from offset */
    /* a constant */
    float constant;
    /* a pending operation: a lazy_op of kernelgen/expressions.h on args (f32 tensors of
     * this backend and this shape), which it holds references to */
    int op;
    fl_tensor *args[2];
    int nodes; /* pending operations in the graph below, repeats counted, saturating */
} ocl_tensor;

static inline ocl_tensor *ocl_impl(const fl_tensor *t) { return (ocl_tensor *)t->impl; }

static inline size_t ocl_element_size(fl_dtype d)
{
    static const unsigned char sizes[FL_DTYPE_COUNT] = {1, 1, 4, 8, 2, 2, 4, 8};
    return sizes[d];
}

/* Where a value's first element is, counted in elements from the start of its
 * buffer's cl_mem: what kernels and CLBlast take as an offset. (A buffer's own offset
 * is in bytes; blocks are 512-byte aligned, so it divides by any element size.) */
static inline cl_long ocl_element_offset(const fl_tensor *t)
{
    const ocl_tensor *o = ocl_impl(t);
    return (cl_long)(o->buffer->offset / ocl_element_size(t->dtype)) + o->offset;
}

/* A graph holds at most this many pending operations; past it an operand runs first,
 * so that a loop that never reads its values keeps memory bounded and kernels small. */
#define OCL_MAX_NODES 32

/* Gives out a fresh, contiguous buffer. Returns 0 or an fl_status. */
int ocl_alloc(fl_tensor *out);
/* Writes value into every element of out, a fresh contiguous value. */
int ocl_fill_value(fl_tensor *out, double value);
/* Makes out a view of base (a value) with the given offset and strides (elements). */
int ocl_view(fl_tensor *out, const fl_tensor *base, int64_t offset, const int64_t *strides);
void ocl_dense_strides(int ndim, const int64_t *shape, int64_t *strides);

/* t's state once any pending work is enqueued: a value. NULL after fl_backend_error. */
ocl_tensor *ocl_value(const fl_tensor *t);
/* A contiguous value with t's values: t itself (a new reference) if it is one, else a
 * copy made on the device. NULL after fl_backend_error. Release it with fl_release. */
fl_tensor *ocl_contiguous(const fl_tensor *t);

/* Writes a program's text into source (size bytes): true, or false after
 * fl_backend_error (no kernel for the dtype, a text too long). */
typedef bool (*ocl_source_writer)(char *source, size_t size, const void *arg);
/* The kernel `name` of the program write(arg) writes, found by key, everything the
 * text depends on (bytes compared, so pointers in it must be to text that never
 * changes): the text is written, hashed and built only the first time a key is seen.
 * NULL after fl_backend_error. */
cl_kernel ocl_kernel_keyed(const void *key, size_t key_size, const char *name, ocl_source_writer write,
                           const void *arg);
/* The kernel `name` of a kernel file's body for dtype, after the dialect's prelude and
 * "#define T <type of dtype>"; found by the body's text. */
cl_kernel ocl_kernel_for(const char *body, const char *name, fl_dtype dtype);

/* Enqueues the generated elementwise program p with the given leaves, constants (one
 * per KG_CONSTANT slot, in slot order) and outputs (values, contiguous). Returns 0 or
 * an fl_status. */
int ocl_run_program(const char *operation, const kg_program *p, const fl_tensor *const *leaves,
                    const double *constants, fl_tensor *const *outputs);

/* elementwise.c: runs op on a (and b) now, as a one-operation generated program: a
 * lazy_op in the compute type of the operands (f32 or f64), or a KG_* typed op; a,
 * b and out of one shape. Returns 0 or an fl_status. */
int ocl_run_now(const char *name, fl_tensor *out, int op, const fl_tensor *a, const fl_tensor *b);

/* fuse.c: pending operations. */
/* Makes out a pending f32 op on a (and b), or runs it at once where it cannot be
 * pending. Returns 0 or an fl_status. */
int ocl_defer(fl_tensor *out, int op, const fl_tensor *a, const fl_tensor *b);
/* Runs the pending graph of t; t becomes a value. The graph lock is held. */
int ocl_materialize(const fl_tensor *t);
void ocl_graph_lock(void);
void ocl_graph_unlock(void);

/* The kernel families, each filling its entries of the table. */
void ocl_register_elementwise(fl_backend *b);
void ocl_register_reduce(fl_backend *b);
void ocl_register_index(fl_backend *b);
void ocl_register_linalg(fl_backend *b);
void ocl_register_nn(fl_backend *b);
void ocl_register_random(fl_backend *b);

/* sort.c: the sort entry, registered by ocl_register_reduce. */
int ocl_sort(const fl_backend *self, fl_tensor *values, fl_tensor *indices, const fl_tensor *a, int axis,
             bool descending);

#endif
