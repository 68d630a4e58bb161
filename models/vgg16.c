/*
 * VGG16 (configuration "D", without batch normalization) in torchvision's layout
 * (features, avgpool, classifier): thirteen 3x3 convolutions in five stages, each
 * closed by a 2x2 max pool, an adaptive average pool to 7x7, and three linear
 * layers. torchvision's initialization: convolutions Kaiming-normal (fan_out, ReLU)
 * with zero bias, linear layers N(0, 0.01) with zero bias. 138,357,544 parameters at
 * 1000 classes.
 */
#include <string.h>

#include "image.h"

typedef struct vgg_config {
    int64_t width;  /* channels of the first stage; the stages have 1, 2, 4, 8, 8 times it */
    int64_t hidden, classes, image;
} vgg_config;

static const vgg_config configs[MODEL_SIZES] = {
    [MODEL_TINY] = {4, 64, 10, 32},
    [MODEL_CPU] = {64, 4096, 1000, 224},
    [MODEL_PAPER] = {64, 4096, 1000, 224},
};

/* Convolutions per stage and the stage's width as a multiple of the first. */
static const int stage_convs[5] = {2, 2, 3, 3, 3};
static const int stage_width[5] = {1, 2, 4, 8, 8};

#define POOLED 7

static const fl_module_type vgg_type = {.name = "VGG", .forward = image_classifier_forward};

static fl_status init_conv(fl_module *conv)
{
    fl_status s = fl_init_kaiming_normal(fl_module_parameter(conv, "weight"), 0, FL_FAN_OUT);
    return s == FL_OK ? fl_init_zeros(fl_module_parameter(conv, "bias")) : s;
}

static fl_status init_linear(fl_module *linear)
{
    fl_status s = fl_init_normal(fl_module_parameter(linear, "weight"), 0, 0.01);
    return s == FL_OK ? fl_init_zeros(fl_module_parameter(linear, "bias")) : s;
}

/* torchvision initializes after building, module by module in order. */
static fl_status init_children(fl_module *sequential, fl_status (*init)(fl_module *), const char *type_name)
{
    for (int i = 0; i < fl_module_child_count(sequential); i++) {
        fl_module *child = fl_module_child_at(sequential, i, NULL);
        if (strcmp(fl_module_type_of(child)->name, type_name) == 0) {
            fl_status s = init(child);
            if (s != FL_OK)
                return s;
        }
    }
    return FL_OK;
}

static fl_module *vgg16_build(model_size size)
{
    const vgg_config *c = &configs[size];
    const fl_conv_params same = {.padding = {1, 1}};
    fl_module *features = fl_nn_sequential(NULL, 0);
    int64_t in = 3;
    for (int stage = 0; stage < 5; stage++) {
        int64_t out = c->width * stage_width[stage];
        for (int i = 0; i < stage_convs[stage]; i++) {
            features = image_append(features, fl_nn_conv2d(in, out, 3, 3, &same, true));
            features = image_append(features, fl_nn_relu());
            in = out;
        }
        features = image_append(features, fl_nn_max_pool2d(2, 2, 0));
    }
    fl_module *classifier = fl_nn_sequential(FL_MODULES(
        fl_nn_linear(in * POOLED * POOLED, c->hidden, true), fl_nn_relu(), fl_nn_dropout(0.5),
        fl_nn_linear(c->hidden, c->hidden, true), fl_nn_relu(), fl_nn_dropout(0.5),
        fl_nn_linear(c->hidden, c->classes, true)));
    if (features && classifier &&
        (init_children(features, init_conv, "Conv2d") != FL_OK ||
         init_children(classifier, init_linear, "Linear") != FL_OK)) {
        fl_module_release(features);
        fl_module_release(classifier);
        return NULL;
    }
    fl_module *m = fl_module_new(&vgg_type, NULL);
    m = image_add(m, "features", features);
    m = image_add(m, "avgpool", fl_nn_adaptive_avg_pool2d(POOLED, POOLED));
    return image_add(m, "classifier", classifier);
}

static fl_status vgg16_batch(model_size size, int64_t batch, fl_tensor **input, fl_tensor **target)
{
    return image_batch(batch, 3, configs[size].image, configs[size].classes, input, target);
}

static double vgg16_flops(model_size size)
{
    const vgg_config *c = &configs[size];
    double flops = 0;
    int64_t in = 3, side = c->image;
    for (int stage = 0; stage < 5; stage++) {
        int64_t out = c->width * stage_width[stage];
        for (int i = 0; i < stage_convs[stage]; i++, in = out)
            flops += conv_flops(in, out, 3, side);
        side /= 2;
    }
    flops += linear_flops(in * POOLED * POOLED, c->hidden) + linear_flops(c->hidden, c->hidden) +
             linear_flops(c->hidden, c->classes);
    return TRAINING_FLOPS_PER_FORWARD * flops;
}

const benchmark_model benchmark_vgg16 = {
    .name = "vgg16",
    .batch = {[MODEL_TINY] = 4, [MODEL_CPU] = 4, [MODEL_PAPER] = 32},
    .build = vgg16_build,
    .make_batch = vgg16_batch,
    .loss = image_classifier_loss,
    .flops_per_sample = vgg16_flops,
};
