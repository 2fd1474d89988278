//! What a rank prints if it aborts the job: a failed rank's reason. Kept here, not in the request
//! that asks the communication thread to end the job, because the thread may abort from inside a
//! collective it is stuck in, which that request waits behind; and the chunk protocol leaves its
//! own reason here when ranks post chunks of different collectives.

use std::sync::{Mutex, MutexGuard};

fn words() -> MutexGuard<'static, Option<String>> {
    static WORDS: Mutex<Option<String>> = Mutex::new(None);
    WORDS.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Sets what this rank prints (on stderr) if it aborts the job.
pub(super) fn leave(why: String) {
    *words() = Some(why);
}

/// Takes what was left: to print as the rank aborts, or to drop when the job goes on.
pub(super) fn take() -> Option<String> {
    words().take()
}
