/* The Module interface: members, dotted names in PyTorch's state_dict order, modes,
 * loading a state dict, moving to another backend, containers and their errors. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "flare/nn.h"
#include "flare/optim.h"
#include "support.h"

/* y = x * scale + shift, with a buffer counting nothing in particular. */
static fl_variable *affine_forward(fl_module *m, fl_variable *x)
{
    return fl_v_add(fl_v_mul(x, fl_module_parameter(m, "scale")), fl_module_parameter(m, "shift"));
}

static const fl_module_type affine_type = {.name = "Affine", .forward = affine_forward};

static fl_module *affine(double scale, double shift)
{
    fl_module *m = fl_module_new(&affine_type, NULL);
    fl_scope scope = fl_scope_begin();
    fl_module_add_parameter(m, "scale", fl_v_new(fl_full(scale, FL_F32, FL_SHAPE(2)), true));
    fl_module_add_parameter(m, "shift", fl_v_new(fl_full(shift, FL_F32, FL_SHAPE(2)), true));
    fl_module_add_buffer(m, "seen", fl_zeros(FL_I64, FL_SHAPE()));
    fl_scope_end(scope);
    return m;
}

static void names_follow_the_state_dict_of_pytorch(void **state)
{
    fl_module *inner = fl_nn_sequential(FL_MODULES(affine(1, 0), affine(2, 0)));
    fl_module *model = fl_nn_sequential(FL_MODULES(affine(3, 1), inner));
    fl_parameters *p = fl_module_parameters(model);
    assert_int_equal(p->count, 6);
    const char *expected[] = {"0.scale", "0.shift", "1.0.scale", "1.0.shift", "1.1.scale", "1.1.shift"};
    for (int i = 0; i < 6; i++)
        assert_string_equal(p->names[i], expected[i]);
    fl_parameters_free(p);
    assert_int_equal(fl_module_parameter_count(model), 12);

    fl_tensor_map *map = fl_tensor_map_create();
    assert_int_equal(fl_module_state_dict(model, map), FL_OK);
    const char *with_buffers[] = {"0.scale", "0.shift", "0.seen", "1.0.scale", "1.0.shift", "1.0.seen",
                                  "1.1.scale", "1.1.shift", "1.1.seen"};
    assert_int_equal(fl_tensor_map_count(map), 9);
    for (int i = 0; i < 9; i++)
        assert_string_equal(fl_tensor_map_name_at(map, i), with_buffers[i]);
    fl_tensor_map_free(map);
    fl_module_release(model);
}

static void sequential_applies_its_children_in_order(void **state)
{
    fl_module *model = fl_nn_sequential(FL_MODULES(affine(2, 1), affine(3, 0)));
    fl_variable *x = fl_v_new(T_F32(FL_SHAPE(2), 1, 2), false);
    fl_variable *y = fl_module_forward(model, x);
    assert_values(fl_v_value(y), 0, 0, 9, 15); /* (2x + 1) * 3 */
    assert_int_equal(fl_v_backward(fl_v_sum(y, FL_ALL_AXES, false), NULL, false), FL_OK);
    assert_values(fl_v_grad(fl_module_parameter(fl_module_child(model, "0"), "scale")), 0, 0, 3, 6);
    fl_module_zero_grad(model);
    assert_null(fl_v_grad(fl_module_parameter(fl_module_child(model, "0"), "scale")));
    fl_module_release(model);
}

static void train_and_eval_reach_every_module(void **state)
{
    fl_module *model = fl_nn_sequential(FL_MODULES(affine(1, 0), fl_nn_sequential(FL_MODULES(affine(1, 0)))));
    assert_true(fl_module_is_training(fl_module_child(fl_module_child(model, "1"), "0")));
    fl_module_train(model, false);
    assert_false(fl_module_is_training(fl_module_child(fl_module_child(model, "1"), "0")));
    /* A child added later takes its parent's mode. */
    fl_nn_sequential_add(model, affine(1, 0));
    assert_false(fl_module_is_training(fl_module_child(model, "2")));
    fl_module_release(model);
}

static void a_state_dict_loads_back_by_name(void **state)
{
    fl_module *a = fl_nn_sequential(FL_MODULES(affine(5, 6)));
    fl_module *b = fl_nn_sequential(FL_MODULES(affine(0, 0)));
    fl_tensor_map *map = fl_tensor_map_create();
    fl_module_state_dict(a, map);
    assert_int_equal(fl_module_load_state_dict(b, map, true), FL_OK);
    assert_values(fl_v_value(fl_module_parameter(fl_module_child(b, "0"), "shift")), 0, 0, 6, 6);
    /* Of the module's dtype and backend, the map's tensor itself: no copy. */
    assert_ptr_equal(fl_v_value(fl_module_parameter(fl_module_child(b, "0"), "shift")),
                     fl_tensor_map_get(map, "0.shift"));
    /* f64 values are converted to the module's f32. */
    fl_tensor_map_set(map, "0.scale", T_F64(FL_SHAPE(2), 7, 8));
    assert_int_equal(fl_module_load_state_dict(b, map, true), FL_OK);
    assert_dtype(fl_v_value(fl_module_parameter(fl_module_child(b, "0"), "scale")), FL_F32);
    assert_values(fl_v_value(fl_module_parameter(fl_module_child(b, "0"), "scale")), 0, 0, 7, 8);
    /* Freeing the map leaves the module's values. */
    fl_tensor_map_free(map);
    assert_values(fl_v_value(fl_module_parameter(fl_module_child(b, "0"), "shift")), 0, 0, 6, 6);
    fl_module_release(a);
    fl_module_release(b);
}

static void load_errors_change_nothing(void **state)
{
    fl_module *m = fl_nn_sequential(FL_MODULES(affine(1, 2)));
    fl_tensor_map *map = fl_tensor_map_create();
    fl_module_state_dict(m, map);
    fl_tensor_map *missing = fl_tensor_map_create();
    fl_tensor_map_set(missing, "0.scale", T_F32(FL_SHAPE(2), 9, 9));
    assert_fails_status(fl_module_load_state_dict(m, missing, true), FL_ERR_VALUE,
                        "fl_module_load_state_dict: 2 names of the module are missing from the map: '0.shift', '0.seen'");
    assert_values(fl_v_value(fl_module_parameter(fl_module_child(m, "0"), "scale")), 0, 0, 1, 1);
    assert_int_equal(fl_module_load_state_dict(m, missing, false), FL_OK); /* non-strict: loads what is there */
    assert_values(fl_v_value(fl_module_parameter(fl_module_child(m, "0"), "scale")), 0, 0, 9, 9);

    fl_tensor_map_set(map, "0.extra", T_F32(FL_SHAPE(1), 0));
    assert_fails_status(fl_module_load_state_dict(m, map, true), FL_ERR_VALUE,
                        "fl_module_load_state_dict: 1 name of the map is not in the module: '0.extra'");
    /* Every name missing and every name unexpected is counted, the first 10 quoted. */
    fl_tensor_map_set(missing, "x", T_F32(FL_SHAPE(1), 0));
    assert_fails_status(fl_module_load_state_dict(m, missing, true), FL_ERR_VALUE,
                        "2 names of the module are missing from the map: '0.shift', '0.seen'; "
                        "1 name of the map is not in the module: 'x'");
    fl_module *big = fl_nn_sequential(FL_MODULES(affine(1, 2), affine(1, 2), affine(1, 2), affine(1, 2)));
    fl_tensor_map *renamed = fl_tensor_map_create();
    for (int i = 0; i < 12; i++) {
        char name[24];
        snprintf(name, sizeof name, "model.%d", i);
        fl_tensor_map_set(renamed, name, T_F32(FL_SHAPE(1), 0));
    }
    assert_fails_status(fl_module_load_state_dict(big, renamed, true), FL_ERR_VALUE,
                        "fl_module_load_state_dict: 12 names of the module are missing from the map: '0.scale', "
                        "'0.shift', '0.seen', '1.scale', '1.shift', '1.seen', '2.scale', '2.shift', '2.seen', "
                        "'3.scale', and 2 more; 12 names of the map are not in the module: 'model.0', 'model.1', "
                        "'model.2', 'model.3', 'model.4', 'model.5', 'model.6', 'model.7', 'model.8', 'model.9', "
                        "and 2 more");
    fl_tensor_map_free(renamed);
    fl_module_release(big);
    fl_tensor_map_set(map, "0.shift", T_F32(FL_SHAPE(3), 1, 2, 3));
    assert_fails_status(fl_module_load_state_dict(m, map, false), FL_ERR_SHAPE, "f32[2] in the module but f32[3]");
    fl_tensor_map_free(map);
    fl_tensor_map_free(missing);
    fl_module_release(m);
}

/* Every member of m lives on backend and holds the bytes of before (a state dict)
 * and grads (the parameters' gradients, in order). */
static void assert_members(const fl_module *m, const char *backend, const fl_tensor_map *before,
                           fl_tensor *const *grads)
{
    fl_tensor_map *now = fl_tensor_map_create();
    assert_int_equal(fl_module_state_dict(m, now), FL_OK);
    assert_int_equal(fl_tensor_map_count(now), fl_tensor_map_count(before));
    for (size_t i = 0; i < fl_tensor_map_count(now); i++) {
        assert_string_equal(fl_backend_name(fl_tensor_map_tensor_at(now, i)), backend);
        assert_true(support_same_bytes(fl_tensor_map_tensor_at(now, i), fl_tensor_map_tensor_at(before, i)));
    }
    fl_tensor_map_free(now);
    fl_parameters *p = fl_module_parameters(m);
    for (size_t i = 0; i < p->count; i++) {
        assert_string_equal(fl_backend_name(fl_v_grad(p->items[i])), backend);
        assert_true(support_same_bytes(fl_v_grad(p->items[i]), grads[i]));
    }
    fl_parameters_free(p);
}

/* y = (x * 3 + 1) * -2 + 0.5 with a gradient of ones: SGD's first step moves the
 * parameters by 0.5 times x * -2, -2, x * 3 + 1 and 1, all exact in f32. */
static void a_model_moves_to_another_backend_and_back(void **state)
{
    const char *here = fl_default_backend()->name, *there = support_other_backend();
    fl_module *model = fl_nn_sequential(FL_MODULES(affine(3, 1), affine(-2, 0.5)));
    fl_variable *x = fl_v_new(T_F32(FL_SHAPE(2), 1.5, -2), false);
    fl_tensor *ones = fl_ones(FL_F32, FL_SHAPE(2));
    assert_int_equal(fl_v_backward(fl_module_forward(model, x), ones, false), FL_OK);
    fl_tensor_map *before = fl_tensor_map_create();
    assert_int_equal(fl_module_state_dict(model, before), FL_OK);
    fl_parameters *p = fl_module_parameters(model);
    assert_int_equal(p->count, 4);
    fl_tensor *grads[4];
    for (size_t i = 0; i < p->count; i++)
        grads[i] = fl_copy(fl_v_grad(p->items[i]));

    assert_int_equal(fl_module_to_backend(model, there), FL_OK);
    assert_members(model, there, before, grads);
    assert_int_equal(fl_module_to_backend(model, there), FL_OK); /* already there: nothing to do */
    assert_members(model, there, before, grads);

    /* What is left on the old backend is refused, naming both. */
    char expected[160];
    snprintf(expected, sizeof expected, "fl_mul: operands on different backends (%s and %s); move one with "
             "fl_to_backend", here, there);
    assert_fails(fl_module_forward(model, x), FL_ERR_VALUE, expected);
    snprintf(expected, sizeof expected, "fl_v_set_value: operands on different backends (%s and %s)", there, here);
    assert_fails_status(fl_v_set_value(p->items[0], fl_zeros(FL_F32, FL_SHAPE(2))), FL_ERR_VALUE, expected);
    snprintf(expected, sizeof expected, "fl_module_set_buffer: operands on different backends (%s and %s)", there,
             here);
    assert_fails_status(fl_module_set_buffer(fl_module_child(model, "0"), "seen", fl_zeros(FL_I64, FL_SHAPE())),
                        FL_ERR_VALUE, expected);

    /* A training step there. */
    fl_optimizer *sgd = fl_sgd(p->items, p->count, &(fl_sgd_options){.lr = 0.5, .momentum = 0.9});
    fl_module_zero_grad(model);
    fl_variable *y = fl_module_forward(model, fl_v_new(fl_to_backend(fl_v_value(x), there), false));
    assert_non_null(y);
    assert_string_equal(fl_backend_name(fl_v_value(y)), there);
    assert_int_equal(fl_v_backward(y, fl_to_backend(ones, there), false), FL_OK);
    assert_int_equal(fl_optimizer_step(sgd), FL_OK);
    const double stepped[4][2] = {{4.5, 1}, {2, 2}, {-4.75, 0.5}, {0, 0}};
    for (size_t i = 0; i < p->count; i++) {
        assert_string_equal(fl_backend_name(fl_v_value(p->items[i])), there);
        assert_values(fl_v_value(p->items[i]), 0, 0, stepped[i][0], stepped[i][1]);
    }

    /* And back, with the optimizer's momentum: the values are those of there. */
    assert_int_equal(fl_module_state_dict(model, before), FL_OK); /* replaces the entries */
    for (size_t i = 0; i < p->count; i++)
        grads[i] = fl_copy(fl_v_grad(p->items[i]));
    assert_int_equal(fl_module_to_backend(model, here), FL_OK);
    assert_int_equal(fl_optimizer_to_backend(sgd, here), FL_OK);
    assert_members(model, here, before, grads);
    fl_module_zero_grad(model);
    assert_int_equal(fl_v_backward(fl_module_forward(model, x), ones, false), FL_OK);
    assert_int_equal(fl_optimizer_step(sgd), FL_OK);
    /* buffer = 0.9 buffer + gradient; value -= 0.5 buffer */
    const double second[4][2] = {{4.5 - 0.5 * (0.9 * -3 + 1.5 * -4.75), 1 - 0.5 * (0.9 * 4 + -2 * 0.5)},
                                 {2 - 0.5 * (0.9 * -2 - 4.75), 2 - 0.5 * (0.9 * -2 + 0.5)},
                                 {-4.75 - 0.5 * (0.9 * 5.5 + 1.5 * 4.5 + 2), 0.5 - 0.5 * (0.9 * -5 + -2 * 1 + 2)},
                                 {0 - 0.5 * (0.9 + 1), 0 - 0.5 * (0.9 + 1)}};
    for (size_t i = 0; i < p->count; i++) {
        assert_string_equal(fl_backend_name(fl_v_value(p->items[i])), here);
        assert_values(fl_v_value(p->items[i]), 1e-6, 1e-6, second[i][0], second[i][1]);
    }

    /* An unknown backend is refused and nothing moves. */
    assert_fails_status(fl_module_to_backend(model, "nowhere"), FL_ERR_VALUE,
                        "fl_module_to_backend: no backend named 'nowhere' is registered");
    assert_string_equal(fl_backend_name(fl_v_value(p->items[0])), here);
    assert_fails_status(fl_module_to_backend(NULL, there), FL_ERR_NULL, "fl_module_to_backend");
    fl_optimizer_free(sgd);
    fl_parameters_free(p);
    fl_tensor_map_free(before);
    fl_module_release(model);
}

/* Layers that make tensors of their own (dropout's mask, ReLU's and the loss's
 * constants, Adam's first state) make them beside their input: a model moved to
 * another backend trains there as a twin that stayed. */
static double train_step(fl_module *model, fl_optimizer *opt, const char *backend)
{
    fl_scope scope = fl_scope_begin();
    fl_tensor *x = fl_to_backend(fl_div_scalar(fl_reshape(fl_arange(0, 12, 1, FL_F32), FL_SHAPE(3, 4)), 12), backend);
    fl_tensor *y = fl_to_backend(T_I64(FL_SHAPE(3), 2, 0, 1), backend);
    fl_variable *loss = fl_nn_cross_entropy(fl_module_forward(model, fl_v_new(x, false)), y, NULL);
    assert_non_null(loss);
    assert_string_equal(fl_backend_name(fl_v_value(loss)), backend);
    double value = fl_item(fl_v_value(loss));
    assert_int_equal(fl_v_backward(loss, NULL, false), FL_OK);
    assert_int_equal(fl_optimizer_step(opt), FL_OK);
    fl_optimizer_zero_grad(opt);
    fl_scope_end(scope);
    return value;
}

static void a_moved_model_trains_as_one_that_stayed(void **state)
{
    const char *here = fl_default_backend()->name, *there = support_other_backend();
    fl_module *models[2];
    fl_parameters *params[2];
    fl_optimizer *opts[2];
    for (int k = 0; k < 2; k++) {
        fl_manual_seed(5);
        models[k] = fl_nn_sequential(FL_MODULES(fl_nn_linear(4, 6, true), fl_nn_relu(), fl_nn_dropout(0.25),
                                                fl_nn_linear(6, 3, true)));
        assert_non_null(models[k]);
        params[k] = fl_module_parameters(models[k]);
        opts[k] = fl_adam(params[k]->items, params[k]->count, &FL_ADAM_DEFAULTS);
    }
    assert_int_equal(fl_module_to_backend(models[1], there), FL_OK);
    assert_int_equal(fl_optimizer_to_backend(opts[1], there), FL_OK);
    for (int step = 0; step < 3; step++) {
        uint64_t seed, counter;
        fl_random_state(&seed, &counter); /* the same dropout masks for both */
        double stayed = train_step(models[0], opts[0], here);
        fl_set_random_state(seed, counter);
        double moved = train_step(models[1], opts[1], there);
        assert_true(fabs(moved - stayed) <= 1e-5 * fabs(stayed));
    }
    for (size_t i = 0; i < params[0]->count; i++)
        assert_close(fl_v_value(params[1]->items[i]), fl_v_value(params[0]->items[i]), 1e-5, 1e-6);
    for (int k = 0; k < 2; k++) {
        fl_optimizer_free(opts[k]);
        fl_parameters_free(params[k]);
        fl_module_release(models[k]);
    }
}

/* A state dict from another backend (a file is read onto the default one) loads
 * onto the module's backend. */
static void a_state_dict_loads_onto_the_modules_backend(void **state)
{
    const char *there = support_other_backend();
    fl_module *a = fl_nn_sequential(FL_MODULES(affine(5, 6)));
    fl_module *b = fl_nn_sequential(FL_MODULES(affine(0, 0)));
    assert_int_equal(fl_module_to_backend(b, there), FL_OK);
    fl_tensor_map *map = fl_tensor_map_create();
    fl_module_state_dict(a, map);
    assert_int_equal(fl_module_load_state_dict(b, map, true), FL_OK);
    const fl_tensor *shift = fl_v_value(fl_module_parameter(fl_module_child(b, "0"), "shift"));
    assert_string_equal(fl_backend_name(shift), there);
    assert_values(shift, 0, 0, 6, 6);
    assert_string_equal(fl_backend_name(fl_module_buffer(fl_module_child(b, "0"), "seen")), there);
    fl_tensor_map_free(map);
    fl_module_release(a);
    fl_module_release(b);
}

static void bad_members_are_refused(void **state)
{
    fl_module *m = affine(1, 0);
    assert_fails_status(fl_module_add_parameter(m, "scale", fl_v_new(T_F32(FL_SHAPE(1), 1), true)), FL_ERR_VALUE,
                        "already has a member named 'scale'");
    assert_fails_status(fl_module_add_buffer(m, "a.b", T_F32(FL_SHAPE(1), 1)), FL_ERR_VALUE, "without '.'");
    assert_fails_status(fl_module_add_parameter(m, "c", fl_v_new(T_F32(FL_SHAPE(1), 1), false)), FL_ERR_VALUE,
                        "requires a gradient");
    assert_fails_status(fl_module_set_buffer(m, "seen", T_F32(FL_SHAPE(1), 1)), FL_ERR_SHAPE, "'seen' is i64[]");
    assert_fails_status(fl_nn_sequential_add(m, affine(1, 0)), FL_ERR_VALUE, "not a Sequential");
    assert_fails(fl_nn_sequential(FL_MODULES(affine(1, 0), NULL, affine(1, 0))), FL_ERR_NULL, "fl_nn_sequential_add");
    assert_fails(fl_module_forward(m, NULL), FL_ERR_NULL, "fl_module_forward");
    fl_module_release(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        scoped_test(names_follow_the_state_dict_of_pytorch),
        scoped_test(sequential_applies_its_children_in_order),
        scoped_test(train_and_eval_reach_every_module),
        scoped_test(a_state_dict_loads_back_by_name),
        scoped_test(load_errors_change_nothing),
        scoped_test(a_model_moves_to_another_backend_and_back),
        scoped_test(a_moved_model_trains_as_one_that_stayed),
        scoped_test(a_state_dict_loads_onto_the_modules_backend),
        scoped_test(bad_members_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
