#!/bin/sh
# Adding a primitive through the one list: copies the library's sources, applies
# examples/new_primitive.patch, builds the library and runs examples/new_primitive.c
# against it on both backends. Usage: new_primitive.sh SOURCE_DIR C_COMPILER
set -eu
source=$1
cc=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for part in CMakeLists.txt cmake include src models apps bench examples; do
    cp -r "$source/$part" "$work/"
done
cd "$work"
patch -p1 --quiet --no-backup-if-mismatch < examples/new_primitive.patch
cmake -S . -B build -DCMAKE_BUILD_TYPE=Debug -DFLARE_TESTS=OFF -DFLARE_BENCH=OFF > configure.log 2>&1 ||
    { cat configure.log; exit 1; }
cmake --build build -j 2 --target flare > build.log 2>&1 || { tail -50 build.log; exit 1; }
"$cc" examples/new_primitive.c -Iinclude -Lbuild -lflare -lm -Wl,-rpath,"$work/build" -o new_primitive
./new_primitive
FLARE_BACKEND=lazy ./new_primitive
