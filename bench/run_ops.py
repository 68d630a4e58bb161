"""Runs the operator benchmark side by side: Flare (bench/ops.c, built as bench_ops)
and PyTorch (bench/ops_torch.py), at the same thread count, case by case, and prints
a table of the median time per operation with the ratio Flare / PyTorch (below 1
means Flare is faster). docs/BENCHMARKS.md explains the method.

    python bench/run_ops.py --flare build/bench_ops [--threads 2] [--filter REGEX] [--out FILE]

Both programs stay running in --serve mode. For each case the driver has both plan
their batch size, then alternates their timed batches one by one (Flare, PyTorch,
PyTorch, Flare, ...), so that whatever else loads the machine weighs on both alike;
each round's pair of batches gives one ratio, and the row keeps how many rounds
Flare won besides the ratio of the two medians.
"""

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# The environment both programs run in, recorded in the JSON output.
RECORDED_VARIABLES = ["FLARE_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                      "OPENBLAS_CORETYPE", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_PROC_BIND", "OMP_PLACES",
                      "KMP_BLOCKTIME", "KMP_AFFINITY", "MALLOC_ARENA_MAX"]


def write_report(report, path):
    """Writes report as JSON to path atomically: a temporary file, then a rename, so an
    interrupted run never leaves a half-written file where the last good one was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    os.replace(tmp, path)


def cpu_flags():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def machine_name():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def benchmark_environment(threads):
    """One environment for both programs: every thread pool sized to `threads` (Flare's
    OpenMP, OpenBLAS's pthreads, PyTorch's OpenMP and MKL), and otherwise each runtime's
    defaults, which both share since PyTorch ships the same GNU libgomp Flare uses; a
    wait policy set by the caller applies to both."""
    env = dict(os.environ)
    for variable in ["FLARE_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"]:
        env[variable] = str(threads)
    # OpenBLAS 0.3.21 (Debian 12) does not recognize recent AVX-512 processors, Zen 4
    # among them, and falls back to slower kernels. Only where the CPU has AVX-512:
    # SkylakeX kernels elsewhere would stop at an illegal instruction.
    if "avx512f" in cpu_flags():
        env.setdefault("OPENBLAS_CORETYPE", "SkylakeX")
    return env


class Side:
    """One benchmark program running in --serve mode."""

    def __init__(self, label, command, env):
        self.label, self.command, self.env = label, command, env
        self.process = None
        self.hello = {}

    def start(self):
        self.process = subprocess.Popen(self.command + ["--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True, env=self.env)
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.label} did not start: {' '.join(self.command)} "
                               f"exited with status {self.process.wait()}")
        self.hello = json.loads(line)
        return self.hello

    def request(self, name, request):
        """The answer to one request about case `name`; a crash becomes the case's
        error and the program is started again for the requests after it."""
        if self.process is None:
            self.start()
        self.process.stdin.write(request + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if line:
            return json.loads(line)
        status = self.process.wait()
        self.process = None
        how = f"was killed by {signal.Signals(-status).name}" if status < 0 else f"exited with status {status}"
        return {"name": name, "seconds": None, "error": f"{self.label} {how}"}

    def stop(self):
        if self.process:
            self.process.stdin.close()
            self.process.wait()
            self.process = None


def compare(name, sides):
    """One row: both sides plan the case, then time one batch each per round, the
    side that goes first alternating from round to round."""
    plans = {side: side.request(name, f"plan {name}") for side in sides}
    errors = {side: plans[side]["error"] for side in sides if "error" in plans[side]}
    working = [side for side in sides if side not in errors]
    rounds = min((plans[side]["repeats"] for side in working), default=0)
    samples = {side: [] for side in sides}
    for r in range(rounds):
        for side in (working if r % 2 == 0 else working[::-1]):
            if side in errors:
                continue
            result = side.request(name, f"time {name} {plans[side]['iterations']}")
            if "error" in result:
                errors[side] = result["error"]
            else:
                samples[side].append(result["seconds"])
    return samples, errors


def make_row(name, flare, torch, samples, errors):
    row = {"name": name}
    for key, side in (("flare", flare), ("torch", torch)):
        done = samples[side] and side not in errors
        row[f"{key}_s"] = statistics.median(samples[side]) if done else None
        row[f"{key}_fastest_s"] = min(samples[side]) if done else None
        if side in errors:
            row[f"{key}_error"] = errors[side]
    both = row["flare_s"] is not None and row["torch_s"]
    row["ratio"] = row["flare_s"] / row["torch_s"] if both else None
    round_ratios = [f / t for f, t in zip(samples[flare], samples[torch])] if both else []
    row["round_ratios"] = [round(r, 4) for r in round_ratios]
    row["flare_faster_rounds"] = sum(r < 1 for r in round_ratios)
    return row


def format_seconds(seconds):
    if seconds is None:
        return "n/a"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def print_table(rows, other="PyTorch"):
    header = ("case", "Flare", other, f"Flare/{other}", "Flare faster")
    lines = [(row["name"], format_seconds(row["flare_s"]), format_seconds(row["torch_s"]),
              "n/a" if row["ratio"] is None else f"{row['ratio']:.3g}",
              f"{row['flare_faster_rounds']} of {len(row['round_ratios'])}") for row in rows]
    widths = [max(len(line[i]) for line in lines + [header]) for i in range(len(header))]
    for i, line in enumerate([header] + lines):
        print(f"{line[0]:<{widths[0]}}  " + "  ".join(f"{cell:>{width}}" for cell, width in zip(line[1:], widths[1:])))
        if i == 0:
            print("  ".join("-" * width for width in widths))
    errors = [(row["name"], side, row[f"{side}_error"]) for row in rows for side in ("flare", "torch")
              if f"{side}_error" in row]
    if errors:
        print("\nnot available:")
        for name, side, message in errors:
            print(f"  {name} ({'Flare' if side == 'flare' else other}): {message}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flare", default="build/bench_ops", help="the bench_ops executable")
    parser.add_argument("--torch-script", default=str(HERE / "ops_torch.py"))
    parser.add_argument("--threads", type=int, default=2, help="threads for both (default 2)")
    parser.add_argument("--filter", default=None, help="run the cases whose name matches this regex")
    parser.add_argument("--min-time", type=float, default=0.45, help="timed seconds per case and side")
    parser.add_argument("--repeats", type=int, default=9,
                        help="rounds per case, one timed batch of each side; the medians are kept")
    parser.add_argument("--out", default=None, help="write the results here as JSON")
    parser.add_argument("--control", action="store_true",
                        help="time Flare against a second Flare process instead of PyTorch: the spread "
                             "of these ratios is the noise of the machine")
    args = parser.parse_args()
    if args.threads < 1 or args.min_time <= 0 or args.repeats < 1:
        parser.error("--threads, --min-time and --repeats must be positive")

    common = ["--threads", str(args.threads), "--min-time", str(args.min_time), "--repeats", str(args.repeats)]
    if args.filter:
        common += ["--filter", args.filter]
    env = benchmark_environment(args.threads)
    flare = Side("Flare", [args.flare] + common, env)
    if args.control:
        torch = Side("Flare again", [args.flare] + common, env)
    else:
        torch = Side("PyTorch", [sys.executable, args.torch_script] + common, env)

    load_average = os.getloadavg()[0]
    started = time.monotonic()
    try:
        # PyTorch first: its import takes seconds of CPU that must not overlap Flare's cases.
        torch_cases = torch.start()["cases"]
        flare_cases = flare.start()["cases"]
        names = flare_cases + [name for name in torch_cases if name not in flare_cases]
        if not names:
            parser.error(f"no case matches --filter {args.filter!r}")
        rows = []
        for i, name in enumerate(names):
            order = [flare, torch] if i % 2 == 0 else [torch, flare]
            samples, errors = compare(name, order)
            rows.append(make_row(name, flare, torch, samples, errors))
            print(f"[{i + 1}/{len(names)}] {name}", file=sys.stderr, flush=True)
    finally:
        flare.stop()
        torch.stop()
    elapsed = time.monotonic() - started

    report = {
        "torch_version": torch.hello.get("version"),
        # With --control the torch_ keys of the rows hold the second Flare process.
        "control": args.control,
        "threads": args.threads,
        "machine": machine_name(),
        "cores": os.cpu_count(),
        "load_average": round(load_average, 2),  # the 1-minute one, as the run began
        "environment": {variable: env.get(variable) for variable in RECORDED_VARIABLES},
        "method": {"min_time_s": args.min_time, "repeats": args.repeats, "statistic": "median",
                   "order": "batch by batch within a case, alternating which side goes first"},
        "elapsed_s": round(elapsed, 1),
        "rows": rows,
    }
    against = "a second Flare process (--control)" if args.control else f"PyTorch {report['torch_version']}"
    print(f"{report['machine']}, {args.threads} thread{'s' if args.threads > 1 else ''}, "
          f"{against}; load average {load_average:.1f} on {os.cpu_count()} cores "
          f"at the start; {elapsed:.0f} s\n")
    print_table(rows, torch.label)
    if args.out:
        write_report(report, args.out)
        print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
