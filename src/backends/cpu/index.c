/* The CPU backend's arange, concat, update_slice, where, gather, scatter_add and
 * index_select. (Being written: arange only so far.) */
#include "cpu.h"

#define ARANGE(type)                                          \
    do {                                                      \
        type *p = cpu_data(out);                              \
        for (int64_t i = 0; i < out->numel; i++)              \
            p[i] = (type)(start + (double)i * step);          \
    } while (0)

static int cpu_arange(fl_tensor *out, double start, double step)
{
    int rc = cpu_alloc(out);
    if (rc)
        return rc;
    switch (out->dtype) {
    case FL_U8: ARANGE(uint8_t); break;
    case FL_I32: ARANGE(int32_t); break;
    case FL_I64: ARANGE(int64_t); break;
    case FL_F32: ARANGE(float); break;
    case FL_F64: ARANGE(double); break;
    default: return fl_backend_error(FL_ERR_DTYPE, "arange has no %s kernel", fl_dtype_name(out->dtype));
    }
    return 0;
}

void cpu_register_index(fl_backend *b) { b->arange = cpu_arange; }
