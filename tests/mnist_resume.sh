#!/bin/sh
# The MNIST example, resumed from a checkpoint, continues exactly as if it had not
# stopped: two epochs straight, and a run stopped after one epoch then resumed, leave byte-identical
# checkpoints and the same losses. On a slice of the real Fashion-MNIST, to be quick.
set -eu
mnist=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
if [ ! -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
    echo "Fashion-MNIST is not installed (make deps installs dataset-fashion-mnist)"; exit 1
fi
run() { "$mnist" --train-limit 640 --no-eval --quiet --threads 2 "$@"; }
run --epochs 2 --json "$dir/straight.json" --save "$dir/straight.safetensors"
run --epochs 2 --stop-after 1 --save "$dir/first.safetensors"
run --epochs 2 --load "$dir/first.safetensors" --json "$dir/resumed.json" --save "$dir/resumed.safetensors"
cmp "$dir/straight.safetensors" "$dir/resumed.safetensors"
straight=$(grep '"epoch": 2' "$dir/straight.json" | sed 's/.*"train_loss": \([0-9.]*\).*/\1/')
resumed=$(grep '"epoch": 2' "$dir/resumed.json" | sed 's/.*"train_loss": \([0-9.]*\).*/\1/')
[ "$straight" = "$resumed" ] || { echo "epoch 2 loss: straight $straight, resumed $resumed"; exit 1; }
# --eval-only reads the checkpoint back and reports a test error.
"$mnist" --load "$dir/resumed.safetensors" --eval-only --quiet | grep -q 'test loss'
# A truncated checkpoint is refused with the file's name, not a crash.
head -c 1000 "$dir/resumed.safetensors" > "$dir/bad.safetensors"
if "$mnist" --load "$dir/bad.safetensors" --eval-only --quiet 2> "$dir/err"; then exit 1; fi
grep -q 'bad.safetensors' "$dir/err"
echo "mnist resume: 1 passed, 0 failed (epoch 2 loss $straight both ways)"
