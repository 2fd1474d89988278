//! One all-gather of sharded optimizer state as the plan records it (see `gather`): a type of
//! its own, so that the schedule holds the plan's groups without depending on how they are
//! chosen.

use crate::spec::ELEM_BYTES;

/// One all-gather: elements `start..end` of bucket `bucket` (whole parameters), waited for before
/// layer `first_read`, the first in forward order to read one of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GatherGroup {
    /// The bucket gathered from, by index in launch order.
    pub bucket: usize,
    /// First element of the range, an offset in the bucket's buffer.
    pub start: usize,
    /// One past the range's last element, an offset in the bucket's buffer.
    pub end: usize,
    /// Index (definition order) of the first layer in forward that reads a parameter in the range:
    /// the gather is waited for right before it.
    pub first_read: usize,
}

impl GatherGroup {
    /// Bytes of the range `start..end` in FP32: what every rank holds once it is gathered.
    pub fn bytes(&self) -> usize {
        (self.end - self.start) * ELEM_BYTES
    }
}
