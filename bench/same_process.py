"""Flare and PyTorch in one process: libflare through ctypes beside torch, their
batches alternated, so that both share the process's threads (one libgomp), its
memory and every load spike. A diagnostic for rows of `make bench-ops` that are close,
where two processes differ by more than the frameworks do (docs/BENCHMARKS.md).

    python bench/same_process.py [--lib build/libflare.so ...] [--threads 2] [--rounds 40]
                                 [--batch 300] [CASE ...]

CASE is add_1e6, mul_1e6, sum_dim1_4096x4096 (these three by default), exp_1e6 or
sum_dim0_4096x4096. Given --lib more
than once, it loads every build (each with its own memory manager and globals) and
also reports each one's median round ratio to the first: an A/B of a change to Flare
on the same load, e.g. a build of the parent commit against this one.
"""

import argparse
import ctypes
import statistics
import time

import torch

def flare_library(path, threads):
    lib = ctypes.CDLL(path)
    pointer = ctypes.c_void_p
    for name in ("fl_randn", "fl_add", "fl_mul", "fl_exp", "fl_sum"):
        getattr(lib, name).restype = pointer
    lib.fl_randn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int64)]
    lib.fl_add.argtypes = lib.fl_mul.argtypes = [pointer, pointer]
    lib.fl_exp.argtypes = [pointer]
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


def make_case(lib, name):
    """(flare, torch): two callables that run the case once and drop the result."""
    dtype = f32(lib)

    def randn(*shape):
        t = lib.fl_randn(dtype, len(shape), (ctypes.c_int64 * len(shape))(*shape))
        if not t:
            raise RuntimeError(f"fl_randn{shape} failed")
        return t
    def release(result):
        if not result:  # a failed operation must not be timed as a fast one
            raise RuntimeError(f"{name}: {lib.fl_last_error().decode()}")
        lib.fl_release(result)

    if name in ("add_1e6", "mul_1e6"):
        fx, fy, tx, ty = randn(10**6), randn(10**6), torch.randn(10**6), torch.randn(10**6)
        if name == "add_1e6":
            return (lambda: release(lib.fl_add(fx, fy))), (lambda: tx + ty)
        return (lambda: release(lib.fl_mul(fx, fy))), (lambda: tx * ty)
    if name == "exp_1e6":
        fx, tx = randn(10**6), torch.randn(10**6)
        return (lambda: release(lib.fl_exp(fx))), (lambda: tx.exp())
    if name in ("sum_dim0_4096x4096", "sum_dim1_4096x4096"):
        dim = int(name[7])
        fx, tx, axis = randn(4096, 4096), torch.randn(4096, 4096), (ctypes.c_int * 1)(dim)
        return (lambda: release(lib.fl_sum(fx, axis, 1, False))), (lambda: tx.sum(dim))
    raise SystemExit(f"unknown case {name}")


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
        cases = [make_case(lib, name) for lib in libs]  # once each: inputs placed as in bench-ops
        runs = [flare for flare, _ in cases] + [cases[0][1]]
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


if __name__ == "__main__":
    main()
