/* Creating tensors, random numbers, reading values back, casts between dtypes and backends. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static bool check_dtype(const char *fn, fl_dtype dtype)
{
    if ((unsigned)dtype >= FL_DTYPE_COUNT) {
        fl_error(FL_ERR_DTYPE, fn, "invalid dtype %d", (int)dtype);
        return false;
    }
    return true;
}

/* A fresh tensor on the default backend made by one creation primitive. */
#define CREATE(fn, entry, dtype, ndim, shape, ...)                                                        \
    do {                                                                                                  \
        if (!check_dtype(fn, dtype) || !fl_check_size(fn, dtype, ndim, shape))                                     \
            return NULL;                                                                                  \
        const fl_backend *backend_ = fl_default_backend();                                                \
        __typeof__(backend_->entry) primitive_ = fl__primitive(fn, backend_, FL_PRIMITIVE(entry), #entry); \
        if (!primitive_)                                                                                  \
            return NULL;                                                                                  \
        fl_tensor *out_ = fl__new(backend_, dtype, ndim, shape);                                          \
        if (!out_)                                                                                        \
            return NULL;                                                                                  \
        fl__begin(#entry);                                                                                \
        return fl_out(fl__finish(fn, out_, primitive_(backend_, out_, __VA_ARGS__), 0, NULL));                     \
    } while (0)

static fl_tensor *fl_from_data_unbounded(const void *data, fl_dtype dtype, int ndim, const int64_t *shape)
{
    CREATE("fl_from_data", from_host, dtype, ndim, shape, data);
}

fl_tensor *fl_from_data(const void *data, fl_dtype dtype, int ndim, const int64_t *shape)
{
    if (!check_dtype("fl_from_data", dtype) || !fl_check_size("fl_from_data", dtype, ndim, shape))
        return NULL;
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++)
        numel *= shape[i];
    if (!data && numel > 0)
        return fl_error(FL_ERR_NULL, "fl_from_data", "data is NULL for %lld elements", (long long)numel);
    fl_tensor *out = fl_from_data_unbounded(data, dtype, ndim, shape);
    if (out && fl_dtype_is_integer(dtype) && numel > 0)
        fl__bound_from_host(out, data);
    return out;
}

/* ---- host access (internal.h) ---- */

void *fl__host_data(const fl_tensor *t)
{
    void *data = NULL;
    FL_ENTRY_TYPE(host_data) entry = t->backend->host_data;
    if (!entry || entry(t->backend, t, &data) != 0) {
        fl__take_backend_error(NULL, 0); /* declining is not an error */
        return NULL;
    }
    return data;
}

bool fl__host_output_begin(const char *fn, fl__host_output *out, const fl_backend *backend, fl_dtype dtype, int ndim,
                           const int64_t *shape)
{
    *out = (fl__host_output){0};
    FL_ENTRY_TYPE(empty) empty = backend->empty;
    fl_tensor *t = fl__new(backend, dtype, ndim, shape);
    if (!t)
        return false;
    if (empty && empty(backend, t) == 0 && (t->numel == 0 || (out->data = fl__host_data(t)))) {
        out->tensor = t;
        return true;
    }
    if (t->impl) { /* storage without host access (device memory): from_host makes its own */
        backend->release(backend, t);
        t->impl = NULL;
    }
    fl__take_backend_error(NULL, 0); /* no host access: stage in host memory */
    size_t bytes = (size_t)t->numel * fl_dtype_size(dtype);
    out->tensor = t; /* metadata only until from_host fills it */
    out->staging = malloc(bytes ? bytes : 1);
    out->data = out->staging;
    if (!out->staging) {
        fl__host_output_abandon(out);
        fl_error(FL_ERR_MEMORY, fn, "no memory to stage %zu bytes", bytes);
        return false;
    }
    return true;
}

fl_tensor *fl__host_output_finish(const char *fn, fl__host_output *out)
{
    fl_tensor *t = out->tensor;
    out->tensor = NULL;
    if (t && out->staging) {
        FL_ENTRY_TYPE(from_host) from_host = fl__primitive(fn, t->backend, FL_PRIMITIVE(from_host), "from_host");
        if (from_host) {
            fl__begin("from_host");
            t = fl__finish(fn, t, from_host(t->backend, t, out->staging), 0, NULL);
        } else {
            fl_release(t);
            t = NULL;
        }
    }
    fl__host_output_abandon(out);
    return t;
}

void fl__host_output_abandon(fl__host_output *out)
{
    fl_release(out->tensor);
    free(out->staging);
    *out = (fl__host_output){0};
}

fl_tensor *fl_from_fill(fl_dtype dtype, int ndim, const int64_t *shape, fl_fill_fn fill, void *context)
{
    static const char fn[] = "fl_from_fill";
    if (!check_dtype(fn, dtype) || !fl_check_size(fn, dtype, ndim, shape))
        return NULL;
    if (!fill)
        return fl_error(FL_ERR_NULL, fn, "fill is NULL");
    fl__host_output out;
    if (!fl__host_output_begin(fn, &out, fl_default_backend(), dtype, ndim, shape))
        return NULL;
    if (out.tensor->numel > 0) {
        if (fill(out.data, (size_t)out.tensor->numel * fl_dtype_size(dtype), context) != FL_OK) {
            fl__host_output_abandon(&out);
            return NULL;
        }
        if (fl_dtype_is_integer(dtype))
            fl__bound_from_host(out.tensor, out.data);
    }
    return fl_out(fl__host_output_finish(fn, &out));
}

static fl_tensor *full_unbounded(const char *fn, double value, fl_dtype dtype, int ndim, const int64_t *shape)
{
    CREATE(fn, full, dtype, ndim, shape, value);
}

static fl_tensor *full(const char *fn, double value, fl_dtype dtype, int ndim, const int64_t *shape)
{
    if ((unsigned)dtype < FL_DTYPE_COUNT && !fl__scalar_fits(value, dtype)) /* converting it would be undefined */
        return fl_error(FL_ERR_VALUE, fn, "%.17g does not fit the dtype %s", value, fl_dtype_name(dtype));
    fl_tensor *out = full_unbounded(fn, value, dtype, ndim, shape);
    if (out && fl_dtype_is_integer(dtype)) {
        out->bounded = true;
        out->low = out->high = (int64_t)value;
    }
    return out;
}

fl_tensor *fl_full(double value, fl_dtype dtype, int ndim, const int64_t *shape)
{
    return full("fl_full", value, dtype, ndim, shape);
}

fl_tensor *fl_zeros(fl_dtype dtype, int ndim, const int64_t *shape) { return full("fl_zeros", 0, dtype, ndim, shape); }
fl_tensor *fl_ones(fl_dtype dtype, int ndim, const int64_t *shape) { return full("fl_ones", 1, dtype, ndim, shape); }
fl_tensor *fl_scalar(double value, fl_dtype dtype) { return full("fl_scalar", value, dtype, 0, NULL); }

/* On t's backend, as PyTorch's new_full and full_like keep the device: what is made
 * to combine with t (an optimizer's first state, a gradient's seed) must live where t
 * does. */
static fl_tensor *full_beside(const char *fn, const fl_tensor *t, double value, fl_dtype dtype, int ndim,
                              const int64_t *shape)
{
    if (fl_null_args(fn, 1, t) || !check_dtype(fn, dtype) || !fl_check_size(fn, dtype, ndim, shape))
        return NULL;
    if (!fl__scalar_fits(value, dtype))
        return fl_error(FL_ERR_VALUE, fn, "%.17g does not fit the dtype %s", value, fl_dtype_name(dtype));
    return fl_out(fl__full(t->backend, value, dtype, ndim, shape));
}

fl_tensor *fl_full_like(const fl_tensor *t, double value)
{
    return full_beside("fl_full_like", t, value, t ? t->dtype : FL_F32, t ? t->ndim : 0, t ? t->shape : NULL);
}

fl_tensor *fl_new_full(const fl_tensor *t, double value, fl_dtype dtype, int ndim, const int64_t *shape)
{
    return full_beside("fl_new_full", t, value, dtype, ndim, shape);
}

fl_tensor *fl_new_scalar(const fl_tensor *t, double value, fl_dtype dtype)
{
    return full_beside("fl_new_scalar", t, value, dtype, 0, NULL);
}

fl_tensor *fl_zeros_like(const fl_tensor *t) { return fl_full_like(t, 0); }
fl_tensor *fl_ones_like(const fl_tensor *t) { return fl_full_like(t, 1); }

fl_tensor *fl_arange(double start, double stop, double step, fl_dtype dtype)
{
    if (step == 0 || !isfinite(step) || !isfinite(start) || !isfinite(stop))
        return fl_error(FL_ERR_VALUE, "fl_arange", "start %g, stop %g and step %g must be finite, step non-zero",
                        start, stop, step);
    double count = ceil((stop - start) / step);
    int64_t n = count > 0 ? (int64_t)count : 0;
    CREATE("fl_arange", arange, dtype, 1, &n, start, step);
}

fl_tensor *fl_linspace(double start, double stop, int64_t count, fl_dtype dtype)
{
    if (count < 0)
        return fl_error(FL_ERR_VALUE, "fl_linspace", "count must be non-negative, got %lld", (long long)count);
    double step = count > 1 ? (stop - start) / (double)(count - 1) : 0;
    CREATE("fl_linspace", arange, dtype, 1, &count, start, step);
}

fl_tensor *fl_eye(int64_t rows, int64_t cols, fl_dtype dtype)
{
    if (rows < 0 || cols < 0)
        return fl_error(FL_ERR_VALUE, "fl_eye", "sizes must be non-negative, got %lld x %lld", (long long)rows,
                        (long long)cols);
    fl_scope scope = fl_scope_begin();
    fl_tensor *r = fl_reshape(fl_arange(0, (double)rows, 1, FL_I64), FL_SHAPE(rows, 1));
    fl_tensor *c = fl_reshape(fl_arange(0, (double)cols, 1, FL_I64), FL_SHAPE(1, cols));
    return fl_scope_return(scope, fl_cast(fl_eq(r, c), dtype));
}

/* ---- random ---- */

static uint64_t random_seed;
static uint64_t random_counter;

void fl_manual_seed(uint64_t seed)
{
    __atomic_store_n(&random_seed, seed, __ATOMIC_RELAXED);
    __atomic_store_n(&random_counter, 0, __ATOMIC_RELAXED);
}

void fl_random_state(uint64_t *seed, uint64_t *counter)
{
    if (seed)
        *seed = __atomic_load_n(&random_seed, __ATOMIC_RELAXED);
    if (counter)
        *counter = __atomic_load_n(&random_counter, __ATOMIC_RELAXED);
}

void fl_set_random_state(uint64_t seed, uint64_t counter)
{
    __atomic_store_n(&random_seed, seed, __ATOMIC_RELAXED);
    __atomic_store_n(&random_counter, counter, __ATOMIC_RELAXED);
}

/* This thread's stream, while one is begun. */
static _Thread_local fl_random_stream thread_stream;

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

uint64_t fl_random_stream_key(void)
{
    uint64_t seed = __atomic_load_n(&random_seed, __ATOMIC_RELAXED);
    uint64_t offset = __atomic_fetch_add(&random_counter, 1, __ATOMIC_RELAXED);
    return mix64(mix64(seed + 0x9E3779B97F4A7C15u) ^ offset);
}

fl_random_stream fl_random_stream_begin(uint64_t key)
{
    fl_random_stream previous = thread_stream;
    thread_stream = (fl_random_stream){.key = key, .counter = 0, .active = true};
    return previous;
}

void fl_random_stream_end(fl_random_stream previous)
{
    thread_stream = previous;
}

void fl__random_reserve(uint64_t count, uint64_t *seed, uint64_t *offset)
{
    if (thread_stream.active) {
        *seed = thread_stream.key;
        *offset = thread_stream.counter;
        thread_stream.counter += count;
        return;
    }
    *seed = __atomic_load_n(&random_seed, __ATOMIC_RELAXED);
    *offset = __atomic_fetch_add(&random_counter, count, __ATOMIC_RELAXED);
}

static fl_tensor *random_tensor(const char *fn, fl_random_kind kind, fl_dtype dtype, int ndim, const int64_t *shape)
{
    if (!check_dtype(fn, dtype) || !fl_check_size(fn, dtype, ndim, shape))
        return NULL;
    if (!fl_dtype_is_float(dtype))
        return fl_error(FL_ERR_DTYPE, fn, "random values need a float dtype, not %s", fl_dtype_name(dtype));
    const fl_backend *backend = fl_default_backend();
    __typeof__(backend->random) random = fl__primitive(fn, backend, FL_PRIMITIVE(random), "random");
    if (!random)
        return NULL;
    fl_dtype compute = fl__compute_dtype(dtype);
    fl_tensor *out = fl__new(backend, compute, ndim, shape);
    if (!out)
        return NULL;
    uint64_t seed, offset;
    fl__random_reserve(((uint64_t)out->numel + 3) / 4, &seed, &offset);
    fl__begin("random");
    out = fl__finish(fn, out, random(backend, out, kind, seed, offset), 0, NULL);
    if (out && compute != dtype) {
        fl_tensor *narrowed = fl__cast(out, dtype);
        fl_release(out);
        out = narrowed;
    }
    return fl_out(out);
}

fl_tensor *fl_rand(fl_dtype dtype, int ndim, const int64_t *shape)
{
    return random_tensor("fl_rand", FL_RANDOM_UNIFORM, dtype, ndim, shape);
}

fl_tensor *fl_randn(fl_dtype dtype, int ndim, const int64_t *shape)
{
    return random_tensor("fl_randn", FL_RANDOM_NORMAL, dtype, ndim, shape);
}

fl_tensor *fl_uniform(double low, double high, fl_dtype dtype, int ndim, const int64_t *shape)
{
    if (!(low <= high))
        return fl_error(FL_ERR_VALUE, "fl_uniform", "low %g must not exceed high %g", low, high);
    fl_scope scope = fl_scope_begin();
    fl_tensor *u = fl_rand(dtype, ndim, shape);
    return fl_scope_return(scope, fl_add_scalar(fl_mul_scalar(u, high - low), low));
}

fl_tensor *fl_normal(double mean, double std, fl_dtype dtype, int ndim, const int64_t *shape)
{
    if (!(std >= 0))
        return fl_error(FL_ERR_VALUE, "fl_normal", "std must be non-negative, got %g", std);
    fl_scope scope = fl_scope_begin();
    fl_tensor *n = fl_randn(dtype, ndim, shape);
    return fl_scope_return(scope, fl_add_scalar(fl_mul_scalar(n, std), mean));
}

fl_tensor *fl_randint(int64_t low, int64_t high, fl_dtype dtype, int ndim, const int64_t *shape)
{
    if (low >= high)
        return fl_error(FL_ERR_VALUE, "fl_randint", "low %lld must be below high %lld", (long long)low,
                        (long long)high);
    if (!check_dtype("fl_randint", dtype))
        return NULL;
    if (!fl_dtype_is_integer(dtype) && !fl_dtype_is_float(dtype))
        return fl_error(FL_ERR_DTYPE, "fl_randint", "needs an integer or float dtype, not %s", fl_dtype_name(dtype));
    /* floor(u * (high - low)) in f64 is exact for ranges below 2^53. */
    fl_scope scope = fl_scope_begin();
    fl_tensor *u = fl_rand(FL_F64, ndim, shape);
    fl_tensor *v = fl_add_scalar(fl_floor(fl_mul_scalar(u, (double)(high - low))), (double)low);
    fl_tensor *out = fl_cast(v, dtype);
    /* Known by construction, so that index checks need not read the values. */
    if (out && fl_dtype_is_integer(dtype) && fl__scalar_fits((double)low, dtype) &&
        fl__scalar_fits((double)(high - 1), dtype)) {
        out->bounded = true;
        out->low = low;
        out->high = high - 1;
    }
    return fl_scope_return(scope, out);
}

/* ---- reading values ---- */

fl_status fl_to_host(const fl_tensor *t, void *dst, size_t bytes)
{
    if (fl_null_args("fl_to_host", 1, t))
        return fl_last_status();
    size_t need = (size_t)t->numel * fl_dtype_size(t->dtype);
    char buf[FL_DESC_SIZE];
    if (!dst && need > 0) {
        fl_error(FL_ERR_NULL, "fl_to_host", "the destination is NULL for %s", fl_describe(t, buf));
        return FL_ERR_NULL;
    }
    if (bytes < need) {
        fl_error(FL_ERR_VALUE, "fl_to_host", "%s needs %zu bytes, the destination has %zu", fl_describe(t, buf),
                 need, bytes);
        return FL_ERR_VALUE;
    }
    if (need == 0)
        return FL_OK;
    FL_ENTRY_TYPE(to_host) to_host =
        fl__primitive("fl_to_host", t->backend, FL_PRIMITIVE(to_host), "to_host");
    if (!to_host)
        return fl_last_status();
    fl__begin("to_host");
    int rc = to_host(t->backend, t, dst);
    fl__end();
    if (rc) {
        char message[512];
        fl_status status = fl__take_backend_error(message, sizeof message);
        fl_error(status ? status : (fl_status)rc, "fl_to_host", "%s (%s)", message, fl_describe(t, buf));
        return fl_last_status();
    }
    return FL_OK;
}

double fl_item(const fl_tensor *t)
{
    if (fl_null_args("fl_item", 1, t))
        return NAN;
    char buf[FL_DESC_SIZE];
    if (t->numel != 1) {
        fl_error(FL_ERR_SHAPE, "fl_item", "needs exactly one element, %s has %lld", fl_describe(t, buf),
                 (long long)t->numel);
        return NAN;
    }
    union {
        _Bool b;
        uint8_t u8;
        int32_t i32;
        int64_t i64;
        uint16_t h;
        float f32;
        double f64;
    } v;
    if (fl_to_host(t, &v, sizeof v) != FL_OK)
        return NAN;
    switch (t->dtype) {
    case FL_BOOL: return v.b;
    case FL_U8: return v.u8;
    case FL_I32: return v.i32;
    case FL_I64: return (double)v.i64;
    case FL_F16: return fl_half_to_float(v.h);
    case FL_BF16: return fl_bf16_to_float(v.h);
    case FL_F32: return v.f32;
    default: return v.f64;
    }
}

fl_status fl_eval(const fl_tensor *t)
{
    if (fl_null_args("fl_eval", 1, t))
        return fl_last_status();
    if (!t->backend->eval)
        return FL_OK;
    int rc = t->backend->eval(t->backend, fl__mutable(t));
    if (rc) {
        char message[512], buf[FL_DESC_SIZE];
        fl_status status = fl__take_backend_error(message, sizeof message);
        fl_error(status ? status : (fl_status)rc, "fl_eval", "%s (%s)", message, fl_describe(t, buf));
        return fl_last_status();
    }
    return FL_OK;
}

fl_tensor *fl_cast(const fl_tensor *t, fl_dtype dtype)
{
    if (fl_null_args("fl_cast", 1, t) || !check_dtype("fl_cast", dtype))
        return NULL;
    return fl_out(fl__cast(t, dtype));
}

fl_tensor *fl_copy(const fl_tensor *t)
{
    if (fl_null_args("fl_copy", 1, t))
        return NULL;
    fl_unary_fn cast = fl__primitive("fl_copy", t->backend, FL_PRIMITIVE(cast), "cast");
    if (!cast)
        return NULL;
    fl_tensor *out = fl__new(t->backend, t->dtype, t->ndim, t->shape);
    if (!out)
        return NULL;
    fl__begin("cast");
    return fl_out(fl__finish("fl_copy", out, cast(t->backend, out, t), 1, &t));
}

fl_tensor *fl_to_backend(const fl_tensor *t, const char *backend_name)
{
    if (fl_null_args("fl_to_backend", 2, t, backend_name))
        return NULL;
    const fl_backend *target = fl_backend_find(backend_name);
    if (!target)
        return fl_error(FL_ERR_VALUE, "fl_to_backend", "no backend named '%s' is registered", backend_name);
    if (target == t->backend)
        return fl_out(fl_retain(t));
    FL_ENTRY_TYPE(from_host) from_host =
        fl__primitive("fl_to_backend", target, FL_PRIMITIVE(from_host), "from_host");
    if (!from_host)
        return NULL;
    size_t bytes = (size_t)t->numel * fl_dtype_size(t->dtype);
    void *host = malloc(bytes ? bytes : 1);
    if (!host)
        return fl_error(FL_ERR_MEMORY, "fl_to_backend", "no memory to stage %zu bytes", bytes);
    fl_tensor *out = NULL;
    if (fl_to_host(t, host, bytes) == FL_OK) {
        out = fl__new(target, t->dtype, t->ndim, t->shape);
        if (out) {
            fl__begin("from_host");
            out = fl__finish("fl_to_backend", out, from_host(target, out, host), 1, &t);
        }
        fl__bound_like(out, t);
    }
    free(host);
    return fl_out(out);
}
