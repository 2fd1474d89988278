//! Writing to the terminal without ever panicking. `println!` panics when stdout is a closed
//! pipe (`mlp | head -2`), which would lose the run; here a failed write only stops the writing
//! to that stream, and training, checkpoints and saved parameters go on.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);
static STDERR_CLOSED: AtomicBool = AtomicBool::new(false);
/// Stdout is one of the run's output files (`--save-params /dev/stdout > params.safetensors`).
static STDOUT_IS_AN_OUTPUT: AtomicBool = AtomicBool::new(false);

/// Writes `text` to stdout, unless an earlier write found it closed; to stderr once stdout is
/// an output file (`keep_stdout_for`), which a log line would corrupt.
pub fn out(text: &str) {
    if STDOUT_IS_AN_OUTPUT.load(Ordering::Relaxed) {
        return err(text);
    }
    write(&mut std::io::stdout().lock(), &STDOUT_CLOSED, text)
}

/// Where one of a run's `outputs` is this process's stdout (`/dev/stdout`, or the file stdout is
/// redirected to), everything printed until the next call goes to stderr, so that the file the
/// run writes there holds only itself. Returns whether one is.
pub fn keep_stdout_for<'a>(outputs: impl IntoIterator<Item = &'a Path>) -> bool {
    let is_stdout = outputs.into_iter().any(names_stdout);
    STDOUT_IS_AN_OUTPUT.store(is_stdout, Ordering::Relaxed);
    is_stdout
}

#[cfg(unix)]
fn names_stdout(path: &Path) -> bool {
    use std::os::fd::AsFd;
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let Ok(file) = std::fs::metadata(path) else { return false };
    // A device (`/dev/null`) takes what both write without either spoiling the other.
    if file.file_type().is_char_device() {
        return false;
    }
    let Ok(stdout) = std::io::stdout().as_fd().try_clone_to_owned() else { return false };
    let Ok(stdout) = std::fs::File::from(stdout).metadata() else { return false };
    (file.dev(), file.ino()) == (stdout.dev(), stdout.ino())
}

#[cfg(not(unix))]
fn names_stdout(_: &Path) -> bool {
    false
}

/// Writes `text` and a newline to stdout.
pub fn out_line(text: &str) {
    out(&format!("{text}\n"))
}

/// Writes `text` to stderr, unless an earlier write found it closed.
pub fn err(text: &str) {
    write(&mut std::io::stderr().lock(), &STDERR_CLOSED, text)
}

/// Writes `text` and a newline to stderr, in one write (so ranks' lines do not interleave).
pub fn err_line(text: &str) {
    write(&mut std::io::stderr().lock(), &STDERR_CLOSED, &format!("{text}\n"))
}

/// Whether a write to stdout has failed (the reader went away).
pub fn stdout_closed() -> bool {
    STDOUT_CLOSED.load(Ordering::Relaxed)
}

fn write(stream: &mut impl Write, closed: &AtomicBool, text: &str) {
    if closed.load(Ordering::Relaxed) {
        return;
    }
    if stream.write_all(text.as_bytes()).and_then(|()| stream.flush()).is_err() {
        closed.store(true, Ordering::Relaxed);
    }
}
