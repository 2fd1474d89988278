//! What a rank records: spans of named activities on a monotonic clock.

/// One kind of work, with what identifies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activity {
    /// A whole training step, from loading its data to the last update.
    Step,
    /// One layer's forward call.
    Forward {
        /// The layer's index in `Schedule::layers` (definition order, blocks unrolled).
        layer: u32,
    },
    /// The loss and its gradient with respect to the model's output (`Loss::loss_and_gradient`).
    Loss,
    /// The host filling a micro-batch from the dataset: the next one, ahead, while the device
    /// works on this step (tagged with this step), or, with nothing filled ahead, its own.
    Fill,
    /// One layer's backward call.
    Backward {
        /// The layer's index in `Schedule::layers` (definition order, blocks unrolled).
        layer: u32,
    },
    /// One bucket's all-reduce on the communication thread, from the moment it started to the
    /// moment it finished; `queued_ns` is when backward launched it, `updates_ns` how much of it
    /// went to the updates of the parameters lent with the bucket, run as the sums arrived.
    AllReduce {
        /// The bucket's index, in launch order.
        bucket: u32,
        /// Bytes this rank sent for it, in the format they travelled in.
        bytes: u64,
        /// When backward launched it, in nanoseconds since the trace epoch.
        queued_ns: u64,
        /// Nanoseconds of it spent updating the lent parameters.
        updates_ns: u64,
    },
    /// The compute thread blocked until a bucket was reduced.
    Wait {
        /// The bucket waited for, in launch order.
        bucket: u32,
    },
    /// The compute thread blocked until every bucket was reduced (`--no-overlap`: the reductions
    /// start after backward and the step waits for all of them).
    WaitAll,
    /// The optimizer updates of one bucket's parameters.
    Update {
        /// The bucket whose parameters were updated, in launch order.
        bucket: u32,
    },
    /// PowerSGD's work on one bucket on the compute thread: error feedback and P = M·Q, the
    /// orthogonalisation and Q = Mᵀ·P, or the decompression.
    Compress {
        /// The bucket compressed, in launch order.
        bucket: u32,
    },
    /// The global gradient norm of a clipping run, between the last wait point and the first
    /// update.
    Clip,
    /// One bucket's reduce-scatter (sharded optimizer state, its all-gather in the next
    /// forward), from start to finish on the communication thread; `queued_ns` and
    /// `updates_ns` as above.
    ReduceScatter {
        /// The bucket's index, in launch order.
        bucket: u32,
        /// Bytes this rank sent for it, in the format they travelled in.
        bytes: u64,
        /// When backward launched it, in nanoseconds since the trace epoch.
        queued_ns: u64,
        /// Nanoseconds of it spent updating the lent parameters in this rank's shard.
        updates_ns: u64,
    },
    /// One bucket's all-gather of updated shards (sharded optimizer state) on the communication
    /// thread; `queued_ns` is when the step launched it.
    AllGather {
        /// The bucket's index, in launch order.
        bucket: u32,
        /// FP32 bytes of the elements gathered, every rank's shard of them together.
        bytes: u64,
        /// When the step launched it, in nanoseconds since the trace epoch.
        queued_ns: u64,
    },
    /// The forward blocked until a bucket's parameters were all-gathered.
    WaitGather {
        /// The bucket waited for, in launch order.
        bucket: u32,
    },
}

impl Activity {
    /// Work on the communication thread rather than the compute thread.
    pub fn is_communication(&self) -> bool {
        matches!(self, Activity::AllReduce { .. } | Activity::ReduceScatter { .. } | Activity::AllGather { .. })
    }

    /// Time the compute thread spent blocked on communication.
    pub fn is_wait(&self) -> bool {
        matches!(self, Activity::Wait { .. } | Activity::WaitAll | Activity::WaitGather { .. })
    }
}

/// An activity between two instants, in nanoseconds since the rank's trace epoch (rank 0's, on
/// its machine: see `clock`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// The rank that recorded it.
    pub rank: u32,
    /// The step it belongs to, counted from 0 (a resumed run goes on counting from its checkpoint).
    pub step: u64,
    /// What ran.
    pub activity: Activity,
    /// When it started.
    pub start_ns: u64,
    /// When it ended.
    pub end_ns: u64,
}

/// What a run's spans are of, for the files written from them (trace, timeline).
pub struct RunInfo<'a> {
    /// The model's compiled schedule, for the layers' and buckets' names and sizes.
    pub schedule: &'a overlap_plan::Schedule,
    /// Ranks in the run: one row each.
    pub world_size: usize,
    /// `overlap`, `no-overlap` or `compute-only`.
    pub mode: &'static str,
    /// The interconnect emulated, as text, if any.
    pub emulated_link: Option<String>,
}

/// `u64`s per span on the wire.
pub(crate) const WORDS: usize = 7;

impl Span {
    /// Whether this is an all-gather that ends after `end_ns`, the end of the step it is tagged
    /// with: waited for after that step (its last, or in a held-out pass), by no step. A step
    /// counts the all-gathers its forward waited for; one its own update launched counts in the
    /// next step, or, where no step waits for it, nowhere.
    pub(crate) fn gathered_after(&self, end_ns: u64) -> bool {
        self.end_ns > end_ns && matches!(self.activity, Activity::AllGather { .. })
    }

    /// `end_ns - start_ns`, or 0 for a span that ends before it starts.
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }

    /// Fixed-width encoding for gathering spans over MPI (the rank is implied by the sender).
    pub(crate) fn encode(&self, out: &mut Vec<u64>) {
        let (tag, index, a, b, c) = match self.activity {
            Activity::Step => (0, 0, 0, 0, 0),
            Activity::Forward { layer } => (1, layer, 0, 0, 0),
            Activity::Loss => (2, 0, 0, 0, 0),
            Activity::Backward { layer } => (3, layer, 0, 0, 0),
            Activity::AllReduce { bucket, bytes, queued_ns, updates_ns } => (4, bucket, bytes, queued_ns, updates_ns),
            Activity::Wait { bucket } => (5, bucket, 0, 0, 0),
            Activity::WaitAll => (6, 0, 0, 0, 0),
            Activity::Update { bucket } => (7, bucket, 0, 0, 0),
            Activity::Compress { bucket } => (8, bucket, 0, 0, 0),
            Activity::Clip => (9, 0, 0, 0, 0),
            Activity::AllGather { bucket, bytes, queued_ns } => (10, bucket, bytes, queued_ns, 0),
            Activity::WaitGather { bucket } => (11, bucket, 0, 0, 0),
            Activity::ReduceScatter { bucket, bytes, queued_ns, updates_ns } => {
                (12, bucket, bytes, queued_ns, updates_ns)
            }
            Activity::Fill => (13, 0, 0, 0, 0),
        };
        out.extend_from_slice(&[self.step, (tag << 32) | u64::from(index), self.start_ns, self.end_ns, a, b, c]);
    }

    /// The inverse of `encode`; `None` for words no `encode` produced.
    pub(crate) fn decode(rank: u32, w: &[u64]) -> Option<Span> {
        let &[step, tagged, start_ns, end_ns, a, b, c] = w else { return None };
        let index = (tagged & u64::from(u32::MAX)) as u32;
        let activity = match tagged >> 32 {
            0 => Activity::Step,
            1 => Activity::Forward { layer: index },
            2 => Activity::Loss,
            3 => Activity::Backward { layer: index },
            4 => Activity::AllReduce { bucket: index, bytes: a, queued_ns: b, updates_ns: c },
            5 => Activity::Wait { bucket: index },
            6 => Activity::WaitAll,
            7 => Activity::Update { bucket: index },
            8 => Activity::Compress { bucket: index },
            9 => Activity::Clip,
            10 => Activity::AllGather { bucket: index, bytes: a, queued_ns: b },
            11 => Activity::WaitGather { bucket: index },
            12 => Activity::ReduceScatter { bucket: index, bytes: a, queued_ns: b, updates_ns: c },
            13 => Activity::Fill,
            _ => return None,
        };
        Some(Span { rank, step, activity, start_ns, end_ns })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_activity_survives_the_wire_format() {
        let activities = [
            Activity::Step,
            Activity::Forward { layer: 3 },
            Activity::Loss,
            Activity::Fill,
            Activity::Backward { layer: 7 },
            Activity::AllReduce { bucket: 2, bytes: 16 << 20, queued_ns: 12_345, updates_ns: 678 },
            Activity::Wait { bucket: 1 },
            Activity::WaitAll,
            Activity::Update { bucket: 4 },
            Activity::Compress { bucket: 5 },
            Activity::Clip,
            Activity::AllGather { bucket: 3, bytes: 4 << 20, queued_ns: 7_000 },
            Activity::WaitGather { bucket: 3 },
            Activity::ReduceScatter { bucket: 1, bytes: 8 << 20, queued_ns: 9_000, updates_ns: 321 },
        ];
        let mut words = Vec::new();
        let spans: Vec<Span> = activities
            .iter()
            .enumerate()
            .map(|(i, &activity)| Span { rank: 1, step: i as u64, activity, start_ns: 10 * i as u64, end_ns: 99 })
            .collect();
        spans.iter().for_each(|s| s.encode(&mut words));
        assert_eq!(words.len(), spans.len() * WORDS);
        let back: Vec<Span> = words.chunks(WORDS).map(|w| Span::decode(1, w).unwrap()).collect();
        assert_eq!(back, spans);
        assert_eq!(Span::decode(0, &[0, 14 << 32, 0, 0, 0, 0, 0]), None, "a tag no `encode` writes");
    }
}
