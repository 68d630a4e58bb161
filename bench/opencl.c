/*
 * What the opencl backend costs per operation, next to what OpenCL itself costs per
 * kernel launch on the same device, in one process (make bench-opencl):
 *
 *  - Flare: --ops adds of tensors of --elements elements chained (y = y + x), then one
 *    read of y, timed together: what a program pays per small operation. f32 adds are
 *    fused by the backend (a pending graph runs as one kernel every few dozen
 *    operations), i32 adds are enqueued one kernel each; the device's counters say how
 *    many launches, transfers and program builds each took.
 *  - OpenCL: the same number of clEnqueueNDRangeKernel calls of an empty kernel, and of
 *    a one-line add of --elements ints (its three arguments set before each launch, as
 *    Flare does), on the backend's own queue, then one clFinish: the launch cost of the
 *    OpenCL implementation, which no framework on it can go below.
 *  - cpu: the same f32 chain on the cpu backend, for scale.
 *
 *     bench_opencl [--ops N] [--elements E] [--repeats R]
 *
 * Prints one JSON object: the device's name and, for each case, the median over
 * --repeats runs (after one run to warm up) of the seconds per operation. With PoCL
 * the device is this machine's CPU: the numbers are host-side costs, not a GPU's.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/opencl/runtime.h"
#include "flare/tensor.h"
#include "cli.h"
#include "timing.h"

typedef struct options {
    int64_t ops, elements;
    int repeats;
} options;

static void parse_args(int argc, char **argv, options *o)
{
    *o = (options){.ops = 10000, .elements = 16, .repeats = 5};
    enum { OPS = 256, ELEMENTS, REPEATS };
    static const struct option long_options[] = {
        {"ops", required_argument, NULL, OPS},
        {"elements", required_argument, NULL, ELEMENTS},
        {"repeats", required_argument, NULL, REPEATS},
        {0},
    };
    cli c = {.program = "bench_opencl", .usage = "bench_opencl [--ops N] [--elements E] [--repeats R]",
             .options = long_options};
    for (int key; (key = cli_next(&c, argc, argv)) != -1;)
        switch (key) {
        case OPS: o->ops = cli_integer(&c, 1, 10000000); break;
        case ELEMENTS: o->elements = cli_integer(&c, 1, 1 << 24); break;
        case REPEATS: o->repeats = (int)cli_integer(&c, 1, 1000); break;
        }
}

static int fail(const char *what)
{
    fprintf(stderr, "bench_opencl: %s: %s\n", what, fl_last_error());
    return 1;
}

/* ---- Flare: a chain of adds, then one read ---- */

typedef struct chain_result {
    double seconds;       /* per operation */
    double launches, uploads, downloads, builds; /* per run */
} chain_result;

/* One run: y = x, then ops times y = y + x, then y read back; false on an error or a
 * wrong sum. Counters are read around it where the backend is opencl. */
static bool chain(const char *backend, fl_dtype dtype, const options *o, chain_result *r)
{
    /* No scope is open: each result is this function's to release at once. */
    fl_tensor *ones = fl_ones(dtype, 1, &o->elements);
    fl_tensor *x = ones ? fl_to_backend(ones, backend) : NULL;
    fl_release(ones);
    fl_tensor *y = x ? fl_retain(x) : NULL;
    bool opencl = strcmp(backend, "opencl") == 0;
    /* Everything x needs is on the device before the clock starts. */
    if (!y || fl_eval(y) != FL_OK || (opencl && ocl_finish() != 0)) {
        fl_release(x);
        fl_release(y);
        return false;
    }
    ocl_counters before = opencl ? ocl_counters_get() : (ocl_counters){0};
    double start = bench_now();
    for (int64_t i = 0; i < o->ops && y; i++) {
        fl_tensor *next = fl_add(y, x);
        fl_release(y);
        y = next;
    }
    double *values = malloc((size_t)o->elements * sizeof *values);
    fl_tensor *wide = y && values ? fl_cast(y, FL_F64) : NULL;
    bool read = wide && fl_to_host(wide, values, (size_t)o->elements * sizeof *values) == FL_OK;
    double seconds = bench_now() - start;
    ocl_counters after = opencl ? ocl_counters_get() : (ocl_counters){0};
    bool right = read;
    for (int64_t i = 0; right && i < o->elements; i++)
        right = values[i] == (double)(o->ops + 1);
    if (read && !right)
        fprintf(stderr, "bench_opencl: %s %s chain: %g, expected %g\n", backend, fl_dtype_name(dtype), values[0],
                (double)(o->ops + 1));
    free(values);
    fl_release(wide);
    fl_release(y);
    fl_release(x);
    *r = (chain_result){seconds / (double)o->ops, (double)(after.launches - before.launches),
                        (double)(after.uploads - before.uploads), (double)(after.downloads - before.downloads),
                        (double)(after.builds - before.builds)};
    return right;
}

/* The median of --repeats runs after one to warm up (kernels built, memory cached). */
static bool time_chain(const char *backend, fl_dtype dtype, const options *o, chain_result *median)
{
    chain_result warm, *runs = calloc((size_t)o->repeats, sizeof *runs);
    double *seconds = calloc((size_t)o->repeats, sizeof *seconds);
    bool ok = runs && seconds && chain(backend, dtype, o, &warm);
    for (int i = 0; ok && i < o->repeats; i++) {
        ok = chain(backend, dtype, o, &runs[i]);
        seconds[i] = runs[i].seconds;
    }
    if (ok) {
        *median = runs[o->repeats - 1]; /* the counters are the same every run */
        median->seconds = bench_median(seconds, o->repeats);
    }
    free(runs);
    free(seconds);
    return ok;
}

/* ---- Flare: a whole-tensor sum, the reduction with the fewest outputs ---- */

#define SUM_ELEMENTS 10000000

/* Seconds of one fl_sum over SUM_ELEMENTS f32 ones, read back: the median of --repeats
 * after one to warm up; negative on an error or a wrong sum. */
static double time_sum(const char *backend, const options *o)
{
    int64_t n = SUM_ELEMENTS;
    fl_tensor *ones = fl_ones(FL_F32, 1, &n);
    fl_tensor *x = ones ? fl_to_backend(ones, backend) : NULL;
    fl_release(ones);
    double *seconds = calloc((size_t)o->repeats + 1, sizeof *seconds);
    bool ok = x && seconds && fl_eval(x) == FL_OK;
    for (int i = 0; ok && i <= o->repeats; i++) {
        double start = bench_now();
        fl_tensor *total = fl_sum(x, FL_ALL_AXES, false);
        double value = total ? fl_item(total) : -1;
        seconds[i] = bench_now() - start;
        fl_release(total);
        ok = value == (double)n;
    }
    double median = ok ? bench_median(seconds + 1, o->repeats) : -1;
    free(seconds);
    fl_release(x);
    return median;
}

/* ---- Flare: per-call cost of kernels that are not elementwise ---- */

/* Microseconds per call of softmax (else a row sum) of a [4, 16] tensor, --ops calls
 * then one read, the median of --repeats after one to warm up; negative on an error. */
static double time_small(bool softmax, const options *o)
{
    fl_tensor *x = fl_ones(FL_F32, 2, (int64_t[]){4, 16});
    double *seconds = calloc((size_t)o->repeats + 1, sizeof *seconds);
    bool ok = x && seconds && fl_eval(x) == FL_OK;
    for (int r = 0; ok && r <= o->repeats; r++) {
        double start = bench_now();
        for (int64_t i = 0; ok && i < o->ops; i++) {
            fl_tensor *y = softmax ? fl_softmax(x, -1) : fl_sum(x, FL_AXES(1), false);
            ok = y != NULL;
            fl_release(y);
        }
        fl_tensor *total = ok ? fl_sum(x, FL_ALL_AXES, false) : NULL;
        ok = total && fl_item(total) == 64;
        fl_release(total);
        seconds[r] = (bench_now() - start) / (double)o->ops;
    }
    double median = ok ? bench_median(seconds + 1, o->repeats) : -1;
    free(seconds);
    fl_release(x);
    return median;
}

/* ---- OpenCL: bare launches on the backend's queue ---- */

static const char bare_source[] =
    "__kernel void empty(void) {}\n"
    "__kernel void add(__global const int *a, __global const int *b, __global int *c, int n)\n"
    "{\n"
    "    int i = get_global_id(0);\n"
    "    if (i < n)\n"
    "        c[i] = a[i] + b[i];\n"
    "}\n";

/* Seconds per launch of ops launches of kernel (with_arguments: the add, whose
 * arguments are set before each launch) and one clFinish; a negative value after an
 * OpenCL error, which is printed. */
static double bare_launches(ocl_device *d, cl_kernel kernel, bool with_arguments, cl_mem *buffers, int n,
                            int64_t ops)
{
    size_t global = (size_t)n;
    cl_int err = CL_SUCCESS;
    ocl_lock_queue();
    double start = bench_now();
    for (int64_t i = 0; i < ops && err == CL_SUCCESS; i++) {
        if (with_arguments) {
            for (int a = 0; a < 3 && err == CL_SUCCESS; a++)
                err = clSetKernelArg(kernel, (cl_uint)a, sizeof(cl_mem), &buffers[a]);
            if (err == CL_SUCCESS)
                err = clSetKernelArg(kernel, 3, sizeof n, &n);
        }
        if (err == CL_SUCCESS)
            err = clEnqueueNDRangeKernel(d->queue, kernel, 1, NULL, &global, NULL, 0, NULL, NULL);
    }
    if (err == CL_SUCCESS)
        err = clFinish(d->queue);
    double seconds = bench_now() - start;
    ocl_unlock_queue();
    if (err != CL_SUCCESS) {
        fprintf(stderr, "bench_opencl: a bare launch failed: %s\n", ocl_error_name(err));
        return -1;
    }
    return seconds / (double)ops;
}

static double time_bare(ocl_device *d, cl_kernel kernel, bool with_arguments, cl_mem *buffers, int n,
                        const options *o)
{
    double *seconds = calloc((size_t)o->repeats, sizeof *seconds);
    double result = seconds ? bare_launches(d, kernel, with_arguments, buffers, n, o->ops) : -1; /* warm-up */
    for (int i = 0; result >= 0 && i < o->repeats; i++)
        result = seconds[i] = bare_launches(d, kernel, with_arguments, buffers, n, o->ops);
    if (result >= 0)
        result = bench_median(seconds, o->repeats);
    free(seconds);
    return result;
}

static void print_chain(const char *name, const chain_result *r, const options *o, bool counters)
{
    printf(",\n  \"%s\": {\"us_per_op\": %.3f", name, 1e6 * r->seconds);
    if (counters)
        printf(", \"launches_per_op\": %.4f, \"launches\": %.0f, \"uploads\": %.0f, \"downloads\": %.0f, "
               "\"builds\": %.0f",
               r->launches / (double)o->ops, r->launches, r->uploads, r->downloads, r->builds);
    printf("}");
}

int main(int argc, char **argv)
{
    options o;
    parse_args(argc, argv, &o);
    ocl_device *d = ocl_device_get();
    if (!d) {
        fprintf(stderr, "bench_opencl: no OpenCL device: %s\n", fl_last_error());
        return 1;
    }
    chain_result f32, i32, cpu;
    if (!time_chain("opencl", FL_F32, &o, &f32))
        return fail("f32 adds on opencl");
    if (!time_chain("opencl", FL_I32, &o, &i32))
        return fail("i32 adds on opencl");
    if (!time_chain("cpu", FL_F32, &o, &cpu))
        return fail("f32 adds on cpu");
    double sum_opencl = time_sum("opencl", &o), sum_cpu = time_sum("cpu", &o);
    fl_set_default_backend("opencl");
    double small_softmax = time_small(true, &o), small_sum = time_small(false, &o);
    if (small_softmax < 0 || small_sum < 0)
        return fail("softmax and row sums of [4, 16]");
    if (sum_opencl < 0 || sum_cpu < 0)
        return fail("summing 10^7 ones");

    cl_kernel empty = ocl_kernel(bare_source, "empty"), add = empty ? ocl_kernel(bare_source, "add") : NULL;
    if (!add)
        return fail("building the bare kernels");
    int n = (int)o.elements;
    cl_mem buffers[3] = {NULL, NULL, NULL};
    cl_int err = CL_SUCCESS;
    for (int i = 0; i < 3 && err == CL_SUCCESS; i++)
        buffers[i] = clCreateBuffer(d->context, CL_MEM_READ_WRITE, (size_t)n * sizeof(cl_int), NULL, &err);
    double bare_empty = err == CL_SUCCESS ? time_bare(d, empty, false, buffers, n, &o) : -1;
    double bare_add = bare_empty >= 0 ? time_bare(d, add, true, buffers, n, &o) : -1;
    for (int i = 0; i < 3; i++)
        if (buffers[i])
            clReleaseMemObject(buffers[i]);
    if (err != CL_SUCCESS)
        fprintf(stderr, "bench_opencl: clCreateBuffer: %s\n", ocl_error_name(err));
    if (bare_add < 0)
        return 1;

    bool pocl = strstr(d->name, "Portable Computing Language") || strstr(d->name, "pocl");
    printf("{\"device\": \"");
    for (const char *c = d->name; *c; c++) /* a JSON string: quotes and backslashes escaped, controls dropped */
        if (*c == '"' || *c == '\\')
            printf("\\%c", *c);
        else if ((unsigned char)*c >= 0x20)
            putchar(*c);
    printf("\", \"pocl\": %s, \"ops\": %lld, \"elements\": %lld, \"repeats\": %d", pocl ? "true" : "false",
           (long long)o.ops, (long long)o.elements, o.repeats);
    print_chain("flare_add_f32", &f32, &o, true);
    print_chain("flare_add_i32", &i32, &o, true);
    printf(",\n  \"bare_empty_kernel\": {\"us_per_launch\": %.3f}", 1e6 * bare_empty);
    printf(",\n  \"bare_add_kernel\": {\"us_per_launch\": %.3f}", 1e6 * bare_add);
    print_chain("cpu_add_f32", &cpu, &o, false);
    printf(",\n  \"small_calls\": {\"softmax_4x16_us\": %.3f, \"row_sum_4x16_us\": %.3f}", 1e6 * small_softmax,
           1e6 * small_sum);
    printf(",\n  \"sum_f32\": {\"elements\": %d, \"opencl_ms\": %.3f, \"cpu_ms\": %.3f}", SUM_ELEMENTS,
           1e3 * sum_opencl, 1e3 * sum_cpu);
    /* What Flare adds to each launch: its unfused adds against the bare add. */
    printf(",\n  \"flare_over_bare_add_us\": %.3f", 1e6 * (i32.seconds - bare_add));
    printf(",\n  \"note\": \"%s\"}\n",
           pocl ? "PoCL runs these kernels on this machine's CPU: the numbers are host-side costs of Flare and of "
                  "PoCL's launches, not the speed of a GPU."
                : "Launch costs of this OpenCL device; a GPU's compute speed is not measured here.");
    return 0;
}
