//! A bounded sample of a sequence of unknown length: every item while at most `max` fit, then
//! every second, fourth, ... item of the whole sequence, so that what is kept stays spread over
//! all of it (as `trace::SampledSteps` keeps steps).

/// Every `every`-th item offered (counted from the first), `every` doubling whenever more than
/// `max` would be kept.
#[derive(Debug)]
pub(super) struct Strided<T> {
    kept: Vec<(u64, T)>,
    offered: u64,
    every: u64,
    max: usize,
}

impl<T> Strided<T> {
    /// Keeps at most `max` items (at least 1).
    pub(super) fn new(max: usize) -> Self {
        Strided { kept: Vec::new(), offered: 0, every: 1, max: max.max(1) }
    }

    /// Offers the next item; `make` runs only when it is kept.
    pub(super) fn offer(&mut self, make: impl FnOnce() -> T) {
        let index = self.offered;
        self.offered += 1;
        if !index.is_multiple_of(self.every) {
            return;
        }
        self.kept.push((index, make()));
        if self.kept.len() > self.max {
            self.every *= 2;
            let every = self.every;
            self.kept.retain(|(i, _)| i.is_multiple_of(every));
        }
    }

    /// What is kept, in the order offered.
    pub(super) fn kept(&self) -> impl Iterator<Item = &T> {
        self.kept.iter().map(|(_, item)| item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_kept_stays_spread_over_everything_offered() {
        let mut windows = Strided::new(4);
        (0..4).for_each(|w| windows.offer(|| w));
        assert_eq!(windows.kept().copied().collect::<Vec<_>>(), [0, 1, 2, 3]);
        windows.offer(|| 4);
        assert_eq!(windows.kept().copied().collect::<Vec<_>>(), [0, 2, 4]);
        // A long run: evenly spaced over all of it, not bunched at its end.
        let mut long = Strided::new(64);
        (0..1000).for_each(|w| long.offer(|| w));
        let kept: Vec<u64> = long.kept().copied().collect();
        assert_eq!(kept, (0..1000).step_by(16).collect::<Vec<_>>());
        let mut made = 0;
        long.offer(|| {
            made += 1;
            1000
        });
        assert_eq!(made, 0, "an item not kept is not made");
    }
}
