/* The timer meter: wall-clock seconds on the monotonic clock, with a per-sample rate. */
#include <math.h>
#include <time.h>

#include "flare/meter.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void fl_timer_meter_reset(fl_timer_meter *m) { *m = (fl_timer_meter){0}; }

void fl_timer_meter_start(fl_timer_meter *m)
{
    *m = (fl_timer_meter){.started = now(), .running = true};
}

void fl_timer_meter_stop(fl_timer_meter *m)
{
    if (!m->running)
        return;
    m->elapsed += now() - m->started;
    m->running = false;
}

void fl_timer_meter_resume(fl_timer_meter *m)
{
    if (m->running)
        return;
    m->started = now();
    m->running = true;
}

void fl_timer_meter_add_samples(fl_timer_meter *m, int64_t samples) { m->samples += samples; }

double fl_timer_meter_value(const fl_timer_meter *m)
{
    return m->elapsed + (m->running ? now() - m->started : 0.0);
}

double fl_timer_meter_per_sample(const fl_timer_meter *m)
{
    return m->samples ? fl_timer_meter_value(m) / (double)m->samples : NAN;
}
