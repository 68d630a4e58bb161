#!/bin/sh
# The language-model example (apps/lm) on a slice of the fortunes: a tiny GPT trained
# for three epochs lowers its training and validation loss; --json is valid JSON with
# every field (valid UTF-8 whatever the bytes sampled); a checkpoint saved after
# training, loaded again, generates the same text from the same seed and reports the
# same validation loss; a run stopped after
# one epoch and resumed ends with a byte-identical checkpoint and the same loss as one
# that never stopped; a tokenizer.json (tests/fixtures/text_bpe.json) serves as well;
# bad input (a missing file, an empty corpus, a corpus shorter than two windows, a
# prompt longer than the context, a checkpoint of another tokenizer, a truncated one)
# is refused with a message and a non-zero status.
set -eu
lm=$1
fixtures=$2/tests/fixtures
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
if [ ! -e /usr/share/games/fortunes/fortunes ]; then
    echo "the fortunes are not installed (make deps installs the fortunes package)"; exit 1
fi
head -c 20000 /usr/share/games/fortunes/fortunes > "$dir/text"
tiny="--data $dir/text --vocab 300 --context 32 --layers 1 --heads 2 --embed 32 --batch 16 --threads 2 --quiet"
# shellcheck disable=SC2086
"$lm" $tiny --epochs 3 --seed 5 --json "$dir/run.json" --save "$dir/lm.safetensors" \
    --generate "Time is" --tokens 24 > "$dir/trained.txt"

python3 - "$dir/run.json" <<'PY'
import json, math, sys
run = json.load(open(sys.argv[1]))
for key in ("data", "backend", "threads", "vocab", "context", "layers", "heads", "embed", "parameters", "batch",
            "train_windows", "val_windows", "epochs", "prompt", "sample"):
    assert key in run, f"--json lacks {key}"
assert run["vocab"] == 300 and run["context"] == 32 and run["prompt"] == "Time is", run
epochs = run["epochs"]
assert [e["epoch"] for e in epochs] == [1, 2, 3], epochs
for e in epochs:
    for key in ("seconds", "tokens_per_second", "train_loss", "train_perplexity", "val_loss", "val_perplexity"):
        assert math.isfinite(e[key]), (key, e)
    assert abs(e["val_perplexity"] - math.exp(e["val_loss"])) < 1e-3 * e["val_perplexity"], e
first, last = epochs[0], epochs[-1]
assert last["train_loss"] < first["train_loss"] - 0.1, f"training loss {first['train_loss']} -> {last['train_loss']}"
assert last["val_loss"] < first["val_loss"], f"validation loss {first['val_loss']} -> {last['val_loss']}"
assert run["sample"].startswith("Time is"), run["sample"]
print(f"loss {first['train_loss']:.3f} -> {last['train_loss']:.3f}, validation {first['val_loss']:.3f} -> {last['val_loss']:.3f}")
PY

# The checkpoint alone: the same sample from the same seed, the same validation loss.
# shellcheck disable=SC2086
"$lm" $tiny --seed 5 --load "$dir/lm.safetensors" --generate "Time is" --tokens 24 > "$dir/loaded.txt"
cmp "$dir/trained.txt" "$dir/loaded.txt"
# shellcheck disable=SC2086
val=$("$lm" --data "$dir/text" --vocab 300 --threads 2 --load "$dir/lm.safetensors" | sed -n 's/^validation loss \([0-9.]*\).*/\1/p')
expected=$(python3 -c 'import json, sys; print("%.4f" % json.load(open(sys.argv[1]))["epochs"][-1]["val_loss"])' "$dir/run.json")
[ "$val" = "$expected" ] || { echo "validation loss after loading: $val, after training: $expected"; exit 1; }

# A prompt that is not UTF-8 still gives valid JSON (its byte as U+FFFD).
# shellcheck disable=SC2086
"$lm" $tiny --seed 5 --load "$dir/lm.safetensors" --generate "$(printf 'Time \377')" --tokens 4 \
    --json "$dir/bytes.json" > /dev/null
python3 -c 'import json, sys; assert json.load(open(sys.argv[1], encoding="utf-8"))["prompt"] == "Time \ufffd"' \
    "$dir/bytes.json"

# Stopped after epoch 1 and resumed: as if it had not stopped (dropout, shuffles, AdamW).
# shellcheck disable=SC2086
"$lm" $tiny --epochs 2 --seed 5 --json "$dir/straight.json" --save "$dir/straight.safetensors"
# shellcheck disable=SC2086
"$lm" $tiny --epochs 2 --stop-after 1 --seed 5 --save "$dir/first.safetensors"
# shellcheck disable=SC2086
"$lm" $tiny --epochs 2 --load "$dir/first.safetensors" --json "$dir/resumed.json" --save "$dir/resumed.safetensors"
cmp "$dir/straight.safetensors" "$dir/resumed.safetensors"
straight=$(grep '"epoch": 2' "$dir/straight.json" | sed 's/.*"train_loss": \([0-9.]*\).*/\1/')
resumed=$(grep '"epoch": 2' "$dir/resumed.json" | sed 's/.*"train_loss": \([0-9.]*\).*/\1/')
[ "$straight" = "$resumed" ] || { echo "epoch 2 loss: straight $straight, resumed $resumed"; exit 1; }

# A Hugging Face tokenizer.json instead of one learned from the text.
"$lm" --data "$dir/text" --tokenizer "$fixtures/text_bpe.json" --context 16 --layers 1 --heads 2 --embed 16 \
    --train-limit 32 --threads 2 --quiet --json "$dir/hf.json" --generate "Time is" --tokens 4 > /dev/null
grep -q '"train_loss"' "$dir/hf.json"

# Bad input: a message naming the problem and status 1, never a crash.
refused() {
    pattern=$1
    shift
    if "$lm" --quiet --threads 2 "$@" > "$dir/out" 2> "$dir/err"; then
        echo "accepted: $*"; exit 1
    fi
    grep -q -e "$pattern" "$dir/err" || { echo "for $*, expected '$pattern' in:"; cat "$dir/err"; exit 1; }
}
refused "cannot read $dir/missing" --data "$dir/missing"
: > "$dir/empty"
refused "the corpus is empty" --data "$dir/empty"
head -c 100 "$dir/text" > "$dir/short"
refused "too short for a training and a validation window" --data "$dir/short" --context 64
refused "--vocab sizes a tokenizer learned" --data "$dir/text" --vocab 300 --tokenizer "$fixtures/text_bpe.json"
refused "the prompt is .* tokens; it must be 1 to the context's 4" --data "$dir/text" --vocab 300 --context 4 \
    --generate "a prompt of many more tokens than four"
refused "another tokenizer" --data "$dir/text" --vocab 301 --load "$dir/lm.safetensors" --generate "Time"
head -c 1000 "$dir/lm.safetensors" > "$dir/bad.safetensors"
refused "bad.safetensors" --data "$dir/text" --vocab 300 --load "$dir/bad.safetensors"
echo "lm: 1 passed, 0 failed"
