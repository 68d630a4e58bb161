/*
 * The benchmark models of the Flashlight paper (Table 3), built from Flare's own
 * modules, shared by apps/benchmark and the tests. Each model has a configuration
 * that trains in reasonable time on a CPU and the paper's configuration for large
 * machines.
 *
 * A benchmark model is a table: how to build it, how to make a batch of random data
 * in memory (as the paper does), and its loss on a batch, so the harness can time
 * data, forward, backward and the optimizer step of any of them the same way.
 */
#ifndef FLARE_MODELS_H
#define FLARE_MODELS_H

#include "flare/autograd.h"
#include "flare/nn.h"
#include "flare/tensor.h"

/* TINY: the same architecture made small (fewer layers, channels, classes, a smaller
 * input) for tests and short training runs; CPU: sized for a CPU of a few cores (the
 * README's benchmark table); PAPER: Table 3's. */
typedef enum model_size { MODEL_TINY, MODEL_CPU, MODEL_PAPER, MODEL_SIZES } model_size;

typedef struct benchmark_model {
    const char *name;  /* "resnet50", "bert", ... */
    /* The batch size of each configuration. */
    int64_t batch[MODEL_SIZES];
    fl_module *(*build)(model_size size);
    /* A batch of random inputs and targets (owned by the caller's scope). */
    fl_status (*make_batch)(model_size size, int64_t batch, fl_tensor **input, fl_tensor **target);
    /* Forward and loss, a scalar variable. */
    fl_variable *(*loss)(fl_module *model, const fl_tensor *input, const fl_tensor *target);
    /* Floating-point operations of one training step (forward and backward) per sample,
     * counted from the model's layers, for GFLOP/s. */
    double (*flops_per_sample)(model_size size);
} benchmark_model;

/* The CNN of the paper's Listing 8 (models/mnist.c): [N, 1, 28, 28] images to
 * log-probabilities of 10 classes. Its parameter names are those of apps/mnist's
 * checkpoints. */
fl_module *mnist_cnn(void);

/* Every model, NULL-terminated, in the order of the paper's Table 3 (then MNIST). */
extern const benchmark_model *const benchmark_models[];
const benchmark_model *benchmark_model_find(const char *name);

#endif
