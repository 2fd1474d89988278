//! oneMKL in place of OpenBLAS (the `mkl` feature): the BLAS that PyTorch's CPU wheels run,
//! linked from Intel's pip wheel (`make mkl` fetches it; build.rs links its single dynamic
//! library, `libmkl_rt`, from `MKL_LIB_DIR`). It runs on its sequential layer, one thread per
//! product: the layer that needs no OpenMP runtime beside it, and the one thread a rank runs its
//! products on by default anyway (`--threads` is not applied; see `notes`).

use std::ffi::{c_char, c_int, CStr};
use std::sync::Once;

extern "C" {
    /// Chooses the threading layer `libmkl_rt` loads; effective before its first computation.
    fn MKL_Set_Threading_Layer(layer: c_int) -> c_int;
    /// Writes the library's version line, NUL-terminated, into `buffer` of `len` bytes.
    fn MKL_Get_Version_String(buffer: *mut c_char, len: c_int);
    /// The threads oneMKL would run a product on: 1 on the sequential layer.
    #[cfg(test)]
    fn MKL_Get_Max_Threads() -> c_int;
}

/// `MKL_THREADING_SEQUENTIAL` of `mkl_service.h`.
const SEQUENTIAL: c_int = 1;

/// Sets the sequential layer, once, before oneMKL computes anything (its default, Intel's OpenMP
/// layer, needs `libiomp5`, which the wheel does not carry).
pub(crate) fn init() {
    static LAYER: Once = Once::new();
    // SAFETY: a plain setter taking an enum value from oneMKL's header; called before any other
    // oneMKL call of this process, as its documentation asks.
    LAYER.call_once(|| unsafe {
        MKL_Set_Threading_Layer(SEQUENTIAL);
    });
}

/// What a user of this build should know before training on the CPU, one line each: a thread
/// count above 1 is not applied, and on a CPU not Intel's oneMKL runs generic kernels (gpt's step
/// 18% slower than on OpenBLAS on a Zen 4 EPYC), so the default build is the faster one there.
pub fn notes(threads: usize) -> Vec<String> {
    let mut notes = Vec::new();
    if threads > 1 {
        notes.push(format!(
            "this build runs its products on oneMKL's sequential layer, one thread each: {threads} threads per \
             product are not applied"
        ));
    }
    if let Some(vendor) = cpu_vendor().filter(|vendor| vendor != INTEL) {
        notes.push(format!(
            "this build runs its products on oneMKL, which runs generic kernels on this CPU (vendor {vendor}, \
             not {INTEL}): the default build, on OpenBLAS, is faster here"
        ));
    }
    notes
}

/// The vendor string CPUID reports on x86-64.
const INTEL: &str = "GenuineIntel";

/// The CPU's vendor string ("GenuineIntel", "AuthenticAMD"); `None` off x86-64.
fn cpu_vendor() -> Option<String> {
    #[cfg(target_arch = "x86_64")]
    {
        // Leaf 0 names the vendor in EBX, EDX, ECX, four ASCII bytes each, in that order.
        let leaf = std::arch::x86_64::__cpuid(0);
        let bytes: Vec<u8> = [leaf.ebx, leaf.edx, leaf.ecx].iter().flat_map(|word| word.to_le_bytes()).collect();
        Some(String::from_utf8_lossy(&bytes).into_owned())
    }
    #[cfg(not(target_arch = "x86_64"))]
    None
}

/// oneMKL's version line ("Intel(R) oneAPI Math Kernel Library Version 2026.2 ...").
pub fn version() -> String {
    init();
    let mut buffer = [0 as c_char; 256];
    // SAFETY: the buffer is 256 bytes and one less is passed as its length; oneMKL writes at most
    // that many, so the last byte stays 0.
    unsafe { MKL_Get_Version_String(buffer.as_mut_ptr(), (buffer.len() - 1) as c_int) };
    // SAFETY: the buffer ends in a 0 byte (above), so the string ends inside it.
    let text = unsafe { CStr::from_ptr(buffer.as_ptr()) };
    text.to_string_lossy().trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_linked_library_is_onemkl_on_its_sequential_layer() {
        assert!(version().contains("Math Kernel Library"), "{}", version());
        // SAFETY: a plain getter; `version` above set the layer first, as `init` does for products.
        assert_eq!(unsafe { MKL_Get_Max_Threads() }, 1, "not the sequential layer");
    }

    #[test]
    fn notes_name_threads_not_applied_and_a_cpu_not_intels() {
        let on_intel = cpu_vendor().is_none_or(|vendor| vendor == INTEL);
        assert_eq!(notes(1).len(), usize::from(!on_intel), "{:?}", notes(1));
        assert!(notes(4)[0].contains("4 threads per product are not applied"));
        if !on_intel {
            assert!(notes(1)[0].contains("generic kernels"), "{:?}", notes(1));
        }
    }
}
