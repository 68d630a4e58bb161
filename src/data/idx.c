/* Reading IDX files (MNIST, Fashion-MNIST), plain or gzipped, into tensors. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "flare/data.h"
#include "flare/extension.h"

#define INPUT_CHUNK (256 * 1024)
/* The size of a gzipped file's content (or a pipe's) is unknown until it ends, so
 * the buffer grows from this size as data arrives: a corrupt header cannot make us
 * allocate more than about twice the data the file really holds. */
#define FIRST_CAPACITY ((size_t)1 << 20)

static const struct idx_type {
    uint8_t code;
    uint8_t size; /* bytes per value in the file */
    fl_dtype dtype;
} IDX_TYPES[] = {
    {0x08, 1, FL_U8}, {0x09, 1, FL_I32}, {0x0B, 2, FL_I32}, {0x0C, 4, FL_I32}, {0x0D, 4, FL_F32}, {0x0E, 8, FL_F64},
};

/* ---- a file read front to back, inflated on the way if it is gzipped ---- */

typedef struct source {
    const char *path;
    FILE *file;
    uint64_t file_size; /* known only for regular files */
    bool regular;
    bool gzip;
    bool member_ended; /* a gzip member ended: more input must start another (as `cat a.gz b.gz`) */
    bool failed;       /* an error is recorded */
    z_stream z;        /* next_in and avail_in index the input buffer for plain files too */
    uint64_t compressed_read;
    uint64_t offset; /* bytes delivered so far: the offset in the IDX content */
    unsigned char *input;
} source;

static void *source_error(source *s, fl_status status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void *source_error(source *s, fl_status status, const char *fmt, ...)
{
    char message[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    s->failed = true;
    return fl_error(status, "fl_load_idx", "%s: %s", s->path, message);
}

static bool refill(source *s)
{
    size_t n = fread(s->input, 1, INPUT_CHUNK, s->file);
    if (n == 0 && ferror(s->file)) {
        source_error(s, FL_ERR_IO, "read error at offset %" PRIu64 " of the file: %s", s->compressed_read,
                     strerror(errno));
        return false;
    }
    s->compressed_read += n;
    s->z.next_in = s->input;
    s->z.avail_in = (uInt)n;
    return true;
}

static void source_close(source *s)
{
    if (s->gzip)
        inflateEnd(&s->z);
    if (s->file)
        fclose(s->file);
    free(s->input);
}

static bool source_open(source *s, const char *path)
{
    *s = (source){.path = path};
    s->file = fopen(path, "rb");
    if (!s->file) {
        source_error(s, FL_ERR_IO, "cannot open: %s", strerror(errno));
        return false;
    }
    struct stat st;
    if (fstat(fileno(s->file), &st) != 0) {
        source_error(s, FL_ERR_IO, "cannot read: %s", strerror(errno));
        return false;
    }
    if (S_ISDIR(st.st_mode)) {
        source_error(s, FL_ERR_IO, "cannot read: it is a directory");
        return false;
    }
    s->regular = S_ISREG(st.st_mode);
    s->file_size = (uint64_t)st.st_size;
    s->input = malloc(INPUT_CHUNK);
    if (!s->input) {
        source_error(s, FL_ERR_MEMORY, "out of memory");
        return false;
    }
    if (!refill(s))
        return false;
    if (s->z.avail_in >= 2 && s->input[0] == 0x1f && s->input[1] == 0x8b) {
        /* 16 + MAX_WBITS: a gzip wrapper only, whose CRC and length inflate checks. */
        if (inflateInit2(&s->z, 16 + MAX_WBITS) != Z_OK) {
            source_error(s, FL_ERR_MEMORY, "cannot start zlib: %s", s->z.msg ? s->z.msg : "out of memory");
            return false;
        }
        s->gzip = true;
    }
    return true;
}

static size_t read_plain(source *s, unsigned char *dst, size_t n)
{
    size_t got = n < s->z.avail_in ? n : s->z.avail_in;
    memcpy(dst, s->z.next_in, got);
    s->z.next_in += got;
    s->z.avail_in -= (uInt)got;
    if (got < n) {
        size_t more = fread(dst + got, 1, n - got, s->file);
        s->compressed_read += more;
        got += more;
        if (got < n && ferror(s->file))
            source_error(s, FL_ERR_IO, "read error at offset %" PRIu64 ": %s", s->offset + got, strerror(errno));
    }
    return got;
}

static size_t read_gzip(source *s, unsigned char *dst, size_t n)
{
    size_t got = 0;
    while (got < n) {
        if (s->z.avail_in == 0) {
            if (!refill(s))
                break;
            if (s->z.avail_in == 0) {
                if (!s->member_ended)
                    source_error(s, FL_ERR_IO,
                                 "truncated gzip stream: the file ends at offset %" PRIu64 ", after %" PRIu64
                                 " decompressed bytes",
                                 s->compressed_read, s->offset + got);
                break;
            }
        }
        if (s->member_ended) {
            inflateReset(&s->z);
            s->member_ended = false;
        }
        /* avail_out is a 32-bit uInt: inflate a large request in pieces. */
        uInt piece = n - got < (size_t)1 << 30 ? (uInt)(n - got) : (uInt)1 << 30;
        s->z.next_out = dst + got;
        s->z.avail_out = piece;
        int rc = inflate(&s->z, Z_NO_FLUSH);
        got += piece - s->z.avail_out;
        if (rc == Z_STREAM_END) {
            s->member_ended = true;
        } else if (rc != Z_OK && rc != Z_BUF_ERROR) { /* Z_BUF_ERROR: it needs more input */
            source_error(s, rc == Z_MEM_ERROR ? FL_ERR_MEMORY : FL_ERR_IO,
                         "corrupt gzip stream at offset %" PRIu64 " of the file (decompressed offset %" PRIu64
                         "): %s",
                         s->compressed_read - s->z.avail_in, s->offset + got, s->z.msg ? s->z.msg : zError(rc));
            break;
        }
    }
    return got;
}

/* Delivers n bytes, or fewer at the end of the content or on an error (s->failed). */
static size_t source_read(source *s, void *dst, size_t n)
{
    size_t got = s->gzip ? read_gzip(s, dst, n) : read_plain(s, dst, n);
    s->offset += got;
    return got;
}

static void *truncated(source *s, const char *what, uint64_t expected, uint64_t at, uint64_t end)
{
    return source_error(s, FL_ERR_IO, "truncated: expected %" PRIu64 " bytes of %s at offset %" PRIu64
                        ", %sfile ends at %" PRIu64, expected, what, at, s->gzip ? "the decompressed " : "", end);
}

static void *trailing(source *s, uint64_t extra, uint64_t at)
{
    return source_error(s, FL_ERR_IO, "%" PRIu64 " bytes of trailing data at offset %" PRIu64
                        ", after the values the header describes", extra, at);
}

static bool read_exactly(source *s, void *dst, size_t n, const char *what)
{
    uint64_t at = s->offset;
    size_t got = source_read(s, dst, n);
    if (got < n && !s->failed)
        truncated(s, what, n, at, at + got);
    return !s->failed;
}

/* ---- the IDX format ---- */

/* IDX values are big-endian; the widening types are converted back to front, in
 * place, so that no value is overwritten before it is read. */
static void to_host_order(unsigned char *data, int64_t count, const struct idx_type *type)
{
    if (type->code == 0x09) {
        for (int64_t i = count - 1; i >= 0; i--) {
            int32_t v = (int8_t)data[i];
            memcpy(data + 4 * i, &v, 4);
        }
    } else if (type->code == 0x0B) {
        for (int64_t i = count - 1; i >= 0; i--) {
            int32_t v = (int16_t)(uint16_t)(data[2 * i] << 8 | data[2 * i + 1]);
            memcpy(data + 4 * i, &v, 4);
        }
    }
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    else if (type->size == 4) {
        for (int64_t i = 0; i < count; i++) {
            uint32_t v;
            memcpy(&v, data + 4 * i, 4);
            v = __builtin_bswap32(v);
            memcpy(data + 4 * i, &v, 4);
        }
    } else if (type->size == 8) {
        for (int64_t i = 0; i < count; i++) {
            uint64_t v;
            memcpy(&v, data + 8 * i, 8);
            v = __builtin_bswap64(v);
            memcpy(data + 8 * i, &v, 8);
        }
    }
#endif
}

/* Reads the values into a buffer of the tensor's size; NULL on error. */
static unsigned char *read_values(source *s, uint64_t expected, size_t tensor_bytes)
{
    uint64_t at = s->offset;
    bool sized = s->regular && !s->gzip;
    if (sized) {
        /* The content's size is known: check it before allocating what the header asks for. */
        if (s->file_size < at + expected)
            return truncated(s, "data", expected, at, s->file_size);
        if (s->file_size > at + expected)
            return trailing(s, s->file_size - (at + expected), at + expected);
    }
    size_t capacity = !sized && expected > FIRST_CAPACITY ? FIRST_CAPACITY : (size_t)expected;
    unsigned char *data = malloc(capacity ? capacity : 1);
    size_t got = 0;
    while (data && got < expected) {
        if (got == capacity) {
            capacity = expected - capacity < capacity ? (size_t)expected : 2 * capacity;
            unsigned char *grown = realloc(data, capacity);
            if (!grown) {
                free(data);
                data = NULL;
                break;
            }
            data = grown;
        }
        size_t n = source_read(s, data + got, capacity - got);
        got += n;
        if (s->failed || n == 0)
            break;
    }
    if (!data)
        return source_error(s, FL_ERR_MEMORY, "cannot allocate %" PRIu64 " bytes for the values", expected);
    if (!s->failed && got < expected)
        truncated(s, "data", expected, at, at + got);
    if (!s->failed) {
        /* The end of the content must come next, and for gzip a stream that ends cleanly. */
        unsigned char rest[4096];
        uint64_t extra = 0;
        for (size_t n; (n = source_read(s, rest, sizeof rest)) > 0;)
            extra += n;
        if (!s->failed && extra > 0)
            trailing(s, extra, at + expected);
    }
    if (!s->failed && tensor_bytes > capacity) {
        unsigned char *grown = realloc(data, tensor_bytes);
        if (!grown)
            source_error(s, FL_ERR_MEMORY, "cannot allocate %zu bytes for the values", tensor_bytes);
        else
            data = grown;
    }
    if (s->failed) {
        free(data);
        return NULL;
    }
    return data;
}

static fl_tensor *load(source *s)
{
    unsigned char head[4];
    if (!read_exactly(s, head, sizeof head, "header"))
        return NULL;
    if (head[0] != 0 || head[1] != 0)
        return source_error(s, FL_ERR_IO, "not an IDX file: offset 0 holds %02x %02x, where an IDX file has 00 00",
                            head[0], head[1]);
    const struct idx_type *type = NULL;
    for (size_t i = 0; i < sizeof IDX_TYPES / sizeof IDX_TYPES[0]; i++)
        if (IDX_TYPES[i].code == head[2])
            type = &IDX_TYPES[i];
    if (!type)
        return source_error(s, FL_ERR_IO, "unknown IDX type code 0x%02x at offset 2 (known: 08, 09, 0b, 0c, 0d, 0e)",
                            head[2]);
    int ndim = head[3];
    if (ndim > FL_MAX_DIMS)
        return source_error(s, FL_ERR_IO, "%d dimensions at offset 3; Flare supports at most %d", ndim, FL_MAX_DIMS);

    unsigned char sizes[4 * FL_MAX_DIMS];
    if (!read_exactly(s, sizes, 4 * (size_t)ndim, "dimension sizes"))
        return NULL;
    size_t tensor_size = fl_dtype_size(type->dtype);
    int64_t shape[FL_MAX_DIMS];
    uint64_t numel = 1, span = 1; /* span: the non-zero sizes, which bound the strides even of an empty tensor */
    bool too_large = false;
    for (int i = 0; i < ndim; i++) {
        const unsigned char *b = sizes + 4 * i;
        shape[i] = (int64_t)((uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3]);
        numel *= (uint64_t)shape[i];
        if (shape[i])
            too_large |= __builtin_mul_overflow(span, (uint64_t)shape[i], &span);
    }
    if (too_large || span > FL_IDX_MAX_BYTES / tensor_size) {
        char buf[FL_DESC_SIZE];
        return source_error(s, FL_ERR_IO,
                            "the dimension sizes %s at offset 4 describe more than the %" PRIu64
                            " bytes a sane IDX file holds",
                            fl_describe_shape(ndim, shape, buf), FL_IDX_MAX_BYTES);
    }

    unsigned char *data = read_values(s, numel * type->size, (size_t)numel * tensor_size);
    if (!data)
        return NULL;
    to_host_order(data, (int64_t)numel, type);
    fl_tensor *t = fl_keep(fl_from_data(data, type->dtype, ndim, shape));
    free(data);
    return t;
}

/* The tensor in path, owned by the caller (not registered in a scope). */
static fl_tensor *load_idx(const char *path)
{
    if (!path)
        return fl_error(FL_ERR_NULL, "fl_load_idx", "the path is NULL");
    source s;
    fl_tensor *t = source_open(&s, path) ? load(&s) : NULL;
    source_close(&s);
    return t;
}

fl_tensor *fl_load_idx(const char *path) { return fl_out(load_idx(path)); }

/* ---- MNIST and Fashion-MNIST ---- */

/* Loads dir/<split>-<name>, or dir/<split>-<name>.gz; path receives the file's name. */
static fl_tensor *load_mnist_file(const char *dir, const char *split, const char *name, char *path, size_t size)
{
    struct stat st;
    int n = snprintf(path, size, "%s/%s-%s", dir, split, name);
    if (n < 0 || (size_t)n + 3 >= size)
        return fl_error(FL_ERR_VALUE, "fl_load_mnist", "the folder name is too long: %s", dir);
    if (stat(path, &st) != 0) {
        strcat(path, ".gz");
        if (stat(path, &st) != 0)
            return fl_error(FL_ERR_IO, "fl_load_mnist", "%s/%s-%s: no such file, plain or with .gz: %s", dir, split,
                            name, strerror(errno));
    }
    return load_idx(path);
}

static fl_status check_mnist(const fl_tensor *images, const char *images_path, const fl_tensor *labels,
                             const char *labels_path)
{
    char buf[FL_DESC_SIZE];
    if (fl_dtype_of(images) != FL_U8 || fl_ndim(images) != 3) {
        fl_error(FL_ERR_SHAPE, "fl_load_mnist", "%s holds %s; images are u8 [N, rows, cols]", images_path,
                  fl_describe(images, buf));
        return FL_ERR_SHAPE;
    }
    if (fl_dtype_of(labels) != FL_U8 || fl_ndim(labels) != 1) {
        fl_error(FL_ERR_SHAPE, "fl_load_mnist", "%s holds %s; labels are u8 [N]", labels_path,
                  fl_describe(labels, buf));
        return FL_ERR_SHAPE;
    }
    if (fl_dim(images, 0) != fl_dim(labels, 0)) {
        fl_error(FL_ERR_SHAPE, "fl_load_mnist", "%s holds %" PRId64 " images but %s holds %" PRId64 " labels",
                 images_path, fl_dim(images, 0), labels_path, fl_dim(labels, 0));
        return FL_ERR_SHAPE;
    }
    return FL_OK;
}

fl_status fl_load_mnist(const char *dir, bool train, fl_tensor **images, fl_tensor **labels)
{
    if (images)
        *images = NULL;
    if (labels)
        *labels = NULL;
    if (!dir || !images || !labels) {
        fl_error(FL_ERR_NULL, "fl_load_mnist", "%s is NULL", !dir ? "dir" : !images ? "images" : "labels");
        return FL_ERR_NULL;
    }
    const char *split = train ? "train" : "t10k";
    char images_path[4096], labels_path[4096];
    fl_tensor *x = load_mnist_file(dir, split, "images-idx3-ubyte", images_path, sizeof images_path);
    fl_tensor *y = x ? load_mnist_file(dir, split, "labels-idx1-ubyte", labels_path, sizeof labels_path) : NULL;
    fl_status status = !y ? (fl_last_status() != FL_OK ? fl_last_status() : FL_ERR_IO)
                          : check_mnist(x, images_path, y, labels_path);
    if (status != FL_OK) {
        fl_release(x);
        fl_release(y);
        return status;
    }
    /* Hand both to the caller's scope, if one is open; one that cannot take a tensor
     * releases it. */
    *images = fl_out(x);
    *labels = fl_out(y);
    if (!*images || !*labels) {
        *images = *labels = NULL;
        return FL_ERR_MEMORY;
    }
    return FL_OK;
}
