/* Wrapping one primitive: every addition Flare makes, from a user's fl_add to a linear
 * layer's bias and an optimizer's update, goes through counting_add, which calls the
 * entry it replaced. Public headers only; run by the test suite. */
#include <flare/backend.h>
#include <flare/nn.h>
#include <stdbool.h>
#include <stdio.h>

static long additions;

static int counting_add(const fl_backend *self, fl_tensor *out, const fl_tensor *a, const fl_tensor *b)
{
    additions++;
    return self->base->add(self->base, out, a, b);
}

int main(void)
{
    const fl_backend *current = fl_default_backend();
    fl_backend counting;
    fl_backend_derive(&counting, current, current->name); /* same name: replaces it */
    counting.add = counting_add;
    if (fl_backend_register(&counting) != FL_OK) {
        fprintf(stderr, "%s\n", fl_last_error());
        return 1;
    }

    fl_module *layer = fl_nn_linear(3, 2, true);
    fl_scope scope = fl_scope_begin();
    fl_variable *x = fl_v_new(fl_randn(FL_F32, FL_SHAPE(4, 3)), false);
    bool ok = fl_module_forward(layer, x) != NULL;
    fl_scope_end(scope);
    fl_module_release(layer);
    if (!ok) {
        fprintf(stderr, "%s\n", fl_last_error());
        return 1;
    }
    printf("additions through the wrapped entry: %ld\n", additions);
    return additions > 0 ? 0 : 1;
}
