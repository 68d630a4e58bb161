"""Runs the lazy-backend benchmark side by side: Flare's cpu and lazy backends
(bench/lazy.c, built as bench_lazy) and PyTorch eager (bench/lazy_torch.py), all at
the same thread count, for several rounds alternating which program goes first, and
writes the median of the rounds as rows of build/bench-ops.json's form with a column
per backend, plus the lazy backend's memory traffic fused and unfused.

    python bench/run_lazy.py --flare build/bench_lazy [--threads 2] [--rounds 3] [--out FILE]
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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--flare", required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out")
    args = parser.parse_args()
    env = benchmark_environment(args.threads)
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
            print(f"{'  (torch F.layer_norm)':<26}{'':>10}{'':>10}{ms('torch-native_s'):>10}"
                  f"{ratio('torch_native_over_lazy'):>12}")
    report = {"machine": machine_name(), "threads": args.threads, "rounds": args.rounds, "repeats": args.repeats,
              "columns": ["cpu", "lazy", "torch"], "rows": rows}
    if args.out:
        write_report(report, args.out)


if __name__ == "__main__":
    main()
