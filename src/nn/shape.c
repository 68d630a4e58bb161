/* View and Padding: layers without parameters that change the shape. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct view_state {
    int ndim;
    int64_t shape[FL_MAX_DIMS];
} view_state;

static fl_variable *view_forward(fl_module *m, fl_variable *x)
{
    const view_state *s = fl_module_state(m);
    const fl_tensor *xv = fl_v_value(x);
    int64_t shape[FL_MAX_DIMS];
    for (int i = 0; i < s->ndim; i++) {
        if (s->shape[i] == 0 && i >= fl_ndim(xv)) {
            char d[FL_DESC_SIZE];
            return fl_error(FL_ERR_SHAPE, "View", "cannot keep axis %d of an input %s", i, fl_describe(xv, d));
        }
        shape[i] = s->shape[i] == 0 ? fl_shape(xv)[i] : s->shape[i];
    }
    return fl_v_reshape(x, s->ndim, shape);
}

static const fl_module_type view_type = {.name = "View", .forward = view_forward};

fl_module *fl_nn_view(int ndim, const int64_t *shape)
{
    const char *fn = "fl_nn_view";
    if (ndim < 0 || ndim > FL_MAX_DIMS || (ndim && fl_null_args(fn, 1, shape)))
        return ndim < 0 || ndim > FL_MAX_DIMS ? fl_error(FL_ERR_VALUE, fn, "%d axes", ndim) : NULL;
    int inferred = 0;
    for (int i = 0; i < ndim; i++) {
        inferred += shape[i] == -1;
        if (shape[i] < -1 || inferred > 1) {
            char d[FL_DESC_SIZE];
            return fl_error(FL_ERR_VALUE, fn, "shape %s: sizes are non-negative, with at most one -1",
                             fl_describe_shape(ndim, shape, d));
        }
    }
    view_state *s = malloc(sizeof *s);
    if (!s)
        return fl_error(FL_ERR_MEMORY, fn, "out of memory");
    s->ndim = ndim;
    memcpy(s->shape, shape, (size_t)ndim * sizeof *shape);
    return fl_module_new(&view_type, s);
}

typedef struct padding_state {
    int count;
    int64_t before[FL_MAX_DIMS], after[FL_MAX_DIMS];
    double value;
} padding_state;

static fl_variable *padding_forward(fl_module *m, fl_variable *x)
{
    const padding_state *s = fl_module_state(m);
    char what[48];
    snprintf(what, sizeof what, "an input of at least %d axes", s->count);
    if (!fl__nn_check_input(m, x, s->count, FL_MAX_DIMS, -1, 0, what))
        return NULL;
    int ndim = fl_ndim(fl_v_value(x)), lead = ndim - s->count;
    int64_t before[FL_MAX_DIMS] = {0}, after[FL_MAX_DIMS] = {0};
    memcpy(before + lead, s->before, (size_t)s->count * sizeof *before);
    memcpy(after + lead, s->after, (size_t)s->count * sizeof *after);
    return fl_v_pad(x, before, after, s->value);
}

static const fl_module_type padding_type = {.name = "ConstantPadNd", .forward = padding_forward};

fl_module *fl_nn_padding(int count, const int64_t *before, const int64_t *after, double value)
{
    const char *fn = "fl_nn_padding";
    if (count < 1 || count > FL_MAX_DIMS)
        return fl_error(FL_ERR_VALUE, fn, "padding of %d axes", count);
    if (fl_null_args(fn, 2, before, after))
        return NULL;
    padding_state *s = malloc(sizeof *s);
    if (!s)
        return fl_error(FL_ERR_MEMORY, fn, "out of memory");
    s->count = count;
    s->value = value;
    memcpy(s->before, before, (size_t)count * sizeof *before);
    memcpy(s->after, after, (size_t)count * sizeof *after);
    return fl_module_new(&padding_type, s);
}
