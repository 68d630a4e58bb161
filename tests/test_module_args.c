/* Module calls of several inputs, masks and flags (fl_module_forward_args): the layers
 * that take them give what their own forward functions give, Sequential threads the
 * first input and broadcasts the rest, custom modules compose the same way, arguments
 * nobody takes are refused, and the state_dict names stay PyTorch's. ModuleList. */
#include <stdio.h>
#include <string.h>

#include "flare/nn.h"
#include "support.h"

#define RTOL 1e-5
#define ATOL 1e-6

static fl_variable *input(int ndim, const int64_t *shape, bool requires_grad)
{
    return fl_v_new(fl_randn(FL_F32, ndim, shape), requires_grad);
}

static fl_module *encoder_layer(bool norm_first)
{
    fl_module *m = fl_nn_transformer_encoder_layer(8, 2, 16, 0.0, "relu", 1e-5, true, norm_first);
    assert_non_null(m);
    fl_module_train(m, false);
    return m;
}

/* Key padding mask of [2, 5]: the second sample's last two keys padded. */
static fl_tensor *padding_mask(void) { return T_BOOL(FL_SHAPE(2, 5), 0, 0, 0, 0, 0, 0, 0, 0, 1, 1); }

static bool differ(const fl_tensor *a, const fl_tensor *b)
{
    return fl_item(fl_max(fl_abs(fl_sub(a, b)), FL_ALL_AXES, false)) > 1e-3;
}

static void sequential_of_encoder_layers_passes_the_mask_to_each(void **state)
{
    (void)state;
    fl_manual_seed(1);
    fl_module *first = encoder_layer(false), *second = encoder_layer(true);
    fl_module *seq = fl_nn_sequential(FL_MODULES(fl_module_retain(first), fl_module_retain(second)));
    assert_non_null(seq);
    fl_variable *x = input(FL_SHAPE(2, 5, 8), true);
    fl_tensor *mask = padding_mask();

    fl_variable *got = fl_module_forward_args(seq, &(fl_module_args){.inputs = {x}, .key_padding_mask = mask});
    assert_non_null(got);
    fl_variable *want = fl_nn_transformer_encoder_layer_forward(
        second, fl_nn_transformer_encoder_layer_forward(first, x, mask, NULL, false), mask, NULL, false);
    assert_close(fl_v_value(got), fl_v_value(want), RTOL, ATOL);
    /* The mask changes the result, so a mask dropped on the way would be seen. */
    assert_true(differ(fl_v_value(got), fl_v_value(fl_module_forward(seq, x))));

    /* The gradients are those of the calls one by one. */
    assert_int_equal(fl_v_backward(fl_v_sum(got, FL_ALL_AXES, false), NULL, false), FL_OK);
    fl_tensor *grad = fl_copy(fl_v_grad(x));
    fl_v_zero_grad(x);
    assert_int_equal(fl_v_backward(fl_v_sum(want, FL_ALL_AXES, false), NULL, false), FL_OK);
    assert_close(grad, fl_v_grad(x), 1e-4, 1e-5);

    /* Causal with an attn_mask too: both are broadcast. */
    fl_tensor *attn = T_BOOL(FL_SHAPE(5, 5), 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1);
    got = fl_module_forward_args(
        seq, &(fl_module_args){.inputs = {x}, .key_padding_mask = mask, .attn_mask = attn, .is_causal = true});
    want = fl_nn_transformer_encoder_layer_forward(
        second, fl_nn_transformer_encoder_layer_forward(first, x, mask, attn, true), mask, attn, true);
    assert_close(fl_v_value(got), fl_v_value(want), RTOL, ATOL);

    /* A TransformerEncoder takes the same arguments. */
    fl_module *encoder = fl_nn_transformer_encoder(fl_module_retain(first), 2, NULL);
    assert_close(
        fl_v_value(fl_module_forward_args(encoder, &(fl_module_args){.inputs = {x}, .key_padding_mask = mask})),
        fl_v_value(fl_nn_transformer_encoder_forward(encoder, x, mask, NULL, false)), RTOL, ATOL);
    fl_module_release(encoder);
    fl_module_release(seq);
    fl_module_release(first);
    fl_module_release(second);
}

static void sequential_of_decoder_layers_shares_the_memory(void **state)
{
    (void)state;
    fl_manual_seed(2);
    fl_module *layer = fl_nn_transformer_decoder_layer(8, 2, 16, 0.0, "gelu", 1e-5, true, false);
    fl_module *decoder = fl_nn_transformer_decoder(layer, 2, NULL);
    assert_non_null(decoder);
    fl_module_train(decoder, false);
    fl_module *layers = fl_module_child(decoder, "layers");
    fl_module *seq = fl_nn_sequential(FL_MODULES(fl_module_retain(fl_module_child_at(layers, 0, NULL)),
                                                 fl_module_retain(fl_module_child_at(layers, 1, NULL))));
    fl_variable *tgt = input(FL_SHAPE(2, 4, 8), false), *memory = input(FL_SHAPE(2, 5, 8), false);
    fl_tensor *mask = padding_mask();
    fl_module_args args = {.inputs = {tgt, memory}, .is_causal = true, .memory_key_padding_mask = mask};
    fl_transformer_decoder_masks masks = {.tgt_is_causal = true, .memory_key_padding_mask = mask};
    fl_variable *want = fl_nn_transformer_decoder_forward(decoder, tgt, memory, &masks);
    assert_non_null(want);
    assert_close(fl_v_value(fl_module_forward_args(seq, &args)), fl_v_value(want), RTOL, ATOL);
    assert_close(fl_v_value(fl_module_forward_args(decoder, &args)), fl_v_value(want), RTOL, ATOL);
    assert_true(differ(fl_v_value(want), fl_v_value(fl_nn_transformer_decoder_forward(decoder, tgt, memory, NULL))));
    /* Without a memory the decoder says what it needs. */
    assert_fails(fl_module_forward_args(seq, &(fl_module_args){.inputs = {tgt}}), FL_ERR_VALUE, "needs a memory");
    fl_module_release(seq);
    fl_module_release(decoder);
}

static void attention_and_recurrent_layers_take_their_inputs(void **state)
{
    (void)state;
    fl_manual_seed(3);
    fl_module *mha = fl_nn_multihead_attention(8, 2, 0.0, true, true);
    fl_variable *q = input(FL_SHAPE(2, 3, 8), false), *kv = input(FL_SHAPE(2, 5, 8), false);
    fl_variable *v = input(FL_SHAPE(2, 5, 8), false);
    fl_tensor *mask = padding_mask();
    assert_close(fl_v_value(fl_module_forward_args(
                     mha, &(fl_module_args){.inputs = {q, kv, v}, .key_padding_mask = mask, .is_causal = true})),
                 fl_v_value(fl_nn_multihead_attention_forward(mha, q, kv, v, mask, NULL, true)), RTOL, ATOL);
    /* value defaults to key, key to query. */
    assert_close(fl_v_value(fl_module_forward_args(mha, &(fl_module_args){.inputs = {q, kv}})),
                 fl_v_value(fl_nn_multihead_attention_forward(mha, q, kv, kv, NULL, NULL, false)), RTOL, ATOL);
    assert_close(fl_v_value(fl_module_forward_args(mha, &(fl_module_args){.inputs = {q}})),
                 fl_v_value(fl_module_forward(mha, q)), RTOL, ATOL);

    fl_module *lstm = fl_nn_lstm(3, 4, 2, true, true, 0.0, false);
    fl_variable *x = input(FL_SHAPE(2, 5, 3), false);
    fl_variable *h0 = input(FL_SHAPE(2, 2, 4), false), *c0 = input(FL_SHAPE(2, 2, 4), false);
    fl_variable *y;
    assert_int_equal(fl_nn_lstm_forward(lstm, x, h0, c0, &y, NULL, NULL), FL_OK);
    assert_close(fl_v_value(fl_module_forward_args(lstm, &(fl_module_args){.inputs = {x, h0, c0}})), fl_v_value(y),
                 RTOL, ATOL);
    assert_true(differ(fl_v_value(y), fl_v_value(fl_module_forward(lstm, x))));

    fl_module *gru = fl_nn_gru(3, 4, 2, true, true, 0.0, false);
    assert_int_equal(fl_nn_gru_forward(gru, x, h0, &y, NULL), FL_OK);
    assert_close(fl_v_value(fl_module_forward_args(gru, &(fl_module_args){.inputs = {x, h0}})), fl_v_value(y), RTOL,
                 ATOL);
    assert_fails(fl_module_forward_args(gru, &(fl_module_args){.inputs = {x, h0, c0}}), FL_ERR_VALUE,
                 "GRU takes at most 2 inputs; given 3 inputs");

    /* In a Sequential the initial states reach the LSTM, after a Linear that takes
     * none. */
    fl_module *linear = fl_nn_linear(3, 3, true);
    fl_module *seq = fl_nn_sequential(FL_MODULES(fl_module_retain(linear), fl_module_retain(lstm)));
    assert_int_equal(fl_nn_lstm_forward(lstm, fl_module_forward(linear, x), h0, c0, &y, NULL, NULL), FL_OK);
    assert_close(fl_v_value(fl_module_forward_args(seq, &(fl_module_args){.inputs = {x, h0, c0}})), fl_v_value(y), RTOL,
                 ATOL);
    fl_module_release(seq);
    fl_module_release(linear);
    fl_module_release(gru);
    fl_module_release(lstm);
    fl_module_release(mha);
}

/* A custom block of two inputs and a mask: y = x * gate where the mask is false, 0
 * where it is true ([N, L] over x [N, L, E]). */
static fl_variable *gated_forward_args(fl_module *m, const fl_module_args *args)
{
    (void)m;
    fl_variable *x = args->inputs[0];
    if (args->inputs[1])
        x = fl_v_mul(x, args->inputs[1]);
    if (args->key_padding_mask) {
        const fl_tensor *mask = args->key_padding_mask;
        fl_tensor *keep = fl_cast(fl_logical_not(fl_reshape(mask, FL_SHAPE(fl_dim(mask, 0), fl_dim(mask, 1), 1))),
                                  fl_dtype_of(fl_v_value(x)));
        x = fl_v_mul(x, fl_v_new(keep, false));
    }
    return x;
}

static fl_variable *gated_forward(fl_module *m, fl_variable *x)
{
    return gated_forward_args(m, &(fl_module_args){.inputs = {x}});
}

static const fl_module_type gated_type = {.name = "Gated",
                                          .forward = gated_forward,
                                          .forward_args = gated_forward_args,
                                          .max_inputs = 2,
                                          .accepts = FL_ARG_KEY_PADDING_MASK};

static void a_custom_module_of_two_inputs_composes_in_a_sequential(void **state)
{
    (void)state;
    fl_manual_seed(4);
    fl_module *linear = fl_nn_linear(8, 8, true);
    fl_module *seq =
        fl_nn_sequential(FL_MODULES(fl_module_retain(linear), fl_module_new(&gated_type, NULL), fl_nn_relu()));
    fl_variable *x = input(FL_SHAPE(2, 5, 8), true), *gate = input(FL_SHAPE(2, 5, 8), true);
    fl_tensor *mask = padding_mask();
    fl_variable *got = fl_module_forward_args(seq, &(fl_module_args){.inputs = {x, gate}, .key_padding_mask = mask});
    assert_non_null(got);
    fl_tensor *keep = fl_cast(fl_logical_not(fl_reshape(mask, FL_SHAPE(2, 5, 1))), FL_F32);
    fl_variable *want = fl_v_relu(fl_v_mul(fl_v_mul(fl_module_forward(linear, x), gate), fl_v_new(keep, false)));
    assert_close(fl_v_value(got), fl_v_value(want), RTOL, ATOL);
    /* The padded positions are zero, so the mask did arrive. */
    assert_values(fl_v_value(fl_v_index(got, FL_INDEX(FL_AT(1), FL_AT(4), FL_AT(0)))), 0, 0, 0);
    assert_int_equal(fl_v_backward(fl_v_sum(got, FL_ALL_AXES, false), NULL, false), FL_OK);
    assert_non_null(fl_v_grad(gate));
    assert_non_null(fl_v_grad(fl_module_parameter(linear, "weight")));

    /* Nested: the inner Sequential of a Linear is given neither the gate nor the mask. */
    fl_module *outer = fl_nn_sequential(
        FL_MODULES(fl_nn_sequential(FL_MODULES(fl_module_retain(linear))), fl_module_new(&gated_type, NULL)));
    fl_variable *nested =
        fl_module_forward_args(outer, &(fl_module_args){.inputs = {x, gate}, .key_padding_mask = mask});
    assert_non_null(nested);
    assert_close(fl_v_value(nested),
                 fl_v_value(fl_v_mul(fl_v_mul(fl_module_forward(linear, x), gate), fl_v_new(keep, false))), RTOL, ATOL);
    int inputs;
    assert_int_equal(fl_module_accepted(outer, &inputs), FL_ARG_KEY_PADDING_MASK);
    assert_int_equal(inputs, 2);
    fl_module_release(outer);
    fl_module_release(seq);
    fl_module_release(linear);
}

static void arguments_a_module_does_not_take_are_refused(void **state)
{
    (void)state;
    fl_module *linear = fl_nn_linear(8, 8, true);
    fl_variable *x = input(FL_SHAPE(2, 5, 8), false);
    fl_tensor *mask = padding_mask();
    /* One input and nothing else: the plain forward. */
    assert_close(fl_v_value(fl_module_forward_args(linear, &(fl_module_args){.inputs = {x}})),
                 fl_v_value(fl_module_forward(linear, x)), 0, 0);
    assert_fails(fl_module_forward_args(linear, &(fl_module_args){.inputs = {x}, .key_padding_mask = mask}),
                 FL_ERR_VALUE, "Linear takes at most 1 input; given 1 input, key_padding_mask");
    assert_fails(fl_module_forward_args(linear, &(fl_module_args){.inputs = {x, x}}), FL_ERR_VALUE,
                 "Linear takes at most 1 input; given 2 inputs");
    assert_fails(fl_module_forward_args(linear, &(fl_module_args){.inputs = {x}, .is_causal = true}), FL_ERR_VALUE,
                 "given 1 input, is_causal");

    /* A Sequential none of whose children takes the mask refuses it, naming itself. */
    fl_module *seq = fl_nn_sequential(FL_MODULES(fl_module_retain(linear), fl_nn_relu()));
    assert_fails(fl_module_forward_args(seq, &(fl_module_args){.inputs = {x}, .key_padding_mask = mask}), FL_ERR_VALUE,
                 "Sequential takes at most 1 input; given 1 input, key_padding_mask");
    fl_module_release(seq);

    /* An encoder layer takes no memory, nor the memory's masks. */
    fl_module *layer = encoder_layer(false);
    assert_fails(fl_module_forward_args(layer, &(fl_module_args){.inputs = {x}, .memory_mask = mask}), FL_ERR_VALUE,
                 "TransformerEncoderLayer takes at most 1 input, key_padding_mask, attn_mask, is_causal; given 1 "
                 "input, memory_mask");
    fl_module_release(layer);

    assert_fails(fl_module_forward_args(linear, &(fl_module_args){.inputs = {x, NULL, x}}), FL_ERR_VALUE,
                 "inputs[2] is given after a NULL inputs[1]");
    assert_fails(fl_module_forward_args(linear, &(fl_module_args){.key_padding_mask = mask}), FL_ERR_NULL,
                 "inputs[0] is NULL");
    assert_fails(fl_module_forward_args(linear, NULL), FL_ERR_NULL, "fl_module_forward_args");
    assert_fails(fl_module_forward_args(NULL, &(fl_module_args){.inputs = {x}}), FL_ERR_NULL, "fl_module_forward_args");
    fl_module_release(linear);
}

static void state_dict_names_are_unchanged(void **state)
{
    (void)state;
    fl_module *seq = fl_nn_sequential(FL_MODULES(encoder_layer(false), encoder_layer(false)));
    fl_module *encoder =
        fl_nn_transformer_encoder(encoder_layer(false), 2, fl_nn_layer_norm(1, (const int64_t[]){8}, 1e-5, true));
    const char *layer_names[] = {"self_attn.in_proj_weight",
                                 "self_attn.in_proj_bias",
                                 "self_attn.out_proj.weight",
                                 "self_attn.out_proj.bias",
                                 "linear1.weight",
                                 "linear1.bias",
                                 "linear2.weight",
                                 "linear2.bias",
                                 "norm1.weight",
                                 "norm1.bias",
                                 "norm2.weight",
                                 "norm2.bias"};
    fl_tensor_map *a = fl_tensor_map_create(), *b = fl_tensor_map_create();
    assert_int_equal(fl_module_state_dict(seq, a), FL_OK);
    assert_int_equal(fl_module_state_dict(encoder, b), FL_OK);
    assert_int_equal(fl_tensor_map_count(a), 24);
    assert_int_equal(fl_tensor_map_count(b), 26);
    for (int layer = 0; layer < 2; layer++) {
        for (int i = 0; i < 12; i++) {
            char name[128];
            snprintf(name, sizeof name, "%d.%s", layer, layer_names[i]);
            assert_string_equal(fl_tensor_map_name_at(a, (size_t)(12 * layer + i)), name);
            snprintf(name, sizeof name, "layers.%d.%s", layer, layer_names[i]);
            assert_string_equal(fl_tensor_map_name_at(b, (size_t)(12 * layer + i)), name);
        }
    }
    assert_string_equal(fl_tensor_map_name_at(b, 24), "norm.weight");
    assert_string_equal(fl_tensor_map_name_at(b, 25), "norm.bias");
    fl_tensor_map_free(a);
    fl_tensor_map_free(b);
    fl_module_release(seq);
    fl_module_release(encoder);
}

static void a_module_list_is_iterated_by_its_user(void **state)
{
    (void)state;
    fl_manual_seed(5);
    fl_module *list = fl_nn_module_list(FL_MODULES(encoder_layer(false), encoder_layer(true)));
    assert_non_null(list);
    assert_int_equal(fl_nn_module_list_add(list, fl_nn_linear(8, 8, true)), FL_OK);
    assert_int_equal(fl_module_child_count(list), 3);
    const char *name;
    assert_non_null(fl_module_child_at(list, 2, &name));
    assert_string_equal(name, "2");
    assert_string_equal(fl_module_type_of(list)->name, "ModuleList");
    assert_non_null(fl_module_parameter(fl_module_child(fl_module_child(list, "1"), "linear1"), "weight"));

    /* The user's own loop: the first two with a mask, then the Linear. */
    fl_variable *x = input(FL_SHAPE(2, 5, 8), false), *h = x;
    fl_tensor *mask = padding_mask();
    for (int i = 0; i < fl_module_child_count(list); i++)
        h = fl_module_forward_args(fl_module_child_at(list, i, NULL),
                                   &(fl_module_args){.inputs = {h}, .key_padding_mask = i < 2 ? mask : NULL});
    fl_variable *want = fl_module_forward(
        fl_module_child_at(list, 2, NULL),
        fl_nn_transformer_encoder_layer_forward(
            fl_module_child_at(list, 1, NULL),
            fl_nn_transformer_encoder_layer_forward(fl_module_child_at(list, 0, NULL), x, mask, NULL, false), mask,
            NULL, false));
    assert_close(fl_v_value(h), fl_v_value(want), RTOL, ATOL);

    assert_fails(fl_module_forward(list, x), FL_ERR_VALUE, "ModuleList has no forward");
    assert_fails_status(fl_nn_sequential_add(list, fl_nn_relu()), FL_ERR_VALUE, "not a Sequential");
    fl_module *seq = fl_nn_sequential(NULL, 0);
    assert_fails_status(fl_nn_module_list_add(seq, fl_nn_relu()), FL_ERR_VALUE, "not a ModuleList");
    assert_fails(fl_nn_module_list(FL_MODULES(fl_nn_relu(), NULL)), FL_ERR_NULL, "fl_nn_module_list_add");
    /* The stacks of the Transformer keep their layers in one. */
    fl_module *encoder = fl_nn_transformer_encoder(encoder_layer(false), 2, NULL);
    assert_string_equal(fl_module_type_of(fl_module_child(encoder, "layers"))->name, "ModuleList");
    fl_module_release(encoder);
    fl_module_release(seq);
    fl_module_release(list);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        scoped_test(sequential_of_encoder_layers_passes_the_mask_to_each),
        scoped_test(sequential_of_decoder_layers_shares_the_memory),
        scoped_test(attention_and_recurrent_layers_take_their_inputs),
        scoped_test(a_custom_module_of_two_inputs_composes_in_a_sequential),
        scoped_test(arguments_a_module_does_not_take_are_refused),
        scoped_test(state_dict_names_are_unchanged),
        scoped_test(a_module_list_is_iterated_by_its_user),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
