/* A memory manager of its own: every block comes from malloc with a header in front,
 * and the manager counts bytes and calls. Installed with one call, it serves every
 * tensor in host memory Flare makes from then on (the cpu and lazy backends'; a
 * device backend's tensors live under its own manager, fl_opencl_memory); blocks made
 * before go back to the manager that made them. Public headers only; run by the test
 * suite. */
#include <flare/backend.h>
#include <flare/memory.h>
#include <flare/tensor.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct counting {
    pthread_mutex_t lock; /* entries are called from any thread */
    fl_memory_stats stats;
} counting;

static void *counting_alloc(fl_memory_manager *m, size_t bytes)
{
    counting *c = m->state;
    void *p = NULL;
    if (bytes > SIZE_MAX - FL_MEMORY_ALIGNMENT || posix_memalign(&p, FL_MEMORY_ALIGNMENT, bytes ? bytes : 1))
        return NULL;
    pthread_mutex_lock(&c->lock);
    c->stats.allocations++;
    c->stats.system_allocations++;
    c->stats.in_use += bytes;
    c->stats.reserved += bytes;
    if (c->stats.in_use > c->stats.peak_in_use)
        c->stats.peak_in_use = c->stats.in_use;
    pthread_mutex_unlock(&c->lock);
    return p;
}

static void counting_free(fl_memory_manager *m, void *ptr, size_t bytes)
{
    counting *c = m->state;
    free(ptr);
    pthread_mutex_lock(&c->lock);
    c->stats.frees++;
    c->stats.in_use -= bytes;
    c->stats.reserved -= bytes;
    pthread_mutex_unlock(&c->lock);
}

static void counting_stats(fl_memory_manager *m, fl_memory_stats *out)
{
    counting *c = m->state;
    pthread_mutex_lock(&c->lock);
    *out = c->stats;
    pthread_mutex_unlock(&c->lock);
}

static void counting_destroy(fl_memory_manager *m)
{
    counting *c = m->state;
    pthread_mutex_destroy(&c->lock);
    free(c);
}

int main(void)
{
    /* A backend whose tensors have no host address keeps them in device memory, under
     * a manager of its own: there is nothing here to count. */
    fl_tensor *probe = fl_zeros(FL_I32, 1, (int64_t[]){1});
    void *data = NULL;
    const fl_backend *b = fl_default_backend();
    bool host = probe && b->host_data && b->host_data(b, probe, &data) == 0;
    fl_release(probe);
    if (!host) {
        printf("skipped: %s tensors live in device memory, under the backend's own manager\n", b->name);
        return 77; /* ctest's SKIP_RETURN_CODE */
    }
    counting *c = calloc(1, sizeof *c);
    if (!c)
        return 1;
    pthread_mutex_init(&c->lock, NULL);
    fl_memory_manager mine = {
        .version = FL_MEMORY_VERSION, .table_size = sizeof(fl_memory_manager), .name = "counting", .state = c,
        .alloc = counting_alloc, .free = counting_free, .stats = counting_stats, .destroy = counting_destroy,
    };
    fl_memory_manager *previous = fl_memory_manager_current();
    if (fl_memory_set_manager(&mine) != FL_OK) {
        fprintf(stderr, "%s\n", fl_last_error());
        return 1;
    }

    fl_scope scope = fl_scope_begin();
    fl_tensor *x = fl_randn(FL_F32, FL_SHAPE(256, 256));
    fl_tensor *y = fl_sum(fl_matmul(x, x), FL_AXES(0), false);
    fl_eval(y);
    fl_memory_stats during;
    fl_memory_stats_get(&during);
    fl_scope_end(scope);

    fl_memory_stats after;
    counting_stats(&mine, &after);
    printf("counting manager: %llu allocations, peak %zu bytes, %zu in use after the scope\n",
           (unsigned long long)during.allocations, during.peak_in_use, after.in_use);
    fl_memory_set_manager(previous);
    bool ok = fl_last_status() == FL_OK && during.allocations > 0 && after.in_use == 0 &&
              fl_memory_manager_destroy(&mine) == FL_OK;
    if (!ok)
        fprintf(stderr, "%s\n", fl_last_status() != FL_OK ? fl_last_error() : "unexpected statistics");
    return ok ? 0 : 1;
}
