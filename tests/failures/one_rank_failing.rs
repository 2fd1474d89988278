//! One rank failing alone during validation, while the other waits for the held-out loss's
//! sum: the job ends with its message, whether the program aborts or returns the error.

use super::*;

#[distributed_model(bucket_cap_mb = 0.0005, first_bucket_mb = 0.0005)]
pub struct Tiny {
    fc1: Linear<6, 16>,
    act: Relu,
    head: Linear<16, 3>,
}

/// Held-out samples that rank 1 cannot read: its first validation fails there, alone.
struct UnreadableOnRank1 {
    samples: SyntheticClassification,
    rank: usize,
}

impl Dataset for UnreadableOnRank1 {
    fn fill(&mut self, first: u64, rows: usize, batch: &mut Batch) -> overlap::Result<()> {
        if self.rank == 1 {
            return Err(overlap::Error::Dataset("the held-out file went away".into()));
        }
        Dataset::fill(&mut self.samples, first, rows, batch)
    }

    fn features(&self) -> usize {
        self.samples.features()
    }
}

/// One rank of `a_rank_failing_during_validation_ends_the_job_with_its_message`, which runs it
/// under mpirun: it fails as an example's `main` does, reporting and then ending the job.
#[test]
#[ignore = "run on 2 ranks by a_rank_failing_during_validation_ends_the_job_with_its_message"]
fn validation_fails_on_rank_1() {
    let comm = common::test_communicator();
    let mut model = Tiny::new(&comm, 3).unwrap();
    let mut data = SyntheticClassification::new(5, 6, 3);
    let mut held_out = UnreadableOnRank1 { samples: data.held_out(), rank: comm.rank() };
    let fitted = Trainer::new(&comm)
        .steps(6)
        .batch(4)
        .report(ReportFormat::Off, None)
        .validate(&mut held_out, 3, 2)
        .fit(&mut model, &mut data, &CrossEntropyLoss);
    if let Err(e) = fitted {
        eprintln!("rank {}: error: {e}", comm.rank());
        comm.abort_job(Duration::from_secs(2));
        std::process::exit(1);
    }
}

/// A rank that fails during validation, while the other waits for the held-out loss's sum, ends
/// the job with its message and MPI's abort, whichever transport sums the gradients. The failing
/// rank's wait for the others at the end must not meet the sum in MPI: the two are different
/// collectives, and OpenMPI then reports a truncated message instead of the error.
#[test]
fn a_rank_failing_during_validation_ends_the_job_with_its_message() {
    rank_1s_failure_ends_the_job("one_rank_failing::validation_fails_on_rank_1", "rank 1 failed validating");
}

/// Runs the ignored test `name` on 2 ranks over each transport: rank 1's held-out data fails, and
/// the job must end promptly with its message, MPI having seen no mismatched collectives.
fn rank_1s_failure_ends_the_job(name: &str, what: &str) {
    let exe = std::env::current_exe().expect("test binary path");
    for transport in ["shared-memory", "mpi"] {
        let args = ["-n", "2", exe.to_str().unwrap(), "--exact", name, "--include-ignored", "--nocapture"];
        let (out, took) = mpirun_timed(&[("OVERLAP_TEST_TRANSPORT", transport)], &args);
        let text = format!("{}{}", String::from_utf8_lossy(&out.stderr), String::from_utf8_lossy(&out.stdout));
        assert_ends_promptly(out.status.success(), &text, took, &format!("{what}, {transport}"));
        assert!(text.contains("rank 1: error: ") && text.contains("the held-out file went away"), "{text}");
        assert!(!text.contains("MPI_ERR"), "{transport}: MPI saw mismatched collectives:\n{text}");
    }
}

/// `validation_fails_on_rank_1` as a program whose `main` returns the error (`fit(..)?`, as the
/// README shows), with no `abort_job` of its own: dropping the communicator ends the job.
#[test]
#[ignore = "run on 2 ranks by a_program_returning_the_error_of_one_rank_ends_the_job"]
fn validation_fails_on_rank_1_and_returns() -> overlap::Result<()> {
    let comm = common::test_communicator();
    let mut model = Tiny::new(&comm, 3)?;
    let mut data = SyntheticClassification::new(5, 6, 3);
    let mut held_out = UnreadableOnRank1 { samples: data.held_out(), rank: comm.rank() };
    Trainer::new(&comm).steps(6).batch(4).report(ReportFormat::Off, None).validate(&mut held_out, 3, 2).fit(
        &mut model,
        &mut data,
        &CrossEntropyLoss,
    )?;
    Ok(())
}

/// A program that returns a `fit` error from one rank only ends the job within the grace period,
/// with that rank's message, instead of leaving the other rank waiting forever.
#[test]
fn a_program_returning_the_error_of_one_rank_ends_the_job() {
    rank_1s_failure_ends_the_job(
        "one_rank_failing::validation_fails_on_rank_1_and_returns",
        "rank 1 returned its error",
    );
}
