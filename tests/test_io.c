/* Tensor files: the named tensor map, and safetensors files written and read by
 * Flare and by the reference implementation (tests/fixtures/gen_io.py), saved
 * atomically, and refused with a clear message when malformed. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "flare/io.h"
#include "support.h"
#include "tensor/internal.h"

#define REFERENCE_FILE FLARE_FIXTURES "/io_reference.safetensors"
/* Left in the build directory for `python tests/fixtures/gen_io.py --check`, which
 * has the reference implementation read what Flare wrote. */
#define FLARE_WRITTEN_FILE "io_flare_written.safetensors"

/* ---- helpers ---- */

static char directory[64];
static char scratch_path[128];

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw) { return remove(path); }

static int make_directory(void **state)
{
    snprintf(directory, sizeof directory, "/tmp/flare_test_io_XXXXXX");
    if (!mkdtemp(directory))
        return -1;
    snprintf(scratch_path, sizeof scratch_path, "%s/t.safetensors", directory);
    return support_scope_setup(state);
}

static int remove_directory(void **state)
{
    nftw(directory, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
    return support_scope_teardown(state);
}

#define io_test(f) cmocka_unit_test_setup_teardown(f, make_directory, remove_directory)

static int entries_in(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    if (d)
        closedir(d);
    return n;
}

static unsigned char *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *bytes = malloc(*size ? *size : 1);
    assert_int_equal(fread(bytes, 1, *size, f), *size);
    fclose(f);
    return bytes;
}

static void write_bytes(const char *path, const void *bytes, size_t size)
{
    /* A new file rather than a truncated one: ext4 flushes a file truncated and
     * rewritten when it is closed, which made the thousands of cases below slow. */
    unlink(path);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, size, f), size);
    fclose(f);
}

/* A safetensors file from its header text and data bytes; the length prefix is the
 * header's own, so that the header is exactly what the test wrote. */
static void write_safetensors(const char *path, const char *header, const void *data, size_t data_size)
{
    size_t length = strlen(header);
    unsigned char *bytes = malloc(8 + length + data_size);
    for (int i = 0; i < 8; i++)
        bytes[i] = (unsigned char)((uint64_t)length >> (8 * i));
    memcpy(bytes + 8, header, length);
    if (data_size)
        memcpy(bytes + 8 + length, data, data_size);
    write_bytes(path, bytes, 8 + length + data_size);
    free(bytes);
}

/* Fails unless a and b have the same dtype, shape and bytes (NaNs, -0 included). */
static void assert_same_tensor(const fl_tensor *a, const fl_tensor *b)
{
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(fl_dtype_of(a), fl_dtype_of(b));
    assert_int_equal(fl_ndim(a), fl_ndim(b));
    assert_memory_equal(fl_shape(a), fl_shape(b), (size_t)fl_ndim(a) * sizeof(int64_t));
    size_t bytes = (size_t)fl_numel(a) * fl_dtype_size(fl_dtype_of(a));
    unsigned char *x = malloc(bytes + 1), *y = malloc(bytes + 1);
    assert_int_equal(fl_to_host(a, x, bytes), FL_OK);
    assert_int_equal(fl_to_host(b, y, bytes), FL_OK);
    assert_memory_equal(x, y, bytes);
    free(x);
    free(y);
}

static void assert_same_map(const fl_tensor_map *a, const fl_tensor_map *b)
{
    assert_int_equal(fl_tensor_map_count(a), fl_tensor_map_count(b));
    for (size_t i = 0; i < fl_tensor_map_count(a); i++) {
        assert_string_equal(fl_tensor_map_name_at(a, i), fl_tensor_map_name_at(b, i));
        assert_same_tensor(fl_tensor_map_tensor_at(a, i), fl_tensor_map_tensor_at(b, i));
    }
    assert_int_equal(fl_tensor_map_metadata_count(a), fl_tensor_map_metadata_count(b));
    for (size_t i = 0; i < fl_tensor_map_metadata_count(a); i++) {
        const char *key = fl_tensor_map_metadata_key_at(a, i);
        assert_string_equal(key, fl_tensor_map_metadata_key_at(b, i));
        assert_string_equal(fl_tensor_map_metadata(a, key), fl_tensor_map_metadata(b, key));
    }
}

/* ---- the map ---- */

static void tensor_map_holds_references_in_order(void **state)
{
    fl_memory_stats before, after;
    fl_memory_stats_get(&before);
    fl_tensor_map *map = fl_tensor_map_create();
    fl_scope scope = fl_scope_begin();
    fl_tensor *w = T_F32(FL_SHAPE(2), 1, 2);
    assert_int_equal(fl_tensor_map_set(map, "w", w), FL_OK);
    assert_int_equal(fl_tensor_map_set(map, "b", T_I64(FL_SHAPE(1), 7)), FL_OK);
    assert_int_equal(fl_tensor_map_set(map, "a", fl_scalar(1, FL_BOOL)), FL_OK);
    /* Replacing keeps the position. */
    assert_int_equal(fl_tensor_map_set(map, "b", T_I64(FL_SHAPE(2), 8, 9)), FL_OK);
    assert_int_equal(fl_tensor_map_set(map, "w", w), FL_OK); /* the same tensor again */
    fl_scope_end(scope);

    /* The scope is gone; the map's references keep the tensors. */
    assert_int_equal(fl_tensor_map_count(map), 3);
    assert_string_equal(fl_tensor_map_name_at(map, 0), "w");
    assert_string_equal(fl_tensor_map_name_at(map, 1), "b");
    assert_string_equal(fl_tensor_map_name_at(map, 2), "a");
    assert_values(fl_tensor_map_get(map, "w"), 0, 0, 1, 2);
    assert_values(fl_tensor_map_get(map, "b"), 0, 0, 8, 9);
    assert_ptr_equal(fl_tensor_map_tensor_at(map, 0), fl_tensor_map_get(map, "w"));
    assert_true(fl_tensor_map_contains(map, "a"));
    assert_false(fl_tensor_map_contains(map, "c"));

    assert_int_equal(fl_tensor_map_set_metadata(map, "format", "pt"), FL_OK);
    assert_int_equal(fl_tensor_map_set_metadata(map, "epoch", "1"), FL_OK);
    assert_int_equal(fl_tensor_map_set_metadata(map, "format", "flare"), FL_OK);
    assert_int_equal(fl_tensor_map_metadata_count(map), 2);
    assert_string_equal(fl_tensor_map_metadata_key_at(map, 0), "format");
    assert_string_equal(fl_tensor_map_metadata(map, "format"), "flare");
    assert_null(fl_tensor_map_metadata(map, "missing"));
    assert_no_error(); /* absent metadata is not an error */

    /* Many names: the hash index grows and still finds every one. */
    char name[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(name, sizeof name, "layer%d.weight", i);
        fl_scope s = fl_scope_begin();
        assert_int_equal(fl_tensor_map_set(map, name, fl_scalar(i, FL_I32)), FL_OK);
        fl_scope_end(s);
    }
    assert_int_equal(fl_tensor_map_count(map), 1003);
    assert_true(fl_item(fl_tensor_map_get(map, "layer617.weight")) == 617);
    assert_string_equal(fl_tensor_map_name_at(map, 3 + 999), "layer999.weight");

    fl_tensor_map_free(map);
    fl_memory_stats_get(&after);
    assert_int_equal(after.in_use, before.in_use);
    fl_tensor_map_free(NULL);
}

static void tensor_map_errors(void **state)
{
    fl_tensor_map *map = fl_tensor_map_create();
    fl_tensor *t = fl_scalar(1, FL_F32);
    assert_fails(fl_tensor_map_get(map, "nope"), FL_ERR_INDEX, "fl_tensor_map_get: no tensor named 'nope'");
    assert_fails(fl_tensor_map_name_at(map, 0), FL_ERR_INDEX, "index 0 is out of range for 0 entries");
    assert_fails(fl_tensor_map_tensor_at(map, 5), FL_ERR_INDEX, "fl_tensor_map_tensor_at");
    assert_fails(fl_tensor_map_metadata_key_at(map, 0), FL_ERR_INDEX, "fl_tensor_map_metadata_key_at");
    assert_fails_status(fl_tensor_map_set(map, "__metadata__", t), FL_ERR_VALUE, "reserved");
    assert_fails_status(fl_tensor_map_set(map, "bad\xff", t), FL_ERR_VALUE, "not valid UTF-8");
    assert_fails_status(fl_tensor_map_set(map, "x", NULL), FL_ERR_NULL, "fl_tensor_map_set: the tensor for 'x' is NULL");
    assert_fails_status(fl_tensor_map_set(NULL, "x", t), FL_ERR_NULL, "the map is NULL");
    assert_fails_status(fl_tensor_map_set(map, NULL, t), FL_ERR_NULL, "the name is NULL");
    assert_fails_status(fl_tensor_map_set_metadata(map, "k", NULL), FL_ERR_NULL, "the value is NULL");
    assert_fails_status(fl_tensor_map_set_metadata(map, "k", "\xc0\xaf"), FL_ERR_VALUE, "the value is not valid UTF-8");
    assert_fails_status(fl_tensor_map_set_metadata(map, "\xed\xa0\x80", "v"), FL_ERR_VALUE, "the key is not valid");
    /* A failed computation flows into set as NULL: its own error is kept. */
    fl_tensor *bad = fl_add(t, fl_zeros(FL_F32, FL_SHAPE(-1)));
    assert_fails_status(fl_tensor_map_set(map, "y", bad), FL_ERR_SHAPE, "fl_zeros");
    assert_int_equal(fl_tensor_map_count(map), 0);
    assert_int_equal(fl_tensor_map_metadata_count(map), 0);
    assert_false(fl_tensor_map_contains(NULL, "x"));
    assert_int_equal(fl_tensor_map_count(NULL), 0);
    fl_tensor_map_free(map);
}

/* ---- round trips ---- */

static void round_trips_every_dtype(void **state)
{
    fl_tensor_map *map = fl_tensor_map_create();
    char name[32];
    for (fl_dtype d = 0; d < FL_DTYPE_COUNT; d++) {
        fl_tensor *values = fl_cast(T_F64(FL_SHAPE(2, 3), 0, 1, -2, 3.5, 100, -0.25), d);
        snprintf(name, sizeof name, "%s", fl_dtype_name(d));
        assert_int_equal(fl_tensor_map_set(map, name, values), FL_OK);
        snprintf(name, sizeof name, "%s_scalar", fl_dtype_name(d));
        assert_int_equal(fl_tensor_map_set(map, name, fl_scalar(1, d)), FL_OK);
        snprintf(name, sizeof name, "%s_empty", fl_dtype_name(d));
        assert_int_equal(fl_tensor_map_set(map, name, fl_zeros(d, FL_SHAPE(2, 0, 3))), FL_OK);
    }
    /* A view that is not dense (a broadcast, with stride 0) is written row-major. */
    fl_tensor *broadcast = fl__expand(T_F32(FL_SHAPE(3, 1), 0, 1, 2), 2, (const int64_t[]){3, 2});
    assert_int_equal(fl_tensor_map_set(map, "broadcast", broadcast), FL_OK);
    fl_release(broadcast);
    assert_int_equal(fl_tensor_map_set(map, "caf\u00e9 \"quoted\"\n\\", fl_ones(FL_U8, FL_SHAPE(1, 1, 1, 1, 1, 1, 1, 1))),
                     FL_OK);
    assert_int_equal(fl_tensor_map_set_metadata(map, "format", "pt"), FL_OK);
    assert_int_equal(fl_tensor_map_set_metadata(map, "control\x01\x1f", "tab\there \U0001f600"), FL_OK);
    assert_int_equal(fl_save_safetensors(scratch_path, map), FL_OK);

    fl_tensor_map *loaded = NULL;
    assert_int_equal(fl_load_safetensors(scratch_path, &loaded), FL_OK);
    assert_same_map(map, loaded);
    assert_values(fl_tensor_map_get(loaded, "broadcast"), 0, 0, 0, 0, 1, 1, 2, 2);
    assert_int_equal(entries_in(directory), 1); /* no temporary left */

    /* Saving again over the file replaces it. */
    assert_int_equal(fl_save_safetensors(scratch_path, loaded), FL_OK);
    fl_tensor_map *again = NULL;
    assert_int_equal(fl_load_safetensors(scratch_path, &again), FL_OK);
    assert_same_map(map, again);

    /* An empty map is a valid file too. */
    fl_tensor_map *empty = fl_tensor_map_create(), *empty_loaded = NULL;
    assert_int_equal(fl_save_safetensors(scratch_path, empty), FL_OK);
    assert_int_equal(fl_load_safetensors(scratch_path, &empty_loaded), FL_OK);
    assert_int_equal(fl_tensor_map_count(empty_loaded), 0);
    assert_no_error();
    fl_tensor_map_free(empty);
    fl_tensor_map_free(empty_loaded);
    fl_tensor_map_free(again);
    fl_tensor_map_free(loaded);
    fl_tensor_map_free(map);
}

static void header_layout_is_the_documented_one(void **state)
{
    /* Header in the map's order, metadata first; data by decreasing element size,
     * then the map's order; spaces to a multiple of 8. */
    fl_tensor_map *map = fl_tensor_map_create();
    fl_tensor_map_set(map, "b", T_U8(FL_SHAPE(3), 1, 2, 3));
    fl_tensor_map_set(map, "a", fl_scalar(0.5, FL_F64));
    fl_tensor_map_set(map, "c", T_I32(FL_SHAPE(1), -1));
    fl_tensor_map_set_metadata(map, "k", "v");
    assert_int_equal(fl_save_safetensors(scratch_path, map), FL_OK);
    size_t size;
    unsigned char *bytes = read_file(scratch_path, &size);
    const char header[] = "{\"__metadata__\":{\"k\":\"v\"},"
                          "\"b\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[12,15]},"
                          "\"a\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[0,8]},"
                          "\"c\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[8,12]}}";
    size_t length = 0;
    for (int i = 7; i >= 0; i--)
        length = length << 8 | bytes[i];
    assert_int_equal(length % 8, 0);
    assert_true(length >= sizeof header - 1 && length < sizeof header - 1 + 8);
    assert_memory_equal(bytes + 8, header, sizeof header - 1);
    for (size_t i = sizeof header - 1; i < length; i++)
        assert_int_equal(bytes[8 + i], ' ');
    assert_int_equal(size, 8 + length + 15);
    double half;
    memcpy(&half, bytes + 8 + length, 8);
    assert_true(half == 0.5);
    assert_memory_equal(bytes + 8 + length + 12, ((unsigned char[]){1, 2, 3}), 3);
    free(bytes);
    fl_tensor_map_free(map);
}

/* ---- the reference implementation ---- */

static void reads_the_reference_implementation_file(void **state)
{
    fl_tensor_map *map = NULL;
    assert_int_equal(fl_load_safetensors(REFERENCE_FILE, &map), FL_OK);
    assert_int_equal(fl_tensor_map_count(map), 13);
    const char *names[] = {"f32", "f32_special", "f64", "i32", "i64", "u8", "bool", "f16", "scalar", "empty", "empty_i64"};
    const fl_dtype dtypes[] = {FL_F32, FL_F32, FL_F64, FL_I32, FL_I64, FL_U8, FL_BOOL, FL_F16, FL_F32, FL_F32, FL_I64};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        fl_tensor *t = fl_tensor_map_get(map, names[i]);
        assert_dtype(t, dtypes[i]);
        fl_tensor *expected = fixture("io.bin", names[i]);
        /* fixture.py stores 0-d arrays as 1-d (np.ascontiguousarray makes them so). */
        if (strcmp(names[i], "scalar") == 0)
            expected = fl_reshape(expected, 0, NULL);
        assert_same_tensor(t, expected);
    }
    fl_tensor *bf16 = fl_tensor_map_get(map, "bf16");
    assert_dtype(bf16, FL_BF16);
    assert_same_tensor(fl_cast(bf16, FL_F32), fixture("io.bin", "bf16_as_f32"));
    assert_values(fl_tensor_map_get(map, "i64"), 0, 0, -4611686018427387904.0, -5, 1099511627779.0);
    assert_shape(fl_tensor_map_get(map, "scalar"));
    assert_shape(fl_tensor_map_get(map, "empty"), 0, 3);
    assert_values(fl_tensor_map_get(map, "layer.0/w\u00e9ight \"q\""), 0, 0, 0, 1, 2, 3);
    assert_int_equal(fl_tensor_map_metadata_count(map), 2);
    assert_string_equal(fl_tensor_map_metadata(map, "format"), "pt");
    assert_string_equal(fl_tensor_map_metadata(map, "note"),
                        "quote \" backslash \\ newline \n tab \t caf\u00e9 \U0001f600");

    /* Written back by Flare, it reads the same; gen_io.py --check has the reference
     * implementation read this file too. */
    assert_int_equal(fl_save_safetensors(FLARE_WRITTEN_FILE, map), FL_OK);
    fl_tensor_map *back = NULL;
    assert_int_equal(fl_load_safetensors(FLARE_WRITTEN_FILE, &back), FL_OK);
    assert_same_map(map, back);
    assert_no_error();
    fl_tensor_map_free(back);
    fl_tensor_map_free(map);
}

/* ---- atomic saving ---- */

static int failing_to_host(const fl_backend *self, const fl_tensor *t, void *dst)
{
    return fl_backend_error(FL_ERR_BACKEND, "injected failure while reading a tensor");
}

static void failed_saves_leave_the_old_file(void **state)
{
    fl_tensor_map *old = fl_tensor_map_create(), *new = fl_tensor_map_create();
    fl_tensor_map_set(old, "x", T_F32(FL_SHAPE(2), 1, 2));
    fl_tensor_map_set(new, "x", T_F32(FL_SHAPE(3), 5, 6, 7));
    fl_tensor_map_set(new, "y", T_I64(FL_SHAPE(2), 8, 9));
    assert_int_equal(fl_save_safetensors(scratch_path, old), FL_OK);
    size_t old_size;
    unsigned char *old_bytes = read_file(scratch_path, &old_size);

    /* The backend fails after the header is written: the partial temporary goes. */
    fl_backend failing = support_derive(fl_default_backend()->name);
    failing.to_host = failing_to_host;
    fl_backend original = support_override(&failing);
    fl_status status = fl_save_safetensors(scratch_path, new);
    support_override(&original);
    assert_fails_status(status, FL_ERR_BACKEND, "injected failure");

    /* The target is a directory: the rename fails after everything was written. */
    char target[160];
    snprintf(target, sizeof target, "%s/occupied", directory);
    assert_int_equal(mkdir(target, 0700), 0);
    snprintf(target, sizeof target, "%s/occupied/file", directory);
    write_bytes(target, "x", 1);
    snprintf(target, sizeof target, "%s/occupied", directory);
    assert_fails_status(fl_save_safetensors(target, new), FL_ERR_IO, "renaming");
    assert_int_equal(entries_in(target), 1);

    /* No directory to write in. */
    snprintf(target, sizeof target, "%s/missing/t.safetensors", directory);
    assert_fails_status(fl_save_safetensors(target, new), FL_ERR_IO, "cannot create a temporary file beside it");

    /* A directory without write permission (root writes anyway, so only checked for others). */
    if (geteuid() != 0) {
        assert_int_equal(chmod(directory, 0500), 0);
        status = fl_save_safetensors(scratch_path, new);
        chmod(directory, 0700);
        assert_fails_status(status, FL_ERR_IO, "Permission denied");
    }

    assert_fails_status(fl_save_safetensors(NULL, new), FL_ERR_NULL, "the path is NULL");
    assert_fails_status(fl_save_safetensors(scratch_path, NULL), FL_ERR_NULL, "the map is NULL");

    /* Only the old file and the occupied directory remain, and the file is intact. */
    assert_int_equal(entries_in(directory), 2);
    size_t size;
    unsigned char *bytes = read_file(scratch_path, &size);
    assert_int_equal(size, old_size);
    assert_memory_equal(bytes, old_bytes, size);
    free(bytes);
    free(old_bytes);
    fl_tensor_map_free(old);
    fl_tensor_map_free(new);
}

/* ---- malformed files ---- */

typedef struct malformed {
    const char *header;
    size_t data_size; /* zero bytes of data (or the bytes below) */
    const char *data;
    fl_status status;
    const char *message;
} malformed;

static void malformed_files_are_clear_errors(void **state)
{
    static const malformed cases[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", 4, 0, FL_ERR_VALUE,
         "invalid header at byte 60: '}' expected near end of file"},
        {" {}", 0, 0, FL_ERR_VALUE, "at byte 8: the header does not start with '{'"},
        {"[]", 0, 0, FL_ERR_VALUE, "does not start with '{'"},
        {"{} x", 0, 0, FL_ERR_VALUE, "invalid header at byte 11: end of file expected near 'x'"},
        {"{}", 3, 0, FL_ERR_VALUE, "3 bytes after the last tensor's data (at byte 10) belong to no tensor"},
        {"{\"a\":{\"dtype\":\"F33\",\"shape\":[],\"data_offsets\":[0,4]}}", 4, 0, FL_ERR_DTYPE,
         "invalid header: tensor 'a' has an unknown dtype 'F33'"},
        {"{\"a\":{\"dtype\":\"I16\",\"shape\":[],\"data_offsets\":[0,2]}}", 2, 0, FL_ERR_DTYPE,
         "tensor 'a' has dtype I16, which Flare does not support"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1, 0, FL_ERR_SHAPE,
         "tensor 'a' has more than 8 dimensions"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}", 1, 0, FL_ERR_VALUE,
         "tensor 'a': shape[0]: expected a non-negative integer, found -1"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1.0],\"data_offsets\":[0,1]}}", 1, 0, FL_ERR_VALUE, "a fraction or exponent"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[01],\"data_offsets\":[0,1]}}", 1, 0, FL_ERR_VALUE, "at byte 36: invalid token near '0'"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[18446744073709551616],\"data_offsets\":[0,1]}}", 1, 0, FL_ERR_VALUE,
         "at byte 55: too big integer"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[9223372036854775808],\"data_offsets\":[0,1]}}", 1, 0, FL_ERR_VALUE,
         "at byte 54: too big integer"},
        {"{\"a\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,1]}}", 1, 0, FL_ERR_VALUE,
         "tensor 'a' is too large to address"},
        /* The zero keeps the product small; the other sizes still multiply into strides. */
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[0,4294967295,4294967295],\"data_offsets\":[0,0]}}", 0, 0,
         FL_ERR_VALUE, "tensor 'a' is too large to address"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, 0, FL_ERR_VALUE,
         "tensor 'a' has data_offsets [0, 4] (4 bytes) but F32[2] needs 8"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,8]}}", 4, 0, FL_ERR_VALUE,
         "but F32[1] needs 4"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,0]}}", 4, 0, FL_ERR_VALUE,
         "tensor 'a' has data_offsets [4, 0] that end before they begin"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 2, 0, FL_ERR_VALUE,
         "the file is truncated: the tensors need 4 bytes of data from byte 61, the file has 2"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]}}",
         4, 0, FL_ERR_VALUE, "tensor 'b' at data_offsets [2, 4] overlaps 'a'"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
         "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[3,5]}}",
         5, 0, FL_ERR_VALUE, "bytes [2, 3) of the data belong to no tensor (the next is 'b')"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]}}", 4, 0, FL_ERR_VALUE,
         "bytes [0, 2) of the data belong to no tensor"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
         "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
         2, 0, FL_ERR_VALUE, "at byte 63: duplicate object key near '\"a\"'"},
        {"{\"a\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, 0, FL_ERR_VALUE,
         "at byte 33: duplicate object key near '\"dtype\"'"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"offsets\":[0,1]}}", 1, 0, FL_ERR_VALUE,
         "tensor 'a' has an unknown field 'offsets'"},
        {"{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1, 0, FL_ERR_VALUE, "tensor 'a' lacks its shape"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,1]}}", 1, 0, FL_ERR_VALUE,
         "tensor 'a': data_offsets needs two entries, not 3"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1]}}", 1, 0, FL_ERR_VALUE,
         "data_offsets needs two entries, not 1"},
        {"{\"a\":{\"dtype\":8,\"shape\":[1],\"data_offsets\":[0,1]}}", 1, 0, FL_ERR_VALUE, "tensor 'a': dtype: expected a string, found 8"},
        {"{\"a\":[]}", 0, 0, FL_ERR_VALUE, "tensor 'a': expected an object, found an array"},
        {"{\"__metadata__\":{\"k\":1}}", 0, 0, FL_ERR_VALUE, "metadata 'k' is not a string"},
        {"{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, 0, FL_ERR_VALUE, "at byte 35: duplicate object key near '\"k\"'"},
        {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, 0, FL_ERR_VALUE, "at byte 40: duplicate object key near '\"__metadata__\"'"},
        {"{\"__metadata__\":[]}", 0, 0, FL_ERR_VALUE, "'__metadata__' is not an object"},
        {"{\"a\xff\":{}}", 0, 0, FL_ERR_VALUE, "at byte 10: unable to decode byte 0xff"},
        {"{\"\xc0\x80\":{}}", 0, 0, FL_ERR_VALUE, "at byte 9: unable to decode byte 0xc0 near '\"'"},
        {"{\"a\\u0000\":{}}", 0, 0, FL_ERR_VALUE, "at byte 17: NUL byte in object key not supported"},
        {"{\"a\\udc00\":{}}", 0, 0, FL_ERR_VALUE, "at byte 17: invalid Unicode '\\uDC00'"},
        {"{\"a\\ud800x\":{}}", 0, 0, FL_ERR_VALUE, "at byte 18: invalid Unicode '\\uD800'"},
        {"{\"a\\u12g4\":{}}", 0, 0, FL_ERR_VALUE, "at byte 15: invalid escape near '\"a\\u12g'"},
        {"{\"a\\q\":{}}", 0, 0, FL_ERR_VALUE, "at byte 12: invalid escape near '\"a\\q'"},
        {"{\"a\nb\":{}}", 0, 0, FL_ERR_VALUE, "at byte 10: unexpected newline near '\"a'"},
        {"{\"a", 0, 0, FL_ERR_VALUE, "at byte 10: premature end of input near '\"a'"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":3,\"data_offsets\":[0,3]}}", 3, 0, FL_ERR_VALUE,
         "invalid header: tensor 'a': shape: expected an array, found 3"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[true],\"data_offsets\":[0,1]}}", 1, 0, FL_ERR_VALUE,
         "tensor 'a': shape[0]: expected a non-negative integer, found a boolean"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1e0]}}", 1, 0, FL_ERR_VALUE,
         "tensor 'a': data_offsets[1]: expected a non-negative integer, found a number with a fraction or exponent"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1,],\"data_offsets\":[0,1]}}", 1, 0, FL_ERR_VALUE,
         "at byte 38: unexpected token near ']'"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1] \"data_offsets\":[0,1]}}", 1, 0, FL_ERR_VALUE,
         "at byte 52: '}' expected near '\"data_offsets\"'"},
        {"{\"__metadata__\":{\"k\":nul}}", 0, 0, FL_ERR_VALUE, "at byte 31: invalid token near 'nul'"},
        {"{\"__metadata__\":{\"k\":\"a\\u0000\"}}", 0, 0, FL_ERR_VALUE, "at byte 37: \\u0000 is not allowed"},
        {"{\"a\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[0,3]}}", 3, "\x01\x00\x02", FL_ERR_VALUE,
         "tensor 'a' of dtype BOOL holds 2 at byte 65"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const malformed *c = &cases[i];
        char zeros[16] = {0};
        write_safetensors(scratch_path, c->header, c->data ? c->data : zeros, c->data_size);
        fl_tensor_map *map = (fl_tensor_map *)1;
        fl_status status = fl_load_safetensors(scratch_path, &map);
        if (status != c->status || !strstr(fl_last_error(), c->message) || !strstr(fl_last_error(), scratch_path))
            print_error("case %zu: status '%s', message: %s\n", i, fl_status_name(status), fl_last_error());
        assert_fails_status(status, c->status, c->message);
        assert_null(map);
    }

    /* Nesting deeper than the parser's limit (2048) is refused, not a stack overflow. */
    enum { DEPTH = 100000 };
    char *deep = malloc(DEPTH + 32);
    int n = sprintf(deep, "{\"__metadata__\":");
    memset(deep + n, '[', DEPTH);
    deep[n + DEPTH] = 0;
    write_safetensors(scratch_path, deep, NULL, 0);
    free(deep);
    fl_tensor_map *map = NULL;
    assert_fails_status(fl_load_safetensors(scratch_path, &map), FL_ERR_VALUE,
                        "invalid header at byte 2071: maximum parsing depth reached near '['");

    /* The header's length itself. */
    write_bytes(scratch_path, "\x02\0\0\0\0", 5);
    assert_fails_status(fl_load_safetensors(scratch_path, &map), FL_ERR_VALUE,
                        "the file has 5 bytes, too few for the 8-byte header length");
    write_bytes(scratch_path, "\x10\0\0\0\0\0\0\0{}      ", 16);
    assert_fails_status(fl_load_safetensors(scratch_path, &map), FL_ERR_VALUE,
                        "the header length at byte 0 is 16, but the file has only 8 bytes after it");
    write_bytes(scratch_path, "\0\0\0\0\0\0\0\x80{}", 10);
    assert_fails_status(fl_load_safetensors(scratch_path, &map), FL_ERR_VALUE,
                        "not a safetensors file: it starts with 00 00 00 00 00 00 00 80 7b 7d (\"........{}\"), "
                        "whose first 8 bytes as the header length give 9223372036854775808, above the format's limit");
    write_bytes(scratch_path, "\0\0\0\0\0\0\0\0", 8);
    assert_fails_status(fl_load_safetensors(scratch_path, &map), FL_ERR_VALUE,
                        "not a safetensors file: the header does not start with '{' at byte 8; the file starts with "
                        "00 00 00 00 00 00 00 00 (\"........\")");
    /* Files of other kinds are named as such, with their first 16 bytes. */
    const char text[] = "/* Task list */\nfirst: a C comment, not a tensor file\n";
    write_bytes(scratch_path, text, sizeof text - 1);
    assert_fails_status(fl_load_safetensors(scratch_path, &map), FL_ERR_VALUE,
                        "not a safetensors file: it starts with 2f 2a 20 54 61 73 6b 20 6c 69 73 74 20 2a 2f 0a "
                        "(\"/* Task list */.\"), whose first 8 bytes as the header length give "
                        "2336087693582150191, above the format's limit");
    write_bytes(scratch_path, "\x30\0\0\0\0\0\0\0PK\x03\x04", 12); /* within the limit, past the end */
    assert_fails_status(fl_load_safetensors(scratch_path, &map), FL_ERR_VALUE,
                        "not a safetensors file: it starts with 30 00 00 00 00 00 00 00 50 4b 03 04 (\"0.......PK..\"), "
                        "whose first 8 bytes as the header length give 48, past the end of the file");
    write_bytes(scratch_path, "\x02\0\0\0\0\0\0\0[]", 10);
    assert_fails_status(fl_load_safetensors(scratch_path, &map), FL_ERR_VALUE,
                        "not a safetensors file: the header does not start with '{' at byte 8");
    /* Padding is whitespace the JSON allows; an empty map with metadata is fine. */
    write_safetensors(scratch_path, "{\"__metadata__\":{}}  \t\n ", NULL, 0);
    assert_int_equal(fl_load_safetensors(scratch_path, &map), FL_OK);
    assert_int_equal(fl_tensor_map_count(map), 0);
    fl_tensor_map_free(map);

    /* The system's refusals. */
    assert_fails_status(fl_load_safetensors(directory, &map), FL_ERR_IO, "not a regular file");
    char missing[160];
    snprintf(missing, sizeof missing, "%s/missing.safetensors", directory);
    assert_fails_status(fl_load_safetensors(missing, &map), FL_ERR_IO, "No such file or directory");
    assert_fails_status(fl_load_safetensors(NULL, &map), FL_ERR_NULL, "the path is NULL");
    assert_fails_status(fl_load_safetensors(missing, NULL), FL_ERR_NULL, "out is NULL");
}

/* Every truncation of a valid file fails; every corruption of a byte either loads
 * or fails with a message; nothing crashes or leaks (checked under the sanitizers). */
static void truncated_and_corrupted_files_never_crash(void **state)
{
    fl_tensor_map *map = fl_tensor_map_create();
    fl_tensor_map_set(map, "weight", T_F32(FL_SHAPE(2, 2), 1, -2, 3, -4));
    fl_tensor_map_set(map, "mask", T_BOOL(FL_SHAPE(3), 1, 0, 1));
    fl_tensor_map_set(map, "steps", fl_scalar(12, FL_I64));
    fl_tensor_map_set(map, "none", fl_zeros(FL_F16, FL_SHAPE(0)));
    fl_tensor_map_set_metadata(map, "format", "pt");
    assert_int_equal(fl_save_safetensors(scratch_path, map), FL_OK);
    size_t size;
    unsigned char *good = read_file(scratch_path, &size);
    unsigned char *bytes = malloc(size);
    fl_memory_stats before, after;
    fl_memory_stats_get(&before);

    for (size_t length = 0; length < size; length++) {
        write_bytes(scratch_path, good, length);
        fl_tensor_map *loaded = NULL;
        fl_status status = fl_load_safetensors(scratch_path, &loaded);
        assert_int_equal(status, FL_ERR_VALUE);
        assert_null(loaded);
        assert_non_null(strstr(fl_last_error(), scratch_path));
        fl_clear_error();
    }

    const unsigned char replacements[] = {0x00, 0xff, '"', '{', '}', ',', '0', '9', ' ', '\\', 0x80};
    int loads = 0, failures = 0;
    for (size_t pos = 0; pos < size; pos++)
        for (size_t r = 0; r < sizeof replacements; r++) {
            if (good[pos] == replacements[r])
                continue;
            memcpy(bytes, good, size);
            bytes[pos] = replacements[r];
            write_bytes(scratch_path, bytes, size);
            fl_tensor_map *loaded = NULL;
            fl_status status = fl_load_safetensors(scratch_path, &loaded);
            if (status == FL_OK) {
                assert_non_null(loaded);
                assert_int_equal(fl_tensor_map_count(loaded), 4);
                fl_tensor_map_free(loaded);
                loads++;
            } else {
                assert_null(loaded);
                assert_true(strlen(fl_last_error()) > strlen(scratch_path));
                fl_clear_error();
                failures++;
            }
        }
    /* Corrupted data bytes still load (but a bool's do not); the header's mostly fail. */
    assert_true(loads > 0 && failures > loads);
    fl_memory_stats_get(&after);
    assert_int_equal(after.in_use, before.in_use);
    free(bytes);
    free(good);
    fl_tensor_map_free(map);
}

/* jansson's allocations, failing once allocations_left runs out. */
static int allocations_left;
static void *failing_malloc(size_t size) { return allocations_left-- > 0 ? malloc(size) : NULL; }

/* Every allocation of the header failing in turn: each save is FL_ERR_MEMORY and
 * leaves the old file, never a hang or a crash; the first with enough memory saves. */
static void saves_out_of_memory_are_errors(void **state)
{
    fl_tensor_map *old = fl_tensor_map_create(), *map = fl_tensor_map_create();
    fl_tensor_map_set(old, "x", T_F32(FL_SHAPE(1), 1));
    assert_int_equal(fl_save_safetensors(scratch_path, old), FL_OK);
    fl_tensor_map_set(map, "weight", T_F32(FL_SHAPE(2, 2), 1, 2, 3, 4));
    fl_tensor_map_set(map, "step", T_I64(FL_SHAPE(1), 7));
    fl_tensor_map_set_metadata(map, "epoch", "3");
    int failures = 0;
    for (int n = 0;; n++) {
        allocations_left = n;
        json_set_alloc_funcs(failing_malloc, free);
        fl_status status = fl_save_safetensors(scratch_path, map);
        json_set_alloc_funcs(malloc, free);
        if (status == FL_OK)
            break;
        assert_fails_status(status, FL_ERR_MEMORY, "out of memory");
        fl_tensor_map *back = NULL;
        assert_int_equal(fl_load_safetensors(scratch_path, &back), FL_OK);
        assert_same_map(back, old);
        fl_tensor_map_free(back);
        failures++;
        assert_true(n < 1000);
    }
    assert_true(failures > 5);
    fl_tensor_map *back = NULL;
    assert_int_equal(fl_load_safetensors(scratch_path, &back), FL_OK);
    assert_same_map(back, map);
    fl_tensor_map_free(back);
    fl_tensor_map_free(map);
    fl_tensor_map_free(old);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        scoped_test(tensor_map_holds_references_in_order),
        scoped_test(tensor_map_errors),
        io_test(round_trips_every_dtype),
        io_test(header_layout_is_the_documented_one),
        scoped_test(reads_the_reference_implementation_file),
        io_test(failed_saves_leave_the_old_file),
        io_test(saves_out_of_memory_are_errors),
        io_test(malformed_files_are_clear_errors),
        io_test(truncated_and_corrupted_files_never_crash),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
