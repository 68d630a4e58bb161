"""The opencl backend's benchmark (make bench-opencl), written to build/bench-opencl.json:

 1. every model of apps/benchmark trained on the opencl backend (benchmark --backend
    opencl), a few timed training steps each at --size (tiny by default);
 2. what the backend costs per operation against bare OpenCL launches on the same
    queue (bench/opencl.c): the framework's overhead per enqueued operation next to the
    OpenCL implementation's own launch cost.

    python3 bench/run_opencl.py [--benchmark build/benchmark] [--bench-opencl build/bench_opencl]
                                [--size tiny] [--iters 3] [--warmup 5] [--threads 2]
                                [--models "mnist vit"] [--out build/bench-opencl.json]
                                [--torch-device cuda [--python python3]]

--torch-device trains the same models in PyTorch on that device (bench/torch/harness.py
--device) at the same size, warm-up and iterations, one model after the other on each
side, and adds PyTorch's seconds and Flare's ratio to each row: on a machine with an
NVIDIA GPU, `--torch-device cuda` puts Flare's opencl backend and PyTorch's CUDA side by
side on the same card.

A model that fails on opencl (a primitive the backend lacks, say) is recorded with its
error rather than stopping the run. With PoCL the OpenCL device is this machine's CPU,
so every number here is what Flare and PoCL cost on a CPU, not a GPU's speed; the
report says so.

Only the standard library: a fresh machine runs it with the system's python3.
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run_ops import benchmark_environment, machine_name, write_report  # noqa: E402

MODEL_TIMEOUT = 1800  # seconds for one model's run; a paper-size model on PoCL is slow
KEPT = ("name", "size", "params", "batch", "threads", "warmup", "iters", "seconds", "fastest", "slowest",
        "data_s", "forward_s", "backward_s", "step_s", "samples_per_s", "peak_rss", "flops_per_iter", "gflops")


def last_line(text):
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def model_row(args, name, env):
    command = [args.benchmark, "--model", name, "--backend", "opencl", "--size", args.size, "--iters",
               str(args.iters), "--warmup", str(args.warmup), "--threads", str(args.threads),
               "--peak-gflops", "1", "--json"]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=MODEL_TIMEOUT)
    except subprocess.TimeoutExpired:
        return {"name": name, "error": f"no result within {MODEL_TIMEOUT} s"}
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not rows:
        return {"name": name, "error": last_line(done.stderr) or f"exit status {done.returncode}"}
    # The peak fraction is against --peak-gflops 1, a placeholder: an sgemm peak of PoCL
    # would say nothing about a device.
    return {key: rows[0][key] for key in KEPT if key in rows[0]}


def torch_row(args, name, env):
    """PyTorch's training step of the same model on --torch-device, or its error."""
    command = [args.python, str(HERE / "torch" / "harness.py"), "--model", name, "--size", args.size, "--iters",
               str(args.iters), "--warmup", str(args.warmup), "--threads", str(args.threads), "--device",
               args.torch_device]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=MODEL_TIMEOUT)
    except subprocess.TimeoutExpired:
        return {"error": f"no result within {MODEL_TIMEOUT} s"}
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not rows:
        return {"error": last_line(done.stderr) or f"exit status {done.returncode}"}
    return {key: rows[0][key] for key in ("seconds", "fastest", "slowest", "version", "device")}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--benchmark", default="build/benchmark")
    parser.add_argument("--bench-opencl", default="build/bench_opencl")
    parser.add_argument("--size", default="tiny", choices=["tiny", "cpu", "paper"])
    parser.add_argument("--iters", type=int, default=3)
    # The first steps build programs: the backend's kernels, and the fused updates of
    # SGD's momentum buffer, which takes three steps to reach its steady form.
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--models", help="space-separated names (default: every model of benchmark --list)")
    parser.add_argument("--out", default="build/bench-opencl.json")
    parser.add_argument("--torch-device", help="also train each model in PyTorch on this device (cuda)")
    parser.add_argument("--python", default=sys.executable, help="the Python that has PyTorch, for --torch-device")
    args = parser.parse_args()
    env = benchmark_environment(args.threads)

    overhead_run = subprocess.run([args.bench_opencl], env=env, capture_output=True, text=True)
    if overhead_run.returncode != 0:
        sys.exit(f"bench_opencl failed: {overhead_run.stderr.strip()}")
    overhead = json.loads(overhead_run.stdout)
    device = overhead.pop("device")
    note = overhead.pop("note")
    pocl = overhead.pop("pocl")

    names = args.models.split() if args.models else subprocess.run(
        [args.benchmark, "--list"], env=env, capture_output=True, text=True, check=True).stdout.split()
    models = []
    for name in names:
        row = model_row(args, name, env)
        if args.torch_device:
            row["torch"] = torch_row(args, name, env)
            if "seconds" in row and "seconds" in row["torch"]:
                row["ratio"] = row["seconds"] / row["torch"]["seconds"]
        models.append(row)
        shown = f"{row['seconds']:.4f} s/iter" if "seconds" in row else f"failed: {row['error']}"
        if "torch" in row:
            theirs = row["torch"]
            shown += (f", PyTorch {theirs['version']} on {theirs['device']} {theirs['seconds']:.4f} s/iter"
                      if "seconds" in theirs else f", PyTorch failed: {theirs['error']}")
            if "ratio" in row:
                shown += f", ratio {row['ratio']:.2f}"
        print(f"{name:>12}: {shown}", flush=True)

    report = {"device": device, "pocl": pocl, "machine": machine_name(), "note": note, "size": args.size,
              "threads": args.threads, "torch_device": args.torch_device, "models": models, "overhead": overhead}
    write_report(report, args.out)

    print(f"\nOpenCL device: {device}")
    print(f"{overhead['ops']} adds of {overhead['elements']} elements, then one read (median of "
          f"{overhead['repeats']} runs), per operation:")
    f32, i32 = overhead["flare_add_f32"], overhead["flare_add_i32"]
    print(f"  Flare, f32 (fused, {f32['launches_per_op']:.3f} launches an add): {f32['us_per_op']:8.2f} us")
    print(f"  Flare, i32 (one launch an add):            {i32['us_per_op']:8.2f} us")
    print(f"  OpenCL, bare launch of an empty kernel:     {overhead['bare_empty_kernel']['us_per_launch']:8.2f} us")
    print(f"  OpenCL, bare launch of an add kernel:       {overhead['bare_add_kernel']['us_per_launch']:8.2f} us")
    print(f"  Flare's cpu backend, f32:                   {overhead['cpu_add_f32']['us_per_op']:8.2f} us")
    print(f"  Flare over a bare launch, per unfused add:  {overhead['flare_over_bare_add_us']:8.2f} us")
    small = overhead["small_calls"]
    print(f"  Flare, softmax of [4, 16]:                  {small['softmax_4x16_us']:8.2f} us")
    print(f"  Flare, row sums of [4, 16]:                 {small['row_sum_4x16_us']:8.2f} us")
    total = overhead["sum_f32"]
    print(f"A sum of {total['elements']} f32 ones, read back (median): opencl {total['opencl_ms']:.2f} ms, "
          f"cpu {total['cpu_ms']:.2f} ms")
    print(f"\n{note}")
    if pocl:
        print("PoCL numbers are not GPU speed.")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
