#!/bin/sh
# The speech recognizer (apps/asr) end to end on a tiny corpus that apps/asr/corpus.py
# synthesises here: a small model trains for three epochs and lowers its CTC loss;
# --json holds every field; the checkpoint saved after training evaluates to the same
# test scores with --eval-only and transcribes a file with --transcribe; bad input (no
# corpus, a manifest line without a transcript, a transcript outside the token set, an
# audio file that is not audio, --transcribe of a missing file, --eval-only without a
# model) is refused or counted with a message, never a crash.
set -eu
asr=$1
src=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 "$src/apps/asr/corpus.py" --out "$dir/corpus" --utterances 60 --seed 3 --jobs 2 2>/dev/null
tiny="--data $dir/corpus --layers 1 --d-model 32 --heads 2 --ff 64 --channels 32 --batch-seconds 20 --beam 4 --threads 2 --quiet"
# shellcheck disable=SC2086
"$asr" $tiny --epochs 3 --json "$dir/run.json" --save "$dir/asr.ckpt" > "$dir/trained.txt"
grep -q "^test voices (6 utterances" "$dir/trained.txt"

python3 - "$dir/run.json" <<'PY'
import json, math, sys
run = json.load(open(sys.argv[1]))
for key in ("backend", "threads", "parameters", "model", "train_utterances", "dev_utterances", "epochs", "test"):
    assert key in run, f"--json lacks {key}"
assert run["train_utterances"] == 51 and run["dev_utterances"] == 3, run
epochs = run["epochs"]
assert [e["epoch"] for e in epochs] == [1, 2, 3], epochs
for e in epochs:
    for key in ("seconds", "loss", "audio_seconds_per_second", "dev_cer", "dev_wer"):
        assert math.isfinite(e[key]), (key, e)
assert epochs[-1]["loss"] < epochs[0]["loss"], epochs
test = run["test"]
assert test["utterances"] == 6, test
for name in ("greedy", "beam", "beam+LM"):
    assert 0 <= test[name]["cer"] and 0 <= test[name]["wer"], test
PY

# The saved model evaluates to the same test scores, and transcribes a file.
# shellcheck disable=SC2086
"$asr" $tiny --load "$dir/asr.ckpt" --eval-only > "$dir/evaluated.txt"
grep "^test voices" "$dir/trained.txt" | sed 's/, [0-9.]* s)/)/' > "$dir/a"
grep "^test voices" "$dir/evaluated.txt" | sed 's/, [0-9.]* s)/)/' > "$dir/b"
cmp "$dir/a" "$dir/b"
first=$(head -n 1 "$dir/corpus/test.tsv" | cut -f 1)
# shellcheck disable=SC2086
"$asr" $tiny --load "$dir/asr.ckpt" --transcribe "$dir/corpus/$first" > "$dir/transcript.txt"
[ "$(wc -l < "$dir/transcript.txt")" -eq 1 ]

refused() { # expected message, then the command
    expected=$1; shift
    if "$@" > "$dir/out" 2> "$dir/err"; then echo "accepted: $*"; exit 1; fi
    grep -q "$expected" "$dir/err" || { echo "no '$expected' in:"; cat "$dir/err"; exit 1; }
}
refused "reading the token set" "$asr" --data "$dir/nothing" --epochs 1 --quiet
# shellcheck disable=SC2086
refused "no such file\|No such file\|cannot be opened" "$asr" $tiny --load "$dir/asr.ckpt" --transcribe "$dir/missing.wav"
refused "need a model" "$asr" --data "$dir/corpus" --eval-only

# Bad lines are counted and reported; the good ones train.
cp "$dir/corpus/train.tsv" "$dir/train.tsv.good"
printf 'audio/train/000000.flac\t1.0\n' >> "$dir/corpus/train.tsv"
printf 'audio/train/000001.flac\t1.0\tnumber 7\n' >> "$dir/corpus/train.tsv"
# shellcheck disable=SC2086
"$asr" $tiny --epochs 1 > /dev/null 2> "$dir/err"
grep -q "skipped 2 bad lines" "$dir/err" || { cat "$dir/err"; exit 1; }
# An audio file that is not audio fails the run with its name.
cp "$dir/train.tsv.good" "$dir/corpus/train.tsv"
echo "not audio" > "$dir/corpus/$(head -n 1 "$dir/corpus/train.tsv" | cut -f 1)"
# shellcheck disable=SC2086
refused "$(head -n 1 "$dir/corpus/train.tsv" | cut -f 1)" "$asr" $tiny --epochs 1
echo "asr: ok"
