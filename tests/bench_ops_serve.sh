#!/bin/sh
# The operator benchmark's serve protocol, which bench/run_ops.py drives: the cases
# announced, a planned batch, one timed batch, and a clear error for a bad request.
set -eu
bench_ops=$1
out=$(printf 'plan overhead_add_4\ntime overhead_add_4 100\ntime overhead_add_4 0\nplan nosuch\nrun add\nplan overhead_add_4 extra\n' |
      "$bench_ops" --serve --threads 2 --min-time 0.01 --repeats 3 --filter overhead_add_4)
line() { echo "$out" | sed -n "$1p"; }
echo "$(line 1)" | grep -q '^{"cases": \["overhead_add_4", "overhead_add_4_loop1e6"\], "threads": 2}$'
echo "$(line 2)" | grep -q '^{"name": "overhead_add_4", "iterations": [1-9][0-9]*, "repeats": 3}$'
echo "$(line 3)" | grep -q '^{"name": "overhead_add_4", "seconds": [0-9.]*e-[0-9]*}$'
echo "$(line 4)" | grep -q "\"error\": \"expected 'plan NAME' or 'time NAME ITERATIONS'\""
echo "$(line 5)" | grep -q '^{"name": "nosuch", "seconds": null, "error": "no such case"}$'
echo "$(line 6)" | grep -q "\"error\": \"expected 'plan NAME' or 'time NAME ITERATIONS'\""
echo "$(line 7)" | grep -q "\"error\": \"expected 'plan NAME' or 'time NAME ITERATIONS'\""
[ "$(echo "$out" | wc -l)" = 7 ] || { echo "expected 7 answers:"; echo "$out"; exit 1; }
echo "bench_ops --serve: 1 passed, 0 failed"
