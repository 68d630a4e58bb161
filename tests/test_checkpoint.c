/* Training checkpoints (src/io/checkpoint.c): model, optimizer and generator state in
 * one safetensors file; resuming continues exactly, on any backend; errors change
 * nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flare/io.h"
#include "flare/nn.h"
#include "flare/optim.h"
#include "support.h"

typedef struct run {
    fl_module *model;
    fl_parameters *params;
    fl_optimizer *opt;
} run;

static run start(void)
{
    fl_manual_seed(3);
    run r;
    r.model = fl_nn_sequential(FL_MODULES(fl_nn_linear(4, 8, true), fl_nn_relu(), fl_nn_dropout(0.3),
                                          fl_nn_linear(8, 3, true)));
    r.params = fl_module_parameters(r.model);
    r.opt = fl_adam(r.params->items, r.params->count, &FL_ADAM_DEFAULTS);
    return r;
}

static void finish(run *r)
{
    fl_optimizer_free(r->opt);
    fl_parameters_free(r->params);
    fl_module_release(r->model);
}

/* One training step on a fixed batch; returns the loss. Dropout draws from the generator. */
static double step(run *r)
{
    fl_scope scope = fl_scope_begin();
    fl_tensor *x = fl_reshape(fl_arange(0, 20, 1, FL_F32), FL_SHAPE(5, 4));
    fl_tensor *y = T_I64(FL_SHAPE(5), 0, 1, 2, 1, 0);
    fl_variable *loss = fl_nn_cross_entropy(fl_module_forward(r->model, fl_v_new(fl_div_scalar(x, 20), false)), y, NULL);
    double value = fl_item(fl_v_value(loss));
    assert_int_equal(fl_v_backward(loss, NULL, false), FL_OK);
    assert_int_equal(fl_optimizer_step(r->opt), FL_OK);
    fl_optimizer_zero_grad(r->opt);
    fl_scope_end(scope);
    return value;
}

static char *temp_path(void)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/flare-checkpoint-%d.safetensors", (int)getpid());
    return path;
}

static void a_resumed_run_continues_exactly(void **state)
{
    const char *path = temp_path();
    run straight = start();
    double losses[6];
    for (int i = 0; i < 6; i++)
        losses[i] = step(&straight);

    run first = start();
    for (int i = 0; i < 3; i++)
        assert_true(step(&first) == losses[i]);
    assert_int_equal(fl_checkpoint_save(path, first.model, first.opt, (const char *[]){"step", "3", NULL}), FL_OK);
    finish(&first);

    fl_manual_seed(999); /* the checkpoint, not this, decides what comes next */
    run resumed = start();
    fl_tensor_map *file;
    assert_int_equal(fl_checkpoint_load(path, resumed.model, resumed.opt, &file), FL_OK);
    assert_string_equal(fl_tensor_map_metadata(file, "step"), "3");
    fl_tensor_map_free(file);
    for (int i = 3; i < 6; i++)
        assert_true(step(&resumed) == losses[i]);
    /* Same parameters, bit for bit. */
    for (size_t i = 0; i < straight.params->count; i++)
        assert_close(fl_v_value(resumed.params->items[i]), fl_v_value(straight.params->items[i]), 0, 0);
    finish(&resumed);
    finish(&straight);
    remove(path);
}

static void the_weights_are_a_pytorch_state_dict(void **state)
{
    const char *path = temp_path();
    run r = start();
    assert_int_equal(fl_checkpoint_save(path, r.model, NULL, NULL), FL_OK);
    fl_tensor_map *map;
    assert_int_equal(fl_load_safetensors(path, &map), FL_OK);
    const char *names[] = {"0.weight", "0.bias", "3.weight", "3.bias"};
    assert_int_equal(fl_tensor_map_count(map), 4);
    for (int i = 0; i < 4; i++)
        assert_string_equal(fl_tensor_map_name_at(map, i), names[i]);
    fl_tensor_map_free(map);
    finish(&r);
    remove(path);
}

/* fl_save_weights writes exactly the model's names (what PyTorch's strict load wants),
 * and a file of weights alone, Flare's or PyTorch's, loads without an optimizer. */
static void weights_alone_save_and_load(void **state)
{
    const char *path = temp_path();
    run r = start();
    step(&r); /* the optimizer has state now, which must stay out of the file */
    assert_int_equal(fl_save_weights(path, r.model, (const char *[]){"epoch", "3", NULL}), FL_OK);
    fl_tensor_map *map;
    assert_int_equal(fl_load_safetensors(path, &map), FL_OK);
    const char *names[] = {"0.weight", "0.bias", "3.weight", "3.bias"};
    assert_int_equal(fl_tensor_map_count(map), 4);
    for (int i = 0; i < 4; i++)
        assert_string_equal(fl_tensor_map_name_at(map, i), names[i]);
    assert_string_equal(fl_tensor_map_metadata(map, "format"), "pt");
    assert_string_equal(fl_tensor_map_metadata(map, "epoch"), "3");
    assert_null(fl_tensor_map_metadata(map, "flare.random_seed"));
    fl_tensor_map_free(map);

    /* Loaded without an optimizer: the weights, and the generator left as it is. */
    run fresh = start();
    fl_manual_seed(77);
    fl_rand(FL_F32, FL_SHAPE(3));
    uint64_t seed, counter, seed_after, counter_after;
    fl_random_state(&seed, &counter);
    assert_int_equal(fl_checkpoint_load(path, fresh.model, NULL, NULL), FL_OK);
    fl_random_state(&seed_after, &counter_after);
    assert_true(seed_after == seed && counter_after == counter);
    for (size_t i = 0; i < r.params->count; i++)
        assert_close(fl_v_value(fresh.params->items[i]), fl_v_value(r.params->items[i]), 0, 0);
    /* Resuming training needs the generator's state, which weights do not hold. */
    assert_fails_status(fl_checkpoint_load(path, fresh.model, fresh.opt, NULL), FL_ERR_VALUE,
                        "not a Flare checkpoint (no generator state in its metadata), so training cannot resume");

    /* A plain state dict without any metadata, as PyTorch writes with save_file. */
    finish(&fresh);
    fresh = start();
    map = fl_tensor_map_create();
    assert_int_equal(fl_module_state_dict(r.model, map), FL_OK);
    assert_int_equal(fl_save_safetensors(path, map), FL_OK);
    fl_tensor_map_free(map);
    assert_int_equal(fl_checkpoint_load(path, fresh.model, NULL, NULL), FL_OK);
    assert_close(fl_v_value(fresh.params->items[2]), fl_v_value(r.params->items[2]), 0, 0);

    assert_fails_status(fl_save_weights(NULL, r.model, NULL), FL_ERR_NULL, "fl_save_weights");
    assert_fails_status(fl_save_weights(path, r.model, (const char *[]){"key", NULL}), FL_ERR_VALUE, "has no value");
    finish(&fresh);
    finish(&r);
    remove(path);
}

/* The bytes of the file at path (malloc'd; *size set), or NULL. */
static unsigned char *file_bytes(const char *path, long *size)
{
    FILE *f = fopen(path, "rb");
    unsigned char *bytes = NULL;
    if (f && fseek(f, 0, SEEK_END) == 0 && (*size = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (bytes = malloc((size_t)*size)) && fread(bytes, 1, (size_t)*size, f) != (size_t)*size) {
        free(bytes);
        bytes = NULL;
    }
    if (f)
        fclose(f);
    return bytes;
}

static void assert_same_file(const char *a, const char *b)
{
    long na = 0, nb = 0;
    unsigned char *x = file_bytes(a, &na), *y = file_bytes(b, &nb);
    assert_non_null(x);
    assert_non_null(y);
    assert_int_equal(na, nb);
    assert_memory_equal(x, y, (size_t)na);
    free(x);
    free(y);
}

/* An Adam step from gradients set by hand (0.5 everywhere): state to save without a
 * forward pass. */
static void step_by_hand(run *r)
{
    fl_scope scope = fl_scope_begin();
    for (size_t i = 0; i < r->params->count; i++)
        assert_int_equal(fl_v_set_grad(r->params->items[i], fl_full_like(fl_v_value(r->params->items[i]), 0.5)),
                         FL_OK);
    assert_int_equal(fl_optimizer_step(r->opt), FL_OK);
    fl_optimizer_zero_grad(r->opt);
    fl_scope_end(scope);
}

/* Every parameter of r and every tensor of its optimizer's state lives on backend. */
static void assert_run_on(const run *r, const char *backend)
{
    for (size_t i = 0; i < r->params->count; i++)
        assert_string_equal(fl_backend_name(fl_v_value(r->params->items[i])), backend);
    fl_tensor_map *state = fl_tensor_map_create();
    assert_int_equal(fl_optimizer_state(r->opt, state, NULL), FL_OK);
    for (size_t i = 0; i < fl_tensor_map_count(state); i++)
        if (strstr(fl_tensor_map_name_at(state, i), "exp_avg"))
            assert_string_equal(fl_backend_name(fl_tensor_map_tensor_at(state, i)), backend);
    fl_tensor_map_free(state);
}

/* A checkpoint saved on the default backend loads into a model and optimizer moved to
 * another, whose save is the same file byte for byte; that file loads back on the
 * default backend, and saves the same file again. Training goes on from either. */
static void checkpoints_cross_backends(void **state)
{
    const char *here = fl_default_backend()->name, *there = support_other_backend();
    char paths[3][96];
    for (int i = 0; i < 3; i++)
        snprintf(paths[i], sizeof paths[i], "%s.%d", temp_path(), i);
    const char *metadata[] = {"step", "2", NULL};
    run saved = start();
    step_by_hand(&saved);
    step_by_hand(&saved);
    assert_int_equal(fl_checkpoint_save(paths[0], saved.model, saved.opt, metadata), FL_OK);

    run moved = start();
    assert_int_equal(fl_module_to_backend(moved.model, there), FL_OK);
    assert_int_equal(fl_optimizer_to_backend(moved.opt, there), FL_OK);
    assert_int_equal(fl_checkpoint_load(paths[0], moved.model, moved.opt, NULL), FL_OK);
    assert_run_on(&moved, there);
    assert_int_equal(fl_checkpoint_save(paths[1], moved.model, moved.opt, metadata), FL_OK);
    assert_same_file(paths[0], paths[1]);

    run back = start();
    assert_int_equal(fl_checkpoint_load(paths[1], back.model, back.opt, NULL), FL_OK);
    assert_run_on(&back, here);
    assert_int_equal(fl_checkpoint_save(paths[2], back.model, back.opt, metadata), FL_OK);
    assert_same_file(paths[0], paths[2]);

    /* One more step on each: the moved run agrees with the one that stayed. */
    step_by_hand(&saved);
    step_by_hand(&moved);
    step_by_hand(&back);
    assert_run_on(&moved, there);
    for (size_t i = 0; i < saved.params->count; i++) {
        assert_close(fl_v_value(moved.params->items[i]), fl_v_value(saved.params->items[i]), 1e-6, 1e-7);
        assert_true(support_same_bytes(fl_v_value(back.params->items[i]), fl_v_value(saved.params->items[i])));
    }
    finish(&saved);
    finish(&moved);
    finish(&back);
    for (int i = 0; i < 3; i++)
        remove(paths[i]);
}

static void bad_checkpoints_change_nothing(void **state)
{
    const char *path = temp_path();
    run r = start();

    assert_fails_status(fl_checkpoint_load("/nonexistent/x.safetensors", r.model, r.opt, NULL), FL_ERR_IO,
                        "/nonexistent/x.safetensors");

    /* A plain safetensors file without the generator's state. */
    fl_tensor_map *map = fl_tensor_map_create();
    fl_module_state_dict(r.model, map);
    fl_save_safetensors(path, map);
    fl_tensor_map_free(map);
    assert_fails_status(fl_checkpoint_load(path, r.model, r.opt, NULL), FL_ERR_VALUE, "not a Flare checkpoint");

    /* Another model's checkpoint: the names do not match. */
    fl_module *other = fl_nn_sequential(FL_MODULES(fl_nn_linear(4, 8, true)));
    assert_int_equal(fl_checkpoint_save(path, other, NULL, NULL), FL_OK);
    assert_fails_status(fl_checkpoint_load(path, r.model, r.opt, NULL), FL_ERR_VALUE,
                        "2 names of the module are missing from the map: '3.weight', '3.bias'");
    fl_module_release(other);

    /* Another optimizer's state (SGD's momentum for an Adam): the model, loaded first,
     * goes back to what it was. */
    step(&r);
    fl_tensor *trained = fl_copy(fl_v_value(r.params->items[0]));
    run other_run = start();
    fl_optimizer_free(other_run.opt);
    other_run.opt = fl_sgd(other_run.params->items, other_run.params->count,
                           &(fl_sgd_options){.lr = 0.1, .momentum = 0.9});
    step(&other_run);
    assert_int_equal(fl_checkpoint_save(path, other_run.model, other_run.opt, NULL), FL_OK);
    finish(&other_run);
    assert_fails_status(fl_checkpoint_load(path, r.model, r.opt, NULL), FL_ERR_VALUE, "momentum_buffer");
    assert_close(fl_v_value(r.params->items[0]), trained, 0, 0);
    assert_fails_status(fl_checkpoint_save(path, r.model, r.opt, (const char *[]){"key", NULL}), FL_ERR_VALUE,
                        "has no value");
    assert_fails_status(fl_checkpoint_save("/nonexistent/dir/x", r.model, r.opt, NULL), FL_ERR_IO, "/nonexistent");
    /* The caller's metadata cannot replace the generator's state (the file would not load). */
    assert_fails_status(fl_checkpoint_save(path, r.model, r.opt, (const char *[]){"flare.random_counter", "7", NULL}),
                        FL_ERR_VALUE, "metadata key 'flare.random_counter' is reserved");
    /* A counter beyond 2^64, or signed, is refused rather than saturated or negated. */
    static const char *const bad_counters[] = {"18446744073709551616", "-3", "+3", " 3", "3x"};
    for (size_t i = 0; i < sizeof bad_counters / sizeof *bad_counters; i++) {
        map = fl_tensor_map_create();
        fl_module_state_dict(r.model, map);
        fl_tensor_map_set_metadata(map, "flare.random_seed", "1");
        fl_tensor_map_set_metadata(map, "flare.random_counter", bad_counters[i]);
        assert_int_equal(fl_save_safetensors(path, map), FL_OK);
        fl_tensor_map_free(map);
        assert_fails_status(fl_checkpoint_load(path, r.model, NULL, NULL), FL_ERR_VALUE,
                            "is not two whole numbers below 2^64");
    }
    map = fl_tensor_map_create();
    fl_module_state_dict(r.model, map);
    fl_tensor_map_set_metadata(map, "flare.random_seed", "1");
    fl_tensor_map_set_metadata(map, "flare.random_counter", "18446744073709551615");
    fl_save_safetensors(path, map);
    fl_tensor_map_free(map);
    assert_int_equal(fl_checkpoint_load(path, r.model, NULL, NULL), FL_OK);
    uint64_t counter;
    fl_random_state(NULL, &counter);
    assert_true(counter == UINT64_MAX);
    finish(&r);
    remove(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        scoped_test(a_resumed_run_continues_exactly),
        scoped_test(the_weights_are_a_pytorch_state_dict),
        scoped_test(weights_alone_save_and_load),
        scoped_test(checkpoints_cross_backends),
        scoped_test(bad_checkpoints_change_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
