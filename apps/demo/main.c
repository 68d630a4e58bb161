/* A short tour of the tensor API (until the MNIST example becomes the demo). */
#include <stdio.h>

#include "flare/tensor.h"

int main(void)
{
    fl_scope scope = fl_scope_begin();
    fl_manual_seed(0);
    fl_tensor *x = fl_arange(0, 6, 1, FL_F32);
    printf("x = ");
    fl_print(fl_reshape(x, FL_SHAPE(2, 3)));
    printf("randn(2, 3) = ");
    fl_print(fl_randn(FL_F32, FL_SHAPE(2, 3)));
    fl_scope_end(scope);
    if (fl_last_status() != FL_OK) {
        fprintf(stderr, "demo failed: %s\n", fl_last_error());
        return 1;
    }
    return 0;
}
