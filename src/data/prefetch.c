/*
 * The prefetch dataset: worker threads build the samples after the one just asked for.
 *
 * A window of `depth` slots covers samples [next, next + depth), where next is the
 * sample the consumer is expected to ask for; sample i lives in slot i % depth. Workers
 * claim the window's samples in order and build them with the source's get; the
 * consumer waits for its slot, takes the sample, and the window slides by one. A get
 * of any other sample restarts the window there. Each restart bumps a generation
 * number, and a worker that finishes a sample of an older generation drops it, so
 * nothing stale is ever handed out and no worker has to be interrupted.
 *
 * Errors are recorded per thread; a worker copies its message into the slot, and the
 * consumer's get records it again on its own thread.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataset.h"

#define MESSAGE_SIZE 1024

typedef struct slot {
    int64_t index; /* the sample held, or -1 */
    fl_status status;
    fl_sample sample;
    char message[MESSAGE_SIZE];
} slot;

typedef struct prefetch_dataset {
    fl_dataset *source;
    int64_t size;
    int workers, depth, started;
    pthread_t *threads;
    slot *slots;

    pthread_mutex_t consumer; /* one get or set_epoch at a time */
    pthread_mutex_t lock;     /* everything below */
    pthread_cond_t work;      /* a sample to claim, a pause lifted, or stop */
    pthread_cond_t done;      /* a sample stored, or a worker idle */
    int64_t next, claim;
    uint64_t generation;
    int busy; /* workers inside the source's get */
    bool paused, stop;
} prefetch_dataset;

static void drop_slots(prefetch_dataset *p)
{
    for (int i = 0; i < p->depth; i++) {
        fl_sample_release(&p->slots[i].sample);
        p->slots[i].index = -1;
    }
}

static void *worker(void *arg)
{
    prefetch_dataset *p = arg;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->stop && (p->paused || p->claim >= p->size || p->claim >= p->next + p->depth))
            pthread_cond_wait(&p->work, &p->lock);
        if (p->stop)
            break;
        int64_t index = p->claim++;
        uint64_t generation = p->generation;
        p->busy++;
        pthread_mutex_unlock(&p->lock);

        fl_sample sample = {0};
        fl_status status = fl__dataset_fetch(p->source, index, &sample);
        char message[MESSAGE_SIZE] = "";
        if (status != FL_OK) {
            snprintf(message, sizeof message, "%s", fl_last_error());
            fl_clear_error();
        }

        pthread_mutex_lock(&p->lock);
        p->busy--;
        if (generation == p->generation) {
            slot *s = &p->slots[index % p->depth];
            s->index = index;
            s->status = status;
            s->sample = sample;
            memcpy(s->message, message, sizeof message);
        } else {
            fl_sample_release(&sample);
        }
        pthread_cond_broadcast(&p->done);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* Forgets the window and starts building from sample `from`. Called locked. */
static void restart(prefetch_dataset *p, int64_t from)
{
    p->generation++;
    drop_slots(p);
    p->next = p->claim = from;
    pthread_cond_broadcast(&p->work);
}

static int64_t prefetch_size(fl_dataset *ds)
{
    prefetch_dataset *p = ds->state;
    return p->size;
}

static fl_status prefetch_get(fl_dataset *ds, int64_t index, fl_sample *out)
{
    prefetch_dataset *p = ds->state;
    pthread_mutex_lock(&p->consumer);
    pthread_mutex_lock(&p->lock);
    if (index != p->next)
        restart(p, index);
    slot *s = &p->slots[index % p->depth];
    while (s->index != index)
        pthread_cond_wait(&p->done, &p->lock);
    fl_status status = s->status;
    *out = s->sample;
    s->sample = (fl_sample){0};
    s->index = -1;
    p->next = index + 1;
    pthread_cond_broadcast(&p->work);
    if (status != FL_OK)
        fl_error(status, "fl_prefetch_dataset", "sample %lld: %s", (long long)index, s->message);
    pthread_mutex_unlock(&p->lock);
    pthread_mutex_unlock(&p->consumer);
    return status;
}

/* Stops the workers between samples, drops what they built, lets the source start
 * the epoch, and builds again from sample 0. */
static void prefetch_set_epoch(fl_dataset *ds, int64_t epoch)
{
    prefetch_dataset *p = ds->state;
    pthread_mutex_lock(&p->consumer);
    pthread_mutex_lock(&p->lock);
    p->paused = true;
    p->generation++;
    drop_slots(p);
    while (p->busy > 0)
        pthread_cond_wait(&p->done, &p->lock);
    pthread_mutex_unlock(&p->lock);

    fl_dataset_set_epoch(p->source, epoch);

    pthread_mutex_lock(&p->lock);
    p->paused = false;
    restart(p, 0);
    pthread_mutex_unlock(&p->lock);
    pthread_mutex_unlock(&p->consumer);
}

static void prefetch_release(fl_dataset *ds)
{
    prefetch_dataset *p = ds->state;
    pthread_mutex_lock(&p->lock);
    p->stop = true;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->started; i++)
        pthread_join(p->threads[i], NULL);
    if (p->slots)
        drop_slots(p);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->work);
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->consumer);
    fl_dataset_release(p->source);
    free(p->threads);
    free(p->slots);
    free(p);
}

/* No get_batch: batching above a prefetch would bypass the samples built ahead. */
static const fl_dataset_ops prefetch_ops = {
    .name = "prefetch",
    .size = prefetch_size,
    .get = prefetch_get,
    .set_epoch = prefetch_set_epoch,
    .release = prefetch_release,
};

/* Enough to keep far more cores busy than a data loader should take. */
#define MAX_WORKERS 256

fl_dataset *fl_prefetch_dataset(fl_dataset *source, int workers, int depth)
{
    static const char fn[] = "fl_prefetch_dataset";
    if (!source) {
        if (fl_last_status() == FL_OK)
            fl_error(FL_ERR_NULL, fn, "the source dataset is NULL");
        return NULL;
    }
    if (depth == 0 && workers >= 1 && workers <= MAX_WORKERS)
        depth = 2 * workers;
    if (workers < 1 || workers > MAX_WORKERS || depth < workers || depth > 64 * MAX_WORKERS) {
        fl_dataset_release(source);
        return fl_error(FL_ERR_VALUE, fn, "needs 1 to %d workers and a depth of at least the worker count "
                        "(at most %d), got %d workers and depth %d", MAX_WORKERS, 64 * MAX_WORKERS, workers,
                        depth);
    }
    prefetch_dataset *p = calloc(1, sizeof *p);
    if (!p) {
        fl_dataset_release(source);
        return fl_error(FL_ERR_MEMORY, fn, "cannot allocate a dataset");
    }
    p->source = source;
    p->size = fl_dataset_size(source);
    p->workers = workers;
    p->depth = depth;
    pthread_mutex_init(&p->consumer, NULL);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done, NULL);
    p->threads = calloc((size_t)workers, sizeof *p->threads);
    p->slots = calloc((size_t)depth, sizeof *p->slots);
    fl_dataset tmp = {.state = p};
    if (!p->threads || !p->slots) {
        prefetch_release(&tmp);
        return fl_error(FL_ERR_MEMORY, fn, "cannot allocate %d workers and %d slots", workers, depth);
    }
    for (int i = 0; i < depth; i++)
        p->slots[i].index = -1;
    for (; p->started < workers; p->started++) {
        int rc = pthread_create(&p->threads[p->started], NULL, worker, p);
        if (rc != 0) {
            int failed = p->started + 1;
            prefetch_release(&tmp);
            return fl_error(FL_ERR_BACKEND, fn, "cannot start worker thread %d of %d: %s", failed, workers,
                            strerror(rc));
        }
    }
    return fl__dataset_make(fn, &prefetch_ops, p);
}
