/* The pieces the image classifiers share (models/image.h). */
#include "image.h"

fl_status image_batch(int64_t batch, int64_t channels, int64_t size, int64_t classes, fl_tensor **input,
                      fl_tensor **target)
{
    *input = fl_randn(FL_F32, FL_SHAPE(batch, channels, size, size));
    *target = fl_randint(0, classes, FL_I64, FL_SHAPE(batch));
    return *input && *target ? FL_OK : fl_last_status();
}

fl_variable *image_classifier_loss(fl_module *model, const fl_tensor *input, const fl_tensor *target)
{
    fl_variable *logits = fl_module_forward(model, fl_v_new(input, false));
    return fl_nn_cross_entropy(logits, target, NULL);
}

fl_variable *image_classifier_forward(fl_module *m, fl_variable *x)
{
    fl_scope scope = fl_scope_begin();
    int count = fl_module_child_count(m);
    for (int i = 0; x && i < count; i++) {
        if (i == count - 1)
            x = fl_v_flatten(x, 1, -1);
        x = fl_module_forward(fl_module_child_at(m, i, NULL), x);
    }
    return fl_v_scope_return(scope, x);
}

fl_module *image_add(fl_module *m, const char *name, fl_module *child)
{
    if (!m) {
        fl_module_release(child);
        return NULL;
    }
    if (fl_module_add_child(m, name, child) != FL_OK) {
        fl_module_release(m);
        return NULL;
    }
    return m;
}

fl_module *image_append(fl_module *sequential, fl_module *module)
{
    if (!sequential) {
        fl_module_release(module);
        return NULL;
    }
    if (fl_nn_sequential_add(sequential, module) != FL_OK) {
        fl_module_release(sequential);
        return NULL;
    }
    return sequential;
}

double conv_flops(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t out_size)
{
    return 2.0 * (double)in_channels * (double)out_channels * (double)(kernel * kernel) * (double)(out_size * out_size);
}

double linear_flops(int64_t in_features, int64_t out_features)
{
    return 2.0 * (double)in_features * (double)out_features;
}

int64_t window_out(int64_t size, int64_t kernel, int64_t stride, int64_t padding)
{
    return (size + 2 * padding - kernel) / stride + 1;
}
