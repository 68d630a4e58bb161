/*
 * ResNet-50 in torchvision's layout, so its state_dict names load: conv1, bn1, relu,
 * maxpool, layer1..layer4 of Bottleneck blocks (conv1, bn1, conv2, bn2, conv3, bn3,
 * relu, downsample.0/1; the stride on the 3x3 convolution, "ResNet v1.5"), avgpool,
 * fc. torchvision's initialization: convolutions Kaiming-normal (fan_out, ReLU),
 * batch norms weight 1 and bias 0, fc PyTorch's default. 25,557,032 parameters at
 * 1000 classes.
 */
#include "image.h"

#define EXPANSION 4 /* a Bottleneck's output has 4 times its width */

typedef struct resnet_config {
    int blocks[4];  /* Bottlenecks per stage */
    int64_t width;  /* of the first stage; each next stage doubles it */
    int64_t classes, image;
} resnet_config;

static const resnet_config configs[MODEL_SIZES] = {
    /* The tiny one keeps an identity block (layer1.1) and every downsampling path. */
    [MODEL_TINY] = {{2, 1, 1, 1}, 4, 10, 32},
    [MODEL_CPU] = {{3, 4, 6, 3}, 64, 1000, 224},
    [MODEL_PAPER] = {{3, 4, 6, 3}, 64, 1000, 224},
};

static fl_module *child(fl_module *m, const char *name)
{
    return fl_module_child(m, name);
}

/* relu(bn3(conv3(relu(bn2(conv2(relu(bn1(conv1(x))))))) + shortcut), the shortcut
 * being downsample(x) where the block changes shape, else x. */
static fl_variable *bottleneck_forward(fl_module *m, fl_variable *x)
{
    fl_scope scope = fl_scope_begin();
    fl_variable *y = fl_v_relu(fl_module_forward(child(m, "bn1"), fl_module_forward(child(m, "conv1"), x)));
    y = fl_v_relu(fl_module_forward(child(m, "bn2"), fl_module_forward(child(m, "conv2"), y)));
    y = fl_module_forward(child(m, "bn3"), fl_module_forward(child(m, "conv3"), y));
    fl_module *downsample = child(m, "downsample");
    fl_variable *shortcut = downsample ? fl_module_forward(downsample, x) : x;
    return fl_v_scope_return(scope, fl_v_relu(fl_v_add(y, shortcut)));
}

static const fl_module_type bottleneck_type = {.name = "Bottleneck", .forward = bottleneck_forward};
static const fl_module_type resnet_type = {.name = "ResNet", .forward = image_classifier_forward};

/* A convolution without bias, Kaiming-normal (fan_out) as torchvision's ResNet
 * initializes them. */
static fl_module *conv(int64_t in, int64_t out, int kernel, int stride)
{
    const fl_conv_params params = {.stride = {stride, stride}, .padding = {kernel / 2, kernel / 2}};
    fl_module *c = fl_nn_conv2d(in, out, kernel, kernel, &params, false);
    if (c && fl_init_kaiming_normal(fl_module_parameter(c, "weight"), 0, FL_FAN_OUT) != FL_OK) {
        fl_module_release(c);
        return NULL;
    }
    return c;
}

static fl_module *batch_norm(int64_t channels)
{
    return fl_nn_batch_norm2d(channels, 1e-5, 0.1, true, true);
}

static fl_module *bottleneck(int64_t in, int64_t width, int stride)
{
    int64_t out = width * EXPANSION;
    fl_module *m = fl_module_new(&bottleneck_type, NULL);
    m = image_add(m, "conv1", conv(in, width, 1, 1));
    m = image_add(m, "bn1", batch_norm(width));
    m = image_add(m, "conv2", conv(width, width, 3, stride));
    m = image_add(m, "bn2", batch_norm(width));
    m = image_add(m, "conv3", conv(width, out, 1, 1));
    m = image_add(m, "bn3", batch_norm(out));
    m = image_add(m, "relu", fl_nn_relu());
    if (stride != 1 || in != out)
        m = image_add(m, "downsample", fl_nn_sequential(FL_MODULES(conv(in, out, 1, stride), batch_norm(out))));
    return m;
}

static fl_module *resnet50_build(model_size size)
{
    const resnet_config *c = &configs[size];
    const fl_conv_params stem = {.stride = {2, 2}, .padding = {3, 3}};
    fl_module *conv1 = fl_nn_conv2d(3, c->width, 7, 7, &stem, false);
    if (conv1 && fl_init_kaiming_normal(fl_module_parameter(conv1, "weight"), 0, FL_FAN_OUT) != FL_OK) {
        fl_module_release(conv1);
        conv1 = NULL;
    }
    fl_module *m = fl_module_new(&resnet_type, NULL);
    m = image_add(m, "conv1", conv1);
    m = image_add(m, "bn1", batch_norm(c->width));
    m = image_add(m, "relu", fl_nn_relu());
    m = image_add(m, "maxpool", fl_nn_max_pool2d(3, 2, 1));
    int64_t in = c->width;
    for (int stage = 0; stage < 4; stage++) {
        int64_t width = c->width << stage;
        fl_module *layer = fl_nn_sequential(NULL, 0);
        for (int b = 0; b < c->blocks[stage]; b++) {
            layer = image_append(layer, bottleneck(in, width, b == 0 && stage > 0 ? 2 : 1));
            in = width * EXPANSION;
        }
        char name[8] = "layer1";
        name[5] = (char)('1' + stage);
        m = image_add(m, name, layer);
    }
    m = image_add(m, "avgpool", fl_nn_adaptive_avg_pool2d(1, 1));
    return image_add(m, "fc", fl_nn_linear(in, c->classes, true));
}

static fl_status resnet50_batch(model_size size, int64_t batch, fl_tensor **input, fl_tensor **target)
{
    return image_batch(batch, 3, configs[size].image, configs[size].classes, input, target);
}

static double resnet50_flops(model_size size)
{
    const resnet_config *c = &configs[size];
    int64_t side = window_out(c->image, 7, 2, 3);
    double flops = conv_flops(3, c->width, 7, side);
    side = window_out(side, 3, 2, 1);
    int64_t in = c->width;
    for (int stage = 0; stage < 4; stage++) {
        int64_t width = c->width << stage;
        for (int b = 0; b < c->blocks[stage]; b++) {
            int stride = b == 0 && stage > 0 ? 2 : 1;
            int64_t out_side = window_out(side, 3, stride, 1);
            flops += conv_flops(in, width, 1, side) + conv_flops(width, width, 3, out_side) +
                     conv_flops(width, width * EXPANSION, 1, out_side);
            if (stride != 1 || in != width * EXPANSION)
                flops += conv_flops(in, width * EXPANSION, 1, out_side);
            in = width * EXPANSION;
            side = out_side;
        }
    }
    flops += linear_flops(in, c->classes);
    return TRAINING_FLOPS_PER_FORWARD * flops;
}

const benchmark_model benchmark_resnet50 = {
    .name = "resnet50",
    .batch = {[MODEL_TINY] = 4, [MODEL_CPU] = 8, [MODEL_PAPER] = 32},
    .build = resnet50_build,
    .make_batch = resnet50_batch,
    .loss = image_classifier_loss,
    .flops_per_sample = resnet50_flops,
};
