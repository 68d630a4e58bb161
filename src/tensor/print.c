/* Printing in NumPy's style: nested brackets, a width shared by all elements, and
 * "..." for the middle of long axes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

enum { EDGE = 3, SUMMARIZE_ABOVE = 1000 };

typedef struct printer {
    FILE *out;
    const fl_tensor *t;
    const double *values;
    bool summarize, integral, scientific;
    int width, precision;
} printer;

static void format_value(const printer *p, double v, char *buf, size_t size)
{
    if (p->t->dtype == FL_BOOL)
        snprintf(buf, size, "%s", v != 0 ? "true" : "false");
    else if (isnan(v))
        snprintf(buf, size, "nan");
    else if (isinf(v))
        snprintf(buf, size, v > 0 ? "inf" : "-inf");
    else if (p->integral)
        snprintf(buf, size, "%.0f", v);
    else if (p->scientific)
        snprintf(buf, size, "%.*e", p->precision, v);
    else
        snprintf(buf, size, "%.*f", p->precision, v);
}

static void print_axis(const printer *p, int axis, int64_t offset, int indent)
{
    const fl_tensor *t = p->t;
    if (t->ndim == 0) {
        char buf[64];
        format_value(p, p->values[0], buf, sizeof buf);
        fputs(buf, p->out);
        return;
    }
    int64_t n = t->shape[axis], stride = 1;
    for (int i = axis + 1; i < t->ndim; i++)
        stride *= t->shape[i];
    fputc('[', p->out);
    for (int64_t i = 0; i < n; i++) {
        if (p->summarize && n > 2 * EDGE && i == EDGE) {
            fputs(axis == t->ndim - 1 ? "..., " : "...,\n", p->out);
            if (axis != t->ndim - 1)
                fprintf(p->out, "%*s", indent + 1, "");
            i = n - EDGE - 1;
            continue;
        }
        if (axis == t->ndim - 1) {
            char buf[64];
            format_value(p, p->values[offset + i], buf, sizeof buf);
            fprintf(p->out, "%*s", p->width, buf);
        } else {
            print_axis(p, axis + 1, offset + i * stride, indent + 1);
        }
        if (i + 1 < n) {
            if (axis == t->ndim - 1)
                fputs(", ", p->out);
            else {
                fputc(',', p->out);
                for (int blank = axis; blank < t->ndim - 1; blank++)
                    fputc('\n', p->out);
                fprintf(p->out, "%*s", indent + 1, "");
            }
        }
    }
    fputc(']', p->out);
}

fl_status fl_fprint(FILE *out, const fl_tensor *t)
{
    if (fl_null_args("fl_print", 2, out, t))
        return fl_last_status();
    fl_status status = FL_OK;
    fl_scope scope = fl_scope_begin();
    fl_tensor *d = fl_cast(t, FL_F64);
    double *values = malloc((size_t)(t->numel ? t->numel : 1) * sizeof *values);
    if (!values)
        status = FL_ERR_MEMORY;
    else if (!d || fl_to_host(d, values, (size_t)t->numel * sizeof *values) != FL_OK)
        status = fl_last_status();
    if (status == FL_OK) {
        printer p = {.out = out, .t = t, .values = values, .summarize = t->numel > SUMMARIZE_ABOVE,
                     .integral = !fl_dtype_is_float(t->dtype), .precision = 4};
        double largest = 0, smallest = INFINITY;
        for (int64_t i = 0; i < t->numel; i++)
            if (isfinite(values[i]) && values[i] != 0) {
                largest = fmax(largest, fabs(values[i]));
                smallest = fmin(smallest, fabs(values[i]));
            }
        p.scientific = !p.integral && (largest >= 1e8 || (smallest < 1e-4 && smallest > 0));
        for (int64_t i = 0; i < t->numel; i++) {
            char buf[64];
            format_value(&p, values[i], buf, sizeof buf);
            int w = (int)strlen(buf);
            p.width = w > p.width ? w : p.width;
        }
        char desc[FL_DESC_SIZE];
        if (t->numel == 0)
            fputs("[]", out);
        else
            print_axis(&p, 0, 0, 0);
        fprintf(out, " (%s, %s)\n", fl_describe(t, desc), t->backend->name);
    }
    free(values);
    fl_scope_end(scope);
    return status;
}

fl_status fl_print(const fl_tensor *t) { return fl_fprint(stdout, t); }
