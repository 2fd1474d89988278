//! Compiles a two-line C shim exporting `MPI_IN_PLACE`, a macro whose value differs between MPI
//! implementations and which the `mpi` crate's bindings do not expose. In-place all-reduce keeps
//! gradient memory at one buffer per bucket.
//!
//! Links the system OpenBLAS behind `cblas-sys`'s declarations (`openblas-src` would do the
//! same, but its `system` mode still builds a downloader with a TLS stack).

fn main() {
    println!("cargo:rerun-if-changed=src/comm/in_place.c");
    let lib = match build_probe_mpi::probe() {
        Ok(lib) => lib,
        Err(errs) => panic!("overlap-runtime needs an MPI installation (Debian: libopenmpi-dev openmpi-bin): {errs:?}"),
    };
    let mut build = cc::Build::new();
    build.file("src/comm/in_place.c");
    for dir in &lib.include_paths {
        build.include(dir);
    }
    build.compile("overlap_in_place");
    println!("cargo:rustc-link-lib=dylib=openblas");
}
