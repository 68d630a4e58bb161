/* The edit distance meter: Levenshtein alignments of integer sequences, accumulated. */
#include <math.h>
#include <stdlib.h>

#include "flare/backend.h" /* struct fl_tensor */
#include "flare/extension.h"
#include "flare/meter.h"

void fl_edit_distance_meter_reset(fl_edit_distance_meter *m) { *m = (fl_edit_distance_meter){0}; }

/* The cost table of the classic dynamic programme, (p + 1) x (r + 1), then a walk back
 * from the corner that counts the edits of one optimal alignment. */
fl_status fl_edit_distance_meter_add(fl_edit_distance_meter *m, const int64_t *prediction, int64_t prediction_length,
                                     const int64_t *reference, int64_t reference_length)
{
    static const char fn[] = "fl_edit_distance_meter_add";
    if (!m || (!prediction && prediction_length > 0) || (!reference && reference_length > 0))
        return fl_error(FL_ERR_NULL, fn, "%s is NULL", !m ? "the meter" : !prediction ? "prediction" : "reference"),
               FL_ERR_NULL;
    if (prediction_length < 0 || reference_length < 0)
        return fl_error(FL_ERR_VALUE, fn, "negative lengths %lld and %lld", (long long)prediction_length,
                        (long long)reference_length),
               FL_ERR_VALUE;
    int64_t rows = prediction_length + 1, cols = reference_length + 1;
    if ((uint64_t)rows > SIZE_MAX / sizeof(int64_t) / (uint64_t)cols)
        return fl_error(FL_ERR_MEMORY, fn, "sequences of %lld and %lld tokens are too long",
                        (long long)prediction_length, (long long)reference_length),
               FL_ERR_MEMORY;
    int64_t *d = malloc((size_t)rows * (size_t)cols * sizeof *d);
    if (!d)
        return fl_error(FL_ERR_MEMORY, fn, "cannot allocate a %lld x %lld table", (long long)rows, (long long)cols),
               FL_ERR_MEMORY;
#define D(i, j) d[(i) * cols + (j)]
    for (int64_t i = 0; i < rows; i++)
        D(i, 0) = i;
    for (int64_t j = 0; j < cols; j++)
        D(0, j) = j;
    for (int64_t i = 1; i < rows; i++) {
        for (int64_t j = 1; j < cols; j++) {
            int64_t diagonal = D(i - 1, j - 1) + (prediction[i - 1] != reference[j - 1]);
            int64_t insertion = D(i - 1, j) + 1, deletion = D(i, j - 1) + 1;
            int64_t best = diagonal < insertion ? diagonal : insertion;
            D(i, j) = best < deletion ? best : deletion;
        }
    }
    int64_t i = prediction_length, j = reference_length;
    while (i > 0 || j > 0) {
        if (i > 0 && j > 0 && D(i, j) == D(i - 1, j - 1) + (prediction[i - 1] != reference[j - 1])) {
            m->substitutions += prediction[i - 1] != reference[j - 1];
            i--, j--;
        } else if (j > 0 && D(i, j) == D(i, j - 1) + 1) {
            m->deletions++;
            j--;
        } else {
            m->insertions++;
            i--;
        }
    }
#undef D
    free(d);
    m->reference_length += reference_length;
    m->sequences++;
    return FL_OK;
}

/* The values of a 1-D integer tensor as i64, in a malloc'd array (NULL and an error
 * on failure; non-NULL even when empty). */
static int64_t *sequence(const char *fn, const char *what, const fl_tensor *t)
{
    char desc[FL_DESC_SIZE];
    if (t->ndim != 1 || !fl_dtype_is_integer(t->dtype))
        return fl_error(FL_ERR_SHAPE, fn, "%s must be a 1-D integer tensor, got %s", what, fl_describe(t, desc));
    int64_t *values = malloc((size_t)t->numel * sizeof *values + 1);
    if (!values)
        return fl_error(FL_ERR_MEMORY, fn, "cannot copy %s %s", what, fl_describe(t, desc));
    fl_scope scope = fl_scope_begin();
    fl_tensor *wide = fl_cast(t, FL_I64);
    fl_status status = wide ? fl_to_host(wide, values, (size_t)t->numel * sizeof *values) : FL_ERR_MEMORY;
    fl_scope_end(scope);
    if (status != FL_OK) {
        free(values);
        return NULL;
    }
    return values;
}

fl_status fl_edit_distance_meter_add_tensors(fl_edit_distance_meter *m, const fl_tensor *prediction,
                                             const fl_tensor *reference)
{
    static const char fn[] = "fl_edit_distance_meter_add_tensors";
    if (!m)
        return fl_error(FL_ERR_NULL, fn, "the meter is NULL"), FL_ERR_NULL;
    if (fl_null_args(fn, 2, prediction, reference))
        return fl_last_status();
    int64_t *p = sequence(fn, "prediction", prediction);
    int64_t *r = p ? sequence(fn, "reference", reference) : NULL;
    fl_status status = r ? fl_edit_distance_meter_add(m, p, prediction->numel, r, reference->numel)
                         : fl_last_status();
    free(p);
    free(r);
    return status;
}

int64_t fl_edit_distance_meter_errors(const fl_edit_distance_meter *m)
{
    return m->insertions + m->deletions + m->substitutions;
}

double fl_edit_distance_meter_error_rate(const fl_edit_distance_meter *m)
{
    int64_t errors = fl_edit_distance_meter_errors(m);
    if (m->reference_length == 0)
        return errors ? INFINITY : 0.0;
    return 100.0 * (double)errors / (double)m->reference_length;
}
