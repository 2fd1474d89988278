//! How a rank's communication ends when its communicator is dropped.
//!
//! MPI's teardown (freeing the shared-memory window, finalising) waits for every rank. A rank
//! whose program returned early, before a collective the others make (a dataset that failed to
//! open on that rank alone, returned with `?` before `fit`), would wait there for ranks that wait
//! for it inside that collective: the job would hang until their wait timeout, and the early
//! rank's error, printed only once its communicator is gone, would never be seen. So before the
//! teardown each rank marks itself gone on the node's board (`board`) and waits until every
//! rank is gone too, after the same collectives; if one is found inside a collective this rank
//! never entered, this rank leaves without MPI's teardown, saying so.
//! Its program then goes on (printing its error) and exits, and mpirun ends the job.

use std::time::Duration;

use super::board::{Board, Peer, READY};

/// How often a rank whose communicator went looks at the others.
const POLL: Duration = Duration::from_millis(20);

/// How a rank's communication ends.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Parting {
    /// Every rank is leaving after the same collectives: MPI's teardown, together.
    Together,
    /// Some rank can never meet this one in the teardown (why, in words): leave without it.
    Alone(String),
}

/// Marks this rank gone and waits for the others (see the module's comment). Without a board
/// that sees the whole job, MPI's teardown as before.
pub(super) fn part(board: Option<&Board>) -> Parting {
    let Some(board) = board.filter(|b| b.whole_job_here()) else { return Parting::Together };
    board.leave();
    loop {
        if let Some(parting) = weigh(board.rank(), board.own(), &board.others()) {
            return parting;
        }
        std::thread::sleep(POLL);
    }
}

/// The parting of rank `rank`, gone after reaching `own`, given the `others`; `None` while
/// some rank is still running without having left (it may yet leave, or enter a collective).
fn weigh(rank: usize, own: u64, others: &[Peer]) -> Option<Parting> {
    let ahead: Vec<&Peer> = others.iter().filter(|p| p.reached > own && !p.left).collect();
    if let Some(first) = ahead.first() {
        let ranks: Vec<String> = ahead.iter().map(|p| p.rank.to_string()).collect();
        return Some(Parting::Alone(format!(
            "rank {rank}: its communicator was dropped after {} collective(s), while rank(s) {} wait in collective {}, \
             which it never entered (its program ended early: an error returned before the call the others made, \
             printed next, or a call skipped); leaving without finalising MPI, so that the launcher ends the job",
            own.saturating_sub(READY),
            ranks.join(", "),
            first.reached.saturating_sub(READY),
        )));
    }
    // A rank whose process ended without leaving (killed, or exited holding its communicator)
    // ends the job through the launcher; its process state is not read here, where another
    // namespace could hide a live rank's.
    others.iter().all(|p| p.left).then_some(Parting::Together)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(rank: usize, reached: u64, left: bool) -> Peer {
        Peer { rank, reached, left }
    }

    #[test]
    fn every_rank_gone_after_the_same_collectives_parts_together() {
        assert_eq!(weigh(0, READY + 5, &[peer(1, READY + 5, true), peer(2, READY + 5, true)]), Some(Parting::Together));
        assert_eq!(weigh(0, READY, &[]), Some(Parting::Together), "one rank");
    }

    #[test]
    fn a_rank_still_running_at_the_same_count_is_waited_for() {
        // It may be writing a checkpoint, or printing, before its own communicator goes.
        assert_eq!(weigh(0, READY + 5, &[peer(1, READY + 5, false)]), None);
        assert_eq!(weigh(0, READY + 5, &[peer(1, READY + 4, false)]), None, "inside the last collective still");
    }

    #[test]
    fn a_rank_inside_a_collective_this_one_never_entered_is_named() {
        let Some(Parting::Alone(why)) = weigh(1, READY, &[peer(0, READY + 1, false), peer(2, READY, true)]) else {
            panic!("rank 0 waits in a collective rank 1 never enters")
        };
        assert!(
            why.starts_with(
                "rank 1: its communicator was dropped after 0 collective(s), while rank(s) 0 wait in collective 1"
            ),
            "{why}"
        );
    }

    #[test]
    fn parts_through_a_shared_board() {
        let path = std::env::temp_dir().join(format!("overlap-parting-test-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let first = Board::open(path.clone(), 0, 2, Some(2)).unwrap();
        let second = Board::open(path, 1, 2, Some(2)).unwrap();
        first.reach(READY);
        second.reach(READY);
        second.enter_collective();
        first.leave();
        assert!(matches!(weigh(0, first.own(), &first.others()), Some(Parting::Alone(_))));
        first.enter_collective();
        second.leave();
        assert_eq!(weigh(0, first.own(), &first.others()), Some(Parting::Together));
    }
}
