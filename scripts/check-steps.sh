# Sourced by the checks that run a prebuilt bundle on a machine without cargo (scripts/gpu-check.sh
# on a GPU machine, scripts/cpu-targets.sh on any other): their common arguments, the bundle they
# open, and steps that each run under a time limit of their own, so that a hang costs its step and
# not the rest. The sourcing script sets, before `check_arguments "$@"`:
#   check          its name in messages (gpu-check)
#   seconds        the default --seconds
#   out            the default --out folder
#   bundle_folder  the bundle's top folder in the tarball (overlap-gpu)
#   bundle_marker  a file inside that folder that only an unpacked bundle has (release/examples/mlp)
#   bundle_tarball the builder's output under target/ (gpu-bundle.tar.gz): the default --bundle
#   bundle_builder the script that builds it (scripts/gpu-bundle.sh), for the message that none was
#                  found
#   here           the sourcing script's folder (in the repository, scripts/; in a bundle, its root)

# check_arguments "$@": --bundle FILE, --out DIR, --seconds N, --archive FILE; sets `deadline`,
# makes `out` and `archive` absolute and installs the traps that archive the results at the end or
# when the check is stopped.
check_arguments() {
    bundle="" archive=""
    usage() { echo "usage: $0 [--bundle FILE] [--out DIR] [--seconds N] [--archive FILE]" >&2; exit 2; }
    while (($#)); do
        case $1 in
        --bundle) (($# >= 2)) || usage; bundle=$2; shift 2 ;;
        --out) (($# >= 2)) || usage; out=$2; shift 2 ;;
        --seconds) [[ ${2:-} =~ ^[0-9]+$ ]] || usage; seconds=$2; shift 2 ;;
        --archive) (($# >= 2)) || usage; archive=$2; shift 2 ;;
        *) usage ;;
        esac
    done
    deadline=$((SECONDS + seconds))
    mkdir -p "$out" && out=$(cd "$out" && pwd)
    if [[ -n $archive ]]; then
        mkdir -p "$(dirname "$archive")" && archive=$(cd "$(dirname "$archive")" && pwd)/$(basename "$archive")
    fi
    unpacked=""
    trap finish EXIT
    # A step runs in the background (`wait` returns on a signal, a foreground command would not),
    # under a `timeout` that leads a process group of its own: stopped with it, then archived.
    step_pid=""
    trap 'stop_step 143' TERM
    trap 'stop_step 130' INT
    failed=()
}

finish() {
    [[ -z $archive ]] || tar -C "$(dirname "$out")" -czf "$archive" "$(basename "$out")"
    [[ -z $unpacked ]] || rm -rf "$unpacked"
}

stop_step() {
    [[ -z $step_pid ]] || kill -TERM -- "-$step_pid" 2>/dev/null
    exit "$1"
}

# open_bundle: sets `root` to the bundle given, or the one this script was unpacked from, or the
# default build output (unpacked into a folder removed at the end).
open_bundle() {
    if [[ -z $bundle && -e $here/$bundle_marker ]]; then
        root=$here
        return
    fi
    bundle=${bundle:-$here/../target/$bundle_tarball}
    [[ -f $bundle ]] || { echo "$check: no bundle at $bundle: build it with $bundle_builder" >&2; exit 2; }
    unpacked=$(mktemp -d)
    tar -C "$unpacked" -xzf "$bundle" || { echo "$check: $bundle is not a readable tarball" >&2; exit 2; }
    root=$unpacked/$bundle_folder
}

# step NAME FILE LIMIT COMMAND...: runs COMMAND (a function of this script or a program) for at
# most LIMIT seconds and what is left before the deadline, output to FILE; records a failure.
# STEP_END (seconds since the epoch) tells the command when it is stopped, so that what it
# starts under a `timeout` of its own ends by then too; pipelines fail when any part does.
step() {
    local name=$1 file=$2 limit=$3 started=$SECONDS rc left
    shift 3
    echo "== $name"
    left=$((deadline - SECONDS))
    ((left < limit)) && limit=$left
    if ((limit < 10)); then
        echo "not run: the check's --seconds $seconds were spent" >"$file"
        failed+=("$name (not run: out of time)")
        echo "   NOT RUN: out of time"
        return
    fi
    STEP_END=$(($(date +%s) + limit)) timeout --kill-after=10 "$limit" bash -o pipefail -c '"$@"' step "$@" >"$file" 2>&1 &
    step_pid=$!
    wait "$step_pid"
    rc=$?
    step_pid=""
    tail -n 5 "$file" | sed 's/^/   /'
    if ((rc == 124 || rc == 137)); then
        echo "timed out after $limit s" >>"$file"
        failed+=("$name (timed out after $limit s, see $(basename "$file"))")
        echo "   TIMED OUT after $limit s"
    elif ((rc != 0)); then
        failed+=("$name (exit $rc, see $(basename "$file"))")
        echo "   FAILED: exit $rc after $((SECONDS - started)) s"
    else
        echo "   ok in $((SECONDS - started)) s"
    fi
}

# The seconds a command started now may run: LIMIT, or what is left of the step.
within_step() {
    local left=$((STEP_END - $(date +%s) - 3))
    ((left < $1)) && echo "$left" || echo "$1"
}

# The check's verdict, its exit status: 1 if any step failed.
steps_verdict() {
    echo
    if ((${#failed[@]})); then
        echo "$check: ${#failed[@]} step(s) failed:"
        printf '  %s\n' "${failed[@]}"
        return 1
    fi
    echo "$check: every step passed; results in $out"
}
