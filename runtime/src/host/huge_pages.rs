//! Large buffers on transparent huge pages.
//!
//! Debian's default transparent-huge-page mode is `madvise`: a buffer gets 2 MiB pages only if
//! asked for before its pages are first touched. A step streams ~150 MiB of parameters,
//! gradients and optimizer state per rank through 4 KiB pages otherwise, with a TLB miss every
//! 1024 floats. Measured on the mlp, side by side: one process 53.6 -> 51.8 ms per step
//! (optimizer 5.3 -> 4.8 ms, backward 30.2 -> 29.5 ms; medians of 3), two ranks with overlap
//! 64.7 -> 62.4 ms and compute-only 54.5 -> 53.1 ms (medians of 6).

use std::ffi::c_void;

/// Smaller buffers cannot hold a whole aligned huge page often enough to matter.
const SMALLEST: usize = 2 << 20;
const PAGE: usize = 4096;

/// An empty vector with room for `len` floats, whose pages the kernel may back with huge pages.
pub fn with_capacity(len: usize) -> Vec<f32> {
    let mut v = Vec::with_capacity(len);
    advise(&mut v);
    v
}

/// `len` zeros, on huge pages where the kernel can.
pub fn zeroed(len: usize) -> Vec<f32> {
    let mut v = with_capacity(len);
    v.resize(len, 0.0);
    v
}

/// Resizes `v` to `len`, filling with zeros; when that allocates, the new allocation is advised
/// before the zeros touch it.
pub fn resize_zeroed(v: &mut Vec<f32>, len: usize) {
    if len > v.capacity() {
        v.reserve_exact(len - v.len());
        advise(v);
    }
    v.resize(len, 0.0);
}

/// Makes `v` a copy of `values`; when that allocates, the new allocation is advised before the
/// copy touches it.
pub fn assign(v: &mut Vec<f32>, values: &[f32]) {
    v.clear();
    if values.len() > v.capacity() {
        v.reserve_exact(values.len());
        advise(v);
    }
    v.extend_from_slice(values);
}

/// Asks for huge pages over the whole pages inside `v`'s allocation. Advice only: a kernel
/// without transparent huge pages, or one set to `never`, refuses it, and nothing changes.
fn advise(v: &mut Vec<f32>) {
    let bytes = v.capacity() * std::mem::size_of::<f32>();
    if bytes < SMALLEST {
        return;
    }
    let start = v.as_mut_ptr() as usize;
    let (first, end) = (start.next_multiple_of(PAGE), (start + bytes) / PAGE * PAGE);
    if end > first {
        // SAFETY: `first..end` lies inside `v`'s allocation. MADV_HUGEPAGE only changes how the
        // kernel may back those pages in future faults; it never changes their contents or
        // their addresses, so no Rust reference is affected.
        unsafe { libc::madvise(first as *mut c_void, end - first, libc::MADV_HUGEPAGE) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_hold_what_was_asked() {
        let big = 3 << 20;
        assert_eq!(zeroed(big).len(), big);
        assert!(zeroed(big).iter().all(|&x| x == 0.0));
        assert!(with_capacity(big).capacity() >= big && with_capacity(big).is_empty());
        let mut v = vec![1.0; 10];
        resize_zeroed(&mut v, big);
        assert_eq!((v.len(), &v[..10], v[big - 1]), (big, &[1.0; 10][..], 0.0));
        resize_zeroed(&mut v, 5);
        assert_eq!(v, [1.0; 5]);
        let values: Vec<f32> = (0..big).map(|i| i as f32).collect();
        assign(&mut v, &values);
        assert_eq!(v, values);
        assign(&mut v, &[2.0]);
        assert_eq!(v, [2.0]);
    }
}
