/*
 * The Flashlight paper's end-to-end example (section A.4.3) in Flare: the CNN of
 * Listing 8 (mnist_cnn, models/mnist.c), trained with SGD by the loop of Listing 9 and evaluated as in Listings 10
 * and 11, on Fashion-MNIST from Debian's dataset-fashion-mnist package by default, or
 * on MNIST given a folder of its IDX files.
 *
 *     mnist [--data DIR] [--epochs N] [--batch B] [--lr LR] [--momentum M] [--seed S]
 *           [--threads T] [--workers W] [--train-limit N] [--json FILE]
 *           [--save FILE] [--save-weights FILE] [--load FILE] [--eval-only] [--no-eval] [--quiet]
 *           [--distributed] [--stop-after N] [--backend NAME]
 *
 * As in Listing 7, the first 5000 training images are held out for validation. The
 * learning rate follows a cosine from --lr to 0 over the run's steps.
 * --save writes a checkpoint after every epoch (model, optimizer, generator and epoch,
 * atomically); --save-weights writes the model's weights alone after every epoch, a
 * state dict that PyTorch's strict load_state_dict takes as it is; --load resumes from
 * a checkpoint, continuing exactly as if the run had not stopped; --eval-only
 * evaluates on the test set the weights of a checkpoint, of a weights file or of a
 * PyTorch state dict saved with safetensors.torch.save_file. --stop-after N
 * ends the run after epoch N of --epochs, as an interruption would (for resuming).
 * --backend NAME trains on that backend (FLARE_BACKEND's default otherwise); a
 * checkpoint saved on one backend resumes on another.
 *
 * --distributed trains data-parallel under mpirun (include/flare/distributed.h): each
 * of the R ranks takes its part of every shuffled epoch in batches of B (so R x B
 * images per step), gradients are averaged across ranks, meters summed across ranks,
 * and only rank 0 prints and writes files.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "flare/autograd.h"
#include "flare/backend.h"
#include "flare/data.h"
#include "flare/distributed.h"
#include "flare/io.h"
#include "flare/meter.h"
#include "flare/nn.h"
#include "flare/optim.h"
#include "flare/tensor.h"
#include "cli.h"
#include "models.h"
#include "output.h"

#define VALIDATION_SIZE 5000
#define EVAL_BATCH 256

typedef struct options {
    const char *data, *json, *save, *save_weights, *load, *losses;
    int epochs, stop_after, threads, workers;
    int64_t batch, train_limit;
    double lr, momentum;
    uint64_t seed;
    bool eval_only, no_eval, quiet, distributed;
} options;

static void parse_args(int argc, char **argv, options *o)
{
    *o = (options){.data = FL_FASHION_MNIST_DIR, .epochs = 5, .batch = 64, .lr = 0.05, .momentum = 0.9,
                   .seed = 1, .threads = 0, .workers = 1};
    enum { EPOCHS = 256, STOP_AFTER, BATCH, LR, MOMENTUM, SEED, THREADS, WORKERS, TRAIN_LIMIT, DATA, JSON, SAVE, LOAD,
           SAVE_WEIGHTS, EVAL_ONLY, NO_EVAL, QUIET, DISTRIBUTED, BACKEND, LOSSES };
    static const struct option long_options[] = {
        {"epochs", required_argument, NULL, EPOCHS},
        {"stop-after", required_argument, NULL, STOP_AFTER},
        {"batch", required_argument, NULL, BATCH},
        {"lr", required_argument, NULL, LR},
        {"momentum", required_argument, NULL, MOMENTUM},
        {"seed", required_argument, NULL, SEED},
        {"threads", required_argument, NULL, THREADS},
        {"workers", required_argument, NULL, WORKERS},
        {"train-limit", required_argument, NULL, TRAIN_LIMIT},
        {"data", required_argument, NULL, DATA},
        {"json", required_argument, NULL, JSON},
        {"save", required_argument, NULL, SAVE},
        {"save-weights", required_argument, NULL, SAVE_WEIGHTS},
        {"load", required_argument, NULL, LOAD},
        {"eval-only", no_argument, NULL, EVAL_ONLY},
        {"no-eval", no_argument, NULL, NO_EVAL},
        {"quiet", no_argument, NULL, QUIET},
        {"distributed", no_argument, NULL, DISTRIBUTED},
        {"backend", required_argument, NULL, BACKEND},
        {"losses", required_argument, NULL, LOSSES},
        {0},
    };
    cli c = {.program = "mnist",
             .usage = "mnist [--data DIR] [--epochs N] [--batch B] [--lr LR] [--momentum M] [--seed S]\n"
                      "             [--threads T] [--workers W] [--train-limit N] [--json FILE]\n"
                      "             [--save FILE] [--save-weights FILE] [--load FILE] [--eval-only] [--no-eval]\n"
                      "             [--quiet] [--distributed] [--stop-after N] [--backend NAME] [--losses FILE]\n"
                      "       --losses FILE writes each training step's loss, one per line\n"
                      "       " CLI_BACKEND_HELP,
             .options = long_options};
    for (int key; (key = cli_next(&c, argc, argv)) != -1;)
        switch (key) {
        case EPOCHS: o->epochs = (int)cli_integer(&c, 0, 1000); break;
        case STOP_AFTER: o->stop_after = (int)cli_integer(&c, 1, 1000); break;
        case BATCH: o->batch = cli_integer(&c, 1, 1 << 20); break;
        case LR: o->lr = cli_number(&c, 0, 100); break;
        case MOMENTUM: o->momentum = cli_number(&c, 0, 1); break;
        case SEED: o->seed = (uint64_t)cli_integer(&c, 0, (long long)1e15); break;
        case THREADS: o->threads = (int)cli_integer(&c, 1, 1024); break;
        case WORKERS: o->workers = (int)cli_integer(&c, 0, 64); break;
        case TRAIN_LIMIT: o->train_limit = cli_integer(&c, 1, (long long)1e9); break;
        case DATA: o->data = optarg; break;
        case JSON: o->json = optarg; break;
        case SAVE: o->save = optarg; break;
        case SAVE_WEIGHTS: o->save_weights = optarg; break;
        case LOAD: o->load = optarg; break;
        case EVAL_ONLY: o->eval_only = true; break;
        case NO_EVAL: o->no_eval = true; break;
        case QUIET: o->quiet = true; break;
        case DISTRIBUTED: o->distributed = true; break;
        case BACKEND: cli_backend(&c); break;
        case LOSSES: o->losses = optarg; break;
        }
    if (o->eval_only && !o->load)
        cli_fail(&c, "--eval-only evaluates a checkpoint given with --load");
}

/* ---- data (Listing 7) ---- */

/* Images as f32 [N, 1, 28, 28] in [0, 1] and labels as i64 [N], owned by the caller. */
static fl_status load_split(const char *dir, bool train, fl_tensor **images, fl_tensor **labels)
{
    fl_tensor *raw_images, *raw_labels;
    fl_status status = fl_load_mnist(dir, train, &raw_images, &raw_labels);
    if (status != FL_OK)
        return status;
    fl_scope scope = fl_scope_begin();
    fl_tensor *x = fl_div_scalar(fl_cast(raw_images, FL_F32), 255.0);
    *images = fl_keep(fl_unsqueeze(x, 1));
    *labels = fl_keep(fl_cast(raw_labels, FL_I64));
    fl_scope_end(scope);
    fl_release(raw_images);
    fl_release(raw_labels);
    return *images && *labels ? FL_OK : fl_last_status();
}

/* This rank's part of images [start, start + count), in batches. */
static fl_dataset *batches(fl_tensor *images, fl_tensor *labels, int64_t start, int64_t count, int64_t batch)
{
    fl_dataset *all = fl_tensor_dataset((fl_tensor *[]){images, labels}, 2);
    fl_dataset *part = fl_partition_dataset(fl_span_dataset(all, start, count), fl_distributed_rank(),
                                            fl_distributed_size());
    return fl_batch_dataset(part, batch, false, NULL, NULL);
}

/* ---- evaluation (Listings 10 and 11) ---- */

typedef struct evaluation {
    double loss, error;
} evaluation;

static fl_status evaluate(fl_module *model, fl_dataset *data, evaluation *out)
{
    fl_average_meter loss = {0};
    fl_frame_error_meter error = {0};
    fl_module_train(model, false);
    bool was = fl_set_grad_enabled(false);
    fl_status status = FL_OK;
    for (int64_t b = 0; status == FL_OK && b < fl_dataset_size(data); b++) {
        fl_scope scope = fl_scope_begin();
        fl_sample s;
        status = fl_dataset_get(data, b, &s);
        if (status == FL_OK) {
            fl_variable *output = fl_module_forward(model, fl_v_new(s.fields[0], false));
            fl_variable *l = fl_nn_nll_loss(output, s.fields[1], NULL);
            fl_tensor *predictions = fl_argmax(fl_v_value(output), 1, false);
            status = l && predictions ? fl_frame_error_meter_add(&error, predictions, s.fields[1]) : fl_last_status();
            fl_average_meter_add(&loss, fl_item(fl_v_value(l)), (double)fl_dim(s.fields[1], 0));
        }
        fl_scope_end(scope);
    }
    fl_set_grad_enabled(was);
    fl_module_train(model, true);
    if (status == FL_OK)
        status = fl_average_meter_all_reduce(&loss);
    if (status == FL_OK)
        status = fl_frame_error_meter_all_reduce(&error);
    *out = (evaluation){fl_average_meter_value(&loss), fl_frame_error_meter_value(&error)};
    return status;
}

/* ---- progress and results ---- */

typedef struct epoch_result {
    double seconds, train_loss, images_per_second;
    evaluation validation;
} epoch_result;

/* Writes the metrics as JSON, atomically (output.h). */
static int write_json(const options *o, const epoch_result *epochs, int first, int count, const evaluation *test)
{
    output_file out;
    if (!output_open(&out, "mnist", o->json))
        return 1;
    FILE *f = out.f;
    fprintf(f, "{\n  \"data\": \"%s\",\n  \"backend\": \"%s\",\n  \"batch\": %" PRId64
               ",\n  \"threads\": %d,\n  \"epochs\": [",
            o->data, fl_default_backend()->name, o->batch, fl_num_threads());
    for (int e = 0; e < count; e++) {
        const epoch_result *r = &epochs[e];
        fprintf(f, "%s\n    {\"epoch\": %d, \"seconds\": %.4f, \"train_loss\": %.6f, \"images_per_second\": %.1f", e ? "," : "",
                first + e + 1, r->seconds, r->train_loss, r->images_per_second);
        if (!o->no_eval)
            fprintf(f, ", \"val_loss\": %.6f, \"val_error\": %.4f", r->validation.loss, r->validation.error);
        fputc('}', f);
    }
    fprintf(f, "\n  ]");
    if (test)
        fprintf(f, ",\n  \"test_loss\": %.6f,\n  \"test_error\": %.4f", test->loss, test->error);
    fprintf(f, "\n}\n");
    return output_close(&out, true);
}

static int fail(const char *what)
{
    fprintf(stderr, "mnist: %s: %s\n", what, fl_last_error());
    return 1;
}

/* The epoch a checkpoint was saved after: digits only, at most the run's epochs (a
 * later one would index past the results). A checkpoint without one starts at 0. */
static bool parse_epoch(const char *text, int epochs, int *epoch)
{
    *epoch = 0;
    if (!text)
        return true;
    if (!*text)
        return false;
    for (const char *c = text; *c; c++)
        if (*c < '0' || *c > '9' || (*epoch = *epoch * 10 + (*c - '0')) > epochs)
            return false;
    return true;
}

int main(int argc, char **argv)
{
    options o;
    parse_args(argc, argv, &o);
    if (o.threads)
        fl_set_num_threads(o.threads);
    if (o.distributed && fl_distributed_init(NULL) != FL_OK)
        return fail("starting the distributed job");
    /* Only rank 0 speaks and writes. */
    bool leader = fl_distributed_rank() == 0;
    if (!leader) {
        o.quiet = true;
        o.json = o.save = o.save_weights = o.losses = NULL;
    }
    fl_manual_seed(o.seed);

    /* Every exit past this point goes through done, which releases what was made. */
    int status = 0, done = 0, first_epoch = 0;
    fl_tensor *images = NULL, *labels = NULL, *test_images = NULL, *test_labels = NULL;
    fl_dataset *train = NULL, *validation = NULL, *test = NULL;
    fl_module *model = NULL;
    fl_parameters *params = NULL;
    fl_optimizer *opt = NULL;
    fl_data_parallel *dp = NULL;
    epoch_result *results = NULL;
    /* Written to a temporary, renamed when the run ends well. */
    output_file losses_file = {0};
    FILE *losses = NULL;
    if (o.losses) {
        if (!output_open(&losses_file, "mnist", o.losses)) {
            status = 1;
            goto finish;
        }
        losses = losses_file.f;
    }
    if (load_split(o.data, true, &images, &labels) != FL_OK || load_split(o.data, false, &test_images, &test_labels)) {
        status = fail("loading the dataset");
        goto finish;
    }
    int64_t train_count = fl_dim(images, 0) - VALIDATION_SIZE;
    if (o.train_limit && o.train_limit < train_count)
        train_count = o.train_limit;
    /* Shuffled every epoch from (seed, epoch), so a resumed run sees the same batches;
     * the same permutation on every rank, which then takes its part. */
    fl_dataset *shuffled = fl_shuffle_dataset(
        fl_span_dataset(fl_tensor_dataset((fl_tensor *[]){images, labels}, 2), VALIDATION_SIZE, train_count), o.seed);
    train = fl_batch_dataset(fl_partition_dataset(shuffled, fl_distributed_rank(), fl_distributed_size()),
                                         o.batch, false, NULL, NULL);
    if (train && o.workers)
        train = fl_prefetch_dataset(train, o.workers, 0);
    validation = batches(images, labels, 0, VALIDATION_SIZE, EVAL_BATCH);
    test = batches(test_images, test_labels, 0, fl_dim(test_images, 0), EVAL_BATCH);
    model = mnist_cnn();
    params = model ? fl_module_parameters(model) : NULL;
    opt = params ? fl_sgd(params->items, params->count, &(fl_sgd_options){.lr = o.lr, .momentum = o.momentum}) : NULL;
    results = calloc((size_t)(o.epochs > 0 ? o.epochs : 1), sizeof *results);
    if (!train || !validation || !test || !opt || !results) {
        status = fail("setting up");
        goto finish;
    }
    if (!o.quiet)
        printf("Fashion-MNIST CNN (the paper's Listing 8): %" PRId64 " parameters; %" PRId64
               " training images, batch %" PRId64 " x %d process%s, %d threads each, on the %s backend\n",
               fl_module_parameter_count(model), train_count, o.batch, fl_distributed_size(),
               fl_distributed_size() > 1 ? "es" : "", fl_num_threads(), fl_default_backend()->name);

    if (o.load) {
        fl_tensor_map *file = NULL;
        if (fl_checkpoint_load(o.load, model, o.eval_only ? NULL : opt, &file) != FL_OK) {
            status = fail("loading the checkpoint");
            goto finish;
        }
        const char *epoch = fl_tensor_map_metadata(file, "epoch");
        if (!parse_epoch(epoch, o.epochs, &first_epoch)) {
            fprintf(stderr, "mnist: %s: its metadata's epoch '%.40s' is not a number of epochs from 0 to %d\n", o.load,
                    epoch, o.epochs);
            status = 1;
        }
        fl_tensor_map_free(file);
        if (status)
            goto finish;
        if (!o.quiet)
            printf("resumed from %s after epoch %d\n", o.load, first_epoch);
    }
    /* After loading, so that rank 0's weights are the ones every rank starts from. */
    dp = fl_data_parallel_new(model, 0);
    if (!dp) {
        status = fail("setting up data-parallel training");
        goto finish;
    }

    int last_epoch = o.stop_after && o.stop_after < o.epochs ? o.stop_after : o.epochs;
    for (int epoch = first_epoch; !o.eval_only && epoch < last_epoch && status == 0; epoch++, done++) {
        fl_dataset_set_epoch(train, epoch);
        fl_average_meter train_loss = {0};
        fl_timer_meter timer = {0};
        fl_timer_meter_start(&timer);
        int64_t count = fl_dataset_size(train);
        for (int64_t b = 0; b < count && status == 0; b++) {
            /* Cosine annealing of the learning rate over all the run's steps. */
            fl_optimizer_set_lr(opt, fl_lr_cosine(o.lr, (int64_t)epoch * count + b, (int64_t)o.epochs * count, 0));
            fl_scope scope = fl_scope_begin();
            fl_sample s;
            if (fl_dataset_get(train, b, &s) != FL_OK) {
                status = fail("reading a batch");
            } else {
                fl_variable *output = fl_module_forward(model, fl_v_new(s.fields[0], false));
                fl_variable *loss = fl_nn_nll_loss(output, s.fields[1], NULL);
                if (!loss || fl_v_backward(loss, NULL, false) != FL_OK || fl_data_parallel_sync(dp) != FL_OK ||
                    fl_optimizer_step(opt) != FL_OK)
                    status = fail("training");
                fl_optimizer_zero_grad(opt);
                int64_t n = fl_dim(s.fields[0], 0);
                double value = fl_item(fl_v_value(loss));
                fl_average_meter_add(&train_loss, value, (double)n);
                if (losses)
                    fprintf(losses, "%.9g\n", value);
                fl_timer_meter_add_samples(&timer, n);
                if (!o.quiet)
                    output_progress(epoch + 1, b + 1, count, fl_average_meter_value(&train_loss),
                                    1.0 / fl_timer_meter_per_sample(&timer), "images");
            }
            fl_scope_end(scope);
        }
        fl_timer_meter_stop(&timer);
        if (status == 0 && fl_average_meter_all_reduce(&train_loss) != FL_OK)
            status = fail("reducing the training loss");
        epoch_result *r = &results[done];
        r->seconds = fl_timer_meter_value(&timer);
        r->train_loss = fl_average_meter_value(&train_loss);
        r->images_per_second = fl_distributed_size() / fl_timer_meter_per_sample(&timer);
        if (status == 0 && !o.no_eval && evaluate(model, validation, &r->validation) != FL_OK)
            status = fail("validating");
        if (status == 0 && !o.quiet) {
            printf("epoch %d: %.1f s (%.0f images/s), train loss %.4f", epoch + 1, r->seconds, r->images_per_second,
                   r->train_loss);
            if (!o.no_eval)
                printf(", validation loss %.4f, error %.2f%%", r->validation.loss, r->validation.error);
            printf("\n");
            fflush(stdout);
        }
        char epoch_text[16];
        snprintf(epoch_text, sizeof epoch_text, "%d", epoch + 1);
        const char *metadata[] = {"epoch", epoch_text, NULL};
        if (status == 0 && o.save && fl_checkpoint_save(o.save, model, opt, metadata) != FL_OK)
            status = fail("saving the checkpoint");
        /* The weights alone, for PyTorch's strict load_state_dict. */
        if (status == 0 && o.save_weights && fl_save_weights(o.save_weights, model, metadata) != FL_OK)
            status = fail("saving the weights");
    }

    evaluation test_result = {0};
    bool tested = status == 0 && !o.no_eval;
    if (tested) {
        if (evaluate(model, test, &test_result) != FL_OK)
            status = fail("testing");
        else if (leader)
            printf("test loss %.4f, error %.2f%% (accuracy %.2f%%)\n", test_result.loss, test_result.error,
                   100.0 - test_result.error);
    }
    if (status == 0 && o.json)
        status = write_json(&o, results, first_epoch, done, tested ? &test_result : NULL);

finish:
    if (losses && output_close(&losses_file, status == 0))
        status = 1;
    free(results);
    fl_data_parallel_free(dp);
    fl_optimizer_free(opt);
    fl_parameters_free(params);
    fl_module_release(model);
    fl_dataset_release(train);
    fl_dataset_release(validation);
    fl_dataset_release(test);
    fl_release(images);
    fl_release(labels);
    fl_release(test_images);
    fl_release(test_labels);
    fl_distributed_shutdown();
    return status;
}
