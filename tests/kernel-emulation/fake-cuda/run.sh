#!/usr/bin/env bash
# The GPU backend's whole program on the CPU: the CUDA tests that need a GPU (ignored elsewhere)
# run against the fake CUDA libraries of this folder, with three fake GPUs so that the multi-rank
# tests run their ranks through the fake NCCL under mpirun. NVRTC is the real one: NVRTC_LIB names
# its folder (`make test` installs it). This checks what the kernels' emulation alone cannot:
# the order of work on the two streams, the events between them, buffer lifetimes, cuBLAS's and
# NCCL's arguments, and the generated program driving it all. Not what a GPU adds: its memory
# model, its timing, the real libraries' own behaviour.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
: "${NVRTC_LIB:?set NVRTC_LIB to the folder holding libnvrtc.so.12 or .13}"
fake=$("$here/build.sh")
cd "$repo"
# The examples the tests start (mlp, under mpirun), built with the GPU backend.
cargo build --features cuda --examples
export LD_LIBRARY_PATH="$fake:$NVRTC_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export FAKE_CUDA_DEVICES=3
cargo test --features cuda --test cuda -- --include-ignored
