#!/bin/sh
# The programs' shared command line (apps/common/cli.h): --help prints the usage on
# stdout and succeeds; an integer option refuses "1e6", "3x" and "" with a message
# naming it, an unknown option and a missing value are refused, each time with the
# usage on stderr and status 2. Every program given is checked; the first option
# after its path is one that takes a whole number.
set -eu
err=$(mktemp)
out=$(mktemp)
trap 'rm -f "$err" "$out"' EXIT
checked=0
while [ $# -gt 0 ]; do
    program=$1 option=$2
    shift 2
    name=$(basename "$program")
    "$program" --help > "$out" 2> "$err" || { echo "$name --help failed"; cat "$err"; exit 1; }
    grep -q "^usage: " "$out" || { echo "$name --help printed no usage"; exit 1; }
    for args in "$option 1e6" "$option 3x" "$option=" "--bogus" "$option"; do
        status=0
        # shellcheck disable=SC2086
        "$program" $args > "$out" 2> "$err" || status=$?
        [ "$status" = 2 ] || { echo "$name $args: status $status, not 2"; cat "$err"; exit 1; }
        grep -q "^usage: " "$err" || { echo "$name $args: no usage"; cat "$err"; exit 1; }
        [ -s "$out" ] && { echo "$name $args: printed on stdout"; cat "$out"; exit 1; }
    done
    "$program" "$option" 1e6 2>&1 | grep -q "^$name: $option wants a whole number in \[.*\], not '1e6'$" ||
        { echo "$name: no clear message for $option 1e6"; "$program" "$option" 1e6; exit 1; }
    checked=$((checked + 1))
done
echo "cli: $checked passed, 0 failed"
