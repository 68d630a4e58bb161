/*
 * What the image classifiers of the benchmark (AlexNet, VGG16, ResNet-50, the MNIST
 * CNN) share: random images with class targets, the cross-entropy loss, a module
 * type running torchvision's layout, and the operation counts of their layers.
 */
#ifndef FLARE_MODELS_IMAGE_H
#define FLARE_MODELS_IMAGE_H

#include "models.h"

/* Images N(0, 1) [batch, channels, size, size] (f32) and classes U{0..classes-1}
 * [batch] (i64), in the caller's scope. */
fl_status image_batch(int64_t batch, int64_t channels, int64_t size, int64_t classes, fl_tensor **input,
                      fl_tensor **target);

/* Mean cross-entropy of the model's logits. */
fl_variable *image_classifier_loss(fl_module *model, const fl_tensor *input, const fl_tensor *target);

/* The forward of torchvision's classifiers: the children in registration order, the
 * input flattened to [N, features] before the last one (AlexNet's and VGG's
 * "classifier", ResNet's "fc"), as their forward() does with torch.flatten(x, 1). */
fl_variable *image_classifier_forward(fl_module *m, fl_variable *x);

/* Adds child under name to m; on failure (child NULL or the call failing) releases m
 * and returns NULL, so a builder chains the calls and checks once. */
fl_module *image_add(fl_module *m, const char *name, fl_module *child);
/* The same for appending module to a Sequential. */
fl_module *image_append(fl_module *sequential, fl_module *module);

/* Multiply-adds counted as two operations, per sample, of one forward pass. A
 * training step costs three times its forward (the gradients of the input and of the
 * weights each cost as much as the forward), the usual estimate; elementwise layers,
 * normalization and pooling are not counted. */
double conv_flops(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t out_size);
double linear_flops(int64_t in_features, int64_t out_features);
/* The output size of a convolution or pooling along one axis. */
int64_t window_out(int64_t size, int64_t kernel, int64_t stride, int64_t padding);

#define TRAINING_FLOPS_PER_FORWARD 3.0

#endif
