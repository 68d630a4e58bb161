/* The CPU backend: its table, storage, views and dense copies. */
#include "cpu.h"

#include "flare/config.h"

#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* ---- storage and views ---- */

static void storage_release(cpu_storage *s)
{
    if (__atomic_sub_fetch(&s->refcount, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    if (s->data)
        fl_memory_free(s->owner, s->data, s->bytes);
    free(s);
}

/* A fresh tensor and its storage live in one block, the storage first, so that making
 * and releasing a small tensor costs one malloc and one free besides its data. The
 * block is freed with the storage; views (made by cpu_view) have their own. */
typedef struct cpu_block {
    cpu_storage storage;
    cpu_tensor tensor;
} cpu_block;

static void cpu_release(const fl_backend *self, fl_tensor *t)
{
    cpu_tensor *c = t->impl;
    cpu_storage *s = c->storage;
    bool embedded = c == &((cpu_block *)s)->tensor;
    storage_release(s);
    if (!embedded)
        free(c);
    t->impl = NULL;
}

void cpu_dense_strides(int ndim, const int64_t *shape, int64_t *strides)
{
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= shape[i] > 1 ? shape[i] : 1;
    }
}

/* Large buffers fresh from the system are faulted in 4 KiB at a time on first touch,
 * which costs more than an elementwise kernel's arithmetic; asking for transparent
 * huge pages (where the system leaves them to madvise) cuts the faults 512-fold.
 * Buffers a caching manager hands out again are already mapped and unaffected. */
static void advise_huge_pages(void *data, size_t bytes)
{
#ifdef MADV_HUGEPAGE
    enum { HUGE_PAGE = 2 << 20 };
    if (bytes < 4 * (size_t)HUGE_PAGE)
        return;
    uintptr_t begin = ((uintptr_t)data + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
    uintptr_t end = ((uintptr_t)data + bytes) & ~(uintptr_t)(HUGE_PAGE - 1);
    madvise((void *)begin, end - begin, MADV_HUGEPAGE); /* advice only: failure is harmless */
#else
    (void)data;
    (void)bytes;
#endif
}

int cpu_alloc(fl_tensor *out)
{
    cpu_block *block = malloc(sizeof *block);
    size_t bytes = (size_t)out->numel * cpu_element_size(out->dtype);
    void *data = NULL;
    fl_memory_manager *owner = NULL;
    if (block && bytes > 0)
        data = fl_memory_alloc(bytes, &owner);
    if (!block || (bytes > 0 && !data)) {
        free(block);
        return fl_backend_error(FL_ERR_MEMORY, "cannot allocate %zu bytes", bytes);
    }
    advise_huge_pages(data, bytes);
    block->storage = (cpu_storage){.data = data, .bytes = bytes, .refcount = 1, .owner = owner};
    cpu_tensor *c = &block->tensor;
    c->storage = &block->storage;
    c->offset = 0;
    c->contiguous = true;
    cpu_dense_strides(out->ndim, out->shape, c->strides);
    out->impl = c;
    return 0;
}

static bool strides_are_dense(int ndim, const int64_t *shape, const int64_t *strides)
{
    int64_t expected = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        if (shape[i] != 1 && strides[i] != expected)
            return false;
        expected *= shape[i];
    }
    return true;
}

int cpu_view(fl_tensor *out, const fl_tensor *base, int64_t offset, const int64_t *strides)
{
    cpu_tensor *c = malloc(sizeof *c);
    if (!c)
        return fl_backend_error(FL_ERR_MEMORY, "cannot allocate a view");
    cpu_tensor *b = cpu_impl(base);
    c->storage = b->storage;
    __atomic_add_fetch(&c->storage->refcount, 1, __ATOMIC_RELAXED);
    c->offset = offset;
    memcpy(c->strides, strides, (size_t)out->ndim * sizeof *strides);
    c->contiguous = strides_are_dense(out->ndim, out->shape, strides);
    out->impl = c;
    return 0;
}

/* ---- threads ---- */

int cpu_threads(void)
{
    static int applied;
    int n = fl_num_threads();
    if (n != __atomic_load_n(&applied, __ATOMIC_RELAXED)) {
        omp_set_num_threads(n);
        __atomic_store_n(&applied, n, __ATOMIC_RELAXED);
    }
    return n;
}

/* ---- strided copies ---- */

/* A copy of one shape between two strided layouts, reduced to the fewest axes: size-1
 * axes dropped, and neighbours merged where both sides step evenly over them. */
typedef struct copy_plan {
    int ndim;
    int64_t shape[FL_MAX_DIMS];
    int64_t dst[FL_MAX_DIMS], src[FL_MAX_DIMS]; /* strides in elements */
} copy_plan;

static copy_plan plan_copy(int ndim, const int64_t *shape, const int64_t *dst_strides, const int64_t *src_strides)
{
    copy_plan p = {0};
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 1)
            continue;
        int last = p.ndim - 1;
        if (last >= 0 && p.dst[last] == dst_strides[i] * shape[i] && p.src[last] == src_strides[i] * shape[i]) {
            p.shape[last] *= shape[i];
            p.dst[last] = dst_strides[i];
            p.src[last] = src_strides[i];
        } else {
            p.shape[p.ndim] = shape[i];
            p.dst[p.ndim] = dst_strides[i];
            p.src[p.ndim] = src_strides[i];
            p.ndim++;
        }
    }
    if (p.ndim == 0) {
        p.ndim = 1;
        p.shape[0] = 1;
        p.dst[0] = p.src[0] = 1;
    }
    return p;
}

/* A row of a strided copy; a broadcast source (step 0) into a dense row is a fill,
 * which vectorizes (a gradient scattered into a broadcast zero). */
#define COPY_ROW(type)                                          \
    do {                                                        \
        type *d_ = (type *)d;                                   \
        const type *s_ = (const type *)s;                       \
        if (dst_step == 1 && src_step == 0) {                   \
            const type v_ = *s_;                                \
            for (int64_t j = 0; j < inner; j++)                 \
                d_[j] = v_;                                     \
        } else {                                                \
            for (int64_t j = 0; j < inner; j++)                 \
                d_[j * dst_step] = s_[j * src_step];            \
        }                                                       \
    } while (0)

void cpu_copy_strided(void *dst, const int64_t *dst_strides, const void *src, const int64_t *src_strides,
                         int ndim, const int64_t *shape, size_t size)
{
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++)
        numel *= shape[i];
    if (numel == 0)
        return;
    copy_plan p = plan_copy(ndim, shape, dst_strides, src_strides);
    int64_t inner = p.shape[p.ndim - 1], dst_step = p.dst[p.ndim - 1], src_step = p.src[p.ndim - 1];
    int64_t rows = numel / inner;
    int threads = rows > 1 && numel >= CPU_PARALLEL_GRAIN ? cpu_threads() : 1;
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        int64_t dst_offset = 0, src_offset = 0, rest = r;
        for (int i = p.ndim - 2; i >= 0; i--) {
            int64_t coord = rest % p.shape[i];
            rest /= p.shape[i];
            dst_offset += coord * p.dst[i];
            src_offset += coord * p.src[i];
        }
        char *d = (char *)dst + dst_offset * (int64_t)size;
        const char *s = (const char *)src + src_offset * (int64_t)size;
        if (dst_step == 1 && src_step == 1) {
            memcpy(d, s, (size_t)inner * size);
            continue;
        }
        switch (size) {
        case 1: COPY_ROW(uint8_t); break;
        case 2: COPY_ROW(uint16_t); break;
        case 4: COPY_ROW(uint32_t); break;
        default: COPY_ROW(uint64_t); break;
        }
    }
}

void cpu_copy_to_dense(void *dst, const fl_tensor *t)
{
    size_t size = cpu_element_size(t->dtype);
    if (cpu_contiguous(t)) {
        memcpy(dst, cpu_data(t), (size_t)t->numel * size);
        return;
    }
    int64_t dense[FL_MAX_DIMS];
    cpu_dense_strides(t->ndim, t->shape, dense);
    cpu_copy_strided(dst, dense, cpu_data(t), cpu_impl(t)->strides, t->ndim, t->shape, size);
}

void cpu_copy_from_dense(const fl_tensor *dst, const void *src)
{
    size_t size = cpu_element_size(dst->dtype);
    if (cpu_contiguous(dst)) {
        memcpy(cpu_data(dst), src, (size_t)dst->numel * size);
        return;
    }
    int64_t dense[FL_MAX_DIMS];
    cpu_dense_strides(dst->ndim, dst->shape, dense);
    cpu_copy_strided(cpu_data(dst), cpu_impl(dst)->strides, src, dense, dst->ndim, dst->shape, size);
}

/* Scratch comes from the memory manager, like tensor storage: the caching manager hands
 * back warm pages (a fresh multi-megabyte block costs thousands of page faults), and
 * telemetry sees it. A header just below the block remembers how to free it. */
typedef struct scratch_header {
    fl_memory_manager *owner;
    size_t bytes;
} scratch_header;

#define SCRATCH_HEADER FL_MEMORY_ALIGNMENT /* keeps the block aligned */
_Static_assert(sizeof(scratch_header) <= SCRATCH_HEADER, "the scratch header fits its slot");

void *cpu_scratch_alloc(size_t bytes)
{
    fl_memory_manager *owner;
    size_t total = SCRATCH_HEADER + bytes;
    char *block = fl_memory_alloc(total, &owner);
    if (!block)
        return NULL;
    *(scratch_header *)block = (scratch_header){owner, total};
    return block + SCRATCH_HEADER;
}

void cpu_scratch_free(void *scratch)
{
    if (!scratch)
        return;
    char *block = (char *)scratch - SCRATCH_HEADER;
    scratch_header header = *(scratch_header *)block;
    fl_memory_free(header.owner, block, header.bytes);
}

const void *cpu_dense(const fl_tensor *t, void **scratch)
{
    *scratch = NULL;
    if (cpu_contiguous(t))
        return cpu_data(t);
    *scratch = cpu_scratch_alloc((size_t)t->numel * cpu_element_size(t->dtype) + 1);
    if (!*scratch)
        return NULL;
    cpu_copy_to_dense(*scratch, t);
    return *scratch;
}

int cpu_dense_all(int count, const fl_tensor *const *in, const void **data, void **scratch)
{
    for (int k = 0; k < count; k++) {
        if (!(data[k] = cpu_dense(in[k], &scratch[k]))) {
            cpu_scratch_free_all(k, scratch);
            return fl_backend_error(FL_ERR_MEMORY, "cannot allocate a dense copy of %lld elements",
                                    (long long)in[k]->numel);
        }
    }
    return 0;
}

void cpu_scratch_free_all(int count, void **scratch)
{
    for (int k = 0; k < count; k++)
        cpu_scratch_free(scratch[k]);
}

/* ---- data movement ---- */

static int cpu_from_host(const fl_backend *self, fl_tensor *out, const void *src)
{
    int rc = cpu_alloc(out);
    if (rc == 0 && out->numel > 0)
        memcpy(cpu_data(out), src, (size_t)out->numel * cpu_element_size(out->dtype));
    return rc;
}

static int cpu_to_host(const fl_backend *self, const fl_tensor *t, void *dst)
{
    cpu_copy_to_dense(dst, t);
    return 0;
}

static int cpu_empty(const fl_backend *self, fl_tensor *out) { return cpu_alloc(out); }

static int cpu_host_data(const fl_backend *self, const fl_tensor *t, void **data)
{
    if (!cpu_contiguous(t))
        return FL_ERR_UNSUPPORTED;
    *data = cpu_data(t);
    return 0;
}

/* ---- views ---- */

static int cpu_reshape(const fl_backend *self, fl_tensor *out, const fl_tensor *a)
{
    int64_t strides[FL_MAX_DIMS];
    if (fl_view_strides(a, cpu_impl(a)->strides, out->ndim, out->shape, strides))
        return cpu_view(out, a, cpu_impl(a)->offset, strides);
    int rc = cpu_alloc(out);
    if (rc == 0)
        cpu_copy_to_dense(cpu_data(out), a);
    return rc;
}

static int cpu_permute(const fl_backend *self, fl_tensor *out, const fl_tensor *a, const int *axes)
{
    int64_t strides[FL_MAX_DIMS];
    for (int i = 0; i < out->ndim; i++)
        strides[i] = cpu_impl(a)->strides[axes[i]];
    return cpu_view(out, a, cpu_impl(a)->offset, strides);
}

static int cpu_expand(const fl_backend *self, fl_tensor *out, const fl_tensor *a)
{
    int64_t strides[FL_MAX_DIMS];
    for (int i = 0; i < out->ndim; i++)
        strides[i] = a->shape[i] == out->shape[i] ? cpu_impl(a)->strides[i] : 0;
    return cpu_view(out, a, cpu_impl(a)->offset, strides);
}

static int cpu_slice(const fl_backend *self, fl_tensor *out, const fl_tensor *a, const int64_t *start, const int64_t *step)
{
    const cpu_tensor *c = cpu_impl(a);
    int64_t offset = c->offset, strides[FL_MAX_DIMS];
    for (int i = 0; i < out->ndim; i++) {
        offset += start[i] * c->strides[i];
        strides[i] = c->strides[i] * step[i];
    }
    return cpu_view(out, a, offset, strides);
}

void cpu_register_core(fl_backend *b)
{
    b->release = cpu_release;
    b->from_host = cpu_from_host;
    b->to_host = cpu_to_host;
    b->empty = cpu_empty;
    b->host_data = cpu_host_data;
    b->reshape = cpu_reshape;
    b->permute = cpu_permute;
    b->expand = cpu_expand;
    b->slice = cpu_slice;
}

/* ---- the table, with the kernel families of the best instruction set ---- */

typedef void (*family_register)(fl_backend *b);
#define FAMILY_SLOT(family, variant) NULL,
#define FAMILY_COUNT (sizeof(family_register[]){CPU_FAMILIES(FAMILY_SLOT, _)} / sizeof(family_register))

typedef struct kernel_variant {
    const char *isa;
    family_register families[FAMILY_COUNT];
} kernel_variant;

#ifdef FLARE_CPU_DISPATCH
#define DECLARE_FAMILY(family, variant) void CPU_JOIN(cpu_register_##family, variant)(fl_backend * b);
#define DECLARE_VARIANT(variant, isa) CPU_FAMILIES(DECLARE_FAMILY, variant)
CPU_VARIANTS(DECLARE_VARIANT)
#define FAMILY_OF(family, variant) CPU_JOIN(cpu_register_##family, variant),
#define VARIANT_ENTRY(variant, isa) {isa, {CPU_FAMILIES(FAMILY_OF, variant)}},
static const kernel_variant variants[] = {CPU_VARIANTS(VARIANT_ENTRY)};

/* Whether the machine runs code built for x86-64-v3 and -v4. GCC's builtin knows the
 * levels; clang's (14) knows only features, so there the level is its features that
 * compiled code uses, among those clang can test (F16C and MOVBE came with or before
 * AVX2 in every processor). */
#if defined(__clang__)
#define RUNS_X86_64_V3                                                                                \
    (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi") && \
     __builtin_cpu_supports("bmi2"))
#define RUNS_X86_64_V4                                                                                      \
    (RUNS_X86_64_V3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&           \
     __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
#else
#define RUNS_X86_64_V3 __builtin_cpu_supports("x86-64-v3")
#define RUNS_X86_64_V4 __builtin_cpu_supports("x86-64-v4")
#endif

/* The first variant the machine runs and the settings allow: FLARE_CPU_KERNELS may
 * name a lower instruction set, to compare them or to test one. */
static const kernel_variant *chosen_variant(void)
{
    __builtin_cpu_init();
    const char *wanted = fl_config_current()->cpu_kernels;
    size_t count = sizeof variants / sizeof variants[0], first = 0;
    if (RUNS_X86_64_V4)
        first = 0;
    else if (RUNS_X86_64_V3)
        first = 1;
    else
        first = count - 1;
    for (size_t i = first; wanted && *wanted && i < count; i++)
        if (strcmp(variants[i].isa, wanted) == 0)
            return &variants[i];
    return &variants[first];
}
#else
#define FAMILY_OF(family, variant) cpu_register_##family,
static const kernel_variant native = {"native", {CPU_FAMILIES(FAMILY_OF, _)}};
static const kernel_variant *chosen_variant(void) { return &native; }
#endif

static fl_backend cpu_backend = {.version = FL_BACKEND_VERSION, .table_size = sizeof(fl_backend), .name = "cpu"};
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;
static const kernel_variant *kernels;

static void cpu_init(void)
{
    kernels = chosen_variant();
    cpu_register_core(&cpu_backend);
    cpu_register_linalg(&cpu_backend);
    for (size_t i = 0; i < FAMILY_COUNT; i++)
        kernels->families[i](&cpu_backend);
}

const char *cpu_kernels(void)
{
    pthread_once(&cpu_once, cpu_init);
    return kernels->isa;
}

const fl_backend *fl_cpu_backend(void)
{
    pthread_once(&cpu_once, cpu_init);
    return &cpu_backend;
}
