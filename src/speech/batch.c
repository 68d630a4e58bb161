/*
 * Log-mel features of a batch of signals on worker threads: each thread takes the
 * next signal nobody has taken, so long and short signals balance out.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "features.h"
#include "flare/extension.h"

#define MESSAGE_SIZE 1024

typedef struct batch_job {
    const speech_setup *setup;
    const float *const *signals;
    const int64_t *counts;
    float **out;
    int64_t *frames;
    int batch;
    pthread_mutex_t lock;
    int next;                  /* the next signal to take */
    int failed;                /* the lowest signal that failed, or batch */
    fl_status status;          /* its status */
    char message[MESSAGE_SIZE]; /* and message */
} batch_job;

static const char *batch_fn = "fl_speech_log_mel_batch";

static void *worker(void *arg)
{
    batch_job *job = arg;
    for (;;) {
        pthread_mutex_lock(&job->lock);
        int i = job->next < job->failed ? job->next++ : job->batch;
        pthread_mutex_unlock(&job->lock);
        if (i >= job->batch)
            break;
        fl_status status = speech_setup_run(batch_fn, job->setup, job->signals[i], job->counts[i], &job->out[i],
                                            &job->frames[i]);
        if (status != FL_OK) {
            /* errors are kept per thread: the message goes back through the job */
            pthread_mutex_lock(&job->lock);
            if (i < job->failed) {
                job->failed = i;
                job->status = status;
                snprintf(job->message, sizeof job->message, "%s", fl_last_error());
            }
            pthread_mutex_unlock(&job->lock);
            fl_clear_error();
        }
    }
    return NULL;
}

fl_status fl_speech_log_mel_batch(const float *const *signals, const int64_t *counts, int batch,
                                  const fl_speech_options *opt, int threads, float **out, int64_t *frames)
{
    if (fl_null_args(batch_fn, 4, signals, counts, out, frames))
        return fl_last_status();
    if (batch < 0 || threads < 0) {
        fl_error(FL_ERR_VALUE, batch_fn, "batch %d and threads %d: neither may be negative", batch, threads);
        return FL_ERR_VALUE;
    }
    for (int i = 0; i < batch; i++) {
        out[i] = NULL;
        frames[i] = 0;
        if (!signals[i]) {
            fl_error(FL_ERR_NULL, batch_fn, "signal %d is NULL", i);
            return FL_ERR_NULL;
        }
    }
    speech_setup setup;
    fl_status status = speech_setup_make(batch_fn, opt, FL_SPEECH_LOG_MEL, &setup);
    if (status != FL_OK)
        return status;
    batch_job job = {.setup = &setup, .signals = signals, .counts = counts, .out = out, .frames = frames,
                     .batch = batch, .failed = batch};
    pthread_mutex_init(&job.lock, NULL);
    if (threads == 0)
        threads = fl_num_threads();
    if (threads > batch)
        threads = batch;
    /* the calling thread is one of the workers */
    pthread_t *extra = threads > 1 ? malloc(sizeof *extra * (size_t)(threads - 1)) : NULL;
    int started = 0;
    for (; extra && started < threads - 1; started++)
        if (pthread_create(&extra[started], NULL, worker, &job) != 0)
            break; /* fewer threads: the work gets done all the same */
    worker(&job);
    for (int i = 0; i < started; i++)
        pthread_join(extra[i], NULL);
    free(extra);
    pthread_mutex_destroy(&job.lock);
    speech_setup_free(&setup);
    if (job.failed < batch) {
        for (int i = 0; i < batch; i++) {
            free(out[i]);
            out[i] = NULL;
            frames[i] = 0;
        }
        /* the worker's message already names this function */
        const char *m = job.message;
        size_t len = strlen(batch_fn);
        if (strncmp(m, batch_fn, len) == 0 && strncmp(m + len, ": ", 2) == 0)
            m += len + 2;
        fl_error(job.status, batch_fn, "signal %d: %s", job.failed, m);
        return job.status;
    }
    return FL_OK;
}
