"""Runs the lazy-backend benchmark side by side: Flare's cpu and lazy backends
(bench/lazy.c, built as bench_lazy) and PyTorch eager (bench/lazy_torch.py), all at
the same thread count, for several rounds alternating which program goes first, and
writes the median of the rounds as rows of build/bench-ops.json's form with a column
per backend, plus the lazy backend's memory traffic fused and unfused.

Then the training steps of the BERT-like and ViT models (apps/benchmark, the same
model code on both Flare backends, and bench/torch/harness.py): each round runs Flare
(one process training a copy of the model on each backend, step for step) and
PyTorch, in an order that alternates from round to round; a side reports the median
of its timed iterations, and a row keeps the median of the rounds and, pooled over
the rounds, the cpu/lazy ratio of every pair of steps.

    python bench/run_lazy.py --flare build/bench_lazy [--benchmark build/benchmark] [--threads 2]
                             [--rounds 3] [--models "bert vit"] [--model-rounds 3] [--model-iters 8] [--model-warmup 2]
                             [--no-torch-models] [--out FILE]
"""

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from run_ops import benchmark_environment, machine_name, write_report

HERE = Path(__file__).resolve().parent


def run(command, env):
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def model_rows(args, env):
    """Seconds per training step of each model on Flare's cpu and lazy backends (and
    PyTorch), one row per model. Flare trains the model on both backends in one process,
    step for step (benchmark --against), so that the ratio of each pair of steps is
    taken under the same load: on a shared machine the load drifts between processes by
    more than the few percent the backends differ by."""
    common = ["--size", "cpu", "--iters", str(args.model_iters), "--warmup", str(args.model_warmup),
              "--threads", str(args.threads)]
    # The GFLOP/s fraction is not reported here, so the sgemm peak is not measured.
    sides = [("flare", [args.benchmark, "--json", "--peak-gflops", "1", "--against", "lazy"] + common)]
    if not args.no_torch_models:
        sides.append(("torch", [sys.executable, str(HERE / "torch" / "harness.py")] + common))
    flare_env = dict(env, FLARE_BACKEND="cpu")
    rows = []
    for name in args.models.split():
        seconds = {"cpu": [], "lazy": [], "torch": []}
        ratios = []
        for round_ in range(args.model_rounds):
            shift = round_ % len(sides)
            for side, command in sides[shift:] + sides[:shift]:
                results = run(command + ["--model", name], flare_env if side == "flare" else env)
                if side == "torch":
                    seconds["torch"].append(results[-1]["seconds"])
                    continue
                for result in results:
                    if "pair" in result:
                        ratios += result["ratios"]
                    else:
                        seconds[result["backend"]].append(result["seconds"])
        row = {"name": f"{name} training step", "model": name, "iters": args.model_iters,
               "rounds": args.model_rounds}
        for side, values in seconds.items():
            if values:
                row[f"{side}_s"] = statistics.median(values)
                row[f"{side}_rounds_s"] = values
        row["cpu_over_lazy"] = row["cpu_s"] / row["lazy_s"]
        row["cpu_over_lazy_steps"] = ratios
        row["cpu_over_lazy_steps_median"] = statistics.median(ratios)
        row["steps_lazy_faster"] = sum(r > 1 for r in ratios)
        if "torch_s" in row:
            row["torch_over_lazy"] = row["torch_s"] / row["lazy_s"]
        rows.append(row)
        print(f"{row['name']:<26}{row['cpu_s'] * 1e3:>8.0f}ms{row['lazy_s'] * 1e3:>8.0f}ms"
              + (f"{row['torch_s'] * 1e3:>8.0f}ms{row['torch_over_lazy']:>11.2f}x" if "torch_s" in row else
                 f"{'n/a':>10}{'n/a':>12}")
              + f"{row['cpu_over_lazy']:>9.2f}x   step by step: median {row['cpu_over_lazy_steps_median']:.3f}, "
              + f"lazy faster in {row['steps_lazy_faster']} of {len(ratios)}", flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--flare", required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--benchmark", help="apps/benchmark's executable (default: next to --flare)")
    parser.add_argument("--models", default="bert vit", help="space-separated model names, or empty for none")
    parser.add_argument("--model-rounds", type=int, default=3)
    parser.add_argument("--model-iters", type=int, default=8)
    parser.add_argument("--model-warmup", type=int, default=2)
    parser.add_argument("--no-torch-models", action="store_true", help="time the models on Flare only")
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.model_rounds < 1 or args.model_iters < 1 or args.model_warmup < 0:
        parser.error("--model-rounds and --model-iters must be positive, --model-warmup not negative")
    args.benchmark = args.benchmark or str(Path(args.flare).parent / "benchmark")
    env = benchmark_environment(args.threads)
    # The lazy backend compiles its fused kernels in the warm-up (each case's first run,
    # each model's warm-up steps), so that the timed runs use them; the cpu backend
    # ignores the setting. Kernels are cached on disk, so later processes load them.
    env["FLARE_LAZY_COMPILE"] = "sync"
    flare = [args.flare, "--repeats", str(args.repeats)]
    torch = [sys.executable, str(HERE / "lazy_torch.py"), "--threads", str(args.threads), "--repeats",
             str(args.repeats)]
    samples, traffic, names = {}, {}, []
    for round_ in range(args.rounds):
        order = [flare, torch] if round_ % 2 == 0 else [torch, flare]
        for command in order:
            for result in run(command, env):
                if result["name"] not in names:
                    names.append(result["name"])
                samples.setdefault((result["name"], result["backend"]), []).append(result["seconds"])
                if "traffic" in result:
                    traffic[result["name"]] = result["traffic"]

    def median(name, backend):
        values = [v for v in samples.get((name, backend), []) if v is not None]
        return statistics.median(values) if values else None

    rows = []
    for name in names:
        row = {"name": name}
        for backend in ["cpu", "lazy", "torch", "torch-native"]:
            seconds = median(name, backend)
            if seconds is not None:
                row[f"{backend}_s"] = seconds
        if row.get("lazy_s") and row.get("torch_s"):
            row["torch_over_lazy"] = row["torch_s"] / row["lazy_s"]
        if row.get("lazy_s") and row.get("cpu_s"):
            row["cpu_over_lazy"] = row["cpu_s"] / row["lazy_s"]
        if row.get("lazy_s") and row.get("torch-native_s"):
            row["torch_native_over_lazy"] = row["torch-native_s"] / row["lazy_s"]
        if name in traffic:
            t = traffic[name]
            row["bytes_fused"] = t["fused_read"] + t["fused_written"]
            row["bytes_unfused"] = t["unfused_read"] + t["unfused_written"]
            row["traffic"] = t
        rows.append(row)

    header = f"{'case':<26}{'cpu':>10}{'lazy':>10}{'torch':>10}{'torch/lazy':>12}{'cpu/lazy':>10}{'MB fused':>10}{'MB unfused':>12}"
    print(header)
    for r in rows:
        ms = lambda key: f"{r[key] * 1e3:.1f}ms" if key in r else "n/a"
        ratio = lambda key: f"{r[key]:.2f}x" if key in r else "n/a"
        mb = lambda key: f"{r[key] / 1e6:.0f}" if key in r else "n/a"
        print(f"{r['name']:<26}{ms('cpu_s'):>10}{ms('lazy_s'):>10}{ms('torch_s'):>10}{ratio('torch_over_lazy'):>12}"
              f"{ratio('cpu_over_lazy'):>10}{mb('bytes_fused'):>10}{mb('bytes_unfused'):>12}")
        if "torch-native_s" in r:
            print(f"{'  (torch fused kernel)':<26}{'':>10}{'':>10}{ms('torch-native_s'):>10}"
                  f"{ratio('torch_native_over_lazy'):>12}")
    rows += model_rows(args, env)
    report = {"machine": machine_name(), "threads": args.threads, "rounds": args.rounds, "repeats": args.repeats,
              "columns": ["cpu", "lazy", "torch"],
              "lazy_compile": "sync: fused kernels compiled (or loaded from the cache) during warm-up, not timed",
              "models": {"size": "cpu", "warmup": args.model_warmup, "iters": args.model_iters,
                         "rounds": args.model_rounds,
                         "statistic": "median over rounds of each side's median seconds per training step "
                                      "(forward, backward, SGD with momentum); Flare's cpu and lazy steps "
                                      "alternate in one process, and each pair's ratio is kept"},
              "rows": rows}
    if args.out:
        write_report(report, args.out)


if __name__ == "__main__":
    main()
