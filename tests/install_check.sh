#!/bin/sh
# Installs the build into a temporary prefix (not the one configured, as
# `make install PREFIX=...` does), then compiles the README's example with the README's
# own command line through pkg-config and runs it, as a user of `make install` would;
# then links it statically from Libs.private.
set -eu
build=$1
source=$2
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
pcdir=$(ls -d "$prefix"/lib*/pkgconfig | head -n 1)
libdir=$(dirname "$pcdir")
export PKG_CONFIG_PATH="$pcdir"
fail() { echo "install check: $*"; exit 1; }

[ "$(pkg-config --variable=prefix flare)" = "$prefix" ] ||
    fail "flare.pc names prefix $(pkg-config --variable=prefix flare), installed to $prefix"
case " $(pkg-config --cflags flare) " in *openmp*) fail "flare.pc passes OpenMP on: $(pkg-config --cflags flare)" ;; esac

# The line as the README gives it, run in a folder that holds example.c.
line=$(grep -o 'cc example\.c \$(pkg-config [^`]*)' "$source/README.md" | head -n 1)
[ -n "$line" ] || fail "README.md has no 'cc example.c \$(pkg-config ...)' line"
mkdir "$prefix/user"
cp "$source/examples/readme.c" "$prefix/user/example.c"
(cd "$prefix/user" && echo "$line" && sh -c "$line")
LD_LIBRARY_PATH="$libdir" "$prefix/user/a.out" | tee "$prefix/out"
grep -q '1.0000, 1.0000, 1.0000, 1.0000' "$prefix/out" || fail "the shared example printed the wrong sum"

# Static: libflare.a and what Libs.private says it needs.
cc "$prefix/user/example.c" $(pkg-config --cflags flare) "$libdir/libflare.a" \
    $(pkg-config --static --libs flare | sed "s/-lflare //") -o "$prefix/user/static"
"$prefix/user/static" >"$prefix/out"
grep -q '1.0000, 1.0000, 1.0000, 1.0000' "$prefix/out" || fail "the static example printed the wrong sum"
echo "install check: 2 passed, 0 failed"
