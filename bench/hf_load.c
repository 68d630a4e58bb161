/*
 * Loading a Hugging Face checkpoint directory (config.json and model.safetensors) into
 * Flare's model: one call of hf_load_gpt2 or hf_load_bert (models/hf.c, hf_bert.c),
 * timed, in a process that does nothing else.
 *
 *     bench_hf_load --dir DIR --arch gpt2|bert [--threads T]
 *
 * Prints one JSON line: the load's seconds, the process's peak resident memory in MiB
 * (VmHWM: what the load allocated and touched, the program's own few MiB included) and
 * the model's parameters. One load per process, since a second would find the
 * allocator's cache warm.
 * bench/run_hf_load.py runs it alternately with transformers' from_pretrained.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "flare/config.h"
#include "flare/nn.h"
#include "flare/tensor.h"
#include "flare/tensor_map.h"
#include "cli.h"
#include "models.h"
#include "timing.h"

/* The process's peak resident memory in MiB (VmHWM of /proc/self/status, which exec
 * starts afresh, where getrusage's ru_maxrss can carry a parent's), or -1. */
static double peak_rss_mib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %lf kB", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib < 0 ? -1 : kib / 1024.0;
}

int main(int argc, char **argv)
{
    enum { DIR_ = 256, ARCH, THREADS };
    static const struct option long_options[] = {
        {"dir", required_argument, NULL, DIR_},
        {"arch", required_argument, NULL, ARCH},
        {"threads", required_argument, NULL, THREADS},
        {0},
    };
    cli c = {.program = "bench_hf_load",
             .usage = "bench_hf_load --dir DIR --arch gpt2|bert [--threads T]",
             .options = long_options};
    const char *dir = NULL, *arch = NULL;
    int threads = 0;
    for (int key; (key = cli_next(&c, argc, argv)) != -1;)
        switch (key) {
        case DIR_: dir = optarg; break;
        case ARCH: arch = optarg; break;
        case THREADS: threads = (int)cli_integer(&c, 1, 1024); break;
        }
    if (!dir || !arch || (strcmp(arch, "gpt2") != 0 && strcmp(arch, "bert") != 0))
        cli_fail(&c, "needs --dir DIR and --arch gpt2 or bert");
    if (threads)
        fl_set_num_threads(threads);

    fl_module *model = NULL;
    double start = bench_now();
    fl_status status = strcmp(arch, "gpt2") == 0 ? hf_load_gpt2(dir, &model, NULL) : hf_load_bert(dir, &model, NULL);
    double seconds = bench_now() - start;
    if (status != FL_OK) {
        fprintf(stderr, "bench_hf_load: %s\n", fl_last_error());
        return 1;
    }
    fl_tensor_map *state = fl_tensor_map_create();
    int64_t parameters = 0;
    if (!state || fl_module_state_dict(model, state) != FL_OK) {
        fprintf(stderr, "bench_hf_load: %s\n", fl_last_error());
        return 1;
    }
    for (size_t i = 0; i < fl_tensor_map_count(state); i++)
        parameters += fl_numel(fl_tensor_map_tensor_at(state, i));
    fl_tensor_map_free(state);
    fl_module_release(model);
    printf("{\"seconds\": %.4f, \"peak_rss_mib\": %.1f, \"parameters\": %" PRId64 "}\n", seconds, peak_rss_mib(),
           parameters);
    return 0;
}
