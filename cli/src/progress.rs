//! The progress bar on rank 0: `indicatif` behind the runtime's `Progress` hooks.

use indicatif::{ProgressBar, ProgressStyle};
use overlap_runtime::train::Progress;

/// Steps done of the total, elapsed and remaining time.
pub struct Bar(ProgressBar);

impl Bar {
    /// A bar drawn on stderr when it is a terminal (hidden otherwise, as indicatif does).
    pub fn new() -> Self {
        let bar = ProgressBar::new(0);
        if let Ok(style) =
            ProgressStyle::with_template("{bar:40} {pos}/{len} steps [{elapsed_precise} < {eta_precise}]")
        {
            bar.set_style(style);
        }
        Bar(bar)
    }
}

impl Default for Bar {
    fn default() -> Self {
        Bar::new()
    }
}

impl Progress for Bar {
    fn start(&self, first_step: u64, steps: u64) {
        self.0.set_length(steps);
        self.0.set_position(first_step);
        // A resumed run's earlier steps took no time here: the estimate of the rate starts from
        // this position (which a tick records) and from now, and so does the elapsed time.
        self.0.tick();
        self.0.reset_elapsed();
    }

    fn advance(&self) {
        self.0.inc(1);
    }

    fn suspend(&self, print: &mut dyn FnMut()) {
        self.0.suspend(print)
    }

    fn finish(&self) {
        self.0.finish_and_clear();
    }
}
