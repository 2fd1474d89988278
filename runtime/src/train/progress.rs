//! How a run shows its progress on rank 0. The library prints log lines and reports itself; a
//! progress display (the command line's bar) plugs in here, so that the runtime does not
//! depend on a terminal library.

/// Told about each step on rank 0 (other ranks get a [`NoProgress`]).
pub trait Progress {
    /// Training starts at `first_step` (0-based; later than 0 after a resume) of `steps`.
    fn start(&self, _first_step: u64, _steps: u64) {}

    /// One more step is done.
    fn advance(&self) {}

    /// Runs `print`, which writes lines to the terminal, without tearing the display.
    fn suspend(&self, print: &mut dyn FnMut()) {
        print()
    }

    /// Training is over: the display goes away before the summary lines.
    fn finish(&self) {}
}

/// Log lines only.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoProgress;

impl Progress for NoProgress {}

/// A display started for a run, finished exactly once: where the loop says so, or when it ends
/// early with an error, whose message must not land inside a live display.
pub(super) struct Shown<'p> {
    progress: &'p dyn Progress,
    showing: bool,
}

impl<'p> Shown<'p> {
    pub(super) fn start(progress: &'p dyn Progress, first_step: u64, steps: u64) -> Self {
        progress.start(first_step, steps);
        Shown { progress, showing: true }
    }

    pub(super) fn finish(&mut self) {
        if std::mem::take(&mut self.showing) {
            self.progress.finish();
        }
    }
}

impl Drop for Shown<'_> {
    fn drop(&mut self) {
        self.finish();
    }
}
