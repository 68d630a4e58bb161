/*
 * The OpenCL host runtime: the device, its one in-order queue, device memory, the
 * program cache and kernel launches. Nothing here knows what a kernel computes; the
 * kernel sources come from the generator (../kernelgen/) and from the kernel files of
 * this backend, so a CUDA backend would replace this file (NVRTC for the compiler,
 * a stream for the queue) and keep the generator and the memory manager.
 *
 * Thread safety: every function here may be called from any thread. Launches take
 * one lock (kernel arguments live in the cl_kernel object, which OpenCL does not
 * guard), so the queue sees each launch whole.
 */
#ifndef FLARE_OPENCL_RUNTIME_H
#define FLARE_OPENCL_RUNTIME_H

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "flare/backend.h"
#include "flare/memory.h"
#include "flare/opencl.h"

typedef struct ocl_device {
    cl_platform_id platform;
    cl_device_id id;
    cl_context context;
    cl_command_queue queue;
    char name[256];     /* "<platform>: <device>" */
    bool fp64;          /* cl_khr_fp64 */
    /* programs are built with -cl-fp32-correctly-rounded-divide-sqrt, where the device
     * offers it: f32 division and sqrt then round as on the cpu backend, where
     * OpenCL's defaults allow 2.5 and 3 ulp (NVIDIA's differ by one) */
    const char *build_options;
    size_t local_size;  /* work-group size used for 1-D launches */
    fl_memory_manager *memory; /* the caching manager over device buffers */
} ocl_device;

/* The device, initialized on first use; NULL after fl_backend_error (no OpenCL
 * runtime, no platform, no device, or a failure creating the context). The reason is
 * kept: later calls fail with the same message. */
ocl_device *ocl_device_get(void);
/* The device's work-group size for 1-D launches rounded down to a power of two, what
 * kernels that combine their work items' results in local memory take (1 without a
 * device). */
int ocl_group_size(void);

/* OpenCL's name for an error code ("CL_OUT_OF_RESOURCES"). */
const char *ocl_error_name(cl_int err);
/* If err is not CL_SUCCESS, records a backend error naming the operation, the device
 * and OpenCL's error name, and returns its fl_status (FL_ERR_MEMORY for the
 * out-of-memory codes, else FL_ERR_BACKEND); else 0. */
int ocl_check(cl_int err, const char *operation);

/* ---- device memory ----
 * Device buffers come from the memory manager (a caching manager over segments of
 * device memory, fl_memory_caching_over): a block is an address in a reserved range
 * of the host's address space that stands for a place in a segment's cl_mem. */
typedef struct ocl_buffer {
    int refcount;
    cl_mem mem;    /* the segment's buffer */
    size_t offset; /* of the block in it, bytes */
    size_t bytes;
    void *block;   /* the manager's address for the block */
    fl_memory_manager *owner;
} ocl_buffer;

/* A new buffer of bytes (at least one), or NULL after fl_backend_error. */
ocl_buffer *ocl_buffer_new(size_t bytes);
void ocl_buffer_retain(ocl_buffer *b);
void ocl_buffer_release(ocl_buffer *b);

/* Host transfers: the only copies between host and device. upload copies src first,
 * so the caller may free it at once; it does not wait. download waits for the queue
 * up to the copy. Both return 0 or an fl_status. */
int ocl_upload(const ocl_buffer *b, size_t offset, const void *src, size_t bytes);
int ocl_download(const ocl_buffer *b, size_t offset, void *dst, size_t bytes);

/* ---- programs and launches ---- */

/* The kernel named name in the program built from source, built on first use and
 * cached by the source's text (a program's kernels are made once). NULL after
 * fl_backend_error, with the build log in the message. */
cl_kernel ocl_kernel(const char *source, const char *name);

/* One kernel argument: a buffer (mem), or bytes of a value. */
typedef struct ocl_arg {
    const void *value;
    size_t size;
} ocl_arg;
#define OCL_MEM(b) ((ocl_arg){&(b)->mem, sizeof(cl_mem)})
#define OCL_VALUE(v) ((ocl_arg){&(v), sizeof(v)})

/* Enqueues kernel over global work items (1-D, rounded up to the work-group size:
 * kernels check their index against their own count), without waiting. */
int ocl_launch(const char *operation, cl_kernel kernel, size_t global, int nargs, const ocl_arg *args);
/* The same with a 2-D or 3-D range and work-group size (local may be NULL). */
int ocl_launch_nd(const char *operation, cl_kernel kernel, int dims, const size_t *global, const size_t *local,
                  int nargs, const ocl_arg *args);

/* Waits for everything enqueued. */
int ocl_finish(void);

/* FNV-1a over size bytes, continuing from h (OCL_HASH_SEED to start): the key of the
 * backend's caches of programs and kernels and of ocl_first_run_done. */
#define OCL_HASH_SEED 1469598103934665603ull
uint64_t ocl_hash(uint64_t h, const void *data, size_t size);

/* Called after enqueueing work that may be a kernel's first run, named by key (an
 * ocl_hash): the first time a key is seen, waits for the queue and registers the exit
 * handler that drains it again (runtime.c says why). */
void ocl_first_run_done(uint64_t key);

/* The queue, for libraries that enqueue on it (CLBlast); ocl_lock_queue holds the
 * launch lock while they do. */
void ocl_lock_queue(void);
void ocl_unlock_queue(void);

/* What was asked of the device since it was initialized (fl_opencl_counters). */
typedef fl_opencl_counters ocl_counters;
ocl_counters ocl_counters_get(void);

#endif
