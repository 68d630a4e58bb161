/* Optimizers against torch.optim (and NovoGrad against a NumPy transcription of
 * Flashlight's), step by step on a fixed sequence of gradients; their state against
 * PyTorch's state_dict and across a save and load; learning-rate schedules against
 * torch.optim.lr_scheduler; clipping against torch.nn.utils.clip_grad_norm_.
 * Fixtures: tests/fixtures/gen_optim.py. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "flare/autograd.h"
#include "flare/io.h"
#include "flare/optim.h"
#include "support.h"

/* The fixture's sequence, as gen_optim.py describes it. */
#define STEPS 5
#define NPARAMS 2
#define SKIP_STEP 2  /* the second parameter has no gradient at this step */
#define SKIP_PARAM 1
#define LR_STEP 3    /* the learning rate is halved from this step on */

static fl_tensor *fx(const char *format, ...) __attribute__((format(printf, 1, 2)));
static fl_tensor *fx(const char *format, ...)
{
    char name[128];
    va_list ap;
    va_start(ap, format);
    vsnprintf(name, sizeof name, format, ap);
    va_end(ap);
    fl_tensor *t = fixture("optim.bin", name);
    assert_non_null(t);
    return t;
}

typedef fl_optimizer *(*make_fn)(fl_variable *const *params, size_t count);

static fl_optimizer *sgd(fl_variable *const *p, size_t n) { return fl_sgd(p, n, &(fl_sgd_options){.lr = 0.1}); }
static fl_optimizer *sgd_wd(fl_variable *const *p, size_t n)
{
    return fl_sgd(p, n, &(fl_sgd_options){.lr = 0.1, .weight_decay = 0.1});
}
static fl_optimizer *sgd_momentum(fl_variable *const *p, size_t n)
{
    return fl_sgd(p, n, &(fl_sgd_options){.lr = 0.1, .momentum = 0.9, .dampening = 0.1});
}
static fl_optimizer *sgd_nesterov(fl_variable *const *p, size_t n)
{
    return fl_sgd(p, n, &(fl_sgd_options){.lr = 0.1, .momentum = 0.9, .nesterov = true, .weight_decay = 0.01});
}
static fl_optimizer *adam(fl_variable *const *p, size_t n)
{
    fl_adam_options o = FL_ADAM_DEFAULTS;
    o.lr = 0.01;
    return fl_adam(p, n, &o);
}
static fl_optimizer *adam_wd(fl_variable *const *p, size_t n)
{
    return fl_adam(p, n, &(fl_adam_options){.lr = 0.01, .beta1 = 0.8, .beta2 = 0.9, .eps = 1e-8, .weight_decay = 0.1});
}
static fl_optimizer *amsgrad(fl_variable *const *p, size_t n)
{
    return fl_adam(p, n, &(fl_adam_options){.lr = 0.01, .beta1 = 0.5, .beta2 = 0.5, .eps = 1e-8, .amsgrad = true});
}
static fl_optimizer *adamw(fl_variable *const *p, size_t n)
{
    fl_adam_options o = FL_ADAMW_DEFAULTS;
    o.lr = 0.01;
    return fl_adamw(p, n, &o);
}
static fl_optimizer *adamw_amsgrad(fl_variable *const *p, size_t n)
{
    return fl_adamw(p, n, &(fl_adam_options){.lr = 0.01, .beta1 = 0.5, .beta2 = 0.5, .eps = 1e-8,
                                             .weight_decay = 0.1, .amsgrad = true});
}
static fl_optimizer *rmsprop(fl_variable *const *p, size_t n)
{
    fl_rmsprop_options o = FL_RMSPROP_DEFAULTS;
    o.lr = 0.01;
    return fl_rmsprop(p, n, &o);
}
static fl_optimizer *rmsprop_centered(fl_variable *const *p, size_t n)
{
    return fl_rmsprop(p, n, &(fl_rmsprop_options){.lr = 0.01, .alpha = 0.9, .eps = 1e-8, .centered = true,
                                                  .momentum = 0.9, .weight_decay = 0.1});
}
static fl_optimizer *adagrad(fl_variable *const *p, size_t n)
{
    fl_adagrad_options o = FL_ADAGRAD_DEFAULTS;
    o.lr = 0.1;
    return fl_adagrad(p, n, &o);
}
static fl_optimizer *adagrad_decay(fl_variable *const *p, size_t n)
{
    return fl_adagrad(p, n, &(fl_adagrad_options){.lr = 0.1, .lr_decay = 0.1, .weight_decay = 0.1,
                                                  .initial_accumulator_value = 0.1, .eps = 1e-10});
}
static fl_optimizer *adadelta(fl_variable *const *p, size_t n) { return fl_adadelta(p, n, NULL); }
static fl_optimizer *adadelta_wd(fl_variable *const *p, size_t n)
{
    return fl_adadelta(p, n, &(fl_adadelta_options){.lr = 0.5, .rho = 0.8, .eps = 1e-6, .weight_decay = 0.1});
}
static fl_optimizer *novograd(fl_variable *const *p, size_t n)
{
    fl_novograd_options o = FL_NOVOGRAD_DEFAULTS;
    o.lr = 0.01;
    return fl_novograd(p, n, &o);
}
static fl_optimizer *novograd_wd(fl_variable *const *p, size_t n)
{
    return fl_novograd(p, n, &(fl_novograd_options){.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                                                    .weight_decay = 0.1});
}

typedef struct optim_case {
    const char *name; /* as gen_optim.py names it */
    make_fn make;
} optim_case;

#define CASE(f) {#f, f}
static const optim_case cases[] = {
    CASE(sgd),     CASE(sgd_wd),           CASE(sgd_momentum), CASE(sgd_nesterov),  CASE(adam),
    CASE(adam_wd), CASE(amsgrad),          CASE(adamw),        CASE(adamw_amsgrad), CASE(rmsprop),
    CASE(rmsprop_centered), CASE(adagrad), CASE(adagrad_decay), CASE(adadelta),     CASE(adadelta_wd),
    CASE(novograd), CASE(novograd_wd),
};
#define NCASES (sizeof cases / sizeof cases[0])

static void new_params(fl_variable **params, fl_dtype dtype)
{
    for (int k = 0; k < NPARAMS; k++)
        params[k] = fl_v_new(fl_cast(fx("p%d", k), dtype), true);
}

/* Step t of the fixture's sequence: its gradients, its learning rate, one step. */
static void fixture_step(fl_optimizer *o, fl_variable **params, int t)
{
    if (t == LR_STEP)
        assert_int_equal(fl_optimizer_set_lr(o, fl_optimizer_get_lr(o) * 0.5), FL_OK);
    for (int k = 0; k < NPARAMS; k++) {
        bool skipped = t == SKIP_STEP && k == SKIP_PARAM;
        const fl_tensor *value = fl_v_value(params[k]);
        fl_tensor *grad =
            skipped ? NULL : fl_to_backend(fl_cast(fx("g%d_%d", t, k), fl_dtype_of(value)), fl_backend_name(value));
        assert_int_equal(fl_v_set_grad(params[k], grad), FL_OK);
    }
    assert_int_equal(fl_optimizer_step(o), FL_OK);
    assert_true(fl_grad_enabled());
}

static void check_against_reference(const char *name, fl_dtype dtype, double rtol, double atol)
{
    for (size_t c = 0; c < NCASES; c++) {
        if (strcmp(cases[c].name, name) != 0)
            continue;
        fl_variable *params[NPARAMS];
        new_params(params, dtype);
        fl_optimizer *o = cases[c].make(params, NPARAMS);
        assert_non_null(o);
        for (int t = 0; t < STEPS; t++) {
            fixture_step(o, params, t);
            for (int k = 0; k < NPARAMS; k++) {
                const fl_tensor *value = fl_v_value(params[k]);
                assert_dtype(value, dtype);
                assert_close(value, fx("%s_%d_%d", cases[c].name, t, k), rtol, atol);
            }
        }
        fl_optimizer_free(o);
        assert_no_error();
    }
}

/* f64 to PyTorch's f64 tightly; f32 to the same f64 reference, within f32 rounding. */
#define CHECK(...) \
    for (const char *const *name = (const char *const[]){__VA_ARGS__, NULL}; *name; name++) { \
        check_against_reference(*name, FL_F64, 1e-12, 1e-14); \
        check_against_reference(*name, FL_F32, 1e-5, 1e-6); \
    }

static void sgd_matches_pytorch(void **state) { CHECK("sgd", "sgd_wd", "sgd_momentum", "sgd_nesterov"); }
static void adam_and_amsgrad_match_pytorch(void **state) { CHECK("adam", "adam_wd", "amsgrad"); }
static void adamw_matches_pytorch(void **state) { CHECK("adamw", "adamw_amsgrad"); }
static void rmsprop_matches_pytorch(void **state) { CHECK("rmsprop", "rmsprop_centered"); }
static void adagrad_matches_pytorch(void **state) { CHECK("adagrad", "adagrad_decay"); }
static void adadelta_matches_pytorch(void **state) { CHECK("adadelta", "adadelta_wd"); }
static void novograd_matches_flashlight_formula(void **state) { CHECK("novograd", "novograd_wd"); }

/* After the whole sequence, the state is PyTorch's state_dict, name for name. */
static void state_has_pytorch_names_and_values(void **state)
{
    for (size_t c = 0; c < NCASES; c++) {
        fl_variable *params[NPARAMS];
        new_params(params, FL_F64);
        fl_optimizer *o = cases[c].make(params, NPARAMS);
        for (int t = 0; t < STEPS; t++)
            fixture_step(o, params, t);
        fl_tensor_map *map = fl_tensor_map_create();
        assert_int_equal(fl_optimizer_state(o, map, "optimizer."), FL_OK);
        int64_t count = 0;
        for (size_t i = 0; i < fl_tensor_map_count(map); i++) {
            const char *name = fl_tensor_map_name_at(map, i);
            if (strncmp(name, "optimizer.state.", 16) != 0)
                continue;
            count++;
            assert_close(fl_tensor_map_tensor_at(map, i), fx("%s.state.%s", cases[c].name, name + 16), 1e-12, 1e-14);
        }
        assert_int_equal(count, (int64_t)fl_item(fx("%s.state_count", cases[c].name)));
        double lr = fl_item(fl_tensor_map_get(map, "optimizer.param_groups.0.lr"));
        assert_true(lr == fl_optimizer_get_lr(o));
        fl_tensor_map_free(map);
        fl_optimizer_free(o);
    }
    assert_no_error();
}

/* Three steps, the state saved; two more. A new optimizer over the values after
 * three steps, the state loaded, two more: the same values, bit for bit. */
static void resuming_from_saved_state_is_exact(void **state)
{
    for (size_t c = 0; c < NCASES; c++) {
        for (fl_dtype dtype = FL_F32; dtype <= FL_F64; dtype++) {
            fl_variable *params[NPARAMS], *resumed[NPARAMS];
            new_params(params, dtype);
            fl_optimizer *o = cases[c].make(params, NPARAMS);
            for (int t = 0; t < 3; t++)
                fixture_step(o, params, t);
            fl_tensor_map *map = fl_tensor_map_create();
            assert_int_equal(fl_optimizer_state(o, map, NULL), FL_OK);
            for (int k = 0; k < NPARAMS; k++)
                resumed[k] = fl_v_new(fl_v_value(params[k]), true);
            fl_optimizer *r = cases[c].make(resumed, NPARAMS);
            assert_int_equal(fl_optimizer_load_state(r, map, NULL), FL_OK);
            fl_tensor_map_free(map);
            for (int t = 3; t < STEPS; t++) {
                fixture_step(o, params, t);
                fixture_step(r, resumed, t);
            }
            for (int k = 0; k < NPARAMS; k++)
                assert_close(fl_v_value(resumed[k]), fl_v_value(params[k]), 0, 0);
            fl_optimizer_free(o);
            fl_optimizer_free(r);
        }
    }
    assert_no_error();
}

/* An optimizer whose step may run in place: how to make it over one parameter, and
 * which backend entry runs that step (cleared to compose instead). */
typedef struct in_place_case {
    fl_optimizer *(*make)(fl_variable **param, const void *options);
    void (*clear)(fl_backend *table);
} in_place_case;

/* Six steps of the optimizer on a parameter large enough for the threads to split it
 * (and with a tail past the last whole cache line), f32 and f64, with gradients that
 * shrink (so that AMSGrad's maximum holds on): the values equal, bit for bit, those of
 * the same backend with the entry cleared, and the last step wrote into the value
 * tensor it found. The caller skips a backend without the entry, where both runs
 * would be the composition. */
static void assert_in_place_matches_the_composition(const in_place_case *k, const void *options, uint64_t seed)
{
    const char *name = fl_default_backend()->name;
    for (fl_dtype dtype = FL_F32; dtype <= FL_F64; dtype++) {
        fl_manual_seed(seed);
        fl_tensor *start = fl_cast(fl_randn(FL_F64, FL_SHAPE(70001)), dtype), *grads[6];
        for (int t = 0; t < 6; t++)
            grads[t] = fl_cast(fl_mul_scalar(fl_randn(FL_F64, FL_SHAPE(70001)), 1.0 / (1 + t)), dtype);
        fl_tensor *values[2];
        for (int composed = 0; composed < 2; composed++) {
            fl_backend without = support_derive(name), original;
            k->clear(&without);
            if (composed)
                original = support_override(&without);
            fl_variable *p = fl_v_new(fl_copy(start), true);
            fl_optimizer *o = k->make(&p, options);
            const fl_tensor *before = NULL;
            for (int t = 0; t < 6; t++) {
                assert_int_equal(fl_v_set_grad(p, grads[t]), FL_OK);
                before = fl_v_value(p);
                assert_int_equal(fl_optimizer_step(o), FL_OK);
            }
            if (!composed)
                assert_ptr_equal(fl_v_value(p), before);
            values[composed] = fl_retain(fl_v_value(p));
            fl_optimizer_free(o);
            if (composed)
                support_override(&original);
        }
        assert_close(values[0], values[1], 0, 0);
        fl_release(values[0]);
        fl_release(values[1]);
    }
}

/* A tensor that anything else holds is never written: a reference to the value (the
 * tensor layer's check), a view of it (the backend's: the view is another tensor over
 * the same storage) and each named state buffer of a saved state keep their values
 * through the steps after they appear, while the parameter takes the same new values
 * as one that nothing else holds. */
static void assert_never_writes_what_others_hold(const in_place_case *k, const void *options,
                                                 const char *const *buffers, int nbuffers)
{
    fl_manual_seed(43);
    fl_tensor *start = fl_randn(FL_F32, FL_SHAPE(40000)), *grad = fl_randn(FL_F32, FL_SHAPE(40000));
    for (int kind = 0; kind < 2 + nbuffers; kind++) {
        fl_variable *alone = fl_v_new(fl_copy(start), true), *held = fl_v_new(fl_copy(start), true);
        fl_optimizer *a = k->make(&alone, options), *h = k->make(&held, options);
        for (int t = 0; t < 5; t++) {
            if (t == 3) { /* a holder appears once both step in place */
                fl_tensor_map *saved = fl_tensor_map_create();
                assert_int_equal(fl_optimizer_state(h, saved, NULL), FL_OK);
                fl_tensor *holder = kind == 0   ? fl_retain(fl_v_value(held))
                                    : kind == 1 ? fl_retain(fl_reshape(fl_v_value(held), FL_SHAPE(200, 200)))
                                                : fl_retain(fl_tensor_map_get(saved, buffers[kind - 2]));
                assert_non_null(holder);
                fl_tensor_map_free(saved);
                fl_tensor *copy = fl_copy(holder);
                for (; t < 5; t++) {
                    fl_v_set_grad(alone, grad);
                    fl_v_set_grad(held, grad);
                    assert_int_equal(fl_optimizer_step(a), FL_OK);
                    assert_int_equal(fl_optimizer_step(h), FL_OK);
                }
                assert_close(holder, copy, 0, 0);
                fl_release(holder);
                break;
            }
            fl_v_set_grad(alone, grad);
            fl_v_set_grad(held, grad);
            assert_int_equal(fl_optimizer_step(a), FL_OK);
            assert_int_equal(fl_optimizer_step(h), FL_OK);
        }
        assert_close(fl_v_value(held), fl_v_value(alone), 0, 0);
        fl_optimizer_free(a);
        fl_optimizer_free(h);
    }
}

static fl_optimizer *make_sgd(fl_variable **param, const void *options) { return fl_sgd(param, 1, options); }
static fl_optimizer *make_adam(fl_variable **param, const void *options) { return fl_adam(param, 1, options); }
static fl_optimizer *make_adamw(fl_variable **param, const void *options) { return fl_adamw(param, 1, options); }
static void clear_sgd(fl_backend *table) { table->sgd_update = NULL; }
static void clear_adam(fl_backend *table) { table->adam_update = NULL; }

/* SGD with momentum steps in place after its first two steps where the backend has
 * the fused kernel (backend.h, sgd_update) and nothing else holds the value or the
 * buffer: with dampening, weight decay and Nesterov momentum. */
static void sgd_in_place_matches_the_composition(void **state)
{
    if (!fl_default_backend()->sgd_update)
        skip();
    const in_place_case sgd = {make_sgd, clear_sgd};
    const fl_sgd_options options[] = {{.lr = 0.1, .momentum = 0.9, .dampening = 0.1},
                                      {.lr = 0.05, .momentum = 0.8, .nesterov = true, .weight_decay = 0.01},
                                      {.lr = 0.1, .momentum = 0.5, .dampening = 0.5, .weight_decay = 0.1}};
    for (size_t c = 0; c < sizeof options / sizeof options[0]; c++)
        assert_in_place_matches_the_composition(&sgd, &options[c], 41 + c);
    assert_no_error();
}

static void sgd_never_writes_what_others_hold(void **state)
{
    const in_place_case sgd = {make_sgd, clear_sgd};
    const char *buffers[] = {"state.0.momentum_buffer"};
    assert_never_writes_what_others_hold(&sgd, &(fl_sgd_options){.lr = 0.1, .momentum = 0.9}, buffers, 1);
    assert_no_error();
}

/* Adam and AdamW step in place after their first step where the backend has the fused
 * kernel (backend.h, adam_update), as SGD does: with and without weight decay and
 * AMSGrad. */
static void adam_in_place_matches_the_composition(void **state)
{
    if (!fl_default_backend()->adam_update)
        skip();
    const in_place_case adam = {make_adam, clear_adam}, adamw = {make_adamw, clear_adam};
    const fl_adam_options options[] = {
        {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8},
        {.lr = 3e-2, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.1, .amsgrad = true},
        {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.05},
        {.lr = 5e-2, .beta1 = 0.5, .beta2 = 0.9, .eps = 1e-3, .weight_decay = 0.01, .amsgrad = true}};
    for (size_t c = 0; c < sizeof options / sizeof options[0]; c++)
        assert_in_place_matches_the_composition(c < 2 ? &adam : &adamw, &options[c], 47 + c);
    assert_no_error();
}

static void adam_never_writes_what_others_hold(void **state)
{
    const in_place_case adam = {make_adam, clear_adam};
    const char *buffers[] = {"state.0.exp_avg", "state.0.exp_avg_sq", "state.0.max_exp_avg_sq"};
    fl_adam_options options = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .amsgrad = true};
    assert_never_writes_what_others_hold(&adam, &options, buffers, 3);
    assert_no_error();
}

/* Moves o to backend: its parameters and its state buffers arrive there unchanged. */
static void assert_moves(fl_optimizer *o, const char *backend)
{
    fl_tensor_map *before = fl_tensor_map_create(), *after = fl_tensor_map_create();
    assert_int_equal(fl_optimizer_state(o, before, NULL), FL_OK);
    assert_int_equal(fl_optimizer_to_backend(o, backend), FL_OK);
    assert_int_equal(fl_optimizer_state(o, after, NULL), FL_OK);
    assert_int_equal(fl_tensor_map_count(after), fl_tensor_map_count(before));
    for (size_t i = 0; i < fl_tensor_map_count(after); i++) {
        const char *name = fl_tensor_map_name_at(after, i);
        assert_string_equal(name, fl_tensor_map_name_at(before, i));
        assert_true(support_same_bytes(fl_tensor_map_tensor_at(after, i), fl_tensor_map_tensor_at(before, i)));
        /* the step counts and the learning rate are numbers, written as new 0-d tensors */
        const char *dot = strrchr(name, '.');
        if (strcmp(dot, ".step") != 0 && strcmp(dot, ".lr") != 0)
            assert_string_equal(fl_backend_name(fl_tensor_map_tensor_at(after, i)), backend);
    }
    for (size_t k = 0; k < o->count; k++)
        assert_string_equal(fl_backend_name(fl_v_value(o->params[k])), backend);
    fl_tensor_map_free(before);
    fl_tensor_map_free(after);
}

/* Three steps here, the optimizer moved to another backend, two steps there, and
 * back for one more: each move keeps the state as it was, and the steps agree with
 * those of an optimizer that stayed (exactly where the two backends round alike). */
static void moving_to_another_backend_and_back(void **state)
{
    const char *here = fl_default_backend()->name, *there = support_other_backend();
    for (size_t c = 0; c < NCASES; c++) {
        fl_variable *params[NPARAMS], *stayed[NPARAMS];
        new_params(params, FL_F32);
        new_params(stayed, FL_F32);
        fl_optimizer *o = cases[c].make(params, NPARAMS), *s = cases[c].make(stayed, NPARAMS);
        for (int t = 0; t < 3; t++) {
            fixture_step(o, params, t);
            fixture_step(s, stayed, t);
        }
        assert_moves(o, there);
        assert_string_equal(fl_backend_name(fl_v_grad(params[0])), there);
        char expected[160];
        snprintf(expected, sizeof expected, "fl_v_set_grad: operands on different backends (%s and %s)", there, here);
        assert_fails_status(fl_v_set_grad(params[0], fl_v_grad(stayed[0])), FL_ERR_VALUE, expected);
        for (int t = 3; t < STEPS; t++) {
            fixture_step(o, params, t);
            fixture_step(s, stayed, t);
        }
        for (int k = 0; k < NPARAMS; k++) {
            assert_string_equal(fl_backend_name(fl_v_value(params[k])), there);
            assert_close(fl_v_value(params[k]), fl_v_value(stayed[k]), 1e-6, 1e-7);
        }
        assert_moves(o, here);
        fixture_step(o, params, 0);
        fixture_step(s, stayed, 0);
        for (int k = 0; k < NPARAMS; k++)
            assert_close(fl_v_value(params[k]), fl_v_value(stayed[k]), 1e-6, 1e-7);
        assert_fails_status(fl_optimizer_to_backend(o, "nowhere"), FL_ERR_VALUE,
                            "fl_optimizer_to_backend: no backend named 'nowhere' is registered");
        assert_string_equal(fl_backend_name(fl_v_value(params[0])), here);
        fl_optimizer_free(o);
        fl_optimizer_free(s);
    }
    assert_fails_status(fl_optimizer_to_backend(NULL, there), FL_ERR_NULL, "fl_optimizer_to_backend");
}

static void defaults_lr_and_zero_grad(void **state)
{
    fl_variable *p = fl_v_new(T_F64(FL_SHAPE(2), 1, -2), true);
    fl_optimizer *o = fl_adamw(&p, 1, NULL);
    assert_true(fl_optimizer_get_lr(o) == 1e-3);
    assert_string_equal(o->name, "adamw");
    /* A zero gradient leaves AdamW's update at 0: only the default decay, 0.01, acts. */
    fl_v_set_grad(p, T_F64(FL_SHAPE(2), 0, 0));
    assert_int_equal(fl_optimizer_step(o), FL_OK);
    assert_values(fl_v_value(p), 0, 0, 1 * (1 - 1e-3 * 1e-2), -2 * (1 - 1e-3 * 1e-2));
    fl_optimizer_zero_grad(o);
    assert_null(fl_v_grad(p));
    assert_int_equal(fl_optimizer_step(o), FL_OK); /* nothing to do */
    fl_optimizer_free(o);

    /* NULL options are PyTorch's defaults (Flashlight's betas and apex's lr for NovoGrad). */
    fl_optimizer *with_defaults[] = {fl_sgd(&p, 1, NULL),     fl_adam(&p, 1, NULL),     fl_rmsprop(&p, 1, NULL),
                                     fl_adagrad(&p, 1, NULL), fl_adadelta(&p, 1, NULL), fl_novograd(&p, 1, NULL)};
    const double default_lrs[] = {1e-3, 1e-3, 1e-2, 1e-2, 1.0, 1e-3};
    for (int i = 0; i < 6; i++) {
        assert_true(fl_optimizer_get_lr(with_defaults[i]) == default_lrs[i]);
        fl_optimizer_free(with_defaults[i]);
    }
    assert_true(isnan(fl_optimizer_get_lr(NULL)));
    assert_no_error();
}

/* ---- errors ---- */

static void construction_errors(void **state)
{
    fl_variable *p[2] = {fl_v_new(T_F64(FL_SHAPE(2), 1, 2), true), fl_v_new(T_F32(FL_SHAPE(1), 3), true)};
    assert_fails(fl_sgd(NULL, 2, NULL), FL_ERR_NULL, "fl_sgd");
    assert_fails(fl_adam(p, 0, NULL), FL_ERR_VALUE, "no parameters");
    assert_fails(fl_adamw((fl_variable *[]){p[0], NULL}, 2, NULL), FL_ERR_NULL, "parameter 1 is NULL");
    assert_fails(fl_sgd(p, 2, &(fl_sgd_options){.lr = -0.1}), FL_ERR_VALUE, "lr = -0.1");
    assert_fails(fl_sgd(p, 2, &(fl_sgd_options){.lr = NAN}), FL_ERR_VALUE, "lr = nan");
    assert_fails(fl_sgd(p, 2, &(fl_sgd_options){.lr = 0.1, .nesterov = true}), FL_ERR_VALUE, "Nesterov");
    assert_fails(fl_sgd(p, 2, &(fl_sgd_options){.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}),
                 FL_ERR_VALUE, "dampening = 0.1");
    assert_fails(fl_sgd(p, 2, &(fl_sgd_options){.lr = 0.1, .momentum = -1}), FL_ERR_VALUE, "momentum = -1");
    fl_adam_options bad_beta = FL_ADAM_DEFAULTS;
    bad_beta.beta1 = 1;
    assert_fails(fl_adam(p, 2, &bad_beta), FL_ERR_VALUE, "beta1 = 1");
    bad_beta = FL_ADAMW_DEFAULTS;
    bad_beta.weight_decay = -0.5;
    assert_fails(fl_adamw(p, 2, &bad_beta), FL_ERR_VALUE, "fl_adamw: weight_decay = -0.5");
    assert_fails(fl_rmsprop(p, 2, &(fl_rmsprop_options){.lr = 0.1, .eps = -1}), FL_ERR_VALUE, "eps = -1");
    assert_fails(fl_adagrad(p, 2, &(fl_adagrad_options){.lr = 0.1, .lr_decay = -1}), FL_ERR_VALUE, "lr_decay");
    assert_fails(fl_adadelta(p, 2, &(fl_adadelta_options){.lr = 1, .rho = 1.5}), FL_ERR_VALUE, "rho = 1.5");
    assert_fails(fl_novograd(p, 2, &(fl_novograd_options){.lr = 0.1, .beta2 = -0.1}), FL_ERR_VALUE, "beta2");
    fl_variable *integer = fl_v_new(T_I32(FL_SHAPE(2), 1, 2), false);
    assert_fails(fl_sgd(&integer, 1, NULL), FL_ERR_DTYPE, "i32[2]");
    fl_variable *computed = fl_v_add(p[0], p[0]);
    assert_fails(fl_sgd(&computed, 1, NULL), FL_ERR_VALUE, "not a leaf");
    assert_fails(fl_adam((fl_variable *[]){p[0], p[1], p[0]}, 3, &FL_ADAM_DEFAULTS), FL_ERR_VALUE,
                 "fl_adam: parameter 2 is parameter 0 listed again");
}

static void step_errors(void **state)
{
    fl_variable *p = fl_v_new(T_F64(FL_SHAPE(2), 1, 2), true);
    fl_optimizer *o = fl_sgd(&p, 1, &(fl_sgd_options){.lr = 0.5});
    assert_fails_status(fl_optimizer_step(NULL), FL_ERR_NULL, "fl_optimizer_step");
    assert_fails_status(fl_optimizer_set_lr(o, -1), FL_ERR_VALUE, "lr = -1");
    assert_fails_status(fl_optimizer_set_lr(NULL, 1), FL_ERR_NULL, "fl_optimizer_set_lr");
    assert_true(fl_optimizer_get_lr(o) == 0.5);
    /* A gradient of another shape or dtype never reaches the optimizer. */
    assert_fails_status(fl_v_set_grad(p, T_F64(FL_SHAPE(3), 1, 1, 1)), FL_ERR_SHAPE, "f64[3]");
    assert_fails_status(fl_v_set_grad(p, T_F32(FL_SHAPE(2), 1, 1)), FL_ERR_SHAPE, "f32[2]");
    assert_int_equal(fl_optimizer_step(o), FL_OK);
    assert_values(fl_v_value(p), 0, 0, 1, 2);
    assert_fails_status(fl_optimizer_state(o, NULL, ""), FL_ERR_NULL, "fl_optimizer_state");
    assert_fails_status(fl_optimizer_load_state(NULL, NULL, ""), FL_ERR_NULL, "fl_optimizer_load_state");
    fl_optimizer_free(o);
    fl_optimizer_free(NULL);
    fl_optimizer_zero_grad(NULL);
}

/* A map with one tensor under "state.<name>" beside a valid state of Adam's. */
static fl_tensor_map *adam_state_with(const char *name, fl_tensor *t)
{
    fl_tensor_map *map = fl_tensor_map_create();
    fl_tensor_map_set(map, "state.0.step", fl_scalar(2, FL_F64));
    fl_tensor_map_set(map, "state.0.exp_avg", fl_zeros(FL_F64, FL_SHAPE(3, 4)));
    fl_tensor_map_set(map, "state.0.exp_avg_sq", fl_zeros(FL_F64, FL_SHAPE(3, 4)));
    if (name)
        fl_tensor_map_set(map, name, t);
    return map;
}

static void load_state_errors(void **state)
{
    fl_variable *params[NPARAMS];
    new_params(params, FL_F64);
    fl_optimizer *o = adam(params, NPARAMS);
    for (int t = 0; t < 3; t++)
        fixture_step(o, params, t);
    struct {
        const char *name;
        fl_tensor *tensor;
        fl_status status;
        const char *message;
    } bad[] = {
        {"state.0.exp_avg", fl_zeros(FL_F64, FL_SHAPE(4, 3)), FL_ERR_SHAPE, "state.0.exp_avg is f64[4, 3]"},
        {"state.0.exp_avg_sq", fl_zeros(FL_I32, FL_SHAPE(3, 4)), FL_ERR_SHAPE, "i32[3, 4]"},
        {"state.0.momentum_buffer", fl_zeros(FL_F64, FL_SHAPE(3, 4)), FL_ERR_VALUE, "keeps no 'momentum_buffer'"},
        {"state.2.step", fl_scalar(1, FL_F64), FL_ERR_INDEX, "the adam optimizer has 2"},
        {"state.x.step", fl_scalar(1, FL_F64), FL_ERR_VALUE, "not state.<index>.<name>"},
        {"state.1.step", fl_scalar(1, FL_F64), FL_ERR_VALUE, "parameter 1 is incomplete"},
        {"state.0.step", fl_scalar(1.5, FL_F64), FL_ERR_VALUE, "step = 1.5"},
        {"state.0.step", fl_scalar(-1, FL_F64), FL_ERR_VALUE, "step = -1"},
        {"param_groups.0.lr", fl_scalar(-1, FL_F64), FL_ERR_VALUE, "param_groups.0.lr = -1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fl_tensor_map *map = adam_state_with(bad[i].name, bad[i].tensor);
        assert_fails_status(fl_optimizer_load_state(o, map, NULL), bad[i].status, bad[i].message);
        fl_tensor_map_free(map);
    }
    /* The valid map itself loads; the prefix keeps other entries out of it. */
    fl_tensor_map *map = adam_state_with("other.state.9.thing", fl_scalar(0, FL_F64));
    fl_optimizer *fresh = adam(params, NPARAMS);
    assert_int_equal(fl_optimizer_load_state(fresh, map, ""), FL_OK);
    fl_tensor_map_free(map);
    fl_optimizer_free(fresh);
    /* NovoGrad's second moment is one number per parameter tensor. */
    fl_optimizer *n = novograd(params, NPARAMS);
    map = fl_tensor_map_create();
    fl_tensor_map_set(map, "state.0.exp_avg", fl_zeros(FL_F64, FL_SHAPE(3, 4)));
    fl_tensor_map_set(map, "state.0.exp_avg_sq", fl_zeros(FL_F64, FL_SHAPE(3, 4)));
    assert_fails_status(fl_optimizer_load_state(n, map, NULL), FL_ERR_SHAPE, "it must be 0-d");
    fl_tensor_map_free(map);
    fl_optimizer_free(n);
    /* Failed loads left the state as it was: the run goes on as PyTorch's did. */
    for (int t = 3; t < STEPS; t++)
        fixture_step(o, params, t);
    for (int k = 0; k < NPARAMS; k++)
        assert_close(fl_v_value(params[k]), fx("adam_%d_%d", STEPS - 1, k), 1e-12, 1e-14);
    fl_optimizer_free(o);
    assert_no_error();
}

/* A step keeps only the new values and state: no memory grows from step to step. */
static void steps_leave_nothing_behind(void **state)
{
    fl_variable *params[NPARAMS];
    new_params(params, FL_F64);
    fl_optimizer *o = amsgrad(params, NPARAMS);
    fl_tensor *g[NPARAMS] = {fx("g0_0"), fx("g0_1")};
    fl_memory_stats before, after;
    for (int t = 0; t < 4; t++) {
        for (int k = 0; k < NPARAMS; k++)
            fl_v_set_grad(params[k], g[k]);
        fl_optimizer_step(o);
        fl_memory_stats_get(t == 2 ? &before : &after);
    }
    assert_int_equal(after.in_use, before.in_use);
    fl_optimizer_free(o);
    assert_no_error();
}

/* ---- schedules ---- */

#define EPOCHS 12

static void check_schedule(const char *name, double (*lr)(int64_t epoch), double rtol)
{
    double values[EPOCHS];
    for (int e = 0; e < EPOCHS; e++)
        values[e] = lr(e);
    fl_tensor *expected = fx("%s", name);
    assert_close(fl_from_data(values, FL_F64, FL_SHAPE(EPOCHS)), expected, rtol, 1e-16);
}

static double step_lr(int64_t e) { return fl_lr_step(0.1, e, 3, 0.5); }
static double cosine_lr(int64_t e) { return fl_lr_cosine(0.1, e, 10, 0.001); }
static double linear_lr(int64_t e) { return fl_lr_linear(0.1, e, 0.25, 0.75, 4); }
static double warmup_cosine_lr(int64_t e)
{
    fl_lr_schedule s = {.kind = FL_LR_COSINE, .t_max = 8, .warmup_iters = 3, .warmup_start_factor = 0.1};
    return fl_lr_at(&s, 0.1, e);
}
static double warmup_step_lr(int64_t e)
{
    fl_lr_schedule s = {.kind = FL_LR_STEP, .step_size = 4, .gamma = 0.1, .warmup_iters = 2};
    return fl_lr_at(&s, 0.1, e);
}
static double constant_lr(int64_t e) { return fl_lr_at(&(fl_lr_schedule){.kind = FL_LR_CONSTANT}, 0.1, e); }

static void schedules_match_pytorch(void **state)
{
    /* The closed forms are PyTorch's operation for operation. */
    check_schedule("lr_step", step_lr, 0);
    check_schedule("lr_cosine", cosine_lr, 0);
    check_schedule("lr_linear", linear_lr, 0);
    /* SequentialLR steps its schedulers recursively: rounding differs in the last bits. */
    check_schedule("lr_warmup_cosine", warmup_cosine_lr, 1e-13);
    check_schedule("lr_warmup_step", warmup_step_lr, 1e-13);
    for (int e = 0; e < EPOCHS; e++)
        assert_true(constant_lr(e) == 0.1);
    assert_no_error();
}

static void schedule_errors(void **state)
{
    assert_true(isnan(fl_lr_step(0.1, 3, 0, 0.5)));
    assert_fails_status(FL_ERR_VALUE, FL_ERR_VALUE, "fl_lr_step: step_size = 0");
    assert_true(isnan(fl_lr_cosine(0.1, -1, 10, 0)));
    assert_fails_status(FL_ERR_VALUE, FL_ERR_VALUE, "fl_lr_cosine: epoch = -1");
    assert_true(isnan(fl_lr_cosine(0.1, 1, 0, 0)));
    assert_fails_status(FL_ERR_VALUE, FL_ERR_VALUE, "t_max = 0");
    assert_true(isnan(fl_lr_linear(0.1, 1, 0, 1, 5)));
    assert_fails_status(FL_ERR_VALUE, FL_ERR_VALUE, "start_factor = 0");
    assert_true(isnan(fl_lr_linear(0.1, 1, 0.5, 1.5, 5)));
    assert_fails_status(FL_ERR_VALUE, FL_ERR_VALUE, "end_factor = 1.5");
    assert_true(isnan(fl_lr_linear(0.1, 1, 0.5, 1, 0)));
    assert_fails_status(FL_ERR_VALUE, FL_ERR_VALUE, "total_iters = 0");
    assert_true(isnan(fl_lr_at(NULL, 0.1, 1)));
    assert_fails_status(FL_ERR_NULL, FL_ERR_NULL, "fl_lr_at");
    assert_true(isnan(fl_lr_at(&(fl_lr_schedule){.kind = (fl_lr_kind)7}, 0.1, 1)));
    assert_fails_status(FL_ERR_VALUE, FL_ERR_VALUE, "unknown schedule kind 7");
    assert_true(isnan(fl_lr_at(&(fl_lr_schedule){.warmup_iters = -2}, 0.1, 1)));
    assert_fails_status(FL_ERR_VALUE, FL_ERR_VALUE, "warmup_iters = -2");
    assert_true(isnan(fl_lr_at(&(fl_lr_schedule){.kind = FL_LR_CONSTANT}, 0.1, -1)));
    assert_fails_status(FL_ERR_VALUE, FL_ERR_VALUE, "epoch = -1");
}

/* ---- clipping ---- */

static void clipping_matches_pytorch(void **state)
{
    const struct {
        const char *tag;
        double norm_type;
    } norms[] = {{"2", 2}, {"inf", INFINITY}, {"1", 1}};
    const struct {
        const char *tag;
        double max_norm;
    } limits[] = {{"clipped", 0.5}, {"unclipped", 100}};
    for (int n = 0; n < 3; n++) {
        for (int m = 0; m < 2; m++) {
            for (fl_dtype dtype = FL_F32; dtype <= FL_F64; dtype++) {
                double rtol = dtype == FL_F64 ? 1e-12 : 1e-6;
                fl_variable *params[NPARAMS + 1];
                for (int k = 0; k < NPARAMS; k++) {
                    params[k] = fl_v_new(fl_zeros_like(fl_cast(fx("g0_%d", k), dtype)), true);
                    fl_v_set_grad(params[k], fl_cast(fx("g0_%d", k), dtype));
                }
                params[NPARAMS] = fl_v_new(fl_zeros(dtype, FL_SHAPE(3)), true); /* no gradient: left out */
                double total = fl_clip_grad_norm(params, NPARAMS + 1, limits[m].max_norm, norms[n].norm_type);
                double expected = fl_item(fx("clip_%s_%s_norm", norms[n].tag, limits[m].tag));
                assert_true(fabs(total - expected) <= rtol * expected);
                for (int k = 0; k < NPARAMS; k++)
                    assert_close(fl_v_grad(params[k]), fx("clip_%s_%s_%d", norms[n].tag, limits[m].tag, k), rtol,
                                 1e-15);
                assert_null(fl_v_grad(params[NPARAMS]));
            }
        }
    }
    /* A general p-norm: (sum |g|^p)^(1/p) of everything together. */
    fl_variable *p[2] = {fl_v_new(T_F64(FL_SHAPE(2), 0, 0), true), fl_v_new(T_F64(FL_SHAPE(1), 0), true)};
    fl_v_set_grad(p[0], T_F64(FL_SHAPE(2), 1, -2));
    fl_v_set_grad(p[1], T_F64(FL_SHAPE(1), 3));
    assert_true(fabs(fl_clip_grad_norm(p, 2, 100, 3) - cbrt(36)) < 1e-14);
    assert_true(fl_clip_grad_norm(NULL, 0, 1, 2) == 0);
    assert_no_error();
}

static void clipping_errors(void **state)
{
    fl_variable *p = fl_v_new(T_F64(FL_SHAPE(2), 0, 0), true);
    fl_v_set_grad(p, T_F64(FL_SHAPE(2), 3, 4));
    assert_true(isnan(fl_clip_grad_norm(NULL, 2, 1, 2)));
    assert_fails_status(FL_ERR_NULL, FL_ERR_NULL, "fl_clip_grad_norm");
    assert_true(isnan(fl_clip_grad_norm((fl_variable *[]){p, NULL}, 2, 1, 2)));
    assert_fails_status(FL_ERR_NULL, FL_ERR_NULL, "parameter 1 is NULL");
    assert_true(isnan(fl_clip_grad_norm(&p, 1, -1, 2)));
    assert_fails_status(FL_ERR_VALUE, FL_ERR_VALUE, "max_norm = -1");
    assert_true(isnan(fl_clip_grad_norm(&p, 1, 1, 0)));
    assert_fails_status(FL_ERR_VALUE, FL_ERR_VALUE, "norm_type = 0");
    assert_true(isnan(fl_clip_grad_norm(&p, 1, 1, NAN)));
    assert_fails_status(FL_ERR_VALUE, FL_ERR_VALUE, "norm_type = nan");
    assert_values(fl_v_grad(p), 0, 0, 3, 4); /* untouched */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        scoped_test(sgd_matches_pytorch),
        scoped_test(adam_and_amsgrad_match_pytorch),
        scoped_test(adamw_matches_pytorch),
        scoped_test(rmsprop_matches_pytorch),
        scoped_test(adagrad_matches_pytorch),
        scoped_test(adadelta_matches_pytorch),
        scoped_test(novograd_matches_flashlight_formula),
        scoped_test(state_has_pytorch_names_and_values),
        scoped_test(resuming_from_saved_state_is_exact),
        scoped_test(sgd_in_place_matches_the_composition),
        scoped_test(sgd_never_writes_what_others_hold),
        scoped_test(adam_in_place_matches_the_composition),
        scoped_test(adam_never_writes_what_others_hold),
        scoped_test(moving_to_another_backend_and_back),
        scoped_test(defaults_lr_and_zero_grad),
        scoped_test(construction_errors),
        scoped_test(step_errors),
        scoped_test(load_state_errors),
        scoped_test(steps_leave_nothing_behind),
        scoped_test(schedules_match_pytorch),
        scoped_test(schedule_errors),
        scoped_test(clipping_matches_pytorch),
        scoped_test(clipping_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
