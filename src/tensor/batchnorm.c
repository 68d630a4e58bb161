/*
 * The backend's fused batch normalization, for nn's batch norm (src/nn/norm.c), which
 * composes it where these decline; dispatched here so that the layers above never
 * call into a backend's table.
 */
#include "internal.h"

bool fl__batch_norm_fusable(const fl_tensor *x)
{
    return x->backend->batch_norm && x->backend->batch_norm_backward && (x->dtype == FL_F32 || x->dtype == FL_F64);
}

int fl__batch_norm(fl_tensor *y, fl_tensor *save_mean, fl_tensor *save_var, const fl_tensor *x,
                   const fl_tensor *weight, const fl_tensor *bias, const fl_tensor *running_mean,
                   const fl_tensor *running_var, double eps)
{
    fl__begin("batch_norm");
    return x->backend->batch_norm(x->backend, y, save_mean, save_var, x, weight, bias, running_mean, running_var,
                                  eps);
}

int fl__batch_norm_backward(fl_tensor *dx, fl_tensor *dweight, fl_tensor *dbias, const fl_tensor *dy,
                            const fl_tensor *x, const fl_tensor *mean, const fl_tensor *invstd,
                            const fl_tensor *weight, bool training)
{
    fl__begin("batch_norm_backward");
    return x->backend->batch_norm_backward(x->backend, dx, dweight, dbias, dy, x, mean, invstd, weight, training);
}
