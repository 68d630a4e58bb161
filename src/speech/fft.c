/*
 * One FFTW plan per FFT size, made once and shared by every thread.
 */
#include <pthread.h>
#include <stdlib.h>

#include "fft.h"

/* A process uses a handful of sizes; the list only grows. */
typedef struct plan_entry {
    int n;
    fftwf_plan plan;
    struct plan_entry *next;
} plan_entry;

static pthread_mutex_t plans_lock = PTHREAD_MUTEX_INITIALIZER;
static plan_entry *plans;

fftwf_plan speech_rfft_plan(int n)
{
    pthread_mutex_lock(&plans_lock);
    plan_entry *e = plans;
    while (e && e->n != n)
        e = e->next;
    fftwf_plan plan = e ? e->plan : NULL;
    if (!e) {
        float *in = fftwf_malloc(sizeof(float) * (size_t)n);
        fftwf_complex *out = fftwf_malloc(sizeof(fftwf_complex) * (size_t)(n / 2 + 1));
        e = malloc(sizeof *e);
        /* FFTW_ESTIMATE: the same plan, and so the same bits, on every run; measuring
         * would pick by timings taken on a machine that may be busy */
        if (in && out && e)
            plan = fftwf_plan_dft_r2c_1d(n, in, out, FFTW_ESTIMATE);
        if (plan) {
            *e = (plan_entry){n, plan, plans};
            plans = e;
        } else {
            free(e);
        }
        fftwf_free(in);
        fftwf_free(out);
    }
    pthread_mutex_unlock(&plans_lock);
    return plan;
}
