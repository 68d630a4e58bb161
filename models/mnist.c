/*
 * The CNN of the paper's Listing 8, which apps/mnist trains and the "mnist" benchmark
 * times: two 5x5 convolutions (32 and 64 channels, "same" padding) each with ReLU and
 * 2x2 max pooling, a linear layer of 1024 with ReLU and dropout 0.5, and a linear
 * layer to 10 log-probabilities, on 28x28 grey images. 3,274,634 parameters. The
 * model is already small: its tiny size differs only in the batch.
 */
#include "image.h"

#define SIDE 28
#define CLASSES 10

fl_module *mnist_cnn(void)
{
    const fl_conv_params same = {.padding = {2, 2}};
    return fl_nn_sequential(FL_MODULES(
        fl_nn_conv2d(1, 32, 5, 5, &same, true), fl_nn_relu(), fl_nn_max_pool2d(2, 2, 0),
        fl_nn_conv2d(32, 64, 5, 5, &same, true), fl_nn_relu(), fl_nn_max_pool2d(2, 2, 0),
        fl_nn_view(FL_SHAPE(-1, 7 * 7 * 64)), fl_nn_linear(7 * 7 * 64, 1024, true), fl_nn_relu(),
        fl_nn_dropout(0.5), fl_nn_linear(1024, CLASSES, true), fl_nn_log_softmax(1)));
}

static fl_module *mnist_build(model_size size) { return mnist_cnn(); }

static fl_status mnist_batch(model_size size, int64_t batch, fl_tensor **input, fl_tensor **target)
{
    return image_batch(batch, 1, SIDE, CLASSES, input, target);
}

/* The model ends in log_softmax, so the loss is the negative log-likelihood. */
static fl_variable *mnist_loss(fl_module *model, const fl_tensor *input, const fl_tensor *target)
{
    return fl_nn_nll_loss(fl_module_forward(model, fl_v_new(input, false)), target, NULL);
}

static double mnist_flops(model_size size)
{
    double forward = conv_flops(1, 32, 5, SIDE) + conv_flops(32, 64, 5, SIDE / 2) +
                     linear_flops(7 * 7 * 64, 1024) + linear_flops(1024, CLASSES);
    return TRAINING_FLOPS_PER_FORWARD * forward;
}

const benchmark_model benchmark_mnist = {
    .name = "mnist",
    .batch = {[MODEL_TINY] = 8, [MODEL_CPU] = 64, [MODEL_PAPER] = 64},
    .build = mnist_build,
    .make_batch = mnist_batch,
    .loss = mnist_loss,
    .flops_per_sample = mnist_flops,
};
