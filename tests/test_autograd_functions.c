/* Finite-difference checks of every differentiable function of src/autograd, in
 * f64, with broadcasting, negative axes, keepdims both ways and batched cases; and
 * the errors of the functions that check arguments of their own. */
#include <math.h>

#include "gradcheck.h"

#define IN(low, high, ...) gradcheck_input((low), (high), FL_SHAPE(__VA_ARGS__))

/* y * y: keeps the gradient of a pure movement of elements from being the same at every one. */
static fl_variable *squared(fl_variable *y) { return fl_v_mul(y, y); }

/* ---- elementwise ---- */

typedef fl_variable *(*unary_fn)(fl_variable *);

static fl_variable *unary_of(fl_variable *const *x, void *ctx) { return (*(unary_fn *)ctx)(x[0]); }

static void unary_gradients(void **state)
{
    /* on (0.2, 2), where every function is smooth and defined */
    unary_fn fns[] = {fl_v_neg,  fl_v_abs,  fl_v_exp,     fl_v_log, fl_v_log1p, fl_v_sqrt,   fl_v_rsqrt,
                      fl_v_sin,  fl_v_cos,  fl_v_tanh,    fl_v_sigmoid, fl_v_erf, fl_v_square, fl_v_reciprocal};
    for (int i = 0; i < (int)(sizeof fns / sizeof *fns); i++) {
        assert_gradcheck(unary_of, &fns[i], IN(0.2, 2, 2, 3));
        assert_gradcheck(unary_of, &fns[i], IN(0.2, 2));
    }
    /* and both signs where they are defined */
    unary_fn signed_fns[] = {fl_v_neg, fl_v_abs, fl_v_exp, fl_v_sin, fl_v_cos, fl_v_tanh, fl_v_sigmoid, fl_v_erf,
                             fl_v_square, fl_v_reciprocal};
    for (int i = 0; i < (int)(sizeof signed_fns / sizeof *signed_fns); i++)
        assert_gradcheck(unary_of, &signed_fns[i], T_F64(FL_SHAPE(4), -2.5, -0.3, 0.4, 1.7));
}

static fl_variable *clamp_of(fl_variable *const *x, void *ctx) { return fl_v_clamp(x[0], -0.5, 0.5); }

static void clamp_gradient(void **state)
{
    /* the gradient passes inside the bounds only (points away from them) */
    assert_gradcheck(clamp_of, NULL, T_F64(FL_SHAPE(5), -2, -0.49, 0, 0.3, 0.8));
    fl_variable *x = fl_v_new(T_F64(FL_SHAPE(3), -0.5, 0.5, 0.6), true);
    assert_int_equal(fl_v_backward(fl_v_sum(fl_v_clamp(x, -0.5, 0.5), FL_ALL_AXES, false), NULL, false), FL_OK);
    assert_values(fl_v_grad(x), 0, 0, 1, 1, 0); /* bounds included, as in PyTorch */
    /* low > high: every value is high and no gradient passes, as torch.clamp. */
    x = fl_v_new(T_F64(FL_SHAPE(4), -1, 1, 2, 3), true);
    fl_variable *y = fl_v_clamp(x, 2, 1);
    assert_values(fl_v_value(y), 0, 0, 1, 1, 1, 1);
    assert_int_equal(fl_v_backward(fl_v_sum(y, FL_ALL_AXES, false), NULL, false), FL_OK);
    assert_values(fl_v_grad(x), 0, 0, 0, 0, 0, 0);
}

static fl_variable *pow_of(fl_variable *const *x, void *ctx) { return fl_v_pow(x[0], x[1]); }
static fl_variable *minimum_of(fl_variable *const *x, void *ctx) { return fl_v_minimum(x[0], x[1]); }
static fl_variable *maximum_of(fl_variable *const *x, void *ctx) { return fl_v_maximum(x[0], x[1]); }

static void binary_gradients(void **state)
{
    gradcheck_fn fns[] = {pow_of, minimum_of, maximum_of};
    for (int i = 0; i < 3; i++) {
        assert_gradcheck(fns[i], NULL, IN(0.5, 2, 2, 3), IN(0.5, 2, 2, 3));
        assert_gradcheck(fns[i], NULL, IN(0.5, 2, 2, 1, 3), IN(0.5, 2, 4, 1));
        assert_gradcheck(fns[i], NULL, IN(0.5, 2, 3), IN(0.5, 2));
    }
}

static void binary_gradients_at_special_points(void **state)
{
    /* pow: 0^b has no gradient in b (not nan); a^0 none in a (not 0 * inf) */
    fl_variable *a = fl_v_new(T_F64(FL_SHAPE(3), 0, 0, 2), true);
    fl_variable *b = fl_v_new(T_F64(FL_SHAPE(3), 2, 0, 0), true);
    assert_int_equal(fl_v_backward(fl_v_sum(fl_v_pow(a, b), FL_ALL_AXES, false), NULL, false), FL_OK);
    assert_values(fl_v_grad(a), 0, 0, 0, 0, 0);
    assert_values(fl_v_grad(b), 0, 1e-15, 0, 0, log(2));
    /* maximum and minimum split ties evenly, as PyTorch does */
    fl_variable *x = fl_v_new(T_F64(FL_SHAPE(3), 1, 2, 3), true);
    fl_variable *y = fl_v_new(T_F64(FL_SHAPE(3), 3, 2, 1), true);
    fl_variable *both = fl_v_add(fl_v_maximum(x, y), fl_v_mul_scalar(fl_v_minimum(x, y), 10));
    assert_int_equal(fl_v_backward(fl_v_sum(both, FL_ALL_AXES, false), NULL, false), FL_OK);
    assert_values(fl_v_grad(x), 0, 0, 10, 5.5, 1);
    assert_values(fl_v_grad(y), 0, 0, 1, 5.5, 10);
}

static fl_variable *add_scalar_of(fl_variable *const *x, void *ctx) { return squared(fl_v_add_scalar(x[0], 1.5)); }
static fl_variable *mul_scalar_of(fl_variable *const *x, void *ctx) { return fl_v_mul_scalar(x[0], -2.5); }
static fl_variable *pow_scalar_of(fl_variable *const *x, void *ctx) { return fl_v_pow_scalar(x[0], *(double *)ctx); }

static void scalar_gradients(void **state)
{
    assert_gradcheck(add_scalar_of, NULL, IN(-1, 1, 2, 3));
    assert_gradcheck(mul_scalar_of, NULL, IN(-1, 1, 2, 3));
    double exponents[] = {2, -1.5, 0.5, 0, 1};
    for (int i = 0; i < 5; i++)
        assert_gradcheck(pow_scalar_of, &exponents[i], IN(0.5, 2, 2, 3));
    fl_variable *x = fl_v_new(T_F64(FL_SHAPE(2), 0, 1), true);
    assert_int_equal(fl_v_backward(fl_v_sum(fl_v_pow_scalar(x, 0), FL_ALL_AXES, false), NULL, false), FL_OK);
    assert_values(fl_v_grad(x), 0, 0, 0, 0);
}

static fl_variable *where_of(fl_variable *const *x, void *ctx) { return fl_v_where(ctx, x[0], x[1]); }

static void where_gradients(void **state)
{
    fl_tensor *cond = T_BOOL(FL_SHAPE(2, 3), 1, 0, 0, 1, 1, 0);
    assert_gradcheck(where_of, cond, IN(-1, 1, 2, 3), IN(-1, 1, 2, 3));
    assert_gradcheck(where_of, cond, IN(-1, 1, 3), IN(-1, 1, 2, 1)); /* broadcast */
    fl_tensor *column = T_BOOL(FL_SHAPE(2, 1), 0, 1);
    assert_gradcheck(where_of, column, IN(-1, 1, 3), IN(-1, 1));
}

/* f64 to f64: finite differences need f64 throughout; the f32 case is checked by value below. */
static fl_variable *cast_of(fl_variable *const *x, void *ctx) { return squared(fl_v_cast(x[0], FL_F64)); }

static void cast_gradients(void **state)
{
    assert_gradcheck(cast_of, NULL, IN(-1, 1, 2, 3));
    fl_variable *x = fl_v_new(T_F64(FL_SHAPE(2), 1.5, -2), true);
    fl_variable *y = fl_v_mul(fl_v_cast(x, FL_F32), fl_v_new(T_F32(FL_SHAPE(2), 3, 4), false));
    assert_dtype(fl_v_value(y), FL_F32);
    assert_int_equal(fl_v_backward(fl_v_sum(y, FL_ALL_AXES, false), NULL, false), FL_OK);
    assert_dtype(fl_v_grad(x), FL_F64);
    assert_values(fl_v_grad(x), 0, 0, 3, 4);
    /* integers are constants */
    assert_false(fl_v_requires_grad(fl_v_cast(x, FL_I32)));
}

static void elementwise_errors(void **state)
{
    fl_variable *x = fl_v_new(IN(-1, 1, 2, 3), true);
    assert_fails(fl_v_pow(x, fl_v_new(IN(-1, 1, 2), true)), FL_ERR_SHAPE, "fl_pow");
    assert_fails(fl_v_where(NULL, x, x), FL_ERR_NULL, "fl_v_where");
    assert_fails(fl_v_exp(NULL), FL_ERR_NULL, "fl_v_exp");
}

/* ---- shape and indexing ---- */

typedef struct shape_case {
    int ndim;
    int64_t shape[4];
} shape_case;

static fl_variable *reshape_of(fl_variable *const *x, void *ctx)
{
    shape_case *c = ctx;
    return fl_v_reshape(x[0], c->ndim, c->shape);
}

static fl_variable *expand_of(fl_variable *const *x, void *ctx)
{
    shape_case *c = ctx;
    return fl_v_expand(x[0], c->ndim, c->shape);
}

static fl_variable *flatten_of(fl_variable *const *x, void *ctx) { return fl_v_flatten(x[0], 1, -1); }
static fl_variable *permute_of(fl_variable *const *x, void *ctx) { return fl_v_permute(x[0], (int[]){2, -3, 1}); }
static fl_variable *transpose_of(fl_variable *const *x, void *ctx) { return fl_v_transpose(x[0], -1, 0); }
static fl_variable *squeeze_of(fl_variable *const *x, void *ctx) { return fl_v_squeeze(x[0], -2); }
static fl_variable *unsqueeze_of(fl_variable *const *x, void *ctx) { return fl_v_unsqueeze(x[0], -1); }

static void reshape_gradients(void **state)
{
    shape_case to_flat = {2, {3, -1}};
    assert_gradcheck(reshape_of, &to_flat, IN(-1, 1, 2, 3, 2));
    assert_gradcheck(flatten_of, NULL, IN(-1, 1, 2, 3, 2));
    assert_gradcheck(squeeze_of, NULL, IN(-1, 1, 3, 1, 2));
    assert_gradcheck(unsqueeze_of, NULL, IN(-1, 1, 3, 2));
}

static fl_variable *tril_of(fl_variable *const *x, void *ctx) { return squared(fl_v_tril(x[0], *(int64_t *)ctx)); }
static fl_variable *triu_of(fl_variable *const *x, void *ctx) { return squared(fl_v_triu(x[0], *(int64_t *)ctx)); }

static void triangle_gradients(void **state)
{
    int64_t diagonals[] = {0, 1, -1};
    for (int i = 0; i < 3; i++) {
        assert_gradcheck(tril_of, &diagonals[i], IN(-1, 1, 2, 3, 4));
        assert_gradcheck(triu_of, &diagonals[i], IN(-1, 1, 4, 3));
    }
    /* Masked elements get exactly zero. */
    fl_variable *x = fl_v_new(T_F64(FL_SHAPE(2, 2), 1, 2, 3, 4), true);
    assert_int_equal(fl_v_backward(fl_v_sum(fl_v_tril(x, 0), FL_ALL_AXES, false), NULL, false), FL_OK);
    assert_values(fl_v_grad(x), 0, 0, 1, 0, 1, 1);
}

static void permutation_gradients(void **state)
{
    assert_gradcheck(permute_of, NULL, IN(-1, 1, 2, 3, 4));
    assert_gradcheck(transpose_of, NULL, IN(-1, 1, 2, 3, 4));
}

static fl_variable *expand_squared(fl_variable *const *x, void *ctx) { return squared(expand_of(x, ctx)); }

static void expand_gradients(void **state)
{
    shape_case lead = {3, {2, 3, 4}}, keep = {3, {4, -1, 3}};
    assert_gradcheck(expand_squared, &lead, IN(-1, 1, 3, 1));
    assert_gradcheck(expand_squared, &keep, IN(-1, 1, 1, 3));
    assert_gradcheck(expand_squared, &lead, IN(-1, 1));
}

static fl_variable *concat_of(fl_variable *const *x, void *ctx) { return fl_v_concat(x, 3, *(int *)ctx); }
static fl_variable *stack_of(fl_variable *const *x, void *ctx) { return fl_v_stack(x, 3, *(int *)ctx); }

static void join_gradients(void **state)
{
    int axis = -1, first = 0, last = 2;
    assert_gradcheck(concat_of, &axis, IN(-1, 1, 2, 1), IN(-1, 1, 2, 3), IN(-1, 1, 2, 2));
    assert_gradcheck(concat_of, &first, IN(-1, 1, 1, 2), IN(-1, 1, 3, 2), IN(-1, 1, 2, 2));
    assert_gradcheck(stack_of, &first, IN(-1, 1, 2, 3), IN(-1, 1, 2, 3), IN(-1, 1, 2, 3));
    assert_gradcheck(stack_of, &last, IN(-1, 1, 2, 3), IN(-1, 1, 2, 3), IN(-1, 1, 2, 3));
    assert_gradcheck(stack_of, &axis, IN(-1, 1, 2, 3), IN(-1, 1, 2, 3), IN(-1, 1, 2, 3));
}

/* The pieces weighted differently, so that each piece's gradient is checked. */
static fl_variable *split_of(fl_variable *const *x, void *ctx)
{
    fl_variable *piece[3];
    if (fl_v_split(x[0], (int64_t[]){1, 3, 2}, 3, *(int *)ctx, piece) != FL_OK)
        return NULL;
    fl_variable *a = fl_v_sum(squared(piece[0]), FL_ALL_AXES, false);
    fl_variable *c = fl_v_sum(fl_v_mul(piece[2], piece[2]), FL_ALL_AXES, false);
    return fl_v_add(fl_v_add(a, c), fl_v_sum(piece[1], FL_ALL_AXES, false));
}

static fl_variable *split_middle(fl_variable *const *x, void *ctx)
{
    fl_variable *piece[2];
    if (fl_v_split(x[0], (int64_t[]){2, 1}, 2, 0, piece) != FL_OK)
        return NULL;
    return squared(piece[1]); /* the other piece takes no part */
}

static void split_gradients(void **state)
{
    int axis = -1, first = 0;
    assert_gradcheck(split_of, &axis, IN(-1, 1, 2, 6));
    assert_gradcheck(split_of, &first, IN(-1, 1, 6, 2));
    assert_gradcheck(split_middle, NULL, IN(-1, 1, 3, 2));
}

typedef struct index_case {
    int count;
    fl_index_item items[4];
} index_case;

static fl_variable *index_of(fl_variable *const *x, void *ctx)
{
    index_case *c = ctx;
    return squared(fl_v_index(x[0], c->items, c->count));
}

static void index_gradients(void **state)
{
    index_case cases[] = {
        {2, {FL_RANGE(1, 3), FL_RANGE_STEP(0, FL_END, 2)}},
        {2, {FL_RANGE_STEP(-1, FL_END, -2), FL_AT(-1)}},
        {3, {FL_AT(1), FL_NEWAXIS, FL_RANGE_STEP(3, 0, -1)}},
        {3, {FL_NEWAXIS, FL_SPAN, FL_RANGE(-2, FL_END)}},
    };
    for (int i = 0; i < 4; i++)
        assert_gradcheck(index_of, &cases[i], IN(-1, 1, 4, 5));
}

static fl_variable *pad_of(fl_variable *const *x, void *ctx)
{
    return squared(fl_v_pad(x[0], (int64_t[]){1, 0, 2}, (int64_t[]){0, 2, 1}, 0.5));
}

typedef struct tile_case {
    int count;
    int64_t repeats[3];
} tile_case;

static fl_variable *tile_of(fl_variable *const *x, void *ctx)
{
    tile_case *c = ctx;
    return squared(fl_v_tile(x[0], c->count, c->repeats));
}

static void pad_and_tile_gradients(void **state)
{
    assert_gradcheck(pad_of, NULL, IN(-1, 1, 2, 2, 3));
    tile_case more = {3, {2, 1, 3}}, fewer = {1, {2}}, none = {2, {0, 2}};
    assert_gradcheck(tile_of, &more, IN(-1, 1, 2, 3));
    assert_gradcheck(tile_of, &fewer, IN(-1, 1, 2, 3));
    assert_gradcheck(tile_of, &none, IN(-1, 1, 2, 3));
}

/* ---- reductions ---- */

typedef struct reduce_case {
    int axes[3], count;
    bool keepdims;
    int correction;
} reduce_case;

#define AXES_OF(c) ((c)->count ? (c)->axes : NULL), (c)->count

static fl_variable *mean_of(fl_variable *const *x, void *ctx)
{
    reduce_case *c = ctx;
    return fl_v_mean(x[0], AXES_OF(c), c->keepdims);
}

static fl_variable *var_of(fl_variable *const *x, void *ctx)
{
    reduce_case *c = ctx;
    return fl_v_var(x[0], AXES_OF(c), c->correction, c->keepdims);
}

static fl_variable *max_of(fl_variable *const *x, void *ctx)
{
    reduce_case *c = ctx;
    return fl_v_max(x[0], AXES_OF(c), c->keepdims);
}

static fl_variable *min_of(fl_variable *const *x, void *ctx)
{
    reduce_case *c = ctx;
    return fl_v_min(x[0], AXES_OF(c), c->keepdims);
}

static fl_variable *logsumexp_of(fl_variable *const *x, void *ctx)
{
    reduce_case *c = ctx;
    return fl_v_logsumexp(x[0], AXES_OF(c), c->keepdims);
}

static const reduce_case reduce_cases[] = {
    {{0}, 0, false, 1}, {{1}, 1, false, 0}, {{0, 2}, 2, true, 1}, {{-1}, 1, true, 0}, {{-3, -1}, 2, false, 2},
};

static void reduction_gradients(void **state)
{
    gradcheck_fn fns[] = {mean_of, var_of, max_of, min_of, logsumexp_of};
    for (int f = 0; f < 5; f++)
        for (int i = 0; i < 5; i++) {
            reduce_case c = reduce_cases[i];
            /* random values: distinct, so the extrema are unique and a step does not move them */
            assert_gradcheck(fns[f], &c, IN(-1, 1, 2, 3, 4));
        }
    /* a 1-D input */
    reduce_case all = {{0}, 0, false, 1};
    for (int f = 0; f < 5; f++)
        assert_gradcheck(fns[f], &all, IN(-1, 1, 5));
}

/* Ties: the first extremum takes the whole gradient. */
static void max_and_min_send_the_gradient_to_the_first_extremum(void **state)
{
    fl_variable *x = fl_v_new(T_F64(FL_SHAPE(2, 3), 1, 3, 3, -2, 0, -2), true);
    fl_variable *y = fl_v_add(fl_v_max(x, FL_AXES(1), false), fl_v_min(x, FL_AXES(1), false));
    assert_int_equal(fl_v_backward(y, T_F64(FL_SHAPE(2), 10, 20), false), FL_OK);
    assert_values(fl_v_grad(x), 0, 0, 10, 10, 0, 20, 20, 0);
    fl_v_zero_grad(x);
    assert_int_equal(fl_v_backward(fl_v_max(x, FL_ALL_AXES, false), NULL, false), FL_OK);
    assert_values(fl_v_grad(x), 0, 0, 0, 1, 0, 0, 0, 0);
}

/* ---- convolution and pooling ---- */

static fl_variable *conv2d_of(fl_variable *const *x, void *ctx) { return fl_v_conv2d(x[0], x[1], ctx); }
static fl_variable *conv1d_of(fl_variable *const *x, void *ctx) { return fl_v_conv1d(x[0], x[1], ctx); }
static fl_variable *pool2d_of(fl_variable *const *x, void *ctx) { return fl_v_pool2d(x[0], ctx); }

static void conv2d_gradients(void **state)
{
    assert_gradcheck(conv2d_of, NULL, IN(-1, 1, 2, 2, 5, 5), IN(-1, 1, 3, 2, 3, 3));
    fl_conv_params strided = {.stride = {2, 1}, .padding = {1, 2}};
    assert_gradcheck(conv2d_of, &strided, IN(-1, 1, 1, 2, 5, 6), IN(-1, 1, 2, 2, 3, 2));
    fl_conv_params dilated = {.dilation = {2, 1}, .padding = {1, 0}, .groups = 2};
    assert_gradcheck(conv2d_of, &dilated, IN(-1, 1, 2, 4, 5, 4), IN(-1, 1, 4, 2, 2, 3));
    fl_conv_params depthwise = {.stride = {2, 2}, .padding = {1, 1}, .groups = 3};
    assert_gradcheck(conv2d_of, &depthwise, IN(-1, 1, 1, 3, 5, 5), IN(-1, 1, 3, 1, 3, 3));
}

static void conv1d_gradients(void **state)
{
    assert_gradcheck(conv1d_of, NULL, IN(-1, 1, 2, 3, 7), IN(-1, 1, 2, 3, 3));
    fl_conv_params all = {.stride = {0, 2}, .padding = {0, 2}, .dilation = {0, 2}, .groups = 2};
    assert_gradcheck(conv1d_of, &all, IN(-1, 1, 2, 4, 9), IN(-1, 1, 4, 2, 3));
}

/* A permutation of distinct values a step apart: no ties in any window. */
static fl_tensor *distinct_input(int ndim, const int64_t *shape)
{
    fl_tensor *noise = gradcheck_input(0, 1, ndim, shape);
    fl_tensor *order;
    int64_t n = fl_numel(noise);
    assert_int_equal(fl_sort(fl_reshape(noise, FL_SHAPE(n)), 0, false, NULL, &order), FL_OK);
    return fl_reshape(fl_mul_scalar(fl_cast(order, FL_F64), 0.1), ndim, shape);
}

static void pool2d_gradients(void **state)
{
    fl_pool_params cases[] = {
        {.kind = FL_POOL_MAX, .kernel = {2, 2}},
        {.kind = FL_POOL_MAX, .kernel = {3, 2}, .stride = {2, 1}, .padding = {1, 1}},
        {.kind = FL_POOL_MAX, .kernel = {3, 3}, .stride = {2, 2}, .padding = {0, 1}, .ceil_mode = true},
        {.kind = FL_POOL_AVG, .kernel = {2, 2}},
        {.kind = FL_POOL_AVG, .kernel = {3, 3}, .stride = {2, 1}, .padding = {1, 1}},
        {.kind = FL_POOL_AVG, .kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true,
         .count_include_pad = true},
    };
    for (int i = 0; i < 6; i++)
        assert_gradcheck(pool2d_of, &cases[i], distinct_input(FL_SHAPE(2, 2, 6, 5)));
}

static void conv_errors(void **state)
{
    fl_variable *x = fl_v_new(IN(-1, 1, 1, 2, 4, 4), true);
    fl_variable *w = fl_v_new(IN(-1, 1, 3, 3, 3, 3), true);
    assert_fails(fl_v_conv2d(x, w, NULL), FL_ERR_SHAPE, "fl_conv2d");
    assert_fails(fl_v_conv1d(x, NULL, NULL), FL_ERR_NULL, "fl_v_conv1d");
    assert_fails(fl_v_pool2d(x, NULL), FL_ERR_NULL, "fl_pool2d");
}

/* ---- activations ---- */

static fl_variable *leaky_relu_of(fl_variable *const *x, void *ctx) { return fl_v_leaky_relu(x[0], 0.1); }
static fl_variable *gelu_of(fl_variable *const *x, void *ctx) { return fl_v_gelu(x[0], false); }
static fl_variable *gelu_tanh_of(fl_variable *const *x, void *ctx) { return fl_v_gelu(x[0], true); }
static fl_variable *softmax_of(fl_variable *const *x, void *ctx) { return fl_v_softmax(x[0], *(int *)ctx); }
static fl_variable *log_softmax_of(fl_variable *const *x, void *ctx) { return fl_v_log_softmax(x[0], *(int *)ctx); }

static void activation_gradients(void **state)
{
    /* away from the kink at 0 */
    assert_gradcheck(leaky_relu_of, NULL, T_F64(FL_SHAPE(6), -2, -0.5, -0.1, 0.1, 0.7, 3));
    assert_gradcheck(gelu_of, NULL, IN(-4, 4, 3, 7));
    assert_gradcheck(gelu_tanh_of, NULL, IN(-4, 4, 3, 7));
}

static void gelu_matches_pytorch(void **state)
{
    /* torch.nn.functional.gelu(torch.tensor([-2., -0.5, 0., 1.5], dtype=torch.float64), approximate=...) */
    fl_tensor *x = T_F64(FL_SHAPE(4), -2, -0.5, 0, 1.5);
    assert_values(fl_v_value(fl_v_gelu(fl_v_new(x, false), false)), 1e-12, 1e-15, -0.04550026389635842,
                  -0.15426876936299344, 0, 1.399789198096713);
    assert_values(fl_v_value(fl_v_gelu(fl_v_new(x, false), true)), 1e-12, 1e-15, -0.04540230591222494,
                  -0.15428599017485606, 0, 1.3995715769802328);
}

/* GELU(x) and its gradient for dy, through the variable API. */
static void gelu_and_gradient(const fl_tensor *x, const fl_tensor *dy, bool approximate, fl_tensor **y,
                              fl_tensor **dx)
{
    fl_variable *v = fl_v_new(x, true);
    fl_variable *out = fl_v_gelu(v, approximate);
    assert_int_equal(fl_v_backward(out, dy, false), FL_OK);
    *y = fl_copy(fl_v_value(out));
    *dx = fl_copy(fl_v_grad(v));
}

static void fused_gelu_matches_the_composition(void **state)
{
    fl_backend composing = support_derive(fl_default_backend()->name);
    if (!composing.gelu) /* nothing fused to compare */
        skip();
    composing.gelu = NULL;
    fl_tensor *wide = fl_mul_scalar(fl_randn(FL_F32, FL_SHAPE(37, 203)), 4.0);
    fl_tensor *special = T_F32(FL_SHAPE(2, 4), NAN, INFINITY, -INFINITY, 0, -12, 12, 1e-20f, -30);
    fl_tensor *inputs[] = {wide, fl_transpose(wide, 0, 1), fl_cast(wide, FL_F64), special};
    for (int i = 0; i < 4; i++) {
        const fl_tensor *x = inputs[i];
        /* a broadcast (strided) gradient for the transposed input, a dense one elsewhere */
        fl_tensor *dy = i == 1 ? fl_expand(fl_randn(fl_dtype_of(x), FL_SHAPE(1, fl_dim(x, 1))), fl_ndim(x), fl_shape(x))
                               : fl_randn(fl_dtype_of(x), fl_ndim(x), fl_shape(x));
        for (int approximate = 0; approximate < 2; approximate++) {
            fl_tensor *y_composed, *dx_composed, *y, *dx;
            fl_backend original = support_override(&composing);
            gelu_and_gradient(x, dy, approximate, &y_composed, &dx_composed);
            support_override(&original);
            gelu_and_gradient(x, dy, approximate, &y, &dx);
            assert_dtype(y, fl_dtype_of(x));
            assert_close(y, y_composed, 1e-6, 1e-6);
            assert_close(dx, dx_composed, 1e-6, 1e-6);
        }
    }
    assert_no_error();
}

static void softmax_gradients(void **state)
{
    int last = -1, first = 0, middle = 1;
    gradcheck_fn fns[] = {softmax_of, log_softmax_of};
    for (int f = 0; f < 2; f++) {
        assert_gradcheck(fns[f], &last, IN(-3, 3, 2, 3, 4));
        assert_gradcheck(fns[f], &first, IN(-3, 3, 2, 3, 4));
        assert_gradcheck(fns[f], &middle, IN(-3, 3, 2, 3, 4));
        assert_gradcheck(fns[f], &first, IN(-3, 3, 5));
    }
}

static fl_variable *gather_of(fl_variable *const *x, void *ctx) { return fl_v_gather(x[0], *(int *)ctx, fl_v_value(x[1])); }
static fl_variable *index_select_of(fl_variable *const *x, void *ctx)
{
    return fl_v_index_select(x[0], *(int *)ctx, fl_v_value(x[1]));
}

static void index_tensor_gradients(void **state)
{
    int first = 0, last = -1;
    /* repeated indices accumulate; an index smaller than the input along other axes */
    assert_gradcheck(gather_of, &first, IN(-1, 1, 3, 4), T_I64(FL_SHAPE(2, 3), 2, 0, 2, 2, 1, 0));
    assert_gradcheck(gather_of, &last, IN(-1, 1, 2, 3, 4), T_I32(FL_SHAPE(2, 2, 2), 3, 3, 0, 1, 2, 0, 1, 1));
    assert_gradcheck(index_select_of, &first, IN(-1, 1, 4, 3), T_I64(FL_SHAPE(5), 3, 0, 3, 1, 3));
    assert_gradcheck(index_select_of, &last, IN(-1, 1, 2, 3, 4), T_I32(FL_SHAPE(3), 1, 1, 0));
    assert_gradcheck(index_select_of, &first, IN(-1, 1, 4, 3), T_I64(FL_SHAPE(), 2)); /* a 0-d index */
}

static void index_tensor_errors(void **state)
{
    fl_variable *x = fl_v_new(IN(-1, 1, 3, 4), true);
    assert_fails(fl_v_gather(x, 0, T_I64(FL_SHAPE(1, 1), 3)), FL_ERR_INDEX, "fl_gather");
    assert_fails(fl_v_index_select(x, 2, T_I64(FL_SHAPE(1), 0)), FL_ERR_AXIS, "fl_index_select");
    assert_fails(fl_v_index_select(x, 0, NULL), FL_ERR_NULL, "fl_v_index_select");
}

static void shape_errors(void **state)
{
    fl_variable *x = fl_v_new(IN(-1, 1, 2, 3), true), *out[2];
    assert_fails(fl_v_reshape(x, FL_SHAPE(4)), FL_ERR_SHAPE, "fl_reshape");
    assert_fails(fl_v_permute(x, (int[]){0, 0}), FL_ERR_AXIS, "fl_permute");
    assert_fails(fl_v_concat(NULL, 0, 0), FL_ERR_VALUE, "fl_v_concat");
    assert_fails(fl_v_stack((fl_variable *[]){x, NULL}, 2, 0), FL_ERR_NULL, "fl_v_stack");
    assert_fails_status(fl_v_split(x, (int64_t[]){1, 1}, 2, 1, out), FL_ERR_SHAPE, "fl_split");
    assert_null(out[0]);
    assert_fails_status(fl_v_split(x, (int64_t[]){1, 1}, 2, 1, NULL), FL_ERR_NULL, "fl_v_split");
    assert_fails(fl_v_index(x, FL_INDEX(FL_AT(2))), FL_ERR_INDEX, "fl_index");
    assert_fails(fl_v_pad(x, (int64_t[]){-1, 0}, (int64_t[]){0, 0}, 0), FL_ERR_VALUE, "fl_pad");
    assert_fails(fl_v_tile(x, 1, (int64_t[]){-1}), FL_ERR_VALUE, "fl_tile");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        scoped_test(unary_gradients),
        scoped_test(triangle_gradients),
        scoped_test(clamp_gradient),
        scoped_test(binary_gradients),
        scoped_test(binary_gradients_at_special_points),
        scoped_test(scalar_gradients),
        scoped_test(where_gradients),
        scoped_test(cast_gradients),
        scoped_test(elementwise_errors),
        scoped_test(reshape_gradients),
        scoped_test(permutation_gradients),
        scoped_test(expand_gradients),
        scoped_test(join_gradients),
        scoped_test(split_gradients),
        scoped_test(index_gradients),
        scoped_test(pad_and_tile_gradients),
        scoped_test(shape_errors),
        scoped_test(index_tensor_gradients),
        scoped_test(index_tensor_errors),
        scoped_test(activation_gradients),
        scoped_test(gelu_matches_pytorch),
        scoped_test(fused_gelu_matches_the_composition),
        scoped_test(softmax_gradients),
        scoped_test(conv2d_gradients),
        scoped_test(conv1d_gradients),
        scoped_test(pool2d_gradients),
        scoped_test(conv_errors),
        scoped_test(reduction_gradients),
        scoped_test(max_and_min_send_the_gradient_to_the_first_extremum),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
