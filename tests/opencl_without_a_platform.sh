#!/bin/sh
# Without any OpenCL platform (OCL_ICD_VENDORS pointed at an empty directory hides
# every installed one from the ICD loader), the opencl backend says so clearly: the
# probe names the cause, and a program asked to run on opencl fails with that message
# and a non-zero status, never a crash.
set -u
probe=$1 mnist=$2
empty=$(mktemp -d)
trap 'rm -rf "$empty"' EXIT
export OCL_ICD_VENDORS=$empty
out=$("$probe"); rc=$?
[ $rc -eq 1 ] || { echo "probe exited $rc, expected 1: $out"; exit 1; }
echo "$out" | grep -q "no OpenCL platform" || { echo "probe said: $out"; exit 1; }
out=$(FLARE_BACKEND=opencl "$mnist" --train-limit 64 --epochs 1 --no-eval --quiet 2>&1); rc=$?
[ $rc -ne 0 ] && [ $rc -lt 128 ] || { echo "mnist on opencl without a platform exited $rc: $out"; exit 1; }
echo "$out" | grep -q "no OpenCL platform" || { echo "mnist said: $out"; exit 1; }
echo "ok: $(echo "$out" | grep -m1 'no OpenCL platform')"
