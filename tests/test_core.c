/* The tensor layer's core: creation, reading back, dtypes, errors, scopes, the
 * backend registry and the primitive count, random-number determinism. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/cpu.h"
#include "flare/extension.h"
#include "flare/profile.h"
#include "support.h"

static void from_data_round_trips_every_dtype(void **state)
{
    const double values[] = {0, 1, -2, 3.5, 100, -0.25};
    for (fl_dtype d = 0; d < FL_DTYPE_COUNT; d++) {
        fl_tensor *t = fl_cast(T_F64(FL_SHAPE(2, 3), 0, 1, -2, 3.5, 100, -0.25), d);
        assert_shape(t, 2, 3);
        assert_dtype(t, d);
        double expected[6];
        for (int i = 0; i < 6; i++) {
            double v = values[i];
            if (d == FL_BOOL) v = v != 0;
            else if (d == FL_U8) v = (double)(uint8_t)(int)v;
            else if (d == FL_I32 || d == FL_I64) v = trunc(v);
            expected[i] = v;
        }
        support_assert_values(t, expected, 6, 0, 0, __FILE__, __LINE__);
    }
}

/* fl_from_fill's callbacks: a ramp that says where it wrote, integers, and a read
 * that fails. */
static fl_status fill_ramp(void *data, size_t bytes, void *where)
{
    float *values = data;
    for (size_t i = 0; i < bytes / sizeof *values; i++)
        values[i] = (float)i;
    *(void **)where = data;
    return FL_OK;
}

static fl_status fill_ints(void *data, size_t bytes, void *context)
{
    (void)context;
    int32_t *values = data;
    for (size_t i = 0; i < bytes / sizeof *values; i++)
        values[i] = (int32_t)i - 2;
    return FL_OK;
}

static fl_status fill_fails(void *data, size_t bytes, void *calls)
{
    (void)data;
    (void)bytes;
    ++*(int *)calls;
    fl_error(FL_ERR_IO, "fill_fails", "the file ended");
    return FL_ERR_IO;
}

/* fl_from_fill hands its callback the tensor's own storage where the backend gives
 * the host access (the cpu backend), else a staging buffer, with the same values. */
static void from_fill_writes_the_values(void **state)
{
    void *where = NULL;
    fl_tensor *t = fl_from_fill(FL_F32, 2, (int64_t[]){3, 4}, fill_ramp, &where);
    assert_values(t, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11);
    const fl_backend *backend = fl_default_backend();
    if (strcmp(backend->name, "cpu") == 0) {
        void *storage = NULL;
        assert_int_equal(backend->host_data(backend, t, &storage), 0);
        assert_ptr_equal(storage, where); /* no copy */
    }
    int64_t low, high;
    fl_tensor *ints = fl_from_fill(FL_I32, 1, (int64_t[]){5}, fill_ints, NULL);
    assert_values(ints, 0, 0, -2, -1, 0, 1, 2);
    assert_true(fl_known_bounds(ints, &low, &high));
    assert_true(low == -2 && high == 2);
    int calls = 0;
    assert_null(fl_from_fill(FL_F64, 1, (int64_t[]){4}, fill_fails, &calls));
    assert_int_equal(calls, 1);
    assert_fails(NULL, FL_ERR_IO, "the file ended");
    assert_shape(fl_from_fill(FL_F32, 2, (int64_t[]){0, 3}, fill_fails, &calls), 0, 3);
    assert_int_equal(calls, 1); /* not called for an empty tensor */
    assert_fails(fl_from_fill(FL_F32, 1, (int64_t[]){2}, NULL, NULL), FL_ERR_NULL, "fill is NULL");
    assert_no_error();
}

static void creation_functions(void **state)
{
    assert_values(fl_zeros(FL_F32, FL_SHAPE(2, 2)), 0, 0, 0, 0, 0, 0);
    assert_values(fl_ones(FL_I32, FL_SHAPE(3)), 0, 0, 1, 1, 1);
    assert_values(fl_full(2.5, FL_F64, FL_SHAPE(1, 2)), 0, 0, 2.5, 2.5);
    fl_tensor *s = fl_scalar(7, FL_I64);
    assert_int_equal(fl_ndim(s), 0);
    assert_int_equal(fl_numel(s), 1);
    assert_true(fl_item(s) == 7);
    assert_values(fl_arange(0, 5, 1, FL_I64), 0, 0, 0, 1, 2, 3, 4);
    assert_values(fl_arange(1, 2, 0.25, FL_F32), 0, 1e-7, 1, 1.25, 1.5, 1.75);
    assert_values(fl_arange(5, 0, -2, FL_I32), 0, 0, 5, 3, 1);
    assert_int_equal(fl_numel(fl_arange(3, 3, 1, FL_F32)), 0);
    assert_values(fl_linspace(0, 1, 5, FL_F64), 0, 1e-15, 0, 0.25, 0.5, 0.75, 1);
    fl_tensor *empty = fl_zeros(FL_F32, FL_SHAPE(0, 3));
    assert_shape(empty, 0, 3);
    assert_int_equal(fl_to_host(empty, NULL, 0), FL_OK);
    assert_no_error();
}

static void half_precision_conversions(void **state)
{
    /* Exactly representable values survive; others round to nearest even. */
    float in[] = {0.f, -0.f, 1.f, -2.5f, 65504.f, 1e-7f, 6.1035156e-05f, 1.0009765625f, 70000.f, INFINITY, NAN};
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
        float back = fl_half_to_float(fl_float_to_half(in[i]));
        if (isnan(in[i]))
            assert_true(isnan(back));
        else if (i == 5)
            assert_true(fabsf(back - 1.1920929e-07f) < 1e-12f); /* nearest subnormal */
        else if (i == 8)
            assert_true(isinf(back)); /* overflow */
        else
            assert_true(back == in[i]);
    }
    assert_int_equal(fl_float_to_half(1.00048828125f), 0x3c00);  /* halfway, rounds to even */
    assert_int_equal(fl_float_to_half(1.00146484375f), 0x3c02);  /* halfway, rounds up to even */
    assert_true(fl_bf16_to_float(fl_float_to_bf16(3.140625f)) == 3.140625f);
    assert_int_equal(fl_float_to_bf16(1.00390625f), 0x3f80);     /* halfway, to even */
    fl_tensor *h = fl_cast(T_F32(FL_SHAPE(3), 1.5f, -3.25f, 1000.f), FL_F16);
    assert_dtype(h, FL_F16);
    assert_values(h, 0, 0, 1.5, -3.25, 1000);
    assert_values(fl_cast(h, FL_BF16), 0, 0, 1.5, -3.25, 1000);
}

static void promotion_follows_pytorch(void **state)
{
    assert_int_equal(fl_promote_types(FL_BOOL, FL_U8), FL_U8);
    assert_int_equal(fl_promote_types(FL_U8, FL_I32), FL_I32);
    assert_int_equal(fl_promote_types(FL_I64, FL_F32), FL_F32);
    assert_int_equal(fl_promote_types(FL_F16, FL_BF16), FL_F32);
    assert_int_equal(fl_promote_types(FL_F16, FL_F64), FL_F64);
    assert_int_equal(fl_promote_types(FL_I32, FL_I32), FL_I32);
}

static void errors_name_the_function_and_propagate_null(void **state)
{
    assert_fails(fl_zeros(FL_F32, FL_SHAPE(2, -1)), FL_ERR_SHAPE, "fl_zeros: negative size in shape [2, -1]");
    assert_fails(fl_zeros((fl_dtype)42, FL_SHAPE(2)), FL_ERR_DTYPE, "invalid dtype 42");
    assert_fails(fl_zeros(FL_F32, 9, (int64_t[9]){1}), FL_ERR_SHAPE, "9 dimensions");
    assert_fails(fl_arange(0, 1, 0, FL_F32), FL_ERR_VALUE, "fl_arange");
    assert_fails(fl_from_data(NULL, FL_F32, FL_SHAPE(2)), FL_ERR_NULL, "fl_from_data");
    assert_fails(fl_rand(FL_I32, FL_SHAPE(2)), FL_ERR_DTYPE, "float dtype");
    /* The first error is kept while NULL flows through later calls. */
    fl_tensor *bad = fl_zeros(FL_F32, FL_SHAPE(-3));
    assert_null(fl_cast(bad, FL_F64));
    assert_null(fl_copy(bad));
    assert_fails(bad, FL_ERR_SHAPE, "fl_zeros");
    /* A NULL passed directly is reported as such. */
    assert_fails(fl_cast(NULL, FL_F32), FL_ERR_NULL, "fl_cast: argument 1 is NULL");
    /* A NULL release function would be called when the scope ends. */
    int object;
    assert_fails(fl_scope_own(&object, NULL), FL_ERR_NULL, "fl_scope_own: the release function is NULL");
    fl_tensor *t = fl_zeros(FL_F32, FL_SHAPE(2, 3));
    char small[4];
    assert_fails_status(fl_to_host(t, small, sizeof small), FL_ERR_VALUE, "f32[2, 3] needs 24 bytes");
    assert_true(isnan(fl_item(t)));
    assert_fails(NULL, FL_ERR_SHAPE, "needs exactly one element");
}

static void scopes_release_temporaries(void **state)
{
    fl_memory_stats before, after;
    fl_memory_stats_get(&before);
    fl_scope outer = fl_scope_begin();
    fl_tensor *kept = NULL;
    for (int i = 0; i < 3; i++) {
        fl_scope inner = fl_scope_begin();
        fl_tensor *a = fl_ones(FL_F32, FL_SHAPE(64, 64));
        fl_tensor *b = fl_cast(a, FL_F64);
        if (i == 2)
            kept = fl_keep(b);
        fl_scope_end(inner);
    }
    fl_scope_end(outer);
    assert_non_null(kept);
    fl_scope check = fl_scope_begin();
    assert_values(fl_reshape(kept, FL_SHAPE(-1)), 0, 0, [0 ... 4095] = 1); /* still alive */
    fl_scope_end(check);
    fl_release(kept);
    fl_memory_stats_get(&after);
    assert_int_equal(after.in_use, before.in_use);
    /* An inner scope opened before the outer one made anything ends alone. */
    fl_memory_stats_get(&before);
    fl_scope first = fl_scope_begin();
    fl_scope second = fl_scope_begin();
    fl_scope_end(second);
    fl_tensor *survivor = fl_zeros(FL_F32, FL_SHAPE(1024)); /* owned by first */
    assert_non_null(survivor);
    fl_scope_end(first);
    fl_memory_stats_get(&after);
    assert_int_equal(after.in_use, before.in_use);
    /* Outside any scope the caller owns results and fl_keep does nothing. */
    fl_tensor *owned = fl_zeros(FL_F32, FL_SHAPE(2));
    assert_ptr_equal(fl_keep(owned), owned);
    fl_release(owned);
}

static void registry_and_default(void **state)
{
    const fl_backend *cpu = fl_backend_find("cpu");
    assert_non_null(cpu);
    assert_non_null(fl_backend_find("lazy"));
    /* cpu is the default unless FLARE_BACKEND names another (the lazy row of the suite). */
    const char *chosen = getenv("FLARE_BACKEND");
    assert_ptr_equal(fl_default_backend(), chosen && *chosen ? fl_backend_find(chosen) : cpu);
    assert_null(fl_backend_find("no-such-backend"));
    assert_int_equal(fl_set_default_backend("no-such-backend"), FL_ERR_VALUE);
    fl_clear_error();
}

/* The cpu kernels are the best set the machine runs, or the one FLARE_CPU_KERNELS
 * names; a build for this machine only has one set. */
static void the_cpu_kernels_suit_the_machine(void **state)
{
    const char *isa = cpu_kernels(), *wanted = getenv("FLARE_CPU_KERNELS");
    if (strcmp(isa, "native") == 0)
        return;
#if defined(__clang__)
    skip(); /* clang's __builtin_cpu_supports knows features, not the levels this checks against */
#else
    static const char *const levels[] = {"x86-64-v4", "x86-64-v3", "x86-64"};
    __builtin_cpu_init();
    int best = __builtin_cpu_supports("x86-64-v4") ? 0 : __builtin_cpu_supports("x86-64-v3") ? 1 : 2, chosen = best;
    for (int i = best; wanted && i < 3; i++)
        if (strcmp(levels[i], wanted) == 0)
            chosen = i; /* a level the machine runs; a higher one is not taken */
    assert_string_equal(isa, levels[chosen]);
#endif
}

static void unimplemented_primitive_is_a_clear_error(void **state)
{
    fl_backend derived = support_derive(fl_default_backend()->name);
    derived.full = NULL;
    fl_backend original = support_override(&derived);
    char expected[128];
    snprintf(expected, sizeof expected, "backend '%s' does not implement the primitive 'full'", derived.name);
    assert_fails(fl_zeros(FL_F32, FL_SHAPE(2)), FL_ERR_UNSUPPORTED, expected);
    support_override(&original);
}

/* Philox-4x32-10 written out once more, independently of the backend's two versions
 * (one block at a time, and batches of blocks for uniform f32). */
static void philox_reference(uint64_t counter, uint64_t key, uint32_t out[4])
{
    uint32_t c[4] = {(uint32_t)counter, (uint32_t)(counter >> 32), 0, 0}, k[2] = {(uint32_t)key, (uint32_t)(key >> 32)};
    for (int round = 0; round < 10; round++) {
        uint64_t lo = (uint64_t)0xD2511F53u * c[0], hi = (uint64_t)0xCD9E8D57u * c[2];
        uint32_t next[4] = {(uint32_t)(hi >> 32) ^ c[1] ^ k[0], (uint32_t)hi, (uint32_t)(lo >> 32) ^ c[3] ^ k[1],
                            (uint32_t)lo};
        memcpy(c, next, sizeof c);
        k[0] += 0x9E3779B9u;
        k[1] += 0xBB67AE85u;
    }
    memcpy(out, c, sizeof c);
}

/* Element i of a uniform f32 draw is the top 24 bits of lane i % 4 of the block at
 * counter offset + i / 4, whatever the size (whole batches and a ragged end). */
static void uniform_draws_are_philox_4x32_10(void **state)
{
    uint32_t known[4], expected_known[4] = {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8};
    philox_reference(0, 0, known); /* Random123's known answer for a zero counter and key */
    assert_memory_equal(known, expected_known, sizeof known);
    const uint64_t seed = 0x0123456789abcdefu, offset = (1ull << 32) - 7; /* counters cross 2^32 */
    for (int64_t n = 1; n <= 1000; n = n * 3 + 1) {
        const fl_backend *backend = fl_default_backend();
        fl_tensor *t = fl_tensor_alloc(backend, FL_F32, 1, &n);
        assert_int_equal(backend->random(backend, t, FL_RANDOM_UNIFORM, seed, offset), 0);
        float *got = malloc((size_t)n * sizeof *got);
        assert_int_equal(fl_to_host(t, got, (size_t)n * sizeof *got), FL_OK);
        for (int64_t i = 0; i < n; i++) {
            uint32_t block[4];
            philox_reference(offset + (uint64_t)(i / 4), seed, block);
            assert_true(got[i] == (float)(block[i % 4] >> 8) * 0x1p-24f);
        }
        free(got);
        fl_release(t);
    }
}

/* Another backend draws what the cpu backend draws for the same seed and offset, for
 * each dtype and kind: uniform values exactly, normals within a few ulps (a device's
 * log, cos and sin may round differently from libm's; one without doubles computes
 * f32 normals in float). */
static void random_draws_match_the_cpu_backend(void **state)
{
    const fl_backend *backend = fl_default_backend(), *cpu = fl_cpu_backend();
    if (strcmp(backend->name, "cpu") == 0)
        skip(); /* nothing to compare with */
    const uint64_t seed = 0xfedcba9876543210u, offset = (1ull << 32) - 3; /* counters cross 2^32 */
    const fl_dtype dtypes[] = {FL_F32, FL_F64};
    for (int k = 0; k < 2; k++)
        for (int kind = FL_RANDOM_UNIFORM; kind <= FL_RANDOM_NORMAL; kind++)
            for (int64_t n = 1; n <= 5000; n = n * 5 + 2) {
                fl_dtype dtype = dtypes[k];
                fl_tensor *got = fl_tensor_alloc(backend, dtype, 1, &n), *want = fl_tensor_alloc(cpu, dtype, 1, &n);
                assert_int_equal(backend->random(backend, got, kind, seed, offset), 0);
                assert_int_equal(cpu->random(cpu, want, kind, seed, offset), 0);
                double *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
                assert_int_equal(fl_to_host(fl_cast(got, FL_F64), a, (size_t)n * sizeof *a), FL_OK);
                assert_int_equal(fl_to_host(fl_cast(want, FL_F64), b, (size_t)n * sizeof *b), FL_OK);
                for (int64_t i = 0; i < n; i++) {
                    double tolerance = kind == FL_RANDOM_UNIFORM ? 0 : dtype == FL_F64 ? 8 * 0x1p-52 : 1e-5;
                    if (!(fabs(a[i] - b[i]) <= tolerance * fmax(1, fabs(b[i]))))
                        fail_msg("%s %s draw %lld of %lld: %.17g, the cpu backend's %.17g", fl_dtype_name(dtype),
                                 kind == FL_RANDOM_UNIFORM ? "uniform" : "normal", (long long)i, (long long)n, a[i],
                                 b[i]);
                }
                free(a);
                free(b);
                fl_release(got);
                fl_release(want);
            }
    assert_no_error();
}

/* fl_randint's values are in [low, high), and the tensor says so without being read
 * (fl_known_bounds), where the dtype holds both ends. */
static void randint_knows_its_bounds(void **state)
{
    fl_tensor *t = fl_randint(-3, 5, FL_I32, FL_SHAPE(1000));
    int64_t low, high;
    assert_true(fl_known_bounds(t, &low, &high));
    assert_int_equal(low, -3);
    assert_int_equal(high, 4);
    assert_true(fl_item(fl_min(t, FL_ALL_AXES, false)) >= -3 && fl_item(fl_max(t, FL_ALL_AXES, false)) <= 4);
    assert_false(fl_known_bounds(fl_randint(0, 2, FL_F32, FL_SHAPE(4)), &low, &high));
    assert_no_error();
}

static void random_numbers_do_not_depend_on_threads(void **state)
{
    enum { N = 100003 };
    float *a = malloc(N * sizeof(float)), *b = malloc(N * sizeof(float));
    int threads = fl_num_threads();
    fl_set_num_threads(1);
    fl_manual_seed(42);
    fl_to_host(fl_randn(FL_F32, FL_SHAPE(N)), a, N * sizeof(float));
    fl_set_num_threads(2);
    fl_manual_seed(42);
    fl_to_host(fl_randn(FL_F32, FL_SHAPE(N)), b, N * sizeof(float));
    fl_set_num_threads(threads);
    assert_memory_equal(a, b, N * sizeof(float));
    /* A million threads overflowed the OpenMP runtime's stack; the count is capped. */
    fl_set_num_threads(1000000);
    assert_fails(NULL, FL_ERR_VALUE, "fl_set_num_threads: the thread count must be 1 to 1024, got 1000000");
    fl_set_num_threads(FL_MAX_THREADS + 1);
    assert_fails(NULL, FL_ERR_VALUE, "got 1025");
    assert_int_equal(fl_num_threads(), threads);
    /* The moments of a large draw are those of N(0, 1). */
    double sum = 0, sq = 0;
    for (int i = 0; i < N; i++) {
        sum += a[i];
        sq += (double)a[i] * a[i];
    }
    assert_true(fabs(sum / N) < 0.02);
    assert_true(fabs(sq / N - 1) < 0.02);
    /* A second draw continues the stream rather than repeating it. */
    fl_manual_seed(42);
    fl_tensor *first = fl_rand(FL_F64, FL_SHAPE(8));
    fl_tensor *second = fl_rand(FL_F64, FL_SHAPE(8));
    double x[8], y[8];
    fl_to_host(first, x, sizeof x);
    fl_to_host(second, y, sizeof y);
    assert_memory_not_equal(x, y, sizeof x);
    for (int i = 0; i < 8; i++)
        assert_true(x[i] >= 0 && x[i] < 1);
    free(a);
    free(b);
}

static void the_generator_state_restores_the_stream(void **state)
{
    fl_manual_seed(9);
    fl_rand(FL_F32, FL_SHAPE(5)); /* advance it */
    uint64_t seed, counter;
    fl_random_state(&seed, &counter);
    assert_int_equal(seed, 9);
    double x[6], y[6];
    fl_to_host(fl_rand(FL_F64, FL_SHAPE(6)), x, sizeof x);
    fl_manual_seed(1234);
    fl_set_random_state(seed, counter);
    fl_to_host(fl_rand(FL_F64, FL_SHAPE(6)), y, sizeof y);
    assert_memory_equal(x, y, sizeof x);
}

/* A stream of one's own: the same values for the same key whatever was drawn before,
 * the global generator untouched, nesting restored. */
static void random_streams_are_keyed_and_leave_the_generator(void **state)
{
    fl_manual_seed(5);
    uint64_t key = fl_random_stream_key(), other = fl_random_stream_key();
    assert_true(key != other);
    uint64_t seed, counter, after;
    fl_random_state(&seed, &counter);
    double x[6], y[6], z[6], w[6];
    fl_random_stream outer = fl_random_stream_begin(key);
    fl_to_host(fl_rand(FL_F64, FL_SHAPE(6)), x, sizeof x);
    fl_random_stream inner = fl_random_stream_begin(other);
    fl_to_host(fl_rand(FL_F64, FL_SHAPE(6)), z, sizeof z);
    fl_random_stream_end(inner);
    fl_to_host(fl_rand(FL_F64, FL_SHAPE(6)), y, sizeof y); /* key's stream, further on */
    fl_random_stream_end(outer);
    fl_random_state(NULL, &after);
    assert_int_equal(after, counter);
    assert_memory_not_equal(x, y, sizeof x);
    assert_memory_not_equal(x, z, sizeof x);

    fl_rand(FL_F32, FL_SHAPE(100)); /* global draws do not move the stream */
    outer = fl_random_stream_begin(key);
    fl_to_host(fl_rand(FL_F64, FL_SHAPE(6)), w, sizeof w);
    fl_random_stream_end(outer);
    assert_memory_equal(x, w, sizeof x);

    fl_manual_seed(5); /* the same keys after the same seed */
    assert_true(fl_random_stream_key() == key);
}

static const fl_profile_entry *find_entry(const fl_profile_entry *e, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(e[i].name, name) == 0)
            return &e[i];
    return NULL;
}

/* The profile counts every primitive call by name, those whose operands are cast,
 * broadcast or sliced first included, times operations exclusively (an outer one is
 * charged without the inner), survives a failing call, and costs nothing once off. */
static void the_profile_counts_and_times_operations(void **state)
{
    fl_profile_enable(true);
    fl_profile_reset();
    fl_tensor *a = fl_ones(FL_F32, FL_SHAPE(64, 64));
    for (int i = 0; i < 3; i++)
        fl_eval(fl_add(a, a));
    assert_null(fl_add(a, fl_ones(FL_F32, FL_SHAPE(3))));  /* a shape error: no primitive runs */
    fl_clear_error();
    fl_eval(fl_matmul(a, a));
    /* Operands broadcast, or sliced, before the call: the call still counts under its
     * own name (the expand and the slice count as theirs). */
    fl_eval(fl_mul(a, fl_ones(FL_F32, FL_SHAPE(64, 1))));
    fl_eval(fl_scatter_add(fl_zeros(FL_F32, FL_SHAPE(4, 3)), 0, T_I64(FL_SHAPE(1, 3), 0, 2, 3),
                           fl_ones(FL_F32, FL_SHAPE(2, 3))));
    fl_profile_push("outer");
    fl_profile_push("inner");
    /* Long enough that a preemption between the pushes cannot give outer as much. */
    struct timespec pause = {0, 30000000};
    nanosleep(&pause, NULL);
    fl_profile_pop();
    fl_profile_pop();
    fl_profile_entry e[64];
    int n = fl_profile_entries(e, 64);
    assert_in_range(n, 4, 64);
    const fl_profile_entry *add = find_entry(e, n, "add"), *mm = find_entry(e, n, "matmul");
    const fl_profile_entry *outer = find_entry(e, n, "outer"), *inner = find_entry(e, n, "inner");
    assert_non_null(add);
    assert_int_equal(add->calls, 3);
    assert_non_null(mm);
    assert_int_equal(mm->calls, 1);
    const fl_profile_entry *mul = find_entry(e, n, "mul"), *scatter = find_entry(e, n, "scatter_add");
    assert_non_null(mul);
    assert_int_equal(mul->calls, 1);
    assert_non_null(scatter);
    assert_int_equal(scatter->calls, 1);
    assert_non_null(outer);
    assert_non_null(inner);
    assert_true(inner->seconds >= 0.03);
    assert_true(outer->seconds < inner->seconds); /* exclusive: the sleep is inner's */
    for (int i = 1; i < n; i++)
        assert_true(e[i - 1].seconds >= e[i].seconds);
    fl_profile_enable(false);
    fl_profile_reset();
    fl_eval(fl_add(a, a));
    assert_int_equal(fl_profile_entries(NULL, 0), 0);
    assert_no_error();
}

static void tril_and_triu_keep_their_triangle(void **state)
{
    fl_tensor *m = fl_arange(1, 13, 1, FL_F32);
    m = fl_reshape(m, FL_SHAPE(3, 4));
    assert_values(fl_tril(m, 0), 0, 0, 1, 0, 0, 0, 5, 6, 0, 0, 9, 10, 11, 0);
    assert_values(fl_tril(m, 1), 0, 0, 1, 2, 0, 0, 5, 6, 7, 0, 9, 10, 11, 12);
    assert_values(fl_tril(m, -1), 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0);
    assert_values(fl_triu(m, 0), 0, 0, 1, 2, 3, 4, 0, 6, 7, 8, 0, 0, 11, 12);
    assert_values(fl_triu(m, 2), 0, 0, 0, 0, 3, 4, 0, 0, 0, 8, 0, 0, 0, 0);
    assert_values(fl_triu(m, -1), 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 10, 11, 12);
    assert_values(fl_tril(m, -5), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    assert_values(fl_triu(m, -5), 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12);
    /* A batch of matrices, integers and bools keep their dtype. */
    fl_tensor *b = fl_tril(T_I32(FL_SHAPE(2, 2, 2), 1, 2, 3, 4, 5, 6, 7, 8), 0);
    assert_dtype(b, FL_I32);
    assert_shape(b, 2, 2, 2);
    assert_values(b, 0, 0, 1, 0, 3, 4, 5, 0, 7, 8);
    fl_tensor *causal = fl_tril(fl_ones(FL_BOOL, FL_SHAPE(3, 3)), 0);
    assert_dtype(causal, FL_BOOL);
    assert_values(causal, 0, 0, 1, 0, 0, 1, 1, 0, 1, 1, 1);
    assert_fails(fl_tril(fl_ones(FL_F32, FL_SHAPE(3)), 0), FL_ERR_SHAPE, "fl_tril: needs at least 2 dimensions");
    assert_fails(fl_triu(NULL, 0), FL_ERR_NULL, "fl_triu");
}

/* 5 standard deviations: a correct sampler fails one seed in millions, a wrong one
 * (an off-by-one category, unnormalized weights) fails by far more. */
static void assert_frequency(int64_t count, int64_t n, double p)
{
    double sigma = sqrt(p * (1 - p) / (double)n);
    double f = (double)count / (double)n;
    if (fabs(f - p) > 5 * sigma + 1e-12)
        fail_msg("frequency %g of %lld draws, expected %g (sigma %g)", f, (long long)n, p, sigma);
}

static void bernoulli_draws_ones_with_probability_p(void **state)
{
    enum { N = 20000 };
    fl_manual_seed(7);
    fl_tensor *p = fl_concat((fl_tensor *[]){T_F32(FL_SHAPE(2), 0, 1), fl_full(0.3, FL_F32, FL_SHAPE(N))}, 2, 0);
    fl_tensor *x = fl_bernoulli(p);
    assert_dtype(x, FL_F32);
    assert_shape(x, N + 2);
    float *v = malloc((N + 2) * sizeof *v);
    assert_int_equal(fl_to_host(x, v, (N + 2) * sizeof *v), FL_OK);
    assert_true(v[0] == 0 && v[1] == 1);
    int64_t ones = 0;
    for (int i = 2; i < N + 2; i++) {
        assert_true(v[i] == 0 || v[i] == 1);
        ones += v[i] == 1;
    }
    free(v);
    assert_frequency(ones, N, 0.3);
    fl_manual_seed(7);
    assert_true(support_same_bytes(fl_bernoulli(p), x));
    assert_dtype(fl_bernoulli(T_F64(FL_SHAPE(1), 0.5)), FL_F64);
    assert_fails(fl_bernoulli(T_F32(FL_SHAPE(2), 0.5, 1.5)), FL_ERR_VALUE, "fl_bernoulli: probabilities must lie in [0, 1]");
    assert_fails(fl_bernoulli(T_F32(FL_SHAPE(2), NAN, 0.5)), FL_ERR_VALUE, "fl_bernoulli");
    assert_fails(fl_bernoulli(T_I32(FL_SHAPE(1), 1)), FL_ERR_DTYPE, "fl_bernoulli: needs float probabilities");
}

static fl_tensor *sorted_values(const fl_tensor *t)
{
    fl_tensor *v = NULL;
    assert_int_equal(fl_sort(t, 0, false, &v, NULL), FL_OK);
    return v;
}

static void randperm_is_a_permutation_of_the_seed(void **state)
{
    enum { N = 1000 };
    fl_manual_seed(3);
    fl_tensor *p = fl_randperm(N, FL_I64);
    assert_dtype(p, FL_I64);
    assert_shape(p, N);
    int64_t v[N];
    assert_int_equal(fl_to_host(p, v, sizeof v), FL_OK);
    bool seen[N] = {0};
    int64_t in_place = 0;
    for (int i = 0; i < N; i++) {
        assert_in_range(v[i], 0, N - 1);
        assert_false(seen[v[i]]);
        seen[v[i]] = true;
        in_place += v[i] == i;
    }
    assert_true(in_place < 10); /* a shuffle, not the identity: about one fixed point */
    fl_manual_seed(3);
    assert_true(support_same_bytes(fl_randperm(N, FL_I64), p));
    assert_false(support_same_bytes(fl_randperm(N, FL_I64), p)); /* the generator moved on */
    fl_tensor *small = fl_randperm(5, FL_I32);
    assert_dtype(small, FL_I32);
    assert_values(sorted_values(small), 0, 0, 0, 1, 2, 3, 4);
    assert_shape(fl_randperm(0, FL_I64), 0);
    assert_fails(fl_randperm(-1, FL_I64), FL_ERR_VALUE, "fl_randperm: n must be non-negative");
    assert_fails(fl_randperm(300, FL_U8), FL_ERR_VALUE, "fl_randperm: u8 cannot hold");
    assert_fails(fl_randperm(3, FL_BOOL), FL_ERR_DTYPE, "fl_randperm");
}

static void multinomial_with_replacement_follows_the_weights(void **state)
{
    enum { N = 20000 };
    fl_manual_seed(11);
    /* Unnormalized weights, a zero among them; two rows with different weights. */
    fl_tensor *w = T_F32(FL_SHAPE(2, 4), 1, 0, 3, 6, 5, 5, 0, 0);
    fl_tensor *draws = fl_multinomial(w, N, true);
    assert_dtype(draws, FL_I64);
    assert_shape(draws, 2, N);
    int64_t *v = malloc(2 * N * sizeof *v);
    assert_int_equal(fl_to_host(draws, v, 2 * N * sizeof *v), FL_OK);
    int64_t counts[2][4] = {{0}};
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < N; i++) {
            assert_in_range(v[r * N + i], 0, 3);
            counts[r][v[r * N + i]]++;
        }
    free(v);
    assert_int_equal(counts[0][1], 0);
    assert_frequency(counts[0][0], N, 0.1);
    assert_frequency(counts[0][2], N, 0.3);
    assert_frequency(counts[0][3], N, 0.6);
    assert_int_equal(counts[1][2] + counts[1][3], 0);
    assert_frequency(counts[1][0], N, 0.5);
    fl_manual_seed(11);
    assert_true(support_same_bytes(fl_multinomial(w, N, true), draws));
    /* One row of weights gives a vector, as torch.multinomial. */
    fl_tensor *one = fl_multinomial(T_F64(FL_SHAPE(3), 0, 0, 2), 4, true);
    assert_shape(one, 4);
    assert_values(one, 0, 0, 2, 2, 2, 2);
}

static void multinomial_without_replacement_draws_distinct_categories(void **state)
{
    enum { N = 20000 };
    fl_manual_seed(5);
    /* Every category of a row, in some order: a permutation of the positive ones. */
    fl_tensor *w = T_F32(FL_SHAPE(3, 5), 1, 2, 3, 4, 5, 0, 1, 1, 0, 1, 9, 9, 9, 9, 9);
    int64_t all[15];
    assert_int_equal(fl_to_host(fl_multinomial(fl_index(w, FL_INDEX(FL_RANGE(0, 1))), 5, false), all, 5 * sizeof *all), FL_OK);
    bool seen[5] = {0};
    for (int i = 0; i < 5; i++) {
        assert_in_range(all[i], 0, 4);
        assert_false(seen[all[i]]);
        seen[all[i]] = true;
    }
    fl_tensor *three = fl_multinomial(w, 3, false);
    assert_shape(three, 3, 3);
    assert_int_equal(fl_to_host(three, all, 9 * sizeof *all), FL_OK);
    for (int r = 0; r < 3; r++) {
        assert_true(all[r * 3] != all[r * 3 + 1] && all[r * 3] != all[r * 3 + 2] && all[r * 3 + 1] != all[r * 3 + 2]);
        if (r == 1) /* the three positive weights of row 1 */
            for (int i = 0; i < 3; i++)
                assert_true(all[3 + i] == 1 || all[3 + i] == 2 || all[3 + i] == 4);
    }
    /* The first draw follows the weights; the second, given the first is i, the rest:
     * P(second = j) = sum over i != j of p_i p_j / (1 - p_i). */
    const double p[3] = {0.2, 0.3, 0.5};
    fl_tensor *rows = fl_expand(T_F64(FL_SHAPE(1, 3), 2, 3, 5), FL_SHAPE(N, 3));
    fl_tensor *pairs = fl_multinomial(rows, 2, false);
    int64_t *v = malloc(2 * N * sizeof *v);
    assert_int_equal(fl_to_host(pairs, v, 2 * N * sizeof *v), FL_OK);
    int64_t first[3] = {0}, second[3] = {0};
    for (int i = 0; i < N; i++) {
        assert_true(v[2 * i] != v[2 * i + 1]);
        first[v[2 * i]]++;
        second[v[2 * i + 1]]++;
    }
    free(v);
    for (int j = 0; j < 3; j++) {
        double q = 0;
        for (int i = 0; i < 3; i++)
            if (i != j)
                q += p[i] * p[j] / (1 - p[i]);
        assert_frequency(first[j], N, p[j]);
        assert_frequency(second[j], N, q);
    }
    fl_manual_seed(5);
    fl_multinomial(fl_index(w, FL_INDEX(FL_RANGE(0, 1))), 5, false);
    assert_true(support_same_bytes(fl_multinomial(w, 3, false), three));
}

static void multinomial_refuses_bad_weights(void **state)
{
    assert_fails(fl_multinomial(T_F32(FL_SHAPE(3), 1, -1, 2), 1, true), FL_ERR_VALUE,
                 "fl_multinomial: weights must be finite and non-negative: row 0, category 1 is -1");
    assert_fails(fl_multinomial(T_F32(FL_SHAPE(2, 2), 1, 1, NAN, 1), 1, true), FL_ERR_VALUE,
                 "row 1, category 0 is nan");
    assert_fails(fl_multinomial(T_F32(FL_SHAPE(3), 1, INFINITY, 2), 1, true), FL_ERR_VALUE, "category 1 is inf");
    assert_fails(fl_multinomial(T_F32(FL_SHAPE(2, 2), 1, 1, 0, 0), 1, true), FL_ERR_VALUE,
                 "fl_multinomial: row 1 of f32[2, 2] has no positive weight");
    assert_fails(fl_multinomial(T_F32(FL_SHAPE(3), 1, 1, 1), 4, false), FL_ERR_VALUE,
                 "fl_multinomial: cannot draw 4 samples without replacement from 3 categories");
    assert_fails(fl_multinomial(T_F32(FL_SHAPE(3), 1, 0, 1), 3, false), FL_ERR_VALUE,
                 "row 0 has 2 positive weights, too few for 3 samples without replacement");
    assert_fails(fl_multinomial(T_I64(FL_SHAPE(2), 1, 1), 1, true), FL_ERR_DTYPE, "fl_multinomial: needs float weights");
    assert_fails(fl_multinomial(fl_ones(FL_F32, FL_SHAPE(1, 1, 2)), 1, true), FL_ERR_SHAPE, "needs weights [C] or [N, C]");
    assert_fails(fl_multinomial(T_F32(FL_SHAPE(2), 1, 1), 0, true), FL_ERR_VALUE, "num_samples must be positive");
    assert_fails(fl_multinomial(NULL, 1, true), FL_ERR_NULL, "fl_multinomial");
    assert_true(fl_multinomial(T_F32(FL_SHAPE(2), 1, 1), 5, true) != NULL); /* more than C with replacement */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        scoped_test(from_data_round_trips_every_dtype),
        scoped_test(creation_functions),
        scoped_test(from_fill_writes_the_values),
        scoped_test(half_precision_conversions),
        scoped_test(promotion_follows_pytorch),
        scoped_test(errors_name_the_function_and_propagate_null),
        scoped_test(scopes_release_temporaries),
        scoped_test(registry_and_default),
        scoped_test(the_cpu_kernels_suit_the_machine),
        scoped_test(unimplemented_primitive_is_a_clear_error),
        scoped_test(uniform_draws_are_philox_4x32_10),
        scoped_test(random_draws_match_the_cpu_backend),
        scoped_test(random_numbers_do_not_depend_on_threads),
        scoped_test(randint_knows_its_bounds),
        scoped_test(the_generator_state_restores_the_stream),
        scoped_test(random_streams_are_keyed_and_leave_the_generator),
        scoped_test(the_profile_counts_and_times_operations),
        scoped_test(tril_and_triu_keep_their_triangle),
        scoped_test(bernoulli_draws_ones_with_probability_p),
        scoped_test(randperm_is_a_permutation_of_the_seed),
        scoped_test(multinomial_with_replacement_follows_the_weights),
        scoped_test(multinomial_without_replacement_draws_distinct_categories),
        scoped_test(multinomial_refuses_bad_weights),
    };
    return cmocka_run_group_tests_name("core", tests, NULL, NULL);
}
