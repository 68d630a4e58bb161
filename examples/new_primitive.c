/* A new primitive: new_primitive.patch appends `hypot` to the backend table's one
 * list (FL_BACKEND_OPERATIONS in backend.h) and writes its cpu kernel, its lazy
 * delegation and fl_hypot in the tensor layer. The struct, the entry's name, its
 * version and the count follow from the list alone, which this program checks on a
 * tree with the patch applied (tests/new_primitive.sh builds one and runs it). */
#include <flare/backend.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
    int last = fl_backend_primitive_count() - 1;
    if (strcmp(fl_backend_primitive_name(last), "hypot") != 0 || fl_backend_primitive_version(last) != 9 ||
        fl_backend_size(9) != sizeof(fl_backend)) {
        fprintf(stderr, "the list did not make the entry: last is %s\n", fl_backend_primitive_name(last));
        return 1;
    }
    fl_scope scope = fl_scope_begin();
    fl_tensor *a = fl_from_data((const float[]){3, 5, 1e30f}, FL_F32, FL_SHAPE(3));
    fl_tensor *b = fl_from_data((const float[]){4, 12, 1e30f}, FL_F32, FL_SHAPE(3));
    float c[3] = {0};
    fl_status status = fl_to_host(fl_hypot(a, b), c, sizeof c);
    fl_scope_end(scope);
    if (status != FL_OK) {
        fprintf(stderr, "%s\n", fl_last_error());
        return 1;
    }
    printf("hypot on %s: %g %g %g\n", fl_default_backend()->name, c[0], c[1], c[2]);
    return c[0] == 5 && c[1] == 13 && fabsf(c[2] / 1.4142135e30f - 1) < 1e-6f ? 0 : 1;
}
