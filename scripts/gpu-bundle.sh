#!/usr/bin/env bash
# Builds the GPU bundle: everything scripts/gpu-check.sh runs, for a GPU machine that has no
# cargo, no compiler, no network and no OpenMPI (what HPC compute nodes and many cloud GPU
# images look like). Run it on any x86-64 build host with this repository's dependencies
# (`make deps`):
#
#   scripts/gpu-bundle.sh [OUT]                # default OUT: target/gpu-bundle.tar.gz
#   scripts/gpu-bundle.sh --test-build [OUT]   # packs what `make test` built instead (CI)
#
# The tarball holds, under overlap-gpu/:
#   release/examples/mlp        the mlp, resmlp and gpt examples with the `cuda` feature
#   release/deps/cuda           the GPU tests (tests/cuda/), release/deps/nvrtc the kernel tests
#   lib/                        the shared libraries they need beyond glibc (OpenMPI, OpenBLAS, ...)
#   gpu-check.sh and the check-steps.sh it sources; compare/ddp_peer.py, compare/gpt_twin.py, compare/gpt_model.py
#                               and the jobs.py they import
# Binaries are built for x86-64-v3 (AVX2, no AVX-512), overriding .cargo/config.toml's
# `target-cpu=native`, so a build host's newer vector units cannot make them fail on the GPU
# machine's CPU, and stripped. The CUDA libraries are not bundled: the GPU machine's own are
# found at run time (runtime/src/cuda/libraries.rs).
#
# --test-build packs the binaries `make test` has already built (its `--workspace --features cuda`
# test build, for this host's CPU) instead of building portable release ones: what CI checks of
# the bundle (scripts/gpu-bundle-check.sh: the packing, the libraries, the scripts) is the same,
# without a second build of the whole workspace. Such a bundle is for this machine only.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ${1:-} == --test-build ]]; then
    shift
    build=(--workspace --features cuda) runtime=()
    echo "gpu-bundle: packing the test build (this host's CPU; not for another machine)"
else
    build=(--release --features cuda) runtime=(-p overlap-runtime)
    export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target/portable}
    export RUSTFLAGS="-C target-cpu=x86-64-v3"
    echo "gpu-bundle: building for x86-64-v3 into $CARGO_TARGET_DIR"
fi
out=${1:-target/gpu-bundle.tar.gz}

source scripts/bundle-lib.sh

examples=$(cargo build "${build[@]}" --example mlp --example resmlp --example gpt --message-format=json | executables)
cuda_tests=$(cargo test "${build[@]}" --test cuda --no-run --message-format=json | executables)
nvrtc_tests=$(cargo test "${build[@]}" "${runtime[@]}" --test nvrtc --no-run --message-format=json | executables)

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/overlap-gpu
mkdir -p "$root/release/examples" "$root/release/deps" "$root/lib" "$root/compare"
cp $examples "$root/release/examples/"
cp "$cuda_tests" "$root/release/deps/cuda"
cp "$nvrtc_tests" "$root/release/deps/nvrtc"
strip "$root"/release/examples/* "$root"/release/deps/*
cp scripts/gpu-check.sh scripts/check-steps.sh "$root/"
cp compare/ddp_peer.py compare/gpt_twin.py compare/gpt_model.py compare/jobs.py "$root/compare/"
git rev-parse --short HEAD >"$root/VERSION" 2>/dev/null || echo unknown >"$root/VERSION"

# Every shared library the binaries load, except glibc's own.
copy_libraries "$root/lib" "" "$root"/release/examples/* "$root"/release/deps/*
echo "built with glibc $(glibc_version)" >>"$root/VERSION"
tarball "$out" "$stage" overlap-gpu gpu-bundle
