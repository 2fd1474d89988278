#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU and its driver (under 5 minutes on one GPU):
#   1. builds everything with the `cuda` feature;
#   2. runs the GPU tests (layer gradients vs the CPU, 20-step training parity with SGD and AdamW,
#      gradient accumulation, bitwise resume, overlap vs no-overlap);
#   3. trains the `mlp` example on one GPU with --trace and prints its step time and overlap report;
#   4. when PyTorch with CUDA is importable, times the same model, batch and optimizer on the
#      same GPU and prints the ratio.
# The CUDA libraries are loaded at run time: it uses the system's, or those of an installed
# PyTorch, else installs the PyPI wheels (cuBLAS, NVRTC, NCCL) into .tools/cuda.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
PYTHON=${PYTHON:-python3}
STEPS=${STEPS:-200}

command -v nvidia-smi >/dev/null && nvidia-smi -L || { echo "gpu-check: no NVIDIA GPU or driver visible" >&2; exit 1; }
make --no-print-directory deps

# Where the CUDA user-space libraries are: the loader's path, PyTorch's wheels, or ours.
have() {
    ldconfig -p | grep -q "$1" && return 0
    local d
    for d in ${LD_LIBRARY_PATH//:/ }; do [ -e "$d/$1" ] && return 0; done
    return 1
}
libdirs=$("$PYTHON" - <<'PY' 2>/dev/null || true
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
print(":".join(sorted({d for r in roots for d in glob.glob(os.path.join(r, "nvidia", "*", "lib"))})))
PY
)
export LD_LIBRARY_PATH="${libdirs:+$libdirs:}${LD_LIBRARY_PATH:-}"
if ! have libcublas.so.12 || ! have libnvrtc.so.12 || ! have libnccl.so.2; then
    echo "gpu-check: installing the CUDA 12 libraries (cuBLAS, NVRTC, NCCL wheels) into .tools/cuda"
    PIP_BREAK_SYSTEM_PACKAGES=1 "$PYTHON" -m pip install --quiet --disable-pip-version-check --target .tools/cuda \
        nvidia-cublas-cu12 nvidia-cuda-nvrtc-cu12 nvidia-nccl-cu12
    export LD_LIBRARY_PATH="$(ls -d "$PWD"/.tools/cuda/nvidia/*/lib | paste -sd:):$LD_LIBRARY_PATH"
fi
# cudarc asks for libnccl.so (or .so.1/.so.12), NCCL ships libnccl.so.2.
mkdir -p .tools/cuda/links
nccl=$(for d in ${LD_LIBRARY_PATH//:/ } /usr/lib/x86_64-linux-gnu /usr/local/cuda/lib64; do ls "$d"/libnccl.so.2 2>/dev/null; done | head -1)
[ -n "$nccl" ] && ln -sf "$nccl" .tools/cuda/links/libnccl.so
export LD_LIBRARY_PATH="$PWD/.tools/cuda/links:$LD_LIBRARY_PATH"

echo "== build (--features cuda)"
cargo build --release --examples --features cuda
cargo build --examples --features cuda  # tests/cuda.rs runs target/debug/examples/mlp under mpirun

echo "== GPU tests"
cargo test --features cuda --test cuda -- --include-ignored --nocapture --test-threads 1
LD_LIBRARY_PATH="$LD_LIBRARY_PATH" cargo test -p overlap-runtime --features cuda --test nvrtc -- --include-ignored

echo "== mlp on one GPU, $STEPS steps, --trace"
mkdir -p target/gpu-check
target/release/examples/mlp --device cuda --steps "$STEPS" --log-every 50 --trace target/gpu-check/mlp-trace.json \
    --timeline target/gpu-check/mlp-timeline.svg
ours=$(target/release/examples/mlp --device cuda --steps "$STEPS" --report json 2>/dev/null | tail -1)
ours_ms=$(echo "$ours" | "$PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["step_ms"])')
echo "overlap mlp on the GPU: median step $ours_ms ms (trace: target/gpu-check/mlp-trace.json)"

if "$PYTHON" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    theirs=$("$PYTHON" bench/ddp_peer.py --single --device cuda --steps "$STEPS" | tail -1)
    echo "PyTorch on the same GPU: $theirs"
    echo "$ours_ms $theirs" | "$PYTHON" -c 'import json,sys; ms, rest = sys.stdin.read().split(" ", 1); t = json.loads(rest)["step_ms"]; print(f"ours / PyTorch step time: {float(ms) / t:.3f}")'
else
    echo "PyTorch with CUDA is not importable by $PYTHON: no comparison"
fi
