//! Gathering every rank's spans at rank 0.

use super::recorder;
use super::span::{Span, WORDS};
use crate::comm::Communicator;
use crate::error::{Error, Result};

/// Takes this rank's recorded spans and gathers all ranks' at rank 0 (`None` elsewhere).
/// A collective: every rank must call it at the same point.
pub fn gather_spans(comm: &Communicator) -> Result<Option<Vec<Span>>> {
    let words = recorder::drain(|mine| {
        let mut words = Vec::with_capacity(mine.len() * WORDS);
        mine.iter().for_each(|s| s.encode(&mut words));
        words
    });
    let Some(per_rank) = comm.gather_u64_to_root(words)? else { return Ok(None) };
    let mut spans = Vec::with_capacity(per_rank.iter().map(|words| words.len() / WORDS).sum());
    // Each rank's words are freed as soon as they are read.
    for (rank, words) in per_rank.into_iter().enumerate() {
        for w in words.chunks(WORDS) {
            let span = Span::decode(rank as u32, w)
                .ok_or_else(|| Error::Config(format!("rank {rank} sent a trace span this build cannot read")))?;
            spans.push(span);
        }
    }
    Ok(Some(spans))
}
