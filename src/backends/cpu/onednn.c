/* The cpu backend's oneDNN engine and plan caches (onednn.h). */
#include "onednn.h"

#include <stdlib.h>
#include <string.h>

#include "cpu.h"

static dnnl_engine_t engine;
static dnnl_status_t engine_status;
static pthread_once_t engine_once = PTHREAD_ONCE_INIT;

static void engine_init(void) { engine_status = dnnl_engine_create(&engine, dnnl_cpu, 0); }

dnnl_engine_t cpu_onednn_engine(void)
{
    pthread_once(&engine_once, engine_init);
    if (engine_status == dnnl_success)
        return engine;
    cpu_onednn_error(engine_status, "creating oneDNN's CPU engine");
    return NULL;
}

static bool has_avx512;
static pthread_once_t isa_once = PTHREAD_ONCE_INIT;
static void isa_init(void)
{
    has_avx512 = (dnnl_get_effective_cpu_isa() & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core;
}

bool cpu_onednn_has_avx512(void)
{
    pthread_once(&isa_once, isa_init);
    return has_avx512;
}

int cpu_onednn_error(dnnl_status_t status, const char *what)
{
    return fl_backend_error(status == dnnl_out_of_memory ? FL_ERR_MEMORY : FL_ERR_BACKEND, "oneDNN failed %s (status %d)",
                            what, (int)status);
}

dnnl_status_t cpu_onednn_user_scratchpad(dnnl_primitive_attr_t *attr)
{
    dnnl_status_t st = dnnl_primitive_attr_create(attr);
    if (st == dnnl_success && (st = dnnl_primitive_attr_set_scratchpad_mode(*attr, dnnl_scratchpad_mode_user))) {
        dnnl_primitive_attr_destroy(*attr);
        *attr = NULL;
    }
    return st;
}

void *cpu_plan_acquire(cpu_plan_cache *cache, const void *key, void *(*build)(const void *key))
{
    pthread_mutex_lock(&cache->lock);
    for (int i = 0; i < CPU_PLAN_SLOTS; i++) {
        cpu_plan_slot *s = &cache->slots[i];
        if (s->plan && memcmp(s->key, key, cache->key_size) == 0) {
            s->users++;
            s->last_use = ++cache->clock;
            pthread_mutex_unlock(&cache->lock);
            return s->plan;
        }
    }
    pthread_mutex_unlock(&cache->lock);

    void *plan = build(key), *copy = plan ? malloc(cache->key_size) : NULL;
    if (!plan)
        return NULL;
    pthread_mutex_lock(&cache->lock);
    int slot = -1;
    for (int i = 0; i < CPU_PLAN_SLOTS && copy; i++) {
        cpu_plan_slot *s = &cache->slots[i];
        if (!s->plan) {
            slot = i;
            break;
        }
        if (s->users == 0 && (slot < 0 || s->last_use < cache->slots[slot].last_use))
            slot = i;
    }
    if (slot >= 0) {
        cpu_plan_slot *s = &cache->slots[slot];
        if (s->plan) {
            cache->destroy(s->plan);
            free(s->key);
        }
        memcpy(copy, key, cache->key_size);
        *s = (cpu_plan_slot){.plan = plan, .key = copy, .users = 1, .last_use = ++cache->clock};
    } else {
        free(copy);
    }
    pthread_mutex_unlock(&cache->lock);
    return plan;
}

void cpu_plan_release(cpu_plan_cache *cache, void *plan)
{
    bool cached = false;
    pthread_mutex_lock(&cache->lock);
    for (int i = 0; i < CPU_PLAN_SLOTS && !cached; i++)
        if (cache->slots[i].plan == plan) {
            cache->slots[i].users--;
            cached = true;
        }
    pthread_mutex_unlock(&cache->lock);
    if (!cached)
        cache->destroy(plan);
}
