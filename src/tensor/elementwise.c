/* Elementwise operations: dtype rules, broadcasting, and the scalar forms. */
#include <math.h>

#include "internal.h"

/* ---- unary ---- */

typedef enum unary_rule {
    UNARY_NUMERIC,  /* any dtype but bool; the result has the input's dtype */
    UNARY_FLOAT,    /* integers compute in f32 */
    UNARY_ROUNDING, /* integers are returned as they are */
    UNARY_FLOAT_TEST, /* bool out; integers are never nan or inf */
    UNARY_LOGICAL,  /* computes on bool */
} unary_rule;

static fl_tensor *unary(const char *fn, size_t offset, const char *entry, const fl_tensor *t, unary_rule rule)
{
    if (fl_null_args(fn, 1, t))
        return NULL;
    fl_dtype in = t->dtype;
    bool is_float = fl_dtype_is_float(in);
    if (in == FL_BOOL && rule != UNARY_LOGICAL && rule != UNARY_FLOAT && rule != UNARY_FLOAT_TEST)
        return fl_error(FL_ERR_DTYPE, fn, "is not defined for bool tensors");
    if (!is_float && rule == UNARY_ROUNDING)
        return fl_out(fl_retain(t));
    if (!is_float && rule == UNARY_FLOAT_TEST)
        return fl_out(fl__full(t->backend, 0, FL_BOOL, t->ndim, t->shape));
    fl_dtype compute = rule == UNARY_LOGICAL ? FL_BOOL
                       : rule == UNARY_FLOAT && !is_float ? FL_DEFAULT_FLOAT
                                                           : fl__compute_dtype(in);
    fl_dtype result = rule == UNARY_FLOAT_TEST || rule == UNARY_LOGICAL ? FL_BOOL
                      : is_float                                        ? in
                                                                        : compute;
    fl_unary_fn primitive = fl__primitive(fn, t->backend, offset, entry);
    if (!primitive)
        return NULL;
    fl_tensor *input = fl__cast(t, compute);
    fl_tensor *out = input ? fl__new(t->backend, rule == UNARY_FLOAT_TEST ? FL_BOOL : compute, t->ndim, t->shape) : NULL;
    if (out) {
        fl__begin(entry);
        out = fl__finish(fn, out, primitive(t->backend, out, input), 1, (const fl_tensor *const *)&input);
    }
    fl_release(input);
    if (out && out->dtype != result) {
        fl_tensor *narrowed = fl__cast(out, result);
        fl_release(out);
        out = narrowed;
    }
    return fl_out(out);
}

#define UNARY(name, rule) \
    fl_tensor *fl_##name(const fl_tensor *t) { return unary("fl_" #name, FL_PRIMITIVE(name), #name, t, rule); }

UNARY(neg, UNARY_NUMERIC)
UNARY(abs, UNARY_NUMERIC)
UNARY(sign, UNARY_NUMERIC)
UNARY(exp, UNARY_FLOAT)
UNARY(log, UNARY_FLOAT)
UNARY(log1p, UNARY_FLOAT)
UNARY(sqrt, UNARY_FLOAT)
UNARY(rsqrt, UNARY_FLOAT)
UNARY(sin, UNARY_FLOAT)
UNARY(cos, UNARY_FLOAT)
UNARY(tanh, UNARY_FLOAT)
UNARY(sigmoid, UNARY_FLOAT)
UNARY(erf, UNARY_FLOAT)
UNARY(floor, UNARY_ROUNDING)
UNARY(ceil, UNARY_ROUNDING)
UNARY(round, UNARY_ROUNDING)
UNARY(isnan, UNARY_FLOAT_TEST)
UNARY(isinf, UNARY_FLOAT_TEST)
UNARY(logical_not, UNARY_LOGICAL)

/* ---- binary ---- */

typedef enum binary_rule {
    BINARY_ARITHMETIC, /* the promoted dtype */
    BINARY_NO_BOOL,    /* the promoted dtype, which must not be bool */
    BINARY_DIVISION,   /* integers divide in f32 */
    BINARY_COMPARE,    /* compares in the promoted dtype; bool out */
    BINARY_LOGICAL,    /* computes on bool */
} binary_rule;

static fl_tensor *binary(const char *fn, size_t offset, const char *entry, const fl_tensor *a, const fl_tensor *b,
                         binary_rule rule)
{
    if (fl_null_args(fn, 2, a, b))
        return NULL;
    char da[FL_DESC_SIZE], db[FL_DESC_SIZE];
    if (fl_mixed_backends(fn, 2, a, b))
        return NULL;
    fl_dtype common = rule == BINARY_LOGICAL ? FL_BOOL : fl_promote_types(a->dtype, b->dtype);
    if (rule == BINARY_DIVISION && !fl_dtype_is_float(common))
        common = FL_DEFAULT_FLOAT;
    if (rule == BINARY_NO_BOOL && common == FL_BOOL)
        return fl_error(FL_ERR_DTYPE, fn, "is not defined for bool tensors (%s, %s)", fl_describe(a, da),
                         fl_describe(b, db));
    fl_dtype compute = fl__compute_dtype(common);
    fl_dtype out_dtype = rule == BINARY_COMPARE || rule == BINARY_LOGICAL ? FL_BOOL : compute;
    fl_binary_fn primitive = fl__primitive(fn, a->backend, offset, entry);
    if (!primitive)
        return NULL;

    /* The fast path: nothing to broadcast or convert. */
    if (a->dtype == compute && b->dtype == compute && fl_same_shape(a, b)) {
        fl_tensor *out = fl__new(a->backend, out_dtype, a->ndim, a->shape);
        if (!out)
            return NULL;
        const fl_tensor *inputs[2] = {a, b};
        fl__begin(entry);
        return fl_out(fl__finish(fn, out, primitive(a->backend, out, a, b), 2, inputs));
    }

    int ndim;
    int64_t shape[FL_MAX_DIMS];
    if (!fl__broadcast_shapes(a->ndim, a->shape, b->ndim, b->shape, &ndim, shape))
        return fl_error(FL_ERR_SHAPE, fn, "shapes %s and %s do not broadcast", fl_describe(a, da),
                         fl_describe(b, db));
    fl_tensor *ca = fl__cast(a, compute), *cb = ca ? fl__cast(b, compute) : NULL;
    fl_tensor *ea = cb ? fl__expand(ca, ndim, shape) : NULL, *eb = ea ? fl__expand(cb, ndim, shape) : NULL;
    fl_tensor *out = eb ? fl__new(a->backend, out_dtype, ndim, shape) : NULL;
    if (out) {
        const fl_tensor *inputs[2] = {ea, eb};
        fl__begin(entry);
        out = fl__finish(fn, out, primitive(a->backend, out, ea, eb), 2, inputs);
    }
    fl_release(ca);
    fl_release(cb);
    fl_release(ea);
    fl_release(eb);
    if (out && rule != BINARY_COMPARE && rule != BINARY_LOGICAL && common != compute) {
        fl_tensor *narrowed = fl__cast(out, common);
        fl_release(out);
        out = narrowed;
    }
    return fl_out(out);
}

#define BINARY(name, rule)                                                  \
    fl_tensor *fl_##name(const fl_tensor *a, const fl_tensor *b)            \
    {                                                                       \
        return binary("fl_" #name, FL_PRIMITIVE(name), #name, a, b, rule);  \
    }

BINARY(add, BINARY_ARITHMETIC)
BINARY(sub, BINARY_NO_BOOL)
BINARY(mul, BINARY_ARITHMETIC)
BINARY(div, BINARY_DIVISION)
BINARY(minimum, BINARY_ARITHMETIC)
BINARY(maximum, BINARY_ARITHMETIC)
BINARY(eq, BINARY_COMPARE)
BINARY(ne, BINARY_COMPARE)
BINARY(lt, BINARY_COMPARE)
BINARY(le, BINARY_COMPARE)
BINARY(logical_and, BINARY_LOGICAL)
BINARY(logical_or, BINARY_LOGICAL)

/* An integer to a negative integer power has no integer result: PyTorch and NumPy
 * refuse it, and so does Flare rather than truncate to 0 or +-1. The exponent's
 * values are read (a reduction and a sync) only when both sides are integers and
 * the exponent's dtype can hold negatives; fl_pow_scalar checks its scalar instead. */
static fl_tensor *power(const char *fn, const fl_tensor *a, const fl_tensor *b, bool check_exponent)
{
    if (fl_null_args(fn, 2, a, b) || fl_mixed_backends(fn, 2, a, b))
        return NULL;
    if (check_exponent && fl_dtype_is_integer(fl_promote_types(a->dtype, b->dtype)) &&
        (b->dtype == FL_I32 || b->dtype == FL_I64) && b->numel > 0) {
        fl_scope scope = fl_scope_begin();
        fl_tensor *low = fl_min(b, FL_ALL_AXES, false);
        double lowest = low ? fl_item(low) : 0;
        fl_scope_end(scope);
        if (!low)
            return NULL;
        if (lowest < 0) {
            char da[FL_DESC_SIZE], db[FL_DESC_SIZE];
            return fl_error(FL_ERR_VALUE, fn,
                            "integers to negative integer powers are not allowed (%s ** %s holds %.0f); "
                            "cast the base to a float dtype", fl_describe(a, da), fl_describe(b, db), lowest);
        }
    }
    return binary(fn, FL_PRIMITIVE(pow), "pow", a, b, BINARY_NO_BOOL);
}

fl_tensor *fl_pow(const fl_tensor *a, const fl_tensor *b) { return power("fl_pow", a, b, true); }

/* a > b is b < a: one primitive for each ordering. */
fl_tensor *fl_gt(const fl_tensor *a, const fl_tensor *b) { return binary("fl_gt", FL_PRIMITIVE(lt), "lt", b, a, BINARY_COMPARE); }
fl_tensor *fl_ge(const fl_tensor *a, const fl_tensor *b) { return binary("fl_ge", FL_PRIMITIVE(le), "le", b, a, BINARY_COMPARE); }

/* ---- scalars ---- */

/* The dtype of a "weak" scalar next to t: t's own unless the scalar is of a higher
 * kind (a fraction next to integers gives f32; a number next to bool gives i64). */
static fl_dtype scalar_dtype(const fl_tensor *t, double value)
{
    bool integral = value == trunc(value) && fabs(value) < 0x1p63;
    if (fl_dtype_is_float(t->dtype))
        return t->dtype;
    if (!integral)
        return FL_DEFAULT_FLOAT;
    return t->dtype == FL_BOOL ? FL_I64 : t->dtype;
}

static fl_tensor *with_scalar(const char *fn, fl_tensor *(*op)(const fl_tensor *, const fl_tensor *),
                              const fl_tensor *t, double value)
{
    if (fl_null_args(fn, 1, t))
        return NULL;
    fl_dtype dtype = scalar_dtype(t, value);
    if (op == fl_div && !fl__scalar_fits(value, dtype))
        dtype = FL_DEFAULT_FLOAT; /* integers divide in floating point anyway */
    if (!fl__scalar_fits(value, dtype)) {
        char d[FL_DESC_SIZE];
        return fl_error(FL_ERR_VALUE, fn, "%.17g does not fit %s's dtype %s; cast the tensor to a wider dtype",
                        value, fl_describe(t, d), fl_dtype_name(dtype));
    }
    fl_tensor *s = fl__full(t->backend, value, dtype, 0, NULL);
    fl_scope scope = fl_scope_begin();
    fl_tensor *result = s ? op(t, s) : NULL;
    result = fl_scope_return(scope, result);
    fl_release(s);
    return result;
}

#define SCALAR(name, op) \
    fl_tensor *fl_##name##_scalar(const fl_tensor *t, double value) { return with_scalar("fl_" #name "_scalar", op, t, value); }

SCALAR(add, fl_add)
SCALAR(sub, fl_sub)
SCALAR(mul, fl_mul)
SCALAR(div, fl_div)

fl_tensor *fl_add_scaled(const fl_tensor *a, double alpha, const fl_tensor *b, double beta)
{
    const char *fn = "fl_add_scaled";
    if (fl_null_args(fn, 2, a, b) || fl_mixed_backends(fn, 2, a, b))
        return NULL;
    FL_ENTRY_TYPE(add_scaled) fused = a->backend->add_scaled;
    if (fused && a->dtype == b->dtype && (a->dtype == FL_F32 || a->dtype == FL_F64) && fl_same_shape(a, b)) {
        fl__begin("add_scaled");
        fl_tensor *out = fl__new(a->backend, a->dtype, a->ndim, a->shape);
        if (!out) {
            fl__end();
            return NULL;
        }
        int rc = fused(a->backend, out, a, b, alpha, beta);
        if (!fl__declined(rc)) {
            const fl_tensor *inputs[2] = {a, b};
            return fl_out(fl__finish(fn, out, rc, 2, inputs));
        }
        fl_release(out);
    }
    /* Composed, a factor of 1 is left out (x * 1 is x): a backend without the kernel runs
     * the two operations that a momentum buffer or an SGD step is, not four. */
    fl_scope scope = fl_scope_begin();
    return fl_scope_return(scope, fl_add(alpha == 1 ? a : fl_mul_scalar(a, alpha),
                                         beta == 1 ? b : fl_mul_scalar(b, beta)));
}

/* Whether a fused optimizer step may write written[0..count) (the parameter first; a
 * NULL one is an absent state): each is referenced by nothing else and is distinct
 * from the others, and all, and the gradient, are like the parameter: one float
 * dtype, one backend, one shape. */
static bool may_step_in_place(const fl_tensor *const *written, int count, const fl_tensor *grad)
{
    const fl_tensor *param = written[0];
    bool may = (param->dtype == FL_F32 || param->dtype == FL_F64) && grad->dtype == param->dtype &&
               grad->backend == param->backend && fl_same_shape(grad, param);
    for (int i = 0; i < count && may; i++) {
        const fl_tensor *t = written[i];
        if (!t)
            continue;
        may = t->refcount == 1 && t->dtype == param->dtype && t->backend == param->backend && fl_same_shape(t, param);
        for (int j = 0; j < i; j++)
            may = may && t != written[j];
    }
    return may;
}

/* The status of a fused optimizer step that the backend ran (rc): FL_OK,
 * FL_ERR_UNSUPPORTED where it declined, or an error recorded naming fn. */
static fl_status optimizer_step_status(const char *fn, int rc, const fl_tensor *param)
{
    if (fl__declined(rc))
        return FL_ERR_UNSUPPORTED;
    fl__end();
    if (rc == 0)
        return FL_OK;
    char message[512] = "", described[FL_DESC_SIZE];
    fl_status status = fl__take_backend_error(message, sizeof message);
    status = status != FL_OK ? status : (fl_status)rc;
    fl_error(status, fn, "%s (backend %s; parameter %s)", message[0] ? message : fl_status_name(status),
             param->backend->name, fl_describe(param, described));
    return status;
}

fl_status fl__sgd_update(const char *fn, const fl_tensor *param, fl_tensor *buffer, const fl_tensor *grad,
                         const fl_sgd_desc *d)
{
    FL_ENTRY_TYPE(sgd_update) fused = param->backend->sgd_update;
    if (!fused || !may_step_in_place((const fl_tensor *[]){param, buffer}, 2, grad))
        return FL_ERR_UNSUPPORTED;
    fl__begin("sgd_update");
    return optimizer_step_status(fn, fused(param->backend, (fl_tensor *)(uintptr_t)param, buffer, grad, d), param);
}

fl_status fl__adam_update(const char *fn, const fl_tensor *param, fl_tensor *exp_avg, fl_tensor *exp_avg_sq,
                          fl_tensor *max_exp_avg_sq, const fl_tensor *grad, const fl_adam_desc *d)
{
    FL_ENTRY_TYPE(adam_update) fused = param->backend->adam_update;
    if (!fused || d->amsgrad != (max_exp_avg_sq != NULL) ||
        !may_step_in_place((const fl_tensor *[]){param, exp_avg, exp_avg_sq, max_exp_avg_sq}, 4, grad))
        return FL_ERR_UNSUPPORTED;
    fl__begin("adam_update");
    return optimizer_step_status(
        fn, fused(param->backend, (fl_tensor *)(uintptr_t)param, exp_avg, exp_avg_sq, max_exp_avg_sq, grad, d), param);
}

/* The base's dtype decides: a negative whole exponent of an integer tensor is refused. */
static fl_tensor *pow_checked(const fl_tensor *t, const fl_tensor *s) { return power("fl_pow_scalar", t, s, false); }

fl_tensor *fl_pow_scalar(const fl_tensor *t, double value)
{
    if (t && value < 0 && !fl_dtype_is_float(scalar_dtype(t, value))) {
        char d[FL_DESC_SIZE];
        return fl_error(FL_ERR_VALUE, "fl_pow_scalar",
                        "integers to negative integer powers are not allowed (%s ** %g); cast the base to a float "
                        "dtype", fl_describe(t, d), value);
    }
    return with_scalar("fl_pow_scalar", pow_checked, t, value);
}
SCALAR(maximum, fl_maximum)
SCALAR(minimum, fl_minimum)

/* ---- composites ---- */

fl_tensor *fl_clamp(const fl_tensor *t, double low, double high)
{
    /* A bound past the end of a u8 or i32 range clamps nothing on its side (as in
     * PyTorch); the range's end does the same and fits the scalar operations. */
    if (t && (t->dtype == FL_U8 || t->dtype == FL_I32)) {
        double min = t->dtype == FL_U8 ? 0 : -0x1p31, max = t->dtype == FL_U8 ? 255 : 0x1p31 - 1;
        low = low < min ? min : low;
        high = high > max ? max : high;
    }
    fl_scope scope = fl_scope_begin();
    return fl_scope_return(scope, fl_minimum_scalar(fl_maximum_scalar(t, low), high));
}

fl_tensor *fl_square(const fl_tensor *t) { return fl_mul(t, t); }

fl_tensor *fl_reciprocal(const fl_tensor *t)
{
    if (fl_null_args("fl_reciprocal", 1, t))
        return NULL;
    fl_tensor *one = fl__full(t->backend, 1, fl_dtype_is_float(t->dtype) ? t->dtype : FL_DEFAULT_FLOAT, 0, NULL);
    fl_tensor *result = fl_div(one, t);
    fl_release(one);
    return result;
}
