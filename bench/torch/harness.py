"""The model benchmark in PyTorch, the twin of Flare's apps/benchmark: warm-up
iterations, then timed iterations of a training step (a batch of random data made in
memory, forward, backward, SGD with momentum), printing seconds per iteration (median
and spread), samples per second and peak resident memory as one JSON line.

    python bench/torch/harness.py --model NAME [--size cpu] [--batch B] [--warmup 2]
                                  [--iters 10] [--threads 2] [--lr 0.01] [--seed 1]
                                  [--compile] [--device cuda] [--profile] [--serve]

--compile runs the model through torch.compile (its default mode; the backward is
compiled with it, the optimizer runs eagerly). Compiling happens in the first warm-up
iteration; first_iteration_s, reported with or without it, is that iteration's time.

--device runs the model on another device (cuda, for the opencl backend's GPU row in
bench/run_opencl.py): the batch is made on the CPU and copied over in the data phase,
and each phase ends with a synchronize, so the times are the device's work.

--profile records the timed iterations with torch.profiler and prints its table of
operations (self CPU time, longest first) to stderr: the twin of FLARE_PROFILE=1 on
Flare's side (docs/BENCHMARKS.md, "Profiling a training step"). The profiler's own
cost is in the times it reports.

--serve is the protocol of Flare's `benchmark --serve`, for bench/run_models.py: after
the warm-up a JSON line, then for each input line "steps N" N timed steps and a line
{"seconds": their median}; when the input ends, the usual JSON line over every step
timed.

NAME is a module of this folder (resnet50.py, ...) exposing build(size), BATCH,
make_batch(size, batch, generator) and loss(model, input, target).
"""
import argparse
import importlib
import json
import resource
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))


def synchronized(device):
    """The time once the device's queued work is done."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--size", default="cpu", choices=["tiny", "cpu", "paper"])
    parser.add_argument("--batch", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--compile", action="store_true", help="run the model through torch.compile")
    parser.add_argument("--device", default="cpu", help="the device the model trains on (cpu, cuda)")
    parser.add_argument("--profile", action="store_true", help="print torch.profiler's table of the timed iterations")
    parser.add_argument("--serve", action="store_true", help="time steps on request (see above)")
    args = parser.parse_args()
    if args.iters < 1 or args.warmup < 0 or args.threads < 1 or args.batch < 0:
        parser.error("--iters and --threads must be positive, --warmup and --batch not negative")
    if args.compile and args.warmup < 1:
        parser.error("--compile needs a warm-up iteration (--warmup >= 1): the first one compiles")
    if args.serve and args.profile:
        parser.error("--profile times a fixed number of steps; not with --serve")

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    spec = importlib.import_module(args.model)
    batch = args.batch or spec.BATCH[args.size]
    device = torch.device(args.device)
    model = spec.build(args.size).to(device)
    model.train()
    forward_model = torch.compile(model) if args.compile else model
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    generator = torch.Generator().manual_seed(args.seed)

    phases = {"data_s": [], "forward_s": [], "backward_s": [], "step_s": [], "seconds": []}

    def step():
        """One training step; its phases' times."""
        start = time.perf_counter()
        images, targets = (t.to(device) for t in spec.make_batch(args.size, batch, generator))
        data_done = synchronized(device)
        loss = spec.loss(forward_model, images, targets)
        forward_done = synchronized(device)
        loss.backward()
        backward_done = synchronized(device)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        end = synchronized(device)
        return (data_done - start, forward_done - data_done, backward_done - forward_done, end - backward_done,
                end - start)

    def timed(count):
        """count steps, recorded in phases; the median of their times."""
        totals = []
        for _ in range(count):
            times = step()
            for key, value in zip(phases, times):
                phases[key].append(value)
            totals.append(times[-1])
        return statistics.median(totals)

    warmup = [step()[-1] for _ in range(args.warmup)]
    params = sum(p.numel() for p in model.parameters())
    if args.serve:
        print(json.dumps({"name": args.model, "params": params, "batch": batch, "threads": torch.get_num_threads(),
                          "warmup": args.warmup}), flush=True)
        for line in sys.stdin:
            words = line.split()
            if len(words) != 2 or words[0] != "steps" or not words[1].isdigit() or int(words[1]) < 1:
                print(json.dumps({"error": "expected a line 'steps N', N at least 1"}), flush=True)
                continue
            count = int(words[1])
            print(json.dumps({"seconds": timed(count), "steps": count}), flush=True)
        if not phases["seconds"]:
            sys.exit("harness: --serve: the input ended before any 'steps N' request")
        args.iters = len(phases["seconds"])
    else:
        profiler = torch.profiler.profile() if args.profile else None
        if profiler:
            profiler.start()
        timed(args.iters)
        if profiler:
            profiler.stop()
            print(profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=20), file=sys.stderr)

    result = {"name": args.model, "size": args.size, "params": params,
              "batch": batch, "threads": torch.get_num_threads(), "warmup": args.warmup, "iters": args.iters,
              "version": torch.__version__, "compiled": args.compile, "device": str(device),
              "first_iteration_s": (warmup or phases["seconds"])[0]}
    result.update({key: statistics.median(values) for key, values in phases.items()})
    result["fastest"], result["slowest"] = min(phases["seconds"]), max(phases["seconds"])
    result["samples_per_s"] = batch / result["seconds"]
    result["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    print(json.dumps(result))


if __name__ == "__main__":
    main()
