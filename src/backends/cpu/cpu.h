/*
 * The CPU backend's per-tensor state and the helpers its kernel files share.
 *
 * A tensor is a strided view of reference-counted storage: views (reshape of a
 * contiguous tensor, permute, expand, slice) share storage and never copy. Kernels
 * take the fast path when their operands are contiguous and otherwise either walk
 * the strides or ask for a dense copy with cpu_dense().
 *
 * Each kernel family lives in its own file and fills its entries of the table in a
 * cpu_register_*() function called from cpu.c.
 */
#ifndef FLARE_CPU_H
#define FLARE_CPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "flare/backend.h"
#include "flare/memory.h"

typedef struct cpu_storage {
    void *data;
    size_t bytes;
    int refcount;
    fl_memory_manager *owner; /* the manager that allocated data */
} cpu_storage;

typedef struct cpu_tensor {
    cpu_storage *storage;
    int64_t offset; /* in elements */
    int64_t strides[FL_MAX_DIMS]; /* in elements; 0 for broadcast axes */
    bool contiguous; /* row-major dense from offset: the fast path */
} cpu_tensor;

static inline size_t cpu_element_size(fl_dtype d)
{
    static const unsigned char sizes[FL_DTYPE_COUNT] = {1, 1, 4, 8, 2, 2, 4, 8};
    return sizes[d];
}

static inline cpu_tensor *cpu_impl(const fl_tensor *t) { return (cpu_tensor *)t->impl; }

/* The address of t's first element (at its offset). */
static inline void *cpu_data(const fl_tensor *t)
{
    const cpu_tensor *c = (const cpu_tensor *)t->impl;
    return (char *)c->storage->data + c->offset * (int64_t)cpu_element_size(t->dtype);
}

static inline bool cpu_contiguous(const fl_tensor *t) { return ((const cpu_tensor *)t->impl)->contiguous; }

/* Gives out fresh, contiguous, uninitialized storage. Returns 0 or an fl_status. */
int cpu_alloc(fl_tensor *out);
/* Makes out a view of base's storage with the given offset and strides (elements). */
int cpu_view(fl_tensor *out, const fl_tensor *base, int64_t offset, const int64_t *strides);
/* Row-major strides of a shape. */
void cpu_dense_strides(int ndim, const int64_t *shape, int64_t *strides);

/* dst[i...] = src[i...] over shape, both given by their first element and strides (in
 * elements of `size` bytes): one copy for every layout pair. Axes are merged where both
 * sides step evenly, and dense inner runs are memcpy'd. */
void cpu_copy_strided(void *dst, const int64_t *dst_strides, const void *src, const int64_t *src_strides, int ndim,
                      const int64_t *shape, size_t size);
/* Copies t's values, row-major, into dst (numel elements of t's dtype). */
void cpu_copy_to_dense(void *dst, const fl_tensor *t);
/* Copies src's values (dense, row-major, dst's dtype and shape) into the strided view
 * dst; the inverse of cpu_copy_to_dense. */
void cpu_copy_from_dense(const fl_tensor *dst, const void *src);
/* A dense pointer to t's values: its own data when contiguous, else a copy made in
 * *scratch, which the caller frees with cpu_scratch_free (it may stay NULL).
 * Returns NULL if the copy cannot be allocated. */
const void *cpu_dense(const fl_tensor *t, void **scratch);
/* cpu_dense of count tensors into data[k] and scratch[k]; on failure everything made
 * is freed and an FL_ERR_MEMORY error returned. cpu_scratch_free_all frees them. */
int cpu_dense_all(int count, const fl_tensor *const *in, const void **data, void **scratch);
void cpu_scratch_free_all(int count, void **scratch);
void *cpu_scratch_alloc(size_t bytes);
void cpu_scratch_free(void *scratch);

/* The thread count for kernels, applied to OpenMP (and so to oneDNN) when it changes. */
int cpu_threads(void);

/* conv.c: the algorithm of f32 convolutions. Winograd (the default) where oneDNN has a
 * kernel for the shape, direct elsewhere; FLARE_CONV_ALGORITHM=direct sets direct. */
typedef enum cpu_conv_algorithm { CPU_CONV_DIRECT, CPU_CONV_WINOGRAD } cpu_conv_algorithm;
void cpu_conv_set_algorithm(cpu_conv_algorithm a);
cpu_conv_algorithm cpu_conv_get_algorithm(void);

/* Below this many elements an elementwise kernel runs on one thread: waking the
 * team costs more than the work. */
#define CPU_PARALLEL_GRAIN 32768

/* Marks a loop that streams memory with a cheap operation per element (add, a row
 * sum): the compiler vectorizes it with 256-bit registers even where the machine has
 * 512-bit ones. Such a loop waits on memory either way, and on CPUs that split
 * 512-bit operations in two (AMD Zen 4) the wider registers only cost it. Loops with
 * arithmetic to do (exp, column sums, convolutions) keep the full width, which pays
 * there. docs/BENCHMARKS.md ("Vector width") has the A/B and its command. GCC on x86
 * only: elsewhere the mark does nothing. */
#if defined(__GNUC__) && !defined(__clang__) && (defined(__x86_64__) || defined(__i386__))
#define CPU_STREAMING __attribute__((target("prefer-vector-width=256")))
#else
#define CPU_STREAMING
#endif

/* Kernel families (each in its own file). */
void cpu_register_core(fl_backend *b);        /* cpu.c: data movement, views */
void cpu_register_linalg(fl_backend *b);      /* matmul.c, conv.c: OpenBLAS and oneDNN */
void cpu_register_conv(fl_backend *b);        /* conv.c */

/* The families whose loops the compiler vectorizes. An installed library must run on
 * any x86-64 and still use AVX-512 where the machine has it, so unless the build is
 * for this machine only (FLARE_NATIVE), CMakeLists.txt compiles these files once per
 * instruction set of CPU_VARIANTS, with CPU_VARIANT naming the variant; each
 * compilation names its functions for it (cpu_register_random_x86_64_v4), and cpu.c
 * registers the best variant the machine runs. Their files keep no state, so
 * whichever variant runs, there is one of everything else. */
#define CPU_FAMILIES(X, variant)                                                                  \
    X(convert, variant) X(random, variant) X(elementwise, variant) X(reduce, variant) X(index, variant) \
    X(pool, variant) X(softmax, variant) X(batch_norm, variant) X(gelu, variant) X(lstm, variant)
/* X(name, ISA level): best first; the last runs anywhere. */
#define CPU_VARIANTS(X) X(x86_64_v4, "x86-64-v4") X(x86_64_v3, "x86-64-v3") X(x86_64, "x86-64")

#define CPU_JOIN_(a, b) a##_##b
#define CPU_JOIN(a, b) CPU_JOIN_(a, b)
#ifdef CPU_VARIANT
#define cpu_register_convert CPU_JOIN(cpu_register_convert, CPU_VARIANT)
#define cpu_register_random CPU_JOIN(cpu_register_random, CPU_VARIANT)
#define cpu_register_elementwise CPU_JOIN(cpu_register_elementwise, CPU_VARIANT)
#define cpu_register_reduce CPU_JOIN(cpu_register_reduce, CPU_VARIANT)
#define cpu_register_index CPU_JOIN(cpu_register_index, CPU_VARIANT)
#define cpu_register_pool CPU_JOIN(cpu_register_pool, CPU_VARIANT)
#define cpu_register_softmax CPU_JOIN(cpu_register_softmax, CPU_VARIANT)
#define cpu_register_batch_norm CPU_JOIN(cpu_register_batch_norm, CPU_VARIANT)
#define cpu_register_gelu CPU_JOIN(cpu_register_gelu, CPU_VARIANT)
#define cpu_register_lstm CPU_JOIN(cpu_register_lstm, CPU_VARIANT)
#define cpu_sort CPU_JOIN(cpu_sort, CPU_VARIANT)
#endif
void cpu_register_convert(fl_backend *b);     /* convert.c: full and cast */
void cpu_register_random(fl_backend *b);      /* random.c */
void cpu_register_elementwise(fl_backend *b); /* elementwise.c */
void cpu_register_reduce(fl_backend *b);      /* reduce.c, sort.c */
int cpu_sort(const fl_backend *self, fl_tensor *values, fl_tensor *indices, const fl_tensor *a, int axis,
             bool descending); /* sort.c */
void cpu_register_index(fl_backend *b);       /* index.c: arange, concat, update_slice, where, gather, ... */
void cpu_register_pool(fl_backend *b);        /* pool.c */
void cpu_register_softmax(fl_backend *b);     /* softmax.c: the fused softmax and cross-entropy gradient */
void cpu_register_batch_norm(fl_backend *b);  /* batchnorm.c: the optional fused batch norm */
void cpu_register_gelu(fl_backend *b);        /* gelu.c: the optional fused GELU */
void cpu_register_lstm(fl_backend *b);        /* lstm.c: the optional fused LSTM cell */

/* The instruction set of the kernel families in use ("x86-64-v4", ...; "native" in a
 * build for this machine only). FLARE_CPU_KERNELS names a lower one to use instead. */
const char *cpu_kernels(void);

#endif
