/*
 * The OpenCL host runtime (runtime.h): device selection, the queue, device memory,
 * programs and launches.
 *
 * The device: the opencl_device setting (FLARE_OPENCL_DEVICE, docs/CONFIG.md) picks
 * one by index in the order platforms and their devices are listed (clinfo -l);
 * unset, the first GPU of any platform, else the first device of any kind.
 *
 * Device memory: segments are cl_mem buffers. The caching manager hands out
 * addresses, so each segment is also given an address range, reserved with
 * mmap(PROT_NONE) (address space only, never touched), and a block's address says
 * which segment it is in and where. The segments are kept in a table sorted by
 * address for that lookup.
 */
#define _GNU_SOURCE
#include "runtime.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "flare/config.h"

static pthread_mutex_t launch_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static ocl_device device;
static bool ready;
static fl_status init_status;
static char init_message[512];
static ocl_counters counters;

#define COUNT(field, n) __atomic_add_fetch(&counters.field, (n), __ATOMIC_RELAXED)

const char *ocl_error_name(cl_int err)
{
    switch (err) {
#define NAME(e) \
    case e:     \
        return #e;
        NAME(CL_SUCCESS) NAME(CL_DEVICE_NOT_FOUND) NAME(CL_DEVICE_NOT_AVAILABLE) NAME(CL_COMPILER_NOT_AVAILABLE)
        NAME(CL_MEM_OBJECT_ALLOCATION_FAILURE) NAME(CL_OUT_OF_RESOURCES) NAME(CL_OUT_OF_HOST_MEMORY)
        NAME(CL_PROFILING_INFO_NOT_AVAILABLE) NAME(CL_MEM_COPY_OVERLAP) NAME(CL_IMAGE_FORMAT_MISMATCH)
        NAME(CL_IMAGE_FORMAT_NOT_SUPPORTED) NAME(CL_BUILD_PROGRAM_FAILURE) NAME(CL_MAP_FAILURE)
        NAME(CL_MISALIGNED_SUB_BUFFER_OFFSET) NAME(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
        NAME(CL_COMPILE_PROGRAM_FAILURE) NAME(CL_LINKER_NOT_AVAILABLE) NAME(CL_LINK_PROGRAM_FAILURE)
        NAME(CL_DEVICE_PARTITION_FAILED) NAME(CL_KERNEL_ARG_INFO_NOT_AVAILABLE) NAME(CL_INVALID_VALUE)
        NAME(CL_INVALID_DEVICE_TYPE) NAME(CL_INVALID_PLATFORM) NAME(CL_INVALID_DEVICE) NAME(CL_INVALID_CONTEXT)
        NAME(CL_INVALID_QUEUE_PROPERTIES) NAME(CL_INVALID_COMMAND_QUEUE) NAME(CL_INVALID_HOST_PTR)
        NAME(CL_INVALID_MEM_OBJECT) NAME(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR) NAME(CL_INVALID_IMAGE_SIZE)
        NAME(CL_INVALID_SAMPLER) NAME(CL_INVALID_BINARY) NAME(CL_INVALID_BUILD_OPTIONS) NAME(CL_INVALID_PROGRAM)
        NAME(CL_INVALID_PROGRAM_EXECUTABLE) NAME(CL_INVALID_KERNEL_NAME) NAME(CL_INVALID_KERNEL_DEFINITION)
        NAME(CL_INVALID_KERNEL) NAME(CL_INVALID_ARG_INDEX) NAME(CL_INVALID_ARG_VALUE) NAME(CL_INVALID_ARG_SIZE)
        NAME(CL_INVALID_KERNEL_ARGS) NAME(CL_INVALID_WORK_DIMENSION) NAME(CL_INVALID_WORK_GROUP_SIZE)
        NAME(CL_INVALID_WORK_ITEM_SIZE) NAME(CL_INVALID_GLOBAL_OFFSET) NAME(CL_INVALID_EVENT_WAIT_LIST)
        NAME(CL_INVALID_EVENT) NAME(CL_INVALID_OPERATION) NAME(CL_INVALID_GL_OBJECT) NAME(CL_INVALID_BUFFER_SIZE)
        NAME(CL_INVALID_MIP_LEVEL) NAME(CL_INVALID_GLOBAL_WORK_SIZE) NAME(CL_INVALID_PROPERTY)
        NAME(CL_INVALID_IMAGE_DESCRIPTOR) NAME(CL_INVALID_COMPILER_OPTIONS) NAME(CL_INVALID_LINKER_OPTIONS)
        NAME(CL_INVALID_DEVICE_PARTITION_COUNT)
#undef NAME
    case -1001:
        return "CL_PLATFORM_NOT_FOUND_KHR";
    default:
        return "an unknown OpenCL error";
    }
}

static fl_status status_of(cl_int err)
{
    return err == CL_OUT_OF_HOST_MEMORY || err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES
               ? FL_ERR_MEMORY
               : FL_ERR_BACKEND;
}

int ocl_check(cl_int err, const char *operation)
{
    if (err == CL_SUCCESS)
        return 0;
    /* a driver may reserve a buffer's memory only when a kernel first uses it
     * (NVIDIA's does): then that kernel's launch is what runs out of device memory */
    fl_status status = status_of(err);
    return fl_backend_error(status, "OpenCL %s failed on %s: %s%s (%d)", operation,
                            device.name[0] ? device.name : "no device",
                            status == FL_ERR_MEMORY ? "out of device memory, " : "", ocl_error_name(err), err);
}

/* ---- the device ---- */

static void init_failed(fl_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void init_failed(fl_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(init_message, sizeof init_message, fmt, ap);
    va_end(ap);
    init_status = status;
}

static void device_memory_init(void);

/* Work still queued when the process exits would run while exit() tears the OpenCL
 * implementation down. PoCL compiles a kernel for its first run, with LLVM, whose
 * function-local statics register their destructors with atexit on first use (as
 * PoCL registers handlers of its own), and a compile running after those have run
 * crashes. Exit handlers run in the reverse order of their registration, so the
 * handler that drains the queue is registered again after the first run of each
 * kernel, once that run is done: it then runs before anything that run registered.
 * The first runs are remembered by a key (a kernel and its work-group size, or a
 * CLBlast call's signature) in a table of fixed size. Every launch looks its key up,
 * so a key seen before is found without the lock (a slot is written once, under it);
 * past three quarters of the table no more keys are added. */
static void finish_at_exit(void) { clFinish(device.queue); }

#define FIRST_RUNS 1024
static uint64_t first_runs[FIRST_RUNS]; /* open addressing; 0 is an empty slot */
static int first_runs_count;
static pthread_mutex_t first_runs_lock = PTHREAD_MUTEX_INITIALIZER;

void ocl_first_run_done(uint64_t key)
{
    key |= 1;
    size_t slot = key % FIRST_RUNS;
    uint64_t held;
    while ((held = __atomic_load_n(&first_runs[slot], __ATOMIC_ACQUIRE)) != 0 && held != key)
        slot = (slot + 1) % FIRST_RUNS;
    if (held == key || __atomic_load_n(&first_runs_count, __ATOMIC_RELAXED) >= FIRST_RUNS * 3 / 4)
        return;
    pthread_mutex_lock(&first_runs_lock);
    while ((held = first_runs[slot]) != 0 && held != key) /* another thread may have filled it */
        slot = (slot + 1) % FIRST_RUNS;
    if (held == 0 && first_runs_count < FIRST_RUNS * 3 / 4) {
        clFinish(device.queue);
        COUNT(waits, 1);
        atexit(finish_at_exit);
        __atomic_store_n(&first_runs[slot], key, __ATOMIC_RELEASE);
        __atomic_store_n(&first_runs_count, first_runs_count + 1, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&first_runs_lock);
}

static void init(void)
{
    cl_platform_id platforms[16];
    cl_uint nplatforms = 0;
    cl_int err = clGetPlatformIDs(16, platforms, &nplatforms);
    if (err != CL_SUCCESS || nplatforms == 0) {
        init_failed(FL_ERR_UNSUPPORTED,
                    "no OpenCL platform (clGetPlatformIDs: %s): install a driver, or PoCL for the CPU "
                    "(apt-get install pocl-opencl-icd)",
                    err == CL_SUCCESS ? "none listed" : ocl_error_name(err));
        return;
    }
    int wanted = fl_config_current()->opencl_device; /* 0: automatic, else index + 1 */
    int index = 0;
    cl_device_id chosen = NULL, first = NULL;
    cl_platform_id chosen_platform = NULL, first_platform = NULL;
    for (cl_uint p = 0; p < nplatforms && !chosen; p++) {
        cl_device_id ids[32];
        cl_uint n = 0;
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 32, ids, &n) != CL_SUCCESS)
            continue;
        for (cl_uint d = 0; d < n && !chosen; d++, index++) {
            cl_device_type type = 0;
            clGetDeviceInfo(ids[d], CL_DEVICE_TYPE, sizeof type, &type, NULL);
            if (!first) {
                first = ids[d];
                first_platform = platforms[p];
            }
            if (wanted ? index == wanted - 1 : (type & CL_DEVICE_TYPE_GPU) != 0) {
                chosen = ids[d];
                chosen_platform = platforms[p];
            }
        }
    }
    if (wanted && !chosen) {
        init_failed(FL_ERR_VALUE, "opencl_device %d: there are only %d OpenCL devices", wanted - 1, index);
        return;
    }
    if (!chosen) {
        chosen = first;
        chosen_platform = first_platform;
    }
    if (!chosen) {
        init_failed(FL_ERR_UNSUPPORTED, "no OpenCL device on %u platform(s)", (unsigned)nplatforms);
        return;
    }
    device.platform = chosen_platform;
    device.id = chosen;
    char platform_name[128] = "", device_name[120] = "", extensions[4096] = "";
    clGetPlatformInfo(chosen_platform, CL_PLATFORM_NAME, sizeof platform_name, platform_name, NULL);
    clGetDeviceInfo(chosen, CL_DEVICE_NAME, sizeof device_name, device_name, NULL);
    clGetDeviceInfo(chosen, CL_DEVICE_EXTENSIONS, sizeof extensions, extensions, NULL);
    snprintf(device.name, sizeof device.name, "%s: %s", platform_name, device_name);
    device.fp64 = strstr(extensions, "cl_khr_fp64") != NULL;
    cl_device_fp_config single = 0;
    clGetDeviceInfo(chosen, CL_DEVICE_SINGLE_FP_CONFIG, sizeof single, &single, NULL);
    device.build_options = single & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT
                               ? "-cl-std=CL1.2 -cl-fp32-correctly-rounded-divide-sqrt"
                               : "-cl-std=CL1.2";
    size_t max_group = 256;
    clGetDeviceInfo(chosen, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof max_group, &max_group, NULL);
    device.local_size = max_group < 256 ? max_group : 256;
    device.context = clCreateContext(NULL, 1, &chosen, NULL, NULL, &err);
    if (err != CL_SUCCESS) {
        init_failed(status_of(err), "clCreateContext failed on %s: %s", device.name, ocl_error_name(err));
        return;
    }
    device.queue = clCreateCommandQueue(device.context, chosen, 0, &err);
    if (err != CL_SUCCESS) {
        init_failed(status_of(err), "clCreateCommandQueue failed on %s: %s", device.name, ocl_error_name(err));
        clReleaseContext(device.context);
        return;
    }
    device_memory_init();
    if (!device.memory) {
        init_failed(FL_ERR_MEMORY, "cannot make the device memory manager for %s", device.name);
        return;
    }
    ready = true;
}

ocl_device *ocl_device_get(void)
{
    pthread_once(&once, init);
    if (!ready) {
        fl_backend_error(init_status, "%s", init_message);
        return NULL;
    }
    return &device;
}

int ocl_group_size(void)
{
    ocl_device *d = ocl_device_get();
    int size = 1;
    while (d && (size_t)size * 2 <= d->local_size)
        size *= 2;
    return size;
}

/* ---- device memory ---- */

typedef struct segment {
    char *base; /* the reserved address range */
    size_t bytes;
    cl_mem mem;
} segment;

static pthread_mutex_t segments_lock = PTHREAD_MUTEX_INITIALIZER;
static segment *segments; /* sorted by base */
static size_t nsegments, segments_capacity;

static void *segment_map(void *user, size_t bytes)
{
    (void)user;
    cl_int err;
    cl_mem mem = clCreateBuffer(device.context, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (err != CL_SUCCESS)
        return NULL;
    char *base = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) {
        clReleaseMemObject(mem);
        return NULL;
    }
    pthread_mutex_lock(&segments_lock);
    if (nsegments == segments_capacity) {
        size_t capacity = segments_capacity ? 2 * segments_capacity : 16;
        segment *grown = realloc(segments, capacity * sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&segments_lock);
            munmap(base, bytes);
            clReleaseMemObject(mem);
            return NULL;
        }
        segments = grown;
        segments_capacity = capacity;
    }
    size_t at = nsegments;
    while (at > 0 && segments[at - 1].base > base)
        at--;
    memmove(segments + at + 1, segments + at, (nsegments - at) * sizeof *segments);
    segments[at] = (segment){base, bytes, mem};
    nsegments++;
    pthread_mutex_unlock(&segments_lock);
    return base;
}

/* The index of the segment holding address p; segments_lock held. */
static size_t segment_of(const char *p)
{
    size_t lo = 0, hi = nsegments;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (segments[mid].base <= p)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

static void segment_unmap(void *user, void *base, size_t bytes)
{
    (void)user;
    pthread_mutex_lock(&segments_lock);
    size_t i = segment_of(base);
    cl_mem mem = segments[i].mem;
    memmove(segments + i, segments + i + 1, (nsegments - i - 1) * sizeof *segments);
    nsegments--;
    pthread_mutex_unlock(&segments_lock);
    /* OpenCL frees the buffer once the commands using it are done. */
    clReleaseMemObject(mem);
    munmap(base, bytes);
}

static void device_memory_init(void)
{
    fl_memory_segments source = {.map = segment_map, .unmap = segment_unmap};
    device.memory = fl_memory_caching_over(&source, "opencl", SIZE_MAX, SIZE_MAX);
}

ocl_buffer *ocl_buffer_new(size_t bytes)
{
    ocl_device *d = ocl_device_get();
    if (!d)
        return NULL;
    ocl_buffer *b = malloc(sizeof *b);
    if (!b) {
        fl_backend_error(FL_ERR_MEMORY, "out of host memory for a buffer record");
        return NULL;
    }
    if (bytes == 0)
        bytes = 1;
    char *block = fl_memory_alloc_from(d->memory, bytes);
    if (!block) {
        d->memory->trim(d->memory); /* what is cached may be what the device is missing */
        block = fl_memory_alloc_from(d->memory, bytes);
    }
    if (!block) {
        free(b);
        fl_backend_error(FL_ERR_MEMORY, "out of device memory on %s: %zu bytes (CL_MEM_OBJECT_ALLOCATION_FAILURE)",
                         d->name, bytes);
        return NULL;
    }
    pthread_mutex_lock(&segments_lock);
    const segment *s = &segments[segment_of(block)];
    *b = (ocl_buffer){.refcount = 1, .mem = s->mem, .offset = (size_t)(block - s->base), .bytes = bytes,
                      .block = block, .owner = d->memory};
    pthread_mutex_unlock(&segments_lock);
    return b;
}

void ocl_buffer_retain(ocl_buffer *b) { __atomic_add_fetch(&b->refcount, 1, __ATOMIC_RELAXED); }

void ocl_buffer_release(ocl_buffer *b)
{
    if (!b || __atomic_sub_fetch(&b->refcount, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    /* Reusing the block at once is safe: the queue is in order, so whatever is
     * enqueued next on it runs after the commands that still read it. */
    fl_memory_free(b->owner, b->block, b->bytes);
    free(b);
}

/* ---- host transfers ---- */

static void CL_CALLBACK free_staging(cl_event event, cl_int status, void *staging)
{
    (void)event;
    (void)status;
    free(staging);
}

int ocl_upload(const ocl_buffer *b, size_t offset, const void *src, size_t bytes)
{
    if (bytes == 0)
        return 0;
    void *staging = malloc(bytes);
    if (!staging)
        return fl_backend_error(FL_ERR_MEMORY, "out of host memory staging %zu bytes for the device", bytes);
    memcpy(staging, src, bytes);
    cl_event done;
    pthread_mutex_lock(&launch_lock);
    cl_int err = clEnqueueWriteBuffer(device.queue, b->mem, CL_FALSE, b->offset + offset, bytes, staging, 0, NULL,
                                      &done);
    pthread_mutex_unlock(&launch_lock);
    if (err != CL_SUCCESS) {
        free(staging);
        return ocl_check(err, "clEnqueueWriteBuffer");
    }
    err = clSetEventCallback(done, CL_COMPLETE, free_staging, staging);
    if (err != CL_SUCCESS) { /* cannot hand the staging copy over: wait, then free it */
        clWaitForEvents(1, &done);
        free(staging);
    }
    clReleaseEvent(done);
    COUNT(uploads, 1);
    COUNT(upload_bytes, bytes);
    return 0;
}

int ocl_download(const ocl_buffer *b, size_t offset, void *dst, size_t bytes)
{
    if (bytes == 0)
        return 0;
    pthread_mutex_lock(&launch_lock);
    cl_event done;
    cl_int err = clEnqueueReadBuffer(device.queue, b->mem, CL_FALSE, b->offset + offset, bytes, dst, 0, NULL, &done);
    pthread_mutex_unlock(&launch_lock);
    if (err != CL_SUCCESS)
        return ocl_check(err, "clEnqueueReadBuffer");
    /* Waiting on the event, not the queue, leaves other threads' launches running. */
    err = clWaitForEvents(1, &done);
    clReleaseEvent(done);
    COUNT(downloads, 1);
    COUNT(waits, 1);
    COUNT(download_bytes, bytes);
    return ocl_check(err, "clEnqueueReadBuffer (waiting)");
}

int ocl_finish(void)
{
    COUNT(waits, 1);
    return ocl_check(clFinish(device.queue), "clFinish");
}

void ocl_lock_queue(void) { pthread_mutex_lock(&launch_lock); }
void ocl_unlock_queue(void) { pthread_mutex_unlock(&launch_lock); }

/* ---- programs ---- */

typedef struct program {
    uint64_t hash;
    char *source;
    cl_program program;
    int nkernels;
    struct {
        char *name;
        cl_kernel kernel;
    } kernels[8];
    struct program *next;
} program;

#define PROGRAM_BUCKETS 1024
static program *programs[PROGRAM_BUCKETS];
static pthread_mutex_t programs_lock = PTHREAD_MUTEX_INITIALIZER;

uint64_t ocl_hash(uint64_t h, const void *data, size_t size)
{
    const unsigned char *b = data;
    for (size_t i = 0; i < size; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static program *program_build(const char *source, uint64_t hash)
{
    program *p = calloc(1, sizeof *p);
    char *copy = strdup(source);
    if (!p || !copy) {
        free(p);
        free(copy);
        fl_backend_error(FL_ERR_MEMORY, "out of host memory for an OpenCL program");
        return NULL;
    }
    cl_int err;
    p->program = clCreateProgramWithSource(device.context, 1, &source, NULL, &err);
    if (err == CL_SUCCESS)
        err = clBuildProgram(p->program, 1, &device.id, device.build_options, NULL, NULL);
    COUNT(builds, 1);
    if (err != CL_SUCCESS) {
        char log[2048] = "";
        if (p->program)
            clGetProgramBuildInfo(p->program, device.id, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
        fl_backend_error(FL_ERR_BACKEND, "OpenCL program build failed on %s: %s (%d); build log:\n%.1500s",
                         device.name, ocl_error_name(err), err, log);
        if (p->program)
            clReleaseProgram(p->program);
        free(p);
        free(copy);
        return NULL;
    }
    p->hash = hash;
    p->source = copy;
    return p;
}

cl_kernel ocl_kernel(const char *source, const char *name)
{
    if (!ocl_device_get())
        return NULL;
    uint64_t hash = ocl_hash(OCL_HASH_SEED, source, strlen(source));
    pthread_mutex_lock(&programs_lock);
    program **bucket = &programs[hash % PROGRAM_BUCKETS], *p = *bucket;
    while (p && (p->hash != hash || strcmp(p->source, source) != 0))
        p = p->next;
    if (!p) {
        /* OpenCL compilers are not all safe to run on two threads at once (PoCL's
         * LLVM passes are not), and CLBlast compiles its kernels inside its calls,
         * which hold the launch lock: builds hold it too. */
        pthread_mutex_lock(&launch_lock);
        p = program_build(source, hash);
        pthread_mutex_unlock(&launch_lock);
        if (!p) {
            pthread_mutex_unlock(&programs_lock);
            return NULL;
        }
        p->next = *bucket;
        *bucket = p;
    }
    cl_kernel kernel = NULL;
    for (int i = 0; i < p->nkernels && !kernel; i++)
        if (strcmp(p->kernels[i].name, name) == 0)
            kernel = p->kernels[i].kernel;
    if (!kernel) {
        cl_int err = CL_INVALID_KERNEL_NAME;
        char *copy = p->nkernels < 8 ? strdup(name) : NULL;
        if (copy) {
            pthread_mutex_lock(&launch_lock);
            kernel = clCreateKernel(p->program, name, &err);
            pthread_mutex_unlock(&launch_lock);
        }
        if (kernel) {
            p->kernels[p->nkernels].name = copy;
            p->kernels[p->nkernels++].kernel = kernel;
        } else {
            free(copy);
            ocl_check(err, "clCreateKernel");
        }
    }
    pthread_mutex_unlock(&programs_lock);
    return kernel;
}

/* ---- launches ---- */

static int set_args(cl_kernel kernel, int nargs, const ocl_arg *args)
{
    for (int i = 0; i < nargs; i++) {
        cl_int err = clSetKernelArg(kernel, (cl_uint)i, args[i].size, args[i].value);
        if (err != CL_SUCCESS)
            return err;
    }
    return CL_SUCCESS;
}

int ocl_launch_nd(const char *operation, cl_kernel kernel, int dims, const size_t *global, const size_t *local,
                  int nargs, const ocl_arg *args)
{
    for (int d = 0; d < dims; d++)
        if (global[d] == 0)
            return 0;
    pthread_mutex_lock(&launch_lock);
    cl_int err = set_args(kernel, nargs, args);
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(device.queue, kernel, (cl_uint)dims, NULL, global, local, 0, NULL, NULL);
    pthread_mutex_unlock(&launch_lock);
    if (err != CL_SUCCESS)
        return ocl_check(err, operation);
    COUNT(launches, 1);
    size_t run[4] = {(size_t)(uintptr_t)kernel, 0, 0, 0}; /* the kernel and its work-group size */
    for (int d = 0; d < dims && local; d++)
        run[1 + d] = local[d];
    ocl_first_run_done(ocl_hash(OCL_HASH_SEED, run, sizeof run));
    return 0;
}

int ocl_launch(const char *operation, cl_kernel kernel, size_t global, int nargs, const ocl_arg *args)
{
    size_t local = device.local_size;
    size_t rounded = (global + local - 1) / local * local;
    return ocl_launch_nd(operation, kernel, 1, &rounded, &local, nargs, args);
}

ocl_counters ocl_counters_get(void)
{
    ocl_counters c; /* each field exact; they may be read at slightly different moments */
#define LOAD(f) c.f = __atomic_load_n(&counters.f, __ATOMIC_RELAXED)
    LOAD(uploads), LOAD(downloads), LOAD(upload_bytes), LOAD(download_bytes), LOAD(launches), LOAD(builds),
        LOAD(waits);
#undef LOAD
    return c;
}

/* ---- the public API (flare/opencl.h) ---- */

const char *fl_opencl_device(void)
{
    pthread_once(&once, init);
    return ready ? device.name : NULL;
}

const char *fl_opencl_unavailable(void)
{
    pthread_once(&once, init);
    return ready ? NULL : init_message;
}

fl_opencl_counters fl_opencl_counters_get(void)
{
    return fl_opencl_device() ? ocl_counters_get() : (fl_opencl_counters){0};
}

fl_memory_manager *fl_opencl_memory(void) { return fl_opencl_device() ? device.memory : NULL; }
