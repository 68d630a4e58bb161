/* The frame error meter: the percentage of mismatched predictions. */
#include "flare/backend.h" /* struct fl_tensor */
#include "flare/extension.h"
#include "flare/meter.h"

void fl_frame_error_meter_reset(fl_frame_error_meter *m) { *m = (fl_frame_error_meter){0}; }

fl_status fl_frame_error_meter_add(fl_frame_error_meter *m, const fl_tensor *predictions, const fl_tensor *targets)
{
    static const char fn[] = "fl_frame_error_meter_add";
    if (!m)
        return fl_error(FL_ERR_NULL, fn, "the meter is NULL"), FL_ERR_NULL;
    if (fl_null_args(fn, 2, predictions, targets))
        return fl_last_status();
    if (!fl_same_shape(predictions, targets)) {
        char a[FL_DESC_SIZE], b[FL_DESC_SIZE];
        fl_error(FL_ERR_SHAPE, fn, "predictions %s and targets %s differ in shape", fl_describe(predictions, a),
                  fl_describe(targets, b));
        return FL_ERR_SHAPE;
    }
    fl_scope scope = fl_scope_begin();
    fl_tensor *mismatches = fl_sum(fl_ne(predictions, targets), FL_ALL_AXES, false);
    double errors = mismatches ? fl_item(mismatches) : 0;
    fl_scope_end(scope);
    if (!mismatches)
        return fl_last_status();
    m->errors += (int64_t)errors;
    m->total += predictions->numel;
    return FL_OK;
}

double fl_frame_error_meter_value(const fl_frame_error_meter *m)
{
    return m->total ? 100.0 * (double)m->errors / (double)m->total : 0.0;
}
