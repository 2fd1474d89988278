//! Threads per rank for a step's kernels (`--threads`): the matrix products are split by their
//! libraries, the optimizers' element-wise updates here, into one contiguous part per thread.
//!
//! One thread by default: mpirun gives each rank a core, and a second thread on the same core
//! only takes turns with the first. Element-wise work gives the same floats however it is split.

use std::sync::atomic::{AtomicUsize, Ordering};

static THREADS: AtomicUsize = AtomicUsize::new(1);

/// Parts smaller than this stay whole: below it, handing work to another thread costs more than
/// the work (a 2048-wide bias is one part).
const MIN_PART: usize = 1 << 16;

/// Runs every later product and optimizer update of this process on `threads` threads (at
/// least 1).
pub fn set(threads: usize) {
    THREADS.store(threads.max(1), Ordering::Relaxed);
}

/// Threads per kernel (see [`set`]).
pub fn count() -> usize {
    THREADS.load(Ordering::Relaxed)
}

/// Applies `kernel` to matching parts of a parameter, its gradient and its optimizer state
/// buffers (all of one length), in parallel when several threads are set. Kernels should be
/// `move` closures: hyperparameters captured by reference are reloaded on every element (they
/// could alias the slices), which keeps the loop from vectorizing. With one thread, or a
/// short parameter, it is one call on this thread: no pool is started and nothing moves. Parts
/// are halved recursively through `rayon::join`, which needs no allocation.
pub(crate) fn for_each_part<const N: usize, K>(value: &mut [f32], grad: &[f32], state: [&mut [f32]; N], kernel: K)
where
    K: Fn(&mut [f32], &[f32], [&mut [f32]; N]) + Sync,
{
    let part = value.len().div_ceil(count()).max(MIN_PART);
    halve(value, grad, state, part, &kernel);
}

fn halve<const N: usize, K>(value: &mut [f32], grad: &[f32], state: [&mut [f32]; N], part: usize, kernel: &K)
where
    K: Fn(&mut [f32], &[f32], [&mut [f32]; N]) + Sync,
{
    if value.len() <= part {
        kernel(value, grad, state);
        return;
    }
    let mid = value.len() / 2;
    let (v0, v1) = value.split_at_mut(mid);
    let (g0, g1) = grad.split_at(mid);
    let mut halves = state.map(|s| {
        let (a, b) = s.split_at_mut(mid);
        (Some(a), Some(b))
    });
    let s0 = std::array::from_fn(|i| halves[i].0.take().expect("taken once"));
    let s1 = std::array::from_fn(|i| halves[i].1.take().expect("taken once"));
    rayon::join(|| halve(v0, g0, s0, part, kernel), || halve(v1, g1, s1, part, kernel));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every element is visited exactly once, with its own gradient and state, whatever the part
    /// length (the global thread count is left alone: other tests run alongside).
    #[test]
    fn parts_cover_every_element_once() {
        let len = 3 * MIN_PART + 5;
        let grad: Vec<f32> = (0..len).map(|i| i as f32).collect();
        for part in [len, MIN_PART, 1000, 7] {
            let (mut value, mut state) = (vec![0.0f32; len], vec![0.0f32; len]);
            halve(&mut value, &grad, [&mut state], part, &|v: &mut [f32], g: &[f32], [s]: [&mut [f32]; 1]| {
                assert!(v.len() <= part);
                for ((v, g), s) in v.iter_mut().zip(g).zip(s.iter_mut()) {
                    *v += g;
                    *s += 1.0;
                }
            });
            assert_eq!(value, grad, "part {part}");
            assert!(state.iter().all(|&s| s == 1.0), "part {part}");
        }
    }
}
