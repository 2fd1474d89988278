#!/usr/bin/env bash
# Builds the fake CUDA libraries into the folder given (default target/fake-cuda): libcuda.so
# (the driver, with the backend's kernels compiled for the CPU), libcublas.so.13 and its
# libcublasLt.so.13, and libnccl.so.2, each under the name the library search looks for; and
# guard_check, the check of the driver's guard pages.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
out=${1:-$repo/target/fake-cuda}
mkdir -p "$out"
flags=(-std=c++20 -O2 -DEMU_FIBERS -fPIC -shared -pthread -Wall -Wextra -Wno-sign-compare -Wno-unused-parameter
    -fvisibility=hidden -I"$here" -I"$here/../src" -I"$repo/runtime/src/cuda/kernels")
# The kernels round as the GPU does only what they spell out: nothing else may be fused.
g++ "${flags[@]}" -ffp-contract=off -Wl,-soname,libcuda.so.1 -o "$out/libcuda.so.1" \
    "$here/driver.cpp" "$here/streams.cpp" "$here/memory.cpp" "$here/guarded.cpp" "$here/kernel_table.cpp"
ln -sf libcuda.so.1 "$out/libcuda.so"
# The guard pages' own check (run.sh runs it).
program=()
for flag in "${flags[@]}"; do [[ $flag == -shared ]] || program+=("$flag"); done
g++ "${program[@]}" -o "$out/guard_check" "$here/guard_check.cpp" "$here/guarded.cpp"
g++ "${flags[@]}" -ffp-contract=off -Wl,-soname,libcublas.so.13 -o "$out/libcublas.so.13" "$here/cublas.cpp" -lopenblas \
    -L"$out" -l:libcuda.so.1 -Wl,-rpath,'$ORIGIN'
g++ "${flags[@]}" -Wl,-soname,libcublasLt.so.13 -o "$out/libcublasLt.so.13" "$here/nothing.cpp"
if [ -e "$here/nccl.cpp" ]; then
    g++ "${flags[@]}" -Wl,-soname,libnccl.so.2 -o "$out/libnccl.so.2" "$here/nccl.cpp" \
        -L"$out" -l:libcuda.so.1 -Wl,-rpath,'$ORIGIN' -lrt
    ln -sf libnccl.so.2 "$out/libnccl.so"
fi
echo "$out"
