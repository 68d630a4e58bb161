#!/bin/sh
# Exits 0 if clang can build a libFuzzer program with ASan and UBSan here (what
# `make fuzz` needs), 1 otherwise.
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return 0; }\n' >"$dir/t.c"
command -v clang >/dev/null 2>&1 &&
    clang -fsanitize=fuzzer,address,undefined "$dir/t.c" -o "$dir/t" >/dev/null 2>&1 &&
    "$dir/t" -runs=1 >/dev/null 2>&1
