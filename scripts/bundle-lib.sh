# Sourced by the bundle builders (scripts/gpu-bundle.sh, scripts/cpu-bundle.sh): what both do to
# pack binaries for a machine that has no cargo and no build dependencies.

# The executables cargo built, from its JSON messages (`--message-format=json` on stdin).
executables() {
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        print(m["executable"])'
}

# glibc's own libraries: never bundled (the target machine's glibc must be as new as the build
# host's; the checks print both).
GLIBC_LIBRARIES='^(linux-vdso|libc|libm|libdl|libpthread|librt|libutil|libresolv|libnsl|ld-linux-x86-64)\.so'

# copy_libraries DEST SKIP EXE...: every shared library the executables load, as `ldd` resolves
# them under the caller's LD_LIBRARY_PATH, copied into DEST and stripped; glibc's are left out,
# and so are those whose path starts with SKIP (a folder the bundle carries whole), unless SKIP
# is empty.
copy_libraries() {
    local dest=$1 skip=$2 name path
    shift 2
    for exe in "$@"; do
        ldd "$exe" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }'
    done | sort -u | while read -r name path; do
        [[ $name =~ $GLIBC_LIBRARIES ]] && continue
        [[ -n $skip && $path == "$skip"/* ]] && continue
        cp -L "$path" "$dest/$name"
    done
    strip --strip-unneeded "$dest"/*
}

# tarball OUT STAGE FOLDER LABEL: packs STAGE/FOLDER into OUT and refuses one over 32 MiB (a
# device call carries 64 MiB in all, and the two bundles may travel together).
tarball() {
    local out=$1 stage=$2 folder=$3 label=$4 size
    mkdir -p "$(dirname "$out")"
    tar -C "$stage" -czf "$out" "$folder"
    size=$(stat -c %s "$out")
    echo "$label: $out, $((size / 1024 / 1024)) MiB ($(ls "$stage/$folder/lib" | wc -l) libraries, glibc $(glibc_version))"
    if ((size > 32 * 1024 * 1024)); then
        echo "$label: the bundle is over 32 MiB" >&2
        return 1
    fi
}

glibc_version() {
    ldd --version | awk 'NR == 1 { print $NF }'
}
