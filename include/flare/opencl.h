/*
 * The opencl backend's own API: which device it runs on, and what it has asked of
 * the device. Tensors on it are made as on any backend (fl_set_default_backend
 * ("opencl"), FLARE_BACKEND=opencl, or fl_to_backend(t, "opencl")); docs/BACKENDS.md
 * describes the backend.
 */
#ifndef FLARE_OPENCL_H_PUBLIC
#define FLARE_OPENCL_H_PUBLIC

#include <stdint.h>

#include "flare/memory.h"
#include "flare/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The device's name ("<platform>: <device>"), initializing it if need be; NULL if
 * there is none. */
const char *fl_opencl_device(void);
/* Why there is no device (no OpenCL runtime or platform, FLARE_OPENCL_DEVICE out of
 * range, a context that could not be made), or NULL if there is one. */
const char *fl_opencl_unavailable(void);

/* What the backend has asked of its device since it started. Host transfers are the
 * only copies between host and device memory: a training step uploads its batch and
 * downloads its loss, nothing else. */
typedef struct fl_opencl_counters {
    uint64_t uploads, downloads; /* host-to-device and device-to-host copies */
    uint64_t upload_bytes, download_bytes;
    uint64_t launches; /* kernels enqueued (CLBlast's own not counted) */
    uint64_t builds;   /* programs compiled: once per distinct kernel source */
    uint64_t waits;    /* times the host waited for the device */
} fl_opencl_counters;
/* All zero if there is no device. Thread-safe; each count is exact, the counts may be
 * read at slightly different moments. */
fl_opencl_counters fl_opencl_counters_get(void);

/* The manager of device memory: a caching manager (fl_memory_caching_over) over
 * device buffers, with the host manager's statistics and telemetry. NULL if there is
 * no device. */
fl_memory_manager *fl_opencl_memory(void);

#ifdef __cplusplus
}
#endif

#endif
