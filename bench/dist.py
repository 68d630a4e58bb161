"""The distributed benchmark (make bench-dist), written to build/bench-dist.json:

 1. all-reduce through Flare against a raw MPI_Allreduce of the same bytes, 4 KB to
    64 MB, with 2 processes of 1 thread each (bench/dist.c, whose rows this keeps);
 2. one epoch of the MNIST example (apps/mnist) trained by 2 processes x 1 thread
    (mpirun -np 2 mnist --distributed --threads 1) against 1 process x 2 threads
    (mnist --threads 2): the same two cores, spent on data parallelism or on threads.

    python3 bench/dist.py [--mpirun mpirun] [--bench-dist build/bench_dist] [--mnist build/mnist]
                          [--repeats 1] [--train-limit N] [--skip-all-reduce] [--out FILE]

For a fair comparison both MNIST runs do the same work: the same 55,000 training images
shuffled by the same seed, and the same global batch of 64 images per step, so the same
number of steps (860) and the same learning-rate schedule. With 2 processes each rank
takes 32 images a step (--batch 32) from its half of the shuffled epoch (apps/mnist
partitions it among the ranks and averages the gradients); the single process takes
64 (--batch 64). Both run without evaluation, each with its one prefetching data
worker, and the time is the training epoch as apps/mnist measures it (rank 0's with 2
processes, which waits for rank 1 at every step): start-up and data loading are outside
it. The runs alternate, each from scratch, and a row keeps the median of --repeats.

Only the standard library: a fresh machine runs it with the system's python3.
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

GLOBAL_BATCH = 64
RANKS = 2


def mpirun(args):
    # Root may launch jobs only when told so; --oversubscribe and --bind-to none let 2
    # ranks share the cores with anything else, unpinned, as the single process is.
    return [args.mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(RANKS)]


def all_reduce_report(args):
    """bench/dist.c's report (its rows: one per message size)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "all_reduce.json"
        subprocess.run(mpirun(args) + [args.bench_dist, "--out", str(out)], env=benchmark_environment(1), check=True)
        return json.loads(out.read_text())


def epoch_seconds(command, env):
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "epoch.json"
        subprocess.run(command + ["--json", str(out)], env=env, check=True, stdout=subprocess.DEVNULL)
        return json.loads(out.read_text())["epochs"][0]["seconds"]


def mnist_rows(args):
    common = ["--data", args.data, "--epochs", "1", "--no-eval", "--quiet"]
    if args.train_limit:
        common += ["--train-limit", str(args.train_limit)]
    per_rank = GLOBAL_BATCH // RANKS
    sides = {
        "processes": {
            "name": f"mnist epoch, {RANKS} processes x 1 thread (batch {per_rank} each)",
            "command": mpirun(args) + [args.mnist, "--distributed", "--threads", "1", "--batch", str(per_rank)] + common,
            "env": benchmark_environment(1), "processes": RANKS, "threads": 1, "batch_per_process": per_rank,
        },
        "threads": {
            "name": f"mnist epoch, 1 process x {RANKS} threads (batch {GLOBAL_BATCH})",
            "command": [args.mnist, "--threads", str(RANKS), "--batch", str(GLOBAL_BATCH)] + common,
            "env": benchmark_environment(RANKS), "processes": 1, "threads": RANKS, "batch_per_process": GLOBAL_BATCH,
        },
    }
    times = {side: [] for side in sides}
    for r in range(args.repeats):
        for side in (("processes", "threads") if r % 2 == 0 else ("threads", "processes")):
            seconds = epoch_seconds(sides[side]["command"], sides[side]["env"])
            times[side].append(seconds)
            print(f"[{r + 1}/{args.repeats}] {sides[side]['name']}: {seconds:.2f} s", file=sys.stderr, flush=True)
    rows = []
    for side, spec in sides.items():
        rows.append({"name": spec["name"], "flare_s": statistics.median(times[side]),
                     "flare_fastest_s": min(times[side]), "flare_all_s": times[side],
                     "processes": spec["processes"], "threads": spec["threads"],
                     "batch_per_process": spec["batch_per_process"], "global_batch": GLOBAL_BATCH,
                     "environment": {variable: spec["env"].get(variable) for variable in RECORDED_VARIABLES}})
    # The ratio sits on the row of processes: above 1, threads train faster.
    rows[0]["ratio"] = rows[0]["flare_s"] / rows[1]["flare_s"]
    rows[0]["ratio_of"] = f"this row's time / '{rows[1]['name']}'"
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--bench-dist", default="build/bench_dist")
    parser.add_argument("--mnist", default="build/mnist")
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--train-limit", type=int, default=0,
                        help="train on the first N images only (to try the plumbing; not a measurement)")
    parser.add_argument("--skip-all-reduce", action="store_true", help="only the MNIST rows")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")

    load_average = os.getloadavg()[0]
    started = time.monotonic()
    report = {"ranks": RANKS, "rows": []} if args.skip_all_reduce else all_reduce_report(args)
    mnist = mnist_rows(args)
    report["rows"] += mnist
    report["mnist_method"] = {
        "repeats": args.repeats, "statistic": "median", "order": "alternating, each from scratch",
        "train_images": args.train_limit or 55000, "global_batch": GLOBAL_BATCH, "evaluation": False,
        "timed": "the training epoch, as apps/mnist reports it (rank 0's with several processes)",
    }
    report["machine"] = machine_name()
    report["cores"] = os.cpu_count()
    report["load_average"] = round(load_average, 2)
    report["elapsed_s"] = round(time.monotonic() - started, 1)

    print(f"\n{'case':<50} {'epoch':>9}")
    for row in mnist:
        print(f"{row['name']:<50} {row['flare_s']:>8.2f}s")
    print(f"{'processes / threads':<50} {mnist[0]['ratio']:>9.3f}")
    if args.out:
        write_report(report, args.out)
        print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
