/* Finite-difference checks of every differentiable function of src/autograd, in
 * f64, with broadcasting, negative axes, keepdims both ways and batched cases; and
 * the errors of the functions that check arguments of their own. */
#include <math.h>

#include "gradcheck.h"

#define IN(low, high, ...) gradcheck_input((low), (high), FL_SHAPE(__VA_ARGS__))

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

/* Multiplying by x keeps the gradient of a pure movement from being the same at every element. */
static fl_variable *squared(fl_variable *y) { return fl_v_mul(y, y); }

static void reshape_gradients(void **state)
{
    shape_case to_flat = {2, {3, -1}};
    assert_gradcheck(reshape_of, &to_flat, IN(-1, 1, 2, 3, 2));
    assert_gradcheck(flatten_of, NULL, IN(-1, 1, 2, 3, 2));
    assert_gradcheck(squeeze_of, NULL, IN(-1, 1, 3, 1, 2));
    assert_gradcheck(unsqueeze_of, NULL, IN(-1, 1, 3, 2));
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
        scoped_test(reshape_gradients),
        scoped_test(permutation_gradients),
        scoped_test(expand_gradients),
        scoped_test(join_gradients),
        scoped_test(split_gradients),
        scoped_test(index_gradients),
        scoped_test(pad_and_tile_gradients),
        scoped_test(shape_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
