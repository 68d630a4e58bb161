/* A function of one's own that behaves like Flare's: it takes NULL from a failed call,
 * reports bad input as "my_swish: ..." and releases its intermediates, so it composes
 * with the library's calls in one checked expression. Public headers only; run by the
 * test suite. */
#include <flare/extension.h>
#include <flare/memory.h>
#include <flare/tensor.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* x * sigmoid(x), composed of public calls. */
static fl_tensor *my_swish(const fl_tensor *x)
{
    if (fl_null_args("my_swish", 1, x))
        return NULL;
    if (!fl_dtype_is_float(fl_dtype_of(x))) {
        char d[FL_DESC_SIZE];
        return fl_error(FL_ERR_DTYPE, "my_swish", "%s is not a float tensor", fl_describe(x, d));
    }
    fl_scope s = fl_scope_begin();
    return fl_scope_return(s, fl_mul(x, fl_sigmoid(x)));
}

static int fail(const char *what)
{
    fprintf(stderr, "own_function: %s (last error: %s)\n", what, fl_last_error());
    return 1;
}

int main(void)
{
    fl_memory_stats before, after;
    fl_memory_stats_get(&before);

    /* Outside any scope the caller owns the result, and nothing else is left over. */
    fl_tensor *x = fl_full(1.0, FL_F32, 1, (int64_t[]){1000});
    fl_tensor *y = my_swish(x);
    fl_tensor *sum = fl_sum(y, NULL, 0, false);
    if (!sum || fabs(fl_item(sum) / 1000 - 1 / (1 + exp(-1.0))) > 1e-6)
        return fail("wrong value");
    fl_release(sum);
    fl_release(y);
    fl_release(x);
    fl_memory_stats_get(&after);
    if (after.in_use != before.in_use)
        return fail("intermediates were not released");

    /* Inside a scope, the scope owns it. */
    fl_scope scope = fl_scope_begin();
    fl_tensor *z = fl_add(my_swish(fl_full(0.0, FL_F32, 1, (int64_t[]){2})), fl_scalar(1, FL_F32));
    bool ok = z && fl_item(fl_sum(z, NULL, 0, false)) == 2.0;
    fl_scope_end(scope);
    if (!ok)
        return fail("wrong value in a scope");

    /* A bad input gets a message in Flare's form, and a NULL passed on keeps it. */
    scope = fl_scope_begin();
    fl_tensor *bad = fl_add(my_swish(fl_full(1, FL_I32, 1, (int64_t[]){2})), fl_scalar(1, FL_F32));
    fl_scope_end(scope);
    const char *expected = "my_swish: i32[2] is not a float tensor";
    if (bad || fl_last_status() != FL_ERR_DTYPE || strcmp(fl_last_error(), expected) != 0)
        return fail("wrong error");
    printf("%s\n", fl_last_error());
    fl_clear_error();
    if (my_swish(NULL) || fl_last_status() != FL_ERR_NULL || strcmp(fl_last_error(), "my_swish: argument 1 is NULL"))
        return fail("wrong NULL error");
    fl_clear_error();

    /* Argument checks: shapes, and axes counted from the end. */
    scope = fl_scope_begin();
    fl_tensor *m = fl_full(0, FL_F32, 2, (int64_t[]){2, 3});
    int axis;
    unsigned mask;
    ok = fl_same_shape(m, m) && !fl_same_shape(m, NULL) && fl_normalize_axis("f", -1, 2, &axis) && axis == 1 &&
         fl_axes_mask("f", (int[]){-1, 0}, 2, 2, &mask) && mask == 3 && !fl_axes_mask("f", (int[]){1, -1}, 2, 2, &mask);
    fl_scope_end(scope);
    if (!ok || strcmp(fl_last_error(), "f: axis -1 is listed twice") != 0)
        return fail("wrong argument checks");
    return 0;
}
