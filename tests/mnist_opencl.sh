#!/bin/sh
# The MNIST example's first steps (100, or the second argument) on the opencl backend
# against the cpu backend: the same data, seed and initial weights (the Philox stream
# is the same on both), so the losses agree to rounding at first. Training amplifies
# rounding differences (the cpu backend with 1 thread against 2 differs by several
# percent after a few dozen steps), so later steps are compared as a trend: both runs
# learn, and the mean of their last 50 losses agrees. The example's own settings
# (batch 64), as `make demo` trains it: about a minute on PoCL. With fewer than 60
# steps (the sanitizer build runs 10) there is no trend to compare: only the first
# steps are, and the line printed says so.
set -u
mnist=$1
steps=${2:-100}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
run() {
    FLARE_NUM_THREADS=2 "$mnist" --backend "$1" --train-limit $((steps * 64)) --epochs 1 --no-eval --quiet \
        --losses "$dir/$1.txt" || { echo "mnist on $1 failed"; exit 1; }
}
run cpu
run opencl
[ "$(wc -l < "$dir/cpu.txt")" -eq "$steps" ] && [ "$(wc -l < "$dir/opencl.txt")" -eq "$steps" ] ||
    { echo "not $steps losses each"; exit 1; }
paste "$dir/cpu.txt" "$dir/opencl.txt" | awk -v steps="$steps" '
    { d = $1 - $2; if (d < 0) d = -d; r = d / $1
      if (NR <= 5 && r > first) first = r
      if (NR > steps - 50) { c += $1; o += $2 }
      if (NR == 1) start = $1 }
    END {
      if (steps < 60) {
        printf "steps 1-5: largest relative difference %.2g (limit 1e-4); %d steps: no trend compared\n", first, steps
        exit first > 1e-4
      }
      c /= 50; o /= 50; trend = (o - c) / c; if (trend < 0) trend = -trend
      printf "steps 1-5: largest relative difference %.2g (limit 1e-4); last 50 steps: mean loss %.4f on cpu, %.4f on opencl (%.1f%% apart, limit 5%%); first loss %.4f\n", first, c, o, 100 * trend, start
      if (first > 1e-4 || trend > 0.05 || c > 0.5 * start || o > 0.5 * start) exit 1
    }'
