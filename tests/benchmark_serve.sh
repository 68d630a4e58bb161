#!/bin/sh
# The model benchmark's serve protocol, which bench/run_models.py drives: a line once
# the warm-up is done, one answer per request (a bad one answered with an error, not
# counted), and at the end of the input the report over every step timed; an input
# that ends before any request, and --serve beside a mode it cannot join, are refused.
set -eu
benchmark=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
printf 'steps 2\nsteps\nsteps 0\nsteps 1 2\nsteps 1\n' |
    "$benchmark" --model lstm --size tiny --warmup 1 --threads 2 --peak-gflops 1 --serve > "$dir/out"
line() { sed -n "$1p" "$dir/out"; }
line 1 | grep -q '^{"name": "lstm", "params": 17298, "batch": 4, "threads": 2, "warmup": 1}$'
line 2 | grep -q '^{"seconds": [0-9.]*, "steps": 2}$'
for n in 3 4 5; do
    line $n | grep -q "^{\"error\": \"expected a line 'steps N', N from 1 to 99998\"}$"
done
line 6 | grep -q '^{"seconds": [0-9.]*, "steps": 1}$'
line 7 | grep -q '^{"name": "lstm", "backend": "cpu", "size": "tiny", .*"warmup": 1, "iters": 3, '
[ "$(wc -l < "$dir/out")" = 7 ] || { echo "expected 7 lines:"; cat "$dir/out"; exit 1; }
if "$benchmark" --model lstm --size tiny --warmup 0 --peak-gflops 1 --serve < /dev/null > "$dir/out" 2> "$dir/err"; then
    exit 1
fi
grep -q "the input ended before any 'steps N' request" "$dir/err"
if "$benchmark" --model lstm --size tiny --serve --train-check 2 2> "$dir/err"; then exit 1; fi
grep -q 'not with --train-check' "$dir/err"
echo "benchmark --serve: 1 passed, 0 failed"
