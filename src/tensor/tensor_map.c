/* Named tensor collections: tensors and metadata strings by name, in insertion
 * order, found through a small open-addressing hash table so that files with many
 * thousands of tensors load in linear time. */
#include <stdlib.h>
#include <string.h>

#include "flare/tensor_map.h"
#include "internal.h"

/* Names with values, in insertion order, indexed by a hash of the name. */
typedef struct named_list {
    char **names;
    void **values;
    size_t count, capacity;
    size_t *slots; /* an entry's index + 1, or 0 for an empty slot */
    size_t slot_count; /* a power of two, at least twice count */
} named_list;

struct fl_tensor_map {
    named_list tensors;  /* values are fl_tensor * (references the map owns) */
    named_list metadata; /* values are malloc'd strings */
};

/* Names and metadata become JSON strings in a safetensors header, which must be
 * UTF-8: no overlong forms, no surrogates. (jansson checks the same when it writes
 * them, but cannot tell a bad string from a failed allocation.) */
static bool utf8_valid(const char *text)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t length = strlen(text), i = 0;
    while (i < length) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n;
        unsigned min, code;
        if (c >= 0xc2 && c <= 0xdf)
            n = 1, min = 0x80, code = c & 0x1f;
        else if (c >= 0xe0 && c <= 0xef)
            n = 2, min = 0x800, code = c & 0x0f;
        else if (c >= 0xf0 && c <= 0xf4)
            n = 3, min = 0x10000, code = c & 0x07;
        else
            return false;
        if (length - i <= n)
            return false;
        for (size_t k = 1; k <= n; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
            code = (code << 6) | (s[i + k] & 0x3f);
        }
        if (code < min || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff))
            return false;
        i += n + 1;
    }
    return true;
}

static size_t hash(const char *s)
{
    uint64_t h = 1469598103934665603u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211u;
    return (size_t)h;
}

static size_t find(const named_list *list, const char *name)
{
    if (!list->slot_count)
        return SIZE_MAX;
    size_t mask = list->slot_count - 1;
    for (size_t s = hash(name) & mask; list->slots[s]; s = (s + 1) & mask)
        if (strcmp(list->names[list->slots[s] - 1], name) == 0)
            return list->slots[s] - 1;
    return SIZE_MAX;
}

static void place(named_list *list, size_t index)
{
    size_t mask = list->slot_count - 1, s = hash(list->names[index]) & mask;
    while (list->slots[s])
        s = (s + 1) & mask;
    list->slots[s] = index + 1;
}

/* Appends name (copied) with value; false if memory runs out. */
static bool append(named_list *list, const char *name, void *value)
{
    if (list->count == list->capacity) {
        size_t capacity = list->capacity ? 2 * list->capacity : 8;
        char **names = realloc(list->names, capacity * sizeof *names);
        if (!names)
            return false;
        list->names = names;
        void **values = realloc(list->values, capacity * sizeof *values);
        if (!values)
            return false;
        list->values = values;
        list->capacity = capacity;
    }
    if (2 * (list->count + 1) > list->slot_count) {
        size_t slot_count = list->slot_count ? 2 * list->slot_count : 16;
        size_t *slots = calloc(slot_count, sizeof *slots);
        if (!slots)
            return false;
        free(list->slots);
        list->slots = slots;
        list->slot_count = slot_count;
        for (size_t i = 0; i < list->count; i++)
            place(list, i);
    }
    char *copy = strdup(name);
    if (!copy)
        return false;
    list->names[list->count] = copy;
    list->values[list->count] = value;
    place(list, list->count++);
    return true;
}

static void free_list(named_list *list, void (*free_value)(void *))
{
    for (size_t i = 0; i < list->count; i++) {
        free(list->names[i]);
        free_value(list->values[i]);
    }
    free(list->names);
    free(list->values);
    free(list->slots);
}

static void release_tensor(void *t) { fl_release(t); }

fl_tensor_map *fl_tensor_map_create(void)
{
    fl_tensor_map *map = calloc(1, sizeof *map);
    if (!map)
        return fl_error(FL_ERR_MEMORY, "fl_tensor_map_create", "out of memory");
    return map;
}

void fl_tensor_map_free(fl_tensor_map *map)
{
    if (!map)
        return;
    free_list(&map->tensors, release_tensor);
    free_list(&map->metadata, free);
    free(map);
}

fl_status fl_tensor_map_set(fl_tensor_map *map, const char *name, const fl_tensor *value)
{
    static const char fn[] = "fl_tensor_map_set";
    if (!map || !name) {
        fl_error(FL_ERR_NULL, fn, "%s is NULL", map ? "the name" : "the map");
        return FL_ERR_NULL;
    }
    if (!value) {
        /* Either the caller's NULL, or an earlier failure's, whose error is kept. */
        if (fl_last_status() == FL_OK)
            fl_error(FL_ERR_NULL, fn, "the tensor for '%s' is NULL", name);
        return fl_last_status();
    }
    if (!utf8_valid(name)) {
        fl_error(FL_ERR_VALUE, fn, "the name is not valid UTF-8");
        return FL_ERR_VALUE;
    }
    if (strcmp(name, "__metadata__") == 0) {
        fl_error(FL_ERR_VALUE, fn, "the name '__metadata__' is reserved for the file's metadata");
        return FL_ERR_VALUE;
    }
    size_t i = find(&map->tensors, name);
    fl_tensor *tensor = fl_retain(value);
    if (i != SIZE_MAX) {
        fl_release(map->tensors.values[i]);
        map->tensors.values[i] = tensor;
        return FL_OK;
    }
    if (!append(&map->tensors, name, tensor)) {
        fl_release(tensor);
        fl_error(FL_ERR_MEMORY, fn, "out of memory adding '%s'", name);
        return FL_ERR_MEMORY;
    }
    return FL_OK;
}

bool fl_tensor_map_contains(const fl_tensor_map *map, const char *name)
{
    return map && name && find(&map->tensors, name) != SIZE_MAX;
}

fl_tensor *fl_tensor_map_get(const fl_tensor_map *map, const char *name)
{
    if (!map || !name)
        return fl_error(FL_ERR_NULL, "fl_tensor_map_get", "%s is NULL", map ? "the name" : "the map");
    size_t i = find(&map->tensors, name);
    if (i == SIZE_MAX)
        return fl_error(FL_ERR_INDEX, "fl_tensor_map_get", "no tensor named '%s'", name);
    return map->tensors.values[i];
}

size_t fl_tensor_map_count(const fl_tensor_map *map) { return map ? map->tensors.count : 0; }

static bool in_range(const char *fn, const fl_tensor_map *map, const named_list *list, size_t i)
{
    if (!map) {
        fl_error(FL_ERR_NULL, fn, "the map is NULL");
        return false;
    }
    if (i >= list->count) {
        fl_error(FL_ERR_INDEX, fn, "index %zu is out of range for %zu entries", i, list->count);
        return false;
    }
    return true;
}

const char *fl_tensor_map_name_at(const fl_tensor_map *map, size_t i)
{
    return in_range("fl_tensor_map_name_at", map, map ? &map->tensors : NULL, i) ? map->tensors.names[i] : NULL;
}

fl_tensor *fl_tensor_map_tensor_at(const fl_tensor_map *map, size_t i)
{
    return in_range("fl_tensor_map_tensor_at", map, map ? &map->tensors : NULL, i) ? map->tensors.values[i] : NULL;
}

fl_status fl_tensor_map_set_metadata(fl_tensor_map *map, const char *key, const char *value)
{
    static const char fn[] = "fl_tensor_map_set_metadata";
    if (!map || !key || !value) {
        fl_error(FL_ERR_NULL, fn, "%s is NULL", !map ? "the map" : !key ? "the key" : "the value");
        return FL_ERR_NULL;
    }
    if (!utf8_valid(key) || !utf8_valid(value)) {
        fl_error(FL_ERR_VALUE, fn, "the %s is not valid UTF-8",
                 utf8_valid(key) ? "value" : "key");
        return FL_ERR_VALUE;
    }
    char *copy = strdup(value);
    size_t i = find(&map->metadata, key);
    if (copy && i != SIZE_MAX) {
        free(map->metadata.values[i]);
        map->metadata.values[i] = copy;
        return FL_OK;
    }
    if (!copy || !append(&map->metadata, key, copy)) {
        free(copy);
        fl_error(FL_ERR_MEMORY, fn, "out of memory adding '%s'", key);
        return FL_ERR_MEMORY;
    }
    return FL_OK;
}

const char *fl_tensor_map_metadata(const fl_tensor_map *map, const char *key)
{
    if (!map || !key)
        return NULL;
    size_t i = find(&map->metadata, key);
    return i == SIZE_MAX ? NULL : map->metadata.values[i];
}

size_t fl_tensor_map_metadata_count(const fl_tensor_map *map) { return map ? map->metadata.count : 0; }

const char *fl_tensor_map_metadata_key_at(const fl_tensor_map *map, size_t i)
{
    return in_range("fl_tensor_map_metadata_key_at", map, map ? &map->metadata : NULL, i) ? map->metadata.names[i]
                                                                                          : NULL;
}
