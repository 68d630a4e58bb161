/*
 * ViT of Table 3 (ViT-B/16 at PAPER size), trained on random images in memory.
 * bench/torch/vit.py is the same model in PyTorch, with the same state_dict names:
 *
 *     cls_token [1, 1, d], pos_embed [1, patches + 1, d]   parameters of the model
 *     patch_embed          Conv2d of kernel and stride the patch size
 *     encoder.layers.N.*   pre-norm GELU TransformerEncoderLayer (eps 1e-6)
 *     encoder.norm         the final LayerNorm
 *     head                 Linear on the class token
 *
 * torchvision's initialization of the class token (zeros) and positions (N(0, 0.02)),
 * PyTorch's defaults elsewhere; no dropout (torchvision's default). PAPER: 86.6M
 * parameters (Table 3: 87M).
 */
#include <math.h>

#include "sequence_build.h"

typedef struct vit_config {
    int64_t image, patch, layers, d_model, nhead, mlp, classes;
} vit_config;

static const vit_config configs[MODEL_SIZES] = {
    [MODEL_TINY] = {.image = 32, .patch = 8, .layers = 2, .d_model = 32, .nhead = 4, .mlp = 64, .classes = 10},
    [MODEL_CPU] = {.image = 224, .patch = 16, .layers = 6, .d_model = 384, .nhead = 6, .mlp = 1536, .classes = 1000},
    [MODEL_PAPER] = {.image = 224, .patch = 16, .layers = 12, .d_model = 768, .nhead = 12, .mlp = 3072,
                     .classes = 1000},
};

#define LAYER_NORM_EPS 1e-6

static int64_t patches(const vit_config *c) { return (c->image / c->patch) * (c->image / c->patch); }

static fl_variable *apply(fl_module *m, const char *child, fl_variable *x)
{
    return fl_module_forward(fl_module_child(m, child), x);
}

/* Images [N, 3, H, W] to logits [N, classes]. */
static fl_variable *vit_forward(fl_module *m, fl_variable *images)
{
    const vit_config *c = fl_module_state(m);
    const fl_tensor *x = fl_v_value(images);
    if (fl_null_args("ViT", 1, x))
        return NULL;
    if (fl_ndim(x) != 4 || fl_dim(x, 1) != 3 || fl_dim(x, 2) != c->image || fl_dim(x, 3) != c->image) {
        char d[FL_DESC_SIZE];
        return fl_error(FL_ERR_SHAPE, "ViT", "expects images [N, 3, %lld, %lld], got %s", (long long)c->image,
                         (long long)c->image, fl_describe(x, d));
    }
    int64_t n = fl_dim(x, 0);
    fl_scope scope = fl_scope_begin();
    fl_variable *h = fl_v_transpose(fl_v_flatten(apply(m, "patch_embed", images), 2, 3), 1, 2); /* [N, P, d] */
    fl_variable *cls = fl_v_expand(fl_module_parameter(m, "cls_token"), FL_SHAPE(n, 1, c->d_model));
    h = fl_v_add(fl_v_concat(FL_VARS(cls, h), 1), fl_module_parameter(m, "pos_embed"));
    h = fl_v_index(apply(m, "encoder", h), (const fl_index_item[]){FL_SPAN, FL_AT(0)}, 2); /* the class token */
    return fl_v_scope_return(scope, apply(m, "head", h));
}

static const fl_module_type vit_type = {.name = "ViT", .forward = vit_forward};

/* Called in a scope, which holds the new variable until the module retains it. */
static fl_status add_parameter(fl_module *m, const char *name, fl_tensor *value)
{
    return fl_module_add_parameter(m, name, fl_v_new(value, true));
}

static fl_module *vit_build(model_size size)
{
    if (!valid_size("vit.build", size))
        return NULL;
    const vit_config *c = &configs[size];
    fl_module *m = module_with_config(&vit_type, c, sizeof *c);
    fl_scope scope = fl_scope_begin();
    fl_status status = m ? FL_OK : fl_last_status();
    if (status == FL_OK)
        status = add_parameter(m, "cls_token", fl_zeros(FL_F32, FL_SHAPE(1, 1, c->d_model)));
    if (status == FL_OK)
        status = add_parameter(m, "pos_embed", fl_zeros(FL_F32, FL_SHAPE(1, patches(c) + 1, c->d_model)));
    if (status == FL_OK)
        status = fl_init_normal(fl_module_parameter(m, "pos_embed"), 0, 0.02);
    fl_scope_end(scope);
    if (status != FL_OK) {
        fl_module_release(m);
        return NULL;
    }
    const int64_t features[] = {c->d_model};
    const fl_conv_params patchify = {.stride = {(int)c->patch, (int)c->patch}};
    fl_module *layer = fl_nn_transformer_encoder_layer(c->d_model, c->nhead, c->mlp, 0.0, "gelu", LAYER_NORM_EPS,
                                                       true, true);
    fl_module *norm = fl_nn_layer_norm(1, features, LAYER_NORM_EPS, true);
    return with_children(
        m, NAMED_CHILDREN(
               {"patch_embed", fl_nn_conv2d(3, c->d_model, (int)c->patch, (int)c->patch, &patchify, true)},
               {"encoder", fl_nn_transformer_encoder(layer, (int)c->layers, norm)},
               {"head", fl_nn_linear(c->d_model, c->classes, true)}));
}

/* Normalized images N(0, 1) [N, 3, H, W] and labels uniform over the classes. */
static fl_status vit_make_batch(model_size size, int64_t batch, fl_tensor **input, fl_tensor **target)
{
    *input = *target = NULL;
    if (!valid_size("vit.make_batch", size))
        return FL_ERR_VALUE;
    if (batch < 1)
        return fl_error(FL_ERR_VALUE, "vit.make_batch", "batch must be positive, got %lld", (long long)batch),
               FL_ERR_VALUE;
    const vit_config *c = &configs[size];
    fl_scope scope = fl_scope_begin();
    fl_tensor *x = fl_randn(FL_F32, FL_SHAPE(batch, 3, c->image, c->image));
    fl_tensor *y = fl_randint(0, c->classes, FL_I64, FL_SHAPE(batch));
    return batch_return(scope, x, y, input, target);
}

static fl_variable *vit_loss(fl_module *model, const fl_tensor *input, const fl_tensor *target)
{
    fl_scope scope = fl_scope_begin();
    fl_variable *logits = fl_module_forward(model, fl_v_new(input, false));
    return fl_v_scope_return(scope, fl_nn_cross_entropy(logits, target, &FL_CLASS_LOSS_DEFAULTS));
}

/* Multiply-adds of the patch embedding and the matrix products, 2 FLOPs each,
 * forward and backward (3x). */
static double vit_flops_per_sample(model_size size)
{
    if (!valid_size("vit.flops_per_sample", size))
        return NAN;
    const vit_config *c = &configs[size];
    double p = (double)patches(c), s = p + 1, d = (double)c->d_model;
    double embed = p * d * 3 * (double)(c->patch * c->patch);
    double layer = s * (4 * d * d + 2 * d * (double)c->mlp + 2 * s * d);
    double head = d * (double)c->classes;
    return 3 * 2 * (embed + (double)c->layers * layer + head);
}

const benchmark_model benchmark_vit = {
    .name = "vit",
    .batch = {[MODEL_TINY] = 4, [MODEL_CPU] = 8, [MODEL_PAPER] = 128},
    .build = vit_build,
    .make_batch = vit_make_batch,
    .loss = vit_loss,
    .flops_per_sample = vit_flops_per_sample,
};
