/*
 * What the sequence models' files (bert.c, asr.c, vit.c, gpt.c, lstm.c) share:
 * assembling a module from named children, and checking, making and handing a batch
 * made in a scope of its own to the caller.
 */
#ifndef FLARE_MODELS_SEQUENCE_BUILD_H
#define FLARE_MODELS_SEQUENCE_BUILD_H

#include <stdlib.h>
#include <string.h>

#include "flare/extension.h"

#include "models.h"

typedef struct named_child {
    const char *name;
    fl_module *module;
} named_child;

#define NAMED_CHILDREN(...) \
    (const named_child[]){__VA_ARGS__}, (int)(sizeof((named_child[]){__VA_ARGS__}) / sizeof(named_child))

/* Adds the children to m in order (PyTorch's registration order, so state_dict order
 * matches), taking over every one of them even after a failure; on failure m is
 * released too and NULL returned. */
static inline fl_module *with_children(fl_module *m, const named_child *children, int count)
{
    fl_status status = m ? FL_OK : fl_last_status();
    for (int i = 0; i < count; i++) {
        if (status == FL_OK)
            status = fl_module_add_child(m, children[i].name, children[i].module);
        else
            fl_module_release(children[i].module);
    }
    if (status != FL_OK) {
        fl_module_release(m);
        return NULL;
    }
    return m;
}

/* A module of the given type owning a copy of config (a plain struct). */
static inline fl_module *module_with_config(const fl_module_type *type, const void *config, size_t size)
{
    void *copy = malloc(size);
    if (!copy)
        return fl_error(FL_ERR_MEMORY, type->name, "out of memory");
    memcpy(copy, config, size);
    return fl_module_new(type, copy);
}

static inline bool valid_size(const char *fn, model_size size)
{
    if ((unsigned)size < MODEL_SIZES)
        return true;
    fl_error(FL_ERR_VALUE, fn, "size %d is none of MODEL_TINY, MODEL_CPU, MODEL_PAPER", (int)size);
    return false;
}

static inline void release_tensor(void *t) { fl_release(t); }

/* Ends scope, whose tensors input and target are handed to the enclosing scope (or
 * to the caller, outside any): how make_batch returns a batch without its temporaries.
 * Both are NULL if either is. */
static inline fl_status batch_return(fl_scope scope, fl_tensor *input, fl_tensor *target, fl_tensor **input_out,
                                     fl_tensor **target_out)
{
    *input_out = *target_out = NULL;
    input = fl_keep(input);
    target = fl_keep(target);
    fl_scope_end(scope);
    if (!input || !target) {
        fl_release(input);
        fl_release(target);
        return fl_last_status();
    }
    *input_out = fl_scope_own(input, release_tensor);
    *target_out = fl_scope_own(target, release_tensor);
    return *input_out && *target_out ? FL_OK : fl_last_status();
}

/* The start of every sequence model's make_batch: *input and *target set NULL, then
 * size and batch checked, with the errors named after fn. */
static inline fl_status batch_start(const char *fn, model_size size, int64_t batch, fl_tensor **input,
                                    fl_tensor **target)
{
    *input = *target = NULL;
    if (!valid_size(fn, size))
        return FL_ERR_VALUE;
    if (batch < 1)
        return fl_error(FL_ERR_VALUE, fn, "batch must be positive, got %lld", (long long)batch), FL_ERR_VALUE;
    return FL_OK;
}

/* A next-token batch of the language models: token ids uniform over [0, vocab),
 * [batch, steps + 1], of which the input is the first steps and the target the last
 * steps (the next token of each), both contiguous. */
static inline fl_status next_token_batch(int64_t batch, int64_t vocab, int64_t steps, fl_tensor **input,
                                         fl_tensor **target)
{
    fl_scope scope = fl_scope_begin();
    fl_tensor *tokens = fl_randint(0, vocab, FL_I64, FL_SHAPE(batch, steps + 1));
    fl_tensor *x = fl_copy(fl_index(tokens, FL_INDEX(FL_SPAN, FL_RANGE(0, steps))));
    fl_tensor *y = fl_copy(fl_index(tokens, FL_INDEX(FL_SPAN, FL_RANGE(1, FL_END))));
    return batch_return(scope, x, y, input, target);
}

/* The mean cross-entropy of the model's logits [..., classes] of input against target
 * token ids [...], every token one sample: the loss of the token-level models (BERT's
 * masked tokens, the language models' next tokens). */
static inline fl_variable *token_loss(fl_module *model, const fl_tensor *input, const fl_tensor *target)
{
    fl_scope scope = fl_scope_begin();
    fl_variable *logits = fl_module_forward(model, fl_v_new(input, false));
    const fl_tensor *value = fl_v_value(logits);
    fl_variable *loss = NULL;
    if (value)
        loss = fl_nn_cross_entropy(fl_v_reshape(logits, FL_SHAPE(-1, fl_dim(value, -1))),
                                   fl_reshape(target, FL_SHAPE(-1)), &FL_CLASS_LOSS_DEFAULTS);
    return fl_v_scope_return(scope, loss);
}

#endif
