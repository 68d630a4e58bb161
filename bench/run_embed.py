"""Sentence embeddings side by side: Flare's apps/embed (build/embed) and PyTorch with
transformers' BertModel, both with the published all-MiniLM-L6-v2 checkpoint
(tests/fixtures/fetch_published.py downloads it), on the same texts, batches and
threads; prints the seconds each takes to tokenize, encode and mean-pool the corpus,
with the ratio Flare / PyTorch (below 1 means Flare is faster).

    python bench/run_embed.py [--flare build/embed] [--lines 2000] [--batch 32]
                              [--repeats 5] [--threads 2] [--out build/bench-embed.json]

The corpus is the first --lines non-empty lines of Debian's fortunes (computers, then
science), written to build/embed-text.txt. Both sides do what sentence-transformers'
encode does for this model: tokenize every text with [CLS]/[SEP], run batches of texts
of similar lengths (longest first) padded to their longest, and mean-pool over the
tokens; PyTorch under inference_mode with its default attention (SDPA), the tokenizers
library's encode_batch on --threads threads. Loading the checkpoint is not timed.
torch.compile is not measured: every batch has its own width, which it would compile
for anew. Each side runs in a fresh process per round, --repeats rounds alternating
which goes first; the medians are kept. The two sides' embeddings must agree (1e-4).
"""

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

from run_ops import benchmark_environment, machine_name, write_report
from run_tokenize import run

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
from fetch_published import fetch  # noqa: E402

FORTUNES = [Path("/usr/share/games/fortunes") / name for name in ("computers", "science")]

TORCH = """
import json, sys, time
import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer
from transformers import BertModel
model_dir, corpus, batch, threads, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
torch.set_num_threads(threads)
texts = [line for line in open(corpus, encoding="utf-8").read().split("\\n") if line]
model = BertModel.from_pretrained(model_dir).eval()
tok = Tokenizer.from_file(model_dir + "/tokenizer.json")
tok.no_truncation()
tok.no_padding()
start = time.perf_counter()
encodings = tok.encode_batch(texts)
order = sorted(range(len(texts)), key=lambda i: (-len(encodings[i].ids), i))
embeddings = torch.empty(len(texts), model.config.hidden_size)
with torch.inference_mode():
    for first in range(0, len(texts), batch):
        rows = order[first:first + batch]
        width = len(encodings[rows[0]].ids)
        ids = torch.zeros(len(rows), width, dtype=torch.long)
        mask = torch.zeros(len(rows), width, dtype=torch.long)
        for r, i in enumerate(rows):
            n = len(encodings[i].ids)
            ids[r, :n] = torch.tensor(encodings[i].ids)
            mask[r, :n] = 1
        hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
        m = mask.unsqueeze(-1).to(hidden.dtype)
        embeddings[rows] = (hidden * m).sum(1) / m.sum(1)
seconds = time.perf_counter() - start
save_file({"embeddings": embeddings}, out)
print(json.dumps({"seconds": seconds, "texts": len(texts), "tokens": sum(len(e.ids) for e in encodings),
                  "torch": torch.__version__}))
"""


def write_corpus(path, lines):
    texts = []
    for f in FORTUNES:
        texts += [line for line in f.read_text(encoding="utf-8").split("\n") if line.strip() and line != "%"]
    if len(texts) < lines:
        sys.exit(f"the fortunes hold {len(texts)} lines, not {lines}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(texts[:lines]) + "\n", encoding="utf-8")


def run_flare(args, model, corpus, out, env):
    command = [args.flare, "--corpus", str(corpus), "--batch", str(args.batch), "--threads", str(args.threads),
               "--time", "--save", str(out), model]
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    timed = re.search(r"embed: (\d+) texts, (\d+) tokens in ([0-9.]+) s", result.stderr)  # what --time prints
    if result.returncode != 0 or not timed:
        sys.exit("flare: " + (result.stderr.strip() or "no output"))
    return {"seconds": float(timed[3]), "texts": int(timed[1]), "tokens": int(timed[2])}


def run_torch(args, model, corpus, out, env):
    return run([sys.executable, "-c", TORCH, model, str(corpus), str(args.batch), str(args.threads), str(out)], env,
               "pytorch")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flare", default="build/embed")
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="build/bench-embed.json")
    args = parser.parse_args()
    build = Path(args.out).parent
    corpus = build / "embed-text.txt"
    write_corpus(corpus, args.lines)
    model = fetch()
    env = benchmark_environment(args.threads)
    outputs = {"flare": build / "embed-flare.safetensors", "pytorch": build / "embed-torch.safetensors"}
    sides = {"flare": run_flare, "pytorch": run_torch}
    runs = {side: [] for side in sides}
    for round_ in range(args.repeats):
        for side in (list(sides) if round_ % 2 == 0 else list(reversed(sides))):
            runs[side].append(sides[side](args, model, corpus, outputs[side], env))
    flare, torch = (load_file(str(outputs[side]))["embeddings"] for side in ("flare", "pytorch"))
    difference = float(np.abs(flare - torch).max())
    if flare.shape != torch.shape or difference > 1e-4:
        sys.exit(f"the embeddings differ: shapes {flare.shape} and {torch.shape}, largest difference {difference:.3g}")
    if runs["flare"][0]["tokens"] != runs["pytorch"][0]["tokens"]:
        sys.exit(f"the tokens differ: Flare {runs['flare'][0]['tokens']}, PyTorch {runs['pytorch'][0]['tokens']}")
    median = {side: statistics.median(r["seconds"] for r in runs[side]) for side in sides}
    ratios = [f["seconds"] / t["seconds"] for f, t in zip(runs["flare"], runs["pytorch"])]
    report = {"machine": machine_name(), "threads": args.threads, "torch": runs["pytorch"][0]["torch"],
              "texts": runs["flare"][0]["texts"], "tokens": runs["flare"][0]["tokens"], "batch": args.batch,
              "flare_seconds": median["flare"], "pytorch_seconds": median["pytorch"],
              "ratio": median["flare"] / median["pytorch"], "round_ratios": ratios,
              "largest_difference": difference, "runs": runs}
    print(f"{report['machine']}, {args.threads} threads, PyTorch {report['torch']}; all-MiniLM-L6-v2, "
          f"{report['texts']:,} texts ({report['tokens']:,} tokens) in batches of {args.batch}")
    print(f"Flare {median['flare']:.3f} s, PyTorch {median['pytorch']:.3f} s: ratio {report['ratio']:.2f} "
          f"(rounds {min(ratios):.2f}-{max(ratios):.2f}); embeddings agree within {difference:.2g}")
    write_report(report, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
