/* The table of benchmark models (models/models.h), in the order of the paper's Table 3,
 * then the GPT-style language model and MNIST. */
#include <string.h>

#include "models.h"

extern const benchmark_model benchmark_alexnet, benchmark_vgg16, benchmark_resnet50, benchmark_bert, benchmark_asr,
    benchmark_vit, benchmark_lstm, benchmark_gpt, benchmark_mnist;

const benchmark_model *const benchmark_models[] = {
    &benchmark_alexnet,
    &benchmark_vgg16,
    &benchmark_resnet50,
    &benchmark_bert,
    &benchmark_asr,
    &benchmark_vit,
    &benchmark_lstm,
    &benchmark_gpt,
    &benchmark_mnist,
    NULL,
};

const benchmark_model *benchmark_model_find(const char *name)
{
    for (int i = 0; name && benchmark_models[i]; i++)
        if (strcmp(benchmark_models[i]->name, name) == 0)
            return benchmark_models[i];
    return NULL;
}
