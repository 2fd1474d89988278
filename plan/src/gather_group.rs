//! One all-gather of sharded optimizer state as the plan records it (see `gather`): a type of
//! its own, so that the schedule holds the plan's groups without depending on how they are
//! chosen.

use crate::spec::ELEM_BYTES;

/// One all-gather: elements `start..end` of bucket `bucket` (whole parameters), waited for before
/// layer `first_read`, the first in forward order to read one of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GatherGroup {
    pub bucket: usize,
    pub start: usize,
    pub end: usize,
    pub first_read: usize,
}

impl GatherGroup {
    pub fn bytes(&self) -> usize {
        (self.end - self.start) * ELEM_BYTES
    }
}
