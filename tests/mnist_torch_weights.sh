#!/bin/sh
# The MNIST example's weights move between Flare and PyTorch as they are: the file of
# --save-weights loads into bench/mnist_torch.py's model with PyTorch's strict
# load_state_dict, both evaluate it to the same test loss, and a state dict that
# PyTorch writes with safetensors.torch.save_file evaluates in `mnist --eval-only`.
# Without PyTorch (the venv of `make venv`, or $PYTHON) the PyTorch half is skipped.
set -eu
mnist=$1
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
if [ ! -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
    echo "Fashion-MNIST is not installed (make deps installs dataset-fashion-mnist)"; exit 1
fi
"$mnist" --train-limit 640 --epochs 1 --no-eval --quiet --threads 2 \
    --save "$dir/checkpoint.safetensors" --save-weights "$dir/weights.safetensors"
test_loss() { "$mnist" --load "$1" --eval-only --quiet --threads 2 | sed -n 's/^test loss \([0-9.]*\),.*/\1/p'; }
# The weights alone evaluate as the whole checkpoint does.
from_checkpoint=$(test_loss "$dir/checkpoint.safetensors")
from_weights=$(test_loss "$dir/weights.safetensors")
[ -n "$from_weights" ] && [ "$from_weights" = "$from_checkpoint" ] ||
    { echo "test loss: checkpoint '$from_checkpoint', weights '$from_weights'"; exit 1; }

python=${PYTHON:-$HOME/.cache/flare/venv/bin/python}
if ! "$python" -c 'import torch, safetensors' 2>/dev/null; then
    echo "mnist torch weights: Flare half passed; SKIPPED the PyTorch half (no torch and safetensors for $python)"
    exit 0
fi
torch_loss=$("$python" - "$root/bench" "$dir" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import torch
from safetensors.torch import load_file, save_file
from mnist_torch import model, load, evaluate
d = sys.argv[2]
net = model()
net.load_state_dict(load_file(f"{d}/weights.safetensors"))  # strict
try:
    model().load_state_dict(load_file(f"{d}/checkpoint.safetensors"))
    sys.exit("the checkpoint, optimizer state and all, loaded strictly: the test cannot tell the files apart")
except RuntimeError as e:
    assert "optimizer." in str(e), e
torch.set_num_threads(2)
images, labels = load("/usr/share/datasets/fashion-mnist", False)
loss, _ = evaluate(net, images, labels, 256)
# What PyTorch users write: a plain state dict, with values of PyTorch's own.
state = {k: v * 1.0 for k, v in net.state_dict().items()}
save_file(state, f"{d}/torch.safetensors")
print(f"{loss:.4f}")
PY
)
from_torch=$(test_loss "$dir/torch.safetensors")
awk -v a="$torch_loss" -v b="$from_weights" -v c="$from_torch" 'BEGIN {
    d = a - b; if (d < 0) d = -d; e = c - b; if (e < 0) e = -e; exit !(d <= 0.002 && e == 0) }' ||
    { echo "test loss: Flare $from_weights, PyTorch $torch_loss, Flare on PyTorch's file $from_torch"; exit 1; }
echo "mnist torch weights: 1 passed, 0 failed (test loss $from_weights in Flare, $torch_loss in PyTorch)"
