/*
 * The OpenCL backend's table: tensor storage, views, transfers, fills and the
 * program launcher the kernel files share. The kernels themselves live in one file
 * per family (opencl.h).
 */
#include "opencl.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- storage and views ---- */

void ocl_dense_strides(int ndim, const int64_t *shape, int64_t *strides)
{
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= shape[i];
    }
}

static bool strides_contiguous(const fl_tensor *t, const int64_t *strides)
{
    int64_t expect = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && strides[i] != expect)
            return false;
        expect *= t->shape[i];
    }
    return true;
}

static ocl_tensor *impl_new(fl_tensor *out, ocl_state state)
{
    ocl_tensor *o = calloc(1, sizeof *o);
    if (!o) {
        fl_backend_error(FL_ERR_MEMORY, "out of host memory for a tensor record");
        return NULL;
    }
    o->state = state;
    out->impl = o;
    return o;
}

int ocl_alloc(fl_tensor *out)
{
    /* the tensor layer checked numel * element size when it made out */
    size_t bytes = (size_t)out->numel * ocl_element_size(out->dtype);
    ocl_buffer *b = ocl_buffer_new(bytes);
    if (!b)
        return FL_ERR_MEMORY;
    ocl_tensor *o = impl_new(out, OCL_VALUE);
    if (!o) {
        ocl_buffer_release(b);
        return FL_ERR_MEMORY;
    }
    o->buffer = b;
    o->contiguous = true;
    ocl_dense_strides(out->ndim, out->shape, o->strides);
    return 0;
}

int ocl_view(fl_tensor *out, const fl_tensor *base, int64_t offset, const int64_t *strides)
{
    ocl_tensor *b = ocl_impl(base);
    ocl_tensor *o = impl_new(out, OCL_VALUE);
    if (!o)
        return FL_ERR_MEMORY;
    ocl_buffer_retain(b->buffer);
    o->buffer = b->buffer;
    o->offset = offset;
    memcpy(o->strides, strides, sizeof(int64_t) * (size_t)out->ndim);
    o->contiguous = strides_contiguous(out, strides);
    return 0;
}

static void ocl_release(const fl_backend *self, fl_tensor *t)
{
    (void)self;
    ocl_tensor *o = ocl_impl(t);
    if (!o)
        return;
    ocl_buffer_release(o->buffer);
    for (int i = 0; i < 2; i++)
        if (o->args[i])
            fl_release(o->args[i]);
    free(o);
    t->impl = NULL;
}

ocl_tensor *ocl_value(const fl_tensor *t)
{
    ocl_tensor *o = ocl_impl(t);
    ocl_graph_lock();
    int rc = o->state == OCL_VALUE ? 0 : ocl_materialize(t);
    ocl_graph_unlock();
    return rc ? NULL : o;
}

/* ---- finding kernels ----
 *
 * Finding a kernel by its text means writing the text (tens of kilobytes with the
 * math prelude) and hashing it, which costs more than the launch. So kernels are
 * found by a key, what their text is made from (a kernel file's body and dtype, a
 * generated program's description, a reduction's operation and dtype), and the text
 * is written and built only the first time a key is seen. */

typedef struct known_kernel {
    uint64_t hash;
    unsigned char *key; /* a copy */
    size_t key_size;
    char *name;
    cl_kernel kernel;
    struct known_kernel *next;
} known_kernel;

#define KNOWN_BUCKETS 512
static known_kernel *known[KNOWN_BUCKETS];
static pthread_mutex_t known_lock = PTHREAD_MUTEX_INITIALIZER;

static known_kernel *known_find(uint64_t hash, const void *key, size_t key_size, const char *name)
{
    for (known_kernel *k = known[hash % KNOWN_BUCKETS]; k; k = k->next)
        if (k->hash == hash && k->key_size == key_size && memcmp(k->key, key, key_size) == 0 &&
            strcmp(k->name, name) == 0)
            return k;
    return NULL;
}

/* Remembers kernel under key and name; on no memory it is simply found by its text
 * next time. */
static void known_add(uint64_t hash, const void *key, size_t key_size, const char *name, cl_kernel kernel)
{
    known_kernel *k = calloc(1, sizeof *k);
    unsigned char *copy = malloc(key_size ? key_size : 1);
    char *name_copy = strdup(name);
    if (!k || !copy || !name_copy) {
        free(k);
        free(copy);
        free(name_copy);
        return;
    }
    memcpy(copy, key, key_size);
    *k = (known_kernel){hash, copy, key_size, name_copy, kernel, known[hash % KNOWN_BUCKETS]};
    known[hash % KNOWN_BUCKETS] = k;
}

#define SOURCE_MAX 65536

cl_kernel ocl_kernel_keyed(const void *key, size_t key_size, const char *name, ocl_source_writer write,
                           const void *arg)
{
    uint64_t hash = ocl_hash(ocl_hash(OCL_HASH_SEED, key, key_size), name, strlen(name));
    pthread_mutex_lock(&known_lock);
    known_kernel *k = known_find(hash, key, key_size, name);
    pthread_mutex_unlock(&known_lock);
    if (k)
        return k->kernel;
    char *source = malloc(SOURCE_MAX);
    if (!source) {
        fl_backend_error(FL_ERR_MEMORY, "out of host memory for a kernel's source");
        return NULL;
    }
    cl_kernel kernel = write(source, SOURCE_MAX, arg) ? ocl_kernel(source, name) : NULL;
    free(source);
    if (kernel) {
        pthread_mutex_lock(&known_lock);
        if (!known_find(hash, key, key_size, name))
            known_add(hash, key, key_size, name, kernel);
        pthread_mutex_unlock(&known_lock);
    }
    return kernel;
}

/* A kernel file's body after the prelude and "#define T". */
typedef struct body_source {
    const char *body;
    fl_dtype dtype;
} body_source;

static bool write_body(char *source, size_t size, const void *arg)
{
    const body_source *b = arg;
    int n = snprintf(source, size, "%s\n#define T %s\n%s", kg_opencl.prelude, kg_type(b->dtype), b->body);
    if (n < 0 || (size_t)n >= size) {
        fl_backend_error(FL_ERR_BACKEND, "a kernel's source is longer than %zu bytes", size);
        return false;
    }
    return true;
}

cl_kernel ocl_kernel_for(const char *body, const char *name, fl_dtype dtype)
{
    /* keyed by the body's text (some bodies are assembled per dtype in a buffer): a few
     * kilobytes, without the prelude */
    size_t length = strlen(body);
    unsigned char stack[4096], *key = length + sizeof dtype <= sizeof stack ? stack : malloc(length + sizeof dtype);
    if (!key) {
        fl_backend_error(FL_ERR_MEMORY, "out of host memory for a kernel's key");
        return NULL;
    }
    memcpy(key, &dtype, sizeof dtype);
    memcpy(key + sizeof dtype, body, length);
    body_source arg = {body, dtype};
    cl_kernel kernel = ocl_kernel_keyed(key, length + sizeof dtype, name, write_body, &arg);
    if (key != stack)
        free(key);
    return kernel;
}

/* What a generated program's text is made from, in a fixed layout (a kg_program's
 * unused slots and padding are not part of it). Returns its size. */
static size_t describe(const kg_program *p, int *key)
{
    size_t n = 0;
    key[n++] = p->ndim;
    key[n++] = p->compute;
    key[n++] = p->nleaves;
    for (int k = 0; k < p->nleaves; k++) {
        key[n++] = p->leaves[k].dtype;
        key[n++] = p->leaves[k].strided;
    }
    key[n++] = p->nslots;
    for (int j = 0; j < p->nslots; j++) {
        key[n++] = p->slots[j].op;
        key[n++] = p->slots[j].arg[0];
        key[n++] = p->slots[j].arg[1];
        key[n++] = p->slots[j].dtype;
    }
    key[n++] = p->noutputs;
    for (int k = 0; k < p->noutputs; k++)
        key[n++] = p->outputs[k];
    return n * sizeof *key;
}

typedef struct program_source {
    const char *operation;
    const kg_program *p;
} program_source;

static bool write_program(char *source, size_t size, const void *arg)
{
    const program_source *g = arg;
    if (kg_elementwise(&kg_opencl, g->p, source, size))
        return true;
    fl_backend_error(FL_ERR_DTYPE, "%s has no %s kernel", g->operation,
                     fl_dtype_name(g->p->nleaves ? g->p->leaves[0].dtype : g->p->compute));
    return false;
}

int ocl_run_program(const char *operation, const kg_program *p, const fl_tensor *const *leaves,
                    const double *constants, fl_tensor *const *outputs)
{
    int key[4 + 2 * KG_MAX_LEAVES + 4 * KG_MAX_SLOTS + KG_MAX_OUTPUTS];
    program_source arg = {operation, p};
    cl_kernel kernel = ocl_kernel_keyed(key, describe(p, key), "fused", write_program, &arg);
    if (!kernel)
        return FL_ERR_BACKEND; /* the recorded error says which, and its status wins */

    const fl_tensor *first = outputs[0];
    cl_long n = first->numel;
    cl_long8 shape = {{0}};
    for (int d = 0; d < first->ndim; d++)
        shape.s[d] = first->shape[d];
    /* at most: n, shape, 3 per leaf, a constant per slot, 2 per output */
    enum { MAX_ARGS = 2 + 3 * KG_MAX_LEAVES + KG_MAX_SLOTS + 2 * KG_MAX_OUTPUTS };
    ocl_arg args[MAX_ARGS];
    cl_long offsets[KG_MAX_LEAVES + KG_MAX_OUTPUTS];
    cl_long8 strides[KG_MAX_LEAVES];
    union {
        float f;
        double d;
    } values[KG_MAX_SLOTS];
    int nargs = 0;
    args[nargs++] = OCL_VALUE(n);
    args[nargs++] = OCL_VALUE(shape);
    for (int k = 0; k < p->nleaves; k++) {
        const ocl_tensor *o = ocl_impl(leaves[k]);
        offsets[k] = ocl_element_offset(leaves[k]);
        args[nargs++] = OCL_MEM(o->buffer);
        args[nargs++] = OCL_VALUE(offsets[k]);
        if (p->leaves[k].strided) {
            memset(&strides[k], 0, sizeof strides[k]);
            for (int d = 0; d < leaves[k]->ndim; d++)
                strides[k].s[d] = leaves[k]->shape[d] == 1 ? 0 : o->strides[d];
            args[nargs++] = OCL_VALUE(strides[k]);
        }
    }
    for (int j = 0, c = 0; j < p->nslots; j++) {
        if (p->slots[j].op != KG_CONSTANT)
            continue;
        if (p->compute == FL_F64) {
            values[j].d = constants[c++];
            args[nargs++] = (ocl_arg){&values[j].d, sizeof(double)};
        } else {
            values[j].f = (float)constants[c++];
            args[nargs++] = (ocl_arg){&values[j].f, sizeof(float)};
        }
    }
    for (int k = 0; k < p->noutputs; k++) {
        const ocl_tensor *o = ocl_impl(outputs[k]);
        offsets[KG_MAX_LEAVES + k] = ocl_element_offset(outputs[k]);
        args[nargs++] = OCL_MEM(o->buffer);
        args[nargs++] = OCL_VALUE(offsets[KG_MAX_LEAVES + k]);
    }
    return ocl_launch(operation, kernel, (size_t)n, nargs, args);
}

fl_tensor *ocl_contiguous(const fl_tensor *t)
{
    ocl_tensor *o = ocl_value(t);
    if (!o)
        return NULL;
    if (o->contiguous) {
        return fl_retain(t);
    }
    fl_tensor *copy = fl_tensor_alloc(t->backend, t->dtype, t->ndim, t->shape);
    if (!copy)
        return NULL;
    int rc = ocl_alloc(copy);
    if (!rc) {
        kg_program p = {.ndim = t->ndim, .compute = FL_F32, .nleaves = 1, .nslots = 1, .noutputs = 1};
        p.leaves[0] = (kg_leaf){t->dtype, true};
        p.slots[0] = (kg_slot){KG_LEAF, {0, -1}, t->dtype};
        rc = ocl_run_program("copy", &p, &t, NULL, &copy);
    }
    if (rc) {
        fl_release(copy);
        return NULL;
    }
    return copy;
}

/* ---- transfers and creation ---- */

static int ocl_from_host(const fl_backend *self, fl_tensor *out, const void *src)
{
    (void)self;
    int rc = ocl_alloc(out);
    if (rc)
        return rc;
    return ocl_upload(ocl_impl(out)->buffer, 0, src, (size_t)out->numel * ocl_element_size(out->dtype));
}

static int ocl_to_host(const fl_backend *self, const fl_tensor *t, void *dst)
{
    (void)self;
    fl_tensor *dense = ocl_contiguous(t);
    if (!dense)
        return FL_ERR_BACKEND;
    const ocl_tensor *o = ocl_impl(dense);
    size_t size = ocl_element_size(t->dtype);
    int rc = ocl_download(o->buffer, (size_t)o->offset * size, dst, (size_t)t->numel * size);
    fl_release(dense);
    return rc;
}

static int ocl_empty(const fl_backend *self, fl_tensor *out)
{
    (void)self;
    return ocl_alloc(out);
}

/* The bits of value in dtype, as fill kernels take them. */
static void encode(fl_dtype dtype, double value, cl_ulong *bits)
{
    *bits = 0;
    switch (dtype) {
    case FL_BOOL: *(cl_uchar *)bits = value != 0; break;
    case FL_U8: *(cl_uchar *)bits = (cl_uchar)value; break;
    case FL_I32: *(cl_int *)bits = (cl_int)value; break;
    case FL_I64: *(cl_long *)bits = (cl_long)value; break;
    case FL_F16: *(cl_ushort *)bits = fl_float_to_half((float)value); break;
    case FL_BF16: *(cl_ushort *)bits = fl_float_to_bf16((float)value); break;
    case FL_F32: *(float *)bits = (float)value; break;
    case FL_F64: *(double *)bits = value; break;
    default: break;
    }
}

static const char fill_source[] = "__kernel void fill(long n, __global T *y, long yo, T value)\n"
                                  "{ long i = get_global_id(0); if (i < n) y[yo + i] = value; }\n";

int ocl_fill_value(fl_tensor *out, double value)
{
    /* f16 and bf16 fill as their bits, a ushort */
    fl_dtype as = out->dtype == FL_F16 || out->dtype == FL_BF16 ? FL_F16 : out->dtype;
    cl_kernel k = ocl_kernel_for(fill_source, "fill", as);
    if (!k)
        return FL_ERR_BACKEND;
    ocl_tensor *o = ocl_impl(out);
    cl_long n = out->numel, yo = ocl_element_offset(out);
    cl_ulong bits;
    encode(out->dtype, value, &bits);
    ocl_arg args[] = {OCL_VALUE(n), OCL_MEM(o->buffer), OCL_VALUE(yo), {&bits, ocl_element_size(out->dtype)}};
    return ocl_launch("full", k, (size_t)n, 4, args);
}

static int ocl_fill(fl_tensor *out, double value)
{
    int rc = ocl_alloc(out);
    return rc ? rc : ocl_fill_value(out, value);
}

static int ocl_full(const fl_backend *self, fl_tensor *out, double value)
{
    (void)self;
    if (out->dtype == FL_F32) { /* a constant: no memory until read, fused as a kernel argument */
        ocl_tensor *o = impl_new(out, OCL_CONSTANT);
        if (!o)
            return FL_ERR_MEMORY;
        o->constant = (float)value;
        return 0;
    }
    return ocl_fill(out, value);
}

static const char arange_source[] =
    "__kernel void arange(long n, __global T *y, long yo, double start, double step)\n"
    "{ long i = get_global_id(0); if (i < n) y[yo + i] = (T)(start + (double)i * step); }\n";
static const char arange_float_source[] =
    "__kernel void arange(long n, __global T *y, long yo, float start, float step)\n"
    "{ long i = get_global_id(0); if (i < n) y[yo + i] = (T)(start + (float)i * step); }\n";

static int ocl_arange(const fl_backend *self, fl_tensor *out, double start, double step)
{
    (void)self;
    if (out->dtype == FL_F16 || out->dtype == FL_BF16 || out->dtype == FL_BOOL)
        return fl_backend_error(FL_ERR_DTYPE, "arange on opencl takes u8, i32, i64, f32 or f64");
    int rc = ocl_alloc(out);
    if (rc)
        return rc;
    ocl_device *dev = ocl_device_get();
    bool fp64 = dev && dev->fp64;
    cl_kernel k = ocl_kernel_for(fp64 ? arange_source : arange_float_source, "arange", out->dtype);
    if (!k)
        return FL_ERR_BACKEND;
    ocl_tensor *o = ocl_impl(out);
    cl_long n = out->numel, yo = ocl_element_offset(out);
    float fs = (float)start, ft = (float)step;
    ocl_arg args[] = {OCL_VALUE(n), OCL_MEM(o->buffer), OCL_VALUE(yo),
                      fp64 ? OCL_VALUE(start) : OCL_VALUE(fs), fp64 ? OCL_VALUE(step) : OCL_VALUE(ft)};
    return ocl_launch("arange", k, (size_t)n, 5, args);
}

static int ocl_cast(const fl_backend *self, fl_tensor *out, const fl_tensor *a)
{
    (void)self;
    if (!ocl_value(a))
        return FL_ERR_BACKEND;
    int rc = ocl_alloc(out);
    if (rc)
        return rc;
    kg_program p = {.ndim = a->ndim, .compute = FL_F32, .nleaves = 1, .nslots = 1, .noutputs = 1};
    p.leaves[0] = (kg_leaf){a->dtype, !ocl_impl(a)->contiguous};
    p.slots[0] = (kg_slot){KG_LEAF, {0, -1}, a->dtype};
    if (a->dtype != out->dtype)
        p.slots[p.nslots++] = (kg_slot){KG_CONVERT, {0, -1}, out->dtype};
    p.outputs[0] = p.nslots - 1;
    return ocl_run_program("cast", &p, &a, NULL, &out);
}

/* ---- layout ---- */

/* A constant under another shape is the same constant: no memory until read. */
static int same_constant(fl_tensor *out, const fl_tensor *a)
{
    ocl_tensor *o = impl_new(out, OCL_CONSTANT);
    if (!o)
        return FL_ERR_MEMORY;
    o->constant = ocl_impl(a)->constant;
    return 0;
}

static int ocl_reshape(const fl_backend *self, fl_tensor *out, const fl_tensor *a)
{
    (void)self;
    if (ocl_impl(a)->state == OCL_CONSTANT)
        return same_constant(out, a);
    ocl_tensor *o = ocl_value(a);
    if (!o)
        return FL_ERR_BACKEND;
    int64_t strides[FL_MAX_DIMS];
    if (fl_view_strides(a, o->strides, out->ndim, out->shape, strides))
        return ocl_view(out, a, o->offset, strides);
    fl_tensor *dense = ocl_contiguous(a);
    if (!dense)
        return FL_ERR_BACKEND;
    ocl_dense_strides(out->ndim, out->shape, strides);
    int rc = ocl_view(out, dense, ocl_impl(dense)->offset, strides);
    fl_release(dense);
    return rc;
}

static int ocl_permute(const fl_backend *self, fl_tensor *out, const fl_tensor *a, const int *axes)
{
    (void)self;
    ocl_tensor *o = ocl_value(a);
    if (!o)
        return FL_ERR_BACKEND;
    int64_t strides[FL_MAX_DIMS];
    for (int i = 0; i < out->ndim; i++)
        strides[i] = o->strides[axes[i]];
    return ocl_view(out, a, o->offset, strides);
}

static int ocl_expand(const fl_backend *self, fl_tensor *out, const fl_tensor *a)
{
    (void)self;
    if (ocl_impl(a)->state == OCL_CONSTANT)
        return same_constant(out, a);
    ocl_tensor *o = ocl_value(a);
    if (!o)
        return FL_ERR_BACKEND;
    int64_t strides[FL_MAX_DIMS];
    for (int i = 0; i < out->ndim; i++)
        strides[i] = a->shape[i] == 1 && out->shape[i] != 1 ? 0 : o->strides[i];
    return ocl_view(out, a, o->offset, strides);
}

static int ocl_slice(const fl_backend *self, fl_tensor *out, const fl_tensor *a, const int64_t *start,
                     const int64_t *step)
{
    (void)self;
    ocl_tensor *o = ocl_value(a);
    if (!o)
        return FL_ERR_BACKEND;
    int64_t offset = o->offset, strides[FL_MAX_DIMS];
    for (int i = 0; i < out->ndim; i++) {
        offset += start[i] * o->strides[i];
        strides[i] = o->strides[i] * step[i];
    }
    return ocl_view(out, a, offset, strides);
}

static int ocl_host_data(const fl_backend *self, const fl_tensor *t, void **data)
{
    (void)self;
    (void)t;
    *data = NULL;
    return fl_backend_error(FL_ERR_UNSUPPORTED, "opencl tensors live in device memory; copy with to_host");
}

static int ocl_eval(const fl_backend *self, fl_tensor *t)
{
    (void)self;
    ocl_graph_lock();
    int rc = ocl_materialize(t);
    ocl_graph_unlock();
    return rc;
}

const fl_backend *fl_opencl_backend(void)
{
    static fl_backend table;
    static bool made;
    if (!made) {
        table = (fl_backend){
            .version = FL_BACKEND_VERSION,
            .table_size = sizeof(fl_backend),
            .name = "opencl",
            .release = ocl_release,
            .eval = ocl_eval,
            .from_host = ocl_from_host,
            .to_host = ocl_to_host,
            .full = ocl_full,
            .arange = ocl_arange,
            .cast = ocl_cast,
            .reshape = ocl_reshape,
            .permute = ocl_permute,
            .expand = ocl_expand,
            .slice = ocl_slice,
            .empty = ocl_empty,
            .host_data = ocl_host_data,
        };
        ocl_register_elementwise(&table);
        ocl_register_reduce(&table);
        ocl_register_index(&table);
        ocl_register_linalg(&table);
        ocl_register_nn(&table);
        ocl_register_random(&table);
        made = true;
    }
    return &table;
}
