#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"

#define STEP 1e-6
#define RTOL 1e-5
#define ATOL 1e-6

static uint64_t lcg_state = 0x2545f4914f6cdd1dull;

static double next_uniform(void)
{
    lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(lcg_state >> 11) / 9007199254740992.0;
}

fl_tensor *gradcheck_input(double low, double high, int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++)
        v[i] = low + (high - low) * next_uniform();
    fl_tensor *t = fl_from_data(v, FL_F64, ndim, shape);
    free(v);
    return t;
}

/* sum(fn(x) * weights) as a variable; weights are made on first use and kept. */
static fl_variable *objective(gradcheck_fn fn, void *ctx, fl_variable *const *x, fl_tensor **weights)
{
    fl_variable *y = fn(x, ctx);
    if (!y)
        return NULL;
    const fl_tensor *value = fl_v_value(y);
    if (!*weights) {
        fl_tensor *w = gradcheck_input(0.5, 1.5, fl_ndim(value), fl_shape(value));
        *weights = fl_keep(fl_cast(w, fl_dtype_of(value)));
    }
    return fl_v_sum(fl_v_mul(y, fl_v_new(*weights, false)), FL_ALL_AXES, false);
}

/* More inputs than any function under test takes. */
#define MAX_INPUTS 16

static double evaluate(gradcheck_fn fn, void *ctx, fl_tensor *const *inputs, int count, fl_tensor **weights)
{
    fl_scope scope = fl_scope_begin();
    bool was = fl_set_grad_enabled(false);
    fl_variable *x[MAX_INPUTS];
    for (int i = 0; i < count; i++)
        x[i] = fl_v_new(inputs[i], false);
    double value = fl_item(fl_v_value(objective(fn, ctx, x, weights)));
    fl_set_grad_enabled(was);
    fl_scope_end(scope);
    return value;
}

void support_gradcheck(gradcheck_fn fn, void *ctx, fl_tensor *const *inputs, int count, const char *file, int line)
{
    if (count < 1 || count > MAX_INPUTS) {
        print_error("%s:%d: gradcheck: %d inputs; it takes 1 to %d\n", file, line, count, MAX_INPUTS);
        _fail(file, line);
    }
    fl_scope scope = fl_scope_begin();
    fl_tensor *weights = NULL;
    fl_variable *x[MAX_INPUTS];
    for (int i = 0; i < count; i++)
        x[i] = fl_v_new(inputs[i], fl_dtype_is_float(fl_dtype_of(inputs[i])));
    fl_variable *loss = objective(fn, ctx, x, &weights);
    if (!loss || fl_v_backward(loss, NULL, false) != FL_OK) {
        print_error("%s:%d: gradcheck: the function or its backward failed: %s\n", file, line, fl_last_error());
        fl_scope_end(scope);
        fl_release(weights);
        _fail(file, line);
    }
    fl_tensor *probe[MAX_INPUTS];
    memcpy(probe, inputs, (size_t)count * sizeof *probe);
    int failures = 0;
    for (int i = 0; i < count && failures < 5; i++) {
        if (!fl_dtype_is_float(fl_dtype_of(inputs[i])))
            continue;
        if (fl_dtype_of(inputs[i]) != FL_F64) {
            print_error("%s:%d: gradcheck: input %d is not f64\n", file, line, i);
            _fail(file, line);
        }
        int64_t n = fl_numel(inputs[i]);
        double *host = malloc((size_t)(n ? n : 1) * sizeof *host);
        double *analytic = calloc((size_t)(n ? n : 1), sizeof *analytic);
        fl_to_host(inputs[i], host, (size_t)n * sizeof *host);
        if (fl_v_grad(x[i]))
            fl_to_host(fl_cast(fl_v_grad(x[i]), FL_F64), analytic, (size_t)n * sizeof *analytic);
        for (int64_t j = 0; j < n && failures < 5; j++) {
            double saved = host[j], f[2];
            for (int side = 0; side < 2; side++) {
                host[j] = saved + (side ? -STEP : STEP);
                fl_scope inner = fl_scope_begin();
                probe[i] = fl_from_data(host, FL_F64, fl_ndim(inputs[i]), fl_shape(inputs[i]));
                f[side] = evaluate(fn, ctx, probe, count, &weights);
                fl_scope_end(inner);
            }
            host[j] = saved;
            double numeric = (f[0] - f[1]) / (2 * STEP);
            if (!(fabs(analytic[j] - numeric) <= ATOL + RTOL * fabs(numeric))) {
                print_error("%s:%d: gradcheck: input %d, element %lld: analytic %.10g, numeric %.10g\n", file, line,
                            i, (long long)j, analytic[j], numeric);
                failures++;
            }
        }
        probe[i] = inputs[i];
        free(host);
        free(analytic);
    }
    fl_scope_end(scope);
    fl_release(weights);
    if (failures)
        _fail(file, line);
    assert_no_error();
}
