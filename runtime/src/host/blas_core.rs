//! Which of OpenBLAS's kernel sets runs the products. OpenBLAS picks one when it loads, from the
//! CPU's family and model; a CPU newer than the library (Debian 12's OpenBLAS 0.3.21 on a
//! Sapphire or Emerald Rapids Xeon) gets its generic SSE3 kernels ("Prescott"), about 3x slower
//! on `mlp`'s products than the AVX-512 ones the CPU runs. Only the environment variable
//! `OPENBLAS_CORETYPE`, read at load time, changes the choice: so a program's `main` restarts
//! itself once with it set (`restart_with_fitting_kernels`), and a library user is told to
//! set it (`mismatch`). With the `mkl` feature, oneMKL runs the products instead and picks its
//! kernels for the CPU it runs on by itself: nothing to restart, nothing to tell.

#[cfg(not(feature = "mkl"))]
use std::ffi::{c_char, CStr};

#[cfg(not(feature = "mkl"))]
extern "C" {
    /// The kernel set OpenBLAS chose, as a static C string ("Prescott", "Haswell", ...).
    fn openblas_get_corename() -> *const c_char;
}

/// The variable OpenBLAS reads when it loads.
pub const CORETYPE_VARIABLE: &str = "OPENBLAS_CORETYPE";

/// Kernel sets by the instructions they need: a level (1: AVX2, 2: AVX-512, 3: AVX-512 with
/// bf16) and the names OpenBLAS reports for the sets at that level.
const LEVELS: [(u8, &[&str]); 3] = [
    (1, &["haswell", "zen", "skylake", "broadwell"]),
    (2, &["skylakex", "cascadelake"]),
    (3, &["cooperlake", "sapphirerapids"]),
];

/// The kernel set OpenBLAS runs in this process.
#[cfg(not(feature = "mkl"))]
pub fn chosen() -> String {
    // SAFETY: OpenBLAS returns a pointer to a static NUL-terminated name, valid for the life of
    // the process (the library is linked, never unloaded); it is checked for null first.
    unsafe {
        let name = openblas_get_corename();
        if name.is_null() {
            return String::from("unknown");
        }
        CStr::from_ptr(name).to_string_lossy().into_owned()
    }
}

/// The library that runs the products (oneMKL chooses its kernels as it runs).
#[cfg(feature = "mkl")]
pub fn chosen() -> String {
    String::from("oneMKL")
}

/// What runs the products, for the start-up lines: `OpenBLAS kernels Cooperlake`, or oneMKL's
/// version line.
pub fn describe() -> String {
    #[cfg(feature = "mkl")]
    return crate::host::mkl::version();
    #[cfg(not(feature = "mkl"))]
    format!("OpenBLAS kernels {}", chosen())
}

/// The best kernel set this CPU runs, as `OPENBLAS_CORETYPE` names it (`None`: none above SSE3).
pub fn fitting() -> Option<&'static str> {
    #[cfg(target_arch = "x86_64")]
    {
        let avx512 = std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx512dq");
        let avx2 = std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma");
        best(avx2, avx512, avx512 && std::arch::is_x86_feature_detected!("avx512bf16"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    None
}

fn best(avx2: bool, avx512: bool, avx512_bf16: bool) -> Option<&'static str> {
    match (avx2, avx512, avx512_bf16) {
        (_, true, true) => Some("Cooperlake"),
        (_, true, false) => Some("SkylakeX"),
        (true, false, _) => Some("Haswell"),
        _ => None,
    }
}

/// The level of a kernel set by the name OpenBLAS reports (0: below AVX2, or unknown).
fn level(name: &str) -> u8 {
    let name = name.to_ascii_lowercase();
    LEVELS.iter().find(|(_, names)| names.contains(&name.as_str())).map_or(0, |&(level, _)| level)
}

/// The kernel set to ask for when OpenBLAS chose one below what the CPU runs, and nobody set
/// `OPENBLAS_CORETYPE` (a user's choice stands).
pub fn mismatch() -> Option<&'static str> {
    if cfg!(feature = "mkl") || std::env::var_os(CORETYPE_VARIABLE).is_some() {
        return None;
    }
    better(&chosen(), fitting())
}

/// What rank 0 tells a user whose products run on kernels below what the CPU runs: the variable
/// to set where the program could not restart itself (a `Trainer` of their own), or, where
/// `OPENBLAS_CORETYPE` was set (some machines set it for every process), that the value set is
/// what costs the speed. The choice stands either way; only the note says what it costs. Once
/// a process: a program that fits several times is told once.
pub fn slower_kernels_note() -> Option<String> {
    static TOLD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if cfg!(feature = "mkl") || TOLD.load(std::sync::atomic::Ordering::Relaxed) {
        return None;
    }
    let chosen = chosen();
    let fitting = better(&chosen, fitting())?;
    let set = std::env::var_os(CORETYPE_VARIABLE).map(|v| v.to_string_lossy().into_owned());
    TOLD.store(true, std::sync::atomic::Ordering::Relaxed);
    Some(note(&chosen, fitting, set.as_deref()))
}

/// `slower_kernels_note`'s text, for OpenBLAS running `chosen` where the CPU runs `fitting`, with
/// `OPENBLAS_CORETYPE` set to `set`, if at all.
fn note(chosen: &str, fitting: &str, set: Option<&str>) -> String {
    match set {
        None => format!(
            "OpenBLAS runs its {chosen} kernels, and this CPU runs {fitting}'s (several times faster): set \
             {CORETYPE_VARIABLE}={fitting} before the program starts"
        ),
        Some(set) if set.eq_ignore_ascii_case(chosen) => format!(
            "{CORETYPE_VARIABLE} is set, and OpenBLAS runs the {chosen} kernels it names; this CPU runs \
             {fitting}'s (faster): unset {CORETYPE_VARIABLE} or set it to {fitting}"
        ),
        // A name this OpenBLAS does not know (or a restart's that it did not take).
        Some(set) => format!(
            "OpenBLAS did not take {CORETYPE_VARIABLE}={set} and runs its {chosen} kernels; this CPU runs \
             {fitting}'s (several times faster), which this OpenBLAS may not have"
        ),
    }
}

fn better(chosen: &str, fitting: Option<&'static str>) -> Option<&'static str> {
    fitting.filter(|&f| level(f) > level(chosen))
}

/// For a program's `main`, before MPI or any thread starts: when OpenBLAS chose kernels below
/// what the CPU runs, starts this program again, once, in place of this process, with
/// `OPENBLAS_CORETYPE` set. Returns when nothing needs doing; an error when the restart failed.
pub fn restart_with_fitting_kernels() -> Result<(), String> {
    const RESTARTED: &str = "OVERLAP_BLAS_RESTART";
    let Some(fitting) = mismatch() else { return Ok(()) };
    if crate::process::restart::restarted(RESTARTED) {
        return Ok(()); // restarted once already: OpenBLAS did not take the name; run as it is
    }
    let error = crate::process::restart::again(RESTARTED, &[(CORETYPE_VARIABLE, fitting.as_ref())]);
    Err(format!("restarting with {CORETYPE_VARIABLE}={fitting} failed: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generic_choice_on_an_avx512_cpu_is_a_mismatch() {
        assert_eq!(best(true, true, true), Some("Cooperlake"));
        assert_eq!(best(true, true, false), Some("SkylakeX"));
        assert_eq!(best(true, false, false), Some("Haswell"));
        assert_eq!(best(false, false, false), None);
        // What Debian 12's OpenBLAS reports on an Emerald Rapids Xeon.
        assert_eq!(better("Prescott", Some("Cooperlake")), Some("Cooperlake"));
        assert_eq!(better("Haswell", Some("SkylakeX")), Some("SkylakeX"));
        // A library that knows the CPU chose as well or better: nothing to do.
        assert_eq!(better("SkylakeX", Some("SkylakeX")), None);
        assert_eq!(better("Cooperlake", Some("SkylakeX")), None);
        assert_eq!(better("Zen", Some("Haswell")), None);
        assert_eq!(better("Prescott", None), None);
    }

    #[test]
    fn the_note_says_whether_the_variable_was_taken() {
        let unset = note("Prescott", "Cooperlake", None);
        assert!(unset.ends_with("set OPENBLAS_CORETYPE=Cooperlake before the program starts"), "{unset}");
        let taken = note("Haswell", "Cooperlake", Some("haswell"));
        assert!(taken.contains("runs the Haswell kernels it names") && taken.ends_with("set it to Cooperlake"));
        let ignored = note("Prescott", "Cooperlake", Some("Cooperlake"));
        assert!(ignored.starts_with("OpenBLAS did not take OPENBLAS_CORETYPE=Cooperlake and runs its Prescott"));
    }

    #[test]
    #[cfg(not(feature = "mkl"))]
    fn the_kernels_running_here_are_at_least_what_the_restart_would_ask_for_or_named_as_not() {
        // In a test process nothing restarted: either OpenBLAS fits this CPU, or `mismatch`
        // names the set to ask for, which the CPU runs.
        let chosen = chosen();
        assert!(!chosen.is_empty() && chosen != "unknown");
        match (mismatch(), fitting()) {
            (Some(asked), Some(fits)) => assert_eq!(asked, fits),
            (Some(asked), None) => panic!("asked for {asked} on a CPU without AVX2"),
            (None, fits) => assert!(
                std::env::var_os(CORETYPE_VARIABLE).is_some() || fits.is_none_or(|f| level(&chosen) >= level(f)),
                "{chosen} below {fits:?}"
            ),
        }
    }
}
