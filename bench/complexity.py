"""Flare's complexity, measured as the Flashlight paper measures frameworks (Kahn et al.,
ICML 2022: Tables 1 and 2, appendix A.1 and A.2), printed beside the paper's figures for
PyTorch, TensorFlow and Flashlight and written to a JSON file.

    python3 bench/complexity.py [--out build/complexity.json] [--samples 20] [--seed 0]
                                [--jobs N] [--no-build] [--tree-samples 5]

Standard library only. What it measures:

- Lines of code by component. The paper (A.2.2) counts "only C, C++, Python, YAML, CUDA,
  and CMake files from a relevant subset of core framework components" and does not say
  whether blank and comment lines count; we follow its file types and report both code
  lines (non-blank, non-comment: cloc's "code" column, the usual meaning) and physical
  lines. The library is include/ + src/ + the CMake build; each folder is a component,
  discovered, not listed. Tests, benchmarks, apps and examples are listed apart.
- Operators: the entries of the backend table (src/backend/registry.c, checked against
  struct fl_backend in include/flare/backend.h), and among them those that perform an
  addition, a convolution or a summation, by A.2.1's rule and the classification below.
- Binary size: libflare.so stripped, alone and with the shared libraries it loads.
- Build time: a from-scratch configure and build of libflare in a private copy of the
  tree, in CPU-seconds (user + system of every process), and the incremental rebuild
  after touching a core source file drawn as in A.1.2 (without replacement, weighted by
  its lines). Then the whole tree (library, apps, benchmarks, tests) from scratch, and
  rebuilt after touching src/tensor/shape.c: what a developer waits for.

Nothing here touches the user's tree or build folder: the builds run in a temporary copy.
"""

import argparse
import json
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The paper's figures. Table 1 (binary size in MB, lines of code, operators, and the
# approximate number of operators that perform an addition, a convolution, a summation);
# Table 4 (binary size without the tensor library); Table 2 (CPU minutes).
PAPER = {
    "PyTorch":    {"binary_mb": 527, "binary_mb_no_tensor_lib": None, "lines": 1798292, "operators": 2166,
                   "add": 55, "conv": 85, "sum": 25, "build_cpu_min": 754, "incremental_cpu_min": 132},
    "TensorFlow": {"binary_mb": 768, "binary_mb_no_tensor_lib": 423, "lines": 1306159, "operators": 1423,
                   "add": 20, "conv": 30, "sum": 10, "build_cpu_min": 2061, "incremental_cpu_min": 371},
    "Flashlight": {"binary_mb": 10, "binary_mb_no_tensor_lib": 7, "lines": 27173, "operators": 60,
                   "add": 1, "conv": 2, "sum": 1, "build_cpu_min": 34, "incremental_cpu_min": 0.6},
}

# What each backend primitive performs, by A.2.1: an operator counts for a function when
# that function is part of what it computes, "even if those operators perform other
# functions" (the paper's example: ADDMM counts as an addition). Sums hidden inside
# another function's arithmetic (the dot products of matmul, the batch sum of a weight
# gradient) do not count, as the paper's Flashlight figures (add 1, sum 1) show.
# Every primitive must appear here: a new one without a classification stops the script.
PERFORMS = {
    "from_host": (), "to_host": (), "full": (), "arange": (), "random": (), "cast": (),
    "reshape": (), "permute": (), "expand": (), "slice": (), "update_slice": (), "concat": (),
    "where": (), "gather": (), "scatter_add": ("add",), "index_select": (),
    "neg": (), "abs": (), "sign": (), "exp": (), "log": (), "log1p": (), "sqrt": (), "rsqrt": (),
    "sin": (), "cos": (), "tanh": (), "sigmoid": (), "erf": (),
    "floor": (), "ceil": (), "round": (), "isnan": (), "isinf": (), "logical_not": (),
    "add": ("add",), "sub": (), "mul": (), "div": (), "pow": (), "minimum": (), "maximum": (),
    "eq": (), "ne": (), "lt": (), "le": (), "logical_and": (), "logical_or": (),
    "sum": ("sum",), "prod": (), "max": (), "min": (), "argmax": (), "argmin": (),
    "cumsum": ("sum",), "sort": (),
    "matmul": (), "conv2d": ("conv",), "conv2d_backward_input": ("conv",),
    "conv2d_backward_weight": ("conv",), "pool2d": (), "pool2d_backward": (),
    # optional fused kernels: each also performs what its composition does
    "softmax": ("sum",), "batch_norm": ("sum",), "batch_norm_backward": ("sum",),
    "gelu": (),
    # host access, for the layers that hand memory to outside code
    "empty": (), "host_data": (),
    # the fused LSTM cell: c = f c_prev + i g, and its gradient's sums of products
    "lstm_cell": ("add",), "lstm_cell_backward": ("add",),
    # the fused LSTM recurrence: each step's cell, and its gradient's carried dh and dc
    "lstm_sequence": ("add",), "lstm_sequence_backward": ("add",),
    # alpha a + beta b
    "add_scaled": ("add",),
    # (softmax - s / C) r, plus the target's term added at its class
    "cross_entropy_backward": ("add",),
    # x W^T + b: the bias's add (the products' sums are matmul's, which counts none)
    "linear": ("add",),
    # SGD's step: the buffer's, the step's and weight decay's scaled sums
    "sgd_update": ("add",),
    # Adam's step: the moments' running sums, the denominator's eps and the step
    "adam_update": ("add",),
}
FUNCTIONS = ("add", "conv", "sum")

# File types the paper counts (A.2.2), by suffix; CMakeLists.txt by name.
LANGUAGES = {".c": "C", ".h": "C", ".cc": "C++", ".cpp": "C++", ".hpp": "C++", ".cu": "CUDA", ".cuh": "CUDA",
             ".py": "Python", ".yaml": "YAML", ".yml": "YAML", ".cmake": "CMake"}

# The C runtime every program loads; listed, but not counted as Flare's dependencies.
C_RUNTIME = re.compile(r"^(linux-vdso|linux-gate|ld-linux.*|libc|libm|libpthread|libdl|librt)\.so")


def fail(message):
    sys.exit(f"complexity.py: {message}")


# -- the files ---------------------------------------------------------------------

def source_files():
    """The tree's files as git sees them (tracked, and untracked but not ignored), so
    build folders never count; a plain walk skipping build* where there is no git."""
    try:
        listing = subprocess.run(["git", "-C", str(ROOT), "ls-files", "--cached", "--others", "--exclude-standard",
                                  "-z"], capture_output=True, check=True).stdout.decode()
        paths = [Path(p) for p in listing.split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        paths = []
        for directory, subdirs, files in os.walk(ROOT):
            subdirs[:] = [d for d in subdirs if not d.startswith((".", "build"))]
            paths += [Path(directory, f).relative_to(ROOT) for f in files]
    return sorted(p for p in paths if (ROOT / p).is_file())


def language(path):
    return "CMake" if path.name == "CMakeLists.txt" else LANGUAGES.get(path.suffix)


def code_lines_c(text):
    """Lines with something besides blanks and comments; string and character literals
    are followed so that a "/*" inside one opens nothing."""
    count = 0
    in_block = False
    for line in text.splitlines():
        has_code = False
        i = 0
        while i < len(line):
            if in_block:
                end = line.find("*/", i)
                if end < 0:
                    break
                in_block, i = False, end + 2
            elif line.startswith("/*", i):
                in_block, i = True, i + 2
            elif line.startswith("//", i):
                break
            elif line[i] in "\"'":
                quote, i, has_code = line[i], i + 1, True
                while i < len(line) and line[i] != quote:
                    i += 2 if line[i] == "\\" else 1
                i += 1
            else:
                has_code = has_code or not line[i].isspace()
                i += 1
        count += has_code
    return count


def code_lines_hash(text):
    """Python, YAML and CMake: '#' starts a comment line (docstrings count as code)."""
    return sum(1 for line in text.splitlines() if line.strip() and not line.strip().startswith("#"))


def count_lines(path):
    text = (ROOT / path).read_text(errors="replace")
    lang = language(path)
    code = code_lines_c(text) if lang in ("C", "C++", "CUDA") else code_lines_hash(text)
    return {"code": code, "physical": len(text.splitlines())}


def check_counters():
    """The line counter on the cases that would fool a naive one."""
    sample = 'int a; /* one\n two */ int b;\n// c\n\n  /* "*/ s = "/* not a comment";\n x = \'"\'; /*\n*/\n'
    if code_lines_c(sample) != 4:
        fail(f"self-check: code_lines_c gives {code_lines_c(sample)} (expected 4)")


def component(path):
    """The library's components are its folders (include/flare, src/tensor,
    src/backends/cpu, ...) and its CMake build; everything else is grouped by its
    top-level folder and listed apart."""
    parts = path.parts
    if parts[0] in ("src", "include"):
        return "library", str(path.parent)
    if path.name == "CMakeLists.txt" and len(parts) == 1 or parts[0] == "cmake":
        return "library", "CMake build"
    return "apart", parts[0] if len(parts) > 1 else "(top level)"


def lines_of_code(files):
    groups = {"library": {}, "apart": {}}
    for path in files:
        lang = language(path)
        if not lang:
            continue
        kind, name = component(path)
        entry = groups[kind].setdefault(name, {"files": 0, "code": 0, "physical": 0, "languages": {}})
        counts = count_lines(path)
        entry["files"] += 1
        entry["code"] += counts["code"]
        entry["physical"] += counts["physical"]
        entry["languages"][lang] = entry["languages"].get(lang, 0) + counts["code"]
    for required in ("include/flare", "src/tensor", "src/backend", "src/backends/cpu"):
        if required not in groups["library"]:
            fail(f"no C sources found in {required}/; is {ROOT} a Flare checkout?")
    library = groups["library"]
    return {
        "definition": "code = lines with anything besides blanks and comments; physical = all lines; "
                      "files: C, C++, CUDA, Python, YAML, CMake (the paper's A.2.2 list)",
        "library": dict(sorted(library.items(), key=lambda kv: (kv[0] == "CMake build", kv[0]))),
        "library_total": {"code": sum(v["code"] for v in library.values()),
                          "code_c": sum(v["languages"].get("C", 0) for v in library.values()),
                          "physical": sum(v["physical"] for v in library.values()),
                          "files": sum(v["files"] for v in library.values())},
        "apart": dict(sorted(groups["apart"].items())),
    }


# -- the operators -------------------------------------------------------------------

def primitives():
    """The operation entries of struct fl_backend, from the one list that generates it
    (FL_BACKEND_OPERATIONS in include/flare/backend.h)."""
    header = (ROOT / "include/flare/backend.h").read_text()
    listing = re.search(r"#define FL_BACKEND_OPERATIONS\(X\)(.*?)\n\n", header, re.S)
    if not listing:
        fail("include/flare/backend.h: no FL_BACKEND_OPERATIONS list")
    body = re.sub(r"/\*.*?\*/", " ", listing.group(1), flags=re.S)
    names = re.findall(r"\bX\(\s*\d+\s*,\s*(\w+)", body)
    if not names:
        fail("include/flare/backend.h: FL_BACKEND_OPERATIONS lists no entry")

    unclassified = sorted(set(names) - set(PERFORMS))
    stale = sorted(set(PERFORMS) - set(names))
    if unclassified or stale:
        fail("bench/complexity.py: PERFORMS must classify every backend primitive, and only those:\n"
             f"  missing: {unclassified}\n  no longer primitives: {stale}")
    performing = {f: [n for n in names if f in PERFORMS[n]] for f in FUNCTIONS}
    return {"count": len(names), "names": names, "performing": performing,
            **{f: len(performing[f]) for f in FUNCTIONS}}


# -- building ------------------------------------------------------------------------

def timed(command, cwd=None, log=None):
    """Runs command; returns (CPU-seconds of it and all its descendants, wall seconds).
    wait4 gives the child's resource usage, which includes every descendant it waited
    for: the compilers and linkers under cmake and ninja."""
    start = time.perf_counter()
    with open(log or os.devnull, "ab") as out:
        process = subprocess.Popen(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    if process.returncode != 0:
        tail = Path(log).read_text(errors="replace")[-3000:] if log else ""
        fail(f"{' '.join(command)} failed with status {process.returncode}\n{tail}")
    return usage.ru_utime + usage.ru_stime, wall


def copy_tree(files, destination):
    for path in files:
        target = destination / path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / path, target)


def build_library(source, build, jobs, log):
    generator = "Ninja" if shutil.which("ninja") else "Unix Makefiles"
    configure_cpu, configure_wall = timed(
        ["cmake", "-S", str(source), "-B", str(build), "-G", generator, "-DCMAKE_BUILD_TYPE=Release",
         "-DFLARE_TESTS=OFF", "-DFLARE_BENCH=OFF"], log=log)
    build_cpu, build_wall = timed(["cmake", "--build", str(build), "--target", "flare", "-j", str(jobs)], log=log)
    return {"generator": generator, "jobs": jobs, "target": "flare (libflare.so, CMake Release, default options)",
            "configure_cpu_s": configure_cpu, "configure_wall_s": configure_wall,
            "build_cpu_s": build_cpu, "build_wall_s": build_wall,
            "cpu_s": configure_cpu + build_cpu, "wall_s": configure_wall + build_wall}


def weighted_sample(population, weights, count, rng):
    """A.1.2: drawn without replacement, each file with probability proportional to its
    lines. Past the end of the population, a new round starts."""
    chosen = []
    while len(chosen) < count:
        left, left_weights = list(population), list(weights)
        while left and len(chosen) < count:
            i = rng.choices(range(len(left)), weights=left_weights)[0]
            chosen.append(left.pop(i))
            left_weights.pop(i)
    return chosen


def incremental_rebuilds(source, build, jobs, samples, seed, log):
    # Core sources: the library's own C files and headers (src/ and the public headers).
    core = sorted(p.relative_to(source) for p in list((source / "src").rglob("*.[ch]"))
                  + list((source / "include").rglob("*.h")))
    weights = [len((source / p).read_text(errors="replace").splitlines()) for p in core]
    rng = random.Random(seed)
    results = []
    for path in weighted_sample(core, weights, samples, rng):
        # A touch is the trivial change that forces recompilation; a strictly later
        # time than anything built so far, whatever the file system's granularity.
        stamp = max(time.time_ns(), (source / path).stat().st_mtime_ns + 1_000_000_000)
        os.utime(source / path, ns=(stamp, stamp))
        before = Path(log).stat().st_size
        cpu, wall = timed(["cmake", "--build", str(build), "--target", "flare", "-j", str(jobs)], log=log)
        with open(log, "rb") as f:
            f.seek(before)
            if b"Linking C shared library" not in f.read():
                fail(f"touching {path} did not rebuild libflare.so")
        results.append({"file": str(path), "lines": weights[core.index(path)], "cpu_s": cpu, "wall_s": wall})

    def spread(key):
        values = [r[key] for r in results]
        return {"mean": statistics.mean(values), "stdev": statistics.stdev(values) if len(values) > 1 else 0.0,
                "median": statistics.median(values), "min": min(values), "max": max(values)}

    return {"samples": len(results), "seed": seed, "population": len(core),
            "population_definition": "src/**/*.c, src/**/*.h, include/**/*.h, weighted by physical lines",
            "cpu_s": spread("cpu_s"), "wall_s": spread("wall_s"), "rebuilds": results}


def tree_rebuilds(source, build, jobs, samples, log, touched="src/tensor/shape.c"):
    """What a developer waits for: the whole tree (library, apps, benchmarks, tests) built
    from scratch, then rebuilt after touching one source file of the library, samples
    times. The programs link the shared libraries, so they should not relink."""
    generator = "Ninja" if shutil.which("ninja") else "Unix Makefiles"
    configure_cpu, configure_wall = timed(["cmake", "-S", str(source), "-B", str(build), "-G", generator,
                                           "-DCMAKE_BUILD_TYPE=Release"], log=log)
    build_cpu, build_wall = timed(["cmake", "--build", str(build), "-j", str(jobs)], log=log)
    results = []
    for _ in range(samples):
        stamp = max(time.time_ns(), (source / touched).stat().st_mtime_ns + 1_000_000_000)
        os.utime(source / touched, ns=(stamp, stamp))
        before = Path(log).stat().st_size
        cpu, wall = timed(["cmake", "--build", str(build), "-j", str(jobs)], log=log)
        with open(log, "rb") as f:
            f.seek(before)
            output = f.read()
        if b"Linking C shared library" not in output:
            fail(f"touching {touched} did not relink the shared libraries")
        results.append({"cpu_s": cpu, "wall_s": wall, "programs_relinked": output.count(b"Linking C executable")})
    return {"generator": generator, "jobs": jobs, "touched": touched, "samples": samples,
            "from_scratch_cpu_s": configure_cpu + build_cpu, "from_scratch_wall_s": configure_wall + build_wall,
            "cpu_s": statistics.median(r["cpu_s"] for r in results),
            "wall_s": statistics.median(r["wall_s"] for r in results),
            "programs_relinked": max(r["programs_relinked"] for r in results), "rebuilds": results}


def shared_library(build):
    candidates = sorted(p for p in build.glob("libflare.so*") if not p.is_symlink())
    if not candidates:
        fail(f"the build produced no libflare.so in {build}")
    return candidates[0]


def binary_sizes(library, scratch):
    stripped = scratch / "libflare.stripped.so"
    shutil.copy2(library, stripped)
    subprocess.run(["strip", "--strip-unneeded", str(stripped)], check=True)

    ldd = subprocess.run(["ldd", str(library)], capture_output=True, text=True, check=True).stdout
    dependencies, runtime = [], []
    for line in ldd.splitlines():
        match = re.match(r"\s*(\S+)\s*(?:=>\s*(\S+))?\s*\(0x", line)
        if not match:
            if "not found" in line:
                fail(f"ldd {library}: {line.strip()}")
            continue
        name, path = match.group(1), match.group(2) or (match.group(1) if match.group(1).startswith("/") else None)
        real = os.path.realpath(path) if path else None
        entry = {"name": Path(name).name, "file": real, "bytes": os.path.getsize(real) if real else 0}
        (runtime if C_RUNTIME.match(Path(name).name) else dependencies).append(entry)
    if not any(d["name"].startswith("libdnnl") for d in dependencies):
        fail(f"ldd {library}: libdnnl is not among its dependencies")
    alone = os.path.getsize(stripped)
    return {
        "definition": "stripped = strip --strip-unneeded copy of the shared library; with dependencies = plus the "
                      "files (as installed) of every shared library ldd resolves, transitively, except the C "
                      "runtime (libc, libm, ld-linux, ...); MB = 10^6 bytes",
        "unstripped_bytes": os.path.getsize(library),
        "stripped_bytes": alone,
        "with_dependencies_bytes": alone + sum(d["bytes"] for d in dependencies),
        "dependencies": dependencies,
        "c_runtime_not_counted": runtime,
    }


def measure_build(files, jobs, samples, seed, tree_samples):
    with tempfile.TemporaryDirectory(prefix="flare-complexity-") as scratch:
        scratch = Path(scratch)
        source, build, log = scratch / "src", scratch / "build", scratch / "build.log"
        copy_tree(files, source)
        from_scratch = build_library(source, build, jobs, str(log))
        sizes = binary_sizes(shared_library(build), scratch)
        incremental = incremental_rebuilds(source, build, jobs, samples, seed, str(log))
        tree = tree_rebuilds(source, scratch / "build-tree", jobs, tree_samples, str(log)) if tree_samples else None
    return from_scratch, sizes, incremental, tree


# -- the report ----------------------------------------------------------------------

def table(rows, header):
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in
                               enumerate(zip(r, widths)))
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def megabytes(n):
    return f"{n / 1e6:.1f}"


def print_report(report):
    loc = report["lines_of_code"]
    rows = [[name, v["files"], f"{v['code']:,}", f"{v['physical']:,}"] for name, v in loc["library"].items()]
    total = loc["library_total"]
    rows.append(["library total", total["files"], f"{total['code']:,}", f"{total['physical']:,}"])
    rows.append(["  of which C", "", f"{total['code_c']:,}", ""])
    rows += [[f"{name} (apart)", v["files"], f"{v['code']:,}", f"{v['physical']:,}"]
             for name, v in loc["apart"].items()]
    print("Lines of code by component (code = non-blank, non-comment)\n")
    print(table(rows, ["component", "files", "code", "physical"]))

    ops = report["operators"]
    print("\nBackend primitives that perform an addition, a convolution, a summation (A.2.1)\n")
    for f in FUNCTIONS:
        print(f"  {f:5} {ops[f]}: {', '.join(ops['performing'][f])}")

    flare = {"binary_mb": None, "binary_mb_no_tensor_lib": None, "lines": total["code"], "operators": ops["count"],
             **{f: ops[f] for f in FUNCTIONS}, "build_cpu_min": None, "incremental_cpu_min": None}
    sizes, build, inc = report.get("binary_size"), report.get("build_from_scratch"), report.get("incremental_rebuild")
    if sizes:
        flare["binary_mb"] = megabytes(sizes["with_dependencies_bytes"])
        flare["binary_mb_no_tensor_lib"] = megabytes(sizes["stripped_bytes"])
    if build:
        flare["build_cpu_min"] = f"{build['cpu_s'] / 60:.2f}"
        flare["incremental_cpu_min"] = f"{inc['cpu_s']['mean'] / 60:.3f}"

    frameworks = list(PAPER) + ["Flare"]
    figures = {**PAPER, "Flare": flare}
    show = lambda v: "n/a" if v is None else (f"{v:,}" if isinstance(v, int) else str(v))
    metrics = [("binary size, MB (with tensor libs)", "binary_mb"),
               ("binary size, MB (no tensor lib)", "binary_mb_no_tensor_lib"),
               ("lines of code", "lines"), ("number of operators", "operators"),
               ("ops that perform: add", "add"), ("ops that perform: conv", "conv"),
               ("ops that perform: sum", "sum")]
    print("\nTable 1 (and 4): the paper's figures and Flare's\n")
    print(table([[label] + [show(figures[f][key]) for f in frameworks] for label, key in metrics],
                ["metric"] + frameworks))
    if build:
        print("\nTable 2: compile time in CPU minutes\n")
        print(table([[f, show(figures[f]["build_cpu_min"]), show(figures[f]["incremental_cpu_min"])]
                     for f in frameworks], ["platform", "from scratch", "incremental"]))
        print(f"\nFlare: from scratch {build['cpu_s']:.1f} CPU-s ({build['wall_s']:.1f} s wall, "
              f"{build['generator']} -j{build['jobs']}, {report['machine']['cores']} cores); incremental over "
              f"{inc['samples']} touched files: {inc['cpu_s']['mean']:.2f} ± {inc['cpu_s']['stdev']:.2f} CPU-s "
              f"(min {inc['cpu_s']['min']:.2f}, max {inc['cpu_s']['max']:.2f}), "
              f"{inc['wall_s']['mean']:.2f} ± {inc['wall_s']['stdev']:.2f} s wall")
        tree = report.get("tree_rebuild")
        if tree:
            print(f"Whole tree (library, apps, benchmarks, tests): from scratch {tree['from_scratch_cpu_s']:.1f} CPU-s "
                  f"({tree['from_scratch_wall_s']:.1f} s wall); touching {tree['touched']} rebuilds it in "
                  f"{tree['cpu_s']:.2f} CPU-s ({tree['wall_s']:.2f} s wall), median of {tree['samples']}, "
                  f"relinking {tree['programs_relinked']} programs")
        deps = ", ".join(f"{d['name']} {megabytes(d['bytes'])}" for d in sizes["dependencies"])
        print(f"Binary: libflare.so {megabytes(sizes['stripped_bytes'])} MB stripped "
              f"({megabytes(sizes['unstripped_bytes'])} MB unstripped); dependencies (MB): {deps}")


def machine():
    model = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    compiler = subprocess.run(["cc", "--version"], capture_output=True, text=True).stdout.splitlines()
    return {"cpu": model, "cores": len(os.sched_getaffinity(0)), "load_average": os.getloadavg(),
            "compiler": compiler[0] if compiler else None}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "build" / "complexity.json"))
    parser.add_argument("--samples", type=int, default=20, help="incremental rebuilds (at least 20)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--no-build", action="store_true", help="count lines and operators only")
    parser.add_argument("--tree-samples", type=int, default=5,
                        help="rebuilds of the whole tree after touching one file (0: skip the whole tree)")
    args = parser.parse_args()
    if args.samples < 20 and not args.no_build:
        fail("--samples: the method asks for at least 20 incremental rebuilds")
    for tool in ("cmake", "strip", "ldd") if not args.no_build else ():
        if not shutil.which(tool):
            fail(f"{tool} is not installed")

    check_counters()
    files = source_files()
    report = {"paper": PAPER, "machine": machine(), "lines_of_code": lines_of_code(files),
              "operators": primitives()}
    if not args.no_build:
        report["build_from_scratch"], report["binary_size"], report["incremental_rebuild"], tree = \
            measure_build(files, args.jobs, args.samples, args.seed, args.tree_samples)
        if tree:
            report["tree_rebuild"] = tree
    print_report(report)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()
