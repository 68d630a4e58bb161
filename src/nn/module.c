/* The Module interface: members by name, traversal with PyTorch's dotted names, modes,
 * and the state dict. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flare/nn.h"
#include "internal.h"

#define NAME_MAX_LEN 256 /* a dotted name, from the root to a leaf member */

typedef struct member {
    char *name;
    union {
        fl_variable *parameter;
        fl_tensor *buffer;
        fl_module *child;
    };
} member;

typedef struct member_list {
    int count, capacity;
    member *items;
} member_list;

struct fl_module {
    int refcount;
    bool training;
    const fl_module_type *type;
    void *state;
    member_list parameters, buffers, children;
};

fl_module *fl_module_new(const fl_module_type *type, void *state)
{
    if (!type || !type->forward) {
        if (state && type && type->destroy)
            type->destroy(state);
        return fl_error(FL_ERR_NULL, "fl_module_new", "a module type needs a forward function");
    }
    fl_module *m = calloc(1, sizeof *m);
    if (!m) {
        type->destroy ? type->destroy(state) : free(state);
        return fl_error(FL_ERR_MEMORY, "fl_module_new", "out of memory");
    }
    m->refcount = 1;
    m->training = true;
    m->type = type;
    m->state = state;
    return m;
}

fl_module *fl_module_retain(fl_module *m)
{
    if (m)
        __atomic_add_fetch(&m->refcount, 1, __ATOMIC_RELAXED);
    return m;
}

void fl_module_release(fl_module *m)
{
    if (!m || __atomic_sub_fetch(&m->refcount, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    for (int i = 0; i < m->parameters.count; i++)
        fl_v_release(m->parameters.items[i].parameter), free(m->parameters.items[i].name);
    for (int i = 0; i < m->buffers.count; i++)
        fl_release(m->buffers.items[i].buffer), free(m->buffers.items[i].name);
    for (int i = 0; i < m->children.count; i++)
        fl_module_release(m->children.items[i].child), free(m->children.items[i].name);
    free(m->parameters.items);
    free(m->buffers.items);
    free(m->children.items);
    if (m->type->destroy)
        m->type->destroy(m->state);
    else
        free(m->state);
    free(m);
}

const fl_module_type *fl_module_type_of(const fl_module *m) { return m ? m->type : NULL; }
void *fl_module_state(const fl_module *m) { return m ? m->state : NULL; }

static member *find(const member_list *list, const char *name)
{
    for (int i = 0; i < list->count; i++)
        if (strcmp(list->items[i].name, name) == 0)
            return &list->items[i];
    return NULL;
}

static bool name_is_free(const char *fn, const fl_module *m, const char *name)
{
    if (!*name || strchr(name, '.') || strlen(name) >= NAME_MAX_LEN / 4)
        return fl_error(FL_ERR_VALUE, fn, "'%s' is not a member name (non-empty, short, without '.')", name), false;
    if (find(&m->parameters, name) || find(&m->buffers, name) || find(&m->children, name))
        return fl_error(FL_ERR_VALUE, fn, "%s already has a member named '%s'", m->type->name, name), false;
    return true;
}

static member *append(const char *fn, member_list *list, const char *name)
{
    if (list->count == list->capacity) {
        int capacity = list->capacity ? 2 * list->capacity : 4;
        member *items = realloc(list->items, (size_t)capacity * sizeof *items);
        if (!items)
            return fl_error(FL_ERR_MEMORY, fn, "out of memory");
        list->items = items;
        list->capacity = capacity;
    }
    char *copy = strdup(name);
    if (!copy)
        return fl_error(FL_ERR_MEMORY, fn, "out of memory");
    member *slot = &list->items[list->count++];
    slot->name = copy;
    return slot;
}

fl_status fl_module_add_parameter(fl_module *m, const char *name, fl_variable *parameter)
{
    const char *fn = "fl_module_add_parameter";
    if (fl_null_args(fn, 3, m, name, parameter))
        return fl_last_status();
    if (!fl_v_is_leaf(parameter) || !fl_v_requires_grad(parameter))
        return fl_error(FL_ERR_VALUE, fn, "'%s' is not a leaf variable that requires a gradient", name),
               FL_ERR_VALUE;
    member *slot = name_is_free(fn, m, name) ? append(fn, &m->parameters, name) : NULL;
    if (!slot)
        return fl_last_status();
    slot->parameter = fl_v_retain(parameter);
    return FL_OK;
}

fl_status fl_module_add_buffer(fl_module *m, const char *name, const fl_tensor *buffer)
{
    const char *fn = "fl_module_add_buffer";
    if (fl_null_args(fn, 3, m, name, buffer))
        return fl_last_status();
    member *slot = name_is_free(fn, m, name) ? append(fn, &m->buffers, name) : NULL;
    if (!slot)
        return fl_last_status();
    slot->buffer = fl_retain(buffer);
    return FL_OK;
}

fl_status fl_module_add_child(fl_module *m, const char *name, fl_module *child)
{
    const char *fn = "fl_module_add_child";
    if (fl_null_args(fn, 3, m, name, child)) {
        fl_module_release(child);
        return fl_last_status();
    }
    member *slot = name_is_free(fn, m, name) ? append(fn, &m->children, name) : NULL;
    if (!slot) {
        fl_module_release(child);
        return fl_last_status();
    }
    slot->child = child;
    child->training = m->training;
    return FL_OK;
}

fl_variable *fl_module_parameter(const fl_module *m, const char *name)
{
    member *found = m && name ? find(&m->parameters, name) : NULL;
    return found ? found->parameter : NULL;
}

fl_tensor *fl_module_buffer(const fl_module *m, const char *name)
{
    member *found = m && name ? find(&m->buffers, name) : NULL;
    return found ? found->buffer : NULL;
}

fl_module *fl_module_child(const fl_module *m, const char *name)
{
    member *found = m && name ? find(&m->children, name) : NULL;
    return found ? found->child : NULL;
}

int fl_module_child_count(const fl_module *m) { return m ? m->children.count : 0; }

fl_module *fl_module_child_at(const fl_module *m, int i, const char **name)
{
    if (!m || i < 0 || i >= m->children.count)
        return NULL;
    if (name)
        *name = m->children.items[i].name;
    return m->children.items[i].child;
}

static bool same_shape_and_dtype(const char *fn, const char *name, const fl_tensor *now, const fl_tensor *value)
{
    if (fl_dtype_of(now) == fl_dtype_of(value) && fl_same_shape(now, value))
        return true;
    char a[FL_DESC_SIZE], b[FL_DESC_SIZE];
    fl_error(FL_ERR_SHAPE, fn, "'%s' is %s, not %s", name, fl_describe(now, a), fl_describe(value, b));
    return false;
}

fl_status fl_module_set_buffer(fl_module *m, const char *name, const fl_tensor *value)
{
    const char *fn = "fl_module_set_buffer";
    if (fl_null_args(fn, 3, m, name, value))
        return fl_last_status();
    member *found = find(&m->buffers, name);
    if (!found)
        return fl_error(FL_ERR_VALUE, fn, "%s has no buffer '%s'", m->type->name, name), FL_ERR_VALUE;
    if (fl_mixed_backends(fn, 2, found->buffer, value))
        return FL_ERR_VALUE;
    if (!same_shape_and_dtype(fn, name, found->buffer, value))
        return FL_ERR_SHAPE;
    fl_tensor *old = found->buffer;
    found->buffer = fl_retain(value);
    fl_release(old);
    return FL_OK;
}

fl_variable *fl_module_forward(fl_module *m, fl_variable *x)
{
    if (fl_null_args("fl_module_forward", 2, m, x))
        return NULL;
    return m->type->forward(m, x);
}

unsigned fl_module_accepted(const fl_module *m, int *max_inputs)
{
    int inputs = 1;
    unsigned accepts = 0;
    if (m && m->type->forward_args) {
        if (m->type->accepted) {
            accepts = m->type->accepted(m, &inputs);
        } else {
            inputs = m->type->max_inputs > 1 ? m->type->max_inputs : 1;
            accepts = m->type->accepts;
        }
    }
    if (max_inputs)
        *max_inputs = inputs;
    return accepts;
}

static const char *const argument_names[] = {"key_padding_mask",        "attn_mask",   "is_causal",
                                             "memory_key_padding_mask", "memory_mask", "memory_is_causal"};

unsigned fl__module_args_given(const fl_module_args *args, int *inputs)
{
    int count = 0;
    while (count < FL_MODULE_MAX_INPUTS && args->inputs[count])
        count++;
    if (inputs)
        *inputs = count;
    return (args->key_padding_mask ? FL_ARG_KEY_PADDING_MASK : 0u) | (args->attn_mask ? FL_ARG_ATTN_MASK : 0u) |
           (args->is_causal ? FL_ARG_IS_CAUSAL : 0u) |
           (args->memory_key_padding_mask ? FL_ARG_MEMORY_KEY_PADDING_MASK : 0u) |
           (args->memory_mask ? FL_ARG_MEMORY_MASK : 0u) | (args->memory_is_causal ? FL_ARG_MEMORY_IS_CAUSAL : 0u);
}

void fl__module_args_describe(int inputs, unsigned named, char *out, size_t size)
{
    int n = snprintf(out, size, "%d input%s", inputs, inputs == 1 ? "" : "s");
    for (int i = 0; i < 6 && n >= 0 && (size_t)n < size; i++)
        if (named & (1u << i))
            n += snprintf(out + n, size - (size_t)n, ", %s", argument_names[i]);
}

fl_status fl__module_args_check(const char *fn, const fl_module_args *args)
{
    if (fl_null_args(fn, 1, args))
        return fl_last_status();
    if (!args->inputs[0])
        return fl_error(FL_ERR_NULL, fn, "inputs[0] is NULL: a module call needs its first input"), FL_ERR_NULL;
    int count;
    fl__module_args_given(args, &count);
    for (int i = count + 1; i < FL_MODULE_MAX_INPUTS; i++)
        if (args->inputs[i])
            return fl_error(FL_ERR_VALUE, fn,
                            "inputs[%d] is given after a NULL inputs[%d]: inputs end at the first NULL", i, count),
                   FL_ERR_VALUE;
    return FL_OK;
}

fl_variable *fl_module_forward_args(fl_module *m, const fl_module_args *args)
{
    const char *fn = "fl_module_forward_args";
    if (fl_null_args(fn, 1, m) || fl__module_args_check(fn, args) != FL_OK)
        return NULL;
    int count, max_inputs;
    unsigned given = fl__module_args_given(args, &count);
    unsigned accepts = fl_module_accepted(m, &max_inputs);
    if (count > max_inputs || (given & ~accepts)) {
        char passed[256], taken[256];
        fl__module_args_describe(count, given, passed, sizeof passed);
        fl__module_args_describe(max_inputs, accepts, taken, sizeof taken);
        return fl_error(FL_ERR_VALUE, fn, "%s takes at most %s; given %s", m->type->name, taken, passed);
    }
    if (m->type->forward_args)
        return m->type->forward_args(m, args);
    return m->type->forward(m, args->inputs[0]);
}

void fl_module_train(fl_module *m, bool training)
{
    if (!m)
        return;
    m->training = training;
    for (int i = 0; i < m->children.count; i++)
        fl_module_train(m->children.items[i].child, training);
}

bool fl_module_is_training(const fl_module *m) { return m && m->training; }

/* ---- traversal ---- */

/* Calls visit for every parameter (buffers too, if with_buffers) below m, in
 * state_dict order, with its dotted name; stops at the first non-OK status. */
typedef fl_status (*visit_fn)(const char *name, member *item, bool is_parameter, void *user);

static fl_status walk(const fl_module *m, char *prefix, size_t length, bool with_buffers, visit_fn visit, void *user)
{
    const member_list *lists[2] = {&m->parameters, &m->buffers};
    for (int l = 0; l < (with_buffers ? 2 : 1); l++) {
        for (int i = 0; i < lists[l]->count; i++) {
            member *item = &lists[l]->items[i];
            if (length + strlen(item->name) + 1 > NAME_MAX_LEN)
                return fl_error(FL_ERR_VALUE, "fl_module", "a name longer than %d bytes below '%s'", NAME_MAX_LEN,
                                prefix),
                       FL_ERR_VALUE;
            strcpy(prefix + length, item->name);
            fl_status status = visit(prefix, item, l == 0, user);
            if (status != FL_OK)
                return status;
        }
    }
    for (int i = 0; i < m->children.count; i++) {
        const member *child = &m->children.items[i];
        size_t grown = length + strlen(child->name) + 1;
        if (grown + 1 > NAME_MAX_LEN)
            return fl_error(FL_ERR_VALUE, "fl_module", "a name longer than %d bytes below '%s'", NAME_MAX_LEN,
                            prefix),
                   FL_ERR_VALUE;
        sprintf(prefix + length, "%s.", child->name);
        fl_status status = walk(child->child, prefix, grown, with_buffers, visit, user);
        if (status != FL_OK)
            return status;
    }
    prefix[length] = '\0';
    return FL_OK;
}

static fl_status collect_parameter(const char *name, member *item, bool is_parameter, void *user)
{
    fl_parameters *p = user;
    fl_variable **items = realloc(p->items, (p->count + 1) * sizeof *items);
    if (items)
        p->items = items;
    char **names = realloc(p->names, (p->count + 1) * sizeof *names);
    if (names)
        p->names = names;
    char *copy = strdup(name);
    if (!items || !names || !copy) {
        free(copy);
        return fl_error(FL_ERR_MEMORY, "fl_module_parameters", "out of memory"), FL_ERR_MEMORY;
    }
    p->items[p->count] = fl_v_retain(item->parameter);
    p->names[p->count++] = copy;
    return FL_OK;
}

fl_parameters *fl_module_parameters(const fl_module *m)
{
    if (fl_null_args("fl_module_parameters", 1, m))
        return NULL;
    fl_parameters *p = calloc(1, sizeof *p);
    if (!p)
        return fl_error(FL_ERR_MEMORY, "fl_module_parameters", "out of memory");
    char prefix[NAME_MAX_LEN] = "";
    if (walk(m, prefix, 0, false, collect_parameter, p) != FL_OK) {
        fl_parameters_free(p);
        return NULL;
    }
    return p;
}

void fl_parameters_free(fl_parameters *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->count; i++)
        fl_v_release(p->items[i]), free(p->names[i]);
    free(p->items);
    free(p->names);
    free(p);
}

static fl_status count_scalars(const char *name, member *item, bool is_parameter, void *user)
{
    *(int64_t *)user += fl_numel(fl_v_value(item->parameter));
    return FL_OK;
}

int64_t fl_module_parameter_count(const fl_module *m)
{
    int64_t total = 0;
    char prefix[NAME_MAX_LEN] = "";
    if (m)
        walk(m, prefix, 0, false, count_scalars, &total);
    return total;
}

static fl_status zero_grad(const char *name, member *item, bool is_parameter, void *user)
{
    fl_v_zero_grad(item->parameter);
    return FL_OK;
}

void fl_module_zero_grad(fl_module *m)
{
    char prefix[NAME_MAX_LEN] = "";
    if (m)
        walk(m, prefix, 0, false, zero_grad, NULL);
}

/* ---- state dict ---- */

static const fl_tensor *value_of(const member *item, bool is_parameter)
{
    return is_parameter ? fl_v_value(item->parameter) : item->buffer;
}

static fl_status put_entry(const char *name, member *item, bool is_parameter, void *user)
{
    return fl_tensor_map_set(user, name, value_of(item, is_parameter));
}

fl_status fl_module_state_dict(const fl_module *m, fl_tensor_map *out)
{
    if (fl_null_args("fl_module_state_dict", 2, m, out))
        return fl_last_status();
    char prefix[NAME_MAX_LEN] = "";
    return walk(m, prefix, 0, true, put_entry, out);
}

/* ---- moving to another backend ---- */

/* Every member moved so far, with the backend it came from, so that a failed move
 * can put them back. */
typedef struct moved_member {
    member *item;
    bool is_parameter;
    const char *from;
} moved_member;

typedef struct moving {
    const char *backend;
    size_t count, capacity;
    moved_member *items;
} moving;

/* Moves one member to backend; a buffer is replaced by its copy there. */
static fl_status move_member(member *item, bool is_parameter, const char *backend)
{
    if (is_parameter)
        return fl_v_to_backend(item->parameter, backend);
    fl_scope scope = fl_scope_begin();
    fl_tensor *moved = fl_to_backend(item->buffer, backend);
    if (moved) {
        fl_release(item->buffer);
        item->buffer = fl_retain(moved);
    }
    fl_scope_end(scope);
    return moved ? FL_OK : fl_last_status();
}

static fl_status move_entry(const char *name, member *item, bool is_parameter, void *user)
{
    moving *mv = user;
    if (mv->count == mv->capacity) {
        size_t capacity = mv->capacity ? 2 * mv->capacity : 16;
        moved_member *items = realloc(mv->items, capacity * sizeof *items);
        if (!items)
            return fl_error(FL_ERR_MEMORY, "fl_module_to_backend", "out of memory"), FL_ERR_MEMORY;
        mv->items = items;
        mv->capacity = capacity;
    }
    const char *from = fl_backend_name(value_of(item, is_parameter));
    fl_status status = move_member(item, is_parameter, mv->backend);
    if (status == FL_OK)
        mv->items[mv->count++] = (moved_member){item, is_parameter, from};
    return status;
}

fl_status fl_module_to_backend(fl_module *m, const char *backend)
{
    const char *fn = "fl_module_to_backend";
    if (fl_null_args(fn, 2, m, backend))
        return fl_last_status();
    if (!fl_backend_find(backend))
        return fl_error(FL_ERR_VALUE, fn, "no backend named '%s' is registered", backend), FL_ERR_VALUE;
    char prefix[NAME_MAX_LEN] = "";
    moving mv = {.backend = backend};
    fl_status status = walk(m, prefix, 0, true, move_entry, &mv);
    /* A failure part way (a device out of memory) puts back what had moved, newest
     * first, so that the model is never left on two backends. */
    for (size_t i = mv.count; status != FL_OK && i-- > 0;)
        move_member(mv.items[i].item, mv.items[i].is_parameter, mv.items[i].from);
    free(mv.items);
    return status;
}

/* Names for a message: how many, and the first LISTED_NAMES of them quoted. */
enum { LISTED_NAMES = 10 };
typedef struct name_list {
    size_t count;
    char text[768];
} name_list;

static void list_name(name_list *l, const char *name)
{
    if (l->count++ < LISTED_NAMES) {
        size_t n = strlen(l->text);
        snprintf(l->text + n, sizeof l->text - n, "%s'%s'", n ? ", " : "", name);
    }
}

static void list_rest(name_list *l)
{
    size_t n = strlen(l->text);
    if (l->count > LISTED_NAMES)
        snprintf(l->text + n, sizeof l->text - n, ", and %zu more", l->count - LISTED_NAMES);
}

typedef struct loading {
    const fl_tensor_map *map;
    bool apply;      /* false: check only; true: replace values (checks passed) */
    size_t found;    /* names of the module present in the map */
    name_list missing; /* names of the module missing from the map */
} loading;

static fl_status load_entry(const char *name, member *item, bool is_parameter, void *user)
{
    loading *l = user;
    const fl_tensor *now = value_of(item, is_parameter);
    fl_tensor *given = fl_tensor_map_contains(l->map, name) ? fl_tensor_map_get(l->map, name) : NULL;
    if (!given) {
        list_name(&l->missing, name);
        return FL_OK;
    }
    l->found++;
    if (!fl_same_shape(now, given)) {
        char a[FL_DESC_SIZE], b[FL_DESC_SIZE];
        return fl_error(FL_ERR_SHAPE, "fl_module_load_state_dict", "'%s' is %s in the module but %s in the map",
                         name, fl_describe(now, a), fl_describe(given, b)),
               FL_ERR_SHAPE;
    }
    if (!l->apply)
        return FL_OK;
    /* The map's tensor itself where it has the member's dtype and backend (a value
     * never changes, so sharing it is invisible, and loading a checkpoint then needs
     * no second copy of its weights), else converted and moved: a map read from a
     * file is on the default backend. */
    fl_scope scope = fl_scope_begin();
    fl_tensor *copy = fl_to_backend(fl_cast(given, fl_dtype_of(now)), fl_backend_name(now));
    fl_status status = copy ? FL_OK : fl_last_status();
    if (copy && is_parameter)
        status = fl_v_set_value(item->parameter, copy);
    else if (copy) {
        fl_release(item->buffer);
        item->buffer = fl_retain(copy);
    }
    fl_scope_end(scope);
    return status;
}

fl_status fl_module_load_state_dict(fl_module *m, const fl_tensor_map *map, bool strict)
{
    const char *fn = "fl_module_load_state_dict";
    if (fl_null_args(fn, 2, m, map))
        return fl_last_status();
    char prefix[NAME_MAX_LEN] = "";
    loading check = {.map = map};
    fl_status status = walk(m, prefix, 0, true, load_entry, &check);
    if (status != FL_OK)
        return status;
    name_list unexpected = {0};
    if (strict && check.found != fl_tensor_map_count(map)) {
        /* Some names of the map are not in the module: find them all. */
        fl_tensor_map *names = fl_tensor_map_create();
        status = names ? fl_module_state_dict(m, names) : FL_ERR_MEMORY;
        for (size_t i = 0; status == FL_OK && i < fl_tensor_map_count(map); i++) {
            const char *name = fl_tensor_map_name_at(map, i);
            if (!fl_tensor_map_contains(names, name))
                list_name(&unexpected, name);
        }
        fl_tensor_map_free(names);
        if (status != FL_OK)
            return status;
    }
    if (strict && (check.missing.count || unexpected.count)) {
        list_rest(&check.missing);
        list_rest(&unexpected);
        char missing[900] = "", extra[900] = "";
        if (check.missing.count)
            snprintf(missing, sizeof missing, "%zu name%s of the module %s missing from the map: %s",
                     check.missing.count, check.missing.count == 1 ? "" : "s", check.missing.count == 1 ? "is" : "are",
                     check.missing.text);
        if (unexpected.count)
            snprintf(extra, sizeof extra, "%zu name%s of the map %s not in the module: %s", unexpected.count,
                     unexpected.count == 1 ? "" : "s", unexpected.count == 1 ? "is" : "are", unexpected.text);
        return fl_error(FL_ERR_VALUE, fn, "%s%s%s", missing, *missing && *extra ? "; " : "", extra), FL_ERR_VALUE;
    }
    loading apply = {.map = map, .apply = true};
    return walk(m, prefix, 0, true, load_entry, &apply);
}

/* ---- for weight normalization (src/nn/internal.h) ---- */

fl_variable *fl__module_exchange_parameter(fl_module *m, const char *name, fl_variable *value)
{
    member *found = find(&m->parameters, name);
    if (!found)
        return fl_error(FL_ERR_VALUE, "fl_module", "%s has no parameter '%s'", m->type->name, name);
    fl_variable *old = found->parameter;
    found->parameter = value;
    return old;
}

/* ---- for the layers (src/nn/internal.h) ---- */

fl_variable *fl__nn_parameter(fl_module *m, const char *name, int ndim, const int64_t *shape)
{
    if (!m)
        return NULL;
    fl_scope scope = fl_scope_begin();
    /* Zeros; with initialization off, one zero broadcast to the shape, which holds no
     * memory for the checkpoint that is about to replace it. */
    fl_tensor *zeros = fl__nn_initializing() ? fl_zeros(FL_F32, ndim, shape)
                                             : fl_expand(fl_zeros(FL_F32, 0, NULL), ndim, shape);
    fl_variable *p = fl_v_new(zeros, true);
    fl_status status = p ? fl_module_add_parameter(m, name, p) : fl_last_status();
    fl_scope_end(scope);
    return status == FL_OK ? fl_module_parameter(m, name) : NULL;
}

bool fl__nn_check_input(const fl_module *m, const fl_variable *x, int min_ndim, int max_ndim, int channel_axis,
                        int64_t channels, const char *what)
{
    const fl_tensor *t = fl_v_value(x);
    int ndim = fl_ndim(t);
    if (ndim >= min_ndim && ndim <= max_ndim && (channel_axis < 0 || fl_shape(t)[channel_axis] == channels))
        return true;
    char got[FL_DESC_SIZE];
    fl_error(FL_ERR_SHAPE, m->type->name, "expects %s, got %s", what, fl_describe(t, got));
    return false;
}

static void release_variable(void *v) { fl_v_release(v); }

fl_variable *fl__nn_identity(fl_variable *x)
{
    return x ? fl_scope_own(fl_v_retain(x), release_variable) : NULL;
}
