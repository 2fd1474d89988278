//! Tests that start child processes, and tests of `flock`ed lock files, take turns: a child holds
//! copies of its parent's descriptors from its fork until its exec closes them, so a lock that
//! another test releases in that window stays held by the child a moment longer, and that test
//! finds it taken (by its own process).

use std::sync::{Mutex, MutexGuard};

static CHILDREN: Mutex<()> = Mutex::new(());

/// Held for the length of a test that forks, or that releases and retakes a lock.
pub(crate) fn one_at_a_time() -> MutexGuard<'static, ()> {
    CHILDREN.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
