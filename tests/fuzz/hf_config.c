/* hf_load_gpt2 and hf_load_bert on any bytes as a checkpoint directory's config.json,
 * beside the model.safetensors of the tiny GPT-2 and BERT fixtures (tests/fixtures;
 * RoBERTa's names are BERT's, so a "roberta" configuration loads BERT's weights):
 * jansson, then each key Flare reads or refuses, the parameter count against the
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

/* Two checkpoint directories of this process, each holding links to a fixture's
 * weights and to the scratch file (fuzz_file) as its config.json; removed at exit. */
static char dirs[2][4096], configs[2][4200], weights[2][4200];

static void remove_dirs(void)
{
    for (int i = 0; i < 2; i++) {
        unlink(configs[i]);
        unlink(weights[i]);
        rmdir(dirs[i]);
    }
}

static void make_dirs(void)
{
    static const char *const fixture[2] = {FLARE_FIXTURES "/hf_gpt2/model.safetensors",
                                           FLARE_FIXTURES "/hf_bert/model.safetensors"};
    for (int i = 0; i < 2; i++) {
        snprintf(dirs[i], sizeof dirs[i], "%s.%s", fuzz_path(1), i ? "bert" : "gpt2");
        snprintf(configs[i], sizeof configs[i], "%s/config.json", dirs[i]);
        snprintf(weights[i], sizeof weights[i], "%s/model.safetensors", dirs[i]);
        if (mkdir(dirs[i], 0700) != 0 || symlink(fixture[i], weights[i]) != 0 ||
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
    fuzz_file(data, size); /* both directories' config.json */

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

    fl_module *bert;
    status = hf_load_bert(dirs[1], &bert, NULL);
    fuzz_check_error(status != FL_OK);
    if (status == FL_OK) {
        fl_scope scope = fl_scope_begin();
        if (!hf_bert_forward(bert, tokens(), NULL, NULL)) {
            fprintf(stderr, "a BERT configuration loaded but its model failed: %s\n", fl_last_error());
            abort();
        }
        fl_scope_end(scope);
        fl_module_release(bert);
    }
    return 0;
}
