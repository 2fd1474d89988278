//! Writing to the terminal without ever panicking. `println!` panics when stdout is a closed
//! pipe (`mlp | head -2`), which would lose the run; here a failed write only stops the writing
//! to that stream, and training, checkpoints and saved parameters go on.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);
static STDERR_CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes `text` to stdout, unless an earlier write found it closed.
pub fn out(text: &str) {
    write(&mut std::io::stdout().lock(), &STDOUT_CLOSED, text)
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
