/*
 * Meters: running statistics of a training or evaluation loop, as Flashlight's.
 * Each is a plain struct: zero it (or call its reset) to start, add to it, read it.
 *
 *     fl_average_meter loss = {0};
 *     fl_frame_error_meter error = {0};
 *     for (...) { fl_average_meter_add(&loss, fl_item(l), 1); fl_frame_error_meter_add(&error, pred, y); }
 *     printf("loss %.4f, error %.2f%%\n", fl_average_meter_value(&loss), fl_frame_error_meter_value(&error));
 *
 * Functions that read tensors return a status and record an error (fl_last_error) on
 * bad input, leaving the meter unchanged.
 */
#ifndef FLARE_METER_H
#define FLARE_METER_H

#include <stdbool.h>
#include <stdint.h>

#include "flare/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- average value: a weighted mean ---------------------------------------------- */

typedef struct fl_average_meter {
    double weighted_sum, weight; /* sum of value * weight, sum of weights */
    int64_t count;               /* calls to add */
} fl_average_meter;

void fl_average_meter_reset(fl_average_meter *m);
void fl_average_meter_add(fl_average_meter *m, double value, double weight);
/* weighted_sum / weight; NAN before anything (or only zero weight) was added. */
double fl_average_meter_value(const fl_average_meter *m);

/* ---- frame error: the percentage of predictions that differ from their targets ----- */

typedef struct fl_frame_error_meter {
    int64_t errors, total;
} fl_frame_error_meter;

void fl_frame_error_meter_reset(fl_frame_error_meter *m);
/* predictions and targets of the same shape (any dtypes that compare: values are
 * compared, as with fl_ne). */
fl_status fl_frame_error_meter_add(fl_frame_error_meter *m, const fl_tensor *predictions, const fl_tensor *targets);
/* 100 * errors / total; 0 before anything was added (as Flashlight). */
double fl_frame_error_meter_value(const fl_frame_error_meter *m);

/* ---- top-k accuracy -------------------------------------------------------------- */

typedef struct fl_topk_meter {
    int64_t k;
    int64_t correct, total;
} fl_topk_meter;

/* Zeroes the counts and sets k (at least 1). */
fl_status fl_topk_meter_init(fl_topk_meter *m, int64_t k);
/* logits [N, C] (float), targets [N] (integer class indices in [0, C)): counts rows
 * whose target is among the k largest logits (k <= C). Among equal logits the lower
 * index ranks higher (fl_topk's order). */
fl_status fl_topk_meter_add(fl_topk_meter *m, const fl_tensor *logits, const fl_tensor *targets);
/* 100 * correct / total; 0 before anything was added. */
double fl_topk_meter_value(const fl_topk_meter *m);

/* ---- edit distance --------------------------------------------------------------- */

/*
 * Levenshtein distance between predicted and reference sequences (tokens, words),
 * accumulated. The counts describe one optimal alignment: where several exist, a
 * match or substitution is preferred to a deletion, and a deletion to an insertion.
 * A deletion is a reference token missing from the prediction; an insertion, a
 * predicted token not in the reference.
 */
typedef struct fl_edit_distance_meter {
    int64_t insertions, deletions, substitutions;
    int64_t reference_length; /* summed over the added pairs */
    int64_t sequences;        /* pairs added */
} fl_edit_distance_meter;

void fl_edit_distance_meter_reset(fl_edit_distance_meter *m);
fl_status fl_edit_distance_meter_add(fl_edit_distance_meter *m, const int64_t *prediction, int64_t prediction_length,
                                     const int64_t *reference, int64_t reference_length);
/* The same for 1-D integer tensors. */
fl_status fl_edit_distance_meter_add_tensors(fl_edit_distance_meter *m, const fl_tensor *prediction,
                                             const fl_tensor *reference);
/* insertions + deletions + substitutions. */
int64_t fl_edit_distance_meter_errors(const fl_edit_distance_meter *m);
/* 100 * errors / reference_length: the error rate (WER, LER) Flashlight reports; 0
 * when nothing was added, infinite for errors against empty references. */
double fl_edit_distance_meter_error_rate(const fl_edit_distance_meter *m);

/* ---- timer ----------------------------------------------------------------------- */

typedef struct fl_timer_meter {
    double elapsed; /* seconds accumulated while running, up to the last stop */
    double started; /* the monotonic clock when last started or resumed */
    bool running;
    int64_t samples;
} fl_timer_meter;

/* Resets to zero and starts running. */
void fl_timer_meter_start(fl_timer_meter *m);
/* Stops, keeping the time so far; resume goes on from it. */
void fl_timer_meter_stop(fl_timer_meter *m);
void fl_timer_meter_resume(fl_timer_meter *m);
/* Resets to zero, stopped. */
void fl_timer_meter_reset(fl_timer_meter *m);
/* Counts samples processed, for the per-sample rate. */
void fl_timer_meter_add_samples(fl_timer_meter *m, int64_t samples);
/* Seconds accumulated, including the current run if running. */
double fl_timer_meter_value(const fl_timer_meter *m);
/* Seconds per sample (Flashlight's TimeMeter with unit=true); NAN with no samples. */
double fl_timer_meter_per_sample(const fl_timer_meter *m);

/* ---- across ranks ------------------------------------------------------------------ */

/* Sums a meter's counts over the ranks of a distributed job (include/flare/
 * distributed.h), so every rank then holds the meter of all the data; in a single
 * process they change nothing. Every rank must call them, in the same order. */
fl_status fl_average_meter_all_reduce(fl_average_meter *m);
fl_status fl_frame_error_meter_all_reduce(fl_frame_error_meter *m);

#ifdef __cplusplus
}
#endif

#endif
