/* Reductions, arg-extrema, cumsum, sort, top-k, softmax: against NumPy/PyTorch
 * fixtures (tests/fixtures/gen_reduce.py), on views, on empty and 0-d tensors, and
 * their errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"
#include "tensor/internal.h"

static fl_tensor *F(const char *name) { return fixture("reduce.bin", name); }

/* ---- views made with the backend's own entries ---- */

static fl_tensor *permuted(const fl_tensor *t, const int *axes)
{
    const fl_backend *backend = fl_default_backend();
    int64_t shape[FL_MAX_DIMS];
    for (int i = 0; i < fl_ndim(t); i++)
        shape[i] = fl_shape(t)[axes[i]];
    fl_tensor *view = fl_tensor_alloc(backend, fl_dtype_of(t), fl_ndim(t), shape);
    assert_int_equal(backend->permute(backend, view, t, axes), 0);
    return fl_out(view);
}

static fl_tensor *sliced(const fl_tensor *t, const int64_t *shape, const int64_t *start, const int64_t *step)
{
    const fl_backend *backend = fl_default_backend();
    fl_tensor *view = fl_tensor_alloc(backend, fl_dtype_of(t), fl_ndim(t), shape);
    assert_int_equal(backend->slice(backend, view, t, start, step), 0);
    return fl_out(view);
}

static fl_tensor *expanded(const fl_tensor *t, const int64_t *shape)
{
    const fl_backend *backend = fl_default_backend();
    fl_tensor *view = fl_tensor_alloc(backend, fl_dtype_of(t), fl_ndim(t), shape);
    assert_int_equal(backend->expand(backend, view, t), 0);
    return fl_out(view);
}

/* ---- reductions over lists of axes ---- */

static const struct {
    const char *tag;
    int axes[3], count;
} axis_lists[] = {
    {"all", {0}, 0},     {"0", {0}, 1},        {"1", {1}, 1},           {"2", {2}, 1},
    {"m1", {-1}, 1},     {"0_2", {0, 2}, 2},   {"m1_0", {-1, 0}, 2},    {"0_1_2", {0, 1, 2}, 3},
};

typedef fl_tensor *(*reduce_fn)(const fl_tensor *, const int *, int, bool);

static fl_tensor *var1(const fl_tensor *t, const int *a, int n, bool k) { return fl_var(t, a, n, 1, k); }
static fl_tensor *var0(const fl_tensor *t, const int *a, int n, bool k) { return fl_var(t, a, n, 0, k); }
static fl_tensor *std1(const fl_tensor *t, const int *a, int n, bool k) { return fl_std(t, a, n, 1, k); }

static const struct {
    const char *name;
    reduce_fn fn;
    fl_dtype dtype;
} reductions[] = {
    {"sum", fl_sum, FL_F32},   {"mean", fl_mean, FL_F32}, {"prod", fl_prod, FL_F32},
    {"max", fl_max, FL_F32},   {"min", fl_min, FL_F32},   {"var1", var1, FL_F32},
    {"var0", var0, FL_F32},    {"std1", std1, FL_F32},    {"logsumexp", fl_logsumexp, FL_F32},
    {"any", fl_any, FL_BOOL},  {"all", fl_all, FL_BOOL},
};

static void reductions_over_axis_lists(void **state)
{
    fl_tensor *x = F("x");
    /* any and all read thresholded copies, as the fixtures do. */
    fl_tensor *above = fl_gt(x, fl_scalar(1.0, FL_F32)), *over = fl_gt(x, fl_scalar(-1.5, FL_F32));
    for (size_t op = 0; op < sizeof reductions / sizeof reductions[0]; op++) {
        const char *name = reductions[op].name;
        fl_tensor *input = !strcmp(name, "any") ? above : !strcmp(name, "all") ? over : x;
        for (size_t l = 0; l < sizeof axis_lists / sizeof axis_lists[0]; l++) {
            char key[64];
            snprintf(key, sizeof key, "%s_%s", name, axis_lists[l].tag);
            const int *axes = axis_lists[l].count ? axis_lists[l].axes : NULL;
            fl_tensor *expected = F(key);
            fl_tensor *dropped = reductions[op].fn(input, axes, axis_lists[l].count, false);
            assert_dtype(dropped, reductions[op].dtype);
            assert_close(dropped, expected, 2e-5, 2e-6);
            /* keepdims: the same values with the reduced axes as size 1. */
            int64_t kept[3] = {3, 4, 5};
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < axis_lists[l].count; j++)
                    if ((axis_lists[l].axes[j] + 3) % 3 == i)
                        kept[i] = 1;
            if (!axis_lists[l].count)
                kept[0] = kept[1] = kept[2] = 1;
            fl_tensor *with_dims = reductions[op].fn(input, axes, axis_lists[l].count, true);
            assert_shape(with_dims, kept[0], kept[1], kept[2]);
            assert_close(fl_reshape(with_dims, fl_ndim(expected), fl_shape(expected)), expected, 2e-5, 2e-6);
        }
    }
    assert_no_error();
}

/* Long rows of a few outputs, which a device backend cuts into chunks reduced apart
 * and then together: every element still counts once, and the extremes and NaNs
 * wherever they fall. */
static void long_rows_of_few_outputs(void **state)
{
    (void)state;
    fl_scope scope = fl_scope_begin();
    const int64_t n = 1000003; /* not a multiple of any chunk count */
    fl_tensor *ramp = fl_arange(0, (double)n, 1, FL_F64);
    assert_values(fl_sum(ramp, FL_ALL_AXES, false), 0, 0, (double)n * (double)(n - 1) / 2);
    assert_values(fl_max(ramp, FL_ALL_AXES, false), 0, 0, (double)(n - 1));
    assert_values(fl_min(fl_neg(ramp), FL_ALL_AXES, false), 0, 0, -(double)(n - 1));
    fl_tensor *two = fl_reshape(fl_arange(0, 2 * 300001, 1, FL_I64), 2, (int64_t[]){2, 300001});
    assert_values(fl_sum(two, FL_AXES(1), false), 0, 0, 300001.0 * 300000 / 2, 300001.0 * 300000 / 2 + 300001.0 * 300001);
    float *v = calloc((size_t)n, sizeof *v);
    v[n / 2] = NAN;
    fl_tensor *with_nan = fl_from_data(v, FL_F32, 1, &n);
    free(v);
    assert_true(isnan(fl_item(fl_max(with_nan, FL_ALL_AXES, false))));
    assert_true(isnan(fl_item(fl_sum(with_nan, FL_ALL_AXES, false))));
    fl_scope_end(scope);
}

static void zero_dimensional_tensors(void **state)
{
    fl_tensor *s = fl_scalar(3.5, FL_F32);
    fl_tensor *sum = fl_sum(s, FL_ALL_AXES, false);
    assert_int_equal(fl_ndim(sum), 0);
    assert_values(sum, 0, 0, 3.5);
    assert_values(fl_max(s, FL_ALL_AXES, true), 0, 0, 3.5);
    assert_values(fl_mean(s, FL_ALL_AXES, false), 0, 0, 3.5);
    assert_values(fl_var(s, FL_ALL_AXES, 0, false), 0, 0, 0);
    assert_values(fl_logsumexp(s, FL_ALL_AXES, false), 0, 1e-6, 3.5);
    assert_values(fl_any(s, FL_ALL_AXES, false), 0, 0, 1);
    assert_dtype(fl_sum(fl_scalar(2, FL_I32), FL_ALL_AXES, false), FL_I64);
    /* A 0-d tensor has no axis 0 (NumPy's rule). */
    assert_fails(fl_sum(s, FL_AXES(0), false), FL_ERR_AXIS, "fl_sum: axis 0 is out of range");
    assert_fails(fl_argmax(s, 0, false), FL_ERR_AXIS, "fl_argmax");
    assert_fails(fl_cumsum(s, 0), FL_ERR_AXIS, "fl_cumsum");
}

static void dtype_rules(void **state)
{
    fl_tensor *xi = F("xi");
    fl_tensor *sum = fl_sum(xi, FL_AXES(1), false);
    assert_dtype(sum, FL_I64);
    assert_close(sum, F("xi_sum_1"), 0, 0);
    assert_close(fl_sum(xi, FL_ALL_AXES, false), F("xi_sum_all"), 0, 0);
    assert_dtype(fl_prod(xi, FL_AXES(0), false), FL_I64);
    assert_close(fl_prod(xi, FL_AXES(0), false), F("xi_prod_0"), 0, 0);
    fl_tensor *max = fl_max(xi, FL_AXES(1), false);
    assert_dtype(max, FL_I32);
    assert_close(max, F("xi_max_1"), 0, 0);
    fl_tensor *mean = fl_mean(xi, FL_AXES(0), false);
    assert_dtype(mean, FL_F32);
    assert_close(mean, F("xi_mean_0"), 1e-6, 0);
    assert_dtype(fl_var(xi, FL_AXES(1), 1, false), FL_F32);
    assert_close(fl_var(xi, FL_AXES(1), 1, false), F("xi_var_1"), 1e-5, 1e-6);
    assert_dtype(fl_logsumexp(xi, FL_AXES(1), false), FL_F32);
    /* u8 sums do not wrap: they are i64. */
    fl_tensor *bytes = T_U8(FL_SHAPE(3), 200, 100, 250);
    assert_values(fl_sum(bytes, FL_ALL_AXES, false), 0, 0, 550);
    /* bool: sums count, any and all read any dtype as truth values. */
    fl_tensor *flags = T_BOOL(FL_SHAPE(2, 3), 1, 0, 1, 0, 0, 0);
    assert_dtype(fl_sum(flags, FL_AXES(1), false), FL_I64);
    assert_values(fl_sum(flags, FL_AXES(1), false), 0, 0, 2, 0);
    assert_values(fl_any(flags, FL_AXES(1), false), 0, 0, 1, 0);
    assert_values(fl_all(flags, FL_AXES(0), false), 0, 0, 0, 0, 0);
    fl_tensor *floats = T_F32(FL_SHAPE(2, 2), 0.0f, NAN, 0.0f, -0.0f);
    assert_dtype(fl_any(floats, FL_AXES(1), false), FL_BOOL);
    assert_values(fl_any(floats, FL_AXES(1), false), 0, 0, 1, 0); /* NaN is true */
    assert_values(fl_all(T_I32(FL_SHAPE(2, 3), 1, 0, -2, 5, 7, 0), FL_AXES(0), false), 0, 0, 1, 0, 0);
    assert_values(fl_all(T_I64(FL_SHAPE(2), 3, -1), FL_ALL_AXES, false), 0, 0, 1);
    assert_no_error();
}

static void half_precision_computes_in_f32(void **state)
{
    /* 2000 * 60 = 120000 overflows f16; the mean does not, because it is taken in f32. */
    fl_tensor *h = fl_full(60, FL_F16, FL_SHAPE(2000));
    fl_tensor *mean = fl_mean(h, FL_ALL_AXES, false);
    assert_dtype(mean, FL_F16);
    assert_values(mean, 0, 0, 60);
    assert_dtype(fl_sum(h, FL_ALL_AXES, false), FL_F16);
    assert_values(fl_sum(h, FL_ALL_AXES, false), 0, 0, INFINITY);
    fl_tensor *b = fl_cast(T_F32(FL_SHAPE(2, 2), 1.5f, -2.0f, 4.0f, 0.25f), FL_BF16);
    assert_dtype(fl_max(b, FL_AXES(1), false), FL_BF16);
    assert_values(fl_max(b, FL_AXES(1), false), 0, 0, 1.5, 4);
    assert_values(fl_argmin(b, 1, false), 0, 0, 1, 1);
    assert_values(fl_cumsum(b, 1), 0, 0, 1.5, -0.5, 4, 4.25);
    assert_dtype(fl_std(b, FL_AXES(0), 1, false), FL_BF16);
    assert_dtype(fl_softmax(b, 1), FL_BF16);
    fl_tensor *v;
    assert_int_equal(fl_sort(b, 1, false, &v, NULL), FL_OK);
    assert_dtype(v, FL_BF16);
    assert_values(v, 0, 0, -2, 1.5, 0.25, 4);
    assert_no_error();
}

static void nan_and_infinity(void **state)
{
    fl_tensor *xn = F("xn");
    assert_close(fl_max(xn, FL_AXES(1), false), F("xn_max_1"), 0, 0);
    assert_close(fl_min(xn, FL_AXES(0), false), F("xn_min_0"), 0, 0);
    assert_close(fl_sum(xn, FL_AXES(1), false), F("xn_sum_1"), 0, 0);
    assert_close(fl_argmax(xn, 1, false), F("xn_argmax_1"), 0, 0);
    assert_close(fl_argmin(xn, 1, false), F("xn_argmin_1"), 0, 0);
    assert_close(fl_argmax(xn, 0, false), F("xn_argmax_0"), 0, 0);
    fl_tensor *values, *indices;
    assert_int_equal(fl_sort(xn, 1, false, &values, &indices), FL_OK);
    assert_close(values, F("xn_sort_1"), 0, 0);
    assert_close(indices, F("xn_argsort_1"), 0, 0);
    assert_int_equal(fl_sort(xn, 1, true, &values, &indices), FL_OK);
    assert_close(values, F("xn_sort_desc_1"), 0, 0);
    assert_close(indices, F("xn_argsort_desc_1"), 0, 0);
    /* max_along agrees with itself: the NaN it reports is where argmax points. */
    assert_int_equal(fl_max_along(xn, 1, false, &values, &indices), FL_OK);
    assert_close(values, F("xn_max_1"), 0, 0);
    assert_close(indices, F("xn_argmax_1"), 0, 0);
    /* Long rows and columns with one NaN near the end, through the vectorized paths. */
    enum { N = 1000 };
    float *data = malloc(N * sizeof(float));
    for (int i = 0; i < N; i++)
        data[i] = (float)(i % 97);
    data[N - 3] = NAN;
    fl_tensor *row = fl_from_data(data, FL_F32, FL_SHAPE(1, N));
    fl_tensor *column = fl_from_data(data, FL_F32, FL_SHAPE(N, 1));
    free(data);
    assert_values(fl_max(row, FL_AXES(1), false), 0, 0, NAN);
    assert_values(fl_min(column, FL_AXES(0), false), 0, 0, NAN);
    assert_values(fl_argmax(row, 1, false), 0, 0, N - 3);
    assert_values(fl_argmin(column, 0, false), 0, 0, N - 3);
    assert_no_error();
}

static void empty_axes(void **state)
{
    fl_tensor *e = fl_zeros(FL_F32, FL_SHAPE(0, 3));
    assert_shape(fl_sum(e, FL_AXES(0), false), 3);
    assert_values(fl_sum(e, FL_AXES(0), false), 0, 0, 0, 0, 0);
    assert_values(fl_prod(e, FL_AXES(0), true), 0, 0, 1, 1, 1);
    assert_values(fl_sum(e, FL_ALL_AXES, false), 0, 0, 0);
    assert_values(fl_mean(e, FL_AXES(0), false), 0, 0, NAN, NAN, NAN);
    assert_values(fl_any(e, FL_AXES(0), false), 0, 0, 0, 0, 0);
    assert_values(fl_all(e, FL_AXES(0), false), 0, 0, 1, 1, 1);
    assert_values(fl_logsumexp(e, FL_AXES(0), false), 0, 0, -INFINITY, -INFINITY, -INFINITY);
    assert_values(fl_sum(fl_zeros(FL_I32, FL_SHAPE(2, 0)), FL_AXES(1), false), 0, 0, 0, 0);
    /* Reducing the non-empty axis of an empty tensor is fine: there is nothing to do. */
    assert_shape(fl_max(e, FL_AXES(1), false), 0);
    assert_shape(fl_argmax(e, 1, true), 0, 1);
    assert_shape(fl_cumsum(e, 0), 0, 3);
    assert_shape(fl_softmax(e, 0), 0, 3);
    fl_tensor *values, *indices;
    assert_int_equal(fl_sort(e, 0, false, &values, &indices), FL_OK);
    assert_shape(values, 0, 3);
    assert_shape(indices, 0, 3);
    assert_int_equal(fl_topk(fl_ones(FL_F32, FL_SHAPE(2, 3)), 0, 1, true, &values, &indices), FL_OK);
    assert_shape(values, 2, 0);
    /* With no identity, an empty reduction is an error (as in NumPy). */
    assert_fails(fl_max(e, FL_AXES(0), false), FL_ERR_SHAPE, "fl_max: cannot reduce f32[0, 3] over an empty axis");
    assert_fails(fl_min(e, FL_ALL_AXES, false), FL_ERR_SHAPE, "fl_min");
    assert_fails(fl_argmax(e, 0, false), FL_ERR_SHAPE, "fl_argmax: cannot reduce f32[0, 3]");
    assert_fails_status(fl_max_along(e, 0, false, &values, NULL), FL_ERR_SHAPE, "fl_max_along");
    assert_null(values);
}

static void arg_extrema_and_values_along(void **state)
{
    fl_tensor *x = F("x");
    const char *tags[] = {"0", "1", "2", "m1"};
    const int axes[] = {0, 1, 2, -1};
    for (int i = 0; i < 4; i++) {
        char key[32];
        snprintf(key, sizeof key, "argmax_%s", tags[i]);
        fl_tensor *argmax = fl_argmax(x, axes[i], false);
        assert_dtype(argmax, FL_I64);
        assert_close(argmax, F(key), 0, 0);
        snprintf(key, sizeof key, "argmin_%s", tags[i]);
        assert_close(fl_argmin(x, axes[i], false), F(key), 0, 0);
    }
    /* Ties: the first occurrence. */
    assert_close(fl_argmax(F("xi"), 1, false), F("xi_argmax_1"), 0, 0);
    assert_close(fl_argmin(F("xi"), 0, false), F("xi_argmin_0"), 0, 0);
    assert_values(fl_argmax(T_BOOL(FL_SHAPE(4), 0, 1, 1, 0), 0, false), 0, 0, 1);
    assert_shape(fl_argmax(x, 1, true), 3, 1, 5);
    fl_tensor *values, *indices;
    assert_int_equal(fl_max_along(x, 2, true, &values, &indices), FL_OK);
    assert_shape(values, 3, 4, 1);
    assert_close(fl_reshape(values, FL_SHAPE(3, 4)), F("max_2"), 0, 0);
    assert_close(fl_reshape(indices, FL_SHAPE(3, 4)), F("argmax_2"), 0, 0);
    assert_int_equal(fl_min_along(x, 0, false, NULL, &indices), FL_OK);
    assert_close(indices, F("argmin_0"), 0, 0);
    assert_int_equal(fl_min_along(x, 0, false, &values, NULL), FL_OK);
    assert_close(values, F("min_0"), 0, 0);
    assert_no_error();
}

static void cumulative_sums(void **state)
{
    fl_tensor *x = F("x");
    const char *tags[] = {"0", "1", "2", "m1"};
    const int axes[] = {0, 1, 2, -1};
    for (int i = 0; i < 4; i++) {
        char key[32];
        snprintf(key, sizeof key, "cumsum_%s", tags[i]);
        fl_tensor *sums = fl_cumsum(x, axes[i]);
        assert_dtype(sums, FL_F32);
        assert_close(sums, F(key), 1e-5, 1e-6);
    }
    fl_tensor *ints = fl_cumsum(F("xi"), 1);
    assert_dtype(ints, FL_I64);
    assert_close(ints, F("xi_cumsum_1"), 0, 0);
    assert_values(fl_cumsum(T_BOOL(FL_SHAPE(4), 1, 0, 1, 1), 0), 0, 0, 1, 1, 2, 3);
    assert_values(fl_cumsum(T_U8(FL_SHAPE(2), 200, 100), 0), 0, 0, 200, 300);
    assert_no_error();
}

static void sorting(void **state)
{
    fl_tensor *x = F("x");
    const char *tags[] = {"0", "1", "2", "m1"};
    const int axes[] = {0, 1, 2, -1};
    for (int i = 0; i < 4; i++) {
        char key[32];
        fl_tensor *values, *indices;
        assert_int_equal(fl_sort(x, axes[i], false, &values, &indices), FL_OK);
        snprintf(key, sizeof key, "sort_%s", tags[i]);
        assert_close(values, F(key), 0, 0);
        snprintf(key, sizeof key, "argsort_%s", tags[i]);
        assert_close(indices, F(key), 0, 0);
        assert_int_equal(fl_sort(x, axes[i], true, &values, &indices), FL_OK);
        snprintf(key, sizeof key, "sort_desc_%s", tags[i]);
        assert_close(values, F(key), 0, 0);
        snprintf(key, sizeof key, "argsort_desc_%s", tags[i]);
        assert_close(indices, F(key), 0, 0);
    }
    /* Stability among ties, both directions. */
    fl_tensor *indices;
    assert_int_equal(fl_sort(F("xi"), 1, false, NULL, &indices), FL_OK);
    assert_close(indices, F("xi_argsort_1"), 0, 0);
    assert_int_equal(fl_sort(F("xi"), 1, true, NULL, &indices), FL_OK);
    assert_close(indices, F("xi_argsort_desc_1"), 0, 0);
    /* -0.0 and 0.0 are equal, so they keep their order. */
    assert_int_equal(fl_sort(T_F32(FL_SHAPE(4), 0.0f, -0.0f, 0.0f, -1.0f), 0, false, NULL, &indices), FL_OK);
    assert_values(indices, 0, 0, 3, 0, 1, 2);
    /* Every dtype; i64 beyond the range doubles hold exactly. */
    fl_tensor *values;
    assert_int_equal(fl_sort(T_I64(FL_SHAPE(3), INT64_MAX, INT64_MAX - 1, INT64_MIN), 0, false, &values, NULL), FL_OK);
    int64_t got[3];
    fl_to_host(values, got, sizeof got);
    assert_true(got[0] == INT64_MIN && got[1] == INT64_MAX - 1 && got[2] == INT64_MAX);
    assert_int_equal(fl_sort(T_U8(FL_SHAPE(3), 7, 255, 0), 0, true, &values, NULL), FL_OK);
    assert_values(values, 0, 0, 255, 7, 0);
    assert_int_equal(fl_sort(T_BOOL(FL_SHAPE(3), 1, 0, 1), 0, false, &values, &indices), FL_OK);
    assert_values(values, 0, 0, 0, 1, 1);
    assert_values(indices, 0, 0, 1, 0, 2);
    /* A line longer than the insertion-sorted runs, sorted and stable. */
    enum { N = 1001 };
    int32_t *data = malloc(N * sizeof *data);
    for (int i = 0; i < N; i++)
        data[i] = (i * 7919) % 13;
    fl_tensor *line = fl_from_data(data, FL_I32, FL_SHAPE(N));
    free(data);
    assert_int_equal(fl_sort(line, 0, false, &values, &indices), FL_OK);
    int32_t v[N];
    int64_t at[N];
    fl_to_host(values, v, sizeof v);
    fl_to_host(indices, at, sizeof at);
    for (int i = 1; i < N; i++)
        assert_true(v[i - 1] < v[i] || (v[i - 1] == v[i] && at[i - 1] < at[i]));
    assert_no_error();
}

static void top_k(void **state)
{
    fl_tensor *x = F("x"), *values, *indices;
    assert_int_equal(fl_topk(x, 3, 2, true, &values, &indices), FL_OK);
    assert_close(values, F("topk_largest_values"), 0, 0);
    assert_close(indices, F("topk_largest_indices"), 0, 0);
    assert_int_equal(fl_topk(x, 2, -3, false, &values, &indices), FL_OK);
    assert_close(values, F("topk_smallest_values"), 0, 0);
    assert_close(indices, F("topk_smallest_indices"), 0, 0);
    assert_int_equal(fl_topk(F("xi"), 4, 1, true, &values, &indices), FL_OK);
    assert_dtype(values, FL_I32);
    assert_close(values, F("xi_top4_values"), 0, 0);
    assert_close(indices, F("xi_top4_indices"), 0, 0);
    assert_int_equal(fl_topk(x, 5, 2, true, &values, NULL), FL_OK);
    assert_close(values, F("sort_desc_2"), 0, 0);
    assert_no_error();
}

static void softmax_and_log_softmax(void **state)
{
    fl_tensor *x = F("x");
    const char *tags[] = {"0", "1", "2", "m1"};
    const int axes[] = {0, 1, 2, -1};
    for (int i = 0; i < 4; i++) {
        char key[32];
        snprintf(key, sizeof key, "softmax_%s", tags[i]);
        assert_close(fl_softmax(x, axes[i]), F(key), 1e-5, 1e-7);
        snprintf(key, sizeof key, "log_softmax_%s", tags[i]);
        assert_close(fl_log_softmax(x, axes[i]), F(key), 1e-5, 1e-6);
    }
    /* Large values do not overflow; rows of -inf give nan (as PyTorch); +inf too. */
    fl_tensor *xs = F("xs");
    assert_close(fl_softmax(xs, 1), F("xs_softmax_1"), 1e-6, 1e-7);
    assert_close(fl_log_softmax(xs, 1), F("xs_log_softmax_1"), 1e-6, 1e-6);
    assert_close(fl_logsumexp(xs, FL_AXES(1), false), F("xs_logsumexp_1"), 1e-6, 1e-6);
    /* Integers compute in f32. */
    fl_tensor *p = fl_softmax(T_I32(FL_SHAPE(2), 0, 0), 0);
    assert_dtype(p, FL_F32);
    assert_values(p, 0, 1e-7, 0.5, 0.5);
    assert_fails(fl_softmax(x, 3), FL_ERR_AXIS, "fl_softmax: axis 3");
    assert_fails(fl_log_softmax(NULL, 0), FL_ERR_NULL, "fl_log_softmax");
}

/* A backend's fused softmax against the composition it stands for (the composition is
 * what runs with the entry set to NULL): row lengths with vector tails, a transposed
 * input, f64, and rows holding nan, -inf, +inf and values far below the maximum. */
static void fused_softmax_matches_the_composition(void **state)
{
    fl_backend composing = support_derive(fl_default_backend()->name);
    composing.softmax = NULL;
    fl_tensor *wide = fl_mul_scalar(fl_randn(FL_F32, FL_SHAPE(37, 203)), 8.0);
    /* The last row reaches below ln(FLT_MIN): the fused kernel flushes those
     * probabilities (1e-39, 1e-44) to zero where the composition keeps subnormals. */
    fl_tensor *special = T_F32(FL_SHAPE(5, 3), 1, NAN, 2, -INFINITY, -INFINITY, -INFINITY, 0, INFINITY, 1, -INFINITY,
                               3, 4, 0, -90, -100);
    fl_tensor *inputs[] = {wide, fl_transpose(wide, 0, 1), fl_cast(wide, FL_F64), special,
                           fl_randn(FL_F32, FL_SHAPE(2, 3, 17))};
    for (int i = 0; i < 5; i++)
        for (int logarithm = 0; logarithm < 2; logarithm++) {
            fl_tensor *(*op)(const fl_tensor *, int) = logarithm ? fl_log_softmax : fl_softmax;
            fl_backend original = support_override(&composing);
            fl_tensor *composed = op(inputs[i], -1);
            support_override(&original);
            fl_tensor *y = op(inputs[i], -1);
            assert_dtype(y, inputs[i]->dtype);
            /* Sums in another order: log-softmax near 0 differs by an ulp of log(sum). */
            assert_close(y, composed, 1e-6, logarithm ? 1e-6 : 1e-7);
        }
    assert_no_error();
}

/* The gradient of cross-entropy from a log-softmax: the backend's fused kernel against
 * the composition (exp, mul, scatter_add), which runs with the entry set to NULL:
 * dense, strided, f64, several leading axes, with and without label smoothing, and
 * a class axis that is not the last (composed on every backend). */
static void cross_entropy_backward_matches_the_composition(void **state)
{
    fl_backend composing = support_derive(fl_default_backend()->name);
    composing.cross_entropy_backward = NULL;
    fl_tensor *wide = fl_mul_scalar(fl_randn(FL_F32, FL_SHAPE(203, 37)), 4.0);
    fl_tensor *log_probs[] = {fl_log_softmax(fl_transpose(wide, 0, 1), -1), fl_transpose(fl_log_softmax(wide, 0), 0, 1),
                              fl_log_softmax(fl_cast(fl_transpose(wide, 0, 1), FL_F64), -1),
                              fl_log_softmax(fl_randn(FL_F32, FL_SHAPE(2, 3, 17)), -1),
                              fl_log_softmax(fl_randn(FL_F32, FL_SHAPE(4, 5, 3)), 1)};
    const int axes[] = {1, 1, -1, 2, 1};
    for (int i = 0; i < 5; i++)
        for (int smoothed = 0; smoothed < 2; smoothed++) {
            const fl_tensor *lp = log_probs[i];
            int axis = axes[i] < 0 ? axes[i] + fl_ndim(lp) : axes[i];
            int64_t shape[FL_MAX_DIMS];
            for (int k = 0; k < fl_ndim(lp); k++)
                shape[k] = k == axis ? 1 : fl_shape(lp)[k];
            fl_tensor *index = fl_randint(0, fl_shape(lp)[axis], FL_I64, fl_ndim(lp), shape);
            fl_tensor *scale = fl_cast(fl_randn(FL_F32, fl_ndim(lp), shape), fl_dtype_of(lp));
            double s = smoothed ? 0.1 : 0;
            fl_tensor *y = fl_cross_entropy_backward(lp, axes[i], index, scale, s);
            fl_backend original = support_override(&composing);
            fl_tensor *composed = fl_cross_entropy_backward(lp, axes[i], index, scale, s);
            support_override(&original);
            assert_dtype(y, fl_dtype_of(lp));
            assert_int_equal(fl_ndim(y), fl_ndim(lp));
            for (int k = 0; k < fl_ndim(lp); k++)
                assert_int_equal(fl_shape(y)[k], fl_shape(lp)[k]);
            assert_close(y, composed, 1e-6, 1e-7);
        }
    /* log(0.2), log(0.3), log(0.5), target 2, scale 2: 2 (p - [c == 2]). */
    fl_tensor *lp = fl_log(T_F32(FL_SHAPE(1, 3), 0.2f, 0.3f, 0.5f));
    assert_values(fl_cross_entropy_backward(lp, 1, T_I64(FL_SHAPE(1, 1), 2), T_F32(FL_SHAPE(1, 1), 2), 0), 1e-6, 0,
                  0.4, 0.6, -1.0);
    assert_no_error();
    fl_tensor *index = T_I64(FL_SHAPE(1, 1), 2), *scale = T_F32(FL_SHAPE(1, 1), 1);
    assert_fails(fl_cross_entropy_backward(lp, 1, T_I64(FL_SHAPE(1, 1), 3), scale, 0), FL_ERR_INDEX,
                 "fl_cross_entropy_backward: index 3 is out of range for axis 1 of size 3");
    assert_fails(fl_cross_entropy_backward(lp, 1, T_I64(FL_SHAPE(1, 1), -1), scale, 0), FL_ERR_INDEX,
                 "index -1 is out of range");
    assert_fails(fl_cross_entropy_backward(lp, 1, T_I64(FL_SHAPE(1), 2), scale, 0), FL_ERR_SHAPE,
                 "fl_cross_entropy_backward: needs index and scale of log_probs's shape with axis 1 of size 1");
    assert_fails(fl_cross_entropy_backward(lp, 1, fl_cast(index, FL_I32), scale, 0), FL_ERR_DTYPE, "i64 index");
    assert_fails(fl_cross_entropy_backward(lp, 1, index, fl_cast(scale, FL_F64), 0), FL_ERR_DTYPE, "i64 index");
    assert_fails(fl_cross_entropy_backward(lp, 1, index, scale, 1.5), FL_ERR_VALUE, "smoothing 1.5");
    assert_fails(fl_cross_entropy_backward(lp, 2, index, scale, 0), FL_ERR_AXIS, "fl_cross_entropy_backward");
    assert_fails(fl_cross_entropy_backward(NULL, 1, index, scale, 0), FL_ERR_NULL, "fl_cross_entropy_backward");
}

/* ---- views: permuted, sliced with steps, expanded with zero strides ---- */

static void check_same_as_dense(const fl_tensor *view)
{
    fl_tensor *dense = fl_copy(view);
    int n = fl_ndim(view);
    for (unsigned mask = 1; mask < 1u << n; mask++) {
        int axes[FL_MAX_DIMS], count = 0;
        for (int i = 0; i < n; i++)
            if (mask >> i & 1)
                axes[count++] = i;
        assert_close(fl_sum(view, axes, count, false), fl_sum(dense, axes, count, false), 1e-6, 1e-6);
        assert_close(fl_max(view, axes, count, true), fl_max(dense, axes, count, true), 0, 0);
        assert_close(fl_prod(view, axes, count, false), fl_prod(dense, axes, count, false), 1e-6, 0);
    }
    for (int axis = 0; axis < n; axis++) {
        assert_close(fl_argmin(view, axis, false), fl_argmin(dense, axis, false), 0, 0);
        assert_close(fl_cumsum(view, axis), fl_cumsum(dense, axis), 1e-6, 1e-6);
        fl_tensor *a, *b;
        assert_int_equal(fl_sort(view, axis, true, NULL, &a), FL_OK);
        assert_int_equal(fl_sort(dense, axis, true, NULL, &b), FL_OK);
        assert_close(a, b, 0, 0);
        assert_close(fl_softmax(view, axis), fl_softmax(dense, axis), 1e-6, 0);
    }
}

static void non_contiguous_inputs(void **state)
{
    fl_tensor *x = F("x");
    fl_tensor *p = permuted(x, (const int[]){2, 0, 1}); /* [5, 3, 4] */
    assert_close(fl_sum(p, FL_AXES(0), false), F("perm_sum_0"), 1e-6, 1e-6);
    assert_close(fl_sum(p, FL_AXES(1, 2), false), F("perm_sum_1_2"), 1e-5, 1e-6);
    assert_close(fl_max(p, FL_AXES(-1), false), F("perm_max_m1"), 0, 0);
    assert_close(fl_argmax(p, 0, false), F("perm_argmax_0"), 0, 0);
    assert_close(fl_cumsum(p, 1), F("perm_cumsum_1"), 1e-6, 1e-6);
    fl_tensor *values;
    assert_int_equal(fl_sort(p, 0, false, &values, NULL), FL_OK);
    assert_close(values, F("perm_sort_0"), 0, 0);
    check_same_as_dense(p);
    /* Every other row, backwards along the last axis. */
    check_same_as_dense(sliced(x, (const int64_t[]){3, 2, 5}, (const int64_t[]){0, 0, 4}, (const int64_t[]){1, 2, -1}));
    /* A column broadcast along a middle axis with stride 0. */
    fl_tensor *column = fl_reshape(fl_arange(1, 7, 1, FL_F32), FL_SHAPE(3, 1, 2));
    fl_tensor *wide = expanded(column, (const int64_t[]){3, 4, 2});
    assert_values(fl_sum(wide, FL_AXES(1), false), 0, 0, 4, 8, 12, 16, 20, 24);
    assert_values(fl_sum(wide, FL_AXES(0, 1), false), 0, 0, 36, 48);
    check_same_as_dense(wide);
    assert_no_error();
}

/* ---- long reductions: the chunked and tiled paths, and thread independence ---- */

static fl_tensor *sum_with_threads(const fl_tensor *t, const int *axes, int count, int threads)
{
    int saved = fl_num_threads();
    fl_set_num_threads(threads);
    fl_tensor *s = fl_sum(t, axes, count, false);
    fl_set_num_threads(saved);
    return s;
}

static void long_reductions_do_not_depend_on_threads(void **state)
{
    fl_manual_seed(3);
    const int64_t shapes[][2] = {{3, 70001}, {70001, 3}, {1, 300000}, {513, 1031}, {2000, 2000}};
    for (int s = 0; s < 5; s++) {
        fl_tensor *x = fl_randn(FL_F32, FL_SHAPE(shapes[s][0], shapes[s][1]));
        for (int axis = -1; axis < 2; axis++) {
            const int *axes = axis < 0 ? NULL : &axis;
            int count = axis < 0 ? 0 : 1;
            fl_tensor *one = sum_with_threads(x, axes, count, 1), *two = sum_with_threads(x, axes, count, 2);
            assert_close(one, two, 0, 0); /* bit for bit */
            /* ... and right: against a sum in f64. */
            fl_tensor *exact = fl_cast(fl_sum(fl_cast(x, FL_F64), axes, count, false), FL_F32);
            assert_close(one, exact, 1e-4, 2e-3);
        }
    }
    /* Integer-valued data sums exactly through every path. */
    fl_tensor *ramp = fl_reshape(fl_arange(0, 120000, 1, FL_F64), FL_SHAPE(40000, 3));
    assert_values(fl_sum(ramp, FL_AXES(0), false), 0, 0, 2399940000.0, 2399980000.0, 2400020000.0);
    assert_values(fl_max(ramp, FL_AXES(0), false), 0, 0, 119997, 119998, 119999);
    assert_values(fl_min(fl_reshape(ramp, FL_SHAPE(1, -1)), FL_AXES(1), false), 0, 0, 0);
    assert_values(fl_argmax(fl_reshape(ramp, FL_SHAPE(-1)), 0, false), 0, 0, 119999);
    assert_no_error();
}

/* ---- errors ---- */

static void errors_name_the_function_and_shapes(void **state)
{
    fl_tensor *x = F("x");
    assert_fails(fl_sum(x, FL_AXES(3), false), FL_ERR_AXIS, "fl_sum: axis 3 is out of range for a tensor of 3 dimensions");
    assert_fails(fl_mean(x, FL_AXES(-4), false), FL_ERR_AXIS, "fl_mean: axis -4");
    assert_fails(fl_max(x, FL_AXES(0, -3), false), FL_ERR_AXIS, "fl_max: axis -3 is listed twice");
    assert_fails(fl_var(x, FL_AXES(1, 1), 1, false), FL_ERR_AXIS, "fl_var");
    assert_fails(fl_std(x, FL_AXES(5), 1, false), FL_ERR_AXIS, "axis 5");
    assert_fails(fl_any(x, NULL, 2, false), FL_ERR_AXIS, "fl_any: invalid list of 2 axes");
    assert_fails(fl_logsumexp(x, FL_AXES(7), false), FL_ERR_AXIS, "fl_logsumexp");
    assert_fails(fl_argmin(x, -4, false), FL_ERR_AXIS, "fl_argmin");
    fl_tensor *values = x, *indices = x;
    assert_fails_status(fl_max_along(x, 3, false, &values, &indices), FL_ERR_AXIS, "fl_max_along");
    assert_null(values);
    assert_null(indices);
    assert_fails_status(fl_sort(x, 3, false, &values, NULL), FL_ERR_AXIS, "fl_sort");
    assert_fails_status(fl_topk(x, 6, 2, true, &values, &indices), FL_ERR_VALUE,
                        "fl_topk: k = 6 is out of range for axis 2 of f32[3, 4, 5] (size 5)");
    assert_null(values);
    assert_fails_status(fl_topk(x, -1, 0, true, &values, NULL), FL_ERR_VALUE, "k = -1");
    /* NULL inputs: reported when passed directly, propagated after an earlier error. */
    assert_fails(fl_sum(NULL, FL_ALL_AXES, false), FL_ERR_NULL, "fl_sum");
    assert_fails_status(fl_sort(NULL, 0, false, &values, &indices), FL_ERR_NULL, "fl_sort");
    fl_tensor *bad = fl_sum(x, FL_AXES(9), false);
    assert_null(fl_softmax(fl_mean(bad, FL_ALL_AXES, false), 0));
    assert_fails(bad, FL_ERR_AXIS, "fl_sum");
    /* A backend without the primitive, and a primitive given a dtype it has no kernel for. */
    const fl_backend *backend = fl_default_backend();
    fl_backend derived = support_derive(backend->name);
    derived.sum = NULL;
    fl_backend original = support_override(&derived);
    char expected[128];
    snprintf(expected, sizeof expected, "backend '%s' does not implement the primitive 'sum'", backend->name);
    assert_fails(fl_sum(x, FL_ALL_AXES, false), FL_ERR_UNSUPPORTED, expected);
    assert_fails(fl_softmax(x, 0), FL_ERR_UNSUPPORTED, "'sum'");
    support_override(&original);
    fl_tensor *flags = T_BOOL(FL_SHAPE(2), 1, 1);
    fl_tensor *out = fl_tensor_alloc(backend, FL_BOOL, 1, (const int64_t[]){1});
    assert_int_equal(backend->sum(backend, out, flags, 1), FL_ERR_DTYPE);
    fl_release(out);
    fl_clear_error();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        scoped_test(reductions_over_axis_lists),
        scoped_test(zero_dimensional_tensors),
        scoped_test(long_rows_of_few_outputs),
        scoped_test(dtype_rules),
        scoped_test(half_precision_computes_in_f32),
        scoped_test(nan_and_infinity),
        scoped_test(empty_axes),
        scoped_test(arg_extrema_and_values_along),
        scoped_test(cumulative_sums),
        scoped_test(sorting),
        scoped_test(top_k),
        scoped_test(softmax_and_log_softmax),
        scoped_test(fused_softmax_matches_the_composition),
        scoped_test(cross_entropy_backward_matches_the_composition),
        scoped_test(non_contiguous_inputs),
        scoped_test(long_reductions_do_not_depend_on_threads),
        scoped_test(errors_name_the_function_and_shapes),
    };
    return cmocka_run_group_tests_name("reduce", tests, NULL, NULL);
}
