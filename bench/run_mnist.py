"""One training epoch of the MNIST example at batch 64, Flare (apps/mnist) against the
same model, loop and batch in PyTorch (bench/mnist_torch.py), at the same thread count,
run alternately; writes the rows in the format of build/bench-ops.json.

    python bench/run_mnist.py --flare build/mnist [--threads 2] [--repeats 2] [--out FILE]

Each side trains from scratch for one epoch (55,000 images of Fashion-MNIST, without
evaluation) per repeat, and the median epoch time is kept. Data loading and the start-up
of each program are outside the timed epoch.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run_ops import RECORDED_VARIABLES, benchmark_environment, machine_name, write_report  # noqa: E402


def epoch_seconds(command, env):
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "epoch.json"
        subprocess.run(command + ["--json", str(out)], env=env, check=True, stdout=subprocess.DEVNULL)
        report = json.loads(out.read_text())
        return report["epochs"][0]["seconds"], report


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flare", default="build/mnist")
    parser.add_argument("--torch-script", default=str(HERE / "mnist_torch.py"))
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    env = benchmark_environment(args.threads)
    common = ["--data", args.data, "--epochs", "1", "--batch", str(args.batch), "--threads", str(args.threads),
              "--no-eval"]
    sides = {
        "flare": [args.flare] + common + ["--quiet"],
        "torch": [sys.executable, args.torch_script] + common,
    }
    times = {"flare": [], "torch": []}
    torch_version = None
    load_average = os.getloadavg()[0]
    started = time.monotonic()
    for r in range(args.repeats):
        for side in (("flare", "torch") if r % 2 == 0 else ("torch", "flare")):
            seconds, report = epoch_seconds(sides[side], env)
            times[side].append(seconds)
            torch_version = report.get("torch_version", torch_version)
            print(f"[{r + 1}/{args.repeats}] {side}: {seconds:.1f} s", file=sys.stderr, flush=True)
    flare_s, torch_s = statistics.median(times["flare"]), statistics.median(times["torch"])
    row = {"name": f"mnist epoch (batch {args.batch})", "flare_s": flare_s, "torch_s": torch_s,
           "ratio": flare_s / torch_s, "flare_fastest_s": min(times["flare"]), "torch_fastest_s": min(times["torch"]),
           "flare_all_s": times["flare"], "torch_all_s": times["torch"]}
    report = {
        "torch_version": torch_version, "threads": args.threads, "machine": machine_name(), "cores": os.cpu_count(),
        "load_average": round(load_average, 2),
        "environment": {variable: env.get(variable) for variable in RECORDED_VARIABLES},
        "method": {"repeats": args.repeats, "statistic": "median", "order": "alternating, each from scratch"},
        "elapsed_s": round(time.monotonic() - started, 1),
        "rows": [row],
    }
    print(f"{report['machine']}, {args.threads} threads, PyTorch {torch_version}\n")
    print(f"{'case':<24} {'Flare':>9} {'PyTorch':>9} {'Flare/PyTorch':>14}")
    print(f"{row['name']:<24} {flare_s:>8.1f}s {torch_s:>8.1f}s {row['ratio']:>14.3g}")
    if args.out:
        write_report(report, args.out)
        print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
