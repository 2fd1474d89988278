//! Writing to the terminal without ever panicking. `println!` panics when stdout is a closed
//! pipe (`mlp | head -2`), which would lose the run; here a failed write only stops the writing
//! to that stream, and training, checkpoints and saved parameters go on.
//!
//! Nor without end once the run is told to stop: `mpirun` stops reading its ranks' output when it
//! gets a signal, and passes the signal on seconds later, so a rank that logs often finds its
//! pipe full. A write waits for room in slices of `WAIT_SLICE_MS`, and once a stop signal has
//! come (`give_up_waiting_when`) it drops what does not fit instead of waiting on, so that the
//! step ends, the ranks vote, and the checkpoint is written before the launcher's SIGKILL.

use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);
static STDERR_CLOSED: AtomicBool = AtomicBool::new(false);
/// Stdout is one of the run's output files (`--save-params /dev/stdout > params.safetensors`).
static STDOUT_IS_AN_OUTPUT: AtomicBool = AtomicBool::new(false);
/// Set by a stop signal (`train::stop`): a full stream is then given up, not waited for.
static STOPPING: OnceLock<Arc<AtomicBool>> = OnceLock::new();
/// How long a write to a full stream waits before looking at `STOPPING` again.
const WAIT_SLICE_MS: i32 = 100;
/// At most this much per write once the stream has room: a pipe takes it without blocking.
const ATOMIC_WRITE: usize = libc::PIPE_BUF;

/// Writes to a stream with no room give up once `stopping` is set (the run's stop signals).
pub fn give_up_waiting_when(stopping: Arc<AtomicBool>) {
    let _ = STOPPING.set(stopping);
}

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

/// Writes `text` to `stream`'s descriptor (holding its lock, so that threads' lines do not mix),
/// waiting for room as long as no stop signal came; a failed write, or one given up, closes the
/// stream for this process (`closed`).
fn write(stream: &mut (impl Write + AsFd), closed: &AtomicBool, text: &str) {
    if closed.load(Ordering::Relaxed) {
        return;
    }
    let stopping = || STOPPING.get().is_some_and(|s| s.load(Ordering::SeqCst));
    // Nothing is buffered above the descriptor, unless something wrote past this module.
    if stream.flush().is_err() || write_fd(stream.as_fd(), text.as_bytes(), &stopping).is_err() {
        closed.store(true, Ordering::Relaxed);
    }
}

/// Why a write stopped short.
#[derive(Debug)]
enum Unwritten {
    /// The descriptor failed (a closed pipe: EPIPE).
    Failed,
    /// No room came before a stop signal.
    GivenUp,
}

/// Writes all of `bytes`, `ATOMIC_WRITE` at a time, each once `room_for_writing` says it fits.
fn write_fd(fd: BorrowedFd<'_>, mut bytes: &[u8], stopping: &dyn Fn() -> bool) -> Result<(), Unwritten> {
    while !bytes.is_empty() {
        room_for_writing(fd, stopping)?;
        let chunk = &bytes[..bytes.len().min(ATOMIC_WRITE)];
        // SAFETY: `fd` is an open descriptor for the borrow, and `chunk` is `chunk.len()`
        // readable bytes.
        let written = unsafe { libc::write(fd.as_raw_fd(), chunk.as_ptr().cast(), chunk.len()) };
        match usize::try_from(written) {
            Ok(n) => bytes = &bytes[n..],
            Err(_) => match std::io::Error::last_os_error().kind() {
                std::io::ErrorKind::Interrupted | std::io::ErrorKind::WouldBlock => {}
                _ => return Err(Unwritten::Failed),
            },
        }
    }
    Ok(())
}

/// Waits until `fd` takes a write without blocking (or will fail it at once), in slices of
/// `WAIT_SLICE_MS`, and gives up when `stopping` (a stop signal came) meanwhile.
fn room_for_writing(fd: BorrowedFd<'_>, stopping: &dyn Fn() -> bool) -> Result<(), Unwritten> {
    loop {
        let mut poll = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLOUT, revents: 0 };
        // SAFETY: one valid `pollfd`, as the count says.
        let ready = unsafe { libc::poll(&mut poll, 1, WAIT_SLICE_MS) };
        if ready > 0 {
            // Room, or an error the write then reports (a pipe whose reader left: EPIPE).
            return Ok(());
        }
        if ready < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return Ok(()); // A descriptor poll cannot watch: the write decides.
        }
        if stopping() {
            return Err(Unwritten::GivenUp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that stopped reading (`mpirun` after a signal) leaves a write waiting for room,
    /// as before, until a stop signal comes: then it gives up, instead of holding the step (and
    /// the checkpoint) until the launcher's SIGKILL. A reader that reads gets all.
    #[test]
    fn a_full_pipe_is_waited_for_and_given_up_once_a_stop_came() {
        let (reader, writer) = std::io::pipe().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let text = vec![b'x'; 1 << 20];
        let (flag, bytes) = (Arc::clone(&stop), text.clone());
        let writing = std::thread::spawn(move || write_fd(writer.as_fd(), &bytes, &|| flag.load(Ordering::SeqCst)));
        std::thread::sleep(std::time::Duration::from_millis(400));
        assert!(!writing.is_finished(), "a full pipe is waited for while no stop came");
        stop.store(true, Ordering::SeqCst);
        // Returns at all: without the stop it would wait for the reader forever.
        let given_up = writing.join().unwrap();
        assert!(matches!(given_up, Err(Unwritten::GivenUp)), "{given_up:?}");
        drop(reader);

        let (mut reader, writer) = std::io::pipe().unwrap();
        let bytes = text.clone();
        let writing = std::thread::spawn(move || write_fd(writer.as_fd(), &bytes, &|| false).is_ok());
        let mut read = Vec::new();
        std::io::Read::read_to_end(&mut reader, &mut read).unwrap();
        assert!(writing.join().unwrap());
        assert_eq!(read.len(), text.len(), "every byte arrives when the reader reads");
    }
}
