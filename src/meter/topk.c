/* The top-k accuracy meter. */
#include "flare/backend.h" /* struct fl_tensor */
#include "flare/extension.h"
#include "flare/meter.h"

fl_status fl_topk_meter_init(fl_topk_meter *m, int64_t k)
{
    if (!m)
        return fl_error(FL_ERR_NULL, "fl_topk_meter_init", "the meter is NULL"), FL_ERR_NULL;
    if (k < 1)
        return fl_error(FL_ERR_VALUE, "fl_topk_meter_init", "k must be at least 1, got %lld", (long long)k),
               FL_ERR_VALUE;
    *m = (fl_topk_meter){.k = k};
    return FL_OK;
}

fl_status fl_topk_meter_add(fl_topk_meter *m, const fl_tensor *logits, const fl_tensor *targets)
{
    static const char fn[] = "fl_topk_meter_add";
    if (!m)
        return fl_error(FL_ERR_NULL, fn, "the meter is NULL"), FL_ERR_NULL;
    if (fl_null_args(fn, 2, logits, targets))
        return fl_last_status();
    char a[FL_DESC_SIZE], b[FL_DESC_SIZE];
    fl_describe(logits, a);
    fl_describe(targets, b);
    if (m->k < 1)
        return fl_error(FL_ERR_VALUE, fn, "k is %lld: call fl_topk_meter_init first", (long long)m->k),
               FL_ERR_VALUE;
    if (logits->ndim != 2 || targets->ndim != 1 || targets->shape[0] != logits->shape[0])
        return fl_error(FL_ERR_SHAPE, fn, "needs logits [N, C] and targets [N], got %s and %s", a, b), FL_ERR_SHAPE;
    if (!fl_dtype_is_float(logits->dtype) || !fl_dtype_is_integer(targets->dtype))
        return fl_error(FL_ERR_DTYPE, fn, "needs float logits and integer targets, got %s and %s", a, b),
               FL_ERR_DTYPE;
    if (m->k > logits->shape[1])
        return fl_error(FL_ERR_VALUE, fn, "k = %lld is more than the %lld classes of logits %s", (long long)m->k,
                        (long long)logits->shape[1], a),
               FL_ERR_VALUE;
    fl_scope scope = fl_scope_begin();
    fl_status status = FL_OK;
    double correct = 0;
    /* Targets outside [0, C) would silently never match: reject them. */
    fl_tensor *low = NULL, *high = NULL;
    if (targets->numel > 0) {
        low = fl_min(targets, FL_ALL_AXES, false);
        high = fl_max(targets, FL_ALL_AXES, false);
    }
    if (targets->numel > 0 && (!low || !high))
        status = fl_last_status();
    else if (targets->numel > 0 && (fl_item(low) < 0 || fl_item(high) >= (double)logits->shape[1])) {
        fl_error(FL_ERR_INDEX, fn, "targets %s hold classes from %.0f to %.0f, outside [0, %lld)", b, fl_item(low),
                 fl_item(high), (long long)logits->shape[1]);
        status = FL_ERR_INDEX;
    }
    fl_tensor *top = NULL;
    if (status == FL_OK && (status = fl_topk(logits, m->k, 1, true, NULL, &top)) == FL_OK) {
        fl_tensor *hits = fl_sum(fl_any(fl_eq(top, fl_unsqueeze(targets, 1)), FL_AXES(1), false), FL_ALL_AXES, false);
        if (hits)
            correct = fl_item(hits);
        else
            status = fl_last_status();
    }
    fl_scope_end(scope);
    if (status != FL_OK)
        return status;
    m->correct += (int64_t)correct;
    m->total += logits->shape[0];
    return FL_OK;
}

double fl_topk_meter_value(const fl_topk_meter *m)
{
    return m->total ? 100.0 * (double)m->correct / (double)m->total : 0.0;
}
