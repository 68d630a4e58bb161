/* IDX files: every type code plain and gzipped, malformed files of every kind, the
 * MNIST folder layout, and the real Fashion-MNIST when Debian's package is installed.
 * Fixtures: tests/fixtures/gen_idx.py. Malformed files are written at run time into a
 * temporary folder. */
#define _GNU_SOURCE /* nftw */
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "flare/data.h"
#include "support.h"

static char tmp_dir[] = "/tmp/flare_idx_XXXXXX";

static const char *const TYPE_NAMES[] = {"u8", "i8", "i16", "i32", "f32", "f64"};

/* ---- helpers ---- */

static unsigned char *read_bytes(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    rewind(f);
    unsigned char *bytes = malloc(*len + 1);
    assert_int_equal(fread(bytes, 1, *len, f), *len);
    fclose(f);
    return bytes;
}

static unsigned char *read_fixture(const char *name, size_t *len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", FLARE_FIXTURES, name);
    return read_bytes(path, len);
}

/* Writes bytes to <tmp_dir>/<name>, gzipped if asked; path receives the file's name. */
static const char *write_file(char *path, const char *name, const void *bytes, size_t len, bool gzip)
{
    snprintf(path, 1024, "%s/%s", tmp_dir, name);
    if (gzip) {
        gzFile f = gzopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(gzwrite(f, bytes, (unsigned)len), (int)len);
        assert_int_equal(gzclose(f), Z_OK);
    } else {
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(bytes, 1, len, f), len);
        fclose(f);
    }
    return path;
}

/* Fails unless loading path fails with status and a message that names the file, an
 * offset and (if not NULL) contains. */
#define assert_load_fails(path, status, contains) load_fails((path), (status), (contains), __FILE__, __LINE__)
static void load_fails(const char *path, fl_status status, const char *contains, const char *file, int line)
{
    fl_tensor *t = fl_load_idx(path);
    const char *message = fl_last_error();
    if (t || fl_last_status() != status || !strstr(message, path) || !strstr(message, "offset") ||
        (contains && !strstr(message, contains))) {
        print_error("%s:%d: loading %s: %s, status '%s', message '%s'; expected status '%s' mentioning "
                    "the file, an offset and '%s'\n",
                    file, line, path, t ? "succeeded" : "failed", fl_status_name(fl_last_status()), message,
                    fl_status_name(status), contains ? contains : "");
        _fail(file, line);
    }
    fl_clear_error();
}

/* Loads the same bytes written plain and gzipped: both must fail alike. */
static void both_fail(const char *name, const void *bytes, size_t len, const char *contains)
{
    char path[1024], gz_name[256];
    assert_load_fails(write_file(path, name, bytes, len, false), FL_ERR_IO, contains);
    snprintf(gz_name, sizeof gz_name, "%s.gz", name);
    assert_load_fails(write_file(path, gz_name, bytes, len, true), FL_ERR_IO, contains);
}

/* ---- reading ---- */

static void every_type_code_plain_and_gzipped(void **state)
{
    for (size_t i = 0; i < sizeof TYPE_NAMES / sizeof TYPE_NAMES[0]; i++) {
        fl_tensor *expected = fixture("idx.bin", TYPE_NAMES[i]);
        for (int gzip = 0; gzip < 2; gzip++) {
            char path[1024];
            snprintf(path, sizeof path, "%s/idx_%s%s", FLARE_FIXTURES, TYPE_NAMES[i], gzip ? ".gz" : "");
            fl_tensor *t = fl_load_idx(path);
            assert_dtype(t, fl_dtype_of(expected));
            assert_int_equal(fl_ndim(t), fl_ndim(expected));
            assert_memory_equal(fl_shape(t), fl_shape(expected), sizeof(int64_t) * fl_ndim(t));
            assert_close(t, expected, 0, 0);
        }
    }
    /* Spot checks independent of the fixture file: widening keeps signs, bytes swap. */
    assert_values(fl_load_idx(FLARE_FIXTURES "/idx_i8"), 0, 0, -128, -1, 0, 1, 127);
    assert_values(fl_load_idx(FLARE_FIXTURES "/idx_i16.gz"), 0, 0, -32768, -1, 0, 1, 258, 32767);
    assert_values(fl_load_idx(FLARE_FIXTURES "/idx_i32"), 0, 0, -2147483648.0, -1, 16909060, 2147483647);
    assert_no_error();
}

static void gzip_members_are_concatenated(void **state)
{
    fl_tensor *t = fl_load_idx(FLARE_FIXTURES "/idx_u8_two_members.gz");
    assert_shape(t, 2, 3, 4);
    assert_close(t, fixture("idx.bin", "u8"), 0, 0);
}

static void gzip_is_detected_by_its_magic_bytes_not_the_name(void **state)
{
    size_t plain_len, gz_len;
    unsigned char *plain = read_fixture("idx_f64", &plain_len);
    unsigned char *gz = read_fixture("idx_f64.gz", &gz_len);
    char path[1024];
    fl_tensor *expected = fixture("idx.bin", "f64");
    assert_close(fl_load_idx(write_file(path, "plain.gz", plain, plain_len, false)), expected, 0, 0);
    assert_close(fl_load_idx(write_file(path, "gzipped.idx", gz, gz_len, false)), expected, 0, 0);
    free(plain);
    free(gz);
}

static void scalar_and_empty_files(void **state)
{
    char path[1024];
    for (int gzip = 0; gzip < 2; gzip++) {
        const unsigned char scalar[] = {0, 0, 0x08, 0, 42};
        fl_tensor *s = fl_load_idx(write_file(path, "scalar", scalar, sizeof scalar, gzip));
        assert_int_equal(fl_ndim(s), 0);
        assert_values(s, 0, 0, 42);
        const unsigned char empty[] = {0, 0, 0x0D, 2, 0, 0, 0, 0, 0, 0, 0, 5};
        assert_shape(fl_load_idx(write_file(path, "empty", empty, sizeof empty, gzip)), 0, 5);
    }
    assert_no_error();
}

/* Pipes have no size to check the header against: they are read as they come. */
static void pipes_are_read_as_streams(void **state)
{
    for (int gzip = 0; gzip < 2; gzip++) {
        for (int cut = 0; cut < 2; cut++) {
            size_t len;
            unsigned char *bytes = read_fixture(gzip ? "idx_i16.gz" : "idx_i16", &len);
            int fds[2];
            assert_int_equal(pipe(fds), 0);
            assert_int_equal(write(fds[1], bytes, len - cut), (ssize_t)(len - cut));
            close(fds[1]);
            char path[64];
            snprintf(path, sizeof path, "/proc/self/fd/%d", fds[0]);
            if (cut)
                assert_load_fails(path, FL_ERR_IO, gzip ? "truncated gzip stream" : "file ends at 23");
            else
                assert_close(fl_load_idx(path), fixture("idx.bin", "i16"), 0, 0);
            close(fds[0]);
            free(bytes);
        }
    }
}

/* ---- errors ---- */

static void missing_files_and_null_paths(void **state)
{
    assert_fails(fl_load_idx(NULL), FL_ERR_NULL, "path");
    assert_fails(fl_load_idx("/nonexistent/train-images-idx3-ubyte"), FL_ERR_IO,
                 "/nonexistent/train-images-idx3-ubyte: cannot open: No such file or directory");
    assert_fails(fl_load_idx(tmp_dir), FL_ERR_IO, "directory");
}

static void malformed_headers(void **state)
{
    both_fail("magic", (const unsigned char[]){0, 1, 0x08, 1, 0, 0, 0, 1, 7}, 9,
              "not an IDX file: offset 0 holds 00 01");
    both_fail("type", (const unsigned char[]){0, 0, 0x0A, 1, 0, 0, 0, 1, 7}, 9,
              "unknown IDX type code 0x0a at offset 2");
    both_fail("ndim", (const unsigned char[]){0, 0, 0x08, 9}, 4, "9 dimensions at offset 3; Flare supports at most 8");
    /* Eight sizes of 2^32 - 1 overflow 64 bits; three of 2^16 pass 64 bits but not the limit. */
    unsigned char overflow[4 + 32];
    memcpy(overflow, (const unsigned char[]){0, 0, 0x0E, 8}, 4);
    memset(overflow + 4, 0xff, 32);
    both_fail("overflow", overflow, sizeof overflow, "at offset 4 describe more than");
    both_fail("too_large", (const unsigned char[]){0, 0, 0x08, 3, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0}, 16,
              "the dimension sizes [65536, 65536, 65536] at offset 4");
    /* An empty tensor whose other sizes overflow its strides. */
    both_fail("empty_overflow",
              (const unsigned char[]){0, 0, 0x08, 3, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 16,
              "the dimension sizes [0, 4294967295, 4294967295] at offset 4");
}

static void sizes_larger_than_the_data_do_not_allocate_them(void **state)
{
    /* 2^36 bytes promised, 3 delivered: reported as truncation, never allocated (the
     * sanitizers would notice a 64 GiB request). */
    const unsigned char header[] = {0, 0, 0x08, 2, 0, 16, 0, 0, 0, 1, 0, 0, 1, 2, 3};
    both_fail("promises", header, sizeof header, "expected 68719476736 bytes of data at offset 12");
}

static void truncated_at_every_length(void **state)
{
    char path[1024];
    for (size_t i = 0; i < sizeof TYPE_NAMES / sizeof TYPE_NAMES[0]; i++) {
        for (int gzip = 0; gzip < 2; gzip++) {
            char name[64];
            size_t len;
            snprintf(name, sizeof name, "idx_%s%s", TYPE_NAMES[i], gzip ? ".gz" : "");
            unsigned char *bytes = read_fixture(name, &len);
            for (size_t cut = 0; cut < len; cut++)
                assert_load_fails(write_file(path, name, bytes, cut, false), FL_ERR_IO, NULL);
            free(bytes);
        }
    }
    /* The messages say what was expected where. */
    size_t len;
    unsigned char *u8 = read_fixture("idx_u8", &len);
    assert_load_fails(write_file(path, "u8", u8, 30, false), FL_ERR_IO,
                      "truncated: expected 24 bytes of data at offset 16, file ends at 30");
    assert_load_fails(write_file(path, "u8", u8, 30, true), FL_ERR_IO,
                      "truncated: expected 24 bytes of data at offset 16, the decompressed file ends at 30");
    assert_load_fails(write_file(path, "u8", u8, 9, false), FL_ERR_IO,
                      "expected 12 bytes of dimension sizes at offset 4, file ends at 9");
    assert_load_fails(write_file(path, "u8", u8, 3, false), FL_ERR_IO, "expected 4 bytes of header at offset 0");
    free(u8);
    unsigned char *gz = read_fixture("idx_u8.gz", &len);
    assert_load_fails(write_file(path, "u8.gz", gz, len - 4, false), FL_ERR_IO,
                      "truncated gzip stream: the file ends at offset 42, after 40 decompressed bytes");
    free(gz);
}

static void trailing_data_is_an_error(void **state)
{
    size_t len;
    unsigned char *u8 = read_fixture("idx_u8", &len);
    unsigned char *longer = malloc(len + 3);
    memcpy(longer, u8, len);
    memset(longer + len, 0, 3);
    both_fail("trailing", longer, len + 3, "3 bytes of trailing data at offset 40");
    /* Bytes after the gzip stream that do not start another member. */
    char path[1024];
    unsigned char *gz = read_fixture("idx_u8.gz", &len);
    unsigned char *padded = malloc(len + 2);
    memcpy(padded, gz, len);
    memcpy(padded + len, "\x00\x00", 2);
    assert_load_fails(write_file(path, "padded.gz", padded, len + 2, false), FL_ERR_IO,
                      "corrupt gzip stream at offset");
    free(u8);
    free(longer);
    free(gz);
    free(padded);
}

static void corrupt_gzip_bytes(void **state)
{
    char path[1024];
    for (size_t i = 0; i < sizeof TYPE_NAMES / sizeof TYPE_NAMES[0]; i++) {
        char name[64];
        size_t len;
        snprintf(name, sizeof name, "idx_%s.gz", TYPE_NAMES[i]);
        unsigned char *bytes = read_fixture(name, &len);
        /* Every byte but the optional header fields (flags, time, extra flags, OS at
         * 3..9): the magic, the method, the deflate data and the CRC and length. */
        for (size_t at = 0; at < len; at++) {
            if (at >= 3 && at < 10)
                continue;
            bytes[at] ^= 0xff;
            assert_load_fails(write_file(path, name, bytes, len, false), FL_ERR_IO, NULL);
            bytes[at] ^= 0xff;
        }
        /* A changed data byte gets past inflate and is caught by the CRC. */
        bytes[len - 8] ^= 1;
        assert_load_fails(write_file(path, name, bytes, len, false), FL_ERR_IO, "incorrect data check");
        free(bytes);
    }
}

/* ---- MNIST folders ---- */

static void mnist_folder_layout(void **state)
{
    char path[1024], dir[1024];
    snprintf(dir, sizeof dir, "%s/mnist", tmp_dir);
    assert_int_equal(mkdir(dir, 0700), 0);
    const unsigned char images[] = {0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 2, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    const unsigned char labels3[] = {0, 0, 8, 1, 0, 0, 0, 3, 7, 8, 9};
    const unsigned char labels2[] = {0, 0, 8, 1, 0, 0, 0, 2, 7, 8};
    const unsigned char labels_i32[] = {0, 0, 0x0C, 1, 0, 0, 0, 3, 0, 0, 0, 7, 0, 0, 0, 8, 0, 0, 0, 9};
    write_file(path, "mnist/train-images-idx3-ubyte", images, sizeof images, false);
    write_file(path, "mnist/train-labels-idx1-ubyte.gz", labels3, sizeof labels3, true);
    fl_tensor *x, *y;
    assert_int_equal(fl_load_mnist(dir, true, &x, &y), FL_OK);
    assert_shape(x, 3, 2, 2);
    assert_dtype(x, FL_U8);
    assert_values(y, 0, 0, 7, 8, 9);

    /* Counts that disagree. */
    write_file(path, "mnist/t10k-images-idx3-ubyte.gz", images, sizeof images, true);
    write_file(path, "mnist/t10k-labels-idx1-ubyte", labels2, sizeof labels2, false);
    assert_fails_status(fl_load_mnist(dir, false, &x, &y), FL_ERR_SHAPE, "holds 3 images but");
    assert_null(x);
    assert_null(y);
    /* Labels of another dtype; images that are labels. */
    write_file(path, "mnist/t10k-labels-idx1-ubyte", labels_i32, sizeof labels_i32, false);
    assert_fails_status(fl_load_mnist(dir, false, &x, &y), FL_ERR_SHAPE, "i32[3]; labels are u8 [N]");
    write_file(path, "mnist/t10k-images-idx3-ubyte.gz", labels3, sizeof labels3, true);
    assert_fails_status(fl_load_mnist(dir, false, &x, &y), FL_ERR_SHAPE, "u8[3]; images are u8 [N, rows, cols]");
    /* A malformed file passes its error on. */
    write_file(path, "mnist/t10k-images-idx3-ubyte.gz", images, 10, true);
    assert_fails_status(fl_load_mnist(dir, false, &x, &y), FL_ERR_IO, "t10k-images-idx3-ubyte.gz: truncated");
    /* Missing files and arguments. */
    assert_fails_status(fl_load_mnist("/nonexistent", true, &x, &y), FL_ERR_IO,
                        "/nonexistent/train-images-idx3-ubyte: no such file, plain or with .gz");
    assert_null(x);
    assert_fails_status(fl_load_mnist(NULL, true, &x, &y), FL_ERR_NULL, "dir");
    assert_fails_status(fl_load_mnist(dir, true, &x, NULL), FL_ERR_NULL, "labels");
    assert_null(x);
}

static void mnist_outside_a_scope_belongs_to_the_caller(void **state)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/mnist", tmp_dir);
    fl_tensor *x, *y;
    assert_int_equal(fl_load_mnist(dir, true, &x, &y), FL_OK);
    assert_shape(x, 3, 2, 2);
    fl_release(x); /* the sanitizers' leak check proves both were ours to release */
    fl_release(y);
}

/* ---- the real Fashion-MNIST ---- */

static int64_t pixel_sum(const uint8_t *pixels, size_t count)
{
    int64_t sum = 0;
    for (size_t i = 0; i < count; i++)
        sum += pixels[i];
    return sum;
}

/* Statistics printed by tests/fixtures/gen_idx.py with NumPy. */
static const struct {
    bool train;
    int64_t count;
    uint8_t first_labels[10];
    int64_t first_sum, last_sum, total_sum;
} FASHION[] = {
    {true, 60000, {9, 0, 0, 3, 0, 2, 7, 2, 5, 5}, 76247, 16684, 3431114169},
    {false, 10000, {9, 2, 1, 1, 6, 1, 4, 6, 5, 7}, 33456, 24390, 573469082},
};

static void fashion_mnist_if_installed(void **state)
{
    struct stat st;
    if (stat(FL_FASHION_MNIST_DIR, &st) != 0) {
        print_message("skipping: %s is absent (Debian package dataset-fashion-mnist)\n", FL_FASHION_MNIST_DIR);
        skip();
    }
    for (size_t k = 0; k < sizeof FASHION / sizeof FASHION[0]; k++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        fl_tensor *images, *labels;
        assert_int_equal(fl_load_mnist(FL_FASHION_MNIST_DIR, FASHION[k].train, &images, &labels), FL_OK);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        print_message("Fashion-MNIST %s loaded in %.3f s\n", FASHION[k].train ? "train" : "test",
                      (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec));
        int64_t n = FASHION[k].count;
        assert_shape(images, n, 28, 28);
        assert_shape(labels, n);

        uint8_t *y = malloc((size_t)n);
        assert_int_equal(fl_to_host(labels, y, (size_t)n), FL_OK);
        assert_memory_equal(y, FASHION[k].first_labels, 10);
        int64_t per_class[10] = {0};
        for (int64_t i = 0; i < n; i++) {
            assert_in_range(y[i], 0, 9);
            per_class[y[i]]++;
        }
        for (int c = 0; c < 10; c++)
            assert_int_equal(per_class[c], n / 10);

        size_t pixels = (size_t)n * 28 * 28;
        uint8_t *x = malloc(pixels);
        assert_int_equal(fl_to_host(images, x, pixels), FL_OK);
        assert_int_equal(pixel_sum(x, 784), FASHION[k].first_sum);
        assert_int_equal(pixel_sum(x + pixels - 784, 784), FASHION[k].last_sum);
        assert_int_equal(pixel_sum(x, pixels), FASHION[k].total_sum);
        free(x);
        free(y);
    }
}

/* ---- the temporary folder ---- */

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

static int make_tmp_dir(void **state) { return mkdtemp(tmp_dir) ? 0 : -1; }

static int remove_tmp_dir(void **state) { return nftw(tmp_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

int main(void)
{
    const struct CMUnitTest tests[] = {
        scoped_test(every_type_code_plain_and_gzipped),
        scoped_test(gzip_members_are_concatenated),
        scoped_test(gzip_is_detected_by_its_magic_bytes_not_the_name),
        scoped_test(scalar_and_empty_files),
        scoped_test(pipes_are_read_as_streams),
        scoped_test(missing_files_and_null_paths),
        scoped_test(malformed_headers),
        scoped_test(sizes_larger_than_the_data_do_not_allocate_them),
        scoped_test(truncated_at_every_length),
        scoped_test(trailing_data_is_an_error),
        scoped_test(corrupt_gzip_bytes),
        scoped_test(mnist_folder_layout),
        cmocka_unit_test(mnist_outside_a_scope_belongs_to_the_caller),
        scoped_test(fashion_mnist_if_installed),
    };
    return cmocka_run_group_tests_name("idx", tests, make_tmp_dir, remove_tmp_dir);
}
