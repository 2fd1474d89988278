//! Compiles a two-line C shim exporting `MPI_IN_PLACE`, a macro whose value differs between MPI
//! implementations and which the `mpi` crate's bindings do not expose. In-place all-reduce keeps
//! gradient memory at one buffer per bucket.
//!
//! Links the system OpenBLAS behind `cblas-sys`'s declarations (`openblas-src` would do the
//! same, but its `system` mode still builds a downloader with a TLS stack), or, with the `mkl`
//! feature, oneMKL from the folder `MKL_LIB_DIR` names.

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
    if std::env::var_os("CARGO_FEATURE_MKL").is_some() {
        link_mkl();
        return;
    }
    println!("cargo:rustc-link-lib=dylib=openblas");
    println!("cargo:rerun-if-env-changed=LIBRARY_PATH");
    if !openblas_found() {
        // Only a warning: the linker may know places this does not look in. If it fails, this
        // line is the explanation next to its "unable to find library -lopenblas".
        println!(
            "cargo:warning=libopenblas.so not found in LIBRARY_PATH or the system library \
             directories: install OpenBLAS (Debian: libopenblas-dev; `make deps` does)"
        );
    }
}

/// Whether `libopenblas.so` is in `LIBRARY_PATH` or a usual system library directory.
fn openblas_found() -> bool {
    let from_env = std::env::var("LIBRARY_PATH").unwrap_or_default();
    let system =
        ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib"];
    let found = from_env
        .split(':')
        .filter(|d| !d.is_empty())
        .chain(system)
        .any(|dir| std::path::Path::new(dir).join("libopenblas.so").exists());
    found
}

/// oneMKL's single dynamic library, `libmkl_rt`, by its file name in Intel's pip wheel (which
/// has only `.so.3` names, no unversioned links), from `MKL_LIB_DIR`; it loads the rest of oneMKL
/// from its own folder as it starts.
fn link_mkl() {
    println!("cargo:rerun-if-env-changed=MKL_LIB_DIR");
    const LIBRARY: &str = "libmkl_rt.so.3";
    let dir = match std::env::var("MKL_LIB_DIR") {
        Ok(dir) if !dir.is_empty() => std::path::PathBuf::from(dir),
        _ => panic!(
            "the `mkl` feature links oneMKL from MKL_LIB_DIR, the folder holding {LIBRARY}: `make mkl` unpacks \
             Intel's pip wheel into .tools/mkl"
        ),
    };
    if !dir.join(LIBRARY).exists() {
        panic!(
            "MKL_LIB_DIR {} holds no {LIBRARY}: it must be the library folder of oneMKL 2025 or later",
            dir.display()
        );
    }
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-link-lib=dylib:+verbatim={LIBRARY}");
}
