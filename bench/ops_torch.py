"""The operator benchmark, PyTorch's side: the cases of bench/ops.c, written as a
PyTorch user writes them, timed by the same method. bench/run_ops.py runs the two
side by side (docs/BENCHMARKS.md).

    ops_torch.py [--threads N] [--filter REGEX] [--min-time S] [--repeats R] [--list] [--serve]

Each case prints one JSON line {"name", "seconds", "fastest", "iterations", "repeats"}, or
"seconds": null and "error". With --serve it first prints {"cases": [...], "version": ...}
and then answers the requests on stdin (see Server), as bench_ops does.
"""

import argparse
import json
import math
import re
import statistics
import sys
import time
import timeit

import torch
import torch.nn.functional as F

aten = torch.ops.aten


def conv_backward(dy, x, w, output_mask):
    """The one aten kernel autograd runs for a 3x3, padding-1 convolution's backward;
    output_mask selects the single gradient each case computes."""
    return aten.convolution_backward(dy, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, output_mask)


def pool_indices(inputs):
    """What max_pool2d's forward saves for its backward when x requires a gradient."""
    return {"indices": aten.max_pool2d_with_indices(inputs["x"], [2, 2], [2, 2])[1]}


class Case:
    """statement runs once per iteration with the inputs (N(0, 1), named as in
    ops.c) as variables; its result is dropped at once, so each iteration allocates
    and frees it, as in ops.c. derive adds inputs computed before the timing."""

    def __init__(self, name, statement, inputs, derive=None, iterations=0):
        self.name, self.statement, self.inputs = name, statement, inputs
        self.derive, self.iterations = derive, iterations


# Slow operations get fewer repeats (at least one) so that a case stays within this.
MAX_CASE_TIME = 4.0

CONV_X = (8, 64, 56, 56)
CONV_W = (64, 64, 3, 3)
POOL_X = (8, 64, 112, 112)
POOL_Y = (8, 64, 56, 56)

CASES = [
    Case("sgemm_1024", "a @ b", {"a": (1024, 1024), "b": (1024, 1024)}),
    Case("sgemm_2048", "a @ b", {"a": (2048, 2048), "b": (2048, 2048)}),
    Case("linear_32x32x32", "F.linear(x, w)", {"x": (32, 32), "w": (32, 32)}),
    Case("linear_8x512x2048", "F.linear(x, w)", {"x": (8, 512), "w": (2048, 512)}),
    Case("linear_64x512x2048", "F.linear(x, w)", {"x": (64, 512), "w": (2048, 512)}),
    Case("linear_64x2048x512", "F.linear(x, w)", {"x": (64, 2048), "w": (512, 2048)}),
    Case("linear_1024x2048x512", "F.linear(x, w)", {"x": (1024, 2048), "w": (512, 2048)}),
    Case("matmul_64x512x2048", "x @ w", {"x": (64, 512), "w": (512, 2048)}),
    Case("matmul_64x2048x512", "x @ w", {"x": (64, 2048), "w": (2048, 512)}),
    Case("matmul_1024x2048x512", "x @ w", {"x": (1024, 2048), "w": (2048, 512)}),
    Case("linear_700x256x2000", "F.linear(x, w)", {"x": (700, 256), "w": (2000, 256)}),
    Case("linear_700x256x1024", "F.linear(x, w)", {"x": (700, 256), "w": (1024, 256)}),
    Case("linear_bias_700x256x2000", "F.linear(x, w, b)", {"x": (700, 256), "w": (2000, 256), "b": (2000,)}),
    Case("linear_bias_4096x512x2048", "F.linear(x, w, b)", {"x": (4096, 512), "w": (2048, 512), "b": (2048,)}),
    Case("linear_bias_4096x2048x512", "F.linear(x, w, b)", {"x": (4096, 2048), "w": (512, 2048), "b": (512,)}),
    Case("matmul_700x2000x256", "x @ w", {"x": (700, 2000), "w": (2000, 256)}),
    Case("matmul_700x1024x256", "x @ w", {"x": (700, 1024), "w": (1024, 256)}),
    Case("weight_grad_1024x700x256", "dy.t() @ x", {"dy": (700, 1024), "x": (700, 256)}),
    Case("weight_grad_1000x700x256", "dy.t() @ x", {"dy": (700, 1000), "x": (700, 256)}),
    Case("weight_grad_2000x700x256", "dy.t() @ x", {"dy": (700, 2000), "x": (700, 256)}),
    Case("weight_grad_1536x1024x512", "dy.t() @ x", {"dy": (1024, 1536), "x": (1024, 512)}),
    Case("weight_grad_256x2048x256", "dy.t() @ x", {"dy": (2048, 256), "x": (2048, 256)}),
    Case("weight_grad_512x1024x2048", "dy.t() @ x", {"dy": (1024, 512), "x": (1024, 2048)}),
    Case("add_1e6", "x + y", {"x": (10**6,), "y": (10**6,)}),
    Case("add_1e7", "x + y", {"x": (10**7,), "y": (10**7,)}),
    Case("mul_1e6", "x * y", {"x": (10**6,), "y": (10**6,)}),
    Case("mul_1e7", "x * y", {"x": (10**7,), "y": (10**7,)}),
    Case("exp_1e6", "torch.exp(x)", {"x": (10**6,)}),
    Case("exp_1e7", "torch.exp(x)", {"x": (10**7,)}),
    Case("sum_dim1_4096x4096", "x.sum(1)", {"x": (4096, 4096)}),
    Case("sum_dim0_4096x4096", "x.sum(0)", {"x": (4096, 4096)}),
    Case("softmax_8192x1000", "torch.softmax(x, -1)", {"x": (8192, 1000)}),
    Case("conv3x3_fwd_8x64x56x56", "F.conv2d(x, w, padding=1)", {"x": CONV_X, "w": CONV_W}),
    Case("conv3x3_bwd_input_8x64x56x56", "conv_backward(dy, x, w, (True, False, False))[0]",
         {"dy": CONV_X, "x": CONV_X, "w": CONV_W}),
    Case("conv3x3_bwd_weight_8x64x56x56", "conv_backward(dy, x, w, (False, True, False))[1]",
         {"dy": CONV_X, "x": CONV_X, "w": CONV_W}),
    Case("maxpool2x2_fwd_8x64x112x112", "F.max_pool2d(x, 2, 2)", {"x": POOL_X}),
    Case("maxpool2x2_bwd_8x64x112x112",
         "aten.max_pool2d_with_indices_backward(dy, x, [2, 2], [2, 2], [0, 0], [1, 1], False, indices)",
         {"dy": POOL_Y, "x": POOL_X}, derive=pool_indices),
    # The fixed cost of one operation, as a user's Python loop pays it.
    Case("overhead_add_4", "x + y", {"x": (4,), "y": (4,)}),
    Case("overhead_add_4_loop1e6", "x + y", {"x": (4,), "y": (4,)}, iterations=10**6),
]


def make_timer(case):
    """A timer running the case's statement on its inputs, the same for every run of
    it (seed 0)."""
    torch.manual_seed(0)
    variables = {"torch": torch, "F": F, "aten": aten, "conv_backward": conv_backward}
    inputs = {name: torch.randn(shape) for name, shape in case.inputs.items()}
    if case.derive:
        inputs.update(case.derive(inputs))
    variables.update(inputs)
    # timeit compiles the statement into its loop, so a batch costs no function calls
    # beyond the statement's own.
    return timeit.Timer(case.statement, timer=time.perf_counter, globals=variables)


def plan(case, timer, options):
    """One warm-up run; a batch size that takes min_time / repeats (grown until a batch
    takes half of that), and as many repeats as fit in MAX_CASE_TIME. plan_case() in
    ops.c does exactly the same. Returns (iterations, repeats)."""
    timer.timeit(1)
    batch_time = options.min_time / options.repeats
    n = case.iterations
    if n == 0:
        n = 1
        while (t := timer.timeit(n)) < batch_time / 2:
            n = 10 * n if t < batch_time / 100 else math.ceil(n * batch_time / t)
        per_operation = t / n
        n = math.ceil(batch_time / per_operation)
        t = per_operation * n
    else:
        t = timer.timeit(n)
    return n, int(max(1, min(options.repeats, math.floor(MAX_CASE_TIME / t))))


def measure(case, options):
    """The median over the planned repeats of the time per operation."""
    timer = make_timer(case)
    n, repeats = plan(case, timer, options)
    samples = [timer.timeit(n) / n for _ in range(repeats)]
    return {"name": case.name, "seconds": statistics.median(samples), "fastest": min(samples), "iterations": n,
            "repeats": repeats}


def failure(name, error):
    """A failing case is reported, as in ops.c."""
    return {"name": name, "seconds": None, "error": f"{type(error).__name__}: {error}"}


def run_case(case, options):
    try:
        return measure(case, options)
    except Exception as error:
        return failure(case.name, error)


class Server:
    """Answers the requests of the serve protocol, as answer() in ops.c:
        plan NAME     -> {"name", "iterations", "repeats"}
        time NAME N   -> {"name", "seconds"}: one batch of N runs, time per operation
    keeping one case's inputs until another case is named."""

    def __init__(self, options):
        self.options = options
        self.by_name = {case.name: case for case in CASES}
        self.case, self.timer = None, None

    def answer(self, request):
        words = request.split()
        planning = len(words) == 2 and words[0] == "plan"
        timing = len(words) == 3 and words[0] == "time" and words[2].isdigit() and int(words[2]) > 0
        if not planning and not timing:
            return {"name": request, "seconds": None, "error": "expected 'plan NAME' or 'time NAME ITERATIONS'"}
        name = words[1]
        case = self.by_name.get(name)
        if case is None:
            return {"name": name, "seconds": None, "error": "no such case"}
        try:
            if case is not self.case:
                self.case, self.timer = case, make_timer(case)
            if planning:
                n, repeats = plan(case, self.timer, self.options)
                return {"name": name, "iterations": n, "repeats": repeats}
            n = int(words[2])
            return {"name": name, "seconds": self.timer.timeit(n) / n}
        except Exception as error:
            return failure(name, error)


def emit(record):
    print(json.dumps(record), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--filter", default=None, help="run the cases whose name matches this regex")
    parser.add_argument("--min-time", type=float, default=0.3, help="timed seconds per case (default 0.3)")
    parser.add_argument("--repeats", type=int, default=5, help="timed batches per case (default 5)")
    parser.add_argument("--list", action="store_true", help="print the selected case names")
    parser.add_argument("--serve", action="store_true", help="run the cases named on stdin")
    options = parser.parse_args()
    if not options.min_time > 0 or not 1 <= options.repeats <= 1000 or (options.threads is not None and options.threads < 1):
        parser.error("--min-time and --threads must be positive, --repeats from 1 to 1000")
    if options.threads:
        torch.set_num_threads(options.threads)

    pattern = re.compile(options.filter) if options.filter else None
    selected = [case for case in CASES if not pattern or pattern.search(case.name)]
    if options.serve:
        emit({"cases": [case.name for case in selected], "threads": torch.get_num_threads(),
              "version": torch.__version__})
        server = Server(options)
        for line in sys.stdin:
            emit(server.answer(line.strip()))
        return
    for case in selected:
        if options.list:
            print(case.name)
        else:
            emit(run_case(case, options))


if __name__ == "__main__":
    main()
