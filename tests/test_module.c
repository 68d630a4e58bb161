/* The Module interface: members, dotted names in PyTorch's state_dict order, modes,
 * loading a state dict, containers and their errors. */
#include <stdio.h>
#include <string.h>

#include "flare/nn.h"
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
    /* f64 values are converted to the module's f32. */
    fl_tensor_map_set(map, "0.scale", T_F64(FL_SHAPE(2), 7, 8));
    assert_int_equal(fl_module_load_state_dict(b, map, true), FL_OK);
    assert_dtype(fl_v_value(fl_module_parameter(fl_module_child(b, "0"), "scale")), FL_F32);
    assert_values(fl_v_value(fl_module_parameter(fl_module_child(b, "0"), "scale")), 0, 0, 7, 8);
    fl_tensor_map_free(map);
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
        char name[16];
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
        scoped_test(bad_members_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
