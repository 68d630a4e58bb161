/*
 * Returns from main with work still queued on the opencl backend: kernels that have
 * never run before in this process (random fills, a fused elementwise chain and a
 * reduction), enqueued and never read. tests/opencl_exit.sh runs it with an
 * empty PoCL kernel cache, so that PoCL compiles them while exit() runs its handlers;
 * it must exit 0, not crash in the middle of a compile (runtime.c's finish_at_exit).
 */
#include <stdio.h>

#include "flare/backend.h"
#include "flare/opencl.h"
#include "flare/tensor.h"

int main(void)
{
    if (!fl_opencl_device()) {
        printf("skipped: %s\n", fl_opencl_unavailable());
        return 0;
    }
    if (fl_set_default_backend("opencl") != FL_OK)
        return 1;
    /* the tensors go with the scope; their kernels stay queued */
    fl_scope scope = fl_scope_begin();
    fl_tensor *y = fl_tanh(fl_add(fl_randn(FL_F32, FL_SHAPE(300, 200)), fl_scalar(0.5, FL_F32)));
    fl_tensor *z = fl_sum(fl_rand(FL_F64, FL_SHAPE(300, 200)), FL_AXES(1), false);
    fl_status status = y && z ? fl_eval(y) : fl_last_status();
    if (status != FL_OK)
        fprintf(stderr, "%s\n", fl_last_error());
    fl_scope_end(scope);
    return status == FL_OK ? 0 : 1;
}
