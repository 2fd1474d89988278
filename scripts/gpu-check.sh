#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU and its driver but possibly no cargo, no
# compiler, no network and no OpenMPI. It runs the bundle scripts/gpu-bundle.sh built elsewhere:
#
#   scripts/gpu-check.sh [--bundle FILE] [--out DIR] [--seconds N] [--archive FILE]
#
#   --bundle FILE  the tarball (default: target/gpu-bundle.tar.gz, or the bundle this script is in)
#   --seconds N    the whole check's time (default 480): GPU time is often lent by the minute.
#                  Each step also has a limit of its own, so a hang (a collective that never
#                  completes, a kernel that never ends) costs that step, not the rest; a step
#                  the remaining time cannot hold is reported as not run. The steps run most
#                  telling first: the GPU tests, then training, then PyTorch, kernels, sanitizer.
#   --archive FILE also packs the results into one gzipped tarball FILE at the end, or when the
#                  check is stopped (SIGTERM, SIGINT): one file to bring back from the machine.
#   --out DIR      where the results go (default: gpu-check-out); at most 10 files:
#     env.txt        driver, GPU, CPU, glibc, where cuBLAS / NVRTC / NCCL / ptxas / the sanitizer are
#     gpu-tests.txt  the GPU tests with --include-ignored (layer gradients vs the CPU, training
#                    parity, accumulation, resume, NCCL under backward; multi-rank ones need mpirun)
#     nvrtc.txt      the kernels compiled to CUBIN for sm_80/sm_90; ptxas's report when it exists
#     mlp.txt        mlp --device cuda, 50 steps, with its JSON report and the GPU's idle time a
#                    step, before its first kernel and after its last (from the trace)
#     resmlp.txt     resmlp (8 residual blocks) --device cuda, 50 steps, with its JSON report
#     gpt.txt        gpt (attention, tied head, clipping, held-out loss) --device cuda on this
#                    script's own text, 50 steps, JSON report, then a 200-character sample from
#                    the parameters the GPU trained; its first loss against the CPU's, and its
#                    second with --dropout 0.2 (the same masks on both devices); then the
#                    same run in the example's other shape, nanoGPT's GPU run's baby GPT, its
#                    first loss against the CPU's, and the first loss of the shape over GPT-2's
#                    padded token ids (--vocab 50304) against the CPU's
#     trace.json, timeline.svg   that run's trace and step timeline
#     sanitizer.txt  compute-sanitizer memcheck and racecheck of the layer-gradient tests (a chain,
#                    residual blocks, attention, the tied head)
#     pytorch.txt    the same model and batch in PyTorch on the same GPU (one process, and DDP
#                    with NCCL at world size 1), and our step time over theirs; the same for gpt
#                    and its PyTorch twin (compare/gpt_twin.py --gpu-speed), in both shapes
# Every step's failure is printed and the script goes on; it exits non-zero if any step failed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
check=gpu-check seconds=480 out=gpu-check-out
bundle_folder=overlap-gpu bundle_marker=release/examples/mlp
bundle_tarball=gpu-bundle.tar.gz bundle_builder=scripts/gpu-bundle.sh
source "$here/check-steps.sh"
check_arguments "$@"
STEPS=${STEPS:-50}
PYTHON=${PYTHON:-python3}
# The binaries find the CUDA libraries through the `python3` on PATH (PyTorch's wheels): the
# Python given is the one they should ask.
if pybin=$(command -v "$PYTHON"); then
    export PATH=$(dirname "$pybin"):$PATH
fi
open_bundle
mlp=$root/release/examples/mlp
# Only the bundle's own libraries are added; the CUDA ones are found by the binaries themselves.
# Python (PyTorch) runs with the machine's own: the bundle's are the build host's.
export SYSTEM_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH=$root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# The bundle carries the build host's libmpi but not OpenMPI's launcher and plugins, so this
# machine's mpirun (if any) cannot start its binaries: the GPU tests run their ranks as one
# process each, and say so.
export OVERLAP_TESTS_MPIRUN=off

environment() {
    echo "bundle: $(tr '\n' ' ' <"$root/VERSION")"
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv 2>&1 || echo "nvidia-smi: not available"
    echo "glibc: $(getconf GNU_LIBC_VERSION 2>/dev/null || ldd --version 2>/dev/null | awk 'NR == 1')"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
    echo "cpu features: $(grep -o -w -m1 -E 'avx2|avx512f' /proc/cpuinfo | sort -u | tr '\n' ' ')"
    echo "ptxas: $(command -v ptxas || ls /usr/local/cuda/bin/ptxas 2>/dev/null || echo none)"
    echo "compute-sanitizer: $(sanitizer || echo none)"
    echo "mpirun: $(command -v mpirun || echo none)"
    echo "python: $(LD_LIBRARY_PATH=$SYSTEM_LD_LIBRARY_PATH "$PYTHON" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1)"
    echo "libraries found by the binaries:"
    "$mlp" --cuda-libraries
}

# One process per GPU test, each stopped after a minute: a test that hangs (an NCCL call that
# never returns) loses itself, not the tests after it.
gpu_tests() {
    local exe=$root/release/deps/cuda name status failures=() count=0 limit skipped
    for name in $("$exe" --list --include-ignored 2>/dev/null | sed -n 's/: test$//p'); do
        count=$((count + 1))
        limit=$(within_step 60)
        ((limit >= 5)) || { echo "$name and the tests after it: not run, the step's time is spent"; failures+=("$name"); break; }
        timeout --kill-after=2 "$limit" "$exe" --include-ignored --exact "$name" --nocapture --test-threads 1
        status=$?
        ((status == 124 || status == 137)) && echo "$name: timed out after $limit s"
        ((status == 0)) || failures+=("$name")
    done
    ((count > 0)) || { echo "no GPU tests listed by $exe"; return 1; }
    ((${#failures[@]} == 0)) || { echo "${#failures[@]} of $count GPU tests failed: ${failures[*]}"; return 1; }
    # A test that cannot compare anything here (two GPUs needed, one found) says SKIPPED, on the
    # line where libtest names it (`test NAME ... SKIPPED: ...`).
    skipped=$(grep -c 'SKIPPED: ' "$out/gpu-tests.txt")
    if ((skipped > 0)); then
        echo "$((count - skipped)) of $count GPU tests passed; $skipped skipped (the SKIPPED lines above say why)"
    else
        echo "all $count GPU tests passed"
    fi
}

sanitizer() {
    command -v compute-sanitizer && return 0
    ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | awk 'NR == 1 { print; found = 1 } END { exit !found }' && return 0
    # PyTorch's wheels carry no sanitizer; a pip-installed nvidia-cuda-sanitizer-api does.
    return 1
}

sanitize() {
    local tool exe rc=0 limit
    exe=$(sanitizer) || { echo "skipped: compute-sanitizer is not installed (it comes with the CUDA toolkit)"; return 0; }
    for tool in memcheck racecheck; do
        for test in gradients::layer_gradients_match_the_cpu gradients::residual_block_gradients_match_the_cpu \
            gradients::attention_gradients_match_the_cpu gradients::tied_head_gradients_match_the_cpu; do
            echo "-- compute-sanitizer --tool $tool: $test"
            limit=$(within_step 120)
            ((limit >= 5)) || { echo "not run: the step's time is spent"; return 1; }
            # API errors are left out: NCCL's communicator set-up probes kernels of other
            # architectures and handles the failures (cudaFuncGetAttributes, error 209), which
            # the sanitizer would count; our own calls' results are checked by the code itself.
            timeout --kill-after=2 "$limit" "$exe" --tool "$tool" --report-api-errors no --error-exitcode 3 "$root/release/deps/cuda" \
                --include-ignored --exact "$test" --nocapture || rc=$?
        done
    done
    return $rc
}

train_mlp() {
    "$mlp" --device cuda --steps "$STEPS" --log-every 10 --report json \
        --trace "$out/trace.json" --timeline "$out/timeline.svg" || return $?
    gpu_idle "$out/trace.json"
}

# Where the GPU waits for the host in a step, from the trace: before its first kernel (the host
# still filling or copying the batch, or launching) and after its last (the host's end of step).
gpu_idle() {
    LD_LIBRARY_PATH=$SYSTEM_LD_LIBRARY_PATH "$PYTHON" - "$1" <<'PY' || echo "GPU idle: not measured ($PYTHON could not read the trace)"
import json, statistics, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
spans = [e for e in events if e.get("ph") == "X" and e.get("tid") == 0]
steps = [e for e in spans if e.get("cat") == "step"][5:]
lead, tail, length = [], [], []
for step in steps:
    a, b = step["ts"], step["ts"] + step["dur"]
    gpu = [e for e in spans if e.get("cat") not in ("step", "data") and a <= e["ts"] <= b]
    if gpu:
        lead.append(min(e["ts"] for e in gpu) - a)
        tail.append(b - max(e["ts"] + e["dur"] for e in gpu))
        length.append(step["dur"])
if length:
    m = statistics.median
    print("GPU idle a step (median of %d): %.0f us before its first kernel, %.0f us after its last, of %.0f us"
          % (len(length), m(lead), m(tail), m(length)))
PY
}

train_resmlp() {
    "$root/release/examples/resmlp" --device cuda --steps "$STEPS" --log-every 10 --report json
}

train_gpt() {
    local gpt=$root/release/examples/gpt flags=(--text "$root/gpu-check.sh" --eval-every 10 --eval-batches 2)
    local cpu gpu rc=0 first='/^step +1\/[0-9]+ +loss/ { print $4 }'
    cpu=$("$gpt" "${flags[@]}" --steps 1 --report off | awk "$first")
    # With --report json the JSON alone goes to stdout; the step lines go to stderr. Both go to
    # the step's file, gpt.txt, as they come (a run stopped midway still shows how far it got),
    # where the GPU's first loss is then read: no file of its own is left behind when stopped.
    "$gpt" "${flags[@]}" --device cuda --steps "$STEPS" --log-every 10 --report json --sample 200 2>&1
    rc=$?
    gpu=$(awk "$first" "$out/gpt.txt")
    ((rc == 0)) || return $rc
    echo "first loss: CPU $cpu, GPU $gpu"
    same_loss "$cpu" "$gpu" || { echo "the GPU's first loss is not the CPU's"; return 1; }
    # Dropout's masks are hashed from where each element is: the GPU drops what the CPU drops, so
    # the second step's loss (after an update through the masks) agrees too.
    local second='/^step +2\/[0-9]+ +loss/ { print $4 }'
    cpu=$("$gpt" "${flags[@]}" --dropout 0.2 --steps 2 --log-every 1 --report off | awk "$second")
    gpu=$("$gpt" "${flags[@]}" --dropout 0.2 --device cuda --steps 2 --log-every 1 --report off | awk "$second")
    echo "second loss with --dropout 0.2: CPU $cpu, GPU $gpu"
    same_loss "$cpu" "$gpu" || { echo "with dropout, the GPU's loss is not the CPU's"; return 1; }
    # nanoGPT's GPU run's shape (the example's baby GPT: 6 blocks of 6 heads, 384 wide, 256
    # positions): its first loss against the CPU's, and its median step for `pytorch` to compare.
    local baby=(--layers 6 --heads 6 --width 384)
    cpu=$("$gpt" "${flags[@]}" "${baby[@]}" --steps 1 --report off | awk "$first")
    echo "$BABY_GPT"
    "$gpt" "${flags[@]}" "${baby[@]}" --device cuda --steps "$STEPS" --log-every 10 --report off 2>&1 || return $?
    gpu=$(sed -n "/^$BABY_GPT\$/,\$p" "$out/gpt.txt" | awk "$first")
    echo "baby GPT's first loss: CPU $cpu, GPU $gpu"
    same_loss "$cpu" "$gpu" || { echo "the baby GPT's first loss on the GPU is not the CPU's"; return 1; }
    # The shape over GPT-2's padded token ids (its head scores 50304 ids a position; the text's
    # characters are its first 96): its first loss against the CPU's.
    local gpt2=(--vocab 50304 --steps 2 --log-every 1 --report off) log
    log=$("$gpt" "${flags[@]}" "${gpt2[@]}") || { echo "--vocab 50304 failed on the CPU"; return 1; }
    cpu=$(awk "$first" <<<"$log")
    log=$("$gpt" "${flags[@]}" "${gpt2[@]}" --device cuda 2>&1) || { echo "$log"; return 1; }
    gpu=$(awk "$first" <<<"$log")
    echo "--vocab 50304's first loss: CPU $cpu, GPU $gpu"
    same_loss "$cpu" "$gpu" || { echo "with --vocab 50304, the GPU's first loss is not the CPU's"; return 1; }
}

# Whether a loss on the GPU ($2) is the CPU's ($1) within 1e-3 of it; neither may be missing.
same_loss() {
    awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && b != "" && d <= 1e-3 * a) }'
}

# "NAME: ours X ms / PyTorch Y ms: X/Y", from our median step (ms) and the twin's JSON line.
twin_ratio() {
    local name=$1 ms=$2 theirs=$3
    [[ -n $ms ]] || { echo "$name: no step time in gpt.txt to compare"; return 0; }
    echo "$ms $theirs" | "$PYTHON" -c '
import json, sys
ms, rest = sys.stdin.read().split(" ", 1)
theirs = json.loads(rest)["step_ms"]
print("%s: ours %.3f ms / PyTorch %.3f ms: %.3f" % (sys.argv[1], float(ms), theirs, float(ms) / theirs))' "$name"
}

pytorch() {
    # With the machine's libraries, not the bundle's.
    export LD_LIBRARY_PATH=$SYSTEM_LD_LIBRARY_PATH
    "$PYTHON" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null ||
        { echo "skipped: PyTorch with CUDA is not importable by $PYTHON"; return 0; }
    local single ddp ours_ms
    single=$("$PYTHON" "$root/compare/ddp_peer.py" --single --device cuda --steps "$STEPS" | tail -1) || return 1
    ddp=$("$PYTHON" "$root/compare/ddp_peer.py" --device cuda --steps "$STEPS" | tail -1) || return 1
    echo "PyTorch, one process: $single"
    echo "PyTorch DDP, NCCL, world size 1: $ddp"
    ours_ms=$(grep -h '"step_ms"' "$out/mlp.txt" | tail -1 | "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["step_ms"])' 2>/dev/null)
    [[ -n $ours_ms ]] || { echo "no step time from mlp.txt"; return 1; }
    echo "ours: $ours_ms ms"
    # The GPT: the twin (nanoGPT's layout) on the text gpt.txt trained on.
    local gpt_theirs gpt_ms
    gpt_theirs=$("$PYTHON" "$root/compare/gpt_twin.py" --text "$root/gpu-check.sh" --gpu-speed "$STEPS" | tail -1) || return 1
    gpt_ms=$(grep -h '"step_ms"' "$out/gpt.txt" | tail -1 | "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["step_ms"])' 2>/dev/null)
    echo "PyTorch, the gpt twin: $gpt_theirs"
    twin_ratio gpt "$gpt_ms" "$gpt_theirs" || return 1
    # The baby GPT: its twin at the same shape, against the median step of the run in gpt.txt.
    local baby_theirs baby_ms
    baby_theirs=$("$PYTHON" "$root/compare/gpt_twin.py" --text "$root/gpu-check.sh" --gpu-speed "$STEPS" --shape baby | tail -1) ||
        return 1
    baby_ms=$(sed -n "/^$BABY_GPT\$/,\$p" "$out/gpt.txt" | sed -n 's/^done: .* median step \([0-9.]*\) ms.*/\1/p' | tail -1)
    echo "PyTorch, the baby GPT twin: $baby_theirs"
    twin_ratio "baby GPT" "$baby_ms" "$baby_theirs" || return 1
    for theirs in "$single" "$ddp"; do
        echo "$ours_ms $theirs" | "$PYTHON" -c '
import json, sys
ms, rest = sys.stdin.read().split(" ", 1)
t = json.loads(rest)
print("ours / PyTorch %s: %.3f" % (t["mode"], float(ms) / t["step_ms"]))' || return 1
    done
}

# The steps run in a child shell (under `timeout`), which needs the functions and settings.
export -f environment within_step gpu_tests sanitizer sanitize train_mlp gpu_idle train_resmlp train_gpt same_loss \
    twin_ratio pytorch
# The line in gpt.txt after which the baby GPT's run is.
BABY_GPT="== the baby GPT (--layers 6 --heads 6 --width 384)"
export root out mlp STEPS PYTHON BABY_GPT

step "environment" "$out/env.txt" 60 environment
# NCCL ships as libnccl.so.2, which cudarc does not ask for: mlp restarts itself with a link to
# it on the loader's path; the test binaries get that link's folder from here.
nccl_link=$(sed -n 's/^NCCL link //p' "$out/env.txt")
[[ -n $nccl_link ]] && export LD_LIBRARY_PATH=$(dirname "$nccl_link"):$LD_LIBRARY_PATH
# The OpenBLAS kernel set the examples restart themselves with, for the GPU tests' CPU references
# (a bundle's OpenBLAS older than the CPU picks its generic kernels, several times slower).
blas_kernels=$(sed -n 's/^OpenBLAS kernels //p' "$out/env.txt")
[[ -z ${OPENBLAS_CORETYPE:-} && -n $blas_kernels ]] && export OPENBLAS_CORETYPE=$blas_kernels
step "GPU tests" "$out/gpu-tests.txt" 240 gpu_tests
step "mlp --device cuda, $STEPS steps" "$out/mlp.txt" 90 train_mlp
step "gpt --device cuda, $STEPS steps" "$out/gpt.txt" 150 train_gpt
step "resmlp --device cuda, $STEPS steps" "$out/resmlp.txt" 90 train_resmlp
step "PyTorch on the same GPU" "$out/pytorch.txt" 120 pytorch
step "NVRTC and ptxas" "$out/nvrtc.txt" 90 "$root/release/deps/nvrtc" --include-ignored --nocapture
step "compute-sanitizer" "$out/sanitizer.txt" 240 sanitize

steps_verdict
