#!/bin/sh
# The model benchmark's --against: one process trains the model on two backends step
# for step and reports each backend's times and every pair's ratio; a backend that is
# not registered, or a mode it cannot be combined with, is refused with a message.
set -eu
benchmark=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$benchmark" --model vit --size tiny --iters 3 --warmup 1 --threads 2 --peak-gflops 1 --json \
    --against lazy > "$dir/out"
[ "$(grep -c '"backend": "cpu"' "$dir/out")" = 1 ]
[ "$(grep -c '"backend": "lazy"' "$dir/out")" = 1 ]
grep -q '"pair": \["cpu", "lazy"\]' "$dir/out"
ratios=$(grep '"pair"' "$dir/out" | sed 's/.*"ratios": \[\(.*\)\].*/\1/' | tr ',' '\n' | grep -c '[0-9]')
[ "$ratios" = 3 ] || { echo "expected 3 step ratios, got $ratios"; cat "$dir/out"; exit 1; }
if "$benchmark" --model vit --size tiny --iters 1 --against nosuch 2> "$dir/err"; then exit 1; fi
grep -q "no backend named 'nosuch'" "$dir/err"
if "$benchmark" --model vit --size tiny --against lazy --train-check 2 2> "$dir/err"; then exit 1; fi
grep -q 'not with --train-check' "$dir/err"
echo "benchmark --against: 1 passed, 0 failed ($ratios paired steps)"
