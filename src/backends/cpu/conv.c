/*
 * The CPU backend's convolutions: forward, gradient of the input, gradient of the
 * weight. f32 runs on oneDNN primitives; f64, which oneDNN lacks, runs as im2col and
 * OpenBLAS dgemm.
 *
 * oneDNN is given the tensors in their plain NCHW / OIHW layouts but chooses its own
 * (blocked) layouts for the computation; the plan reorders to and from them around
 * the primitive, which measures faster here than computing on plain layouts (im2col
 * and gemm) or on NHWC. Building a primitive costs far more than running a small one,
 * so plans are cached by shape, parameters, thread count and algorithm.
 *
 * The algorithm: Winograd's F(4x4, 3x3) wherever oneDNN has a kernel for the shape
 * (3x3 kernels and stride 1 among its conditions; it answers "unimplemented"
 * otherwise), direct convolution elsewhere. Winograd does 2.25x fewer
 * multiplications by transforming tiles of the input, the weight and the output
 * (docs/ARCHITECTURE.md has the measured effect and its command). It rounds
 * differently: test_linalg holds both to the f64 result within their own bounds. FLARE_CONV_ALGORITHM=direct, or
 * cpu_conv_set_algorithm, restores the direct kernels everywhere.
 */
#include <cblas.h>
#include <dnnl.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "flare/config.h"
#include "onednn.h"

typedef enum conv_pass { PASS_FORWARD, PASS_BACKWARD_DATA, PASS_BACKWARD_WEIGHTS } conv_pass;

/* Every pass has two inputs and one output; these are their shapes in pass order. */
typedef struct conv_shapes {
    int64_t x[4], w[4], y[4];
} conv_shapes;

/* ---- oneDNN plans ---- */

/* The arguments of each pass in the order the kernels receive them: inputs, output. */
static const int pass_args[3][3] = {
    {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST},
    {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC},
    {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS},
};
static const dnnl_query_t pass_queries[3][3] = {
    {dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_dst_md},
    {dnnl_query_diff_dst_md, dnnl_query_weights_md, dnnl_query_diff_src_md},
    {dnnl_query_src_md, dnnl_query_diff_dst_md, dnnl_query_diff_weights_md},
};
static const char *pass_names[3] = {"convolution", "convolution backward data", "convolution backward weights"};

typedef struct conv_key {
    conv_pass pass;
    cpu_conv_algorithm algorithm; /* the preferred one; a plan falls back to direct */
    int threads;                  /* some oneDNN kernels fix their partitioning when they are built */
    conv_shapes shapes;
    fl_conv2d_desc desc;
} conv_key;

typedef struct conv_plan {
    conv_key key;
    dnnl_primitive_t primitive;
    dnnl_memory_desc_t user[3];  /* the tensors' own plain layouts */
    dnnl_memory_desc_t inner[3]; /* the layouts the primitive computes in */
    dnnl_primitive_t reorder[3]; /* between the two, NULL where they agree */
    size_t inner_bytes[3];
    dnnl_memory_desc_t scratchpad;
    size_t scratchpad_bytes;
} conv_plan;

static void destroy_plan(void *plan)
{
    conv_plan *p = plan;
    if (!p)
        return;
    dnnl_primitive_destroy(p->primitive);
    for (int i = 0; i < 3; i++)
        dnnl_primitive_destroy(p->reorder[i]);
    free(p);
}

/* Descriptors of x, w and y in pass order; groups split the weight's first axis. */
static dnnl_status_t describe(const conv_key *k, dnnl_format_tag_t data_tag, dnnl_format_tag_t weight_tag,
                              dnnl_memory_desc_t *x, dnnl_memory_desc_t *w, dnnl_memory_desc_t *y)
{
    const conv_shapes *s = &k->shapes;
    int64_t G = k->desc.groups;
    dnnl_dims_t xd = {s->x[0], s->x[1], s->x[2], s->x[3]}, yd = {s->y[0], s->y[1], s->y[2], s->y[3]};
    dnnl_dims_t grouped = {G, s->w[0] / G, s->w[1], s->w[2], s->w[3]}, plain = {s->w[0], s->w[1], s->w[2], s->w[3]};
    dnnl_status_t st = dnnl_memory_desc_init_by_tag(x, 4, xd, dnnl_f32, data_tag);
    if (st == dnnl_success)
        st = dnnl_memory_desc_init_by_tag(y, 4, yd, dnnl_f32, data_tag);
    if (st == dnnl_success)
        st = G > 1 ? dnnl_memory_desc_init_by_tag(w, 5, grouped, dnnl_f32, weight_tag == dnnl_oihw ? dnnl_goihw : weight_tag)
                   : dnnl_memory_desc_init_by_tag(w, 4, plain, dnnl_f32, weight_tag);
    return st;
}

static dnnl_status_t build_plan(const conv_key *k, dnnl_alg_kind_t algorithm, conv_plan *p)
{
    dnnl_engine_t engine = cpu_onednn_engine();
    dnnl_memory_desc_t x, w, y, ux, uw, uy;
    const fl_conv2d_desc *d = &k->desc;
    dnnl_dims_t strides = {d->stride[0], d->stride[1]};
    dnnl_dims_t dilates = {d->dilation[0] - 1, d->dilation[1] - 1}; /* oneDNN counts the gaps */
    dnnl_dims_t padding = {d->padding[0], d->padding[1]};
    dnnl_convolution_desc_t forward, backward;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t hint = NULL, pd = NULL;
    dnnl_status_t st = describe(k, dnnl_format_tag_any, dnnl_format_tag_any, &x, &w, &y);
    if (st == dnnl_success)
        st = describe(k, dnnl_nchw, dnnl_oihw, &ux, &uw, &uy);
    if (st == dnnl_success)
        st = dnnl_dilated_convolution_forward_desc_init(&forward, dnnl_forward_training, algorithm, &x, &w,
                                                        NULL, &y, strides, dilates, padding, padding);
    if (st == dnnl_success)
        st = cpu_onednn_user_scratchpad(&attr);
    if (st == dnnl_success)
        st = dnnl_primitive_desc_create(&hint, &forward, attr, engine, NULL);
    if (st == dnnl_success && k->pass == PASS_FORWARD) {
        pd = hint;
        hint = NULL;
    } else if (st == dnnl_success) {
        st = k->pass == PASS_BACKWARD_DATA
                 ? dnnl_dilated_convolution_backward_data_desc_init(&backward, algorithm, &x, &w, &y,
                                                                    strides, dilates, padding, padding)
                 : dnnl_dilated_convolution_backward_weights_desc_init(&backward, algorithm, &x, &w,
                                                                       NULL, &y, strides, dilates, padding, padding);
        if (st == dnnl_success)
            st = dnnl_primitive_desc_create(&pd, &backward, attr, engine, hint);
    }
    if (st == dnnl_success)
        st = dnnl_primitive_create(&p->primitive, pd);
    const dnnl_memory_desc_t *users[3][3] = {{&ux, &uw, &uy}, {&uy, &uw, &ux}, {&ux, &uy, &uw}};
    for (int i = 0; i < 3 && st == dnnl_success; i++) {
        p->user[i] = *users[k->pass][i];
        p->inner[i] = *dnnl_primitive_desc_query_md(pd, pass_queries[k->pass][i], 0);
        p->inner_bytes[i] = dnnl_memory_desc_get_size(&p->inner[i]);
        if (dnnl_memory_desc_equal(&p->user[i], &p->inner[i]))
            continue;
        dnnl_primitive_desc_t reorder_pd;
        const dnnl_memory_desc_t *from = i < 2 ? &p->user[i] : &p->inner[i], *to = i < 2 ? &p->inner[i] : &p->user[i];
        st = dnnl_reorder_primitive_desc_create(&reorder_pd, from, engine, to, engine, NULL);
        if (st == dnnl_success) {
            st = dnnl_primitive_create(&p->reorder[i], reorder_pd);
            dnnl_primitive_desc_destroy(reorder_pd);
        }
    }
    if (st == dnnl_success) {
        p->scratchpad = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        p->scratchpad_bytes = dnnl_memory_desc_get_size(&p->scratchpad);
    }
    dnnl_primitive_desc_destroy(hint);
    dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_attr_destroy(attr);
    return st;
}

static dnnl_status_t new_plan(const conv_key *key, dnnl_alg_kind_t algorithm, conv_plan **out)
{
    conv_plan *p = calloc(1, sizeof *p);
    dnnl_status_t st = p ? build_plan(key, algorithm, p) : dnnl_out_of_memory;
    if (p && st == dnnl_success)
        p->key = *key;
    else {
        destroy_plan(p);
        p = NULL;
    }
    *out = p;
    return st;
}

/* The plan for key (a conv_key): Winograd where oneDNN has a kernel for the shape and
 * Winograd is preferred, else direct; NULL after an error. */
static void *build_conv_plan(const void *key)
{
    const conv_key *k = key;
    conv_plan *p = NULL;
    dnnl_status_t st = k->algorithm == CPU_CONV_WINOGRAD ? new_plan(k, dnnl_convolution_winograd, &p)
                                                         : dnnl_unimplemented;
    if (st == dnnl_unimplemented) /* no Winograd kernel for this shape on this CPU */
        st = new_plan(k, dnnl_convolution_direct, &p);
    if (st != dnnl_success)
        fl_backend_error(st == dnnl_out_of_memory ? FL_ERR_MEMORY : FL_ERR_BACKEND,
                         "oneDNN cannot build a %s (status %d)", pass_names[k->pass], (int)st);
    return p;
}

static cpu_plan_cache plans = CPU_PLAN_CACHE(conv_key, destroy_plan);

/* The primitive's own layouts and its scratchpad share one block from the memory
 * manager: a caching manager hands the same pages back call after call, where fresh
 * buffers of this size would be faulted in 4 KiB at a time on every call. */
static size_t workspace_offsets(const conv_plan *p, size_t offsets[4])
{
    size_t total = 0;
    for (int i = 0; i < 3; i++) {
        offsets[i] = total;
        total += p->reorder[i] ? (p->inner_bytes[i] + FL_MEMORY_ALIGNMENT - 1) & ~(size_t)(FL_MEMORY_ALIGNMENT - 1) : 0;
    }
    offsets[3] = total;
    return total + p->scratchpad_bytes;
}

/* Runs a plan on dense buffers: inputs in0 and in1, the output out. */
static int run_plan(const conv_plan *p, const void *in0, const void *in1, void *out)
{
    dnnl_engine_t engine = cpu_onednn_engine();
    /* oneDNN's memory objects take non-const handles; the plan only reads in0, in1. */
    void *buffers[3] = {(void *)(uintptr_t)in0, (void *)(uintptr_t)in1, out};
    dnnl_memory_t user[3] = {0}, inner[3] = {0}, scratch_memory = NULL;
    size_t offsets[4], workspace_bytes = workspace_offsets(p, offsets);
    fl_memory_manager *owner = NULL;
    char *workspace = workspace_bytes > 0 ? fl_memory_alloc(workspace_bytes, &owner) : NULL;
    dnnl_stream_t stream = NULL;
    dnnl_status_t st = workspace_bytes > 0 && !workspace ? dnnl_out_of_memory
                                                         : dnnl_stream_create(&stream, engine, dnnl_stream_default_flags);
    for (int i = 0; i < 3 && st == dnnl_success; i++) {
        st = dnnl_memory_create(&user[i], &p->user[i], engine, buffers[i]);
        if (st != dnnl_success || !p->reorder[i])
            continue;
        st = dnnl_memory_create(&inner[i], &p->inner[i], engine, workspace + offsets[i]);
        if (st == dnnl_success && i < 2) {
            dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, user[i]}, {DNNL_ARG_TO, inner[i]}};
            st = dnnl_primitive_execute(p->reorder[i], stream, 2, args);
        }
    }
    if (st == dnnl_success && p->scratchpad_bytes > 0)
        st = dnnl_memory_create(&scratch_memory, &p->scratchpad, engine, workspace + offsets[3]);
    if (st == dnnl_success) {
        dnnl_exec_arg_t args[4];
        for (int i = 0; i < 3; i++)
            args[i] = (dnnl_exec_arg_t){pass_args[p->key.pass][i], p->reorder[i] ? inner[i] : user[i]};
        args[3] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, scratch_memory};
        st = dnnl_primitive_execute(p->primitive, stream, scratch_memory ? 4 : 3, args);
    }
    if (st == dnnl_success && p->reorder[2]) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, inner[2]}, {DNNL_ARG_TO, user[2]}};
        st = dnnl_primitive_execute(p->reorder[2], stream, 2, args);
    }
    if (st == dnnl_success)
        st = dnnl_stream_wait(stream);
    for (int i = 0; i < 3; i++) {
        dnnl_memory_destroy(user[i]);
        dnnl_memory_destroy(inner[i]);
    }
    dnnl_memory_destroy(scratch_memory);
    dnnl_stream_destroy(stream);
    if (workspace)
        fl_memory_free(owner, workspace, workspace_bytes);
    if (st != dnnl_success)
        return fl_backend_error(st == dnnl_out_of_memory ? FL_ERR_MEMORY : FL_ERR_BACKEND, "oneDNN %s failed (status %d)",
                                pass_names[p->key.pass], (int)st);
    return 0;
}

static int algorithm = -1; /* a cpu_conv_algorithm; -1 until read from the environment */

void cpu_conv_set_algorithm(cpu_conv_algorithm a) { __atomic_store_n(&algorithm, (int)a, __ATOMIC_RELAXED); }

cpu_conv_algorithm cpu_conv_get_algorithm(void)
{
    int a = __atomic_load_n(&algorithm, __ATOMIC_RELAXED);
    if (a < 0) {
        const char *env = fl_config_current()->conv_algorithm;
        a = env && strcmp(env, "direct") == 0 ? CPU_CONV_DIRECT : CPU_CONV_WINOGRAD;
        __atomic_store_n(&algorithm, a, __ATOMIC_RELAXED);
    }
    return (cpu_conv_algorithm)a;
}

static int convolve_f32(conv_pass pass, const conv_shapes *shapes, const fl_conv2d_desc *d, const void *in0,
                        const void *in1, void *out)
{
    if (!cpu_onednn_engine())
        return FL_ERR_BACKEND;
    conv_key key;
    memset(&key, 0, sizeof key); /* the key is compared bytewise, padding included */
    key.pass = pass;
    key.algorithm = cpu_conv_get_algorithm();
    key.threads = cpu_threads();
    key.shapes = *shapes;
    key.desc = *d;
    conv_plan *plan = cpu_plan_acquire(&plans, &key, build_conv_plan);
    if (!plan)
        return FL_ERR_BACKEND;
    int rc = run_plan(plan, in0, in1, out);
    cpu_plan_release(&plans, plan);
    return rc;
}

/* ---- f64: im2col and dgemm ---- */

/* The sizes of one convolution; each group is a convolution of Cg channels to Kg. */
typedef struct geometry {
    int64_t N, C, H, W, K, P, Q, R, S, G, Cg, Kg;
    int64_t rows; /* of an im2col matrix: Cg * R * S */
    int64_t cols; /* P * Q */
    fl_conv2d_desc d;
} geometry;

static geometry geometry_of(const conv_shapes *s, const fl_conv2d_desc *d)
{
    geometry g = {.N = s->x[0], .C = s->x[1], .H = s->x[2], .W = s->x[3], .K = s->w[0], .R = s->w[2], .S = s->w[3],
                  .P = s->y[2], .Q = s->y[3], .G = d->groups, .d = *d};
    g.Cg = g.C / g.G;
    g.Kg = g.K / g.G;
    g.rows = g.Cg * g.R * g.S;
    g.cols = g.P * g.Q;
    return g;
}

/* col[(c, r, s)][(p, q)] = x[c][p * stride + r * dilation - padding][...], zero outside;
 * x is one group of one image. */
static void im2col(const double *x, double *col, const geometry *g)
{
    const fl_conv2d_desc *d = &g->d;
    for (int64_t c = 0; c < g->Cg; c++)
        for (int64_t r = 0; r < g->R; r++)
            for (int64_t s = 0; s < g->S; s++) {
                double *row = col + ((c * g->R + r) * g->S + s) * g->cols;
                for (int64_t p = 0; p < g->P; p++) {
                    int64_t ih = p * d->stride[0] - d->padding[0] + r * d->dilation[0];
                    double *out = row + p * g->Q;
                    if (ih < 0 || ih >= g->H) {
                        memset(out, 0, (size_t)g->Q * sizeof *out);
                        continue;
                    }
                    const double *in = x + (c * g->H + ih) * g->W;
                    for (int64_t q = 0; q < g->Q; q++) {
                        int64_t iw = q * d->stride[1] - d->padding[1] + s * d->dilation[1];
                        out[q] = iw >= 0 && iw < g->W ? in[iw] : 0.0;
                    }
                }
            }
}

/* The adjoint of im2col: adds every column entry back into x. */
static void col2im(const double *col, double *x, const geometry *g)
{
    const fl_conv2d_desc *d = &g->d;
    for (int64_t c = 0; c < g->Cg; c++)
        for (int64_t r = 0; r < g->R; r++)
            for (int64_t s = 0; s < g->S; s++) {
                const double *row = col + ((c * g->R + r) * g->S + s) * g->cols;
                for (int64_t p = 0; p < g->P; p++) {
                    int64_t ih = p * d->stride[0] - d->padding[0] + r * d->dilation[0];
                    if (ih < 0 || ih >= g->H)
                        continue;
                    double *out = x + (c * g->H + ih) * g->W;
                    for (int64_t q = 0; q < g->Q; q++) {
                        int64_t iw = q * d->stride[1] - d->padding[1] + s * d->dilation[1];
                        if (iw >= 0 && iw < g->W)
                            out[iw] += row[p * g->Q + q];
                    }
                }
            }
}

/* OpenBLAS runs on one thread (see matmul.c), so images are spread over OpenMP
 * threads, each with its own im2col buffer (and, for the weight gradient, its own
 * partial sum). */
static int convolve_f64(conv_pass pass, const conv_shapes *shapes, const fl_conv2d_desc *d, const double *in0,
                        const double *in1, double *out)
{
    geometry g = geometry_of(shapes, d);
    int64_t weight_size = g.K * g.rows;
    int threads = g.N > 1 ? cpu_threads() : 1;
    bool failed = false;
    if (pass != PASS_FORWARD)
        memset(out, 0, (size_t)(pass == PASS_BACKWARD_DATA ? g.N * g.C * g.H * g.W : weight_size) * sizeof *out);
#pragma omp parallel num_threads(threads) if (threads > 1) reduction(|| : failed)
    {
        double *col = malloc((size_t)(g.rows * g.cols) * sizeof *col);
        double *partial = pass == PASS_BACKWARD_WEIGHTS ? calloc((size_t)weight_size, sizeof *partial) : NULL;
        failed = !col || (pass == PASS_BACKWARD_WEIGHTS && !partial);
#pragma omp for schedule(static)
        for (int64_t n = 0; n < g.N; n++)
            for (int64_t k = 0; k < g.G && !failed; k++) {
                int64_t x_at = (n * g.C + k * g.Cg) * g.H * g.W, y_at = (n * g.K + k * g.Kg) * g.cols;
                int64_t w_at = k * g.Kg * g.rows;
                if (pass == PASS_FORWARD) { /* in0 = x, in1 = w, out = y */
                    im2col(in0 + x_at, col, &g);
                    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)g.Kg, (int)g.cols, (int)g.rows, 1.0,
                                in1 + w_at, (int)g.rows, col, (int)g.cols, 0.0, out + y_at, (int)g.cols);
                } else if (pass == PASS_BACKWARD_DATA) { /* in0 = dy, in1 = w, out = dx */
                    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)g.rows, (int)g.cols, (int)g.Kg, 1.0,
                                in1 + w_at, (int)g.rows, in0 + y_at, (int)g.cols, 0.0, col, (int)g.cols);
                    col2im(col, out + x_at, &g);
                } else { /* in0 = x, in1 = dy, out = dw */
                    im2col(in0 + x_at, col, &g);
                    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)g.Kg, (int)g.rows, (int)g.cols, 1.0,
                                in1 + y_at, (int)g.cols, col, (int)g.cols, 1.0, partial + w_at, (int)g.rows);
                }
            }
        if (partial && !failed) {
#pragma omp critical
            for (int64_t i = 0; i < weight_size; i++)
                out[i] += partial[i];
        }
        free(partial);
        free(col);
    }
    return failed ? fl_backend_error(FL_ERR_MEMORY, "no memory for im2col buffers") : 0;
}

/* ---- the primitives ---- */

static int convolve(conv_pass pass, fl_tensor *out, const fl_tensor *a, const fl_tensor *b,
                    const fl_conv2d_desc *d, const conv_shapes *shapes)
{
    int rc = cpu_alloc(out);
    if (rc || out->numel == 0)
        return rc;
    if (a->numel == 0 || b->numel == 0) { /* no channels, or nothing to propagate */
        memset(cpu_data(out), 0, (size_t)out->numel * cpu_element_size(out->dtype));
        return 0;
    }
    if (out->dtype != FL_F32 && out->dtype != FL_F64)
        return fl_backend_error(FL_ERR_DTYPE, "%s has no %s kernel", pass_names[pass], fl_dtype_name(out->dtype));
    void *scratch_a, *scratch_b = NULL;
    const void *da = cpu_dense(a, &scratch_a), *db = da ? cpu_dense(b, &scratch_b) : NULL;
    if (!db)
        rc = fl_backend_error(FL_ERR_MEMORY, "no memory for a dense copy of a convolution operand");
    else if (out->dtype == FL_F32)
        rc = convolve_f32(pass, shapes, d, da, db, cpu_data(out));
    else
        rc = convolve_f64(pass, shapes, d, da, db, cpu_data(out));
    cpu_scratch_free(scratch_a);
    cpu_scratch_free(scratch_b);
    return rc;
}

static conv_shapes shapes_of(const fl_tensor *x, const fl_tensor *w, const fl_tensor *y)
{
    conv_shapes s;
    memcpy(s.x, x->shape, sizeof s.x);
    memcpy(s.w, w->shape, sizeof s.w);
    memcpy(s.y, y->shape, sizeof s.y);
    return s;
}

static int cpu_conv2d(const fl_backend *self, fl_tensor *y, const fl_tensor *x, const fl_tensor *w, const fl_conv2d_desc *d)
{
    conv_shapes s = shapes_of(x, w, y);
    return convolve(PASS_FORWARD, y, x, w, d, &s);
}

static int cpu_conv2d_backward_input(const fl_backend *self, fl_tensor *dx, const fl_tensor *dy, const fl_tensor *w, const fl_conv2d_desc *d)
{
    conv_shapes s = shapes_of(dx, w, dy);
    return convolve(PASS_BACKWARD_DATA, dx, dy, w, d, &s);
}

static int cpu_conv2d_backward_weight(const fl_backend *self, fl_tensor *dw, const fl_tensor *x, const fl_tensor *dy, const fl_conv2d_desc *d)
{
    conv_shapes s = shapes_of(x, dw, dy);
    return convolve(PASS_BACKWARD_WEIGHTS, dw, x, dy, d, &s);
}

void cpu_register_conv(fl_backend *b)
{
    b->conv2d = cpu_conv2d;
    b->conv2d_backward_input = cpu_conv2d_backward_input;
    b->conv2d_backward_weight = cpu_conv2d_backward_weight;
}
