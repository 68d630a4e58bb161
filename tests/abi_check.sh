#!/bin/sh
# libflare.so exports the public API and nothing else: every dynamic symbol it defines
# must be a function or variable declared in include/flare/*.h. The check compiles a
# file that includes every public header and takes the address of each export; an
# export the headers do not declare fails to compile and is listed.
# usage: abi_check.sh LIBFLARE_SO SOURCE_DIR [CC]
set -eu
lib=$1
source=$2
cc=${3:-cc}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Declared outside the public headers until the backend contract declares them in
# include/flare/backend.h; remove from this list when it does.
undeclared_ok="fl_cpu_backend fl_lazy_backend"

nm -D --defined-only "$lib" | awk '{ print $NF }' | sed 's/@.*//' | sort -u >"$work/exports"
[ -s "$work/exports" ] || { echo "abi check: $lib exports nothing"; exit 1; }

{
    for h in "$source"/include/flare/*.h; do echo "#include <flare/${h##*/}>"; done
    echo "void *const flare_exports[] = {"
    while read -r symbol; do
        case " $undeclared_ok " in *" $symbol "*) continue ;; esac
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
    exit 1
fi
echo "abi check: $(wc -l <"$work/exports") exports, all declared in include/flare/"
