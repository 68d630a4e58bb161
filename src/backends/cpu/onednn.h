/*
 * What the cpu backend's oneDNN primitives share (conv.c, matmul.c): the CPU engine,
 * their attributes, and caches of plans. Building a primitive costs far more than
 * running a small one, so each kernel keeps what it built for a shape in a cache of
 * its own and builds again only for a shape it has not seen lately.
 */
#ifndef FLARE_CPU_ONEDNN_H
#define FLARE_CPU_ONEDNN_H

#include <dnnl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The engine every primitive runs on, made once; NULL after an fl_backend_error. */
dnnl_engine_t cpu_onednn_engine(void);

/* Whether oneDNN runs its AVX-512 kernels here (avx512_core or better). */
bool cpu_onednn_has_avx512(void);

/* An error for a failed oneDNN call (status), naming what failed. */
int cpu_onednn_error(dnnl_status_t status, const char *what);

/* Attributes under which a primitive leaves its scratch space to the caller, who takes
 * it from the memory manager per call: concurrent calls then never share it, and a
 * caching manager hands the same pages back call after call. */
dnnl_status_t cpu_onednn_user_scratchpad(dnnl_primitive_attr_t *attr);

/* A cache of plans (whatever a kernel builds once per key), least recently used out.
 * Keys are compared bytewise, padding included: zero a key before filling it. A plan
 * in use is never evicted; when every slot is busy, a new plan lives for one call. */
#define CPU_PLAN_SLOTS 32
typedef struct cpu_plan_slot {
    void *plan;
    void *key;
    int users;
    uint64_t last_use;
} cpu_plan_slot;

typedef struct cpu_plan_cache {
    size_t key_size;
    void (*destroy)(void *plan);
    pthread_mutex_t lock;
    uint64_t clock;
    cpu_plan_slot slots[CPU_PLAN_SLOTS];
} cpu_plan_cache;

#define CPU_PLAN_CACHE(key_type, destroy_plan) \
    {.key_size = sizeof(key_type), .destroy = (destroy_plan), .lock = PTHREAD_MUTEX_INITIALIZER}

/* The plan for key, from the cache or else from build(key), which returns NULL after an
 * fl_backend_error; in use until cpu_plan_release. */
void *cpu_plan_acquire(cpu_plan_cache *cache, const void *key, void *(*build)(const void *key));
void cpu_plan_release(cpu_plan_cache *cache, void *plan);

#endif
