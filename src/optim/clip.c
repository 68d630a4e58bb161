/* Gradient clipping by the norm of all the gradients together, as
 * torch.nn.utils.clip_grad_norm_. */
#include <math.h>
#include <stdlib.h>

#include "internal.h"

/* The p-norm of t's values, in t's dtype. */
static fl_tensor *norm(const fl_tensor *t, double p)
{
    if (isinf(p))
        return fl_max(fl_abs(t), FL_ALL_AXES, false);
    if (p == 2)
        return fl_sqrt(fl_sum(fl_mul(t, t), FL_ALL_AXES, false));
    if (p == 1)
        return fl_sum(fl_abs(t), FL_ALL_AXES, false);
    return fl_pow_scalar(fl_sum(fl_pow_scalar(fl_abs(t), p), FL_ALL_AXES, false), 1 / p);
}

double fl_clip_grad_norm(fl_variable *const *params, size_t count, double max_norm, double norm_type)
{
    const char *fn = "fl_clip_grad_norm";
    if (count > 0 && fl_null_args(fn, 1, params))
        return NAN;
    if (!fl__check_nonnegative(fn, "max_norm", max_norm))
        return NAN;
    if (!(norm_type > 0))
        return fl_error(FL_ERR_VALUE, fn, "norm_type = %g: it must be > 0 (or INFINITY)", norm_type), NAN;
    size_t ngrads = 0;
    fl_dtype dtype = FL_BOOL;
    for (size_t i = 0; i < count; i++) {
        if (!params[i])
            return fl_error(FL_ERR_NULL, fn, "parameter %zu is NULL", i), NAN;
        const fl_tensor *grad = fl_v_grad(params[i]);
        if (grad) {
            dtype = ngrads++ ? fl_promote_types(dtype, fl_dtype_of(grad)) : fl_dtype_of(grad);
        }
    }
    if (ngrads == 0)
        return 0;
    fl_tensor **norms = malloc(ngrads * sizeof *norms);
    if (!norms)
        return fl_error(FL_ERR_MEMORY, fn, "out of memory"), NAN;
    bool recording = fl_set_grad_enabled(false);
    fl_scope scope = fl_scope_begin();
    /* The norm of the per-gradient norms, in their promoted dtype, as PyTorch stacks them. */
    for (size_t i = 0, k = 0; i < count; i++)
        if (fl_v_grad(params[i]))
            norms[k++] = fl_cast(norm(fl_v_grad(params[i]), norm_type), dtype);
    fl_tensor *total = norm(fl_stack(norms, (int)ngrads, 0), norm_type);
    fl_tensor *coef = fl_div(fl_full_like(total, max_norm), fl_add_scalar(total, 1e-6));
    coef = fl_minimum_scalar(coef, 1.0);
    fl_status status = FL_OK;
    for (size_t i = 0; i < count && status == FL_OK; i++) {
        const fl_tensor *grad = fl_v_grad(params[i]);
        if (grad)
            status = fl_v_set_grad(params[i], fl_mul(grad, fl_cast(coef, fl_dtype_of(grad))));
    }
    double result = status == FL_OK ? fl_item(total) : NAN;
    fl_scope_end(scope);
    fl_set_grad_enabled(recording);
    free(norms);
    return result;
}
