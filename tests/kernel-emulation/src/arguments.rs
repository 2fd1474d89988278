//! The kernels' arguments as the safe functions check and pass them.

/// A size as the kernels' `int`.
pub(crate) fn int(n: usize) -> i32 {
    i32::try_from(n).expect("the kernels take sizes below 2^31")
}

/// Panics unless `slice` holds at least `needed` elements (a caller bug).
pub(crate) fn holds<T>(slice: &[T], needed: usize, what: &str) {
    assert!(slice.len() >= needed, "{what}: {} elements, the kernel reads or writes {needed}", slice.len());
}
