//! Compiles the GPU backend's `.cu` kernels for the CPU, under `src/emulator.h`.

fn main() {
    let kernels = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../runtime/src/cuda/kernels");
    println!("cargo:rerun-if-changed=src/emulator.h");
    println!("cargo:rerun-if-changed=src/kernels.cpp");
    println!("cargo:rerun-if-changed=src/launchers.h");
    println!("cargo:rerun-if-changed=src/kernel_sources.h");
    println!("cargo:rerun-if-changed={}", kernels.display());
    cc::Build::new()
        .cpp(true)
        .std("c++20")
        .file("src/kernels.cpp")
        .include(&kernels)
        // The GPU's rounding is what the kernels spell out: nothing else may be fused.
        .flag("-ffp-contract=off")
        .flag("-pthread")
        .warnings(true)
        .extra_warnings(true)
        // CUDA's idiom `threadIdx.x < s` compares its unsigned index with an int.
        .flag("-Wno-sign-compare")
        .compile("emulated_kernels");
    println!("cargo:rustc-link-lib=pthread");
}
