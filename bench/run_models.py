"""Runs the model benchmark side by side: Flare (apps/benchmark, built as
build/benchmark) and PyTorch (bench/torch/harness.py), model by model at the same
thread count, and prints a table of seconds per training iteration with the ratio
Flare / PyTorch (below 1 means Flare is faster) and the ratio of peak memory.

    python bench/run_models.py [--flare build/benchmark] [--models "alexnet resnet50"]
                               [--size cpu] [--iters 10] [--rounds R] [--warmup 2]
                               [--threads 2] [--repeats 1] [--compile]
                               [--compile-timeout 900] [--control] [--out build/bench-models.json]

Each model runs --repeats times in a fresh process per side (peak resident memory is
per process), rotating which side starts first. The sides start one after the other,
each doing its warm-up, and stay running (--serve); then their timed steps, --iters a
side, go in --rounds batches (5, or --iters if fewer) that take turns: Flare's, then PyTorch's, then PyTorch's
and Flare's, and so on. A busy spell of a shared host, which lasts from milliseconds
to minutes, thus weighs on both sides' batches of the same round. Each side's time is
the median over its batches (each batch's median step); "rounds' ratios" is the median
of the rounds' own ratios, with their range: the paired statistic.
--control puts a second Flare process in PyTorch's place: both sides then run the same
binary, so every ratio away from 1 is the machine, the noise a real run's ratios carry.
--compile adds a third side, PyTorch with the model through torch.compile, and its
columns: seconds per iteration after compiling, Flare's ratio to it, and the seconds
the first iteration took (compiling, the forward and the backward). Each compiled
process compiles from nothing, with an empty Inductor cache of its own, as a first run
does; one that fails or runs past --compile-timeout is recorded with its error, and
the model is not compiled again. The
machine's sgemm peak is measured once by Flare (a 2048^3 matmul) and both sides'
GFLOP/s are reported as a fraction of it, counting the operations of a training step
as Flare's model table does (models/models.h, flops_per_sample).
"""

import argparse
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from run_ops import RECORDED_VARIABLES, benchmark_environment, machine_name, write_report

HERE = Path(__file__).resolve().parent


# The pause before each batch: long enough for the other side's OpenMP threads, which
# spin for a while after their last parallel region, to have gone to sleep.
SETTLE_S = 0.05


class Trainer:
    """One side's program training one model in --serve mode."""

    def __init__(self, label, command, env):
        self.label = label
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(command + ["--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=self.stderr, text=True, env=env)
        self.error = None

    def answer(self, timeout=None):
        """The program's next JSON line; None, with self.error set, if it has none."""
        if self.error:
            return None
        if timeout is not None and not select.select([self.process.stdout], [], [], timeout)[0]:
            self.process.kill()
            self.error = f"{self.label}: ran past {timeout:.0f} s"
            return None
        line = self.process.stdout.readline()
        if not line:
            status = self.process.wait()
            self.stderr.seek(0)
            message = (self.stderr.read().strip().splitlines() or [f"exited with status {status}"])[-1]
            self.error = f"{self.label}: {message}"
            return None
        result = json.loads(line)
        if "error" in result:
            self.error = f"{self.label}: {result['error']}"
            return None
        return result

    def steps(self, count):
        """The median seconds of count training steps, or None."""
        if self.error:
            return None
        time.sleep(SETTLE_S)
        self.process.stdin.write(f"steps {count}\n")
        self.process.stdin.flush()
        result = self.answer()
        return result["seconds"] if result else None

    def finish(self):
        """The program's report over every step it timed, or {"error": ...}."""
        if not self.error:
            self.process.stdin.close()
            result = self.answer()
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.stderr.close()
        return {"error": self.error} if self.error else result


def run_json(command, env, label):
    """The last line of a program's output, as JSON, or an error."""
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        message = (result.stderr.strip().splitlines() or [f"exited with status {result.returncode}"])[-1]
        return {"error": f"{label}: {message}"}
    return json.loads(lines[-1])


def ratio(a, b):
    return a / b if a is not None and b else None


def format_seconds(seconds):
    return "n/a" if seconds is None else f"{seconds:.3f}"


def format_ratio(value):
    return "n/a" if value is None else f"{value:.2f}"


def format_rounds(row):
    """The median of the rounds' ratios, with their range when there are several."""
    values = row.get("round_ratios")
    if not values:
        return "n/a"
    middle = f"{row['paired_ratio']:.2f}"
    return middle if len(values) == 1 else f"{middle} ({min(values):.2f}-{max(values):.2f})"


def print_table(rows, compiled):
    header = ("model", "params", "batch", "Flare s/iter", "PyTorch s/iter", "ratio", "rounds' ratios",
              "memory ratio", "Flare GFLOP/s")
    if compiled:
        header += ("compiled s/iter", "ratio to compiled", "first step s")
    lines = []
    for row in rows:
        line = (row["name"], f"{row['params']:,}" if row.get("params") else "n/a", str(row.get("batch", "n/a")),
                format_seconds(row["flare_s"]), format_seconds(row["torch_s"]), format_ratio(row["ratio"]),
                format_rounds(row), format_ratio(row["memory_ratio"]),
                "n/a" if row.get("flare_gflops") is None
                else f"{row['flare_gflops']:.1f} ({100 * row['flare_peak_fraction']:.0f}%)")
        if compiled:
            line += (format_seconds(row.get("compile_s")), format_ratio(row.get("compile_ratio")),
                     "n/a" if row.get("compile_first_iteration_s") is None
                     else f"{row['compile_first_iteration_s']:.0f}")
        lines.append(line)
    widths = [max(len(line[i]) for line in lines + [header]) for i in range(len(header))]
    for i, line in enumerate([header] + lines):
        print(f"{line[0]:<{widths[0]}}  " + "  ".join(f"{cell:>{w}}" for cell, w in zip(line[1:], widths[1:])))
        if i == 0:
            print("  ".join("-" * w for w in widths))
    for row in rows:
        for key in ("flare_error", "torch_error", "compile_error", "params_mismatch"):
            if key in row:
                print(f"  {row['name']}: {row[key]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flare", default="build/benchmark", help="the benchmark executable")
    parser.add_argument("--torch-harness", default=str(HERE / "torch" / "harness.py"))
    parser.add_argument("--models", default=None, help="space-separated names (default: every model of Flare's)")
    parser.add_argument("--size", default="cpu", choices=["tiny", "cpu", "paper"])
    parser.add_argument("--iters", type=int, default=10, help="timed steps a side, per repeat")
    parser.add_argument("--rounds", type=int, default=None,
                        help="batches the timed steps go in, alternated (5, or --iters if fewer)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1, help="fresh processes per side and model")
    parser.add_argument("--compile", action="store_true", help="also time PyTorch with torch.compile")
    parser.add_argument("--compile-timeout", type=float, default=900, help="seconds per torch.compile process")
    parser.add_argument("--control", action="store_true", help="Flare against Flare: the machine's noise")
    parser.add_argument("--out", default=None, help="write the results here as JSON")
    args = parser.parse_args()
    if args.rounds is None:
        args.rounds = min(5, args.iters)
    if args.threads < 1 or args.iters < 1 or args.warmup < 0 or args.repeats < 1 or args.rounds < 1:
        parser.error("--threads, --iters, --rounds and --repeats must be positive, --warmup not negative")
    if args.rounds > args.iters:
        parser.error(f"--rounds {args.rounds} would leave a batch without steps: at most --iters ({args.iters})")
    if args.compile and args.warmup < 1:
        parser.error("--compile needs --warmup >= 1: the first iteration compiles")
    if args.compile and args.control:
        parser.error("--control compares Flare with itself; not with --compile")

    env = benchmark_environment(args.threads)
    listed = subprocess.run([args.flare, "--list"], capture_output=True, text=True, env=env, check=True)
    available = listed.stdout.split()
    names = args.models.split() if args.models else available
    unknown = [name for name in names if name not in available]
    if unknown:
        parser.error(f"no model {', '.join(unknown)} in {args.flare} (it has {', '.join(available)})")

    load_average = os.getloadavg()[0]
    started = time.monotonic()
    peak = run_json([args.flare, "--sgemm-peak", "--json", "--threads", str(args.threads)], env, "Flare")
    if "error" in peak:
        sys.exit(f"cannot measure the sgemm peak: {peak['error']}")
    sgemm = peak["sgemm_gflops"]
    common = ["--size", args.size, "--iters", str(args.iters), "--warmup", str(args.warmup),
              "--threads", str(args.threads)]
    flare_command = [args.flare, "--json", "--peak-gflops", f"{sgemm:.3f}"] + common
    torch_command = flare_command if args.control else [sys.executable, args.torch_harness] + common

    rows, torch_version = [], None
    for i, name in enumerate(names):
        other = "Flare (control)" if args.control else "PyTorch"
        sides = [("flare", flare_command, "Flare"), ("torch", torch_command, other)]
        if args.compile:
            sides.append(("compile", torch_command + ["--compile"], "torch.compile"))
        results = {key: [] for key, _, _ in sides}  # each process's final report
        samples = {key: [] for key, _, _ in sides}  # each batch's median step, None where it failed
        per_round = [args.iters // args.rounds + (k < args.iters % args.rounds) for k in range(args.rounds)]
        for r in range(args.repeats):
            turn = (i + r) % len(sides)
            order = sides[turn:] + sides[:turn]
            trainers, caches = {}, []
            for key, command, label in order:
                if key == "compile" and any("error" in result for result in results[key]):
                    continue
                side_env = env
                if key == "compile":  # compiles from nothing, as a first run does
                    caches.append(tempfile.TemporaryDirectory(prefix="inductor-"))
                    side_env = dict(env, TORCHINDUCTOR_CACHE_DIR=caches[-1].name)
                trainer = Trainer(label, command + ["--model", name], side_env)
                trainer.answer(args.compile_timeout if key == "compile" else None)  # its warm-up is done
                trainers[key] = trainer
            for k, count in enumerate(per_round):
                for key, _, _ in (order if k % 2 == 0 else order[::-1]):
                    if key in trainers:
                        samples[key].append(trainers[key].steps(count))
                for key, _, _ in sides:
                    if key not in trainers:
                        samples[key].append(None)
            for key, trainer in trainers.items():
                results[key].append(trainer.finish())
            for cache in caches:
                cache.cleanup()
        row = {"name": name}
        for key in results:
            good = [result for result in results[key] if "error" not in result]
            if not good:
                row[f"{key}_error"] = results[key][0]["error"]
                row[f"{key}_s"] = row[f"{key}_peak_rss"] = None
                continue
            row[f"{key}_s"] = statistics.median(value for value in samples[key] if value is not None)
            row[f"{key}_fastest_s"] = min(result["fastest"] for result in good)
            row[f"{key}_slowest_s"] = max(result["slowest"] for result in good)
            row[f"{key}_peak_rss"] = max(result["peak_rss"] for result in good)
            for phase in ("data_s", "forward_s", "backward_s", "step_s"):
                row[f"{key}_{phase}"] = statistics.median(result[phase] for result in good)
            row[f"{key}_samples_per_s"] = good[0]["batch"] / row[f"{key}_s"]
            row.setdefault("params", good[0]["params"])
            row.setdefault("batch", good[0]["batch"])
            if key == "flare":
                row["flops_per_iter"] = good[0]["flops_per_iter"]
            else:
                torch_version = None if args.control else good[0]["version"]
                if good[0]["params"] != row["params"]:
                    row["params_mismatch"] = f"Flare has {row['params']} parameters, PyTorch {good[0]['params']}"
            if key == "compile":
                row["compile_first_iteration_s"] = statistics.median(result["first_iteration_s"] for result in good)
        row["ratio"] = ratio(row["flare_s"], row["torch_s"])
        # A round's batches run back to back, so its ratio compares the sides under
        # nearly the same load.
        rounds = [flare / torch for flare, torch in zip(samples["flare"], samples["torch"]) if flare and torch]
        if rounds:
            row["round_ratios"] = [round(value, 4) for value in rounds]
            row["paired_ratio"] = statistics.median(rounds)
        if args.compile:
            row["compile_ratio"] = ratio(row["flare_s"], row.get("compile_s"))
        row["memory_ratio"] = ratio(row["flare_peak_rss"], row["torch_peak_rss"])
        for key in ("flare", "torch"):
            if row.get(f"{key}_s") and row.get("flops_per_iter"):
                row[f"{key}_gflops"] = row["flops_per_iter"] / row[f"{key}_s"] / 1e9
                row[f"{key}_peak_fraction"] = row[f"{key}_gflops"] / sgemm
        rows.append(row)
        print(f"[{i + 1}/{len(names)}] {name}", file=sys.stderr, flush=True)
    elapsed = time.monotonic() - started

    report = {
        "torch_version": torch_version,
        "control": args.control,
        "threads": args.threads,
        "machine": machine_name(),
        "cores": os.cpu_count(),
        "load_average": round(load_average, 2),  # the 1-minute one, as the run began
        "environment": {variable: env.get(variable) for variable in RECORDED_VARIABLES},
        "method": {"size": args.size, "warmup": args.warmup, "iters": args.iters, "repeats": args.repeats,
                   "statistic": "median seconds per training iteration (data, forward, backward, SGD step)",
                   "rounds": args.rounds,
                   "order": "model by model; each repeat a fresh process per side, started one after the other "
                            "(rotating which first) and kept running, their timed steps in rounds of one batch "
                            "a side, alternating which goes first",
                   "compile": "torch.compile as a third side" if args.compile else "not measured",
                   "sgemm_gflops": sgemm},
        "elapsed_s": round(elapsed, 1),
        "rows": rows,
    }
    against = "control: the PyTorch column is a second Flare process" if args.control else f"PyTorch {torch_version}"
    print(f"{report['machine']}, {args.threads} thread{'s' if args.threads > 1 else ''}, {against}; "
          f"load average {load_average:.1f} on {os.cpu_count()} cores at the start; sgemm peak {sgemm:.1f} GFLOP/s; "
          f"{elapsed:.0f} s\n")
    print_table(rows, args.compile)
    if args.out:
        write_report(report, args.out)
        print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
