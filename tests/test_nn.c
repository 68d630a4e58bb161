/* Layers, functional forms, initializers and losses: finite-difference gradients in
 * f64, PyTorch's outputs and gradients for its own weights, the paper's Listing 8, and
 * the errors. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "../src/nn/internal.h" /* fl__module_exchange_parameter: modules under gradcheck */
#include "flare/memory.h"
#include "flare/nn.h"
#include "gradcheck.h"

#define IN(low, high, ...) gradcheck_input((low), (high), FL_SHAPE(__VA_ARGS__))

static double max_abs(const fl_tensor *t) { return fl_item(fl_max(fl_abs(t), FL_ALL_AXES, false)); }

/* ---- functional forms and losses under gradcheck ---- */

static bool affine = true; /* a ctx saying "with weight and bias" */

static fl_variable *linear_of(fl_variable *const *x, void *ctx) { return fl_f_linear(x[0], x[1], ctx ? x[2] : NULL); }

static fl_variable *layer_norm_of(fl_variable *const *x, void *ctx)
{
    return ctx ? fl_f_layer_norm(x[0], x[1], x[2], 2, 1e-5) : fl_f_layer_norm(x[0], NULL, NULL, 1, 1e-5);
}

static fl_variable *batch_norm_train_of(fl_variable *const *x, void *ctx)
{
    return fl_f_batch_norm(x[0], NULL, NULL, x[1], x[2], true, 1e-5, NULL, NULL);
}

static fl_variable *batch_norm_eval_of(fl_variable *const *x, void *ctx)
{
    fl_tensor *const *running = ctx;
    return fl_f_batch_norm(x[0], running[0], running[1], x[1], x[2], false, 1e-5, NULL, NULL);
}

static fl_variable *dropout_of(fl_variable *const *x, void *ctx)
{
    fl_manual_seed(7); /* the same mask at every evaluation */
    return fl_f_dropout(x[0], 0.4, true);
}

static void functional_forms_have_the_gradients_of_their_values(void **state)
{
    assert_gradcheck(linear_of, &affine, IN(-1, 1, 2, 3, 4), IN(-1, 1, 5, 4), IN(-1, 1, 5));
    assert_gradcheck(linear_of, NULL, IN(-1, 1, 3, 4), IN(-1, 1, 2, 4));
    assert_gradcheck(layer_norm_of, &affine, IN(-2, 2, 2, 3, 4), IN(0.5, 1.5, 3, 4), IN(-1, 1, 3, 4));
    assert_gradcheck(layer_norm_of, NULL, IN(-2, 2, 3, 5));
    assert_gradcheck(batch_norm_train_of, NULL, IN(-2, 2, 3, 2, 2, 3), IN(0.5, 1.5, 2), IN(-1, 1, 2));
    assert_gradcheck(batch_norm_train_of, NULL, IN(-2, 2, 4, 3), IN(0.5, 1.5, 3), IN(-1, 1, 3));
    fl_tensor *running[2] = {T_F32(FL_SHAPE(2), 0.1, -0.2), T_F32(FL_SHAPE(2), 0.8, 1.3)};
    assert_gradcheck(batch_norm_eval_of, running, IN(-2, 2, 2, 2, 3), IN(0.5, 1.5, 2), IN(-1, 1, 2));
    assert_gradcheck(dropout_of, NULL, IN(-1, 1, 4, 5));
}

typedef struct class_case {
    bool logits;
    fl_class_loss_options options;
    fl_tensor *targets;
} class_case;

static fl_variable *class_loss_of(fl_variable *const *x, void *ctx)
{
    const class_case *c = ctx;
    return c->logits ? fl_nn_cross_entropy(x[0], c->targets, &c->options)
                     : fl_nn_nll_loss(x[0], c->targets, &c->options);
}

typedef fl_variable *(*pair_loss)(fl_variable *, fl_variable *, fl_reduction);

typedef struct pair_case {
    pair_loss fn;
    fl_reduction reduction;
} pair_case;

static fl_variable *pair_loss_of(fl_variable *const *x, void *ctx)
{
    const pair_case *c = ctx;
    return c->fn(x[0], x[1], c->reduction);
}

static void losses_have_the_gradients_of_their_values(void **state)
{
    fl_tensor *targets = T_I64(FL_SHAPE(4), 2, -100, 0, 3);
    fl_tensor *targets_ignoring_2 = T_I64(FL_SHAPE(4), 2, 1, 0, 3);
    fl_tensor *targets3 = T_I64(FL_SHAPE(2, 3), 1, 0, 7, 2, 2, 0);
    class_case cases[] = {
        {true, FL_CLASS_LOSS_DEFAULTS, targets},
        {true, {FL_REDUCTION_MEAN, -100, 0.3}, targets},
        {true, {FL_REDUCTION_SUM, 2, 0.1}, targets_ignoring_2},
        {true, {FL_REDUCTION_NONE, 7, 0.2}, targets3},
        {false, {FL_REDUCTION_MEAN, -100, 0}, targets},
        {false, {FL_REDUCTION_NONE, 7, 0}, targets3},
    };
    for (int i = 0; i < 6; i++) {
        fl_tensor *x = cases[i].targets == targets3 ? IN(-2, 2, 2, 4, 3) : IN(-2, 2, 4, 5);
        assert_gradcheck(class_loss_of, &cases[i], x, cases[i].targets);
    }
    pair_loss fns[] = {fl_nn_mse_loss, fl_nn_l1_loss, fl_nn_bce_with_logits_loss, fl_nn_bce_loss};
    for (int f = 0; f < 4; f++) {
        for (fl_reduction r = FL_REDUCTION_MEAN; r <= FL_REDUCTION_NONE; r++) {
            pair_case c = {fns[f], r};
            /* Inputs in (0.05, 0.45) and targets in (0.55, 0.95): no kink of L1 between, valid BCE probabilities. */
            assert_gradcheck(pair_loss_of, &c, IN(0.05, 0.45, 3, 4), IN(0.55, 0.95, 3, 4));
        }
    }
}

/* ---- modules under gradcheck: the inputs after x are the module's parameters ---- */

typedef struct module_case {
    fl_module *module;
    const char *names[4]; /* of the parameters, in the order of the inputs after x */
} module_case;

static fl_variable *module_of(fl_variable *const *x, void *ctx)
{
    const module_case *c = ctx;
    fl_variable *own[4] = {NULL};
    for (int i = 0; c->names[i]; i++)
        own[i] = fl__module_exchange_parameter(c->module, c->names[i], x[i + 1]);
    fl_variable *y = fl_module_forward(c->module, x[0]);
    for (int i = 0; c->names[i]; i++)
        fl__module_exchange_parameter(c->module, c->names[i], own[i]);
    return y;
}

static void modules_have_the_gradients_of_their_values(void **state)
{
    fl_conv_params strided = {.stride = {2, 2}, .padding = {1, 1}};
    fl_conv_params grouped = {.stride = {1, 2}, .padding = {0, 1}, .groups = 2};
    module_case cases[] = {
        {fl_nn_linear(4, 3, true), {"weight", "bias"}},
        {fl_nn_conv1d(2, 3, 3, &strided, true), {"weight", "bias"}},
        {fl_nn_conv2d(4, 2, 2, 3, &grouped, true), {"weight", "bias"}},
        {fl_nn_batch_norm2d(2, 1e-5, 0.1, true, true), {"weight", "bias"}},
        {fl_nn_layer_norm(FL_SHAPE(5), 1e-5, true), {"weight", "bias"}},
        {fl_nn_embedding(6, 3, 1), {"weight"}},
        {fl_nn_weight_norm(fl_nn_linear(4, 3, true), "weight", 0), {"bias", "weight_g", "weight_v"}},
        {fl_nn_weight_norm(fl_nn_conv1d(2, 3, 3, NULL, false), "weight", -1), {"weight_g", "weight_v"}},
    };
    fl_tensor *inputs[] = {IN(-1, 1, 2, 4), IN(-1, 1, 2, 2, 7), IN(-1, 1, 1, 4, 4, 5), IN(-2, 2, 2, 2, 2, 3),
                           IN(-2, 2, 3, 5), T_I64(FL_SHAPE(2, 3), 0, 3, 5, 4, 2, 0) /* not the padding row: no gradient there */, IN(-1, 1, 2, 4),
                           IN(-1, 1, 2, 2, 6)};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        fl_tensor *p[4] = {NULL};
        for (int j = 0; cases[i].names[j]; j++) {
            const fl_tensor *v = fl_v_value(fl_module_parameter(cases[i].module, cases[i].names[j]));
            /* Moved off their initial values (BatchNorm's ones and zeros would hide mistakes). */
            p[j] = fl_add(fl_cast(v, FL_F64), gradcheck_input(-0.3, 0.3, fl_ndim(v), fl_shape(v)));
        }
        switch (cases[i].names[2] ? 3 : cases[i].names[1] ? 2 : 1) {
        case 1: assert_gradcheck(module_of, &cases[i], inputs[i], p[0]); break;
        case 2: assert_gradcheck(module_of, &cases[i], inputs[i], p[0], p[1]); break;
        case 3: assert_gradcheck(module_of, &cases[i], inputs[i], p[0], p[1], p[2]); break;
        }
        fl_module_release(cases[i].module);
    }
    /* Modules without parameters, and BatchNorm in evaluation. */
    fl_module *plain[] = {
        fl_nn_max_pool2d(2, 0, 0), fl_nn_avg_pool2d(3, 2, 1), fl_nn_adaptive_avg_pool2d(3, 2), fl_nn_relu(),
        fl_nn_gelu(false), fl_nn_gelu(true), fl_nn_tanh(), fl_nn_sigmoid(), fl_nn_log_softmax(1),
        fl_nn_view(FL_SHAPE(0, -1)), fl_nn_padding(2, (const int64_t[]){1, 0}, (const int64_t[]){2, 1}, 0.5),
        fl_nn_batch_norm2d(2, 1e-5, 0.1, false, true),
    };
    fl_module_train(plain[11], false);
    for (size_t i = 0; i < sizeof plain / sizeof *plain; i++) {
        module_case c = {plain[i], {NULL}};
        assert_gradcheck(module_of, &c, IN(-2, 2, 1, 2, 5, 5));
        fl_module_release(plain[i]);
    }
}

/* ---- PyTorch's outputs and gradients with PyTorch's weights ---- */

static fl_tensor *nn_fixture(const char *key, const char *what)
{
    char name[400];
    snprintf(name, sizeof name, "%s/%s", key, what);
    return fixture("nn.bin", name);
}

/* Loads key/sd/<name> for every name of m's state dict, then compares the forward of
 * key/x and the gradients of sum(y * key/w) with key/y, key/dx and key/grad/<name>. */
static void check_against_pytorch(fl_module *m, const char *key)
{
    fl_tensor_map *names = fl_tensor_map_create(), *map = fl_tensor_map_create();
    assert_int_equal(fl_module_state_dict(m, names), FL_OK);
    char what[320]; /* "grad/" and a dotted name */
    for (size_t i = 0; i < fl_tensor_map_count(names); i++) {
        snprintf(what, sizeof what, "sd/%s", fl_tensor_map_name_at(names, i));
        fl_tensor_map_set(map, fl_tensor_map_name_at(names, i), nn_fixture(key, what));
    }
    assert_int_equal(fl_module_load_state_dict(m, map, true), FL_OK);
    fl_tensor_map_free(names);
    fl_tensor_map_free(map);

    fl_tensor *xv = nn_fixture(key, "x");
    fl_variable *x = fl_v_new(xv, fl_dtype_is_float(fl_dtype_of(xv)));
    fl_variable *y = fl_module_forward(m, x);
    assert_no_error();
    assert_close(fl_v_value(y), nn_fixture(key, "y"), 1e-4, 1e-5);
    fl_variable *loss = fl_v_sum(fl_v_mul(y, fl_v_new(nn_fixture(key, "w"), false)), FL_ALL_AXES, false);
    assert_int_equal(fl_v_backward(loss, NULL, false), FL_OK);
    if (fl_v_requires_grad(x))
        assert_close(fl_v_grad(x), nn_fixture(key, "dx"), 1e-4, 1e-5);
    fl_parameters *p = fl_module_parameters(m);
    for (size_t i = 0; i < p->count; i++) {
        snprintf(what, sizeof what, "grad/%s", p->names[i]);
        assert_close(fl_v_grad(p->items[i]), nn_fixture(key, what), 1e-4, 1e-5);
    }
    fl_parameters_free(p);
    fl_module_zero_grad(m);
}

static void layers_match_pytorch(void **state)
{
    struct {
        const char *key;
        fl_module *m;
    } layers[] = {
        {"linear", fl_nn_linear(4, 3, true)},
        {"conv1d", fl_nn_conv1d(3, 4, 3, &(fl_conv_params){.stride = {1, 2}, .padding = {0, 1}}, true)},
        {"conv2d", fl_nn_conv2d(4, 6, 3, 2, &(fl_conv_params){.stride = {2, 1}, .padding = {1, 0}, .groups = 2}, true)},
        {"max_pool2d", fl_nn_max_pool2d(2, 0, 0)},
        {"avg_pool2d", fl_nn_avg_pool2d(3, 2, 1)},
        {"adaptive_avg_pool2d", fl_nn_adaptive_avg_pool2d(3, 2)},
        {"layer_norm", fl_nn_layer_norm(FL_SHAPE(4, 5), 1e-5, true)},
        {"embedding", fl_nn_embedding(10, 4, 2)},
        {"gelu", fl_nn_gelu(false)},
        {"gelu_tanh", fl_nn_gelu(true)},
        {"tanh", fl_nn_tanh()},
        {"sigmoid", fl_nn_sigmoid()},
        {"log_softmax", fl_nn_log_softmax(1)},
        {"padding", fl_nn_padding(2, (const int64_t[]){0, 1}, (const int64_t[]){1, 2}, 0.5)},
        {"weight_norm_linear", fl_nn_weight_norm(fl_nn_linear(4, 3, true), "weight", 0)},
        {"weight_norm_conv2d", fl_nn_weight_norm(fl_nn_conv2d(2, 3, 3, 3, NULL, true), "weight", 0)},
    };
    for (size_t i = 0; i < sizeof layers / sizeof *layers; i++) {
        check_against_pytorch(layers[i].m, layers[i].key);
        fl_module_release(layers[i].m);
    }
}

static void batch_norm_matches_pytorch_in_training_and_evaluation(void **state)
{
    const char *keys[] = {"batch_norm2d", "batch_norm1d"};
    fl_module *modules[] = {fl_nn_batch_norm2d(3, 1e-5, 0.1, true, true), fl_nn_batch_norm1d(5, 1e-5, 0.3, true, true)};
    for (int i = 0; i < 2; i++) {
        fl_module *m = modules[i];
        check_against_pytorch(m, keys[i]);
        char what[64];
        const char *buffers[] = {"running_mean", "running_var", "num_batches_tracked"};
        for (int b = 0; b < 3; b++) {
            snprintf(what, sizeof what, "after/%s", buffers[b]);
            assert_close(fl_module_buffer(m, buffers[b]), nn_fixture(keys[i], what), 1e-5, 1e-6);
        }
        fl_module_train(m, false);
        char eval_key[32];
        snprintf(eval_key, sizeof eval_key, "%s_eval", keys[i]);
        check_against_pytorch(m, eval_key);
        fl_module_release(m);
    }
}

/* One batch norm's output and gradients (x, then weight and bias if given) for a
 * fixed upstream gradient, with the backend's fused kernels or without. */
static void batch_norm_run(bool fused, const fl_tensor *x, const fl_tensor *weight, const fl_tensor *bias,
                           bool training, const fl_tensor **out)
{
    fl_backend derived = support_derive(fl_default_backend()->name);
    if (!fused)
        derived.batch_norm = NULL, derived.batch_norm_backward = NULL;
    fl_backend original = support_override(&derived);
    fl_tensor *running_mean = fl_mul_scalar(fl_randn(FL_F32, FL_SHAPE(fl_shape(x)[1])), 0.5);
    fl_tensor *running_var = fl_add_scalar(fl_rand(FL_F32, FL_SHAPE(fl_shape(x)[1])), 0.5);
    fl_variable *xv = fl_v_new(x, true), *w = weight ? fl_v_new(weight, true) : NULL;
    fl_variable *b = bias ? fl_v_new(bias, true) : NULL;
    fl_variable *y = fl_f_batch_norm(xv, running_mean, running_var, w, b, training, 1e-5, NULL, NULL);
    fl_manual_seed(3);
    assert_int_equal(fl_v_backward(y, fl_randn(fl_dtype_of(x), fl_ndim(x), fl_shape(x)), false), FL_OK);
    out[0] = fl_v_value(y);
    out[1] = fl_v_grad(xv);
    out[2] = w ? fl_v_grad(w) : NULL;
    out[3] = b ? fl_v_grad(b) : NULL;
    support_override(&original);
}

static void fused_batch_norm_matches_the_composition(void **state)
{
    if (!fl_default_backend()->batch_norm) /* nothing fused to compare (the lazy backend) */
        skip();
    fl_manual_seed(11);
    /* A large mean against the spread: the variance must not cancel. */
    fl_tensor *images = fl_add_scalar(fl_mul_scalar(fl_randn(FL_F32, FL_SHAPE(4, 3, 9, 7)), 3), 40);
    fl_tensor *xs[] = {images, fl_transpose(fl_randn(FL_F32, FL_SHAPE(5, 6, 4, 3)), 0, 1),
                       fl_randn(FL_F32, FL_SHAPE(6, 5)), fl_randn(FL_F64, FL_SHAPE(3, 4, 10)),
                       fl_randn(FL_F32, FL_SHAPE(2, 64, 30, 30))};
    for (int i = 0; i < 5; i++) {
        fl_dtype dtype = fl_dtype_of(xs[i]);
        int64_t channels = fl_shape(xs[i])[1];
        fl_tensor *weight = fl_add_scalar(fl_rand(dtype, FL_SHAPE(channels)), 0.5);
        fl_tensor *bias = fl_randn(dtype, FL_SHAPE(channels));
        for (int affine_case = 0; affine_case < 2; affine_case++)
            for (int training = 0; training < 2; training++) {
                const fl_tensor *composed[4], *fused[4];
                const fl_tensor *w = affine_case ? weight : NULL, *b = affine_case ? bias : NULL;
                fl_manual_seed(5);
                batch_norm_run(false, xs[i], w, b, training, composed);
                fl_manual_seed(5);
                batch_norm_run(true, xs[i], w, b, training, fused);
                double tolerance = dtype == FL_F64 ? 1e-12 : 2e-5;
                for (int k = 0; k < (affine_case ? 4 : 2); k++)
                    assert_close(fused[k], composed[k], tolerance, tolerance);
            }
    }
    assert_no_error();
}

static void fused_batch_norm_kernels_refuse_other_dtypes(void **state)
{
    const fl_backend *backend = fl_default_backend();
    if (!backend->batch_norm)
        return; /* a backend without the kernels (the lazy row): nothing to refuse */
    fl_tensor *x = fl_zeros(FL_I32, FL_SHAPE(2, 3));
    fl_tensor *y = fl_tensor_alloc(backend, FL_I32, 2, fl_shape(x));
    assert_int_equal(backend->batch_norm(backend, y, NULL, NULL, x, NULL, NULL, NULL, NULL, 1e-5), FL_ERR_DTYPE);
    assert_int_equal(backend->batch_norm_backward(backend, y, NULL, NULL, x, x, NULL, NULL, NULL, true), FL_ERR_DTYPE);
    fl_release(y);
    fl_clear_error();
    /* f16 goes through the composition, in f32. */
    fl_variable *h = fl_v_new(fl_cast(fl_randn(FL_F32, FL_SHAPE(4, 2, 3)), FL_F16), false);
    fl_variable *out = fl_f_batch_norm(h, NULL, NULL, NULL, NULL, true, 1e-5, NULL, NULL);
    assert_non_null(out);
    assert_dtype(fl_v_value(out), FL_F16);
}

/* Class indices of any integer dtype: u8 is what fl_load_mnist gives. */
static void class_losses_take_every_integer_dtype(void **state)
{
    fl_tensor *logits = T_F32(FL_SHAPE(3, 4), 1, 2, 3, 4, -1, 0, 1, 5, 2, 2, 0, -3);
    fl_dtype dtypes[] = {FL_U8, FL_I32, FL_I64};
    const fl_tensor *want = NULL, *want_grad = NULL;
    for (int d = 0; d < 3; d++)
        for (int nll = 0; nll < 2; nll++) {
            fl_variable *x = fl_v_new(nll ? fl_log_softmax(logits, 1) : logits, true);
            fl_tensor *targets = fl_cast(T_I64(FL_SHAPE(3), 3, 0, 1), dtypes[d]);
            fl_variable *loss = nll ? fl_nn_nll_loss(x, targets, NULL) : fl_nn_cross_entropy(x, targets, NULL);
            assert_non_null(loss);
            fl_v_backward(loss, NULL, false);
            if (!want)
                want = fl_v_value(loss), want_grad = fl_v_grad(x);
            assert_close(fl_v_value(loss), want, 1e-6, 0);
            if (!nll)
                assert_close(fl_v_grad(x), want_grad, 1e-6, 0);
        }
    /* u8 targets with the default ignore_index (-100, which u8 cannot hold) and with 255. */
    fl_variable *x = fl_v_new(logits, true);
    fl_variable *all = fl_nn_cross_entropy(x, T_U8(FL_SHAPE(3), 3, 0, 1), NULL);
    fl_variable *two = fl_nn_cross_entropy(fl_v_new(fl_index(logits, FL_INDEX(FL_RANGE(0, 2))), false),
                                           T_U8(FL_SHAPE(2), 3, 0), NULL);
    fl_variable *ignored = fl_nn_cross_entropy(x, T_U8(FL_SHAPE(3), 3, 0, 255),
                                               &(fl_class_loss_options){FL_REDUCTION_MEAN, 255, 0});
    assert_close(fl_v_value(all), want, 1e-6, 0);
    assert_close(fl_v_value(ignored), fl_v_value(two), 1e-6, 0);
    assert_fails(fl_nn_cross_entropy(x, T_U8(FL_SHAPE(3), 3, 0, 255), NULL), FL_ERR_INDEX, "out of the 4 classes");
    assert_no_error();
}

static void losses_match_pytorch(void **state)
{
    const char *reductions[] = {"mean", "sum", "none"};
    fl_tensor *targets = fixture("nn.bin", "loss/targets"), *targets3 = fixture("nn.bin", "loss/targets3");
    char key[64];
    for (fl_reduction r = FL_REDUCTION_MEAN; r <= FL_REDUCTION_NONE; r++) {
        const char *rn = reductions[r];
        for (int s = 0; s < 2; s++) {
            fl_variable *x = fl_v_new(fixture("nn.bin", "loss/logits"), true);
            fl_variable *loss = fl_nn_cross_entropy(x, targets, &(fl_class_loss_options){r, -100, s ? 0.2 : 0});
            snprintf(key, sizeof key, "loss/ce_%s_%s", rn, s ? "0.2" : "0");
            assert_close(fl_v_value(loss), fixture("nn.bin", key), 1e-10, 1e-12);
            fl_v_backward(loss, fl_ones_like(fl_v_value(loss)), false);
            assert_close(fl_v_grad(x), fixture("nn.bin", strcat(key, "_grad")), 1e-10, 1e-12);
        }
        fl_variable *x = fl_v_new(fixture("nn.bin", "loss/logits3"), true);
        fl_variable *loss = fl_nn_cross_entropy(x, targets3, &(fl_class_loss_options){r, -100, 0.1});
        snprintf(key, sizeof key, "loss/ce3_%s", rn);
        assert_close(fl_v_value(loss), fixture("nn.bin", key), 1e-10, 1e-12);
        fl_v_backward(loss, fl_ones_like(fl_v_value(loss)), false);
        assert_close(fl_v_grad(x), fixture("nn.bin", strcat(key, "_grad")), 1e-10, 1e-12);

        x = fl_v_new(fl_log_softmax(fixture("nn.bin", "loss/logits"), 1), true);
        loss = fl_nn_nll_loss(x, targets, &(fl_class_loss_options){r, -100, 0});
        snprintf(key, sizeof key, "loss/nll_%s", rn);
        assert_close(fl_v_value(loss), fixture("nn.bin", key), 1e-10, 1e-12);
        fl_v_backward(loss, fl_ones_like(fl_v_value(loss)), false);
        assert_close(fl_v_grad(x), fixture("nn.bin", strcat(key, "_grad")), 1e-10, 1e-12);

        struct {
            const char *name;
            pair_loss fn;
            const char *input, *target;
        } pairs[] = {{"mse", fl_nn_mse_loss, "loss/pred", "loss/soft"},
                     {"l1", fl_nn_l1_loss, "loss/pred", "loss/soft"},
                     {"bce", fl_nn_bce_loss, "loss/probs", "loss/binary"},
                     {"bce_logits", fl_nn_bce_with_logits_loss, "loss/pred", "loss/soft"}};
        for (int i = 0; i < 4; i++) {
            x = fl_v_new(fixture("nn.bin", pairs[i].input), true);
            loss = pairs[i].fn(x, fl_v_new(fixture("nn.bin", pairs[i].target), false), r);
            snprintf(key, sizeof key, "loss/%s_%s", pairs[i].name, rn);
            assert_close(fl_v_value(loss), fixture("nn.bin", key), 1e-10, 1e-12);
            fl_v_backward(loss, fl_ones_like(fl_v_value(loss)), false);
            assert_close(fl_v_grad(x), fixture("nn.bin", strcat(key, "_grad")), 1e-10, 1e-12);
        }
    }
}

/* ---- the paper's Listing 8 ---- */

static void listing_8_builds_the_mnist_cnn_of_pytorch(void **state)
{
    fl_conv_params same = {.padding = {2, 2}};
    fl_module *model = fl_nn_sequential(FL_MODULES(
        fl_nn_view(FL_SHAPE(-1, 1, 28, 28)),
        fl_nn_conv2d(1, 32, 5, 5, &same, true), fl_nn_relu(), fl_nn_max_pool2d(2, 2, 0),
        fl_nn_conv2d(32, 64, 5, 5, &same, true), fl_nn_relu(), fl_nn_max_pool2d(2, 2, 0),
        fl_nn_view(FL_SHAPE(-1, 7 * 7 * 64)),
        fl_nn_linear(7 * 7 * 64, 1024, true), fl_nn_relu(), fl_nn_dropout(0.5),
        fl_nn_linear(1024, 10, true), fl_nn_log_softmax(1)));

    assert_int_equal(fl_module_parameter_count(model), 3274634); /* PyTorch's, for the same nn.Sequential */
    fl_tensor_map *map = fl_tensor_map_create();
    fl_module_state_dict(model, map);
    const char *torch_names[] = {"1.weight", "1.bias", "4.weight", "4.bias", "8.weight", "8.bias", "11.weight",
                                 "11.bias"};
    assert_int_equal(fl_tensor_map_count(map), 8);
    for (int i = 0; i < 8; i++)
        assert_string_equal(fl_tensor_map_name_at(map, i), torch_names[i]);
    fl_tensor_map_free(map);

    fl_variable *images = fl_v_new(fl_rand(FL_F32, FL_SHAPE(2, 784)), false);
    fl_variable *log_probs = fl_module_forward(model, images);
    assert_shape(fl_v_value(log_probs), 2, 10);
    assert_values(fl_sum(fl_exp(fl_v_value(log_probs)), FL_AXES(1), false), 1e-5, 0, 1, 1);
    fl_variable *loss = fl_nn_cross_entropy(log_probs, T_I64(FL_SHAPE(2), 3, 7), NULL);
    assert_int_equal(fl_v_backward(loss, NULL, false), FL_OK);
    assert_shape(fl_v_grad(fl_module_parameter(fl_module_child(model, "1"), "weight")), 32, 1, 5, 5);
    fl_module_release(model);
}

/* ---- initialization and modes ---- */

/* The largest magnitude among a module's parameters. */
static double largest_parameter(fl_module *m)
{
    fl_tensor_map *state = fl_tensor_map_create();
    assert_int_equal(fl_module_state_dict(m, state), FL_OK);
    double largest = 0;
    for (size_t i = 0; i < fl_tensor_map_count(state); i++)
        largest = fmax(largest, max_abs(fl_tensor_map_tensor_at(state, i)));
    fl_tensor_map_free(state);
    return largest;
}

static void *initialization_of_a_new_thread(void *unused)
{
    (void)unused;
    return (void *)(intptr_t)fl_nn_set_initialization(true);
}

/* fl_nn_set_initialization(false): layers built meanwhile have zeros for parameters,
 * the initializers leave a value as it is and draw nothing from the generator, and
 * the setting is the calling thread's. */
static void initialization_can_be_turned_off(void **state)
{
    fl_manual_seed(5);
    fl_tensor *expected = fl_rand(FL_F32, FL_SHAPE(4));
    fl_manual_seed(5);
    assert_true(fl_nn_set_initialization(false));
    fl_module *built[] = {fl_nn_linear(4, 3, true), fl_nn_lstm(2, 3, 2, true, true, 0, true),
                          fl_nn_embedding(5, 4, -1), fl_nn_layer_norm(FL_SHAPE(4), 1e-5, true),
                          fl_nn_multihead_attention(4, 2, 0, true, true)};
    for (int i = 0; i < 5; i++) {
        assert_non_null(built[i]);
        assert_true(largest_parameter(built[i]) == 0);
        fl_module_release(built[i]);
    }
    /* Each parameter is one zero broadcast: a 16 MB weight takes no memory. */
    fl_memory_stats before, after;
    fl_memory_stats_get(&before);
    fl_module *wide = fl_nn_linear(2048, 2048, true);
    fl_memory_stats_get(&after);
    assert_true(after.in_use - before.in_use < 64 * 1024);
    fl_module_release(wide);
    fl_variable *p = fl_v_new(fl_ones(FL_F32, FL_SHAPE(3, 2)), true);
    assert_int_equal(fl_init_normal(p, 0, 1), FL_OK);
    assert_int_equal(fl_init_kaiming_uniform(p, 0, FL_FAN_IN), FL_OK);
    assert_int_equal(fl_init_zeros(p), FL_OK);
    assert_values(fl_v_value(p), 0, 0, 1, 1, 1, 1, 1, 1);
    assert_fails_status(fl_init_normal(NULL, 0, 1), FL_ERR_NULL, "fl_init_normal");
    pthread_t other;
    void *other_setting;
    assert_int_equal(pthread_create(&other, NULL, initialization_of_a_new_thread, NULL), 0);
    assert_int_equal(pthread_join(other, &other_setting), 0);
    assert_true((intptr_t)other_setting); /* on by default there */
    assert_false(fl_nn_set_initialization(true));
    assert_close(fl_rand(FL_F32, FL_SHAPE(4)), expected, 0, 0); /* nothing was drawn */
    fl_module *linear = fl_nn_linear(4, 3, true);
    assert_true(largest_parameter(linear) > 0);
    fl_module_release(linear);
}

static void initializers_follow_pytorch(void **state)
{
    fl_manual_seed(1);
    fl_module *linear = fl_nn_linear(400, 300, true);
    const fl_tensor *w = fl_v_value(fl_module_parameter(linear, "weight"));
    double bound = 1 / sqrt(400.0); /* kaiming_uniform(a = sqrt(5)) */
    assert_true(max_abs(w) <= bound && max_abs(w) > 0.99 * bound);
    const fl_tensor *b = fl_v_value(fl_module_parameter(linear, "bias"));
    assert_true(max_abs(b) <= bound && max_abs(b) > 0.9 * bound);
    fl_module_release(linear);

    fl_module *conv = fl_nn_conv2d(8, 16, 3, 3, NULL, false);
    w = fl_v_value(fl_module_parameter(conv, "weight"));
    bound = 1 / sqrt(8 * 9.0);
    assert_true(max_abs(w) <= bound && max_abs(w) > 0.99 * bound);
    assert_null(fl_module_parameter(conv, "bias"));
    fl_module_release(conv);

    fl_module *embedding = fl_nn_embedding(1000, 64, 3);
    w = fl_v_value(fl_module_parameter(embedding, "weight"));
    assert_values(fl_std(w, FL_ALL_AXES, 1, false), 0.02, 0, 1);
    assert_true(max_abs(fl_index(w, FL_INDEX(FL_AT(3)))) == 0); /* the padding row */
    fl_module_release(embedding);

    fl_module *norm = fl_nn_batch_norm1d(3, 1e-5, 0.1, true, true);
    assert_values(fl_v_value(fl_module_parameter(norm, "weight")), 0, 0, 1, 1, 1);
    assert_values(fl_v_value(fl_module_parameter(norm, "bias")), 0, 0, 0, 0, 0);
    assert_values(fl_module_buffer(norm, "running_var"), 0, 0, 1, 1, 1);
    assert_dtype(fl_module_buffer(norm, "num_batches_tracked"), FL_I64);
    fl_module_release(norm);

    fl_variable *p = fl_v_new(fl_zeros(FL_F32, FL_SHAPE(200, 100)), true);
    assert_int_equal(fl_init_kaiming_normal(p, 0, FL_FAN_OUT), FL_OK);
    assert_values(fl_std(fl_v_value(p), FL_ALL_AXES, 1, false), 0.02, 0, sqrt(2.0 / 200));
    assert_int_equal(fl_init_xavier_uniform(p, 2), FL_OK);
    bound = 2 * sqrt(6.0 / 300);
    assert_true(max_abs(fl_v_value(p)) <= bound && max_abs(fl_v_value(p)) > 0.99 * bound);
    assert_int_equal(fl_init_xavier_normal(p, 1), FL_OK);
    assert_values(fl_std(fl_v_value(p), FL_ALL_AXES, 1, false), 0.02, 0, sqrt(2.0 / 300));
    assert_int_equal(fl_init_kaiming_uniform(p, 0, FL_FAN_IN), FL_OK);
    bound = sqrt(6.0 / 100);
    assert_true(max_abs(fl_v_value(p)) <= bound && max_abs(fl_v_value(p)) > 0.99 * bound);
    assert_int_equal(fl_init_normal(p, 3, 0.5), FL_OK);
    assert_values(fl_mean(fl_v_value(p), FL_ALL_AXES, false), 0.01, 0, 3);
    assert_int_equal(fl_init_uniform(p, 2, 3), FL_OK);
    assert_values(fl_min(fl_v_value(p), FL_ALL_AXES, false), 0, 0.01, 2);
    assert_int_equal(fl_init_ones(p), FL_OK);
    assert_values(fl_sum(fl_v_value(p), FL_ALL_AXES, false), 0, 0, 20000);
}

static void dropout_scales_what_it_keeps_and_only_while_training(void **state)
{
    fl_module *dropout = fl_nn_dropout(0.25);
    fl_variable *x = fl_v_new(fl_ones(FL_F32, FL_SHAPE(100, 100)), false);
    fl_manual_seed(3);
    const fl_tensor *y = fl_v_value(fl_module_forward(dropout, x));
    fl_tensor *kept = fl_ne(y, fl_scalar(0, FL_F32));
    assert_values(fl_mean(fl_cast(kept, FL_F32), FL_ALL_AXES, false), 0, 0.02, 0.75);
    assert_values(fl_max(y, FL_ALL_AXES, false), 1e-6, 0, 1 / 0.75);
    fl_manual_seed(3);
    assert_close(fl_v_value(fl_module_forward(dropout, x)), y, 0, 0); /* the seed decides the mask */
    fl_module_train(dropout, false);
    assert_ptr_equal(fl_module_forward(dropout, x), x);
    fl_module_release(dropout);
    assert_true(max_abs(fl_v_value(fl_f_dropout(x, 1, true))) == 0);
}

/* ---- errors ---- */

static void bad_inputs_name_the_layer_and_the_shapes(void **state)
{
    fl_module *linear = fl_nn_linear(4, 3, true);
    fl_variable *x = fl_v_new(fl_zeros(FL_F32, FL_SHAPE(2, 5)), true);
    assert_fails(fl_module_forward(linear, x), FL_ERR_SHAPE, "Linear: expects an input of shape [*, 4], got f32[2, 5]");
    fl_module_release(linear);
    fl_module *conv = fl_nn_conv2d(3, 8, 3, 3, NULL, true);
    assert_fails(fl_module_forward(conv, x), FL_ERR_SHAPE, "Conv2d: expects an input of shape [N, 3, H, W]");
    fl_module_release(conv);
    fl_module *bn = fl_nn_batch_norm1d(4, 1e-5, 0.1, true, true);
    assert_fails(fl_module_forward(bn, x), FL_ERR_SHAPE, "BatchNorm1d: expects an input of shape [N, 4] or [N, 4, L]");
    fl_module_release(bn);
    fl_module *ln = fl_nn_layer_norm(FL_SHAPE(3, 5), 1e-5, true);
    assert_fails(fl_module_forward(ln, x), FL_ERR_SHAPE, "LayerNorm: expects an input of shape [*, 3, 5], got f32[2, 5]");
    fl_module_release(ln);
    fl_module *embedding = fl_nn_embedding(4, 2, -1);
    assert_fails(fl_module_forward(embedding, x), FL_ERR_DTYPE, "Embedding: expects i64 or i32 indices");
    fl_module_release(embedding);
    fl_module *pool = fl_nn_max_pool2d(2, 0, 0);
    assert_fails(fl_module_forward(pool, x), FL_ERR_SHAPE, "MaxPool2d: expects an input of shape [N, C, H, W]");
    fl_module_release(pool);
    fl_module *view = fl_nn_view(FL_SHAPE(3, 0, 0));
    assert_fails(fl_module_forward(view, x), FL_ERR_SHAPE, "View: cannot keep axis 2");
    fl_module_release(view);

    assert_fails(fl_f_linear(x, fl_v_new(fl_zeros(FL_F32, FL_SHAPE(3, 5)), true),
                             fl_v_new(fl_zeros(FL_F32, FL_SHAPE(4)), true)),
                 FL_ERR_SHAPE, "bias f32[4]");
    assert_fails(fl_f_layer_norm(x, NULL, NULL, 3, 1e-5), FL_ERR_AXIS, "last 3 axes of 2");
    assert_fails(fl_f_layer_norm(x, fl_v_new(fl_ones(FL_F32, FL_SHAPE(4)), true), NULL, 1, 1e-5), FL_ERR_SHAPE,
                 "weight f32[4] does not match");
    assert_fails(fl_f_batch_norm(fl_v_new(fl_zeros(FL_F32, FL_SHAPE(1, 5)), false), NULL, NULL, NULL, NULL, true,
                                 1e-5, NULL, NULL),
                 FL_ERR_VALUE, "one value per channel");
    assert_fails(fl_f_batch_norm(x, NULL, NULL, NULL, NULL, false, 1e-5, NULL, NULL), FL_ERR_NULL, "fl_f_batch_norm");
    assert_fails(fl_f_batch_norm(x, fl_zeros(FL_F32, FL_SHAPE(4)), fl_ones(FL_F32, FL_SHAPE(5)), NULL, NULL, false,
                                 1e-5, NULL, NULL),
                 FL_ERR_SHAPE, "running_mean f32[4] does not match the 5 channels");
    assert_fails(fl_f_dropout(x, 1.5, true), FL_ERR_VALUE, "1.5 is not in [0, 1]");
}

static void bad_losses_and_constructors_are_refused(void **state)
{
    fl_variable *logits = fl_v_new(fl_zeros(FL_F32, FL_SHAPE(2, 3)), true);
    assert_fails(fl_nn_cross_entropy(logits, T_I64(FL_SHAPE(2), 0, 3), NULL), FL_ERR_INDEX,
                 "a target of i64[2] is out of the 3 classes");
    assert_fails(fl_nn_cross_entropy(logits, T_I64(FL_SHAPE(3), 0, 1, 2), NULL), FL_ERR_SHAPE,
                 "logits f32[2, 3] and targets i64[3]");
    assert_fails(fl_nn_cross_entropy(logits, T_F32(FL_SHAPE(2), 0, 1), NULL), FL_ERR_DTYPE,
                 "targets f32[2]: expects floats and integer class indices (u8, i32 or i64)");
    assert_fails(fl_nn_nll_loss(logits, T_BOOL(FL_SHAPE(2), 0, 1), NULL), FL_ERR_DTYPE, "integer class indices");
    assert_fails(fl_nn_nll_loss(logits, T_I64(FL_SHAPE(2), 0, 1), &(fl_class_loss_options){.label_smoothing = 0.1}),
                 FL_ERR_VALUE, "NLL takes no smoothing");
    assert_fails(fl_nn_mse_loss(logits, fl_v_new(fl_zeros(FL_F32, FL_SHAPE(3, 2)), false), FL_REDUCTION_MEAN),
                 FL_ERR_SHAPE, "fl_nn_mse_loss: input f32[2, 3] and target f32[3, 2]");
    assert_fails(fl_nn_l1_loss(logits, logits, (fl_reduction)7), FL_ERR_VALUE, "7 is not a reduction");
    /* Ignored targets count for nothing, in the mean too. */
    fl_variable *loss = fl_nn_cross_entropy(logits, T_I64(FL_SHAPE(2), 1, -100), NULL);
    assert_values(fl_v_value(loss), 1e-6, 0, log(3.0));
    /* Every target ignored: the mean over none is nan, as PyTorch's, and the gradient
     * zero, as PyTorch's, so that one such batch does not poison the parameters. */
    for (int mean = 0; mean < 2; mean++) {
        fl_variable *x = fl_v_new(T_F32(FL_SHAPE(2, 3), 1, 2, 3, -1, 0, 4), true);
        fl_class_loss_options o = {mean ? FL_REDUCTION_MEAN : FL_REDUCTION_SUM, -100, 0.1};
        loss = fl_nn_cross_entropy(x, T_I64(FL_SHAPE(2), -100, -100), &o);
        assert_values(fl_v_value(loss), 0, 0, mean ? NAN : 0);
        fl_v_backward(loss, NULL, false);
        assert_values(fl_v_grad(x), 0, 0, 0, 0, 0, 0, 0, 0);
    }

    assert_fails(fl_nn_linear(-1, 3, true), FL_ERR_VALUE, "negative features");
    assert_fails(fl_nn_linear((int64_t)1 << 32, (int64_t)1 << 32, true), FL_ERR_SHAPE,
                 "a f32 tensor of shape [4294967296, 4294967296] is too large");
    assert_fails(fl_nn_embedding((int64_t)1 << 40, (int64_t)1 << 40, -1), FL_ERR_SHAPE, "is too large");
    assert_fails(fl_nn_conv2d(3, 4, 3, 3, &(fl_conv_params){.groups = 2}, true), FL_ERR_VALUE, "divisible by the groups");
    assert_fails(fl_nn_max_pool2d(0, 0, 0), FL_ERR_VALUE, "the kernel must be positive");
    assert_fails(fl_nn_batch_norm2d(0, 1e-5, 0.1, true, true), FL_ERR_VALUE, "features must be positive");
    assert_fails(fl_nn_layer_norm(0, (const int64_t[]){1}, 1e-5, true), FL_ERR_VALUE, "0 axes");
    assert_fails(fl_nn_dropout(-0.1), FL_ERR_VALUE, "not in [0, 1]");
    assert_fails(fl_nn_embedding(4, 2, 4), FL_ERR_VALUE, "padding index a row or -1");
    assert_fails(fl_nn_view(FL_SHAPE(-1, -1)), FL_ERR_VALUE, "at most one -1");
    assert_fails(fl_nn_padding(0, NULL, NULL, 0), FL_ERR_VALUE, "padding of 0 axes");
    assert_fails(fl_nn_adaptive_avg_pool2d(0, 1), FL_ERR_VALUE, "is not positive");
    assert_fails(fl_nn_weight_norm(fl_nn_linear(2, 2, true), "kernel", 0), FL_ERR_VALUE, "no such parameter");
    assert_fails(fl_nn_weight_norm(fl_nn_linear(2, 2, true), "weight", 2), FL_ERR_VALUE, "dim is not an axis");
    assert_fails(fl_nn_weight_norm(fl_nn_batch_norm1d(2, 1e-5, 0.1, true, true), "weight", 0), FL_ERR_VALUE,
                 "has buffers or children");
    assert_fails(fl_nn_weight_norm(NULL, "weight", 0), FL_ERR_NULL, "fl_nn_weight_norm");
    fl_variable *vector = fl_v_new(fl_zeros(FL_F32, FL_SHAPE(3)), true);
    assert_fails_status(fl_init_kaiming_uniform(vector, 0, FL_FAN_IN), FL_ERR_SHAPE, "two or more axes, got f32[3]");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        scoped_test(functional_forms_have_the_gradients_of_their_values),
        scoped_test(losses_have_the_gradients_of_their_values),
        scoped_test(modules_have_the_gradients_of_their_values),
        scoped_test(layers_match_pytorch),
        scoped_test(batch_norm_matches_pytorch_in_training_and_evaluation),
        scoped_test(fused_batch_norm_matches_the_composition),
        scoped_test(fused_batch_norm_kernels_refuse_other_dtypes),
        scoped_test(losses_match_pytorch),
        scoped_test(class_losses_take_every_integer_dtype),
        scoped_test(listing_8_builds_the_mnist_cnn_of_pytorch),
        scoped_test(initializers_follow_pytorch),
        scoped_test(initialization_can_be_turned_off),
        scoped_test(dropout_scales_what_it_keeps_and_only_while_training),
        scoped_test(bad_inputs_name_the_layer_and_the_shapes),
        scoped_test(bad_losses_and_constructors_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
