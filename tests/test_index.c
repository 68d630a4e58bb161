/* Indexing: basic indexing and its assignment, where, gather, scatter_add,
 * index_select and one_hot, against NumPy/PyTorch (tests/fixtures/gen_index.py) and
 * hand-computed values; views, non-contiguous inputs, zero-size axes, every error. */
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

/* ---- fl_index ---- */

static void index_matches_numpy(void **state)
{
    fl_tensor *x = F("x");
    assert_close(fl_index(x, FL_INDEX(FL_RANGE(1, 3), FL_RANGE_STEP(0, FL_END, 2), FL_AT(-1))), F("index_ranges"), 0, 0);
    assert_close(fl_index(x, FL_INDEX(FL_RANGE_STEP(FL_END, FL_END, -1), FL_NEWAXIS, FL_AT(2), FL_RANGE_STEP(1, -1, 2))),
                 F("index_reversed"), 0, 0);
    assert_close(fl_index(x, FL_INDEX(FL_RANGE(-10, 10), FL_RANGE_STEP(4, 1, -1), FL_RANGE_STEP(FL_END, FL_END, -3))),
                 F("index_clamped"), 0, 0);
    assert_close(fl_index(x, FL_INDEX(FL_SPAN, FL_RANGE(7, FL_END))), F("index_empty"), 0, 0);
    assert_close(fl_index(x, FL_INDEX(FL_AT(2), FL_NEWAXIS, FL_SPAN, FL_AT(-2))), F("index_at_newaxis"), 0, 0);
    /* x[::-1] written with -1 as the start, as in x[-1::-1]. */
    assert_close(fl_index(x, FL_INDEX(FL_RANGE_STEP(-1, FL_END, -1))),
                 fl_index(x, FL_INDEX(FL_RANGE_STEP(FL_END, FL_END, -1))), 0, 0);
    assert_no_error();
}

static void index_edge_cases(void **state)
{
    fl_tensor *v = T_I32(FL_SHAPE(5), 0, 1, 2, 3, 4);
    /* Missing trailing entries are spans; no entries at all is the whole tensor. */
    assert_ptr_equal(fl_index(v, NULL, 0), v);
    assert_values(fl_index(v, FL_INDEX(FL_RANGE_STEP(3, -7, -1))), 0, 0, 3, 2, 1, 0);
    assert_values(fl_index(v, FL_INDEX(FL_RANGE_STEP(-2, 0, -2))), 0, 0, 3, 1);
    assert_values(fl_index(v, FL_INDEX(FL_RANGE_STEP(1, 100, 3))), 0, 0, 1, 4);
    assert_shape(fl_index(v, FL_INDEX(FL_RANGE(4, 2))), 0);
    assert_shape(fl_index(v, FL_INDEX(FL_RANGE_STEP(2, 4, -1))), 0);
    fl_tensor *at = fl_index(v, FL_INDEX(FL_AT(-5)));
    assert_shape(at);
    assert_true(fl_item(at) == 0);
    /* A 0-d tensor takes only NEWAXIS entries. */
    fl_tensor *s = fl_scalar(3, FL_F64);
    assert_shape(fl_index(s, FL_INDEX(FL_NEWAXIS, FL_NEWAXIS)), 1, 1);
    /* Zero-size axes slice like any other. */
    fl_tensor *empty = fl_zeros(FL_F32, FL_SHAPE(0, 3));
    assert_shape(fl_index(empty, FL_INDEX(FL_SPAN, FL_RANGE(1, 3))), 0, 2);
    assert_shape(fl_index(empty, FL_INDEX(FL_RANGE_STEP(FL_END, FL_END, -1), FL_AT(1))), 0);
    assert_no_error();
}

static void index_is_a_view_and_composes(void **state)
{
    fl_tensor *x = F("x");
    fl_tensor *view = fl_index(x, FL_INDEX(FL_RANGE_STEP(3, 0, -2), FL_AT(1), FL_NEWAXIS, FL_RANGE(1, 4)));
    assert_shape(view, 2, 1, 3);
    assert_true(shares_storage(view, x));
    assert_values(view, 0, 0, 97, 98, 99, 37, 38, 39);
    /* Further ops see the view's values: arithmetic, a transpose, indexing again. */
    assert_values(fl_add_scalar(view, 1), 0, 0, 98, 99, 100, 38, 39, 40);
    fl_tensor *t = fl_transpose(fl_reshape(view, FL_SHAPE(2, 3)), 0, 1);
    assert_values(t, 0, 0, 97, 37, 98, 38, 99, 39);
    fl_tensor *again = fl_index(t, FL_INDEX(FL_RANGE_STEP(FL_END, FL_END, -1), FL_AT(0)));
    assert_true(shares_storage(again, x));
    assert_values(again, 0, 0, 99, 98, 97);
    assert_values(fl_copy(again), 0, 0, 99, 98, 97);
    /* Indexing an expanded tensor. */
    fl_tensor *e = fl_expand(T_F32(FL_SHAPE(3, 1), 1, 2, 3), FL_SHAPE(3, 4));
    assert_values(fl_index(e, FL_INDEX(FL_RANGE_STEP(FL_END, FL_END, -2), FL_RANGE(1, 3))), 0, 0, 3, 3, 1, 1);
    assert_no_error();
}

static void index_errors(void **state)
{
    fl_tensor *x = fl_zeros(FL_F32, FL_SHAPE(2, 3));
    assert_fails(fl_index(x, FL_INDEX(FL_SPAN, FL_AT(3))), FL_ERR_INDEX,
                 "fl_index: index 3 is out of range for axis 1 of size 3 (f32[2, 3])");
    assert_fails(fl_index(x, FL_INDEX(FL_AT(-3))), FL_ERR_INDEX, "index -3 is out of range for axis 0 of size 2");
    assert_fails(fl_index(x, FL_INDEX(FL_AT(0), FL_AT(0), FL_AT(0))), FL_ERR_INDEX,
                 "too many indices: 3 for the 2 axes of f32[2, 3]");
    assert_fails(fl_index(x, FL_INDEX(FL_SPAN, FL_RANGE_STEP(0, 2, 0))), FL_ERR_VALUE,
                 "fl_index: the step of the range on axis 1 is zero");
    assert_fails(fl_index(x, FL_INDEX(((fl_index_item){(fl_index_kind)9, 0, 0, 1}))), FL_ERR_VALUE, "unknown kind");
    assert_fails(fl_index(x, NULL, 2), FL_ERR_VALUE, "invalid index of 2 entries");
    assert_fails(fl_index(x, FL_INDEX(FL_NEWAXIS, FL_NEWAXIS, FL_NEWAXIS, FL_NEWAXIS, FL_NEWAXIS, FL_NEWAXIS, FL_NEWAXIS)),
                 FL_ERR_SHAPE, "more than 8 dimensions");
    assert_fails(fl_index(NULL, FL_INDEX(FL_SPAN)), FL_ERR_NULL, "fl_index: argument 1 is NULL");
}

/* ---- fl_index_assign ---- */

static void index_assign_matches_numpy(void **state)
{
    fl_tensor *x = F("x");
    fl_tensor *value = T_F32(FL_SHAPE(3), 10, 20, 30);
    assert_close(fl_index_assign(x, FL_INDEX(FL_RANGE(1, 3), FL_RANGE_STEP(0, FL_END, 2), FL_AT(-1)), value),
                 F("assign_broadcast"), 0, 0);
    /* A scalar of another dtype is cast to x's. */
    fl_tensor *half = fl_index_assign(x, FL_INDEX(FL_RANGE_STEP(FL_END, FL_END, -1), FL_AT(2)), fl_scalar(0.5, FL_F64));
    assert_dtype(half, FL_F32);
    assert_close(half, F("assign_scalar"), 0, 0);
    /* A non-contiguous value (a transposed view of a transposed copy) into a NEWAXIS region. */
    fl_tensor *rows = fl_reshape(fl_add_scalar(fl_arange(0, 12, 1, FL_F32), 100), FL_SHAPE(2, 6));
    fl_tensor *strided = fl_transpose(fl_copy(fl_transpose(rows, 0, 1)), 0, 1);
    assert_false(on_opencl(strided) ? ocl_impl(strided)->contiguous : cpu_contiguous(cpu_tensor_of(strided)));
    assert_close(fl_index_assign(x, FL_INDEX(FL_AT(0), FL_RANGE_STEP(3, 0, -2), FL_NEWAXIS),
                                 fl_reshape(strided, FL_SHAPE(2, 1, 6))),
                 F("assign_newaxis"), 0, 0);
    /* x is unchanged: the assignment is functional. */
    assert_close(x, F("x"), 0, 0);
    assert_no_error();
}

static void index_assign_edge_cases(void **state)
{
    /* Into a transposed (non-contiguous) tensor; the result is dense row-major. */
    fl_tensor *t = fl_transpose(T_I64(FL_SHAPE(2, 3), 0, 1, 2, 3, 4, 5), 0, 1); /* [[0,3],[1,4],[2,5]] */
    assert_values(fl_index_assign(t, FL_INDEX(FL_SPAN, FL_AT(1)), T_I64(FL_SHAPE(3), 7, 8, 9)), 0, 0, 0, 7, 1, 8, 2, 9);
    /* Leading size-1 axes of the value beyond the region are dropped, as NumPy does. */
    assert_values(fl_index_assign(t, FL_INDEX(FL_AT(0)), fl_full(-1, FL_I64, FL_SHAPE(1, 1, 2))), 0, 0, -1, -1, 1, 4,
                  2, 5);
    /* An empty region changes nothing; f16 copies as it is. */
    fl_tensor *h = fl_cast(T_F32(FL_SHAPE(4), 1, 2, 3, 4), FL_F16);
    fl_tensor *same = fl_index_assign(h, FL_INDEX(FL_RANGE(2, 2)), fl_scalar(9, FL_F32));
    assert_dtype(same, FL_F16);
    assert_values(same, 0, 0, 1, 2, 3, 4);
    assert_values(fl_index_assign(h, FL_INDEX(FL_RANGE_STEP(FL_END, FL_END, -2)), T_F32(FL_SHAPE(2), 8, 6)), 0, 0, 1,
                  6, 3, 8);
    fl_tensor *b = fl_index_assign(fl_zeros(FL_BOOL, FL_SHAPE(3)), FL_INDEX(FL_AT(1)), fl_scalar(1, FL_BOOL));
    assert_values(b, 0, 0, 0, 1, 0);
    assert_shape(fl_index_assign(fl_zeros(FL_F32, FL_SHAPE(0, 2)), FL_INDEX(FL_SPAN, FL_AT(1)), fl_scalar(1, FL_F32)), 0,
                 2);
    assert_no_error();
}

static void index_assign_errors(void **state)
{
    fl_tensor *x = fl_zeros(FL_F32, FL_SHAPE(4, 3));
    assert_fails(fl_index_assign(x, FL_INDEX(FL_RANGE(0, 2)), fl_ones(FL_F32, FL_SHAPE(4))), FL_ERR_SHAPE,
                 "fl_index_assign: cannot assign f32[4] to the region [2, 3] of f32[4, 3]");
    assert_fails(fl_index_assign(x, FL_INDEX(FL_AT(0)), fl_ones(FL_F32, FL_SHAPE(2, 3))), FL_ERR_SHAPE,
                 "cannot assign f32[2, 3] to the region [3]");
    assert_fails(fl_index_assign(x, FL_INDEX(FL_AT(4)), fl_scalar(1, FL_F32)), FL_ERR_INDEX,
                 "fl_index_assign: index 4 is out of range for axis 0 of size 4");
    assert_fails(fl_index_assign(x, FL_INDEX(FL_SPAN, FL_SPAN, FL_SPAN), fl_scalar(1, FL_F32)), FL_ERR_INDEX,
                 "too many indices");
    assert_fails(fl_index_assign(x, FL_INDEX(FL_RANGE_STEP(0, 1, 0)), fl_scalar(1, FL_F32)), FL_ERR_VALUE,
                 "step of the range on axis 0 is zero");
    assert_fails(fl_index_assign(x, FL_INDEX(FL_SPAN), NULL), FL_ERR_NULL, "argument 2 is NULL");
}

/* ---- where ---- */

static void where_broadcasts_and_promotes(void **state)
{
    fl_tensor *out = fl_where(F("where_cond"), F("where_a"), F("where_b"));
    assert_dtype(out, FL_F32);
    assert_close(out, F("where_out"), 0, 0);
    /* A non-bool condition is cast (non-zero is true); operands may be views. */
    fl_tensor *cond = T_I32(FL_SHAPE(2, 2), 0, 5, -1, 0);
    fl_tensor *a = fl_transpose(T_I64(FL_SHAPE(2, 2), 1, 2, 3, 4), 0, 1); /* [[1,3],[2,4]] */
    fl_tensor *w = fl_where(cond, a, fl_scalar(0, FL_U8));
    assert_dtype(w, FL_I64);
    assert_values(w, 0, 0, 0, 3, 2, 0);
    /* f16 selects without conversion; zero-size shapes broadcast. */
    fl_tensor *h = fl_where(T_BOOL(FL_SHAPE(3), 1, 0, 1), fl_cast(T_F32(FL_SHAPE(3), 1.5, 2.5, 3.5), FL_F16),
                            fl_cast(fl_scalar(-1, FL_F32), FL_F16));
    assert_dtype(h, FL_F16);
    assert_values(h, 0, 0, 1.5, -1, 3.5);
    assert_shape(fl_where(fl_zeros(FL_BOOL, FL_SHAPE(0, 1)), fl_ones(FL_F32, FL_SHAPE(3)), fl_scalar(0, FL_F32)), 0, 3);
    /* A float condition is refused, as torch.where does: is 0.5 true? */
    assert_fails(fl_where(T_F32(FL_SHAPE(2), 0.5, 0), fl_ones(FL_F32, FL_SHAPE(2)), fl_scalar(0, FL_F32)), FL_ERR_DTYPE,
                 "fl_where: the condition f32[2] must be bool or an integer, not a float");
    /* A large case runs the parallel path. */
    fl_tensor *big = fl_reshape(fl_arange(0, 70000, 1, FL_F64), FL_SHAPE(350, 200));
    fl_tensor *even = fl_eq(fl_sub(big, fl_mul_scalar(fl_floor(fl_div_scalar(big, 2)), 2)), fl_scalar(0, FL_F64));
    fl_tensor *picked = fl_where(fl_transpose(even, 0, 1), fl_transpose(big, 0, 1), fl_scalar(-1, FL_F64));
    double *values = malloc(70000 * sizeof(double));
    assert_int_equal(fl_to_host(picked, values, 70000 * sizeof(double)), FL_OK);
    int wrong = 0;
    for (int i = 0; i < 200; i++)
        for (int j = 0; j < 350; j++) {
            double v = j * 200 + i;
            wrong += values[i * 350 + j] != (((int)v % 2 == 0) ? v : -1);
        }
    free(values);
    assert_int_equal(wrong, 0);
    assert_no_error();
}

static void where_errors(void **state)
{
    assert_fails(fl_where(fl_ones(FL_BOOL, FL_SHAPE(2)), fl_ones(FL_F32, FL_SHAPE(3)), fl_ones(FL_F32, FL_SHAPE(1))),
                 FL_ERR_SHAPE, "fl_where: shapes bool[2], f32[3] and f32[1] do not broadcast");
    assert_fails(fl_where(fl_ones(FL_BOOL, FL_SHAPE(2)), fl_ones(FL_F32, FL_SHAPE(2)), fl_ones(FL_F32, FL_SHAPE(3))),
                 FL_ERR_SHAPE, "do not broadcast");
    assert_fails(fl_where(fl_ones(FL_BOOL, FL_SHAPE(2)), NULL, fl_ones(FL_F32, FL_SHAPE(2))), FL_ERR_NULL,
                 "fl_where: argument 2 is NULL");
}

/* ---- gather and scatter_add ---- */

static void gather_matches_torch(void **state)
{
    fl_tensor *t = F("gather_t");
    assert_close(fl_gather(t, 1, F("gather_index1")), F("gather_out1"), 0, 0);
    assert_close(fl_gather(t, -1, F("gather_index2")), F("gather_out2"), 0, 0); /* an i32 index */
    /* A transposed input and a transposed index. */
    fl_tensor *m = T_F32(FL_SHAPE(2, 3), 1, 2, 3, 4, 5, 6);
    fl_tensor *mt = fl_transpose(m, 0, 1); /* [[1,4],[2,5],[3,6]] */
    fl_tensor *idx = fl_transpose(T_I64(FL_SHAPE(2, 3), 1, 0, 1, 0, 0, 1), 0, 1); /* [[1,0],[0,0],[1,1]] */
    assert_values(fl_gather(mt, 1, idx), 0, 0, 4, 1, 2, 2, 6, 6);
    assert_values(fl_gather(mt, 0, idx), 0, 0, 2, 4, 1, 4, 2, 5);
    /* Every dtype gathers by size; zero-size index gives an empty result. */
    fl_tensor *h = fl_gather(fl_cast(m, FL_F16), 1, T_I32(FL_SHAPE(2, 1), 2, 0));
    assert_dtype(h, FL_F16);
    assert_values(h, 0, 0, 3, 4);
    assert_values(fl_gather(fl_cast(m, FL_U8), 0, T_I64(FL_SHAPE(1, 3), 1, 0, 1)), 0, 0, 4, 2, 6);
    assert_shape(fl_gather(m, 1, fl_zeros(FL_I64, FL_SHAPE(2, 0))), 2, 0);
    assert_shape(fl_gather(fl_zeros(FL_F32, FL_SHAPE(2, 0)), 0, fl_zeros(FL_I64, FL_SHAPE(3, 0))), 3, 0);
    assert_no_error();
}

static void gather_errors(void **state)
{
    fl_tensor *t = fl_zeros(FL_F32, FL_SHAPE(3, 5));
    assert_fails(fl_gather(t, 1, T_I64(FL_SHAPE(1, 3), 0, 5, 1)), FL_ERR_INDEX,
                 "fl_gather: index 5 is out of range for axis 1 of size 5 (input f32[3, 5], index i64[1, 3])");
    assert_fails(fl_gather(t, 0, T_I32(FL_SHAPE(1, 1), -1)), FL_ERR_INDEX, "index -1 is out of range for axis 0 of size 3");
    assert_fails(fl_gather(t, 0, T_F32(FL_SHAPE(1, 1), 0)), FL_ERR_DTYPE,
                 "fl_gather: the index must be an integer tensor, got f32[1, 1]");
    assert_fails(fl_gather(t, 0, T_I64(FL_SHAPE(1), 0)), FL_ERR_SHAPE,
                 "index i64[1] must have as many axes as the input f32[3, 5]");
    assert_fails(fl_gather(t, 0, fl_zeros(FL_I64, FL_SHAPE(2, 6))), FL_ERR_SHAPE,
                 "index i64[2, 6] is larger than the input f32[3, 5] along axis 1");
    assert_fails(fl_gather(t, 2, fl_zeros(FL_I64, FL_SHAPE(1, 1))), FL_ERR_AXIS,
                 "fl_gather: axis 2 is out of range for a tensor of 2 dimensions");
    assert_fails(fl_gather(fl_zeros(FL_F32, FL_SHAPE(2, 0)), 1, fl_zeros(FL_I64, FL_SHAPE(1, 1))), FL_ERR_INDEX,
                 "index 0 is out of range for axis 1 of size 0");
}

/* An index_select's gradient scatters with its positions broadcast over whole slices
 * (an embedding's rows): the slices add as runs, repeated positions summing, and give
 * what the same index made dense gives, along the first axis and a middle one. */
static void scatter_add_of_broadcast_slices(void **state)
{
    fl_tensor *rows = T_I64(FL_SHAPE(5), 2, 0, 2, 3, 2);
    for (int axis = 0; axis < 2; axis++) {
        for (int dtype = 0; dtype < 2; dtype++) {
            fl_dtype dt = dtype ? FL_F64 : FL_F32;
            int64_t base_shape[3] = {4, 3, 2200}, src_shape[3] = {4, 3, 2200}; /* enough for threads */
            base_shape[axis] = 4;
            src_shape[axis] = 5;
            int64_t along[3] = {1, 1, 1};
            along[axis] = 5;
            fl_tensor *index = fl_expand(fl_reshape(rows, 3, along), 3, src_shape);
            fl_tensor *base = fl_randn(dt, 3, base_shape), *src = fl_randn(dt, 3, src_shape);
            fl_tensor *slices = fl_scatter_add(base, axis, index, src);
            fl_tensor *dense = fl_scatter_add(base, axis, fl_copy(index), src);
            assert_close(slices, dense, 1e-6, 1e-6);
        }
    }
    /* row 2 of a [4, 2] table receives three rows */
    fl_tensor *table = fl_scatter_add(fl_zeros(FL_F32, FL_SHAPE(4, 2)), 0,
                                      fl_expand(fl_reshape(rows, FL_SHAPE(5, 1)), FL_SHAPE(5, 2)),
                                      T_F32(FL_SHAPE(5, 2), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10));
    assert_values(table, 0, 0, 3, 4, 0, 0, 15, 18, 7, 8);
    assert_no_error();
}

static void scatter_add_matches_torch(void **state)
{
    assert_close(fl_scatter_add(F("scatter_base"), 0, F("scatter_index"), F("scatter_src")), F("scatter_out0"), 1e-6,
                 1e-6);
    fl_tensor *out1 = fl_scatter_add(F("scatter_base1"), -1, F("scatter_index1"), F("scatter_src1"));
    assert_dtype(out1, FL_F64);
    assert_close(out1, F("scatter_out1"), 1e-12, 1e-12);
    /* Repeated targets add up; src is cast to t's dtype; f16 adds in f32. */
    fl_tensor *idx = T_I64(FL_SHAPE(5), 0, 2, 0, 0, 1);
    assert_values(fl_scatter_add(fl_zeros(FL_I32, FL_SHAPE(3)), 0, idx, T_F64(FL_SHAPE(5), 1, 2, 3, 4, 5)), 0, 0, 8, 5,
                  2);
    fl_tensor *h = fl_scatter_add(fl_cast(fl_ones(FL_F32, FL_SHAPE(3)), FL_F16), 0, idx, T_F32(FL_SHAPE(5), .5, .25, .5, .5, 1));
    assert_dtype(h, FL_F16);
    assert_values(h, 0, 0, 2.5, 2, 1.25);
    fl_tensor *b = fl_scatter_add(fl_zeros(FL_BOOL, FL_SHAPE(3)), 0, idx, T_BOOL(FL_SHAPE(5), 0, 1, 1, 0, 0));
    assert_values(b, 0, 0, 1, 0, 1);
    /* A transposed base and an expanded source; an empty index copies the base. */
    fl_tensor *base = fl_transpose(T_F32(FL_SHAPE(2, 2), 1, 2, 3, 4), 0, 1); /* [[1,3],[2,4]] */
    fl_tensor *src = fl_expand(T_F32(FL_SHAPE(1, 2), 10, 20), FL_SHAPE(2, 2));
    assert_values(fl_scatter_add(base, 1, T_I64(FL_SHAPE(2, 2), 1, 1, 0, 1), src), 0, 0, 1, 33, 12, 24);
    assert_values(fl_scatter_add(base, 0, fl_zeros(FL_I64, FL_SHAPE(0, 2)), src), 0, 0, 1, 3, 2, 4);
    /* Large enough for the parallel path: two histograms of 50000 values into 10 bins. */
    enum { N = 50000 };
    int64_t *bins = malloc(2 * N * sizeof *bins);
    for (int i = 0; i < 2 * N; i++)
        bins[i] = i % 10;
    fl_tensor *counts = fl_scatter_add(fl_zeros(FL_F32, FL_SHAPE(2, 10)), 1, fl_from_data(bins, FL_I64, FL_SHAPE(2, N)),
                                       fl_ones(FL_F32, FL_SHAPE(2, N)));
    free(bins);
    assert_values(counts, 0, 0, [0 ... 19] = N / 10);
    assert_no_error();
}

static void scatter_add_errors(void **state)
{
    fl_tensor *t = fl_zeros(FL_F32, FL_SHAPE(3, 4));
    fl_tensor *src = fl_ones(FL_F32, FL_SHAPE(3, 4));
    assert_values(fl_scatter_add(t, 0, T_I64(FL_SHAPE(1, 2), 0, 2), src), 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0);
    assert_fails(fl_scatter_add(t, 0, T_I64(FL_SHAPE(1, 2), 0, 3), src), FL_ERR_INDEX,
                 "fl_scatter_add: index 3 is out of range for axis 0 of size 3 (input f32[3, 4], index i64[1, 2])");
    assert_fails(fl_scatter_add(t, 1, fl_zeros(FL_I64, FL_SHAPE(4, 1)), src), FL_ERR_SHAPE,
                 "index i64[4, 1] is larger than the input f32[3, 4] along axis 0");
    assert_fails(fl_scatter_add(fl_zeros(FL_F32, FL_SHAPE(3, 6)), 0, fl_zeros(FL_I64, FL_SHAPE(2, 5)), src), FL_ERR_SHAPE,
                 "index i64[2, 5] is larger than the source f32[3, 4] along axis 1");
    assert_fails(fl_scatter_add(t, 0, fl_zeros(FL_I64, FL_SHAPE(2, 2)), fl_ones(FL_F32, FL_SHAPE(4))), FL_ERR_SHAPE,
                 "must have as many axes as the source f32[4]");
    assert_fails(fl_scatter_add(t, 0, fl_zeros(FL_BOOL, FL_SHAPE(1, 1)), src), FL_ERR_DTYPE, "integer tensor");
    assert_fails(fl_scatter_add(t, -3, fl_zeros(FL_I64, FL_SHAPE(1, 1)), src), FL_ERR_AXIS, "axis -3");
}

/* ---- index_select and one_hot ---- */

static void index_select_matches_torch(void **state)
{
    assert_close(fl_index_select(F("select_table"), 0, F("select_rows")), F("select_out0"), 0, 0);
    assert_close(fl_index_select(F("select_cube"), -2, F("select_mid")), F("select_out1"), 0, 0);
    /* A transposed table takes the element-by-element path; a 0-d index keeps the axis. */
    fl_tensor *t = fl_transpose(T_I32(FL_SHAPE(2, 3), 1, 2, 3, 4, 5, 6), 0, 1); /* [[1,4],[2,5],[3,6]] */
    assert_values(fl_index_select(t, 0, T_I64(FL_SHAPE(2), 2, 0)), 0, 0, 3, 6, 1, 4);
    fl_tensor *reversed = fl_index(T_I64(FL_SHAPE(3), 0, 1, 2), FL_INDEX(FL_RANGE_STEP(FL_END, FL_END, -2)));
    assert_values(fl_index_select(t, 0, reversed), 0, 0, 3, 6, 1, 4); /* a strided index */
    assert_values(fl_index_select(t, 1, fl_scalar(1, FL_I64)), 0, 0, 4, 5, 6);
    assert_shape(fl_index_select(t, 1, fl_scalar(1, FL_I64)), 3, 1);
    assert_shape(fl_index_select(t, 0, fl_zeros(FL_I64, FL_SHAPE(0))), 0, 2);
    assert_shape(fl_index_select(fl_zeros(FL_F32, FL_SHAPE(4, 0)), 0, T_I64(FL_SHAPE(2), 3, 3)), 2, 0);
    fl_tensor *h = fl_index_select(fl_cast(t, FL_BF16), 1, T_U8(FL_SHAPE(3), 1, 1, 0));
    assert_dtype(h, FL_BF16);
    assert_values(h, 0, 0, 4, 4, 1, 5, 5, 2, 6, 6, 3);
    assert_no_error();
}

/* An embedding lookup big enough for the parallel path, checked row by row. */
static void index_select_embedding_rows(void **state)
{
    enum { VOCAB = 1000, DIM = 64, TOKENS = 700 };
    fl_tensor *table = fl_reshape(fl_arange(0, VOCAB * DIM, 1, FL_F32), FL_SHAPE(VOCAB, DIM));
    int64_t tokens[TOKENS];
    for (int i = 0; i < TOKENS; i++)
        tokens[i] = (i * 7919) % VOCAB;
    fl_tensor *rows = fl_index_select(table, 0, fl_from_data(tokens, FL_I64, FL_SHAPE(TOKENS)));
    assert_shape(rows, TOKENS, DIM);
    float *values = malloc(TOKENS * DIM * sizeof(float));
    assert_int_equal(fl_to_host(rows, values, TOKENS * DIM * sizeof(float)), FL_OK);
    int wrong = 0;
    for (int i = 0; i < TOKENS; i++)
        for (int j = 0; j < DIM; j++)
            wrong += values[i * DIM + j] != (float)(tokens[i] * DIM + j);
    free(values);
    assert_int_equal(wrong, 0);
}

static void index_select_errors(void **state)
{
    fl_tensor *t = fl_zeros(FL_F32, FL_SHAPE(4, 2));
    assert_fails(fl_index_select(t, 0, T_I64(FL_SHAPE(3), 0, 4, 1)), FL_ERR_INDEX,
                 "fl_index_select: index 4 is out of range for axis 0 of size 4 (input f32[4, 2], index i64[3])");
    assert_fails(fl_index_select(t, 1, T_I32(FL_SHAPE(1), -1)), FL_ERR_INDEX, "index -1 is out of range for axis 1");
    assert_fails(fl_index_select(t, 0, fl_zeros(FL_I64, FL_SHAPE(1, 1))), FL_ERR_SHAPE,
                 "fl_index_select: the index must be 1-D, got i64[1, 1]");
    assert_fails(fl_index_select(t, 0, fl_zeros(FL_F64, FL_SHAPE(1))), FL_ERR_DTYPE, "integer tensor, got f64[1]");
    assert_fails(fl_index_select(t, 2, fl_zeros(FL_I64, FL_SHAPE(1))), FL_ERR_AXIS, "axis 2 is out of range");
}

static void one_hot_matches_torch(void **state)
{
    fl_tensor *hot = fl_one_hot(F("one_hot_labels"), 4, FL_I64);
    assert_dtype(hot, FL_I64);
    assert_close(hot, F("one_hot_out"), 0, 0);
    fl_tensor *f = fl_one_hot(T_U8(FL_SHAPE(3), 2, 0, 1), 3, FL_F32);
    assert_dtype(f, FL_F32);
    assert_values(f, 0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 0);
    assert_shape(fl_one_hot(fl_zeros(FL_I64, FL_SHAPE(0)), 0, FL_F32), 0, 0);
    assert_no_error();
}

static void one_hot_errors(void **state)
{
    assert_fails(fl_one_hot(T_I64(FL_SHAPE(2), 1, -1), 3, FL_F32), FL_ERR_INDEX, "fl_one_hot: index -1 is negative (3 classes");
    assert_fails(fl_one_hot(T_I32(FL_SHAPE(2), 1, 3), 3, FL_F32), FL_ERR_INDEX, "index 3 is out of range (3 classes; index i32[2])");
    assert_fails(fl_one_hot(T_I32(FL_SHAPE(1), 0), -2, FL_F32), FL_ERR_VALUE, "num_classes must not be negative, got -2");
    assert_fails(fl_one_hot(T_F32(FL_SHAPE(1), 0), 2, FL_F32), FL_ERR_DTYPE, "integer tensor");
    assert_fails(fl_one_hot(T_I32(FL_SHAPE(1), 0), 2, (fl_dtype)99), FL_ERR_DTYPE, "invalid dtype 99");
}

static void missing_primitives_are_reported(void **state)
{
    const fl_backend *backend = fl_default_backend();
    fl_backend derived = support_derive(backend->name);
    derived.gather = NULL;
    fl_backend original = support_override(&derived);
    char expected[128];
    snprintf(expected, sizeof expected, "fl_gather: backend '%s' does not implement the primitive 'gather'",
             backend->name);
    assert_fails(fl_gather(fl_zeros(FL_F32, FL_SHAPE(2)), 0, fl_zeros(FL_I64, FL_SHAPE(1))), FL_ERR_UNSUPPORTED,
                 expected);
    support_override(&original);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        scoped_test(index_matches_numpy),
        scoped_test(index_edge_cases),
        scoped_test(index_is_a_view_and_composes),
        scoped_test(index_errors),
        scoped_test(index_assign_matches_numpy),
        scoped_test(index_assign_edge_cases),
        scoped_test(index_assign_errors),
        scoped_test(where_broadcasts_and_promotes),
        scoped_test(where_errors),
        scoped_test(gather_matches_torch),
        scoped_test(gather_errors),
        scoped_test(scatter_add_matches_torch),
        scoped_test(scatter_add_errors),
        scoped_test(index_select_matches_torch),
        scoped_test(index_select_embedding_rows),
        scoped_test(index_select_errors),
        scoped_test(scatter_add_of_broadcast_slices),
        scoped_test(one_hot_matches_torch),
        scoped_test(one_hot_errors),
        scoped_test(missing_primitives_are_reported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
