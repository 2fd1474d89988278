#!/usr/bin/env bash
# Builds main.cpp and the kernels (../src/kernels.cpp) with ThreadSanitizer and runs them; exits
# non-zero on the first data race (`make test` runs it).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=${1:-$root/target/kernel-races}
mkdir -p "$(dirname "$out")"
g++ -std=c++20 -O1 -g -fsanitize=thread -ffp-contract=off -Wall -Wextra -Wno-sign-compare -pthread \
    -I"$root/runtime/src/cuda/kernels" -I"$here/../src" "$here/main.cpp" "$here/../src/kernels.cpp" -o "$out"
TSAN_OPTIONS="halt_on_error=1 exitcode=66" "$out"
