/* Shape operations: reshape and its relatives. */
#include <string.h>

#include "internal.h"

fl_tensor *fl_reshape(const fl_tensor *t, int ndim, const int64_t *shape)
{
    if (fl__null_args("fl_reshape", 1, t))
        return NULL;
    char a[FL_DESC_SIZE], b[FL_DESC_SIZE];
    if (ndim < 0 || ndim > FL_MAX_DIMS || (ndim > 0 && !shape))
        return fl__error(FL_ERR_SHAPE, "fl_reshape", "invalid target of %d dimensions", ndim);
    int64_t resolved[FL_MAX_DIMS], known = 1;
    int infer = -1;
    for (int i = 0; i < ndim; i++) {
        resolved[i] = shape[i];
        if (shape[i] == -1 && infer < 0)
            infer = i;
        else if (shape[i] < 0)
            return fl__error(FL_ERR_SHAPE, "fl_reshape", "cannot reshape %s to %s", fl__describe(t, a),
                             fl__describe_shape(ndim, shape, b));
        else
            known *= shape[i];
    }
    if (infer >= 0) {
        if (known == 0 || t->numel % known != 0)
            return fl__error(FL_ERR_SHAPE, "fl_reshape", "cannot reshape %s to %s", fl__describe(t, a),
                             fl__describe_shape(ndim, shape, b));
        resolved[infer] = t->numel / known;
        known *= resolved[infer];
    }
    if (known != t->numel)
        return fl__error(FL_ERR_SHAPE, "fl_reshape", "cannot reshape %s (%lld elements) to %s", fl__describe(t, a),
                         (long long)t->numel, fl__describe_shape(ndim, shape, b));
    return fl__out(fl__reshape(t, ndim, resolved));
}
