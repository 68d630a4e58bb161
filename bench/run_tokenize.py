"""Encodes text side by side: Flare (bench/tokenize.c, built as build/bench_tokenize)
and the Hugging Face tokenizers library, with the same tokenizer.json files, and prints
the seconds to encode every line of a text (no special tokens), with the ratio
Flare / tokenizers (below 1 means Flare is faster).

    python bench/run_tokenize.py [--flare build/bench_tokenize] [--repeats 5]
                                 [--threads 2] [--out build/bench-tokenize.json]

The files are the published ones of tests/fixtures/published: gpt2's (byte-level BPE),
all-MiniLM-L6-v2's (WordPiece) and Phi-3-mini's (SentencePiece's BPE with byte
fallback); and, as no published Unigram file is at hand, the 800-piece Unigram of
tests/fixtures/text_unigram.json in T5's published layout (its Precompiled nmt_nfkc
normalizer, WhitespaceSplit and Metaspace; written to build/tokenize-unigram.json) and
in ALBERT's (TeX quotes, NFKD, StripAccents and Lowercase before the same map;
build/tokenize-unigram-albert.json).
The text is four files of Debian's fortunes package (computers, science,
literature, people), about 0.6 MB in 14,000 lines, written to build/tokenize-text.txt.
Flare encodes line by line on one thread. The library runs two ways: encode() line by
line, on one thread as Flare, and encode_batch() of all the lines on --threads threads
(RAYON_NUM_THREADS), as transformers' tokenizers call it. Every side runs in a fresh
process per round, --repeats rounds alternating which side goes first, three passes
over the text each; the medians are kept. Both sides' id counts and sums must agree.
"""

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from run_ops import benchmark_environment, machine_name, write_report

ROOT = Path(__file__).resolve().parent.parent
PUBLISHED = ROOT / "tests" / "fixtures" / "published"
FILES = {"gpt2": PUBLISHED / "gpt2" / "tokenizer.json",
         "all-MiniLM-L6-v2": PUBLISHED / "all-MiniLM-L6-v2" / "tokenizer.json",
         "Phi-3-mini": PUBLISHED / "phi-3-mini" / "tokenizer.json"}
FORTUNES = [Path("/usr/share/games/fortunes") / name for name in ("computers", "science", "literature", "people")]

LIBRARY = """
import json, statistics, sys, time
from tokenizers import Tokenizer
path, text_path, passes, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "batch"
start = time.perf_counter()
tok = Tokenizer.from_file(path)
load = time.perf_counter() - start
tok.no_truncation()
tok.no_padding()
lines = open(text_path, "rb").read().decode("utf-8").split("\\n")[:-1]
times = []
for _ in range(passes):
    start = time.perf_counter()
    if batch:
        encodings = tok.encode_batch(lines, add_special_tokens=False)
    else:
        encodings = [tok.encode(line, add_special_tokens=False) for line in lines]
    times.append(time.perf_counter() - start)
ids = [e.ids for e in encodings]
print(json.dumps({"load_seconds": load, "seconds": statistics.median(times), "lines": len(lines),
                  "ids": sum(len(i) for i in ids), "checksum": sum(sum(i) for i in ids)}))
"""


def write_unigram(path, layout):
    """The Unigram fixture with the normalizer of a published tokenizer.json (layout:
    precompiled for T5's, albert for ALBERT's) and their pre-tokenizer, from the
    layouts its test cases keep (which name the character map they hold once)."""
    fixtures = ROOT / "tests" / "fixtures"
    cases = json.loads((fixtures / "text_unigram_cases.json").read_text())
    tok = json.loads((fixtures / "text_unigram.json").read_text())
    tok["normalizer"] = json.loads(json.dumps(cases["layouts"][layout]["normalizer"])
                                   .replace('"charsmap"', json.dumps(cases["charsmap"])))
    tok["pre_tokenizer"] = cases["layouts"]["whitespace_split"]["pre_tokenizer"]
    path.write_text(json.dumps(tok, ensure_ascii=False))
    return path


def write_text(path):
    """The fortunes as one text, its lines ending with newlines."""
    text = b"".join(f.read_bytes() for f in FORTUNES)
    text.decode("utf-8")  # both sides read it as UTF-8
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if text.endswith(b"\n") else text + b"\n")


def run(command, env, label):
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        sys.exit(f"{label}: " + ((result.stderr.strip().splitlines() or ["no output"])[-1]))
    return json.loads(lines[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flare", default="build/bench_tokenize")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="build/bench-tokenize.json")
    args = parser.parse_args()
    import tokenizers
    text = Path(args.out).parent / "tokenize-text.txt"
    write_text(text)
    build = Path(args.out).parent
    files = {**FILES, "Unigram, T5's layout": write_unigram(build / "tokenize-unigram.json", "precompiled"),
             "Unigram, ALBERT's layout": write_unigram(build / "tokenize-unigram-albert.json", "albert")}
    env = benchmark_environment(args.threads)
    env["RAYON_NUM_THREADS"] = str(args.threads)
    sides = {"flare": lambda path: [args.flare, "--tokenizer", str(path), "--text", str(text), "--repeats", "3"],
             "encode": lambda path: [sys.executable, "-c", LIBRARY, str(path), str(text), "3", "one"],
             "batch": lambda path: [sys.executable, "-c", LIBRARY, str(path), str(text), "3", "batch"]}
    rows = []
    for name, path in files.items():
        runs = {side: [] for side in sides}
        for round_ in range(args.repeats):
            order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
            for side in order:
                runs[side].append(run(sides[side](path), env, f"{side} {name}"))
        for side in ("encode", "batch"):
            for key in ("ids", "checksum"):
                if runs[side][0][key] != runs["flare"][0][key]:
                    sys.exit(f"{name}: {key} differ: Flare {runs['flare'][0][key]}, tokenizers {side} "
                             f"{runs[side][0][key]}")
        median = {side: {key: statistics.median(r[key] for r in runs[side]) for key in ("seconds", "load_seconds")}
                  for side in runs}
        rows.append({"tokenizer": name, "lines": runs["flare"][0]["lines"], "bytes": runs["flare"][0]["bytes"],
                     "ids": runs["flare"][0]["ids"], **{side: median[side] for side in median},
                     "ratio_encode": median["flare"]["seconds"] / median["encode"]["seconds"],
                     "ratio_batch": median["flare"]["seconds"] / median["batch"]["seconds"], "runs": runs})
    print(f"Encoding {rows[0]['lines']:,} lines ({rows[0]['bytes'] / 1e6:.2f} MB), tokenizers "
          f"{tokenizers.__version__}, encode_batch on {args.threads} threads, {machine_name()}")
    print(f"{'tokenizer':<24} {'ids':>8} {'Flare s':>8} {'encode s':>9} {'ratio':>6} {'batch s':>8} {'ratio':>6} "
          f"{'Flare load s':>13} {'library load s':>15}")
    for r in rows:
        print(f"{r['tokenizer']:<24} {r['ids']:>8,} {r['flare']['seconds']:>8.3f} {r['encode']['seconds']:>9.3f} "
              f"{r['ratio_encode']:>6.2f} {r['batch']['seconds']:>8.3f} {r['ratio_batch']:>6.2f} "
              f"{r['flare']['load_seconds']:>13.3f} {r['encode']['load_seconds']:>15.3f}")
    write_report({"threads": args.threads, "tokenizers": tokenizers.__version__, "machine": machine_name(),
                  "rows": rows}, args.out)
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
