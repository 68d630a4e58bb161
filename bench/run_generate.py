"""Runs the generation benchmark side by side: Flare (bench/generate.c, built as
build/bench_generate) and PyTorch (bench/generate_torch.py), eager and, if it works,
torch.compile, at the same thread count, and prints a table of decode tokens per
second with the ratio of decode times Flare / PyTorch eager (below 1 means Flare is
faster), and the same ratio for the prefill.

    python bench/run_generate.py [--flare build/bench_generate] [--batches "1 8"]
                                 [--prompt 64] [--new 32] [--runs 3] [--repeats 3]
                                 [--threads 2] [--no-compile] [--compile-timeout 300]
                                 [--out build/bench-generate.json]

Both sides load one model: bench/generate_torch.py --write makes the weights and the
prompts (the "cpu" size of the gpt benchmark model, six 512-wide blocks, 30000 tokens)
under build/generate/. Every (side, batch) runs in a fresh process, --repeats rounds
per batch, alternating which side goes first, and the medians of the rounds are kept.
The greedy tokens of every run must be the same on every side, else the script stops
with the first difference (status 1). torch.compile runs in the first round only (it
compiles for about a minute on 2 cores, timed apart as compile_s); if it fails or runs
past --compile-timeout, the table says so and it is not tried again.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from run_ops import RECORDED_VARIABLES, benchmark_environment, machine_name, write_report

HERE = Path(__file__).resolve().parent


def run_json(command, env, label, timeout=None):
    """The last line of a program's output, as JSON, or {"error": ...}."""
    try:
        result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"{label}: ran past {timeout} s"}
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        message = (result.stderr.strip().splitlines() or [f"exited with status {result.returncode}"])[-1]
        return {"error": f"{label}: {message}"}
    return json.loads(lines[-1])


def first_difference(a, b):
    """(row, new token, a's, b's) where two token lists [N][G] first differ, or None."""
    for i, (row_a, row_b) in enumerate(zip(a, b)):
        for j, (x, y) in enumerate(zip(row_a, row_b)):
            if x != y:
                return i, j, x, y
        if len(row_a) != len(row_b):
            return i, min(len(row_a), len(row_b)), None, None
    return None if len(a) == len(b) else (min(len(a), len(b)), 0, None, None)


def cell(value, digits=1):
    return "n/a" if value is None else f"{value:.{digits}f}"


def print_table(rows, compile_note):
    header = ("batch", "prompt", "new", "Flare tok/s", "PyTorch tok/s", "compile tok/s", "ratio",
              "prefill Flare s", "prefill PyTorch s", "prefill ratio")
    lines = []
    for row in rows:
        compile_cell = cell(row["compile_tok_s"]) if row.get("compile_tok_s") else compile_note
        lines.append((str(row["batch"]), str(row["prompt"]), str(row["new"]), cell(row["flare_tok_s"]),
                      cell(row["torch_tok_s"]), compile_cell, cell(row["ratio"], 2), cell(row["flare_prefill_s"], 3),
                      cell(row["torch_prefill_s"], 3), cell(row["prefill_ratio"], 2)))
    widths = [max(len(line[i]) for line in lines + [header]) for i in range(len(header))]
    for i, line in enumerate([header] + lines):
        print("  ".join(f"{c:>{w}}" for c, w in zip(line, widths)))
        if i == 0:
            print("  ".join("-" * w for w in widths))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flare", default="build/bench_generate", help="the benchmark executable")
    parser.add_argument("--torch-script", default=str(HERE / "generate_torch.py"))
    parser.add_argument("--data", default=None, help="where the weights and prompts go (default: beside --flare)")
    parser.add_argument("--batches", default="1 8")
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--runs", type=int, default=3, help="timed generations per process; the median is kept")
    parser.add_argument("--repeats", type=int, default=3, help="processes per side and batch; the median is kept")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    parser.add_argument("--compile-timeout", type=float, default=300, help="seconds per torch.compile process")
    parser.add_argument("--out", default=None, help="write the results here as JSON")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split()]
    if min([args.prompt, args.new, args.warmup, args.runs, args.repeats, args.threads] + batches) < 1:
        parser.error("every count must be positive")

    env = benchmark_environment(args.threads)
    data = Path(args.data) if args.data else Path(args.flare).resolve().parent / "generate"
    subprocess.run([sys.executable, args.torch_script, "--write", str(data), "--prompt", str(args.prompt),
                    "--rows", str(max(batches))], env=env, check=True)
    files = ["--weights", str(data / "weights.safetensors")]
    common = ["--new", str(args.new), "--warmup", str(args.warmup), "--runs", str(args.runs),
              "--threads", str(args.threads)]
    sides = [("flare", "Flare", [args.flare] + files + ["--prompt", str(data / "prompt.safetensors")] + common),
             ("torch", "PyTorch", [sys.executable, args.torch_script] + files +
              ["--prompt-file", str(data / "prompt.safetensors")] + common)]
    if not args.no_compile:
        sides.append(("compile", "torch.compile", sides[1][2] + ["--compile"]))

    load_average = os.getloadavg()[0]
    started = time.monotonic()
    rows, torch_version, compile_error = [], None, None
    for i, batch in enumerate(batches):
        results = {key: [] for key, _, _ in sides}
        reference = None  # the first run's (label, tokens): every run must pick the same
        for r in range(args.repeats):
            turn = (i * args.repeats + r) % len(sides)
            for key, label, command in sides[turn:] + sides[:turn]:
                if key == "compile" and (compile_error or r > 0):
                    continue  # its compilation takes a minute: one round; and none after a failure
                result = run_json(command + ["--batch", str(batch)], env, label,
                                  args.compile_timeout if key == "compile" else None)
                if "error" in result:
                    if key != "compile":
                        sys.exit(f"batch {batch}: {result['error']}")
                    compile_error = result["error"]
                    continue
                results[key].append(result)
                if reference is None:
                    reference = (label, result["tokens"])
                difference = first_difference(reference[1], result["tokens"])
                if difference:
                    sys.exit(f"batch {batch}: the greedy tokens differ: row {difference[0]}, new token "
                             f"{difference[1]}: {reference[0]} picked {difference[2]}, {label} {difference[3]}")
            print(f"[batch {batch}, round {r + 1}/{args.repeats}]", file=sys.stderr, flush=True)
        row = {"batch": batch, "prompt": args.prompt, "new": args.new}
        for key, _, _ in sides:
            good = results[key]
            if not good:
                row[f"{key}_tok_s"] = row[f"{key}_decode_s"] = row[f"{key}_prefill_s"] = None
                continue
            row[f"{key}_decode_s"] = statistics.median(result["decode_s"] for result in good)
            row[f"{key}_prefill_s"] = statistics.median(result["prefill_s"] for result in good)
            row[f"{key}_tok_s"] = batch * (args.new - 1) / row[f"{key}_decode_s"] if args.new > 1 else None
            row[f"{key}_rounds"] = [{k: result[k] for k in ("prefill_s", "decode_s")} for result in good]
            if key == "compile":
                row["compile_s"] = statistics.median(result["compile_s"] for result in good)
            if key == "torch":
                torch_version = good[0]["version"]
        row["ratio"] = row["flare_decode_s"] / row["torch_decode_s"] if args.new > 1 else None
        row["prefill_ratio"] = row["flare_prefill_s"] / row["torch_prefill_s"]
        row["tokens"] = results["flare"][0]["tokens"]
        rows.append(row)
    elapsed = time.monotonic() - started

    report = {
        "torch_version": torch_version,
        "threads": args.threads,
        "machine": machine_name(),
        "cores": os.cpu_count(),
        "load_average": round(load_average, 2),  # the 1-minute one, as the run began
        "environment": {variable: env.get(variable) for variable in RECORDED_VARIABLES},
        "method": {"model": "gpt, size cpu (6 blocks of 512, 8 heads, 30000 tokens)", "prompt": args.prompt,
                   "new": args.new, "warmup": args.warmup, "runs": args.runs, "repeats": args.repeats,
                   "statistic": "median over rounds of each process's median; decode tok/s = batch (new - 1) / "
                                "decode seconds; ratio = Flare seconds / PyTorch eager seconds",
                   "order": "batch by batch, a fresh process per side and round, rotating which side goes first",
                   "compile": "left out" if args.no_compile else compile_error or "measured"},
        "elapsed_s": round(elapsed, 1),
        "rows": rows,
    }
    print(f"{report['machine']}, {args.threads} thread{'s' if args.threads > 1 else ''}, PyTorch {torch_version}; "
          f"load average {load_average:.1f} on {os.cpu_count()} cores at the start; {elapsed:.0f} s\n")
    print_table(rows, "left out" if args.no_compile else "failed")
    print("\ngreedy tokens identical on every side")
    if args.no_compile:
        print("torch.compile: left out (--no-compile)")
    elif compile_error:
        print(f"torch.compile: not measured: {compile_error}")
    else:
        print("torch.compile: compiled in " + ", ".join(f"{row['compile_s']:.0f} s (batch {row['batch']})"
                                                        for row in rows if row.get("compile_s")))
    if args.out:
        write_report(report, args.out)
        print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
