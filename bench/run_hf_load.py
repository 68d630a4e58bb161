"""Loads Hugging Face checkpoints side by side: Flare (bench/hf_load.c, built as
build/bench_hf_load: hf_load_gpt2 or hf_load_bert) and transformers'
from_pretrained, at the same thread count, and prints the load's seconds and each
process's peak resident memory, with the ratio of load times Flare / transformers
(below 1 means Flare is faster).

    python bench/run_hf_load.py [--flare build/bench_hf_load] [--dir build/hf_load]
                                [--repeats 5] [--threads 2] [--out build/bench-hf-load.json]

The checkpoints are GPT-2 small's and bert-base's shapes (124M and 109M parameters),
randomly initialized by transformers from a fixed seed and saved with save_pretrained
under --dir the first time (about 1 GB). Every load runs in a fresh process, --repeats
rounds alternating which side goes first, and the medians are kept. transformers' memory
includes what importing torch and transformers takes, which the table shows apart.
"""

import argparse
import statistics
import sys
from pathlib import Path

from run_generate import run_json
from run_ops import benchmark_environment, machine_name, write_report

MODELS = {"gpt2": "GPT2LMHeadModel", "bert": "BertModel"}

# Peak resident memory from VmHWM, which exec starts afresh (getrusage's ru_maxrss
# carries the parent's, this script's, into the child).
TORCH_LOAD = """
import json, re, sys, time
import torch, transformers
def peak():
    return int(re.search(r"VmHWM:\\s*(\\d+)", open("/proc/self/status").read()).group(1)) / 1024
torch.set_num_threads(int(sys.argv[3]))
imported = peak()
start = time.perf_counter()
getattr(transformers, sys.argv[2]).from_pretrained(sys.argv[1])
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "import_rss_mib": imported, "peak_rss_mib": peak()}))
"""


def write_checkpoints(root):
    """GPT-2 small's and bert-base's shapes, random from seed 0, under root/<arch>."""
    import torch
    import transformers
    for arch, cls in MODELS.items():
        target = root / arch
        if (target / "model.safetensors").exists():
            continue
        torch.manual_seed(0)
        config = transformers.GPT2Config() if arch == "gpt2" else transformers.BertConfig()
        getattr(transformers, cls)(config).save_pretrained(target)


def load(command, env, label):
    """One load's JSON line; the run stops at the first failure."""
    result = run_json(command, env, label)
    if "error" in result:
        sys.exit(result["error"])
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flare", default="build/bench_hf_load")
    parser.add_argument("--dir", default="build/hf_load")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="build/bench-hf-load.json")
    args = parser.parse_args()
    import torch
    import transformers
    root = Path(args.dir)
    write_checkpoints(root)
    env = benchmark_environment(args.threads)
    rows = []
    for arch, cls in MODELS.items():
        runs = {"flare": [], "torch": []}
        for round_ in range(args.repeats):
            sides = ["flare", "torch"] if round_ % 2 == 0 else ["torch", "flare"]
            for side in sides:
                if side == "flare":
                    command = [args.flare, "--dir", str(root / arch), "--arch", arch, "--threads", str(args.threads)]
                else:
                    command = [sys.executable, "-c", TORCH_LOAD, str(root / arch), cls, str(args.threads)]
                runs[side].append(load(command, env, f"{side} {arch}"))
        median = {side: {key: statistics.median(r[key] for r in runs[side]) for key in runs[side][0]}
                  for side in runs}
        rows.append({"model": arch, "parameters": runs["flare"][0]["parameters"], "flare": median["flare"],
                     "torch": median["torch"], "ratio": median["flare"]["seconds"] / median["torch"]["seconds"],
                     "runs": runs})
    print(f"Loading a checkpoint, {args.threads} threads, PyTorch {torch.__version__}, "
          f"transformers {transformers.__version__}, {machine_name()}")
    print(f"{'model':<6} {'parameters':>12} {'Flare s':>8} {'transformers s':>15} {'ratio':>6} "
          f"{'Flare MiB':>10} {'transformers MiB':>17} {'(imports)':>10}")
    for r in rows:
        print(f"{r['model']:<6} {r['parameters']:>12,} {r['flare']['seconds']:>8.3f} {r['torch']['seconds']:>15.3f} "
              f"{r['ratio']:>6.2f} {r['flare']['peak_rss_mib']:>10.0f} {r['torch']['peak_rss_mib']:>17.0f} "
              f"{r['torch']['import_rss_mib']:>10.0f}")
    write_report({"threads": args.threads, "torch": torch.__version__, "transformers": transformers.__version__,
                  "machine": machine_name(), "models": rows}, args.out)
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
