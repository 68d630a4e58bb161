/*
 * The safetensors format (include/flare/io.h): an atomic writer and a strict reader.
 *
 * The reader applies the reference implementation's checks (huggingface/safetensors,
 * safetensors/src/tensor.rs) and a few more that it leaves to serde's defaults:
 * duplicate names and unknown fields in a tensor's entry are errors here, and bool
 * bytes other than 0 and 1 are refused because they are not valid C _Bool values.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "flare/extension.h"
#include "flare/io.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "tensors are written as the host stores them; the format is little-endian"
#endif

/* The reference reader's limit on the header (MAX_HEADER_SIZE): a corrupt length
 * must not make us allocate gigabytes before the JSON is even looked at. The parsed
 * header is a jansson tree, about 40 bytes per value: a header at this limit made of
 * one long array of digits takes 2 GB to refuse, while 10,000 tensors take about a
 * megabyte of text. */
#define MAX_HEADER_BYTES 100000000u
/* The reference writer pads the header with spaces to a multiple of this. */
#define HEADER_ALIGNMENT 8

static const struct {
    const char *tag;
    fl_dtype dtype;
} dtype_tags[] = {
    {"BOOL", FL_BOOL}, {"U8", FL_U8},     {"I32", FL_I32}, {"I64", FL_I64},
    {"F16", FL_F16},   {"BF16", FL_BF16}, {"F32", FL_F32}, {"F64", FL_F64},
};

/* The format's other dtypes: named so that a message says "Flare lacks it" rather
 * than "the file is corrupt". */
static const char *const foreign_tags[] = {"I8",      "I16",     "U16", "U32",     "U64",     "F8_E5M2",
                                           "F8_E4M3", "F8_E8M0", "F4",  "F6_E2M3", "F6_E3M2", "C64"};

static const char *tag_of(fl_dtype dtype)
{
    for (size_t i = 0; i < sizeof dtype_tags / sizeof dtype_tags[0]; i++)
        if (dtype_tags[i].dtype == dtype)
            return dtype_tags[i].tag;
    return NULL;
}

/* ---- saving ------------------------------------------------------------------------ */

static const char save_fn[] = "fl_save_safetensors";

typedef struct placed {
    size_t index;      /* in the map */
    size_t element;    /* bytes per element */
    uint64_t begin, end; /* in the data section */
} placed;

/* Larger elements first, then the map's order: every tensor lands on a multiple of
 * its element size, since the header's length is a multiple of 8. */
static int by_element_size(const void *a, const void *b)
{
    const placed *x = a, *y = b;
    if (x->element != y->element)
        return x->element > y->element ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

static bool write_all(int fd, const void *bytes, size_t length)
{
    const char *p = bytes;
    while (length > 0) {
        ssize_t n = write(fd, p, length);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0)
                errno = EIO; /* no progress and no reason given */
            return false;
        }
        p += n;
        length -= (size_t)n;
    }
    return true;
}

/* A JSON value stored in a container, which owns it from then on (also on failure). */
static bool set(json_t *object, const char *key, json_t *value) { return json_object_set_new(object, key, value) == 0; }
static bool append(json_t *array, json_t *value) { return json_array_append_new(array, value) == 0; }

/* The JSON header for tensors at the offsets in by_index (the map's order), padded
 * with spaces; NULL when out of memory. */
static char *build_header(const fl_tensor_map *map, const placed *by_index, size_t *length)
{
    json_t *root = json_object();
    bool ok = root != NULL;
    size_t metadata = fl_tensor_map_metadata_count(map);
    if (ok && metadata) {
        json_t *pairs = json_object();
        ok = set(root, "__metadata__", pairs);
        for (size_t i = 0; ok && i < metadata; i++) {
            const char *key = fl_tensor_map_metadata_key_at(map, i);
            ok = set(pairs, key, json_string(fl_tensor_map_metadata(map, key)));
        }
    }
    for (size_t i = 0; ok && i < fl_tensor_map_count(map); i++) {
        const fl_tensor *t = fl_tensor_map_tensor_at(map, i);
        /* Each container is made as it is stored, so that a failure leaks nothing. */
        json_t *entry = json_object(), *shape = NULL, *offsets = NULL;
        ok = set(root, fl_tensor_map_name_at(map, i), entry) && set(entry, "dtype", json_string(tag_of(fl_dtype_of(t)))) &&
             set(entry, "shape", shape = json_array()) && set(entry, "data_offsets", offsets = json_array()) &&
             append(offsets, json_integer((json_int_t)by_index[i].begin)) &&
             append(offsets, json_integer((json_int_t)by_index[i].end));
        for (int d = 0; ok && d < fl_ndim(t); d++)
            ok = append(shape, json_integer(fl_shape(t)[d]));
    }
    char *text = ok ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    if (!text)
        return NULL;
    size_t n = strlen(text), padded = (n + HEADER_ALIGNMENT - 1) / HEADER_ALIGNMENT * HEADER_ALIGNMENT;
    char *grown = realloc(text, padded + 1);
    if (!grown) {
        free(text);
        return NULL;
    }
    memset(grown + n, ' ', padded - n);
    *length = padded;
    return grown;
}

/* Makes the rename itself durable. A failure here is not reported: the new file is
 * already in place and complete, and some file systems cannot sync directories. */
static void sync_directory(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    if (!dir)
        return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(dir);
}

fl_status fl_save_safetensors(const char *path, const fl_tensor_map *map)
{
    if (!path || !map) {
        fl_error(FL_ERR_NULL, save_fn, "%s is NULL", path ? "the map" : "the path");
        return FL_ERR_NULL;
    }
    size_t count = fl_tensor_map_count(map);
    placed *order = calloc(count ? count : 1, sizeof *order);
    placed *by_index = calloc(count ? count : 1, sizeof *by_index);
    char *header = NULL;
    size_t header_length = 0;
    void *scratch = NULL;
    char temporary[4096];
    int fd = -1;
    bool created = false; /* the temporary exists and is ours to remove */
    fl_status status = FL_ERR_MEMORY;
    if (!order || !by_index) {
        fl_error(status, save_fn, "'%s': out of memory", path);
        goto done;
    }

    size_t largest = 0;
    for (size_t i = 0; i < count; i++) {
        const fl_tensor *t = fl_tensor_map_tensor_at(map, i);
        order[i] = (placed){.index = i, .element = fl_dtype_size(fl_dtype_of(t))};
        order[i].end = (uint64_t)fl_numel(t) * order[i].element; /* a size, for now */
        if (order[i].end > largest)
            largest = order[i].end;
    }
    qsort(order, count, sizeof *order, by_element_size);
    uint64_t offset = 0;
    for (size_t k = 0; k < count; k++) {
        uint64_t bytes = order[k].end;
        order[k].begin = offset;
        order[k].end = offset += bytes;
        by_index[order[k].index] = order[k];
    }
    header = build_header(map, by_index, &header_length);
    scratch = malloc(largest ? largest : 1);
    if (!header || !scratch) {
        fl_error(status, save_fn, "'%s': out of memory", path);
        goto done;
    }

    status = FL_ERR_IO;
    fd = fl_temporary_file(path, temporary, sizeof temporary);
    if (fd < 0) {
        fl_error(status, save_fn, "'%s': cannot create a temporary file beside it: %s", path, strerror(errno));
        goto done;
    }
    created = true;
    uint8_t length[8];
    for (int i = 0; i < 8; i++)
        length[i] = (uint8_t)((uint64_t)header_length >> (8 * i));
    if (!write_all(fd, length, sizeof length) || !write_all(fd, header, header_length)) {
        fl_error(status, save_fn, "'%s': writing %s: %s", path, temporary, strerror(errno));
        goto done;
    }
    for (size_t k = 0; k < count; k++) {
        size_t bytes = (size_t)(order[k].end - order[k].begin);
        if (bytes == 0)
            continue;
        fl_status rc = fl_to_host(fl_tensor_map_tensor_at(map, order[k].index), scratch, bytes);
        if (rc != FL_OK) {
            /* fl_to_host recorded why; the tensor's name goes with it if it was first. */
            status = rc;
            fl_error(rc, save_fn, "'%s': reading tensor '%s' failed", path, fl_tensor_map_name_at(map, order[k].index));
            goto done;
        }
        if (!write_all(fd, scratch, bytes)) {
            fl_error(status, save_fn, "'%s': writing %s: %s", path, temporary, strerror(errno));
            goto done;
        }
    }
    if (fsync(fd) != 0) {
        fl_error(status, save_fn, "'%s': flushing %s: %s", path, temporary, strerror(errno));
        goto done;
    }
    int rc = close(fd);
    fd = -1;
    if (rc != 0) {
        fl_error(status, save_fn, "'%s': closing %s: %s", path, temporary, strerror(errno));
        goto done;
    }
    if (rename(temporary, path) != 0) {
        fl_error(status, save_fn, "'%s': renaming %s over it: %s", path, temporary, strerror(errno));
        goto done;
    }
    created = false;
    sync_directory(path);
    status = FL_OK;

done:
    if (fd >= 0)
        close(fd);
    if (created)
        unlink(temporary);
    free(header);
    free(scratch);
    free(order);
    free(by_index);
    return status;
}

/* ---- loading ----------------------------------------------------------------------- */

static const char load_fn[] = "fl_load_safetensors";

typedef struct tensor_info {
    char *name;
    fl_dtype dtype;
    int ndim;
    int64_t shape[FL_MAX_DIMS];
    uint64_t bytes;      /* what the dtype and shape need */
    uint64_t begin, end; /* data_offsets */
} tensor_info;

typedef struct header {
    tensor_info *tensors;
    size_t count, capacity;
    char **metadata; /* key, value, key, value, ... */
    size_t metadata_count; /* pairs */
} header;

/* Why a header was refused, and the status that goes with it: FL_ERR_VALUE unless
 * the file is valid but beyond Flare (a dtype, a rank). */
#define NO_BYTE SIZE_MAX

typedef struct problem {
    fl_status status;
    char message[320];
} problem;

/* Records the problem as the message will give it: "invalid header at byte N: ..."
 * for one the parser located, "invalid header: ..." for one found in a value. */
static bool refuse_at(problem *p, fl_status status, size_t at, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static bool refuse_at(problem *p, fl_status status, size_t at, const char *fmt, ...)
{
    p->status = status;
    int n = status == FL_ERR_MEMORY ? 0
            : at == NO_BYTE         ? snprintf(p->message, sizeof p->message, "invalid header: ")
                                    : snprintf(p->message, sizeof p->message, "invalid header at byte %zu: ", at);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->message + n, sizeof p->message - (size_t)n, fmt, ap);
    va_end(ap);
    return false;
}

#define refuse(p, status, ...) refuse_at(p, status, NO_BYTE, __VA_ARGS__)

static void free_header(header *h)
{
    for (size_t i = 0; i < h->count; i++)
        free(h->tensors[i].name);
    for (size_t i = 0; i < 2 * h->metadata_count; i++)
        free(h->metadata[i]);
    free(h->tensors);
    free(h->metadata);
}

/* What a value is, for a message: an integer is shown, anything else named. */
static const char *describe(const json_t *v, char *buf, size_t size)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER:
        snprintf(buf, size, "%lld", (long long)json_integer_value(v));
        return buf;
    case JSON_REAL: return "a number with a fraction or exponent";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

static bool parse_dtype(problem *p, const char *name, const json_t *value, tensor_info *info)
{
    char buf[32];
    if (!json_is_string(value))
        return refuse(p, FL_ERR_VALUE, "tensor '%s': dtype: expected a string, found %s", name,
                      describe(value, buf, sizeof buf));
    const char *tag = json_string_value(value);
    for (size_t i = 0; i < sizeof dtype_tags / sizeof dtype_tags[0]; i++)
        if (strcmp(tag, dtype_tags[i].tag) == 0) {
            info->dtype = dtype_tags[i].dtype;
            return true;
        }
    for (size_t i = 0; i < sizeof foreign_tags / sizeof foreign_tags[0]; i++)
        if (strcmp(tag, foreign_tags[i]) == 0)
            return refuse(p, FL_ERR_DTYPE, "tensor '%s' has dtype %s, which Flare does not support", name, tag);
    return refuse(p, FL_ERR_DTYPE, "tensor '%s' has an unknown dtype '%.32s'", name, tag);
}

/* An array of at most max non-negative integers (a shape or data_offsets), whose
 * length the caller checks. */
static bool parse_integers(problem *p, const char *name, const char *field, const json_t *array, size_t max,
                           uint64_t *values)
{
    char buf[32];
    if (!json_is_array(array))
        return refuse(p, FL_ERR_VALUE, "tensor '%s': %s: expected an array, found %s", name, field,
                      describe(array, buf, sizeof buf));
    size_t i;
    json_t *v;
    json_array_foreach(array, i, v) {
        if (i == max)
            break;
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return refuse(p, FL_ERR_VALUE, "tensor '%s': %s[%zu]: expected a non-negative integer, found %s", name,
                          field, i, describe(v, buf, sizeof buf));
        values[i] = (uint64_t)json_integer_value(v);
    }
    return true;
}

static bool parse_shape(problem *p, const char *name, const json_t *value, tensor_info *info)
{
    uint64_t sizes[FL_MAX_DIMS];
    if (!parse_integers(p, name, "shape", value, FL_MAX_DIMS, sizes))
        return false;
    if (json_array_size(value) > FL_MAX_DIMS)
        return refuse(p, FL_ERR_SHAPE, "tensor '%s' has more than %d dimensions", name, FL_MAX_DIMS);
    info->ndim = (int)json_array_size(value);
    for (int d = 0; d < info->ndim; d++)
        info->shape[d] = (int64_t)sizes[d]; /* the parser refuses integers beyond int64 */
    return true;
}

static bool parse_offsets(problem *p, const char *name, const json_t *value, tensor_info *info)
{
    uint64_t offsets[2];
    if (!parse_integers(p, name, "data_offsets", value, 2, offsets))
        return false;
    if (json_array_size(value) != 2)
        return refuse(p, FL_ERR_VALUE, "tensor '%s': data_offsets needs two entries, not %zu", name,
                      json_array_size(value));
    info->begin = offsets[0];
    info->end = offsets[1];
    return true;
}

/* {"dtype": ..., "shape": [...], "data_offsets": [begin, end]}; the parser has
 * already refused a field given twice. */
static bool parse_tensor(problem *p, const char *name, json_t *entry, header *h)
{
    char buf[32];
    if (!json_is_object(entry))
        return refuse(p, FL_ERR_VALUE, "tensor '%s': expected an object, found %s", name, describe(entry, buf, sizeof buf));
    if (h->count == h->capacity) {
        size_t capacity = h->capacity ? 2 * h->capacity : 16;
        tensor_info *tensors = realloc(h->tensors, capacity * sizeof *tensors);
        if (!tensors)
            return refuse(p, FL_ERR_MEMORY, "out of memory");
        h->tensors = tensors;
        h->capacity = capacity;
    }
    tensor_info *info = &h->tensors[h->count];
    *info = (tensor_info){.name = strdup(name)};
    if (!info->name)
        return refuse(p, FL_ERR_MEMORY, "out of memory");
    h->count++;
    enum { DTYPE = 1, SHAPE = 2, OFFSETS = 4 };
    unsigned seen = 0;
    const char *field;
    json_t *value;
    json_object_foreach(entry, field, value) {
        bool ok;
        if (strcmp(field, "dtype") == 0)
            seen |= DTYPE, ok = parse_dtype(p, name, value, info);
        else if (strcmp(field, "shape") == 0)
            seen |= SHAPE, ok = parse_shape(p, name, value, info);
        else if (strcmp(field, "data_offsets") == 0)
            seen |= OFFSETS, ok = parse_offsets(p, name, value, info);
        else
            ok = refuse(p, FL_ERR_VALUE, "tensor '%s' has an unknown field '%.32s'", name, field);
        if (!ok)
            return false;
    }
    if (seen != (DTYPE | SHAPE | OFFSETS))
        return refuse(p, FL_ERR_VALUE, "tensor '%s' lacks its %s", name,
                      !(seen & DTYPE) ? "dtype" : !(seen & SHAPE) ? "shape" : "data_offsets");
    /* The non-zero sizes bound the strides even of an empty tensor. */
    uint64_t span = fl_dtype_size(info->dtype);
    bool empty = false;
    for (int d = 0; d < info->ndim; d++) {
        empty |= info->shape[d] == 0;
        if (info->shape[d] && (__builtin_mul_overflow(span, (uint64_t)info->shape[d], &span) || span > PTRDIFF_MAX))
            return refuse(p, FL_ERR_VALUE, "tensor '%s' is too large to address", name);
    }
    info->bytes = empty ? 0 : span;
    return true;
}

/* {"key": "value", ...} */
static bool parse_metadata(problem *p, json_t *object, header *h)
{
    if (!json_is_object(object))
        return refuse(p, FL_ERR_VALUE, "'__metadata__' is not an object");
    size_t count = json_object_size(object);
    h->metadata = calloc(2 * count + 1, sizeof *h->metadata);
    if (!h->metadata)
        return refuse(p, FL_ERR_MEMORY, "out of memory");
    const char *key;
    json_t *value;
    json_object_foreach(object, key, value) {
        if (!json_is_string(value))
            return refuse(p, FL_ERR_VALUE, "metadata '%s' is not a string", key);
        char **pair = &h->metadata[2 * h->metadata_count];
        pair[0] = strdup(key);
        pair[1] = strdup(json_string_value(value));
        h->metadata_count++;
        if (!pair[0] || !pair[1])
            return refuse(p, FL_ERR_MEMORY, "out of memory");
    }
    return true;
}

/* The header's text, from byte base of the file: parsed by jansson, which checks the
 * JSON itself (syntax, UTF-8, escapes, nesting depth, integer range, repeated keys),
 * then walked here for what safetensors asks of it. */
static bool parse_header(problem *p, const char *text, size_t length, size_t base, header *h)
{
    /* As the reference reader, no leading whitespace: the header must open at byte 8. */
    if (length == 0 || text[0] != '{')
        return refuse_at(p, FL_ERR_VALUE, base, "the header does not start with '{'");
    json_error_t error;
    json_t *root = json_loadb(text, length, JSON_REJECT_DUPLICATES, &error);
    if (!root) {
        /* jansson's position is just past the token its message names ("near ..."):
         * the byte given is that token's last, or the header's at its end. */
        size_t at = error.position > 0 ? (size_t)error.position - 1 : 0;
        fl_status status = json_error_code(&error) == json_error_out_of_memory ? FL_ERR_MEMORY : FL_ERR_VALUE;
        return refuse_at(p, status, base + at, "%s", error.text);
    }
    bool ok = true;
    const char *name;
    json_t *value;
    json_object_foreach(root, name, value) {
        ok = strcmp(name, "__metadata__") == 0 ? parse_metadata(p, value, h) : parse_tensor(p, name, value, h);
        if (!ok)
            break;
    }
    json_decref(root);
    return ok;
}

static fl_status load_error(const char *path, fl_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static fl_status load_error(const char *path, fl_status status, const char *fmt, ...)
{
    char message[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    fl_error(status, load_fn, "'%s': %s", path, message);
    return status;
}

/* The first bytes of a file, in hex and as text ('.' for what is not printable), for
 * a message about a file that is not what it was taken for. */
static void describe_start(const uint8_t *bytes, size_t count, char *out, size_t size)
{
    static const char digits[] = "0123456789abcdef";
    char hex[3 * 16] = "", text[16 + 1] = "";
    count = count < 16 ? count : 16;
    for (size_t i = 0; i < count; i++) {
        hex[3 * i] = digits[bytes[i] >> 4];
        hex[3 * i + 1] = digits[bytes[i] & 15];
        hex[3 * i + 2] = i + 1 < count ? ' ' : '\0';
        text[i] = bytes[i] >= 0x20 && bytes[i] < 0x7f ? (char)bytes[i] : '.';
    }
    text[count] = '\0';
    snprintf(out, size, "%s (\"%s\")", hex, text);
}

static int by_offsets(const void *a, const void *b)
{
    const tensor_info *x = *(tensor_info *const *)a, *y = *(tensor_info *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

/* Each tensor's bytes match its dtype and shape; the tensors tile the data section
 * [0, data_size) exactly. (The parser has refused a name given twice.) */
static fl_status check_layout(const char *path, header *h, uint64_t data_offset, uint64_t file_size)
{
    size_t count = h->count;
    tensor_info **sorted = malloc(count * sizeof *sorted + 1);
    if (!sorted)
        return load_error(path, FL_ERR_MEMORY, "out of memory checking %zu tensors", count);
    fl_status status = FL_OK;
    for (size_t i = 0; i < count; i++) {
        tensor_info *t = &h->tensors[i];
        char shape[FL_DESC_SIZE];
        if (t->end < t->begin) {
            status = load_error(path, FL_ERR_VALUE, "tensor '%s' has data_offsets [%llu, %llu] that end before they begin",
                                t->name, (unsigned long long)t->begin, (unsigned long long)t->end);
            goto done;
        }
        if (t->end - t->begin != t->bytes) {
            status = load_error(path, FL_ERR_VALUE, "tensor '%s' has data_offsets [%llu, %llu] (%llu bytes) but %s%s needs %llu",
                                t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                                (unsigned long long)(t->end - t->begin), tag_of(t->dtype),
                                fl_describe_shape(t->ndim, t->shape, shape), (unsigned long long)t->bytes);
            goto done;
        }
        sorted[i] = t;
    }
    qsort(sorted, count, sizeof *sorted, by_offsets);
    uint64_t covered = 0;
    for (size_t i = 0; i < count; i++) {
        tensor_info *t = sorted[i];
        if (t->begin > covered) {
            status = load_error(path, FL_ERR_VALUE, "bytes [%llu, %llu) of the data belong to no tensor (the next is '%s')",
                                (unsigned long long)covered, (unsigned long long)t->begin, t->name);
            goto done;
        }
        if (t->begin < covered) {
            status = load_error(path, FL_ERR_VALUE, "tensor '%s' at data_offsets [%llu, %llu] overlaps '%s'", t->name,
                                (unsigned long long)t->begin, (unsigned long long)t->end, sorted[i - 1]->name);
            goto done;
        }
        covered = t->end;
    }
    uint64_t data_size = file_size - data_offset;
    if (covered > data_size)
        status = load_error(path, FL_ERR_VALUE,
                            "the file is truncated: the tensors need %llu bytes of data from byte %llu, the file has %llu",
                            (unsigned long long)covered, (unsigned long long)data_offset, (unsigned long long)data_size);
    else if (covered < data_size)
        status = load_error(path, FL_ERR_VALUE, "%llu bytes after the last tensor's data (at byte %llu) belong to no tensor",
                            (unsigned long long)(data_size - covered), (unsigned long long)(data_offset + covered));
done:
    free(sorted);
    return status;
}

static bool read_at(int fd, void *bytes, size_t length, uint64_t offset)
{
    char *p = bytes;
    while (length > 0) {
        ssize_t n = pread(fd, p, length, (off_t)offset);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0)
                errno = 0; /* the file ended: it changed since it was measured */
            return false;
        }
        p += n;
        offset += (uint64_t)n;
        length -= (size_t)n;
    }
    return true;
}

/* Reads one tensor's bytes where fl_from_fill asks: straight into the tensor's
 * storage on the cpu backend. */
typedef struct tensor_read {
    const char *path;
    int fd;
    const tensor_info *t;
    uint64_t at; /* the tensor's first byte in the file */
} tensor_read;

static fl_status read_tensor(void *data, size_t bytes, void *context)
{
    const tensor_read *r = context;
    unsigned char *values = data;
    if (!read_at(r->fd, values, bytes, r->at))
        return load_error(r->path, errno ? FL_ERR_IO : FL_ERR_VALUE, "reading tensor '%s' at byte %llu: %s",
                          r->t->name, (unsigned long long)r->at, errno ? strerror(errno) : "the file ended");
    if (r->t->dtype == FL_BOOL)
        for (size_t k = 0; k < bytes; k++)
            if (values[k] > 1)
                return load_error(r->path, FL_ERR_VALUE, "tensor '%s' of dtype BOOL holds %u at byte %llu",
                                  r->t->name, values[k], (unsigned long long)(r->at + k));
    return FL_OK;
}

static fl_status read_tensors(const char *path, int fd, const header *h, uint64_t data_offset, fl_tensor_map *map)
{
    for (size_t i = 0; i < h->count; i++) {
        const tensor_info *t = &h->tensors[i];
        tensor_read r = {.path = path, .fd = fd, .t = t, .at = data_offset + t->begin};
        /* The map keeps the only reference: ours (taken from a scope, if one is
         * open) is dropped once the map has its own. */
        fl_tensor *tensor = fl_keep(fl_from_fill(t->dtype, t->ndim, t->shape, read_tensor, &r));
        fl_status status = tensor ? fl_tensor_map_set(map, t->name, tensor) : fl_last_status();
        fl_release(tensor);
        if (status != FL_OK)
            return status;
    }
    return FL_OK;
}

fl_status fl_load_safetensors(const char *path, fl_tensor_map **out)
{
    if (out)
        *out = NULL;
    if (!path || !out) {
        fl_error(FL_ERR_NULL, load_fn, "%s is NULL", path ? "out" : "the path");
        return FL_ERR_NULL;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return load_error(path, FL_ERR_IO, "%s", strerror(errno));
    header h = {0};
    char *text = NULL;
    fl_tensor_map *map = NULL;
    fl_status status;
    struct stat st;
    uint8_t prefix[8];
    if (fstat(fd, &st) != 0) {
        status = load_error(path, FL_ERR_IO, "%s", strerror(errno));
        goto done;
    }
    if (!S_ISREG(st.st_mode)) {
        status = load_error(path, FL_ERR_IO, "not a regular file");
        goto done;
    }
    uint64_t file_size = (uint64_t)st.st_size;
    if (file_size < sizeof prefix) {
        status = load_error(path, FL_ERR_VALUE, "the file has %llu bytes, too few for the 8-byte header length",
                            (unsigned long long)file_size);
        goto done;
    }
    uint8_t start[16];
    size_t start_count = file_size < sizeof start ? (size_t)file_size : sizeof start;
    if (!read_at(fd, start, start_count, 0)) {
        status = load_error(path, FL_ERR_IO, "reading the header length: %s", errno ? strerror(errno) : "the file ended");
        goto done;
    }
    memcpy(prefix, start, sizeof prefix);
    uint64_t length = 0;
    for (int i = 7; i >= 0; i--)
        length = length << 8 | prefix[i];
    /* A header opens with '{' at byte 8; without it, a length out of bounds means a
     * file of another kind (a PyTorch zip, text), not a damaged one. */
    uint8_t first = start_count > sizeof prefix ? start[sizeof prefix] : 0;
    bool opens = first == '{';
    /* Whitespace before the '{' is a damaged header, which the parser names. */
    bool other_kind = !opens && first != ' ' && first != '\t' && first != '\r' && first != '\n';
    if (length > MAX_HEADER_BYTES || (length > file_size - sizeof prefix && !opens)) {
        char seen[128];
        describe_start(start, start_count, seen, sizeof seen);
        status = load_error(path, FL_ERR_VALUE, "not a safetensors file: it starts with %s, whose first 8 bytes as "
                            "the header length give %llu, %s", seen, (unsigned long long)length,
                            length > MAX_HEADER_BYTES ? "above the format's limit" : "past the end of the file");
        goto done;
    }
    if (length > file_size - sizeof prefix) {
        status = load_error(path, FL_ERR_VALUE, "the header length at byte 0 is %llu, but the file has only %llu bytes after it",
                            (unsigned long long)length, (unsigned long long)(file_size - sizeof prefix));
        goto done;
    }
    if (other_kind) {
        char seen[128];
        describe_start(start, start_count, seen, sizeof seen);
        status = load_error(path, FL_ERR_VALUE, "not a safetensors file: the header does not start with '{' at byte 8; "
                            "the file starts with %s", seen);
        goto done;
    }
    text = malloc(length ? (size_t)length : 1);
    if (!text) {
        status = load_error(path, FL_ERR_MEMORY, "out of memory for a header of %llu bytes", (unsigned long long)length);
        goto done;
    }
    if (!read_at(fd, text, (size_t)length, sizeof prefix)) {
        status = load_error(path, FL_ERR_IO, "reading the header: %s", errno ? strerror(errno) : "the file ended");
        goto done;
    }
    problem p;
    if (!parse_header(&p, text, (size_t)length, sizeof prefix, &h)) {
        status = load_error(path, p.status, "%s", p.message);
        goto done;
    }
    uint64_t data_offset = sizeof prefix + length;
    status = check_layout(path, &h, data_offset, file_size);
    if (status != FL_OK)
        goto done;
    map = fl_tensor_map_create();
    if (!map) {
        status = FL_ERR_MEMORY;
        goto done;
    }
    for (size_t i = 0; i < h.metadata_count && status == FL_OK; i++)
        status = fl_tensor_map_set_metadata(map, h.metadata[2 * i], h.metadata[2 * i + 1]);
    if (status == FL_OK)
        status = read_tensors(path, fd, &h, data_offset, map);
done:
    close(fd);
    free(text);
    free_header(&h);
    if (status != FL_OK) {
        fl_tensor_map_free(map);
        return status;
    }
    *out = map;
    return FL_OK;
}
