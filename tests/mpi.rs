//! Multi-rank behaviour under real `mpirun`, driving the example binaries (`make test` builds
//! them first): world-size parity, overlap vs no-overlap, updates during vs after the all-reduce,
//! gradient accumulation, threads per rank, the start-up schedule check, and the shared-memory
//! all-reduce against OpenMPI's.

mod common;

use common::{example, load_sorted_params, max_relative_difference, mpirun, mpirun_ok, mpirun_timed, scratch, Params};

/// Trains the `mlp` example on `ranks` ranks and returns its final parameters.
fn train(ranks: usize, extra: &[&str], tag: &str) -> Params {
    let root = scratch("params");
    let file = root.path().join(format!("{tag}.safetensors"));
    let (n, exe) = (ranks.to_string(), example("mlp"));
    let mut args = vec!["-n", &n, exe.to_str().unwrap(), "--steps", "20", "--log-every", "20", "--save-params"];
    args.push(file.to_str().unwrap());
    args.extend_from_slice(extra);
    mpirun_ok(&args);
    load_sorted_params(&file)
}

#[test]
fn two_and_three_ranks_match_one_rank_on_the_same_global_batch() {
    let one = train(1, &["--batch", "6"], "one");
    let two = train(2, &["--batch", "3"], "two");
    let three = train(3, &["--batch", "2"], "three");
    let (d2, d3) = (max_relative_difference(&two, &one), max_relative_difference(&three, &one));
    println!("relative difference after 20 steps: 2 ranks {d2:e}, 3 ranks {d3:e}");
    assert!(d2 < 1e-5, "2 ranks differ from 1 by {d2:e}");
    assert!(d3 < 1e-5, "3 ranks differ from 1 by {d3:e}");
    assert!(
        max_relative_difference(&one, &train(1, &["--batch", "6", "--seed", "1"], "other-seed")) > 1e-2,
        "the comparison can fail"
    );
}

/// `--threads` splits each product over threads. OpenBLAS's threaded products add in another
/// order, so the parameters agree to rounding only: 2.7e-7 relative after 20 steps here, against
/// the 1e-5 that the other parity tests allow.
#[test]
fn two_threads_per_rank_match_one_thread_to_rounding() {
    // 32 samples: products large enough for OpenBLAS to split them over its threads.
    let one = train(2, &["--batch", "32"], "one-thread");
    let two = train(2, &["--batch", "32", "--threads", "2"], "two-threads");
    let d = max_relative_difference(&two, &one);
    println!("two threads per rank vs one: relative difference {d:e}");
    assert!(d < 1e-5, "two threads per rank differ from one by {d:e}");
}

/// Updates made by the all-reduce (parameters lent to it, the default) against updates after
/// the wait points (`--check-finite` checks the sums before any update, so it lends nothing):
/// the same floats, on every transport and rank count, for both optimizers.
#[test]
fn updates_during_the_all_reduce_equal_updates_after_the_wait() {
    for (ranks, extra) in [
        (2, &["--all-reduce", "shared-memory"][..]),
        (3, &["--all-reduce", "shared-memory"]),
        (2, &["--all-reduce", "mpi"]),
        (2, &["--optimizer", "adamw"]),
    ] {
        let args = [&["--batch", "4"][..], extra].concat();
        let lent = train(ranks, &args, "lent");
        let after_wait = train(ranks, &[&args[..], &["--check-finite"]].concat(), "after-wait");
        assert_eq!(lent, after_wait, "{ranks} ranks, {extra:?}");
    }
}

#[test]
fn overlap_and_no_overlap_give_bitwise_identical_parameters() {
    let overlapped = train(2, &["--batch", "4"], "overlap");
    let baseline = train(2, &["--batch", "4", "--no-overlap"], "no-overlap");
    assert_eq!(overlapped, baseline);
}

#[test]
fn shared_memory_and_mpi_all_reduces_agree() {
    // One rank sums nothing: either transport trains it, as a job without mpirun does.
    let one = train(1, &["--batch", "4", "--all-reduce", "shared-memory"], "shm-1");
    assert_eq!(one, train(1, &["--batch", "4", "--all-reduce", "mpi"], "mpi-1"), "1 rank");
    for ranks in [2, 3] {
        let shared = train(ranks, &["--batch", "4", "--all-reduce", "shared-memory"], &format!("shm-{ranks}"));
        let mpi = train(ranks, &["--batch", "4", "--all-reduce", "mpi"], &format!("mpi-{ranks}"));
        if ranks == 2 {
            // a + b is the same float whichever rank adds it.
            assert_eq!(shared, mpi, "2 ranks: shared memory and MPI sums differ");
        } else {
            let d = max_relative_difference(&shared, &mpi);
            println!("3 ranks: shared memory vs MPI differ by {d:e} (summation order)");
            assert!(d < 1e-5, "3 ranks: shared memory and MPI differ by {d:e}");
        }
    }
}

#[test]
fn four_micro_steps_equal_one_step_on_four_times_the_batch() {
    for ranks in [1, 2] {
        let accumulated = train(ranks, &["--batch", "2", "--accumulate", "4"], &format!("accumulate-{ranks}"));
        let whole = train(ranks, &["--batch", "8"], &format!("whole-{ranks}"));
        let d = max_relative_difference(&accumulated, &whole);
        println!("{ranks} rank(s): accumulation vs whole batch differs by {d:e}");
        assert!(d < 1e-5, "{ranks} rank(s): accumulation differs by {d:e}");
    }
}

/// Training, or timing the communication alone (`--comm-only`, which builds no model).
#[test]
fn ranks_with_different_models_stop_with_an_error_naming_them() {
    let (mlp, other) = (example("mlp"), example("custom_layer"));
    for mode in [&[][..], &["--comm-only"]] {
        let (mlp, other) = (mlp.to_str().unwrap(), other.to_str().unwrap());
        let (out, took) = mpirun_timed(
            &[],
            &[&["-n", "1", mlp, "--steps", "1"][..], mode, &[":", "-n", "1", other, "--steps", "1"], mode].concat(),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{mode:?}");
        assert!(took.as_secs() < 60, "the mismatch must not hang");
        for rank in 0..2 {
            let said = format!("rank {rank}: error: ranks disagree on the compiled schedule");
            assert!(stderr.contains(&said), "{mode:?}: {stderr}");
        }
        assert!(stderr.contains("rank(s) 1 have a different model or bucket plan than rank 0"), "{mode:?}: {stderr}");
    }
    // Other settings (here the wire format) stop `--comm-only` as they stop training.
    let common = ["--comm-only", "--steps", "2"];
    let out = mpirun(
        &[
            &["-n", "1", mlp.to_str().unwrap()][..],
            &common,
            &[":", "-n", "1", mlp.to_str().unwrap()],
            &common,
            &["--grad-comm", "bf16"],
        ]
        .concat(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("ranks disagree on the gradients' wire formats: rank(s) 1"),
        "{stderr}"
    );
}

/// Each rank reads its own command line: ranks given other settings than rank 0's stop before
/// step 1, every rank naming the flags that differ and the ranks, instead of training apart
/// (another learning rate or batch), hanging (another step count) or failing inside MPI
/// (a report on one rank only). Settings that do not apply to the optimizer chosen do not count.
#[test]
fn ranks_with_different_settings_stop_with_an_error_naming_the_flags() {
    let mlp = example("mlp");
    let exe = mlp.to_str().unwrap();
    // A timeout far above the bounds below, so that a job that waited it out cannot pass them.
    let common = ["--steps", "3", "--batch", "4", "--report", "off", "--comm-timeout", "120s"];
    let save_params = std::env::temp_dir().join(format!("overlap-rank1-only-{}.st", std::process::id()));
    let cases: [(&[&str], &[&str]); 7] = [
        (&["--lr", "0.1", "--batch", "8"], &["--lr (rank(s) 1; this rank's: ", "--batch (rank(s) 1; this rank's: "]),
        (&["--steps", "4"], &["--steps (rank(s) 1; this rank's: "]),
        (&["--report", "text"], &["--report (rank(s) 1; this rank's: off)", "this rank's: text)"]),
        (&["--optimizer", "adamw"], &["--optimizer (rank(s) 1; this rank's: sgd)"]),
        (&["--no-overlap"], &["--no-overlap/--compute-only (rank(s) 1; this rank's: overlap)"]),
        // Rank 0 writes it: asked on another rank alone, it would be dropped.
        (&["--save-params", save_params.to_str().unwrap()], &["--save-params (rank(s) 1; this rank's: not set)"]),
        // The command line's own: the seed picks each rank's samples.
        (&["--seed", "3"], &["--seed (rank(s) 1; this rank's: "]),
    ];
    for (rank_1, named) in cases {
        let (out, took) =
            mpirun_timed(&[], &[&["-n", "1", exe][..], &common, &[":", "-n", "1", exe], &common, rank_1].concat());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{rank_1:?} on rank 1 trained:\n{stderr}");
        assert!(took.as_secs() < 30, "{rank_1:?}: the mismatch must not wait for the timeout");
        for rank in 0..2 {
            let says = format!("rank {rank}: error: invalid configuration: ranks run with other settings than rank 0");
            assert!(stderr.contains(&says), "{rank_1:?}:\n{stderr}");
        }
        for name in named {
            assert!(stderr.contains(name), "{rank_1:?}: expected `{name}` in:\n{stderr}");
        }
        assert!(!stderr.contains("MPI_ERR") && !stderr.contains("step      1"), "{rank_1:?}:\n{stderr}");
    }
    // Another transport: the ranks would wait in a shared-memory set-up the others skip.
    let out =
        mpirun(&[&["-n", "1", exe][..], &common, &[":", "-n", "1", exe], &common, &["--all-reduce", "mpi"]].concat());
    let stderr = String::from_utf8_lossy(&out.stderr);
    for rank in 0..2 {
        let says = format!(
            "rank {rank}: error: MPI could not be initialised: the ranks chose other transports \
                            (--all-reduce): rank 0 auto, rank 1 mpi"
        );
        assert!(stderr.contains(&says), "{stderr}");
    }
    // Another thing to do altogether (printing the schedule runs no collective of training's).
    let (out, took) = mpirun_timed(
        &[],
        &[&["-n", "1", exe][..], &common, &[":", "-n", "1", exe], &common, &["--print-schedule"]].concat(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let says =
        "the ranks were told to do different things: rank 0 trains, rank 1 prints the schedule (--print-schedule)";
    assert!(!out.status.success() && stderr.contains(says), "{stderr}");
    assert!(took.as_secs() < 30, "a rank printing the schedule must not leave the others to the timeout");
    // Help or the version on one rank, which then starts no run: the job ends at once (with the
    // timeout the others would have waited 120 s for it to start).
    for shown in ["--help", "--version"] {
        let (out, took) = mpirun_timed(&[], &[&["-n", "1", exe][..], &common, &[":", "-n", "1", exe, shown]].concat());
        let stderr = String::from_utf8_lossy(&out.stderr);
        let says = format!("rank 1: {shown} given (rank 0 prints it, when given it too): ending this job");
        assert!(!out.status.success() && stderr.contains(&says), "{shown}:\n{stderr}");
        assert!(took.as_secs() < 15, "{shown} on one rank must not leave the others to the timeout");
    }
    // AdamW's betas on every rank, but SGD on rank 1's side only reads its momentum: alike.
    let out = mpirun(&[&["-n", "1", exe][..], &common, &["--beta1", "0.5", ":", "-n", "1", exe], &common].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// An emulated link on which one bucket's all-reduce outlasts the wait timeout is named in a note
/// before step 1; the wait then times out, as the note says.
#[test]
fn a_link_slower_than_the_wait_timeout_is_named_before_step_1() {
    let mlp = example("mlp");
    let flags = ["--steps", "2", "--batch", "4", "--report", "off", "--link", "latency=2s", "--comm-timeout", "1s"];
    let out = mpirun(&[&["-n", "2", mlp.to_str().unwrap()][..], &flags].concat());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let note = "note: on the emulated link (latency 2000000.000 us, no bandwidth limit), the all-reduce of bucket b0";
    assert!(
        stderr.contains(note) && stderr.contains("at least the wait timeout (1s): its wait will time out"),
        "{stderr}"
    );
    assert!(stderr.contains("was not reduced within 1s"), "{stderr}");
}
