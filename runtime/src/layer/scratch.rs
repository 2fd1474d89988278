//! Work buffers a layer needs only during one call (attention's per-head copies and its
//! backward's intermediate gradients): one buffer per thread, grown to the largest call and kept,
//! so that a step after the first allocates nothing, without the layer's `&self` or its
//! immutable saved state having to hold them.

use std::cell::RefCell;

thread_local! {
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Runs `work` on `N` slices of this thread's scratch buffer, of the lengths `lens`. Their
/// contents are whatever an earlier call left: `work` writes before it reads. Not reentrant (a
/// call from inside `work` panics).
pub(crate) fn with_scratch<const N: usize, T>(lens: [usize; N], work: impl FnOnce([&mut [f32]; N]) -> T) -> T {
    SCRATCH.with_borrow_mut(|buffer| {
        let total: usize = lens.iter().sum();
        if buffer.len() < total {
            buffer.resize(total, 0.0);
        }
        let mut rest = &mut buffer[..total];
        let parts = lens.map(|len| {
            let (part, tail) = std::mem::take(&mut rest).split_at_mut(len);
            rest = tail;
            part
        });
        work(parts)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_have_their_lengths_and_the_buffer_is_kept() {
        with_scratch([3, 0, 5], |[a, b, c]| {
            assert_eq!((a.len(), b.len(), c.len()), (3, 0, 5));
            a.fill(1.0);
            c.fill(2.0);
        });
        let kept = with_scratch([8], |[all]| all.to_vec());
        assert_eq!(kept, [1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 2.0], "the same memory, as left");
    }
}
