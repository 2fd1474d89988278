//! Starting this program again in place of this process, with some of its environment changed:
//! for settings a shared library reads only when it loads (OpenBLAS's kernel choice, the folders
//! the loader searches for NCCL). Only from a program's `main`, before MPI or any thread starts.

use std::ffi::OsStr;
use std::os::unix::process::CommandExt;

/// Whether this process is already the restart that `again(guard, ..)` made.
pub fn restarted(guard: &str) -> bool {
    std::env::var_os(guard).is_some()
}

/// Replaces this process with its own executable, the same arguments and `env` set, `guard`
/// marking the restart (see `restarted`). Returns only if that failed, with why.
pub fn again(guard: &str, env: &[(&str, &OsStr)]) -> std::io::Error {
    let mut args = std::env::args_os();
    let program = args.next().unwrap_or_else(|| "overlap".into());
    std::process::Command::new("/proc/self/exe")
        .arg0(program)
        .args(args)
        .envs(env.iter().copied())
        .env(guard, "1")
        .exec()
}
