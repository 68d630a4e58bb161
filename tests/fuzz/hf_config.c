/* hf_load_gpt2 and hf_load_bert on any bytes as a checkpoint directory's config.json,
 * beside the model.safetensors of the tiny GPT-2, BERT, DistilBERT, ALBERT and ELECTRA
 * fixtures (tests/fixtures; RoBERTa's names are BERT's, so a "roberta" configuration
 * loads BERT's weights): jansson, then each key Flare reads or refuses, the parameter count against the
 * weights, and the names and shapes of every tensor. A configuration that loads is one
 * of the fixture's shapes, so its model runs a forward on fixed token ids, which may
 * not fail. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flare/autograd.h"
#include "flare/nn.h"
#include "fuzz.h"
#include "models.h"

#ifndef FLARE_FIXTURES
#error "FLARE_FIXTURES names the directory of the test fixtures"
#endif

/* Five checkpoint directories of this process, each holding links to a fixture's
 * weights and to the scratch file (fuzz_file) as its config.json; removed at exit. */
#define DIRS 5
static const char *const fixture_names[DIRS] = {"hf_gpt2", "hf_bert", "hf_distilbert", "hf_albert", "hf_electra"};
static char dirs[DIRS][4096], configs[DIRS][4200], weights[DIRS][4200];

static void remove_dirs(void)
{
    for (int i = 0; i < DIRS; i++) {
        unlink(configs[i]);
        unlink(weights[i]);
        rmdir(dirs[i]);
    }
}

static void make_dirs(void)
{
    for (int i = 0; i < DIRS; i++) {
        char fixture[4200];
        snprintf(fixture, sizeof fixture, "%s/%s/model.safetensors", FLARE_FIXTURES, fixture_names[i]);
        snprintf(dirs[i], sizeof dirs[i], "%s.%s", fuzz_path(1), fixture_names[i]);
        snprintf(configs[i], sizeof configs[i], "%.4000s/config.json", dirs[i]);
        snprintf(weights[i], sizeof weights[i], "%.4000s/model.safetensors", dirs[i]);
        if (mkdir(dirs[i], 0700) != 0 || symlink(fixture, weights[i]) != 0 ||
            symlink(fuzz_path(0), configs[i]) != 0) {
            perror(dirs[i]);
            abort();
        }
    }
    atexit(remove_dirs);
}

/* Token ids [1, 3] that every fixture-shaped model takes. */
static fl_tensor *tokens(void)
{
    static const int64_t ids[3] = {1, 2, 3};
    return fl_from_data(ids, FL_I64, 2, (const int64_t[]){1, 3});
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_setup();
    static int made;
    if (!made++)
        make_dirs();
    fuzz_file(data, size); /* every directory's config.json */

    fl_module *gpt;
    fl_status status = hf_load_gpt2(dirs[0], &gpt, NULL);
    fuzz_check_error(status != FL_OK);
    if (status == FL_OK) {
        fl_scope scope = fl_scope_begin();
        if (!fl_module_forward(gpt, fl_v_new(tokens(), false))) {
            fprintf(stderr, "a GPT-2 configuration loaded but its model failed: %s\n", fl_last_error());
            abort();
        }
        fl_scope_end(scope);
        fl_module_release(gpt);
    }

    for (int i = 1; i < DIRS; i++) {
        fl_module *bert;
        status = hf_load_bert(dirs[i], &bert, NULL);
        fuzz_check_error(status != FL_OK);
        if (status == FL_OK) {
            fl_scope scope = fl_scope_begin();
            if (!hf_bert_forward(bert, tokens(), NULL, NULL)) {
                fprintf(stderr, "a configuration loaded beside %s but its model failed: %s\n", fixture_names[i],
                        fl_last_error());
                abort();
            }
            fl_scope_end(scope);
            fl_module_release(bert);
        }
    }
    return 0;
}
