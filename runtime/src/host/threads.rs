//! Threads per rank for the matrix products (`--threads`), which OpenBLAS splits over its own
//! threads by blocks of the output.
//!
//! One thread by default: mpirun gives each rank a core, and a second thread on the same core
//! only takes turns with the first. The element-wise work of a step (activations, optimizer
//! updates) stays on the rank's thread: split over a rayon pool (tried), the SGD update got faster
//! (5.9 → 5.2 ms per step on 2 cores) but the step slower (37.2 → 40.5 ms, medians of 8),
//! probably because rayon's and OpenBLAS's idle workers then compete for the cores.

use std::sync::atomic::{AtomicUsize, Ordering};

static THREADS: AtomicUsize = AtomicUsize::new(1);

/// Runs every later product of this process on `threads` threads (at least 1); the one way in is
/// [`use_for_products`], which also says when the cores are fewer.
fn set(threads: usize) {
    THREADS.store(threads.max(1), Ordering::Relaxed);
}

/// Runs every later product of this process on `threads` threads (`TrainConfig::threads`); a
/// note when fewer cores than that are open to the process: mpirun binds each rank to one core
/// unless told otherwise.
pub fn use_for_products(threads: usize) -> Option<String> {
    set(threads);
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    (threads > cores).then(|| {
        format!(
            "{threads} threads for the products, but this process may run on only {cores} core(s); its threads \
             take turns there. Give each rank more cores, e.g. mpirun --map-by slot:PE={threads} (or --bind-to none)"
        )
    })
}

/// Threads per product (see [`use_for_products`]).
pub fn count() -> usize {
    THREADS.load(Ordering::Relaxed)
}
