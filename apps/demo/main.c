/* A tour of the tensor API, run by `make demo` until the MNIST example takes its place:
 * creation, broadcasting, indexing, reductions, a small convolutional forward pass,
 * a clear error, and what the memory manager saw. */
#include <stdio.h>

#include "flare/memory.h"
#include "flare/tensor.h"

static void show(const char *label, const fl_tensor *t)
{
    printf("%s = ", label);
    fl_print(t);
}

int main(void)
{
    fl_scope scope = fl_scope_begin();
    fl_manual_seed(0);
    printf("Flare on %d threads, backend '%s'\n\n", fl_num_threads(), fl_backend_name(fl_zeros(FL_F32, 0, NULL)));

    fl_tensor *x = fl_reshape(fl_arange(0, 12, 1, FL_F32), FL_SHAPE(3, 4));
    show("x", x);
    show("x[1:, ::2]", fl_index(x, FL_INDEX(FL_RANGE(1, FL_END), FL_RANGE_STEP(0, FL_END, 2))));
    show("x - mean(x, axis 0)", fl_sub(x, fl_mean(x, FL_AXES(0), true)));
    show("softmax(x, -1)", fl_softmax(x, -1));
    fl_tensor *top_values, *top_indices;
    fl_topk(x, 2, -1, true, &top_values, &top_indices);
    show("topk(x, 2) indices", top_indices);

    /* A convolution, ReLU and 2x2 max-pool over a random image batch. */
    fl_tensor *images = fl_randn(FL_F32, FL_SHAPE(2, 3, 8, 8));
    fl_tensor *filters = fl_mul_scalar(fl_randn(FL_F32, FL_SHAPE(4, 3, 3, 3)), 0.2);
    fl_tensor *features = fl_conv2d(images, filters, &(fl_conv_params){.padding = {1, 1}});
    fl_tensor *pooled = fl_pool2d(fl_maximum_scalar(features, 0),
                                  &(fl_pool_params){.kind = FL_POOL_MAX, .kernel = {2, 2}});
    show("\nconv -> relu -> maxpool, channel means", fl_mean(pooled, FL_AXES(0, 2, 3), false));

    /* Errors are values, not crashes. */
    fl_tensor *bad = fl_matmul(x, x);
    printf("\nfl_matmul(x, x) returned %s: %s\n", bad ? "a tensor" : "NULL", fl_last_error());
    fl_clear_error();

    fl_memory_stats stats;
    fl_memory_stats_get(&stats);
    printf("memory (%s manager): %zu bytes in use, peak %zu, %llu allocations, %llu served from the cache\n",
           fl_memory_manager_current()->name, stats.in_use, stats.peak_in_use, (unsigned long long)stats.allocations,
           (unsigned long long)stats.cache_hits);
    fl_scope_end(scope);
    if (fl_last_status() != FL_OK) {
        fprintf(stderr, "demo failed: %s\n", fl_last_error());
        return 1;
    }
    return 0;
}
