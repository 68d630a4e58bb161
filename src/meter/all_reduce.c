/* Meters summed over the ranks of a distributed job: each rank measures its part of
 * the data, and after the reduction every rank holds the meter of the whole. */
#include "flare/distributed.h"
#include "flare/meter.h"

static fl_status sum_over_ranks(double *values, int count)
{
    if (fl_distributed_size() == 1)
        return FL_OK;
    fl_scope scope = fl_scope_begin();
    fl_tensor *sum = fl_all_reduce(fl_from_data(values, FL_F64, FL_SHAPE(count)), FL_DIST_SUM);
    fl_status status = sum ? fl_to_host(sum, values, (size_t)count * sizeof *values) : fl_last_status();
    fl_scope_end(scope);
    return status;
}

fl_status fl_average_meter_all_reduce(fl_average_meter *m)
{
    double v[3] = {m->weighted_sum, m->weight, (double)m->count};
    fl_status status = sum_over_ranks(v, 3);
    if (status == FL_OK)
        *m = (fl_average_meter){v[0], v[1], (int64_t)v[2]};
    return status;
}

fl_status fl_frame_error_meter_all_reduce(fl_frame_error_meter *m)
{
    /* Counts below 2^53 are exact in f64. */
    double v[2] = {(double)m->errors, (double)m->total};
    fl_status status = sum_over_ranks(v, 2);
    if (status == FL_OK)
        *m = (fl_frame_error_meter){(int64_t)v[0], (int64_t)v[1]};
    return status;
}
