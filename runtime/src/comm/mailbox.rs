//! Where the communication thread hands a result back: one mailbox per bucket index (and one for
//! flushes), made on first use and reused every step, so launching an all-reduce and waiting for
//! it allocate nothing (a channel per launch would, every step).

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub(crate) struct Mailbox<T> {
    slot: Mutex<Slot<T>>,
    changed: Condvar,
}

struct Slot<T> {
    state: State<T>,
    /// A `Reply` that has neither sent nor been dropped exists: the box is not free.
    outstanding: bool,
    /// Its `Pending` exists (a handle not yet waited for, or dropped): the box is not free, or
    /// a second launch of the same index would take the first one's value.
    awaited: bool,
}

enum State<T> {
    Empty,
    Full(T),
    /// The communication thread dropped its `Reply` without sending: it is gone.
    Abandoned,
    /// The waiting side already waited out its timeout elsewhere (a flush): the next wait
    /// reports the timeout at once instead of waiting as long again.
    GaveUp,
}

impl<T> Default for Mailbox<T> {
    fn default() -> Self {
        Mailbox {
            slot: Mutex::new(Slot { state: State::Empty, outstanding: false, awaited: false }),
            changed: Condvar::new(),
        }
    }
}

/// Why a wait ended without a bucket.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Undelivered {
    TimedOut,
    Abandoned,
}

/// The communication thread's end: `send` once; dropping it unsent tells the waiter the thread
/// is gone (it was unwinding from a panic, or never served the request).
pub(crate) struct Reply<T>(Option<Arc<Mailbox<T>>>);

/// The waiting end, held by the `InFlight` handle.
pub(crate) struct Pending<T>(Arc<Mailbox<T>>);

impl<T> Mailbox<T> {
    /// A reply/pending pair over `boxed`, reused when it is free (it always is once the previous
    /// wait returned), else first replaced by a new mailbox.
    pub(crate) fn open(boxed: &mut Arc<Mailbox<T>>) -> (Reply<T>, Pending<T>) {
        if !Mailbox::is_free(boxed) {
            *boxed = Arc::default();
        }
        *boxed.lock() = Slot { state: State::Empty, outstanding: true, awaited: true };
        (Reply(Some(Arc::clone(boxed))), Pending(Arc::clone(boxed)))
    }

    /// Whether no unsent reply can still write into `boxed` and no waiter can still read it, so
    /// that it can be reused.
    fn is_free(boxed: &Arc<Mailbox<T>>) -> bool {
        let slot = boxed.lock();
        !slot.outstanding && !slot.awaited
    }

    /// Whether a reply has been neither sent nor dropped: the communication thread still owes
    /// it (or is stuck in the collective that would send it).
    pub(crate) fn is_outstanding(&self) -> bool {
        self.lock().outstanding
    }

    /// Whether its reply is still owed and a wait for it ran out (here, or elsewhere: `give_up`).
    pub(crate) fn waited_out(&self) -> bool {
        let slot = self.lock();
        slot.outstanding && matches!(slot.state, State::GaveUp)
    }

    fn lock(&self) -> MutexGuard<'_, Slot<T>> {
        // A panic while holding this lock cannot leave the slot half-written; use it as is.
        self.slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Makes the next wait on this box report a timeout at once, unless its value is already
    /// there. The reply stays outstanding (it may still arrive), so the box is not reused.
    pub(crate) fn give_up(&self) {
        let mut slot = self.lock();
        if slot.outstanding && matches!(slot.state, State::Empty) {
            slot.state = State::GaveUp;
            self.changed.notify_all();
        }
    }

    /// The reply was dropped unsent: the waiter learns the thread is gone, unless it was given up
    /// on already (a timeout elsewhere), which stays what it learns.
    fn abandon(&self) {
        let mut slot = self.lock();
        if !matches!(slot.state, State::GaveUp) {
            slot.state = State::Abandoned;
        }
        slot.outstanding = false;
        self.changed.notify_all();
    }

    fn put(&self, state: State<T>) {
        let mut slot = self.lock();
        slot.state = state;
        slot.outstanding = false;
        self.changed.notify_all();
    }
}

impl<T> Reply<T> {
    pub(crate) fn send(mut self, value: T) {
        if let Some(mailbox) = self.0.take() {
            mailbox.put(State::Full(value));
        }
    }
}

impl<T> Drop for Reply<T> {
    fn drop(&mut self) {
        if let Some(mailbox) = self.0.take() {
            mailbox.abandon();
        }
    }
}

impl<T> Drop for Pending<T> {
    /// Waited for or dropped unwaited: nobody reads the box any more.
    fn drop(&mut self) {
        self.0.lock().awaited = false;
    }
}

impl<T> Pending<T> {
    /// Blocks until the value arrives, at most `timeout` when given (a timeout too long for an
    /// instant to represent is none).
    pub(crate) fn wait(self, timeout: Option<Duration>) -> Result<T, Undelivered> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut slot = self.0.lock();
        loop {
            match std::mem::replace(&mut slot.state, State::Empty) {
                State::Full(value) => return Ok(value),
                State::Abandoned => return Err(Undelivered::Abandoned),
                State::GaveUp => return Err(Undelivered::TimedOut),
                State::Empty => {}
            }
            slot = match deadline {
                None => self.0.changed.wait(slot).unwrap_or_else(|p| p.into_inner()),
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        // Remembered for whoever asks what is still owed (`waited_out`).
                        slot.state = State::GaveUp;
                        return Err(Undelivered::TimedOut);
                    }
                    self.0.changed.wait_timeout(slot, left).unwrap_or_else(|p| p.into_inner()).0
                }
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivers_across_threads_and_is_reused() {
        let mut boxed = Arc::new(Mailbox::<usize>::default());
        let first = Arc::as_ptr(&boxed);
        for round in 0..3 {
            assert!(Mailbox::is_free(&boxed));
            let (reply, pending) = Mailbox::open(&mut boxed);
            assert_eq!(Arc::as_ptr(&boxed), first, "a free mailbox is reused");
            std::thread::spawn(move || reply.send(round)).join().unwrap();
            assert_eq!(pending.wait(None).unwrap(), round);
        }
    }

    #[test]
    fn a_dropped_reply_is_reported_and_a_silent_one_times_out() {
        let mut boxed = Arc::new(Mailbox::<()>::default());
        let (reply, pending) = Mailbox::open(&mut boxed);
        drop(reply);
        assert_eq!(pending.wait(None).err(), Some(Undelivered::Abandoned));
        let (reply, pending) = Mailbox::open(&mut boxed);
        assert_eq!(pending.wait(Some(Duration::from_millis(20))).err(), Some(Undelivered::TimedOut));
        assert!(!Mailbox::is_free(&boxed), "an unsent reply can still write into it");
        let busy = Arc::clone(&boxed);
        let (_, _) = Mailbox::open(&mut boxed);
        assert!(!Arc::ptr_eq(&busy, &boxed), "a busy mailbox is replaced, not reused");
        drop(reply);
        assert!(Mailbox::is_free(&busy));
    }

    #[test]
    fn a_delivered_value_nobody_waited_for_yet_is_not_overwritten() {
        let mut boxed = Arc::new(Mailbox::<u8>::default());
        let (reply, first) = Mailbox::open(&mut boxed);
        reply.send(1);
        assert!(!Mailbox::is_free(&boxed), "its waiter has not read it yet");
        let (reply, second) = Mailbox::open(&mut boxed);
        reply.send(2);
        assert_eq!((first.wait(None).ok(), second.wait(None).ok()), (Some(1), Some(2)));
        assert!(Mailbox::is_free(&boxed));
    }

    #[test]
    fn a_timeout_no_instant_can_hold_is_no_timeout() {
        let mut boxed = Arc::new(Mailbox::<u8>::default());
        let (reply, pending) = Mailbox::open(&mut boxed);
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            reply.send(7);
        });
        assert_eq!(pending.wait(Some(Duration::MAX)).ok(), Some(7));
        sender.join().unwrap();
    }

    #[test]
    fn a_given_up_box_times_out_at_once_and_is_not_reused() {
        let mut boxed = Arc::new(Mailbox::<u8>::default());
        let (reply, pending) = Mailbox::open(&mut boxed);
        boxed.give_up();
        assert_eq!(pending.wait(None).err(), Some(Undelivered::TimedOut));
        assert!(!Mailbox::is_free(&boxed), "its reply may still arrive");
        reply.send(1);
        assert!(Mailbox::is_free(&boxed));
        // A value already delivered is not given up.
        let (reply, pending) = Mailbox::open(&mut boxed);
        reply.send(2);
        boxed.give_up();
        assert_eq!(pending.wait(None).ok(), Some(2));
    }
}
