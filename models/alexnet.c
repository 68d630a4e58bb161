/*
 * AlexNet in torchvision's layout (features, avgpool, classifier), so its state_dict
 * names load: five convolutions with max pooling, an adaptive average pool to 6x6,
 * and three linear layers with dropout. PyTorch's default initialization, as
 * torchvision keeps it. 61,100,840 parameters at 1000 classes.
 */
#include "image.h"

typedef struct alexnet_config {
    int64_t channels[5]; /* of the five convolutions */
    int64_t hidden, classes, image;
} alexnet_config;

static const alexnet_config configs[MODEL_SIZES] = {
    [MODEL_TINY] = {{8, 24, 48, 32, 32}, 64, 10, 64},
    [MODEL_CPU] = {{64, 192, 384, 256, 256}, 4096, 1000, 224},
    [MODEL_PAPER] = {{64, 192, 384, 256, 256}, 4096, 1000, 224},
};

/* The convolutions: kernel, stride, padding, and whether a 3x3/2 max pool follows. */
static const struct {
    int kernel, stride, padding;
    bool pool;
} convs[5] = {{11, 4, 2, true}, {5, 1, 2, true}, {3, 1, 1, false}, {3, 1, 1, false}, {3, 1, 1, true}};

#define POOLED 6 /* the adaptive average pool's output */

static const fl_module_type alexnet_type = {.name = "AlexNet", .forward = image_classifier_forward};

static fl_module *alexnet_build(model_size size)
{
    const alexnet_config *c = &configs[size];
    fl_module *features = fl_nn_sequential(NULL, 0);
    int64_t in = 3;
    for (int i = 0; i < 5; i++) {
        const fl_conv_params params = {.stride = {convs[i].stride, convs[i].stride},
                                       .padding = {convs[i].padding, convs[i].padding}};
        features = image_append(features,
                                fl_nn_conv2d(in, c->channels[i], convs[i].kernel, convs[i].kernel, &params, true));
        features = image_append(features, fl_nn_relu());
        if (convs[i].pool)
            features = image_append(features, fl_nn_max_pool2d(3, 2, 0));
        in = c->channels[i];
    }
    fl_module *classifier = fl_nn_sequential(FL_MODULES(
        fl_nn_dropout(0.5), fl_nn_linear(in * POOLED * POOLED, c->hidden, true), fl_nn_relu(), fl_nn_dropout(0.5),
        fl_nn_linear(c->hidden, c->hidden, true), fl_nn_relu(), fl_nn_linear(c->hidden, c->classes, true)));
    fl_module *m = fl_module_new(&alexnet_type, NULL);
    m = image_add(m, "features", features);
    m = image_add(m, "avgpool", fl_nn_adaptive_avg_pool2d(POOLED, POOLED));
    return image_add(m, "classifier", classifier);
}

static fl_status alexnet_batch(model_size size, int64_t batch, fl_tensor **input, fl_tensor **target)
{
    return image_batch(batch, 3, configs[size].image, configs[size].classes, input, target);
}

static double alexnet_flops(model_size size)
{
    const alexnet_config *c = &configs[size];
    double flops = 0;
    int64_t in = 3, side = c->image;
    for (int i = 0; i < 5; i++) {
        side = window_out(side, convs[i].kernel, convs[i].stride, convs[i].padding);
        flops += conv_flops(in, c->channels[i], convs[i].kernel, side);
        if (convs[i].pool)
            side = window_out(side, 3, 2, 0);
        in = c->channels[i];
    }
    flops += linear_flops(in * POOLED * POOLED, c->hidden) + linear_flops(c->hidden, c->hidden) +
             linear_flops(c->hidden, c->classes);
    return TRAINING_FLOPS_PER_FORWARD * flops;
}

const benchmark_model benchmark_alexnet = {
    .name = "alexnet",
    .batch = {[MODEL_TINY] = 4, [MODEL_CPU] = 8, [MODEL_PAPER] = 32},
    .build = alexnet_build,
    .make_batch = alexnet_batch,
    .loss = image_classifier_loss,
    .flops_per_sample = alexnet_flops,
};
