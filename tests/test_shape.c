/* Shape operations: reshape, flatten, permute, transpose, expand, broadcast_to,
 * squeeze, unsqueeze, concat, stack, split, pad and tile, against NumPy/PyTorch
 * (tests/fixtures/gen_index.py) and hand-computed values; which of them are views,
 * non-contiguous and zero-size inputs, and every error. */
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "backends/lazy/lazy.h"
#include "backends/opencl/opencl.h"
#include "support.h"

#define F(name) fixture("index.bin", name)

/* The CPU tensor behind t: t itself, or a lazy tensor's value (materialized). */
static const fl_tensor *cpu_tensor_of(const fl_tensor *t)
{
    if (strcmp(fl_backend_name(t), "lazy") != 0)
        return t;
    assert_int_equal(fl_eval(t), FL_OK);
    return lazy_impl(t)->value;
}

static bool on_opencl(const fl_tensor *t) { return strcmp(fl_backend_name(t), "opencl") == 0; }

static bool shares_storage(const fl_tensor *a, const fl_tensor *b)
{
    if (on_opencl(a)) {
        assert_int_equal(fl_eval(a), FL_OK);
        assert_int_equal(fl_eval(b), FL_OK);
        return ocl_impl(a)->buffer == ocl_impl(b)->buffer;
    }
    return cpu_impl(cpu_tensor_of(a))->storage == cpu_impl(cpu_tensor_of(b))->storage;
}

/* 0, 1, 2, ... as an f32 tensor of the given shape. */
static fl_tensor *iota(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    return fl_reshape(fl_arange(0, (double)n, 1, FL_F32), ndim, shape);
}

/* ---- reshape and flatten ---- */

static void reshape_views_when_strides_allow(void **state)
{
    fl_tensor *x = iota(FL_SHAPE(2, 3, 4));
    fl_tensor *r = fl_reshape(x, FL_SHAPE(4, -1));
    assert_shape(r, 4, 6);
    assert_true(shares_storage(r, x));
    /* A transposed tensor: splitting or adding size-1 axes stays a view... */
    fl_tensor *t = fl_transpose(x, 0, 2); /* [4, 3, 2] */
    fl_tensor *split = fl_reshape(t, FL_SHAPE(2, 2, 1, 3, 2));
    assert_true(shares_storage(split, x));
    assert_close(fl_copy(split), fl_reshape(fl_copy(t), FL_SHAPE(2, 2, 1, 3, 2)), 0, 0);
    /* ...merging a transposed pair of axes copies, with the values of a copy. */
    fl_tensor *merged = fl_reshape(t, FL_SHAPE(12, 2));
    assert_false(shares_storage(merged, x));
    assert_values(fl_index(merged, FL_INDEX(FL_RANGE(0, 3))), 0, 0, 0, 12, 4, 16, 8, 20);
    /* A sliced tensor whose kept axes are still evenly strided merges as a view. */
    fl_tensor *rows = fl_index(x, FL_INDEX(FL_SPAN, FL_RANGE(1, 3)));
    fl_tensor *flat_rows = fl_reshape(rows, FL_SHAPE(2, 8));
    assert_true(shares_storage(flat_rows, x));
    assert_values(flat_rows, 0, 0, 4, 5, 6, 7, 8, 9, 10, 11, 16, 17, 18, 19, 20, 21, 22, 23);
    /* An expanded tensor can split its broadcast axis without a copy. */
    fl_tensor *e = fl_expand(T_F32(FL_SHAPE(1, 2), 1, 2), FL_SHAPE(6, 2));
    fl_tensor *es = fl_reshape(e, FL_SHAPE(3, 2, 2));
    assert_true(shares_storage(es, e));
    assert_values(es, 0, 0, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2);
    assert_values(fl_reshape(e, FL_SHAPE(12)), 0, 0, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2);
    assert_shape(fl_reshape(fl_zeros(FL_F32, FL_SHAPE(0, 4)), FL_SHAPE(2, 0, 2)), 2, 0, 2);
    assert_no_error();
}

static void flatten_merges_a_run_of_axes(void **state)
{
    fl_tensor *x = iota(FL_SHAPE(2, 3, 4, 5));
    assert_shape(fl_flatten(x, 1, 2), 2, 12, 5);
    assert_shape(fl_flatten(x, 0, -1), 120);
    assert_shape(fl_flatten(x, -2, -2), 2, 3, 4, 5);
    assert_shape(fl_flatten(fl_scalar(2, FL_F32), 0, -1), 1);
    fl_tensor *t = fl_flatten(fl_transpose(x, 0, 3), 2, 3); /* [5, 3, 8]: a copy */
    assert_values(fl_index(t, FL_INDEX(FL_AT(1), FL_AT(2))), 0, 0, 41, 101, 46, 106, 51, 111, 56, 116);
    assert_fails(fl_flatten(x, 2, 1), FL_ERR_AXIS, "fl_flatten: start axis 2 comes after end axis 1");
    assert_fails(fl_flatten(x, 0, 4), FL_ERR_AXIS, "fl_flatten: axis 4 is out of range for a tensor of 4 dimensions");
    assert_fails(fl_flatten(fl_scalar(2, FL_F32), 0, 1), FL_ERR_AXIS, "axis 1 is out of range");
}

static void reshape_errors(void **state)
{
    fl_tensor *x = fl_zeros(FL_F32, FL_SHAPE(2, 3));
    assert_fails(fl_reshape(x, FL_SHAPE(4, 2)), FL_ERR_SHAPE, "fl_reshape: cannot reshape f32[2, 3] (6 elements) to [4, 2]");
    assert_fails(fl_reshape(x, FL_SHAPE(-1, 4)), FL_ERR_SHAPE, "cannot reshape f32[2, 3] to [-1, 4]");
    assert_fails(fl_reshape(x, FL_SHAPE(-1, -1)), FL_ERR_SHAPE, "cannot reshape");
    /* As NumPy: -1 is ambiguous next to a zero-size axis. */
    assert_fails(fl_reshape(fl_zeros(FL_F32, FL_SHAPE(0, 4)), FL_SHAPE(2, 0, -1)), FL_ERR_SHAPE, "to [2, 0, -1]");
}

/* ---- permute and transpose ---- */

static void permute_and_transpose_are_views(void **state)
{
    fl_tensor *x = iota(FL_SHAPE(2, 3, 4));
    fl_tensor *p = fl_permute(x, (const int[]){2, 0, -2});
    assert_shape(p, 4, 2, 3);
    assert_true(shares_storage(p, x));
    float values[24];
    assert_int_equal(fl_to_host(p, values, sizeof values), FL_OK);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 2; j++)
            for (int k = 0; k < 3; k++)
                assert_true(values[(i * 2 + j) * 3 + k] == (float)(j * 12 + k * 4 + i));
    assert_ptr_equal(fl_permute(x, (const int[]){0, 1, 2}), x);
    fl_tensor *t = fl_transpose(x, -1, 0);
    assert_shape(t, 4, 3, 2);
    assert_true(shares_storage(t, x));
    /* A transpose of a transpose reads the original order. */
    assert_close(fl_transpose(t, 0, 2), x, 0, 0);
    assert_values(fl_add(fl_transpose(T_F32(FL_SHAPE(2, 2), 1, 2, 3, 4), 0, 1), T_F32(FL_SHAPE(2, 2), 10, 20, 30, 40)), 0,
                  0, 11, 23, 32, 44);
    assert_shape(fl_transpose(fl_zeros(FL_I32, FL_SHAPE(0, 5)), 0, 1), 5, 0);
    assert_no_error();
}

static void permute_errors(void **state)
{
    fl_tensor *x = fl_zeros(FL_F32, FL_SHAPE(2, 3));
    assert_fails(fl_permute(x, (const int[]){0, 0}), FL_ERR_AXIS,
                 "fl_permute: axis 0 is listed twice; the axes must be a permutation of the 2 axes of f32[2, 3]");
    assert_fails(fl_permute(x, (const int[]){1, -3}), FL_ERR_AXIS, "fl_permute: axis -3 is out of range");
    assert_fails(fl_permute(x, NULL), FL_ERR_NULL, "fl_permute: axes is NULL");
    assert_fails(fl_transpose(x, 0, 2), FL_ERR_AXIS, "fl_transpose: axis 2 is out of range for a tensor of 2 dimensions");
}

/* ---- expand and broadcast_to ---- */

static void expand_and_broadcast_to(void **state)
{
    fl_tensor *col = T_F32(FL_SHAPE(3, 1), 1, 2, 3);
    fl_tensor *e = fl_expand(col, FL_SHAPE(2, -1, 4));
    assert_shape(e, 2, 3, 4);
    assert_true(shares_storage(e, col));
    assert_values(e, 0, 0, [0 ... 3] = 1, [4 ... 7] = 2, [8 ... 11] = 3, [12 ... 15] = 1, [16 ... 19] = 2,
                  [20 ... 23] = 3);
    /* Expanding an expanded, transposed view; arithmetic reads the broadcast values. */
    fl_tensor *row = fl_transpose(col, 0, 1); /* [1, 3] */
    fl_tensor *b = fl_broadcast_to(fl_expand(row, FL_SHAPE(2, 3)), FL_SHAPE(2, 2, 3));
    assert_true(shares_storage(b, col));
    assert_values(fl_add(b, fl_arange(0, 3, 1, FL_F32)), 0, 0, 1, 3, 5, 1, 3, 5, 1, 3, 5, 1, 3, 5);
    assert_values(fl_broadcast_to(fl_scalar(4, FL_I64), FL_SHAPE(3)), 0, 0, 4, 4, 4);
    assert_shape(fl_broadcast_to(T_F32(FL_SHAPE(1), 1), FL_SHAPE(2, 0)), 2, 0);
    assert_ptr_equal(fl_broadcast_to(col, FL_SHAPE(3, 1)), col);
    assert_no_error();
}

static void expand_errors(void **state)
{
    fl_tensor *x = fl_zeros(FL_F32, FL_SHAPE(2, 3));
    assert_fails(fl_expand(x, FL_SHAPE(2, 4)), FL_ERR_SHAPE, "fl_expand: cannot broadcast f32[2, 3] to [2, 4]");
    assert_fails(fl_expand(x, FL_SHAPE(3)), FL_ERR_SHAPE, "cannot broadcast f32[2, 3] to [3]: the target has fewer dimensions");
    assert_fails(fl_expand(x, FL_SHAPE(-1, 2, 3)), FL_ERR_SHAPE, "fl_expand: cannot broadcast f32[2, 3] to [-1, 2, 3]");
    assert_fails(fl_broadcast_to(x, FL_SHAPE(2, -1)), FL_ERR_SHAPE, "fl_broadcast_to: cannot broadcast f32[2, 3] to [2, -1]");
    assert_fails(fl_broadcast_to(x, 9, (int64_t[9]){0}), FL_ERR_SHAPE, "fl_broadcast_to: invalid target of 9 dimensions");
}

/* ---- squeeze and unsqueeze ---- */

static void squeeze_and_unsqueeze_are_views(void **state)
{
    fl_tensor *x = iota(FL_SHAPE(1, 3, 1, 2));
    fl_tensor *s = fl_squeeze(x, -2);
    assert_shape(s, 1, 3, 2);
    assert_true(shares_storage(s, x));
    assert_shape(fl_squeeze_all(x), 3, 2);
    assert_shape(fl_squeeze_all(fl_ones(FL_F32, FL_SHAPE(1, 1))));
    assert_shape(fl_unsqueeze(x, 0), 1, 1, 3, 1, 2);
    assert_shape(fl_unsqueeze(x, -1), 1, 3, 1, 2, 1);
    assert_shape(fl_unsqueeze(fl_scalar(1, FL_F32), 0), 1);
    /* On a transposed tensor both stay views, with the transposed values. */
    fl_tensor *t = fl_transpose(iota(FL_SHAPE(2, 3)), 0, 1);
    fl_tensor *u = fl_unsqueeze(t, 1);
    assert_shape(u, 3, 1, 2);
    assert_true(shares_storage(u, t));
    assert_values(u, 0, 0, 0, 3, 1, 4, 2, 5);
    fl_tensor *back = fl_squeeze(u, 1);
    assert_true(shares_storage(back, t));
    assert_values(fl_mul_scalar(back, 2), 0, 0, 0, 6, 2, 8, 4, 10);
    assert_shape(fl_unsqueeze(fl_zeros(FL_F32, FL_SHAPE(0)), 1), 0, 1);
    assert_no_error();
}

static void squeeze_errors(void **state)
{
    fl_tensor *x = fl_zeros(FL_F32, FL_SHAPE(1, 3));
    assert_fails(fl_squeeze(x, 1), FL_ERR_SHAPE, "fl_squeeze: axis 1 of f32[1, 3] has size 3, not 1");
    assert_fails(fl_squeeze(x, 2), FL_ERR_AXIS, "fl_squeeze: axis 2 is out of range");
    assert_fails(fl_unsqueeze(x, 3), FL_ERR_AXIS, "fl_unsqueeze: axis 3 is out of range for a tensor of 3 dimensions");
    assert_fails(fl_unsqueeze(x, -4), FL_ERR_AXIS, "axis -4");
    assert_fails(fl_unsqueeze(fl_zeros(FL_F32, 8, (int64_t[8]){1, 1, 1, 1, 1, 1, 1, 1}), 0), FL_ERR_SHAPE,
                 "fl_unsqueeze: f32[1, 1, 1, 1, 1, 1, 1, 1] already has the most dimensions Flare allows (8)");
}

/* ---- concat, stack, split ---- */

static void concat_promotes_and_joins_views(void **state)
{
    fl_tensor *m = iota(FL_SHAPE(2, 3));
    fl_tensor *ci = T_I32(FL_SHAPE(2, 1), 7, 8);
    fl_tensor *c = fl_concat((fl_tensor *[]){m, ci}, 2, -1);
    assert_dtype(c, FL_F32);
    assert_close(c, F("concat_out"), 0, 0);
    /* Transposed, expanded and empty inputs along axis 0. */
    fl_tensor *t = fl_transpose(iota(FL_SHAPE(3, 2)), 0, 1);      /* [[0,2,4],[1,3,5]] */
    fl_tensor *e = fl_expand(T_F32(FL_SHAPE(1, 3), 9, 8, 7), FL_SHAPE(2, 3));
    fl_tensor *none = fl_zeros(FL_F32, FL_SHAPE(0, 3));
    assert_values(fl_concat((fl_tensor *[]){t, none, e, t}, 4, 0), 0, 0, 0, 2, 4, 1, 3, 5, 9, 8, 7, 9, 8, 7, 0, 2, 4, 1,
                  3, 5);
    /* One input gives a copy; f16 joins by size; all-empty gives empty. */
    assert_values(fl_concat((fl_tensor *[]){t}, 1, 1), 0, 0, 0, 2, 4, 1, 3, 5);
    fl_tensor *h = fl_concat((fl_tensor *[]){fl_cast(t, FL_F16), fl_cast(e, FL_F16)}, 2, 1);
    assert_dtype(h, FL_F16);
    assert_values(h, 0, 0, 0, 2, 4, 9, 8, 7, 1, 3, 5, 9, 8, 7);
    assert_shape(fl_concat((fl_tensor *[]){none, none}, 2, 1), 0, 6);
    /* Large inputs take the parallel copy: a middle axis, one input transposed. */
    fl_tensor *big = iota(FL_SHAPE(64, 300, 2));
    fl_tensor *big_t = fl_permute(iota(FL_SHAPE(2, 100, 64)), (const int[]){2, 1, 0});
    fl_tensor *joined = fl_concat((fl_tensor *[]){big, big_t}, 2, 1);
    assert_shape(joined, 64, 400, 2);
    assert_close(fl_index(joined, FL_INDEX(FL_SPAN, FL_RANGE(0, 300))), big, 0, 0);
    assert_close(fl_index(joined, FL_INDEX(FL_SPAN, FL_RANGE(300, FL_END))), big_t, 0, 0);
    assert_no_error();
}

static void concat_errors(void **state)
{
    fl_tensor *a = fl_zeros(FL_F32, FL_SHAPE(2, 3));
    assert_fails(fl_concat((fl_tensor *[]){a, fl_zeros(FL_I64, FL_SHAPE(3, 3))}, 2, 1), FL_ERR_SHAPE,
                 "fl_concat: tensor 1 i64[3, 3] does not match tensor 0 f32[2, 3] outside axis 1");
    assert_fails(fl_concat((fl_tensor *[]){a, fl_zeros(FL_F32, FL_SHAPE(2, 3, 1))}, 2, 0), FL_ERR_SHAPE,
                 "tensor 1 f32[2, 3, 1] does not match tensor 0 f32[2, 3]");
    assert_fails(fl_concat((fl_tensor *[]){a}, 0, 0), FL_ERR_VALUE, "fl_concat: needs at least one tensor, got 0");
    assert_fails(fl_concat((fl_tensor *[]){a, a}, 2, 2), FL_ERR_AXIS, "fl_concat: axis 2 is out of range");
    assert_fails(fl_concat((fl_tensor *[]){fl_scalar(1, FL_F32), fl_scalar(2, FL_F32)}, 2, 0), FL_ERR_SHAPE,
                 "fl_concat: cannot join 0-d tensors (f32[])");
    assert_fails(fl_concat((fl_tensor *[]){a, NULL}, 2, 0), FL_ERR_NULL, "fl_concat: argument 1 is NULL");
}

static void stack_adds_an_axis(void **state)
{
    fl_tensor *a = T_F32(FL_SHAPE(2), 1, 2), *b = T_F32(FL_SHAPE(2), 3, 4);
    assert_values(fl_stack((fl_tensor *[]){a, b}, 2, 0), 0, 0, 1, 2, 3, 4);
    fl_tensor *s = fl_stack((fl_tensor *[]){a, b, a}, 3, -1);
    assert_shape(s, 2, 3);
    assert_values(s, 0, 0, 1, 3, 1, 2, 4, 2);
    assert_shape(fl_stack((fl_tensor *[]){fl_scalar(1, FL_I32), fl_scalar(2, FL_I64)}, 2, 0), 2);
    assert_dtype(fl_stack((fl_tensor *[]){fl_scalar(1, FL_I32), fl_scalar(2, FL_I64)}, 2, 0), FL_I64);
    assert_fails(fl_stack((fl_tensor *[]){a, T_F32(FL_SHAPE(3), 1, 2, 3)}, 2, 0), FL_ERR_SHAPE,
                 "fl_stack: tensor 1 f32[3] and tensor 0 f32[2] differ in shape");
    assert_fails(fl_stack((fl_tensor *[]){a, b}, 2, 2), FL_ERR_AXIS, "fl_stack: axis 2 is out of range for a tensor of 2");
    assert_fails(fl_stack(NULL, 0, 0), FL_ERR_VALUE, "fl_stack: needs at least one tensor");
}

static void split_gives_views(void **state)
{
    fl_tensor *x = iota(FL_SHAPE(2, 6));
    fl_tensor *parts[3];
    assert_int_equal(fl_split(x, (const int64_t[]){1, 0, 5}, 3, -1, parts), FL_OK);
    assert_shape(parts[0], 2, 1);
    assert_shape(parts[1], 2, 0);
    assert_values(parts[0], 0, 0, 0, 6);
    assert_values(parts[2], 0, 0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11);
    assert_true(shares_storage(parts[2], x));
    fl_tensor *rows[2];
    assert_int_equal(fl_split(fl_transpose(x, 0, 1), (const int64_t[]){4, 2}, 2, 0, rows), FL_OK);
    assert_values(rows[1], 0, 0, 4, 10, 5, 11);
    assert_no_error();
}

static void split_errors(void **state)
{
    fl_tensor *x = fl_zeros(FL_F32, FL_SHAPE(2, 6));
    fl_tensor *parts[2] = {x, x};
    assert_fails_status(fl_split(x, (const int64_t[]){2, 3}, 2, 1, parts), FL_ERR_SHAPE,
                        "fl_split: sizes add up to 5 but axis 1 of f32[2, 6] has 6");
    assert_null(parts[0]);
    assert_fails_status(fl_split(x, (const int64_t[]){7, -1}, 2, 1, parts), FL_ERR_VALUE, "fl_split: size 1 is negative (-1)");
    assert_fails_status(fl_split(x, (const int64_t[]){2}, 1, 2, parts), FL_ERR_AXIS, "fl_split: axis 2 is out of range");
    assert_fails_status(fl_split(x, NULL, 0, 0, parts), FL_ERR_VALUE, "needs at least one size");
    assert_fails_status(fl_split(x, (const int64_t[]){2}, 1, 0, NULL), FL_ERR_NULL, "fl_split: out is NULL");
    assert_fails_status(fl_split(NULL, (const int64_t[]){2}, 1, 0, parts), FL_ERR_NULL, "argument 1 is NULL");
}

/* ---- pad and tile ---- */

static void pad_surrounds_with_a_constant(void **state)
{
    fl_tensor *m = iota(FL_SHAPE(2, 3));
    assert_close(fl_pad(m, (const int64_t[]){1, 0}, (const int64_t[]){2, 3}, 7), F("pad_out"), 0, 0);
    fl_tensor *t = fl_pad(fl_transpose(T_I32(FL_SHAPE(2, 2), 1, 2, 3, 4), 0, 1), (const int64_t[]){0, 1},
                          (const int64_t[]){1, 0}, -1.5);
    assert_dtype(t, FL_I32);
    assert_values(t, 0, 0, -1, 1, 3, -1, 2, 4, -1, -1, -1);
    assert_values(fl_pad(fl_zeros(FL_U8, FL_SHAPE(0)), (const int64_t[]){2}, (const int64_t[]){1}, 5), 0, 0, 5, 5, 5);
    /* One padded axis is one concat of broadcast values around t, strided t included. */
    fl_tensor *one_axis = fl_pad(fl_transpose(T_F32(FL_SHAPE(2, 3), 1, 2, 3, 4, 5, 6), 0, 1),
                                 (const int64_t[]){0, 2}, (const int64_t[]){0, 1}, 9);
    assert_shape(one_axis, 3, 5);
    assert_values(one_axis, 0, 0, 9, 9, 1, 4, 9, 9, 9, 2, 5, 9, 9, 9, 3, 6, 9);
    fl_tensor *s = fl_pad(fl_scalar(3, FL_F32), NULL, NULL, 0);
    assert_shape(s);
    assert_true(fl_item(s) == 3);
    assert_fails(fl_pad(m, (const int64_t[]){0, -1}, (const int64_t[]){0, 0}, 0), FL_ERR_VALUE,
                 "fl_pad: padding of axis 1 of f32[2, 3] is negative (-1 before, 0 after)");
    assert_fails(fl_pad(m, NULL, (const int64_t[]){0, 0}, 0), FL_ERR_NULL, "fl_pad: before or after is NULL");
}

static void tile_matches_numpy(void **state)
{
    fl_tensor *m = iota(FL_SHAPE(2, 3));
    assert_close(fl_tile(m, 3, (const int64_t[]){2, 1, 3}), F("tile_longer_reps"), 0, 0);
    fl_tensor *c = fl_cast(iota(FL_SHAPE(2, 3, 4)), FL_I32);
    assert_close(fl_tile(c, 1, (const int64_t[]){2}), F("tile_shorter_reps"), 0, 0);
    assert_close(fl_tile(c, 3, (const int64_t[]){1, 2, 1}), F("tile_middle"), 0, 0);
    /* A transposed input; zero repeats; no repeats at all. */
    assert_values(fl_tile(fl_transpose(T_F32(FL_SHAPE(1, 2), 1, 2), 0, 1), 2, (const int64_t[]){2, 2}), 0, 0, 1, 1, 2, 2,
                  1, 1, 2, 2);
    assert_shape(fl_tile(m, 2, (const int64_t[]){0, 2}), 0, 6);
    assert_close(fl_tile(m, 0, NULL), m, 0, 0);
    assert_fails(fl_tile(m, 2, (const int64_t[]){1, -2}), FL_ERR_VALUE, "fl_tile: repeat 1 is negative (-2)");
    assert_fails(fl_tile(m, 9, (const int64_t[9]){1}), FL_ERR_VALUE, "fl_tile: invalid list of 9 repeats");
}

static void missing_primitives_are_reported(void **state)
{
    const fl_backend *backend = fl_default_backend();
    fl_backend derived = support_derive(backend->name);
    derived.concat = NULL;
    fl_backend original = support_override(&derived);
    fl_tensor *a = fl_zeros(FL_F32, FL_SHAPE(2));
    char expected[128];
    snprintf(expected, sizeof expected, "fl_concat: backend '%s' does not implement the primitive 'concat'",
             backend->name);
    assert_fails(fl_concat((fl_tensor *[]){a, a}, 2, 0), FL_ERR_UNSUPPORTED, expected);
    support_override(&original);
}

/* Element counts, strides and byte sizes are checked for overflow wherever a shape is
 * formed: each of these wrapped to a small buffer, or to a negative size. */
static void sizes_that_overflow_are_refused(void **state)
{
    const int64_t big = (int64_t)1 << 32;
    assert_fails(fl_zeros(FL_F64, FL_SHAPE((int64_t)1 << 61)), FL_ERR_SHAPE,
                 "fl_zeros: a f64 tensor of shape [2305843009213693952] is too large");
    assert_fails(fl_zeros(FL_F32, FL_SHAPE(big, big)), FL_ERR_SHAPE, "is too large");
    assert_fails(fl_zeros(FL_F32, FL_SHAPE(0, (int64_t)1 << 62, (int64_t)1 << 62)), FL_ERR_SHAPE, "is too large");
    assert_fails(fl_from_data(NULL, FL_U8, FL_SHAPE(0, big, big)), FL_ERR_SHAPE, "fl_from_data: a u8 tensor");
    assert_shape(fl_zeros(FL_F32, FL_SHAPE(0, big)), 0, big); /* empty, and its strides fit */

    fl_tensor *empty = fl_zeros(FL_F32, FL_SHAPE(0));
    assert_fails(fl_reshape(empty, FL_SHAPE(big, big)), FL_ERR_SHAPE, "fl_reshape: cannot reshape f32[0] to");
    assert_fails(fl_reshape(empty, FL_SHAPE(0, big, big)), FL_ERR_SHAPE, "is too large");
    assert_fails(fl_reshape(empty, FL_SHAPE(0, -1)), FL_ERR_SHAPE, "cannot reshape");

    fl_tensor *one = fl_scalar(1, FL_F32);
    assert_fails(fl_expand(one, FL_SHAPE((int64_t)1 << 31, (int64_t)1 << 31)), FL_ERR_SHAPE, "is too large");
    assert_fails(fl_broadcast_to(one, FL_SHAPE(big, big)), FL_ERR_SHAPE, "is too large");
    assert_fails(fl_add(fl_expand(one, FL_SHAPE(big, 1)), fl_expand(one, FL_SHAPE(1, big))), FL_ERR_SHAPE,
                 "is too large");

    fl_tensor *row = fl_zeros(FL_F32, FL_SHAPE(2));
    assert_fails(fl_pad(row, (const int64_t[]){INT64_MAX}, (const int64_t[]){1}, 0), FL_ERR_SHAPE,
                 "fl_pad: padding axis 0 of f32[2] by 9223372036854775807 and 1 gives too many elements");
    assert_fails(fl_pad(row, (const int64_t[]){(int64_t)1 << 62}, (const int64_t[]){0}, 0), FL_ERR_SHAPE,
                 "fl_pad: a f32 tensor of shape [4611686018427387906] is too large");
    assert_fails(fl_tile(row, 1, (const int64_t[]){(int64_t)1 << 62}), FL_ERR_SHAPE,
                 "fl_tile: repeating axis 0 of size 2 4611686018427387904 times gives too many elements");
    assert_fails(fl_tile(row, 2, (const int64_t[]){big, big}), FL_ERR_SHAPE, "fl_tile: a f32 tensor");

    /* Broadcast views of 2^62 bytes exist; three of them joined do not. */
    fl_tensor *wide = fl_expand(fl_scalar(1, FL_BOOL), FL_SHAPE((int64_t)1 << 62));
    assert_non_null(wide);
    assert_fails(fl_concat((fl_tensor *[]){wide, wide, wide}, 3, 0), FL_ERR_SHAPE,
                 "fl_concat: joining 3 tensors along axis 0 gives too many elements");

    fl_tensor *x = fl_ones(FL_F32, FL_SHAPE(1, 1, 4, 4)), *w = fl_ones(FL_F32, FL_SHAPE(1, 1, 1, 1));
    fl_conv_params padded = {.padding = {1 << 30, 1 << 30}};
    assert_fails(fl_conv2d(x, w, &padded), FL_ERR_SHAPE, "fl_conv2d: a f32 tensor of shape [1, 1, 2147483652, 2147483652]");
    assert_fails(fl_conv2d_backward_input(fl_ones(FL_F32, FL_SHAPE(1, 1, 4, 4)), w, (const int64_t[]){big, 1, big, 4},
                                          NULL),
                 FL_ERR_SHAPE, "is too large");

    /* Steps of INT64_MAX and INT64_MIN take one element. */
    fl_tensor *m = T_F32(FL_SHAPE(3, 2), 1, 2, 3, 4, 5, 6);
    fl_tensor *first = fl_index(m, FL_INDEX(FL_RANGE_STEP(0, FL_END, INT64_MAX)));
    assert_shape(first, 1, 2);
    assert_values(first, 0, 0, 1, 2);
    fl_tensor *last = fl_index(m, FL_INDEX(FL_RANGE_STEP(2, FL_END, INT64_MIN)));
    assert_shape(last, 1, 2);
    assert_values(last, 0, 0, 5, 6);
    assert_shape(fl_index(m, FL_INDEX(FL_RANGE_STEP(INT64_MIN, INT64_MAX, INT64_MAX - 1))), 1, 2);
    assert_no_error();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        scoped_test(reshape_views_when_strides_allow),
        scoped_test(flatten_merges_a_run_of_axes),
        scoped_test(reshape_errors),
        scoped_test(permute_and_transpose_are_views),
        scoped_test(permute_errors),
        scoped_test(expand_and_broadcast_to),
        scoped_test(expand_errors),
        scoped_test(squeeze_and_unsqueeze_are_views),
        scoped_test(squeeze_errors),
        scoped_test(concat_promotes_and_joins_views),
        scoped_test(concat_errors),
        scoped_test(stack_adds_an_axis),
        scoped_test(split_gives_views),
        scoped_test(split_errors),
        scoped_test(pad_surrounds_with_a_constant),
        scoped_test(tile_matches_numpy),
        scoped_test(sizes_that_overflow_are_refused),
        scoped_test(missing_primitives_are_reported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
