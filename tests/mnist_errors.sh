#!/bin/sh
# The MNIST example refuses malformed checkpoints and missing data with a message and
# exit status 1, and frees everything on the way out: under the sanitized build
# (make test-asan) AddressSanitizer and LeakSanitizer report nothing. A checkpoint's
# epoch is parsed strictly: "-3" once indexed the results before their start.
set -eu
mnist=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
if [ ! -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
    echo "Fashion-MNIST is not installed (make deps installs dataset-fashion-mnist)"; exit 1
fi
run() { "$mnist" --train-limit 64 --no-eval --quiet --threads 2 --workers 0 "$@"; }
run --epochs 1 --save "$dir/good.safetensors"

# A copy of the good checkpoint with its metadata's epoch replaced.
with_epoch() {
    python3 - "$dir/good.safetensors" "$dir/$1.safetensors" "$2" <<'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
header["__metadata__"]["epoch"] = sys.argv[3]
text = json.dumps(header, separators=(",", ":")).encode()
text += b" " * (-len(text) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(text)) + text + data[8 + n:])
PY
}

failures=0
# expect NAME MESSAGE ARGS...: mnist fails with MESSAGE on stderr and no sanitizer report.
expect() {
    name=$1 message=$2
    shift 2
    if run "$@" > /dev/null 2> "$dir/err"; then
        echo "$name: succeeded"; failures=$((failures + 1)); return
    fi
    if ! grep -qF "$message" "$dir/err" || grep -q Sanitizer "$dir/err"; then
        echo "$name: expected '$message', got:"; cat "$dir/err"; failures=$((failures + 1))
    fi
}
for epoch in -3 abc "" 3 99999999999999999999; do
    with_epoch "epoch$epoch" "$epoch"
    expect "epoch '$epoch'" "its metadata's epoch '$epoch' is not a number of epochs from 0 to 2" \
        --epochs 2 --load "$dir/epoch$epoch.safetensors"
done
head -c 1000 "$dir/good.safetensors" > "$dir/truncated.safetensors"
expect "truncated" "loading the checkpoint" --epochs 2 --load "$dir/truncated.safetensors"
expect "missing" "loading the checkpoint" --epochs 2 --load "$dir/missing.safetensors"
expect "no data" "loading the dataset" --epochs 1 --data "$dir/nothing"
# A good checkpoint still resumes.
with_epoch "epoch1" 1
run --epochs 2 --load "$dir/epoch1.safetensors" > /dev/null
[ "$failures" = 0 ] || exit 1
echo "mnist errors: 9 passed, 0 failed"
