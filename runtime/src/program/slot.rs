//! A value the generated program hands on partway through a function: a bucket to its launch, an
//! all-reduce to its wait point, PowerSGD's P sums to their Q all-reduce.
//!
//! Each such value used to be a local moved out at its own line. At every early return (`?`) and
//! every unwind edge after the first of those moves, some locals are moved and others are not, so
//! the compiler keeps a drop flag per bucket and merges them at every join of the function: code,
//! and optimiser time, growing with the square of the bucket count (a 48-block GPT's release
//! build took 77 s, against 18 s with slots). A slot is emptied through `&mut` instead of moved,
//! so every local stays whole until the function returns, their drops are one chain that every
//! exit shares, and the generated functions grow linearly with the model's depth.
//!
//! The compiler no longer proves that each bucket is launched and waited for once; the macro
//! writes one `take` per slot on each path, and a second would panic here, at the model's
//! `#[distributed_model]` (the generated code's location).
//! What the types still prove is unchanged: a bucket is updated only after its wait point gives
//! it back.

/// Holds `T` until the generated program takes it, once.
#[derive(Debug)]
pub struct Slot<T>(Option<T>);

impl<T> Slot<T> {
    /// A full slot.
    #[inline]
    pub fn new(value: T) -> Self {
        Slot(Some(value))
    }

    /// The value, still in the slot (a bucket's gradient views during backward).
    #[inline]
    #[track_caller]
    pub fn get_mut(&mut self) -> &mut T {
        match &mut self.0 {
            Some(value) => value,
            None => taken_twice(),
        }
    }

    /// The value, leaving the slot empty.
    #[inline]
    #[track_caller]
    pub fn take(&mut self) -> T {
        match self.0.take() {
            Some(value) => value,
            None => taken_twice(),
        }
    }
}

#[cold]
#[inline(never)]
#[track_caller]
fn taken_twice() -> ! {
    panic!("a slot of the program #[distributed_model] generated was used after it was taken (a bug in the macro)")
}

#[cfg(test)]
mod tests {
    use super::Slot;

    #[test]
    fn holds_the_value_until_taken() {
        let mut slot = Slot::new(vec![1.0f32, 2.0]);
        slot.get_mut().push(3.0);
        assert_eq!(slot.take(), vec![1.0, 2.0, 3.0]);
    }

    #[test]
    #[should_panic(expected = "used after it was taken")]
    fn a_second_take_panics() {
        let mut slot = Slot::new(1u8);
        let _ = slot.take();
        let _ = slot.take();
    }

    #[test]
    #[should_panic(expected = "used after it was taken")]
    fn a_view_after_the_take_panics() {
        let mut slot = Slot::new(1u8);
        let _ = slot.take();
        let _ = slot.get_mut();
    }
}
