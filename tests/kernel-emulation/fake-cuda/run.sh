#!/usr/bin/env bash
# The GPU backend's whole program on the CPU: the CUDA tests that need a GPU (ignored elsewhere)
# run against the fake CUDA libraries of this folder, with three fake GPUs so that the multi-rank
# tests run their ranks through the fake NCCL under mpirun. NVRTC is the real one: NVRTC_LIB names
# its folder (`make test` installs it). This checks what the kernels' emulation alone cannot:
# the order of work on the two streams, the events between them, buffer lifetimes, cuBLAS's and
# NCCL's arguments, accesses outside device allocations or to freed ones, and the generated
# program driving it all. Not what a GPU adds: its memory model, its timing, the real libraries'
# own behaviour.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
: "${NVRTC_LIB:?set NVRTC_LIB to the folder holding libnvrtc.so.12 or .13}"
fake=$("$here/build.sh")
cd "$repo"
# The guard pages around device memory first: each misuse must stop the process with its message
# and a clean use must pass, or the GPU tests below would check nothing out of bounds.
guard() {
    local out rc=0
    out=$("$fake/guard_check" "$1" 2>&1) || rc=$?
    if [[ $1 == clean ]]; then
        [[ $rc == 0 ]] || { echo "guard_check clean: exit $rc: $out"; exit 1; }
    elif [[ $rc == 0 || $out != *"$2"* ]]; then
        echo "guard_check $1: expected an end with \"$2\", got exit $rc: $out"
        exit 1
    fi
}
guard write-past-the-end "a write at byte 20 of the 20-byte device allocation"
guard read-past-the-end "an access at byte 32 of the 20-byte device allocation"
guard write-before-the-start "a write at byte -4 of the 20-byte device allocation"
guard read-after-the-free "already freed"
guard clean
echo "fake CUDA: the guard pages stop every misuse of device memory checked"
# The examples the tests start (mlp, under mpirun), built with the GPU backend; the workspace as
# `make test` builds it, so that this builds nothing twice.
cargo build --workspace --features cuda --bins --examples
export LD_LIBRARY_PATH="$fake:$NVRTC_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export FAKE_CUDA_DEVICES=3
cargo test --workspace --features cuda --test cuda -- --include-ignored
