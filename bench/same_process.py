"""Flare and PyTorch in one process: libflare through ctypes beside torch, their
batches alternated, so that both share the process's threads (one libgomp), its
memory and every load spike. A diagnostic for rows of `make bench-ops` that are close,
where two processes differ by more than the frameworks do (docs/BENCHMARKS.md).

    python bench/same_process.py [--lib build/libflare.so ...] [--threads 2] [--rounds 40]
                                 [--batch 300] [CASE ...]

CASE is add_1e6, mul_1e6, sum_dim1_4096x4096 (these three by default), exp_1e6,
sum_dim0_4096x4096, or one of the LSTM language model's step: its input gradients
matmul_700x1024x256 and matmul_700x2000x256 ([700, K] x [K, 256]), its head
linear_700x256x2000 (with the bias), its weight gradients weight_grad_2000x700x256
and weight_grad_1024x700x256 (dY^T x over 700 rows), its loss's
log_softmax_700x2000, the head's bias gradient sum_dim0_700x2000, its batch-first
copy transposed_copy_20x35x256 and the padding of a layer's output gradient
pad_35x20x256. Given --lib more than once, it loads every build (each with its own
memory manager and globals) and also reports each one's median round ratio to the
first: an A/B of a change to Flare on the same load, e.g. a build of the parent
commit against this one.
"""

import argparse
import ctypes
import statistics
import time

import torch

def flare_library(path, threads):
    lib = ctypes.CDLL(path)
    pointer = ctypes.c_void_p
    for name in ("fl_randn", "fl_add", "fl_mul", "fl_exp", "fl_sum", "fl_matmul", "fl_transpose", "fl_linear",
                 "fl_copy", "fl_log_softmax", "fl_pad"):
        getattr(lib, name).restype = pointer
    lib.fl_randn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int64)]
    lib.fl_add.argtypes = lib.fl_mul.argtypes = lib.fl_matmul.argtypes = [pointer, pointer]
    lib.fl_exp.argtypes = [pointer]
    lib.fl_transpose.argtypes = [pointer, ctypes.c_int, ctypes.c_int]
    lib.fl_linear.argtypes = [pointer, pointer, pointer]
    lib.fl_copy.argtypes = [pointer]
    lib.fl_log_softmax.argtypes = [pointer, ctypes.c_int]
    lib.fl_pad.argtypes = [pointer, ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int64), ctypes.c_double]
    lib.fl_sum.argtypes = [pointer, ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_bool]
    lib.fl_release.argtypes = [pointer]
    lib.fl_set_num_threads(threads)
    lib.fl_dtype_name.restype = ctypes.c_char_p
    lib.fl_last_error.restype = ctypes.c_char_p
    return lib


def f32(lib):
    """fl_dtype's FL_F32, found by name rather than by its place in the enum."""
    for code in range(16):
        if lib.fl_dtype_name(code) == b"f32":
            return code
    raise RuntimeError("libflare has no dtype named f32")


def weight_grad(lib, dy, x):
    """A linear layer's weight gradient dY^T x, through a transposed view as the layer takes it."""
    dy_t = lib.fl_transpose(dy, 0, 1)
    dw = lib.fl_matmul(dy_t, x)
    lib.fl_release(dy_t)
    return dw


def transposed_copy(lib, x):
    """x [N, T, F] copied to [T, N, F]: a batch-first sequence made time-major."""
    view = lib.fl_transpose(x, 0, 1)
    y = lib.fl_copy(view)
    lib.fl_release(view)
    return y


# Each case: its input shapes and what it does, in Flare (lib, inputs) and in PyTorch.
CASES = {
    "add_1e6": ([(10**6,), (10**6,)], lambda lib, x, y: lib.fl_add(x, y), lambda x, y: x + y),
    "mul_1e6": ([(10**6,), (10**6,)], lambda lib, x, y: lib.fl_mul(x, y), lambda x, y: x * y),
    "exp_1e6": ([(10**6,)], lambda lib, x: lib.fl_exp(x), lambda x: x.exp()),
    "sum_dim0_4096x4096": ([(4096, 4096)], lambda lib, x: lib.fl_sum(x, (ctypes.c_int * 1)(0), 1, False),
                           lambda x: x.sum(0)),
    "sum_dim1_4096x4096": ([(4096, 4096)], lambda lib, x: lib.fl_sum(x, (ctypes.c_int * 1)(1), 1, False),
                           lambda x: x.sum(1)),
    "matmul_700x1024x256": ([(700, 1024), (1024, 256)], lambda lib, x, w: lib.fl_matmul(x, w), lambda x, w: x @ w),
    "matmul_700x2000x256": ([(700, 2000), (2000, 256)], lambda lib, x, w: lib.fl_matmul(x, w), lambda x, w: x @ w),
    "linear_700x256x2000": ([(700, 256), (2000, 256), (2000,)], lambda lib, x, w, b: lib.fl_linear(x, w, b),
                            lambda x, w, b: torch.nn.functional.linear(x, w, b)),
    "weight_grad_2000x700x256": ([(700, 2000), (700, 256)], weight_grad, lambda dy, x: dy.t() @ x),
    "weight_grad_1024x700x256": ([(700, 1024), (700, 256)], weight_grad, lambda dy, x: dy.t() @ x),
    "log_softmax_700x2000": ([(700, 2000)], lambda lib, x: lib.fl_log_softmax(x, -1), lambda x: x.log_softmax(-1)),
    "sum_dim0_700x2000": ([(700, 2000)], lambda lib, x: lib.fl_sum(x, (ctypes.c_int * 1)(0), 1, False),
                          lambda x: x.sum(0)),
    "transposed_copy_20x35x256": ([(20, 35, 256)], transposed_copy, lambda x: x.transpose(0, 1).contiguous()),
    "pad_35x20x256": ([(35, 20, 256)], lambda lib, x: lib.fl_pad(x, (ctypes.c_int64 * 3)(0, 0, 0),
                                                                (ctypes.c_int64 * 3)(35, 0, 0), 0.0),
                      lambda x: torch.nn.functional.pad(x, (0, 0, 0, 0, 0, 35))),
}


def flare_case(lib, name):
    """(run, inputs): a callable that runs the case once in lib and drops the result,
    and the Flare inputs it holds, for the caller to release after the case."""
    shapes, operation, _ = CASES[name]
    dtype = f32(lib)
    inputs = []
    for shape in shapes:
        t = lib.fl_randn(dtype, len(shape), (ctypes.c_int64 * len(shape))(*shape))
        if not t:
            raise RuntimeError(f"fl_randn{shape} failed")
        inputs.append(t)

    def run():
        result = operation(lib, *inputs)
        if not result:  # a failed operation must not be timed as a fast one
            raise RuntimeError(f"{name}: {lib.fl_last_error().decode()}")
        lib.fl_release(result)
    return run, inputs


def torch_case(name):
    shapes, _, operation = CASES[name]
    inputs = [torch.randn(*shape) for shape in shapes]
    return lambda: operation(*inputs)


def per_operation(run, n):
    start = time.perf_counter()
    for _ in range(n):
        run()
    return (time.perf_counter() - start) / n


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lib", action="append", help="a libflare build (repeatable; default build/libflare.so)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--batch", type=int, default=300, help="operations per timed batch")
    parser.add_argument("cases", nargs="*", default=["add_1e6", "mul_1e6", "sum_dim1_4096x4096"])
    args = parser.parse_args()
    paths = args.lib or ["build/libflare.so"]
    torch.set_num_threads(args.threads)
    libs = [flare_library(path, args.threads) for path in paths]
    print(f"PyTorch {torch.__version__}, {args.threads} threads, {args.rounds} rounds of {args.batch} operations")
    for name in args.cases:
        if name not in CASES:
            raise SystemExit(f"unknown case {name}; the cases are {', '.join(CASES)}")
        cases = [flare_case(lib, name) for lib in libs]  # once each: inputs placed as in bench-ops
        runs = [run for run, _ in cases] + [torch_case(name)]
        for run in runs:
            per_operation(run, 3)  # warm-up
        times = [[] for _ in runs]
        for r in range(args.rounds):
            # Each round starts one later in the list, every other lap backwards, so
            # that no contestant always runs after the same one.
            order = list(range(len(runs)))
            order = order[r % len(runs):] + order[:r % len(runs)]
            if (r // len(runs)) % 2:
                order.reverse()
            for i in order:
                times[i].append(per_operation(runs[i], args.batch))
        reference = times[-1]
        print(f"{name:20s} PyTorch {statistics.median(reference) * 1e6:8.1f} us")
        for path, flare in zip(paths, times):
            ratios = [f / t for f, t in zip(flare, reference)]
            line = (f"  {path:40s} Flare {statistics.median(flare) * 1e6:8.1f} us  "
                    f"median round ratio {statistics.median(ratios):.3f}  "
                    f"Flare faster in {sum(r < 1 for r in ratios)} of {args.rounds}")
            if len(libs) > 1:
                line += f"  ratio to the first build {statistics.median(a / b for a, b in zip(flare, times[0])):.3f}"
            print(line)
        for lib, (_, inputs) in zip(libs, cases):  # the next case starts from the same memory
            for t in inputs:
                lib.fl_release(t)


if __name__ == "__main__":
    main()
