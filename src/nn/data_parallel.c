/* Data-parallel training: gradients averaged over ranks in buckets started from the
 * autograd engine's gradient hooks (include/flare/nn.h). */
#include <stdlib.h>
#include <string.h>

#include "flare/distributed.h"
#include "flare/extension.h"
#include "flare/nn.h"

typedef struct parameter_hook {
    fl_data_parallel *dp;
    int index;
} parameter_hook;

struct fl_data_parallel {
    fl_parameters *params;
    fl_dist_reducer *reducer; /* NULL in a single process */
    parameter_hook *hooks;
    bool *added;              /* this round */
    fl_status error;          /* the first failure inside a hook, reported by sync */
};

/* Broadcasts every parameter and buffer from rank 0 into the model. */
static fl_status broadcast_state(fl_module *model)
{
    fl_tensor_map *mine = fl_tensor_map_create(), *theirs = fl_tensor_map_create();
    fl_status status = mine && theirs ? fl_module_state_dict(model, mine) : FL_ERR_MEMORY;
    fl_scope scope = fl_scope_begin();
    for (size_t i = 0; status == FL_OK && i < fl_tensor_map_count(mine); i++) {
        fl_tensor *value = fl_broadcast(fl_tensor_map_tensor_at(mine, i), 0);
        status = value ? fl_tensor_map_set(theirs, fl_tensor_map_name_at(mine, i), value) : fl_last_status();
    }
    if (status == FL_OK)
        status = fl_module_load_state_dict(model, theirs, true);
    fl_scope_end(scope);
    fl_tensor_map_free(mine);
    fl_tensor_map_free(theirs);
    return status;
}

static void gradient_ready(fl_variable *leaf, void *user)
{
    parameter_hook *h = user;
    fl_data_parallel *dp = h->dp;
    if (dp->added[h->index] || dp->error != FL_OK)
        return;
    dp->added[h->index] = true;
    dp->error = fl_dist_reducer_add(dp->reducer, h->index, fl_v_grad(leaf));
}

void fl_data_parallel_free(fl_data_parallel *dp)
{
    if (!dp)
        return;
    for (size_t i = 0; dp->hooks && dp->params && i < dp->params->count; i++)
        fl_v_remove_grad_hook(dp->params->items[i], gradient_ready, &dp->hooks[i]);
    fl_dist_reducer_free(dp->reducer);
    fl_parameters_free(dp->params);
    free(dp->hooks);
    free(dp->added);
    free(dp);
}

fl_data_parallel *fl_data_parallel_new(fl_module *model, size_t bucket_bytes)
{
    const char *fn = "fl_data_parallel_new";
    if (fl_null_args(fn, 1, model))
        return NULL;
    fl_data_parallel *dp = calloc(1, sizeof *dp);
    if (!dp)
        return fl_error(FL_ERR_MEMORY, fn, "out of memory");
    dp->params = fl_module_parameters(model);
    if (!dp->params || fl_distributed_size() == 1)
        return dp->params ? dp : (fl_data_parallel_free(dp), NULL);
    size_t count = dp->params->count;
    const fl_tensor **templates = calloc(count ? count : 1, sizeof *templates);
    dp->hooks = calloc(count ? count : 1, sizeof *dp->hooks);
    dp->added = calloc(count ? count : 1, sizeof *dp->added);
    if (!templates || !dp->hooks || !dp->added) {
        free(templates);
        fl_data_parallel_free(dp);
        return fl_error(FL_ERR_MEMORY, fn, "out of memory");
    }
    fl_status status = broadcast_state(model);
    for (size_t i = 0; i < count; i++)
        templates[i] = fl_v_value(dp->params->items[i]);
    if (status == FL_OK) {
        dp->reducer = fl_dist_reducer_new(templates, (int)count, FL_DIST_MEAN,
                                          bucket_bytes ? bucket_bytes : FL_DIST_DEFAULT_BUCKET_BYTES);
        status = dp->reducer ? FL_OK : fl_last_status();
    }
    free(templates);
    for (size_t i = 0; status == FL_OK && i < count; i++) {
        dp->hooks[i] = (parameter_hook){dp, (int)i};
        status = fl_v_add_grad_hook(dp->params->items[i], gradient_ready, &dp->hooks[i]);
    }
    if (status != FL_OK) {
        fl_data_parallel_free(dp);
        return NULL;
    }
    return dp;
}

fl_status fl_data_parallel_sync(fl_data_parallel *dp)
{
    if (fl_null_args("fl_data_parallel_sync", 1, dp))
        return fl_last_status();
    if (!dp->reducer)
        return FL_OK;
    size_t count = dp->params->count;
    fl_scope scope = fl_scope_begin();
    fl_status status = dp->error;
    /* Parameters that backward did not reach on this rank still take part, with a zero
     * gradient, so that every rank reduces the same buckets. */
    for (size_t i = 0; status == FL_OK && i < count; i++) {
        if (dp->added[i])
            continue;
        const fl_tensor *grad = fl_v_grad(dp->params->items[i]);
        status = fl_dist_reducer_add(dp->reducer, (int)i, grad ? grad : fl_zeros_like(fl_v_value(dp->params->items[i])));
    }
    fl_tensor **means = calloc(count ? count : 1, sizeof *means);
    if (status == FL_OK)
        status = means ? fl_dist_reducer_finish(dp->reducer, means) : FL_ERR_MEMORY;
    for (size_t i = 0; status == FL_OK && i < count; i++)
        status = fl_v_set_grad(dp->params->items[i], means[i]);
    free(means);
    fl_scope_end(scope);
    memset(dp->added, 0, count * sizeof *dp->added);
    dp->error = FL_OK;
    return status;
}

int fl_data_parallel_bucket_count(const fl_data_parallel *dp)
{
    return dp && dp->reducer ? fl_dist_reducer_bucket_count(dp->reducer) : 0;
}
