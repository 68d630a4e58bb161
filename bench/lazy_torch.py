"""The lazy-backend benchmark, PyTorch's side: the cases of bench/lazy.c written as
a PyTorch (eager) user writes them, timed the same way (median of --repeats runs
after a warm-up). Prints one JSON line per case: {"name", "backend": "torch",
"seconds", "fastest"}; LayerNorm and the optimizer's Adam step also as torch's own
fused kernel ("torch-native").

    lazy_torch.py [--threads N] [--repeats R]
"""

import argparse
import json
import math
import statistics
import time

import torch
import torch.nn.functional as F

ROWS, FEATURES, PARAMETERS = 9766, 1024, 10_000_000


def layer_norm_ops(x, w, b):
    """The same program as bench/lazy.c: mean, centre, variance, scale, affine."""
    mean = x.mean(-1, keepdim=True)
    centered = x - mean
    var = (centered * centered).mean(-1, keepdim=True)
    return centered * torch.rsqrt(var + 1e-5) * w + b


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    x = torch.randn(ROWS, FEATURES)
    w, b = torch.randn(FEATURES), torch.randn(FEATURES)
    p = torch.nn.Parameter(torch.randn(PARAMETERS))
    p.grad = torch.randn(PARAMETERS)
    # foreach=False: the single-tensor update, one tensor operation at a time (the
    # default for CPU tensors).
    adam = torch.optim.Adam([p], lr=1e-3, foreach=False)
    # The same step for fl_adam's case: torch.optim.Adam as a user makes it (its default
    # implementation for CPU tensors), and its fused kernel ("torch-native").
    q = torch.nn.Parameter(torch.randn(PARAMETERS))
    q.grad = torch.randn(PARAMETERS)
    r = torch.nn.Parameter(q.detach().clone())
    r.grad = q.grad.clone()
    adam_default = torch.optim.Adam([q], lr=1e-3)
    adam_fused = torch.optim.Adam([r], lr=1e-3, fused=True)

    cases = [
        ("gelu(x*w+b) [9766,1024]", "torch", lambda: F.gelu(x * w + b)),
        ("layer_norm [9766,1024]", "torch", lambda: layer_norm_ops(x, w, b)),
        ("layer_norm [9766,1024]", "torch-native", lambda: F.layer_norm(x, (FEATURES,), w, b, 1e-5)),
        ("adam step 10M", "torch", adam.step),
        ("fl_adam step 10M", "torch", adam_default.step),
        ("fl_adam step 10M", "torch-native", adam_fused.step),
    ]
    with torch.no_grad():
        for name, backend, run in cases:
            run()
            times = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                run()
                times.append(time.perf_counter() - start)
            print(json.dumps({"name": name, "backend": backend, "seconds": statistics.median(times),
                              "fastest": min(times)}), flush=True)


if __name__ == "__main__":
    main()
