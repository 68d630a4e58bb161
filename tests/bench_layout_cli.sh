#!/bin/sh
# bench_layout's command line: a short run prints one row per spacing, the first at
# ratio 1; spacings it cannot lay out, numbers with anything after them and unknown
# options are refused with the usage.
set -eu
bench_layout=$1
err=$(mktemp)
trap 'rm -f "$err"' EXIT
out=$("$bench_layout" --threads 2 --rounds 3 --elements 1000 4000 0x2000 4000)
echo "$out" | grep -q '^z = x + y over 1000 floats at x, x + d, x + 2d; 2 threads, 3 rounds of [0-9]*$'
echo "$out" | grep -q '^0xfa0  *[0-9.]* us  *1.000$'
[ "$(echo "$out" | grep -c '^0x')" = 3 ] || { echo "expected 3 rows:"; echo "$out"; exit 1; }
for args in "--elements 1000 3996" "0x8000000000000000" "--bogus 1" "--rounds" "12abc" "--elements 1e6" "--rounds 3x" "--threads -2"; do
    # shellcheck disable=SC2086
    if "$bench_layout" $args >/dev/null 2>"$err"; then echo "accepted: $args"; exit 1; fi
    grep -q '^usage: bench_layout' "$err" || { echo "no usage for: $args"; cat "$err"; exit 1; }
done
echo "bench_layout: 2 passed, 0 failed"
