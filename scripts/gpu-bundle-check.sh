#!/usr/bin/env bash
# What CI can check of the GPU bundle without a GPU (`make test` runs it):
#   scripts/gpu-bundle-check.sh [BUNDLE]     # default: target/gpu-bundle.tar.gz
# - every shared library the bundled binaries load resolves inside the bundle or to glibc;
# - with LD_LIBRARY_PATH naming only the bundle, mlp trains 2 steps on the CPU;
# - the GPU tests run and report the no-driver error (the GPU-only ones show as ignored);
# - mlp --device cuda fails with that error and exit status 1, never a panic;
# - gpu-check.sh and cpu-targets.sh parse their arguments and refuse a missing bundle; run whole,
#   gpu-check.sh goes through every step, writes every file and names each failure; a step that
#   hangs is stopped at the check's --seconds and the steps after it are reported as not run.
set -euo pipefail
bundle=${1:-target/gpu-bundle.tar.gz}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
tar -C "$scratch" -xzf "$bundle"
root=$scratch/overlap-gpu
export LD_LIBRARY_PATH=$root/lib

echo "== every library resolves inside the bundle or to glibc"
source "$(dirname "$0")/bundle-lib.sh"
for exe in "$root"/release/examples/* "$root"/release/deps/*; do
    ldd "$exe" | while read -r name arrow path _; do
        [[ $arrow == "=>" ]] || continue
        [[ $name =~ $GLIBC_LIBRARIES ]] && continue
        [[ $path == "$root/lib/"* ]] || { echo "$(basename "$exe"): $name resolves to $path, not the bundle" >&2; exit 1; }
    done
done

echo "== mlp trains 2 steps on the CPU from the bundle"
"$root/release/examples/mlp" --steps 2 --batch 8 --log-every 1

echo "== resmlp (residual blocks) trains 2 steps on the CPU from the bundle"
"$root/release/examples/resmlp" --steps 2 --batch 8 --log-every 1

echo "== gpt (attention) trains 2 steps on the CPU from the bundle, on gpu-check.sh's text"
"$root/release/examples/gpt" --text "$root/gpu-check.sh" --steps 2 --log-every 1 --report off

echo "== the GPU tests without a GPU"
"$root/release/deps/cuda" --nocapture 2>&1 | tee "$scratch/cuda-tests.txt"
grep -q "no CUDA driver found" "$scratch/cuda-tests.txt"

echo "== mlp --device cuda without a driver: a clear error"
set +e
"$root/release/examples/mlp" --device cuda --steps 1 >"$scratch/mlp-cuda.txt" 2>&1
rc=$?
set -e
cat "$scratch/mlp-cuda.txt"
[[ $rc == 1 ]] || { echo "expected exit status 1, got $rc" >&2; exit 1; }
grep -q "no CUDA driver found" "$scratch/mlp-cuda.txt"
! grep -q "panicked" "$scratch/mlp-cuda.txt"

echo "== gpu-check.sh refuses a missing bundle"
set +e
"$root/gpu-check.sh" --bundle "$scratch/none.tar.gz" --out "$scratch/out" >"$scratch/check.txt" 2>&1
rc=$?
set -e
[[ $rc == 2 ]] && grep -q "no bundle at" "$scratch/check.txt" || { cat "$scratch/check.txt"; exit 1; }
# cpu-targets.sh shares the argument parsing and the bundle's opening (check-steps.sh); its own
# bundle needs a network to build, so only its refusals are checked here.
echo "== cpu-targets.sh refuses a missing bundle, and a bad argument"
set +e
"$(dirname "$0")/cpu-targets.sh" --bundle "$scratch/none.tar.gz" --out "$scratch/cpu-out" >"$scratch/cpu.txt" 2>&1
rc=$?
"$(dirname "$0")/cpu-targets.sh" --seconds soon >"$scratch/cpu-usage.txt" 2>&1
usage_rc=$?
set -e
[[ $rc == 2 ]] && grep -q "cpu-targets: no bundle at .*scripts/cpu-bundle.sh" "$scratch/cpu.txt" ||
    { cat "$scratch/cpu.txt"; exit 1; }
[[ $usage_rc == 2 ]] && grep -q "usage: .*cpu-targets.sh" "$scratch/cpu-usage.txt" ||
    { cat "$scratch/cpu-usage.txt"; exit 1; }
echo "== gpu-check.sh without a GPU: every step runs, fails clearly, and the check says so"
set +e
"$root/gpu-check.sh" --bundle "$bundle" --out "$scratch/whole" --archive "$scratch/packed/whole.tar.gz" \
    >"$scratch/whole.txt" 2>&1
rc=$?
set -e
cat "$scratch/whole.txt"
[[ $rc == 1 ]] || { echo "expected exit status 1, got $rc" >&2; exit 1; }
for f in env gpu-tests mlp gpt resmlp pytorch nvrtc sanitizer; do
    [[ -s $scratch/whole/$f.txt ]] || { echo "gpu-check.sh wrote no $f.txt" >&2; exit 1; }
done
grep -q "^  GPU tests (exit" "$scratch/whole.txt"
grep -q "no CUDA driver found" "$scratch/whole/mlp.txt"
# A run that fails midway shows its output (here at once), and fails its step.
grep -q "no CUDA driver found" "$scratch/whole/gpt.txt"
grep -q "^  gpt --device cuda, 50 steps (exit" "$scratch/whole.txt"
# Every result is in the one archive too. (Listed into a file first: `grep -q` leaves at its first
# match, and a `tar` still writing into the pipe then dies of SIGPIPE, which pipefail reports.)
tar -tzf "$scratch/packed/whole.tar.gz" >"$scratch/archived.txt"
grep -q "^whole/gpu-tests.txt$" "$scratch/archived.txt"

echo "== gpu-check.sh stops a hung step at its --seconds"
printf '#!/bin/sh\nsleep 600\n' >"$scratch/hanging-python"
chmod +x "$scratch/hanging-python"
set +e
PYTHON=$scratch/hanging-python timeout 60 "$root/gpu-check.sh" --bundle "$bundle" --out "$scratch/hung" --seconds 15 \
    >"$scratch/hung.txt" 2>&1
rc=$?
set -e
cat "$scratch/hung.txt"
[[ $rc == 1 ]] || { echo "expected exit status 1, got $rc" >&2; exit 1; }
# At most the 15 s: unpacking the bundle comes out of them too, more of it on a busy machine.
grep -qE "^  environment \(timed out after 1[0-5] s" "$scratch/hung.txt"
grep -q "^  GPU tests (not run: out of time)" "$scratch/hung.txt"
echo "gpu-bundle-check: ok"
