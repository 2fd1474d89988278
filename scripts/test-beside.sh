#!/usr/bin/env bash
# Usage: scripts/test-beside.sh TEST BUILD_ARGS... -- TARGET_ARGS...
#
# Runs `cargo test BUILD_ARGS TARGET_ARGS` with the integration test TEST (`cargo test BUILD_ARGS
# --test TEST`) running beside it, from the same build, and fails if either fails. For a test
# that spends its time waiting rather than computing: tests/failures/ waits out communication
# timeouts for about 150 s at a sixth of one core, which `cargo test` would otherwise run alone,
# one binary after another. TEST's target has `test = false` so that TARGET_ARGS
# (`--all-targets`) leave it out; its own output is printed after the command's, whole.
set -uo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: $0 TEST BUILD_ARGS... -- TARGET_ARGS..." >&2; exit 2; }
[ $# -ge 1 ] || usage
test_name=$1
shift
build_args=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    build_args+=("$1")
    shift
done
[ $# -gt 0 ] || usage
shift
target_args=("$@")

# Build both (TEST on its own, so that its compiler errors show as text), and find TEST's binary
# among the artifacts cargo reports.
cargo test "${build_args[@]}" "${target_args[@]}" --no-run || exit 1
cargo test "${build_args[@]}" --test "$test_name" --no-run || exit 1
exe=$(cargo test "${build_args[@]}" --test "$test_name" --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
name = sys.argv[1]
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == name and "test" in m["target"]["kind"]:
        print(m["executable"])
' "$test_name")
[ -n "$exe" ] && [ -x "$exe" ] || { echo "$0: found no binary for the test '$test_name'" >&2; exit 1; }

log=$(mktemp)
beside=
# The test runs in a session of its own: an interrupted run ends it and every mpirun job it
# started (each in a process group of its own), and Ctrl-C reaches only the command.
kill_session() {
    local stat fields
    for stat in /proc/[0-9]*/stat; do
        fields=$(cat "$stat" 2>/dev/null) || continue
        # The fields after the command's name, which may hold spaces: state, ppid, pgrp, session.
        read -r -a fields <<<"${fields##*) }"
        [ "${fields[3]:-}" = "$1" ] && kill -KILL "$(basename "$(dirname "$stat")")" 2>/dev/null
    done
}
cleanup() {
    if [ -n "$beside" ]; then kill_session "$beside"; fi
    rm -f "$log"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
setsid --wait "$exe" >"$log" 2>&1 &
beside=$!

cargo test "${build_args[@]}" "${target_args[@]}"
status=$?

wait "$beside"
beside_status=$?
beside=
echo
echo "---- tests/$test_name.rs, run beside the others (exit status $beside_status) ----"
cat "$log"
if [ "$beside_status" -ne 0 ]; then
    echo "$0: tests/$test_name.rs failed" >&2
    exit 1
fi
exit "$status"
