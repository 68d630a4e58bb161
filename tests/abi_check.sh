#!/bin/sh
# libflare.so exports the public API and nothing else.
#  - Every dynamic symbol it defines must be a function or variable declared in
#    include/flare/*.h: a file that includes every public header takes the address of
#    each export, and an export no header declares fails to compile and is listed.
#  - Every function those headers declare must be exported, or a user's program
#    would not link (listed with GCC's -aux-info, which prints each declaration).
# usage: abi_check.sh LIBFLARE_SO SOURCE_DIR [CC]
set -eu
lib=$1
source=$2
cc=${3:-cc}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0

nm -D --defined-only "$lib" | awk '{ print $NF }' | sed 's/@.*//' | sort -u >"$work/exports"
[ -s "$work/exports" ] || { echo "abi check: $lib exports nothing"; exit 1; }

for h in "$source"/include/flare/*.h; do echo "#include <flare/${h##*/}>"; done >"$work/headers.c"
{
    cat "$work/headers.c"
    echo "void *const flare_exports[] = {"
    while read -r symbol; do
        echo "    (void *)&$symbol,"
    done <"$work/exports"
    echo "};"
} >"$work/exports.c"

if ! "$cc" -std=gnu11 -fsyntax-only -I"$source/include" "$work/exports.c" 2>"$work/errors"; then
    offenders=$(sed -n "s/.*error: .\([A-Za-z_][A-Za-z0-9_]*\). undeclared.*/\1/p" "$work/errors" | sort -u)
    if [ -z "$offenders" ]; then
        cat "$work/errors"
        echo "abi check: the public headers do not compile"
        exit 1
    fi
    echo "abi check: $lib exports symbols no public header declares:"
    echo "$offenders" | sed 's/^/    /'
    failed=1
fi

if "$cc" -std=gnu11 -fsyntax-only -I"$source/include" -aux-info "$work/declarations" "$work/headers.c" 2>/dev/null; then
    # Lines such as: /* .../include/flare/tensor.h:64:NC */ extern fl_status fl_last_status (void);
    grep '/include/flare/[^:]*:[0-9]*:[A-Z]* \*/ extern ' "$work/declarations" |
        sed -E 's/^.*\*\/ extern //; s/^([^(]*[^A-Za-z0-9_(])?([A-Za-z_][A-Za-z0-9_]*) \(.*/\2/' |
        sort -u >"$work/declared"
    [ -s "$work/declared" ] || { echo "abi check: found no declarations in the public headers"; exit 1; }
    missing=$(comm -23 "$work/declared" "$work/exports")
    if [ -n "$missing" ]; then
        echo "abi check: functions the public headers declare that $lib does not export:"
        echo "$missing" | sed 's/^/    /'
        failed=1
    fi
    declared="$(wc -l <"$work/declared") declared functions exported"
else
    declared="not checked that every declared function is exported ($cc has no -aux-info)"
fi

[ "$failed" = 0 ] || exit 1
echo "abi check: $(wc -l <"$work/exports") exports, all declared in include/flare/; $declared"
