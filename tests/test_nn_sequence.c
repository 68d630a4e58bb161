/* Sequence models against PyTorch (tests/fixtures/gen_nn_sequence.py): attention, the
 * Transformer encoder and decoder, LSTM and GRU, and the CTC loss; their values, the
 * gradients of inputs and parameters, finite-difference checks of the fused gradients,
 * and errors. Positional embeddings against their formulas. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "flare/nn.h"
#include "gradcheck.h"
#include "nn/recurrence.h"
#include "support.h"

#define FIXTURES "nn_sequence.bin"
#define RTOL 1e-4
#define ATOL 1e-5

static fl_tensor *fx(const char *case_name, const char *what)
{
    char name[512];
    snprintf(name, sizeof name, "%s.%s", case_name, what);
    return fixture(FIXTURES, name);
}

/* Loads PyTorch's state_dict of the case into m (strict), and puts m in eval mode. */
static void load(fl_module *m, const char *case_name)
{
    assert_non_null(m);
    fl_tensor_map *names = fl_tensor_map_create(), *values = fl_tensor_map_create();
    assert_int_equal(fl_module_state_dict(m, names), FL_OK);
    for (size_t i = 0; i < fl_tensor_map_count(names); i++) {
        char key[256];
        snprintf(key, sizeof key, "sd.%s", fl_tensor_map_name_at(names, i));
        fl_tensor_map_set(values, fl_tensor_map_name_at(names, i), fx(case_name, key));
    }
    assert_int_equal(fl_module_load_state_dict(m, values, true), FL_OK);
    fl_tensor_map_free(names);
    fl_tensor_map_free(values);
    fl_module_train(m, false);
}

static fl_variable *input(const char *case_name, const char *what)
{
    return fl_v_new(fx(case_name, what), true);
}

/* Backpropagates sum(y * w) and compares y, the inputs' and every parameter's gradient. */
static void compare(fl_module *m, const char *case_name, fl_variable *y, fl_variable *const *inputs, int count,
                    const char *const *input_names)
{
    assert_non_null(y);
    assert_close(fl_v_value(y), fx(case_name, "y"), RTOL, ATOL);
    fl_variable *w = fl_v_new(fx(case_name, "w"), false);
    assert_int_equal(fl_v_backward(fl_v_sum(fl_v_mul(y, w), FL_ALL_AXES, false), NULL, false), FL_OK);
    char key[256];
    for (int i = 0; i < count; i++) {
        snprintf(key, sizeof key, "grad.%s", input_names[i]);
        assert_close(fl_v_grad(inputs[i]), fx(case_name, key), RTOL, ATOL);
    }
    fl_parameters *p = fl_module_parameters(m);
    for (size_t i = 0; i < p->count; i++) {
        snprintf(key, sizeof key, "grad.%s", p->names[i]);
        assert_close(fl_v_grad(p->items[i]), fx(case_name, key), RTOL, ATOL);
    }
    fl_parameters_free(p);
}

/* ---- attention ---- */

static void self_attention_matches_pytorch(void **state)
{
    fl_module *m = fl_nn_multihead_attention(8, 2, 0.0, true, true);
    load(m, "mha_self");
    fl_parameters *p = fl_module_parameters(m);
    const char *names[] = {"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"};
    assert_int_equal(p->count, 4);
    for (int i = 0; i < 4; i++)
        assert_string_equal(p->names[i], names[i]);
    fl_parameters_free(p);
    fl_variable *x = input("mha_self", "x");
    compare(m, "mha_self", fl_module_forward(m, x), FL_VARS(x), (const char *[]){"x"});
    fl_module_release(m);
}

static void cross_attention_with_both_masks_matches_pytorch(void **state)
{
    fl_module *m = fl_nn_multihead_attention(8, 2, 0.0, true, true);
    load(m, "mha_cross");
    fl_variable *q = input("mha_cross", "q"), *k = input("mha_cross", "k"), *v = input("mha_cross", "v");
    fl_variable *y = fl_nn_multihead_attention_forward(m, q, k, v, fx("mha_cross", "key_padding_mask"),
                                                       fx("mha_cross", "attn_mask"), false);
    compare(m, "mha_cross", y, FL_VARS(q, k, v), (const char *[]){"q", "k", "v"});
    fl_module_release(m);
}

static void a_bool_attention_mask_forbids_where_true(void **state)
{
    fl_module *m = fl_nn_multihead_attention(8, 2, 0.0, true, true);
    load(m, "mha_bool");
    fl_variable *x = input("mha_bool", "x");
    fl_variable *y = fl_nn_multihead_attention_forward(m, x, x, x, NULL, fx("mha_bool", "attn_mask"), false);
    compare(m, "mha_bool", y, FL_VARS(x), (const char *[]){"x"});
    fl_module_release(m);
}

static void sequence_first_layout_transposes_around_batch_first(void **state)
{
    fl_module *first = fl_nn_multihead_attention(8, 2, 0.0, true, false);
    load(first, "mha_self");
    fl_variable *x = fl_v_new(fx("mha_self", "x"), false);
    fl_variable *y = fl_module_forward(first, fl_v_transpose(x, 0, 1));
    assert_close(fl_transpose(fl_v_value(y), 0, 1), fx("mha_self", "y"), RTOL, ATOL);
    fl_module_release(first);
}

static void attention_dropout_acts_in_training_only(void **state)
{
    fl_variable *q = fl_v_new(gradcheck_input(-1, 1, FL_SHAPE(2, 3, 4)), false);
    fl_variable *v = fl_v_new(gradcheck_input(-1, 1, FL_SHAPE(2, 3, 4)), false);
    fl_variable *all_dropped = fl_f_scaled_dot_product_attention(q, q, v, NULL, 1.0, false, true);
    assert_close(fl_v_value(all_dropped), fl_zeros(FL_F64, FL_SHAPE(2, 3, 4)), 0, 0);
    fl_variable *eval = fl_f_scaled_dot_product_attention(q, q, v, NULL, 1.0, false, false);
    fl_variable *plain = fl_f_scaled_dot_product_attention(q, q, v, NULL, 0.0, false, true);
    assert_close(fl_v_value(eval), fl_v_value(plain), 0, 0);
    /* Half dropped: the kept weights are doubled, so each output is a sum of doubled
     * value rows, and the mean over many draws is near the undropped output. */
    fl_variable *half = fl_f_scaled_dot_product_attention(q, q, v, NULL, 0.5, false, true);
    assert_false(fl_item(fl_all(fl_eq(fl_v_value(half), fl_v_value(plain)), FL_ALL_AXES, false)));
}

/* ---- the Transformer encoder ---- */

static void encoder_layer(const char *case_name, bool norm_first, const char *activation)
{
    fl_module *m = fl_nn_transformer_encoder_layer(8, 2, 16, 0.0, activation, 1e-5, true, norm_first);
    load(m, case_name);
    fl_variable *x = input(case_name, "x");
    fl_variable *y = fl_nn_transformer_encoder_layer_forward(m, x, fx(case_name, "key_padding_mask"), NULL, false);
    compare(m, case_name, y, FL_VARS(x), (const char *[]){"x"});
    fl_module_release(m);
}

static void post_norm_encoder_layer_matches_pytorch(void **state) { encoder_layer("enc_post", false, "relu"); }
static void pre_norm_gelu_encoder_layer_matches_pytorch(void **state) { encoder_layer("enc_pre", true, "gelu"); }

static void encoder_stack_with_final_norm_matches_pytorch(void **state)
{
    const int64_t features[] = {8};
    fl_module *layer = fl_nn_transformer_encoder_layer(8, 2, 16, 0.0, "relu", 1e-5, true, false);
    fl_module *m = fl_nn_transformer_encoder(layer, 2, fl_nn_layer_norm(1, features, 1e-5, true));
    load(m, "encoder");
    assert_non_null(fl_module_parameter(fl_module_child(fl_module_child(fl_module_child(m, "layers"), "1"), "norm2"),
                                        "weight"));
    fl_variable *x = input("encoder", "x");
    compare(m, "encoder", fl_module_forward(m, x), FL_VARS(x), (const char *[]){"x"});
    fl_module_release(m);
}

static bool all_finite(const fl_tensor *t)
{
    return t && fl_item(fl_any(fl_logical_or(fl_isnan(t), fl_isinf(t)), FL_ALL_AXES, false)) == 0;
}

/* A fully padded sample: every query of it has all its keys masked. PyTorch's
 * scaled_dot_product_attention (and MultiheadAttention with need_weights=False, as the
 * encoder calls it) gives that sample finite values and gradients; a plain softmax
 * gives nan, which the backward pass spreads to every parameter of the batch. */
static void a_fully_padded_sample_leaves_the_batch_gradients_finite(void **state)
{
    fl_manual_seed(17);
    fl_module *layer = fl_nn_transformer_encoder_layer(8, 2, 16, 0.0, "relu", 1e-5, true, false);
    fl_module *m = fl_nn_transformer_encoder(layer, 2, NULL);
    assert_non_null(m);
    fl_tensor *x = fl_randn(FL_F32, FL_SHAPE(3, 4, 8));
    fl_tensor *padded = T_BOOL(FL_SHAPE(3, 4), 0, 0, 0, 1, 1, 1, 1, 1, 0, 0, 1, 1);
    fl_tensor *w = fl_randn(FL_F32, FL_SHAPE(3, 4, 8));
    fl_tensor *kept = T_I64(FL_SHAPE(2), 0, 2);
    fl_parameters *p = fl_module_parameters(m);
    fl_tensor *grads[2][64];
    assert_true(p->count <= 64);
    for (int run = 0; run < 2; run++) {
        /* run 0: the batch with sample 1 padded out (and weighted 0 in the loss);
         * run 1: the same batch without sample 1. */
        fl_tensor *xs = run ? fl_index_select(x, 0, kept) : x, *ws = run ? fl_index_select(w, 0, kept) : w;
        fl_tensor *masks = run ? fl_index_select(padded, 0, kept) : padded;
        if (!run)
            ws = fl_mul(w, T_F32(FL_SHAPE(3, 1, 1), 1, 0, 1));
        fl_module_zero_grad(m);
        fl_variable *y = fl_nn_transformer_encoder_forward(m, fl_v_new(xs, false), masks, NULL, false);
        assert_non_null(y);
        assert_true(all_finite(fl_v_value(y)));
        assert_int_equal(fl_v_backward(fl_v_sum(fl_v_mul(y, fl_v_new(ws, false)), FL_ALL_AXES, false), NULL, false),
                         FL_OK);
        for (size_t i = 0; i < p->count; i++)
            grads[run][i] = fl_copy(fl_v_grad(p->items[i]));
    }
    for (size_t i = 0; i < p->count; i++) {
        assert_true(all_finite(grads[0][i]));
        assert_close(grads[0][i], grads[1][i], 1e-5, 1e-6);
    }
    fl_parameters_free(p);

    /* MultiheadAttention alone: the padded sample's output is out_proj's bias. */
    fl_module *mha = fl_nn_multihead_attention(8, 2, 0.0, true, true);
    fl_tensor *bias = fl_randn(FL_F32, FL_SHAPE(8));
    assert_int_equal(fl_v_set_value(fl_module_parameter(fl_module_child(mha, "out_proj"), "bias"), bias), FL_OK);
    fl_variable *xv = fl_v_new(x, true);
    fl_variable *y = fl_nn_multihead_attention_forward(mha, xv, xv, xv, padded, NULL, false);
    assert_close(fl_index(fl_v_value(y), FL_INDEX(FL_AT(1))), fl_expand(bias, FL_SHAPE(4, 8)), 0, 0);
    assert_int_equal(fl_v_backward(fl_v_sum(y, FL_ALL_AXES, false), NULL, false), FL_OK);
    assert_true(all_finite(fl_v_grad(xv)));
    fl_module_release(mha);
    fl_module_release(m);
    assert_no_error();
}

/* One mask convention (nn.h): a bool mask is true where attention is forbidden, in
 * scaled dot-product attention, MultiheadAttention's two masks and the encoder layer and
 * stack alike; so each gives with a bool mask what it gives with the float mask
 * where(mask, -inf, 0), MultiheadAttention equals its composition from
 * fl_f_scaled_dot_product_attention with the same bool mask, and a query with every key
 * forbidden gets zeros and finite gradients everywhere. */
static fl_tensor *as_float(const fl_tensor *mask)
{
    return fl_where(mask, fl_scalar(-INFINITY, FL_F32), fl_scalar(0, FL_F32));
}

static void one_bool_mask_convention_across_attention_functions(void **state)
{
    fl_manual_seed(23);
    /* query 2 may attend nothing; query 0 only itself */
    fl_tensor *attn = T_BOOL(FL_SHAPE(4, 4), 0, 1, 1, 1, 0, 0, 1, 0, 1, 1, 1, 1, 0, 1, 0, 0);
    fl_tensor *padding = T_BOOL(FL_SHAPE(2, 4), 0, 0, 0, 0, 0, 0, 0, 1);
    fl_tensor *combined = fl_logical_or(fl_reshape(padding, 4, (int64_t[]){2, 1, 1, 4}), attn);

    fl_variable *q = fl_v_new(fl_randn(FL_F32, FL_SHAPE(2, 2, 4, 4)), true);
    fl_variable *k = fl_v_new(fl_randn(FL_F32, FL_SHAPE(2, 2, 4, 4)), true);
    fl_variable *v = fl_v_new(fl_randn(FL_F32, FL_SHAPE(2, 2, 4, 4)), true);
    fl_variable *sdpa = fl_f_scaled_dot_product_attention(q, k, v, combined, 0.0, false, false);
    assert_non_null(sdpa);
    assert_close(fl_v_value(sdpa),
                 fl_v_value(fl_f_scaled_dot_product_attention(q, k, v, as_float(combined), 0.0, false, false)), 0, 0);
    assert_close(fl_index(fl_v_value(sdpa), FL_INDEX(FL_SPAN, FL_SPAN, FL_AT(2))), fl_zeros(FL_F32, FL_SHAPE(2, 2, 4)),
                 0, 0);
    /* query 0 sees key 0 only: its output is v's row 0 */
    assert_close(fl_index(fl_v_value(sdpa), FL_INDEX(FL_SPAN, FL_SPAN, FL_AT(0))),
                 fl_index(fl_v_value(v), FL_INDEX(FL_SPAN, FL_SPAN, FL_AT(0))), 1e-6, 1e-6);
    assert_int_equal(fl_v_backward(fl_v_sum(sdpa, FL_ALL_AXES, false), NULL, false), FL_OK);
    assert_true(all_finite(fl_v_grad(q)) && all_finite(fl_v_grad(k)) && all_finite(fl_v_grad(v)));

    fl_module *mha = fl_nn_multihead_attention(8, 2, 0.0, true, true);
    fl_tensor *bias = fl_randn(FL_F32, FL_SHAPE(8));
    assert_int_equal(fl_v_set_value(fl_module_parameter(fl_module_child(mha, "out_proj"), "bias"), bias), FL_OK);
    fl_variable *x = fl_v_new(fl_randn(FL_F32, FL_SHAPE(2, 4, 8)), true);
    fl_variable *y = fl_nn_multihead_attention_forward(mha, x, x, x, padding, attn, false);
    assert_non_null(y);
    assert_close(fl_v_value(y),
                 fl_v_value(fl_nn_multihead_attention_forward(mha, x, x, x, as_float(padding), as_float(attn), false)),
                 0, 0);
    fl_variable *parts[3];
    fl_v_split(fl_f_linear(x, fl_module_parameter(mha, "in_proj_weight"), fl_module_parameter(mha, "in_proj_bias")),
               (int64_t[]){8, 8, 8}, 3, -1, parts);
    for (int i = 0; i < 3; i++)
        parts[i] = fl_v_permute(fl_v_reshape(parts[i], 4, (int64_t[]){2, 4, 2, 4}), (int[]){0, 2, 1, 3});
    fl_variable *heads = fl_f_scaled_dot_product_attention(parts[0], parts[1], parts[2], combined, 0.0, false, false);
    fl_variable *merged = fl_v_reshape(fl_v_permute(heads, (int[]){0, 2, 1, 3}), 3, (int64_t[]){2, 4, 8});
    assert_close(fl_v_value(y), fl_v_value(fl_module_forward(fl_module_child(mha, "out_proj"), merged)), 1e-5, 1e-6);
    assert_close(fl_index(fl_v_value(y), FL_INDEX(FL_SPAN, FL_AT(2))), fl_expand(bias, FL_SHAPE(2, 8)), 0, 0);
    assert_int_equal(fl_v_backward(fl_v_sum(y, FL_ALL_AXES, false), NULL, false), FL_OK);
    assert_true(all_finite(fl_v_grad(x)));

    fl_module *layer = fl_nn_transformer_encoder_layer(8, 2, 16, 0.0, "relu", 1e-5, true, false);
    fl_module_train(layer, false);
    fl_variable *xl = fl_v_new(fl_v_value(x), true);
    fl_variable *yl = fl_nn_transformer_encoder_layer_forward(layer, xl, padding, attn, false);
    assert_non_null(yl);
    assert_close(
        fl_v_value(yl),
        fl_v_value(fl_nn_transformer_encoder_layer_forward(layer, xl, as_float(padding), as_float(attn), false)), 0, 0);
    /* The layer's attention is its self_attn child with the same masks: post-norm. */
    fl_variable *attended = fl_nn_multihead_attention_forward(fl_module_child(layer, "self_attn"), xl, xl, xl, padding,
                                                              attn, false);
    fl_variable *h = fl_module_forward(fl_module_child(layer, "norm1"), fl_v_add(xl, attended));
    fl_variable *ff = fl_module_forward(fl_module_child(layer, "linear2"),
                                        fl_v_relu(fl_module_forward(fl_module_child(layer, "linear1"), h)));
    assert_close(fl_v_value(yl), fl_v_value(fl_module_forward(fl_module_child(layer, "norm2"), fl_v_add(h, ff))), 1e-5,
                 1e-6);
    assert_int_equal(fl_v_backward(fl_v_sum(fl_v_mul(yl, yl), FL_ALL_AXES, false), NULL, false), FL_OK);
    assert_true(all_finite(fl_v_grad(xl)));

    fl_module *encoder = fl_nn_transformer_encoder(layer, 2, NULL);
    fl_module_train(encoder, false);
    fl_variable *ye = fl_nn_transformer_encoder_forward(encoder, x, padding, attn, false);
    assert_non_null(ye);
    assert_close(fl_v_value(ye),
                 fl_v_value(fl_nn_transformer_encoder_forward(encoder, x, as_float(padding), as_float(attn), false)), 0,
                 0);
    fl_module_zero_grad(encoder);
    assert_int_equal(fl_v_backward(fl_v_sum(fl_v_mul(ye, ye), FL_ALL_AXES, false), NULL, false), FL_OK);
    fl_parameters *p = fl_module_parameters(encoder);
    for (size_t i = 0; i < p->count; i++)
        assert_true(all_finite(fl_v_grad(p->items[i])));
    fl_parameters_free(p);
    fl_module_release(encoder);
    fl_module_release(mha);
    assert_no_error();
}

/* ---- causal attention ---- */

static void causal_self_attention_matches_pytorch(void **state)
{
    fl_module *m = fl_nn_multihead_attention(8, 2, 0.0, true, true);
    load(m, "mha_causal");
    fl_variable *x = input("mha_causal", "x");
    compare(m, "mha_causal", fl_nn_multihead_attention_forward(m, x, x, x, NULL, NULL, true), FL_VARS(x),
            (const char *[]){"x"});
    fl_module_release(m);
}

static void causal_padded_encoder_layer_matches_pytorch(void **state)
{
    fl_module *m = fl_nn_transformer_encoder_layer(8, 2, 16, 0.0, "gelu", 1e-5, true, true);
    load(m, "enc_causal");
    fl_variable *x = input("enc_causal", "x");
    fl_variable *y = fl_nn_transformer_encoder_layer_forward(m, x, fx("enc_causal", "key_padding_mask"), NULL, true);
    compare(m, "enc_causal", y, FL_VARS(x), (const char *[]){"x"});
    fl_module_release(m);
}

/* is_causal is the triangular mask written out (true above the diagonal), for square and
 * oblong scores, alone or with another mask, in every attention function. */
static void causal_equals_an_explicit_triangular_mask(void **state)
{
    fl_manual_seed(29);
    fl_tensor *wide = T_BOOL(FL_SHAPE(3, 5), 0, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1);
    fl_tensor *tall = T_BOOL(FL_SHAPE(5, 3), 0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    fl_tensor *triangles[2] = {wide, tall};
    int64_t ls[2] = {3, 5}, ss[2] = {5, 3};
    for (int i = 0; i < 2; i++) {
        fl_variable *q = fl_v_new(fl_randn(FL_F32, FL_SHAPE(2, 2, ls[i], 4)), false);
        fl_variable *k = fl_v_new(fl_randn(FL_F32, FL_SHAPE(2, 2, ss[i], 4)), false);
        fl_variable *v = fl_v_new(fl_randn(FL_F32, FL_SHAPE(2, 2, ss[i], 4)), false);
        fl_tensor *tri = triangles[i];
        assert_close(fl_v_value(fl_f_scaled_dot_product_attention(q, k, v, NULL, 0.0, true, false)),
                     fl_v_value(fl_f_scaled_dot_product_attention(q, k, v, tri, 0.0, false, false)), 0, 0);
        /* with a padding mask of the last key: either forbids */
        fl_tensor *last = fl_reshape(T_BOOL(FL_SHAPE(2), 0, 1), 4, (int64_t[]){2, 1, 1, 1});
        fl_tensor *pad =
            fl_logical_and(last, fl_eq(fl_arange(0, (double)ss[i], 1, FL_I64), fl_scalar(ss[i] - 1, FL_I64)));
        assert_close(fl_v_value(fl_f_scaled_dot_product_attention(q, k, v, pad, 0.0, true, false)),
                     fl_v_value(fl_f_scaled_dot_product_attention(q, k, v, fl_logical_or(pad, tri), 0.0, false, false)),
                     0, 0);
        assert_close(fl_v_value(fl_f_scaled_dot_product_attention(q, k, v, as_float(pad), 0.0, true, false)),
                     fl_v_value(fl_f_scaled_dot_product_attention(q, k, v, fl_logical_or(pad, tri), 0.0, false, false)),
                     0, 0);
    }
    fl_tensor *tri4 = T_BOOL(FL_SHAPE(4, 4), 0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 0);
    fl_tensor *padding = T_BOOL(FL_SHAPE(2, 4), 0, 0, 0, 0, 0, 0, 1, 1);
    fl_variable *x = fl_v_new(fl_randn(FL_F32, FL_SHAPE(2, 4, 8)), false);
    fl_module *mha = fl_nn_multihead_attention(8, 2, 0.0, true, true);
    assert_close(fl_v_value(fl_nn_multihead_attention_forward(mha, x, x, x, padding, NULL, true)),
                 fl_v_value(fl_nn_multihead_attention_forward(mha, x, x, x, padding, tri4, false)), 0, 0);
    fl_module *layer = fl_nn_transformer_encoder_layer(8, 2, 16, 0.0, "relu", 1e-5, true, false);
    fl_module_train(layer, false);
    assert_close(fl_v_value(fl_nn_transformer_encoder_layer_forward(layer, x, padding, NULL, true)),
                 fl_v_value(fl_nn_transformer_encoder_layer_forward(layer, x, padding, tri4, false)), 0, 0);
    fl_module *encoder = fl_nn_transformer_encoder(layer, 2, NULL);
    fl_module_train(encoder, false);
    fl_variable *causal = fl_nn_transformer_encoder_forward(encoder, x, NULL, NULL, true);
    assert_close(fl_v_value(causal), fl_v_value(fl_nn_transformer_encoder_forward(encoder, x, NULL, tri4, false)), 0,
                 0);
    /* a causal output does not depend on later positions */
    fl_tensor *changed = fl_concat((fl_tensor *[]){fl_index(fl_v_value(x), FL_INDEX(FL_SPAN, FL_RANGE(0, 2))),
                                                   fl_randn(FL_F32, FL_SHAPE(2, 2, 8))},
                                   2, 1);
    fl_variable *again = fl_nn_transformer_encoder_forward(encoder, fl_v_new(changed, false), NULL, NULL, true);
    assert_close(fl_index(fl_v_value(again), FL_INDEX(FL_SPAN, FL_RANGE(0, 2))),
                 fl_index(fl_v_value(causal), FL_INDEX(FL_SPAN, FL_RANGE(0, 2))), 1e-5, 1e-6);
    fl_module_release(encoder);
    fl_module_release(mha);
    assert_no_error();
}

/* The same against PyTorch: values and every gradient, the padded sample's included. */
static void a_fully_padded_sample_matches_pytorch(void **state)
{
    fl_module *layer = fl_nn_transformer_encoder_layer(8, 2, 16, 0.0, "relu", 1e-5, true, false);
    fl_module *m = fl_nn_transformer_encoder(layer, 2, NULL);
    load(m, "enc_padded");
    fl_variable *x = input("enc_padded", "x");
    fl_variable *y = fl_nn_transformer_encoder_forward(m, x, fx("enc_padded", "key_padding_mask"), NULL, false);
    compare(m, "enc_padded", y, FL_VARS(x), (const char *[]){"x"});
    fl_module_release(m);
}

/* ---- the Transformer decoder ---- */

static void decoder_layer(const char *case_name, bool norm_first, const char *activation)
{
    fl_module *m = fl_nn_transformer_decoder_layer(8, 2, 16, 0.0, activation, 1e-5, true, norm_first);
    load(m, case_name);
    fl_variable *tgt = input(case_name, "tgt"), *memory = input(case_name, "memory");
    /* PyTorch is given the triangular tgt_mask; here tgt_is_causal alone stands for it */
    fl_transformer_decoder_masks masks = {.tgt_key_padding_mask = fx(case_name, "tgt_key_padding_mask"),
                                          .memory_key_padding_mask = fx(case_name, "memory_key_padding_mask"),
                                          .tgt_is_causal = true};
    fl_variable *y = fl_nn_transformer_decoder_layer_forward(m, tgt, memory, &masks);
    compare(m, case_name, y, FL_VARS(tgt, memory), (const char *[]){"tgt", "memory"});
    fl_module_release(m);
}

static void post_norm_causal_decoder_layer_matches_pytorch(void **state) { decoder_layer("dec_post", false, "relu"); }
static void pre_norm_gelu_decoder_layer_matches_pytorch(void **state) { decoder_layer("dec_pre", true, "gelu"); }

static void decoder_stack_with_final_norm_matches_pytorch(void **state)
{
    const int64_t features[] = {8};
    fl_module *layer = fl_nn_transformer_decoder_layer(8, 2, 16, 0.0, "relu", 1e-5, true, false);
    fl_module *m = fl_nn_transformer_decoder(layer, 2, fl_nn_layer_norm(1, features, 1e-5, true));
    load(m, "decoder");
    fl_parameters *p = fl_module_parameters(m);
    assert_string_equal(p->names[0], "layers.0.self_attn.in_proj_weight");
    assert_string_equal(p->names[4], "layers.0.multihead_attn.in_proj_weight");
    fl_parameters_free(p);
    fl_variable *tgt = input("decoder", "tgt"), *memory = input("decoder", "memory");
    compare(m, "decoder", fl_nn_transformer_decoder_forward(m, tgt, memory, NULL), FL_VARS(tgt, memory),
            (const char *[]){"tgt", "memory"});
    /* sequence first: the same, transposed */
    fl_module *first = fl_nn_transformer_decoder(
        fl_nn_transformer_decoder_layer(8, 2, 16, 0.0, "relu", 1e-5, false, false), 2,
        fl_nn_layer_norm(1, features, 1e-5, true));
    load(first, "decoder");
    fl_variable *y = fl_nn_transformer_decoder_forward(first, fl_v_transpose(tgt, 0, 1), fl_v_transpose(memory, 0, 1),
                                                       NULL);
    assert_non_null(y);
    assert_close(fl_transpose(fl_v_value(y), 0, 1), fx("decoder", "y"), RTOL, ATOL);
    fl_module_release(first);
    fl_module_release(m);
}

/* A memory sample padded throughout: the attention to it is zero (out_proj's bias), and
 * the values and gradients stay finite. */
static void a_fully_padded_memory_leaves_the_decoder_finite(void **state)
{
    fl_manual_seed(41);
    fl_module *m = fl_nn_transformer_decoder(
        fl_nn_transformer_decoder_layer(8, 2, 16, 0.0, "gelu", 1e-5, true, true), 2, NULL);
    assert_non_null(m);
    fl_variable *tgt = fl_v_new(fl_randn(FL_F32, FL_SHAPE(2, 3, 8)), true);
    fl_variable *memory = fl_v_new(fl_randn(FL_F32, FL_SHAPE(2, 4, 8)), true);
    fl_transformer_decoder_masks masks = {.memory_key_padding_mask = T_BOOL(FL_SHAPE(2, 4), 0, 0, 1, 1, 1, 1, 1, 1),
                                          .tgt_is_causal = true};
    fl_variable *y = fl_nn_transformer_decoder_forward(m, tgt, memory, &masks);
    assert_non_null(y);
    assert_true(all_finite(fl_v_value(y)));
    assert_int_equal(fl_v_backward(fl_v_sum(fl_v_mul(y, y), FL_ALL_AXES, false), NULL, false), FL_OK);
    assert_true(all_finite(fl_v_grad(tgt)) && all_finite(fl_v_grad(memory)));
    assert_close(fl_index(fl_v_grad(memory), FL_INDEX(FL_AT(1))), fl_zeros(FL_F32, FL_SHAPE(4, 8)), 0, 0);
    fl_parameters *p = fl_module_parameters(m);
    for (size_t i = 0; i < p->count; i++)
        assert_true(all_finite(fl_v_grad(p->items[i])));
    fl_parameters_free(p);

    assert_fails(fl_module_forward(m, tgt), FL_ERR_VALUE, "needs a memory");
    assert_fails(fl_nn_transformer_decoder_forward(m, tgt, fl_v_new(fl_zeros(FL_F32, FL_SHAPE(2, 4, 6)), false), NULL),
                 FL_ERR_SHAPE, "embedding 8");
    assert_fails(fl_nn_transformer_decoder_forward(m, tgt, NULL, NULL), FL_ERR_NULL, "decoder_forward");
    assert_fails(fl_nn_transformer_decoder(fl_nn_transformer_encoder_layer(8, 2, 16, 0, "relu", 1e-5, true, false), 2,
                                           NULL),
                 FL_ERR_VALUE, "not a TransformerDecoderLayer");
    assert_fails(fl_nn_transformer_decoder_layer(8, 2, 16, 0, "tanh", 1e-5, true, false), FL_ERR_VALUE, "\"relu\"");
    assert_fails(fl_nn_transformer_decoder_layer_forward(m, tgt, memory, NULL), FL_ERR_VALUE,
                 "not a TransformerDecoderLayer");
    fl_module_release(m);
}

/* ---- positional embeddings ---- */

/* The paper's formula, written out: [len, dim] in f64. */
static fl_tensor *sinusoids(int64_t len, int64_t dim)
{
    double values[6 * 5];
    for (int64_t pos = 0; pos < len; pos++)
        for (int64_t i = 0; i < dim; i++) {
            double angle = (double)pos / pow(10000.0, (double)(2 * (i / 2)) / (double)dim);
            values[pos * dim + i] = i % 2 == 0 ? sin(angle) : cos(angle);
        }
    return fl_from_data(values, FL_F64, 2, (int64_t[]){len, dim});
}

static void sinusoidal_positions_follow_the_formula(void **state)
{
    fl_manual_seed(31);
    /* odd E: the last sine has no cosine partner */
    fl_module *m = fl_nn_sinusoidal_positional_embedding(8, 5, true);
    assert_non_null(m);
    fl_parameters *p = fl_module_parameters(m);
    assert_int_equal(p->count, 0);
    fl_parameters_free(p);
    fl_tensor *x = fl_randn(FL_F64, FL_SHAPE(2, 6, 5));
    fl_variable *xv = fl_v_new(x, true);
    fl_variable *y = fl_module_forward(m, xv);
    assert_non_null(y);
    assert_close(fl_v_value(y), fl_add(x, fl_unsqueeze(sinusoids(6, 5), 0)), 1e-12, 1e-12);
    /* spot values: position 1, axes 0..3 of E = 5: sin 1, cos 1, sin 10000^-0.4, cos 10000^-0.4 */
    double expect[4] = {sin(1.0), cos(1.0), sin(pow(10000.0, -0.4)), cos(pow(10000.0, -0.4))};
    fl_tensor *row = fl_index(fl_sub(fl_v_value(y), x), FL_INDEX(FL_AT(0), FL_AT(1), FL_RANGE(0, 4)));
    assert_close(row, fl_from_data(expect, FL_F64, 1, (int64_t[]){4}), 1e-12, 1e-12);
    assert_int_equal(fl_v_backward(fl_v_sum(y, FL_ALL_AXES, false), NULL, false), FL_OK);
    assert_close(fl_v_grad(xv), fl_ones(FL_F64, FL_SHAPE(2, 6, 5)), 0, 0);
    /* sequence first, f32: the same positions on axis 0 */
    fl_module *first = fl_nn_sinusoidal_positional_embedding(8, 5, false);
    fl_tensor *x32 = fl_randn(FL_F32, FL_SHAPE(3, 2, 5));
    fl_variable *y32 = fl_module_forward(first, fl_v_new(x32, false));
    assert_non_null(y32);
    assert_close(fl_v_value(y32), fl_add(x32, fl_cast(fl_unsqueeze(sinusoids(3, 5), 1), FL_F32)), 1e-6, 1e-6);
    assert_fails(fl_module_forward(m, fl_v_new(fl_zeros(FL_F64, FL_SHAPE(2, 9, 5)), false)), FL_ERR_SHAPE,
                 "L <= max_len = 8");
    assert_fails(fl_module_forward(m, fl_v_new(fl_zeros(FL_F64, FL_SHAPE(2, 6, 4)), false)), FL_ERR_SHAPE, "E = 5");
    assert_fails(fl_module_forward(m, fl_v_new(fl_zeros(FL_I64, FL_SHAPE(2, 6, 5)), false)), FL_ERR_DTYPE,
                 "floating");
    assert_fails(fl_nn_sinusoidal_positional_embedding(0, 5, true), FL_ERR_VALUE, "must be positive");
    fl_module_release(first);
    fl_module_release(m);
}

static void learned_positions_are_rows_of_the_weight(void **state)
{
    fl_manual_seed(37);
    fl_module *m = fl_nn_learned_positional_embedding(6, 4, true);
    assert_non_null(m);
    fl_variable *weight = fl_module_parameter(m, "weight");
    assert_non_null(weight);
    const fl_tensor *w = fl_v_value(weight);
    assert_int_equal(fl_dim(w, 0), 6);
    assert_int_equal(fl_dim(w, 1), 4);
    fl_tensor *x = fl_randn(FL_F32, FL_SHAPE(2, 3, 4));
    fl_variable *y = fl_module_forward(m, fl_v_new(x, false));
    assert_non_null(y);
    fl_tensor *rows = fl_index(w, FL_INDEX(FL_RANGE(0, 3)));
    assert_close(fl_v_value(y), fl_add(x, fl_unsqueeze(rows, 0)), 0, 0);
    /* the gradient of row pos is the sum over the batch of dy at pos; later rows get none */
    fl_tensor *dy = fl_randn(FL_F32, FL_SHAPE(2, 3, 4));
    assert_int_equal(fl_v_backward(fl_v_sum(fl_v_mul(y, fl_v_new(dy, false)), FL_ALL_AXES, false), NULL, false),
                     FL_OK);
    fl_tensor *expect =
        fl_concat((fl_tensor *[]){fl_sum(dy, FL_AXES(0), false), fl_zeros(FL_F32, FL_SHAPE(3, 4))}, 2, 0);
    assert_close(fl_v_grad(weight), expect, 1e-6, 1e-6);
    fl_module *first = fl_nn_learned_positional_embedding(6, 4, false);
    fl_variable *w2 = fl_module_parameter(first, "weight");
    fl_tensor *xs = fl_randn(FL_F32, FL_SHAPE(5, 2, 4));
    fl_variable *ys = fl_module_forward(first, fl_v_new(xs, false));
    assert_non_null(ys);
    assert_close(fl_v_value(ys), fl_add(xs, fl_unsqueeze(fl_index(fl_v_value(w2), FL_INDEX(FL_RANGE(0, 5))), 1)), 0,
                 0);
    assert_fails(fl_module_forward(m, fl_v_new(fl_zeros(FL_F64, FL_SHAPE(2, 3, 4)), false)), FL_ERR_DTYPE,
                 "differ in dtype");
    assert_fails(fl_module_forward(first, fl_v_new(fl_zeros(FL_F32, FL_SHAPE(7, 2, 4)), false)), FL_ERR_SHAPE,
                 "[L, N, E]");
    fl_module_release(first);
    fl_module_release(m);
}

/* ---- recurrent layers ---- */

static fl_variable *flat(fl_variable *const *parts, int count)
{
    fl_variable *flattened[3];
    for (int i = 0; i < count; i++)
        flattened[i] = fl_v_reshape(parts[i], 1, (int64_t[]){-1});
    return fl_v_concat(flattened, count, 0);
}

static void two_layer_lstm_matches_pytorch(void **state)
{
    fl_module *m = fl_nn_lstm(3, 4, 2, true, true, 0.0, false);
    load(m, "lstm");
    fl_variable *x = input("lstm", "x"), *h0 = input("lstm", "h0"), *c0 = input("lstm", "c0"), *y, *hn, *cn;
    assert_int_equal(fl_nn_lstm_forward(m, x, h0, c0, &y, &hn, &cn), FL_OK);
    compare(m, "lstm", flat(FL_VARS(y, hn, cn)), FL_VARS(x, h0, c0), (const char *[]){"x", "h0", "c0"});
    assert_shape(fl_v_value(fl_module_forward(m, x)), 2, 6, 4);
    fl_module_release(m);
}

static void two_layer_gru_matches_pytorch(void **state)
{
    fl_module *m = fl_nn_gru(3, 4, 2, true, true, 0.0, false);
    load(m, "gru");
    fl_variable *x = input("gru", "x"), *h0 = input("gru", "h0"), *y, *hn;
    assert_int_equal(fl_nn_gru_forward(m, x, h0, &y, &hn), FL_OK);
    compare(m, "gru", flat(FL_VARS(y, hn)), FL_VARS(x, h0), (const char *[]){"x", "h0"});
    fl_module_release(m);
}

static void bidirectional_lstm_matches_pytorch(void **state)
{
    fl_module *m = fl_nn_lstm(3, 4, 1, true, false, 0.0, true);
    load(m, "bilstm");
    fl_variable *x = input("bilstm", "x"), *y, *hn, *cn;
    assert_int_equal(fl_nn_lstm_forward(m, x, NULL, NULL, &y, &hn, &cn), FL_OK);
    compare(m, "bilstm", flat(FL_VARS(y, hn, cn)), FL_VARS(x), (const char *[]){"x"});
    fl_module_release(m);
}

/* Without h0 the recurrence knows its initial state is zero and leaves the first
 * step out of W_hh's gradient (src/nn/recurrence.c): the same outputs and gradients
 * as with h0 given as zeros, which takes every step, in both directions, for one step
 * (no step left) and for five. */
static void lstm_without_h0_matches_a_zero_h0(void **state)
{
    for (int64_t steps = 1; steps <= 5; steps += 4) {
        fl_manual_seed(29);
        fl_module *m = fl_nn_lstm(3, 4, 2, true, true, 0.0, true);
        fl_parameters *p = fl_module_parameters(m);
        fl_tensor *x = fl_randn(FL_F32, FL_SHAPE(2, steps, 3)), *w = fl_randn(FL_F32, FL_SHAPE(2, steps, 8));
        const fl_tensor *outputs[2];
        fl_tensor *grads[2][16];
        assert_true(p->count <= 16);
        for (int given = 0; given < 2; given++) {
            fl_module_zero_grad(m);
            fl_variable *h0 = given ? fl_v_new(fl_zeros(FL_F32, FL_SHAPE(4, 2, 4)), false) : NULL, *y;
            assert_int_equal(fl_nn_lstm_forward(m, fl_v_new(x, false), h0, NULL, &y, NULL, NULL), FL_OK);
            assert_int_equal(fl_v_backward(fl_v_sum(fl_v_mul(y, fl_v_new(w, false)), FL_ALL_AXES, false), NULL, false),
                             FL_OK);
            outputs[given] = fl_v_value(y);
            for (size_t i = 0; i < p->count; i++)
                grads[given][i] = fl_copy(fl_v_grad(p->items[i]));
        }
        assert_close(outputs[0], outputs[1], 0, 0);
        for (size_t i = 0; i < p->count; i++)
            assert_close(grads[0][i], grads[1][i], 1e-6, 1e-6);
        fl_parameters_free(p);
        fl_module_release(m);
    }
    assert_no_error();
}

static void bidirectional_two_layer_gru_without_bias_matches_pytorch(void **state)
{
    fl_module *m = fl_nn_gru(3, 4, 2, false, false, 0.0, true);
    load(m, "bigru");
    fl_parameters *p = fl_module_parameters(m);
    assert_int_equal(p->count, 8);
    assert_string_equal(p->names[3], "weight_hh_l0_reverse");
    fl_parameters_free(p);
    fl_variable *x = input("bigru", "x"), *y, *hn;
    assert_int_equal(fl_nn_gru_forward(m, x, NULL, &y, &hn), FL_OK);
    compare(m, "bigru", flat(FL_VARS(y, hn)), FL_VARS(x), (const char *[]){"x"});
    fl_module_release(m);
}

static void dropout_between_layers_acts_in_training_only(void **state)
{
    fl_module *m = fl_nn_lstm(3, 4, 2, true, true, 0.5, false);
    fl_variable *x = fl_v_new(fx("lstm", "x"), false);
    fl_variable *trained = fl_module_forward(m, x);
    fl_module_train(m, false);
    fl_variable *a = fl_module_forward(m, x), *b = fl_module_forward(m, x);
    assert_close(fl_v_value(a), fl_v_value(b), 0, 0);
    assert_false(fl_item(fl_all(fl_eq(fl_v_value(trained), fl_v_value(a)), FL_ALL_AXES, false)));
    fl_module_release(m);
}

/* ---- CTC ---- */

static fl_variable *ctc_log_probs(void)
{
    return fl_v_new(fl_log_softmax(fx("ctc", "logits"), 2), true);
}

static void ctc_case(const char *reduction_name, fl_reduction reduction)
{
    char key[64];
    fl_variable *lp = ctc_log_probs();
    fl_variable *loss = fl_nn_ctc_loss(lp, fx("ctc", "targets"), fx("ctc", "input_lengths"),
                                       fx("ctc", "target_lengths"), 0, reduction, false);
    snprintf(key, sizeof key, "%s.loss", reduction_name);
    assert_close(fl_v_value(loss), fx("ctc", key), RTOL, ATOL);
    snprintf(key, sizeof key, "%s.w", reduction_name);
    fl_variable *objective = fl_v_sum(fl_v_mul(loss, fl_v_new(fx("ctc", key), false)), FL_ALL_AXES, false);
    assert_int_equal(fl_v_backward(objective, NULL, false), FL_OK);
    snprintf(key, sizeof key, "%s.grad", reduction_name);
    assert_close(fl_v_grad(lp), fx("ctc", key), RTOL, ATOL);
}

static void ctc_loss_matches_pytorch_for_every_reduction(void **state)
{
    ctc_case("none", FL_REDUCTION_NONE);
    ctc_case("sum", FL_REDUCTION_SUM);
    ctc_case("mean", FL_REDUCTION_MEAN);
}

static void ctc_impossible_alignments_are_infinite_or_zeroed(void **state)
{
    fl_variable *lp = ctc_log_probs();
    const fl_tensor *targets = fx("ctc_inf", "targets"), *il = fx("ctc_inf", "input_lengths"),
                    *tl = fx("ctc_inf", "target_lengths");
    fl_variable *none = fl_nn_ctc_loss(lp, targets, il, tl, 0, FL_REDUCTION_NONE, false);
    assert_close(fl_v_value(none), fx("ctc_inf", "none"), RTOL, ATOL);
    assert_true(isinf(fl_item(fl_index(fl_v_value(none), FL_INDEX(FL_AT(0))))));
    fl_variable *loss = fl_nn_ctc_loss(lp, targets, il, tl, 0, FL_REDUCTION_SUM, true);
    assert_close(fl_v_value(loss), fx("ctc_inf", "loss"), RTOL, ATOL);
    assert_int_equal(fl_v_backward(loss, NULL, false), FL_OK);
    assert_close(fl_v_grad(lp), fx("ctc_inf", "grad"), RTOL, ATOL);
}

/* ---- finite differences (f64) ---- */

static fl_variable *sdpa_float_mask(fl_variable *const *x, void *ctx)
{
    return fl_f_scaled_dot_product_attention(x[0], x[1], x[2], ctx, 0.0, false, true);
}

static fl_variable *sdpa_causal(fl_variable *const *x, void *ctx)
{
    return fl_f_scaled_dot_product_attention(x[0], x[1], x[2], ctx, 0.0, true, true);
}

static void attention_gradients_match_finite_differences(void **state)
{
    fl_tensor *q = gradcheck_input(-1, 1, FL_SHAPE(2, 3, 4)), *k = gradcheck_input(-1, 1, FL_SHAPE(2, 5, 4)),
              *v = gradcheck_input(-1, 1, FL_SHAPE(2, 5, 3));
    assert_gradcheck(sdpa_float_mask, NULL, q, k, v);
    assert_gradcheck(sdpa_float_mask, gradcheck_input(-1, 1, FL_SHAPE(3, 5)), q, k, v);
    /* bool masks are true where attention is forbidden */
    fl_tensor *forbidden = fl_le(gradcheck_input(0, 1, FL_SHAPE(3, 5)), fl_scalar(0.3, FL_F64));
    forbidden =
        fl_logical_and(forbidden, T_BOOL(FL_SHAPE(1, 5), 0, 1, 1, 1, 1)); /* the first key: no row all forbidden */
    assert_gradcheck(sdpa_float_mask, forbidden, q, k, v);
    /* A row with every key forbidden: zero weights, a zero output, as PyTorch's. */
    fl_tensor *row_forbidden = fl_logical_or(forbidden, T_BOOL(FL_SHAPE(3, 1), 0, 1, 0));
    assert_gradcheck(sdpa_float_mask, row_forbidden, q, k, v);
    assert_gradcheck(sdpa_float_mask, fl_where(row_forbidden, fl_scalar(-INFINITY, FL_F64), fl_scalar(0, FL_F64)), q,
                     k, v);
    fl_variable *out = fl_f_scaled_dot_product_attention(fl_v_new(q, false), fl_v_new(k, false), fl_v_new(v, false),
                                                         row_forbidden, 0.0, false, false);
    assert_close(fl_index(fl_v_value(out), FL_INDEX(FL_SPAN, FL_AT(1))), fl_zeros(FL_F64, FL_SHAPE(2, 3)), 0, 0);
    assert_gradcheck(sdpa_causal, NULL, q, k, v);
    assert_gradcheck(sdpa_causal, forbidden, q, k, v);
    /* Broadcast batch axes: one k and v for every head. */
    assert_gradcheck(sdpa_float_mask, NULL, gradcheck_input(-1, 1, FL_SHAPE(2, 2, 3, 4)), k, v);
}

static fl_variable *ctc_of_logits(fl_variable *const *x, void *ctx)
{
    fl_tensor *const *t = ctx;
    return fl_nn_ctc_loss(fl_v_log_softmax(x[0], 2), t[0], t[1], t[2], 0, FL_REDUCTION_NONE, false);
}

static void ctc_gradient_matches_finite_differences(void **state)
{
    fl_tensor *args[] = {T_I64(FL_SHAPE(3, 3), 1, 1, 2, 2, 3, 0, 3, 0, 0), T_I64(FL_SHAPE(3), 6, 4, 5),
                         T_I64(FL_SHAPE(3), 3, 2, 1)};
    assert_gradcheck(ctc_of_logits, args, gradcheck_input(-2, 2, FL_SHAPE(6, 3, 4)));
}

static fl_variable *lstm_steps(fl_variable *const *x, void *reverse)
{
    return fl__lstm_recurrence(x[0], x[4], x[1], x[2], x[3], reverse != NULL);
}

static fl_variable *gru_steps(fl_variable *const *x, void *reverse)
{
    return fl__gru_recurrence(x[0], x[1], x[2], x[3], reverse != NULL);
}

static void recurrence_gradients_match_finite_differences(void **state)
{
    fl_tensor *h0 = gradcheck_input(-1, 1, FL_SHAPE(2, 3)), *c0 = gradcheck_input(-1, 1, FL_SHAPE(2, 3));
    fl_tensor *lstm_x = gradcheck_input(-1, 1, FL_SHAPE(4, 2, 12)), *lstm_w = gradcheck_input(-1, 1, FL_SHAPE(12, 3));
    fl_tensor *lstm_b = gradcheck_input(-1, 1, FL_SHAPE(12));
    assert_gradcheck(lstm_steps, NULL, lstm_x, h0, c0, lstm_w, lstm_b);
    assert_gradcheck(lstm_steps, "reverse", lstm_x, h0, c0, lstm_w, lstm_b);
    fl_tensor *gru_x = gradcheck_input(-1, 1, FL_SHAPE(4, 2, 9)), *gru_w = gradcheck_input(-1, 1, FL_SHAPE(9, 3)),
              *gru_b = gradcheck_input(-1, 1, FL_SHAPE(9));
    assert_gradcheck(gru_steps, NULL, gru_x, h0, gru_w, gru_b);
    assert_gradcheck(gru_steps, "reverse", gru_x, h0, gru_w, gru_b);
}

/* ---- errors ---- */

/* A step of the cell and its gradient, fused or composed (whichever the default
 * backend's table holds): every output, owned by the test's scope. */
static void lstm_cell_step(const fl_tensor *pre, const fl_tensor *c_prev, const fl_tensor *dh, const fl_tensor *dc,
                           fl_tensor **out)
{
    assert_int_equal(fl_lstm_cell(pre, c_prev, &out[0], &out[1], &out[2]), FL_OK);
    assert_int_equal(fl_lstm_cell_backward(dh, dc, out[0], c_prev, out[1], &out[3], &out[4]), FL_OK);
}

/* The backend's fused LSTM cell (backend.h, lstm_cell) gives what the composition of
 * primitives gives, forward and backward, f32 and f64, for one row and one unit, a
 * language model's step, and strided inputs. */
static void fused_lstm_cell_matches_the_composition(void **state)
{
    fl_backend composing = support_derive(fl_default_backend()->name);
    if (!composing.lstm_cell && !composing.lstm_cell_backward) /* nothing fused to compare */
        skip();
    composing.lstm_cell = NULL;
    composing.lstm_cell_backward = NULL;
    const int64_t shapes[][2] = {{1, 1}, {1, 7}, {3, 1}, {5, 13}, {20, 256}};
    for (int k = 0; k < 5; k++)
        for (int dtype = 0; dtype < 2; dtype++)
            for (int strided = 0; strided < 2; strided++) {
                fl_scope scope = fl_scope_begin();
                fl_dtype dt = dtype ? FL_F64 : FL_F32;
                int64_t n = shapes[k][0], h = shapes[k][1];
                /* preactivations wide enough to saturate some gates */
                fl_tensor *pre = strided ? fl_transpose(fl_mul_scalar(fl_randn(dt, FL_SHAPE(4 * h, n)), 4), 0, 1)
                                         : fl_mul_scalar(fl_randn(dt, FL_SHAPE(n, 4 * h)), 4);
                fl_tensor *c_prev = fl_randn(dt, FL_SHAPE(n, h));
                fl_tensor *dh = fl_randn(dt, FL_SHAPE(n, h));
                fl_tensor *dc = strided ? fl_expand(fl_randn(dt, FL_SHAPE(1, h)), 2, (int64_t[]){n, h})
                                        : fl_randn(dt, FL_SHAPE(n, h));
                fl_tensor *fused[5], *composed[5];
                fl_backend original = support_override(&composing);
                lstm_cell_step(pre, c_prev, dh, dc, composed);
                support_override(&original);
                lstm_cell_step(pre, c_prev, dh, dc, fused);
                double tol = dtype ? 1e-13 : 2e-6;
                for (int i = 0; i < 5; i++) {
                    assert_dtype(fused[i], dt);
                    assert_close(fused[i], composed[i], tol, tol);
                }
                fl_scope_end(scope);
            }
    assert_no_error();
}

/* Forward and backward of one layer's recurrence into out: states, gates, dxproj, dh0,
 * dc0. */
static void lstm_sequence_run(const fl_tensor *xproj, const fl_tensor *bias, const fl_tensor *h0, const fl_tensor *c0,
                              const fl_tensor *w_hh, const fl_tensor *dstates, bool reverse, fl_tensor **out)
{
    assert_int_equal(fl_lstm_sequence(xproj, bias, h0, c0, w_hh, reverse, &out[0], &out[1]), FL_OK);
    assert_int_equal(
        fl_lstm_sequence_backward(dstates, out[0], out[1], h0, c0, w_hh, reverse, &out[2], &out[3], &out[4]), FL_OK);
}

/* The backend's fused recurrence (backend.h, lstm_sequence) gives what a product and
 * a cell per step give, forward and backward, in both directions, with and without
 * the bias, for one step and one unit, units that do not split evenly among threads,
 * a language model's layer, and strided inputs. f32 runs the kernel; f64, which the
 * cpu kernel declines, checks that a declined call composes. */
static void fused_lstm_sequence_matches_the_composition(void **state)
{
    fl_backend composing = support_derive(fl_default_backend()->name);
    if (!composing.lstm_sequence && !composing.lstm_sequence_backward) /* nothing fused to compare */
        skip();
    composing.lstm_sequence = NULL;
    composing.lstm_sequence_backward = NULL;
    const int64_t shapes[][3] = {{1, 1, 1}, {4, 3, 1}, {1, 2, 5}, {6, 5, 37}, {3, 20, 64}, {35, 20, 256}};
    for (int k = 0; k < 6; k++)
        for (int variant = 0; variant < 16; variant++) {
            bool f64 = variant & 1, strided = variant & 2, reverse = variant & 4, biased = variant & 8;
            fl_scope scope = fl_scope_begin();
            fl_dtype dt = f64 ? FL_F64 : FL_F32;
            int64_t steps = shapes[k][0], n = shapes[k][1], h = shapes[k][2];
            /* preactivations wide enough to saturate some gates, weights that keep the
             * states from saturating all of them */
            fl_tensor *xproj = strided ? fl_permute(fl_mul_scalar(fl_randn(dt, FL_SHAPE(n, 4 * h, steps)), 2),
                                                    (const int[]){2, 0, 1})
                                       : fl_mul_scalar(fl_randn(dt, FL_SHAPE(steps, n, 4 * h)), 2);
            fl_tensor *w_hh = fl_mul_scalar(fl_randn(dt, FL_SHAPE(4 * h, h)), 1 / sqrt((double)h));
            if (strided)
                w_hh = fl_transpose(fl_copy(fl_transpose(w_hh, 0, 1)), 0, 1);
            fl_tensor *h0 = fl_randn(dt, FL_SHAPE(n, h)), *c0 = fl_randn(dt, FL_SHAPE(n, h));
            fl_tensor *dstates = fl_randn(dt, FL_SHAPE(2 * steps, n, h));
            fl_tensor *bias = biased ? fl_randn(dt, FL_SHAPE(4 * h)) : NULL;
            fl_tensor *fused[5], *composed[5];
            fl_backend original = support_override(&composing);
            lstm_sequence_run(xproj, bias, h0, c0, w_hh, dstates, reverse, composed);
            support_override(&original);
            lstm_sequence_run(xproj, bias, h0, c0, w_hh, dstates, reverse, fused);
            /* f32: the products sum in another order; the gradients travel through
             * every step. */
            double tol = f64 ? 1e-12 : 2e-5 * (double)(steps > 5 ? 5 : 1);
            for (int i = 0; i < 5; i++) {
                assert_dtype(fused[i], dt);
                assert_close(fused[i], composed[i], tol, tol);
            }
            fl_scope_end(scope);
        }
    assert_no_error();
}

/* Preactivations at the ends of the float range (±1e30, ±inf, ±104, subnormal, signed
 * zeros) give what the composition gives, forward and backward, and a NaN in one row
 * reaches that row's states only, on units that do not fill a vector (37). */
static void fused_lstm_sequence_saturates_and_passes_nan(void **state)
{
    fl_backend composing = support_derive(fl_default_backend()->name);
    if (!composing.lstm_sequence && !composing.lstm_sequence_backward)
        skip();
    composing.lstm_sequence = NULL;
    composing.lstm_sequence_backward = NULL;
    enum { steps = 3, n = 3, h = 37 };
    const float ends[] = {0.0f, -0.0f, 1e30f, -1e30f, 88.7f, -88.7f, 104.0f, -104.0f, 1e-40f, 3.0f, -3.0f, INFINITY,
                          -INFINITY};
    float x[steps * n * 4 * h];
    for (int i = 0; i < steps * n * 4 * h; i++)
        x[i] = ends[(i * 7) % (int)(sizeof ends / sizeof *ends)];
    x[(0 * n + 1) * 4 * h + 5] = NAN; /* step 0, row 1, the input gate of unit 5 */
    fl_tensor *xproj = fl_from_data(x, FL_F32, FL_SHAPE(steps, n, 4 * h));
    fl_tensor *w_hh = fl_mul_scalar(fl_randn(FL_F32, FL_SHAPE(4 * h, h)), 1 / sqrt((double)h));
    fl_tensor *h0 = fl_randn(FL_F32, FL_SHAPE(n, h)), *c0 = fl_randn(FL_F32, FL_SHAPE(n, h));
    fl_tensor *dstates = fl_randn(FL_F32, FL_SHAPE(2 * steps, n, h)), *fused[5], *composed[5];
    fl_backend original = support_override(&composing);
    lstm_sequence_run(xproj, NULL, h0, c0, w_hh, dstates, false, composed);
    support_override(&original);
    lstm_sequence_run(xproj, NULL, h0, c0, w_hh, dstates, false, fused);
    for (int i = 0; i < 5; i++)
        assert_close(fused[i], composed[i], 2e-5, 2e-5);
    /* row 1 is NaN from step 0 on, rows 0 and 2 never are */
    fl_tensor *nan_rows = fl_any(fl_isnan(fused[0]), FL_AXES(0, 2), false);
    assert_values(fl_cast(nan_rows, FL_F32), 0, 0, 0, 1, 0);
    assert_no_error();
}

/* An LSTM of T steps is the composition of T cells: the sequence's states are those
 * of fl_lstm_cell applied step by step by hand, and no steps give no states. */
static void lstm_sequence_is_the_cell_step_by_step(void **state)
{
    /* f32 runs the backend's fused recurrence (two threads at this size on cpu), f64
     * the composition; both against a loop written here. */
    for (int f64 = 0; f64 < 2; f64++) {
        fl_dtype dt = f64 ? FL_F64 : FL_F32;
        double tol = f64 ? 1e-13 : 1e-5;
        fl_tensor *xproj = fl_randn(dt, FL_SHAPE(3, 20, 128));
        fl_tensor *w_hh = fl_mul_scalar(fl_randn(dt, FL_SHAPE(128, 32)), 0.2);
        fl_tensor *h = fl_randn(dt, FL_SHAPE(20, 32)), *c = fl_randn(dt, FL_SHAPE(20, 32));
        fl_tensor *bias = fl_randn(dt, FL_SHAPE(128)), *states, *gates;
        assert_int_equal(fl_lstm_sequence(xproj, bias, h, c, w_hh, false, &states, &gates), FL_OK);
        for (int64_t t = 0; t < 3; t++) {
            fl_tensor *pre =
                fl_add(fl_add(fl_index(xproj, FL_INDEX(FL_AT(t))), bias), fl_matmul(h, fl_transpose(w_hh, 0, 1)));
            fl_tensor *g = NULL;
            assert_int_equal(fl_lstm_cell(pre, c, &g, &c, &h), FL_OK);
            assert_close(fl_index(states, FL_INDEX(FL_AT(t))), h, tol, tol);
            assert_close(fl_index(states, FL_INDEX(FL_AT(3 + t))), c, tol, tol);
            assert_close(fl_index(gates, FL_INDEX(FL_AT(t))), g, tol, tol);
        }
    }
    fl_tensor *h = fl_randn(FL_F64, FL_SHAPE(2, 2)), *c = fl_randn(FL_F64, FL_SHAPE(2, 2));
    fl_tensor *w_hh = fl_randn(FL_F64, FL_SHAPE(8, 2)), *states, *gates;
    fl_tensor *none = fl_zeros(FL_F64, FL_SHAPE(0, 2, 8));
    assert_int_equal(fl_lstm_sequence(none, NULL, h, c, w_hh, true, &states, &gates), FL_OK);
    assert_shape(states, 0, 2, 2);
    assert_shape(gates, 0, 2, 8);
    fl_tensor *dxproj, *dh0, *dc0;
    assert_int_equal(fl_lstm_sequence_backward(fl_zeros(FL_F64, FL_SHAPE(0, 2, 2)), states, gates, h, c, w_hh, true,
                                               &dxproj, &dh0, &dc0),
                     FL_OK);
    assert_shape(dxproj, 0, 2, 8);
    assert_values(dh0, 0, 0, 0, 0, 0, 0);
    assert_no_error();
}

static void lstm_sequence_refuses_bad_inputs(void **state)
{
    fl_tensor *x = fl_zeros(FL_F32, FL_SHAPE(3, 2, 8)), *h = fl_zeros(FL_F32, FL_SHAPE(2, 2));
    fl_tensor *w = fl_zeros(FL_F32, FL_SHAPE(8, 2)), *states = NULL, *gates = NULL;
    assert_fails_status(fl_lstm_sequence(x, NULL, h, h, fl_zeros(FL_F32, FL_SHAPE(8, 3)), false, &states, &gates),
                        FL_ERR_SHAPE,
                        "fl_lstm_sequence: needs [T, N, 4H], h0 and c0 [N, H] and w_hh [4H, H] of one dtype, got "
                        "f32[3, 2, 8], h0 f32[2, 2], c0 f32[2, 2] and w_hh f32[8, 3]");
    assert_null(states);
    assert_fails_status(fl_lstm_sequence(fl_zeros(FL_F32, FL_SHAPE(3, 2, 7)), NULL, h, h, w, false, &states, NULL),
                        FL_ERR_SHAPE, "got f32[3, 2, 7]");
    assert_fails_status(fl_lstm_sequence(x, NULL, fl_zeros(FL_F64, FL_SHAPE(2, 2)), h, w, false, &states, NULL),
                        FL_ERR_SHAPE, "h0 f64[2, 2]");
    assert_fails_status(fl_lstm_sequence(fl_zeros(FL_I32, FL_SHAPE(3, 2, 8)), NULL, h, h, w, false, &states, NULL),
                        FL_ERR_DTYPE, "fl_lstm_sequence: takes float tensors, got i32[3, 2, 8]");
    assert_fails_status(fl_lstm_sequence(x, NULL, NULL, h, w, false, &states, NULL), FL_ERR_NULL, "fl_lstm_sequence");
    assert_fails_status(fl_lstm_sequence(x, fl_zeros(FL_F32, FL_SHAPE(4)), h, h, w, false, &states, NULL),
                        FL_ERR_SHAPE, "fl_lstm_sequence: needs bias [4H] of the dtype of f32[3, 2, 8], got f32[4]");
    assert_int_equal(fl_lstm_sequence(x, NULL, h, h, w, false, &states, &gates), FL_OK);
    fl_tensor *dxproj = NULL;
    assert_fails_status(fl_lstm_sequence_backward(fl_zeros(FL_F32, FL_SHAPE(3, 2, 2)), states, gates, h, h, w, false,
                                                  &dxproj, NULL, NULL),
                        FL_ERR_SHAPE,
                        "fl_lstm_sequence_backward: needs dstates [2T, N, H] of the dtype of gates f32[3, 2, 8], got "
                        "f32[3, 2, 2]");
    assert_null(dxproj);
    assert_fails_status(fl_lstm_sequence_backward(states, states, fl_zeros(FL_F32, FL_SHAPE(3, 2, 4)), h, h, w, false,
                                                  &dxproj, NULL, NULL),
                        FL_ERR_SHAPE, "fl_lstm_sequence_backward: needs [T, N, 4H]");
}

/* The cell's values against the formulas, at points where they are known exactly. */
static void lstm_cell_computes_the_gates_and_states(void **state)
{
    /* N = 1, H = 1: i = f = o = sigmoid(0) = 0.5, g = tanh(0) = 0; c = 0.5 * 2 = 1. */
    fl_tensor *gates, *c, *h, *dpre, *dc_prev;
    assert_int_equal(fl_lstm_cell(fl_zeros(FL_F64, FL_SHAPE(1, 4)), T_F64(FL_SHAPE(1, 1), 2), &gates, &c, &h), FL_OK);
    assert_values(gates, 1e-15, 0, 0.5, 0.5, 0, 0.5);
    assert_values(c, 1e-15, 0, 1);
    assert_values(h, 1e-15, 0, 0.5 * tanh(1.0));
    /* dh = 1, dc = 0: dc' = o (1 - tanh(1)^2); di = dc' g s'(i) = 0, df = dc' c_prev / 4,
     * dg = dc' i, do = tanh(1) / 4; dc_prev = dc' f. */
    fl_tensor *one = fl_ones(FL_F64, FL_SHAPE(1, 1)), *zero = fl_zeros(FL_F64, FL_SHAPE(1, 1));
    assert_int_equal(fl_lstm_cell_backward(one, zero, gates, T_F64(FL_SHAPE(1, 1), 2), c, &dpre, &dc_prev), FL_OK);
    double t = tanh(1.0), total = 0.5 * (1 - t * t);
    assert_values(dpre, 1e-15, 1e-15, 0, total * 2 * 0.25, total * 0.5, t * 0.25);
    assert_values(dc_prev, 1e-15, 0, total * 0.5);
    /* Outputs not asked for are not handed out. */
    assert_int_equal(fl_lstm_cell(fl_zeros(FL_F32, FL_SHAPE(2, 8)), fl_zeros(FL_F32, FL_SHAPE(2, 2)), NULL, NULL, &h),
                     FL_OK);
    assert_values(h, 0, 0, 0, 0, 0, 0);
    assert_no_error();
}

static void lstm_cell_refuses_bad_inputs(void **state)
{
    fl_tensor *pre = fl_zeros(FL_F32, FL_SHAPE(2, 8)), *cell = fl_zeros(FL_F32, FL_SHAPE(2, 2)), *out = NULL;
    fl_tensor *gates = NULL, *dpre = NULL;
    assert_fails_status(fl_lstm_cell(pre, fl_zeros(FL_F32, FL_SHAPE(2, 3)), &out, NULL, NULL), FL_ERR_SHAPE,
                        "fl_lstm_cell: needs pre [N, 4H] and c_prev [N, H] of one dtype, got pre f32[2, 8] and "
                        "c_prev f32[2, 3]");
    assert_null(out);
    assert_fails_status(fl_lstm_cell(fl_zeros(FL_F32, FL_SHAPE(2, 7)), cell, &out, NULL, NULL), FL_ERR_SHAPE,
                        "got pre f32[2, 7]");
    assert_fails_status(fl_lstm_cell(fl_zeros(FL_F32, FL_SHAPE(3, 8)), cell, &out, NULL, NULL), FL_ERR_SHAPE,
                        "c_prev f32[2, 2]");
    assert_fails_status(fl_lstm_cell(pre, fl_zeros(FL_F64, FL_SHAPE(2, 2)), &out, NULL, NULL), FL_ERR_SHAPE,
                        "c_prev f64[2, 2]");
    assert_fails_status(fl_lstm_cell(fl_zeros(FL_I32, FL_SHAPE(2, 8)), cell, &out, NULL, NULL), FL_ERR_DTYPE,
                        "fl_lstm_cell: takes float tensors, got pre i32[2, 8]");
    assert_fails_status(fl_lstm_cell(NULL, cell, &out, NULL, NULL), FL_ERR_NULL, "fl_lstm_cell");
    assert_int_equal(fl_lstm_cell(pre, cell, &gates, NULL, NULL), FL_OK);
    assert_fails_status(fl_lstm_cell_backward(fl_zeros(FL_F32, FL_SHAPE(2, 3)), cell, gates, cell, cell, &dpre, NULL),
                        FL_ERR_SHAPE,
                        "fl_lstm_cell_backward: needs dh [N, H] of the dtype of gates f32[2, 8], got f32[2, 3]");
    assert_fails_status(fl_lstm_cell_backward(cell, cell, gates, cell, fl_zeros(FL_F64, FL_SHAPE(2, 2)), &dpre, NULL),
                        FL_ERR_SHAPE, "needs c [N, H] of the dtype of gates f32[2, 8], got f64[2, 2]");
    assert_fails_status(fl_lstm_cell_backward(cell, cell, fl_zeros(FL_F32, FL_SHAPE(2, 6)), cell, cell, &dpre, NULL),
                        FL_ERR_SHAPE, "fl_lstm_cell_backward: needs gates [N, 4H], got f32[2, 6]");
    assert_fails_status(fl_lstm_cell_backward(cell, NULL, gates, cell, cell, &dpre, NULL), FL_ERR_NULL,
                        "fl_lstm_cell_backward");
    assert_null(dpre);
}

static void bad_arguments_are_refused(void **state)
{
    assert_fails(fl_nn_multihead_attention(10, 3, 0, true, true), FL_ERR_VALUE, "multiple of num_heads");
    assert_fails(fl_nn_multihead_attention(8, 2, 1.5, true, true), FL_ERR_VALUE, "dropout");
    fl_module *mha = fl_nn_multihead_attention(8, 2, 0, true, true);
    fl_variable *x = fl_v_new(fl_zeros(FL_F32, FL_SHAPE(2, 5, 8)), false);
    fl_variable *x7 = fl_v_new(fl_zeros(FL_F32, FL_SHAPE(2, 5, 7)), false);
    assert_fails(fl_module_forward(mha, x7), FL_ERR_SHAPE, "embedding 8");
    assert_fails(
        fl_nn_multihead_attention_forward(mha, x, x, x, T_BOOL(FL_SHAPE(2, 4), 0, 0, 0, 0, 0, 0, 0, 0), NULL, false),
        FL_ERR_SHAPE, "key_padding_mask must be [2, 5]");
    assert_fails(fl_nn_multihead_attention_forward(mha, x, x, x, NULL, fl_zeros(FL_F32, FL_SHAPE(4, 5)), false),
                 FL_ERR_SHAPE, "attn_mask must be [5, 5] or [4, 5, 5]");
    assert_fails(fl_nn_multihead_attention_forward(mha, x, x, x, NULL, fl_zeros(FL_I32, FL_SHAPE(5, 5)), false),
                 FL_ERR_DTYPE, "bool or floating");
    fl_module *lstm = fl_nn_lstm(3, 4, 1, true, true, 0, false);
    assert_fails(fl_nn_multihead_attention_forward(lstm, x, x, x, NULL, NULL, false), FL_ERR_VALUE,
                 "not a MultiheadAttention");
    assert_fails(fl_f_scaled_dot_product_attention(x, x7, x, NULL, 0, false, false), FL_ERR_SHAPE, "do not fit");
    assert_fails(fl_f_scaled_dot_product_attention(x, x, x, NULL, -0.1, false, false), FL_ERR_VALUE, "dropout_p");
    fl_variable *xi = fl_v_new(fl_zeros(FL_I32, FL_SHAPE(2, 5, 8)), false);
    assert_fails(fl_f_scaled_dot_product_attention(xi, xi, xi, NULL, 0, false, false), FL_ERR_DTYPE, "floating dtype");

    assert_fails(fl_nn_transformer_encoder_layer(8, 2, 16, 0, "tanh", 1e-5, true, false), FL_ERR_VALUE, "\"relu\"");
    assert_fails(fl_nn_transformer_encoder_layer(8, 3, 16, 0, "relu", 1e-5, true, false), FL_ERR_VALUE, "num_heads");
    assert_fails(fl_nn_transformer_encoder(fl_nn_lstm(3, 4, 1, true, true, 0, false), 2, NULL), FL_ERR_VALUE,
                 "not a TransformerEncoderLayer");
    assert_fails(fl_nn_transformer_encoder(fl_nn_transformer_encoder_layer(8, 2, 16, 0, "relu", 1e-5, true, false), 0,
                                           NULL),
                 FL_ERR_VALUE, "num_layers must be positive");
    assert_fails(fl_nn_transformer_encoder_layer_forward(mha, x, NULL, NULL, false), FL_ERR_VALUE, "not a Transformer");

    assert_fails(fl_nn_lstm(0, 4, 1, true, true, 0, false), FL_ERR_VALUE, "must be positive");
    assert_fails(fl_nn_gru(3, 4, 1, true, true, -1, false), FL_ERR_VALUE, "dropout");
    fl_variable *y = x, *hn = x;
    assert_fails_status(fl_nn_gru_forward(lstm, x, NULL, &y, &hn), FL_ERR_VALUE, "not a GRU");
    assert_null(y);
    assert_null(hn);
    assert_fails(fl_module_forward(lstm, x), FL_ERR_SHAPE, "input_size 3");
    fl_variable *seq = fl_v_new(fl_zeros(FL_F32, FL_SHAPE(2, 6, 3)), false);
    fl_variable *bad_h = fl_v_new(fl_zeros(FL_F32, FL_SHAPE(1, 3, 4)), false);
    assert_fails_status(fl_nn_lstm_forward(lstm, seq, bad_h, NULL, &y, NULL, NULL), FL_ERR_SHAPE,
                        "h0 must be [1, 2, 4]");
    fl_variable *h64 = fl_v_new(fl_zeros(FL_F64, FL_SHAPE(1, 2, 4)), false);
    assert_fails_status(fl_nn_lstm_forward(lstm, seq, NULL, h64, &y, NULL, NULL), FL_ERR_DTYPE, "c0 must be f32");

    fl_variable *lp = fl_v_new(fl_zeros(FL_F32, FL_SHAPE(4, 2, 3)), true);
    fl_tensor *targets = T_I64(FL_SHAPE(2, 2), 1, 2, 1, 1), *lengths = T_I64(FL_SHAPE(2), 4, 4),
              *two = T_I64(FL_SHAPE(2), 2, 2);
    assert_fails(fl_nn_ctc_loss(lp, targets, lengths, two, 3, FL_REDUCTION_MEAN, false), FL_ERR_VALUE, "blank 3");
    assert_fails(fl_nn_ctc_loss(lp, targets, T_I64(FL_SHAPE(2), 5, 4), two, 0, FL_REDUCTION_MEAN, false),
                 FL_ERR_VALUE, "input_lengths[0] is 5");
    assert_fails(fl_nn_ctc_loss(lp, targets, lengths, T_I64(FL_SHAPE(2), 2, 3), 0, FL_REDUCTION_MEAN, false),
                 FL_ERR_VALUE, "target_lengths[1] is 3");
    assert_fails(fl_nn_ctc_loss(lp, T_I64(FL_SHAPE(2, 2), 1, 0, 1, 1), lengths, two, 0, FL_REDUCTION_MEAN, false),
                 FL_ERR_VALUE, "other than the blank");
    assert_fails(fl_nn_ctc_loss(lp, T_I64(FL_SHAPE(3), 1, 2, 1), lengths, two, 0, FL_REDUCTION_MEAN, false),
                 FL_ERR_SHAPE, "hold 3 labels but target_lengths sum to 4");
    assert_fails(fl_nn_ctc_loss(lp, fl_cast(targets, FL_F32), lengths, two, 0, FL_REDUCTION_MEAN, false),
                 FL_ERR_DTYPE, "integers");
    assert_fails(fl_nn_ctc_loss(lp, targets, T_I64(FL_SHAPE(3), 4, 4, 4), two, 0, FL_REDUCTION_MEAN, false),
                 FL_ERR_SHAPE, "must be [2]");
    assert_fails(fl_nn_ctc_loss(fl_v_new(fl_zeros(FL_F32, FL_SHAPE(4, 3)), true), targets, lengths, two, 0,
                                FL_REDUCTION_MEAN, false),
                 FL_ERR_SHAPE, "[T, N, C]");
    assert_fails(fl_nn_ctc_loss(lp, targets, lengths, two, 0, (fl_reduction)7, false), FL_ERR_VALUE, "reduction");
    assert_fails(fl_nn_ctc_loss(NULL, targets, lengths, two, 0, FL_REDUCTION_MEAN, false), FL_ERR_NULL,
                 "fl_nn_ctc_loss");
    fl_module_release(mha);
    fl_module_release(lstm);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        scoped_test(self_attention_matches_pytorch),
        scoped_test(cross_attention_with_both_masks_matches_pytorch),
        scoped_test(a_bool_attention_mask_forbids_where_true),
        scoped_test(sequence_first_layout_transposes_around_batch_first),
        scoped_test(attention_dropout_acts_in_training_only),
        scoped_test(post_norm_encoder_layer_matches_pytorch),
        scoped_test(pre_norm_gelu_encoder_layer_matches_pytorch),
        scoped_test(encoder_stack_with_final_norm_matches_pytorch),
        scoped_test(a_fully_padded_sample_leaves_the_batch_gradients_finite),
        scoped_test(a_fully_padded_sample_matches_pytorch),
        scoped_test(one_bool_mask_convention_across_attention_functions),
        scoped_test(causal_self_attention_matches_pytorch),
        scoped_test(causal_padded_encoder_layer_matches_pytorch),
        scoped_test(causal_equals_an_explicit_triangular_mask),
        scoped_test(post_norm_causal_decoder_layer_matches_pytorch),
        scoped_test(pre_norm_gelu_decoder_layer_matches_pytorch),
        scoped_test(decoder_stack_with_final_norm_matches_pytorch),
        scoped_test(a_fully_padded_memory_leaves_the_decoder_finite),
        scoped_test(sinusoidal_positions_follow_the_formula),
        scoped_test(learned_positions_are_rows_of_the_weight),
        scoped_test(two_layer_lstm_matches_pytorch),
        scoped_test(two_layer_gru_matches_pytorch),
        scoped_test(bidirectional_lstm_matches_pytorch),
        scoped_test(lstm_without_h0_matches_a_zero_h0),
        scoped_test(bidirectional_two_layer_gru_without_bias_matches_pytorch),
        scoped_test(dropout_between_layers_acts_in_training_only),
        scoped_test(ctc_loss_matches_pytorch_for_every_reduction),
        scoped_test(ctc_impossible_alignments_are_infinite_or_zeroed),
        scoped_test(attention_gradients_match_finite_differences),
        scoped_test(ctc_gradient_matches_finite_differences),
        scoped_test(recurrence_gradients_match_finite_differences),
        scoped_test(fused_lstm_cell_matches_the_composition),
        scoped_test(lstm_cell_computes_the_gates_and_states),
        scoped_test(lstm_cell_refuses_bad_inputs),
        scoped_test(fused_lstm_sequence_matches_the_composition),
        scoped_test(fused_lstm_sequence_saturates_and_passes_nan),
        scoped_test(lstm_sequence_is_the_cell_step_by_step),
        scoped_test(lstm_sequence_refuses_bad_inputs),
        scoped_test(bad_arguments_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
