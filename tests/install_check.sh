#!/bin/sh
# Installs the build into a temporary prefix, then compiles and runs the README's
# example against it through pkg-config, as a user of `make install` would.
set -eu
build=$1
source=$2
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
libdir=$(ls -d "$prefix"/lib*/pkgconfig | head -n 1)
export PKG_CONFIG_PATH="$libdir"
cc -O2 "$source/examples/readme.c" $(pkg-config --define-variable=prefix="$prefix" --cflags --libs flare) -Wl,-rpath,"$prefix/lib" \
   -Wl,-rpath,"$(dirname "$libdir")" -o "$prefix/example"
"$prefix/example" | tee "$prefix/out"
grep -q '1.0000, 1.0000, 1.0000, 1.0000' "$prefix/out"
echo "install check: 1 passed, 0 failed"
