/* The README's example: built against the installed library by tests/install_check.sh. */
#include <flare/tensor.h>
#include <stdio.h>

int main(void)
{
    fl_scope scope = fl_scope_begin();
    fl_tensor *x = fl_randn(FL_F32, FL_SHAPE(4, 3));
    fl_tensor *w = fl_randn(FL_F32, FL_SHAPE(3, 2));
    fl_tensor *p = fl_softmax(fl_add_scalar(fl_matmul(x, w), 1.0), -1);
    fl_print(fl_sum(p, FL_AXES(-1), false)); /* every row of a softmax sums to 1 */
    fl_scope_end(scope);
    if (fl_last_status() != FL_OK) {
        fprintf(stderr, "%s\n", fl_last_error());
        return 1;
    }
    return 0;
}
