//! The public `Communicator` calls used out of the generated code's order, on 2 ranks under
//! `mpirun`: a handle is never given another launch's sums, a rank that gives up on a collective
//! ends the job instead of hanging it, and ranks that launch buckets of different lengths stop
//! saying so instead of summing unrelated data.

mod common;

use std::time::Duration;

use common::{mpirun_with_env, run_on_two_ranks_each_way, two_rank_communicator};
use overlap::{GradBucket, Transport};

/// A bucket of `len` elements, each `value`, at launch index `index`.
fn filled(index: usize, len: usize, value: f32) -> GradBucket {
    let mut bucket = GradBucket::zeros(index, len);
    bucket.as_mut_slice().fill(value);
    bucket
}

/// One rank of `two_launches_of_one_index_each_get_their_own_sums`.
#[test]
#[ignore = "run on 2 ranks by two_launches_of_one_index_each_get_their_own_sums"]
fn two_launches_of_one_index_rank() {
    let comm = two_rank_communicator();
    let first = comm.all_reduce_async(filled(0, 4, 1.0));
    // Requests are served in order: once the barrier returns, the first sum has arrived (with
    // overlap; without, launches are held until `backward_done`) and its box holds it.
    comm.barrier().unwrap();
    let second = comm.all_reduce_async(filled(0, 4, 2.0));
    comm.backward_done();
    assert_eq!(first.wait().unwrap().as_slice(), [2.0; 4], "the first launch's sums");
    assert_eq!(second.wait().unwrap().as_slice(), [4.0; 4], "the second launch's sums");
}

/// A handle not yet waited for keeps its sums when the same bucket index is launched again.
#[test]
fn two_launches_of_one_index_each_get_their_own_sums() {
    run_on_two_ranks_each_way("two_launches_of_one_index_rank");
}

/// Runs this binary's ignored test `name` on 2 ranks through shared memory, expecting the job to
/// fail; returns what it printed.
fn failing_job(name: &str) -> String {
    let exe = std::env::current_exe().expect("test binary path");
    let args = ["-n", "2", exe.to_str().unwrap(), "--exact", name, "--include-ignored", "--nocapture"];
    let out = mpirun_with_env(&[], &args);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "the job succeeded:\n{text}");
    text
}

/// One rank of `a_rank_that_gives_up_on_a_collective_ends_the_job`: rank 0 launches a bucket
/// that rank 1 never does, waits a second for it, and returns the timeout.
#[test]
#[ignore = "run on 2 ranks by a_rank_that_gives_up_on_a_collective_ends_the_job"]
fn gives_up_and_returns_rank() {
    let mut comm = overlap::Communicator::from_env_with(Transport::SharedMemory).unwrap();
    comm.set_wait_timeout(Some(Duration::from_secs(1)));
    if comm.rank() == 0 {
        let error = comm.all_reduce_async(filled(0, 4, 1.0)).wait().unwrap_err();
        println!("rank 0 waited: {error}");
    } else {
        // Rank 1 keeps its communicator until rank 0's end ends the job: one dropped earlier
        // leaves on its own (`returns_early_rank`).
        std::thread::sleep(Duration::from_secs(30));
    }
    // Dropping the communicator here must not hang: rank 0's thread is still in the all-reduce.
}

/// Dropping a communicator whose collective timed out ends the job with the reason, where
/// finalising MPI would wait forever for the collective the other rank never joins.
#[test]
fn a_rank_that_gives_up_on_a_collective_ends_the_job() {
    let text = failing_job("gives_up_and_returns_rank");
    assert!(text.contains("rank 0 waited: "), "{text}");
    let said = "rank 0: error: the communicator was dropped with bucket 0's reduction unfinished (a wait for it \
                had run out): the other ranks may wait in it forever, so the job ends";
    assert!(text.contains(said), "{text}");
}

/// One rank of `a_rank_that_returns_before_a_collective_others_wait_in_ends_the_job`: rank 1
/// returns before the barrier rank 0 waits in (as a program whose data fails to open on one
/// rank returns its error), and goes on after its communicator is dropped.
#[test]
#[ignore = "run on 2 ranks by a_rank_that_returns_before_a_collective_others_wait_in_ends_the_job"]
fn returns_early_rank() {
    let mut comm = overlap::Communicator::from_env_with(Transport::SharedMemory).unwrap();
    comm.set_wait_timeout(Some(Duration::from_secs(300)));
    if comm.rank() == 1 {
        drop(comm);
        eprintln!("rank 1 went on after its communicator went");
        return;
    }
    comm.barrier().unwrap();
    println!("rank 0 passed the barrier");
}

/// A rank whose communicator goes before a collective the others wait in does not wait for
/// them in MPI's teardown (which would hang the job until their timeout, its error unprinted):
/// it says why, leaves without finalising MPI, its program goes on, and mpirun ends the job.
#[test]
fn a_rank_that_returns_before_a_collective_others_wait_in_ends_the_job() {
    let text = failing_job("returns_early_rank");
    let said = "rank 1: its communicator was dropped after 0 collective(s), while rank(s) 0 wait in collective 1, \
                which it never entered";
    assert!(text.contains(said), "{text}");
    assert!(text.contains("rank 1 went on after its communicator went"), "{text}");
    assert!(!text.contains("rank 0 passed the barrier") && !text.contains("waited 300s"), "{text}");
}

/// One rank of `a_collective_every_rank_launched_finishes_before_the_communicator_goes`.
#[test]
#[ignore = "run on 2 ranks by a_collective_every_rank_launched_finishes_before_the_communicator_goes"]
fn drops_a_launched_bucket_rank() {
    let comm = common::test_communicator();
    // Launched by every rank and never waited for, as a loop that ends after its last step
    // leaves a sharded model's all-gathers: they finish, and the job ends normally. Rank 1
    // launches late, so that rank 0's is still running when its communicator goes.
    if comm.rank() == 1 {
        std::thread::sleep(Duration::from_millis(300));
    }
    drop(comm.all_reduce_async(filled(0, 1 << 20, 1.0)));
}

/// Dropping the communicator while a collective every rank launched still runs lets it finish:
/// nothing is owed, and the job ends normally. (With overlap: without, `backward_done` waits.)
#[test]
fn a_collective_every_rank_launched_finishes_before_the_communicator_goes() {
    for transport in ["shared-memory", "mpi"] {
        common::run_on_ranks("drops_a_launched_bucket_rank", 2, transport, "overlap");
    }
}

/// One rank of `buckets_of_different_lengths_stop_the_job`.
#[test]
#[ignore = "run on 2 ranks by buckets_of_different_lengths_stop_the_job"]
fn different_lengths_rank() {
    let comm = overlap::Communicator::from_env_with(Transport::SharedMemory).unwrap();
    let len = 100 * (comm.rank() + 1);
    let summed = comm.all_reduce_async(filled(0, len, 1.0)).wait();
    panic!("rank {} was given sums of buckets that differ: {summed:?}", comm.rank());
}

/// Ranks that all-reduce buckets of different lengths through shared memory stop, naming both.
#[test]
fn buckets_of_different_lengths_stop_the_job() {
    let text = failing_job("different_lengths_rank");
    assert!(!text.contains("was given sums"), "{text}");
    let one_way = "rank 0: error: rank 1 launched an all-reduce of a bucket of 200 elements where this rank \
                   launched an all-reduce of a bucket of 100 elements: every rank must launch the same buckets";
    let other_way = "rank 1: error: rank 0 launched an all-reduce of a bucket of 100 elements where this rank \
                     launched an all-reduce of a bucket of 200 elements";
    assert!(text.contains(one_way) || text.contains(other_way), "{text}");
}
