/* The average value meter: a weighted running mean. */
#include <math.h>

#include "flare/meter.h"

void fl_average_meter_reset(fl_average_meter *m) { *m = (fl_average_meter){0}; }

void fl_average_meter_add(fl_average_meter *m, double value, double weight)
{
    m->weighted_sum += value * weight;
    m->weight += weight;
    m->count++;
}

double fl_average_meter_value(const fl_average_meter *m)
{
    return m->weight != 0 ? m->weighted_sum / m->weight : NAN;
}
