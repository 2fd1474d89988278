//! Flags given on the command line that the run does not read. A flag accepted and then ignored
//! looks as if it had worked: training flags with `--comm-only` or `--steps 0`, which train
//! nothing, are refused; the others get a note from rank 0 (a script may pass `--momentum` whichever
//! optimizer it picks), which says what the flag needs.

use overlap_runtime::{Error, Result};

use crate::args::{Device, OptimizerKind, ReportFormat, TrainArgs};

/// Why a run-time choice is not in what `--print-schedule` prints.
const AS_COMPILED: &str = "on --print-schedule, which prints a schedule as planned (a run's choice is in its report)";

/// The flags that set how training updates the parameters, by clap id: a mode that does not
/// train reads none of them.
const TRAINING: [&str; 13] = [
    "accumulate",
    "optimizer",
    "lr",
    "momentum",
    "weight_decay",
    "beta1",
    "beta2",
    "eps",
    "lr_schedule",
    "decay_on",
    "clip_grad_norm",
    "eval_batches",
    "dropout",
];

/// The flags among `ids` (clap ids) that the command line gave, as typed: `--weight-decay`.
fn given_flags(args: &TrainArgs, ids: &[&str]) -> Vec<String> {
    ids.iter().filter(|id| args.gave(id)).map(|id| format!("--{}", id.replace('_', "-"))).collect()
}

/// Refuses, with `--comm-only`, every flag that configures training or its outputs.
pub fn refuse_with_comm_only(args: &TrainArgs) -> Result<()> {
    if !args.comm_only {
        return Ok(());
    }
    let outputs = [
        (args.save.is_some(), "--save"),
        (args.save_params.is_some(), "--save-params"),
        (args.resume.is_some(), "--resume"),
        (args.init_params.is_some(), "--init-params"),
        (args.sample > 0, "--sample"),
        (args.data.is_some(), "--data"),
        (args.text.is_some(), "--text"),
        (args.tokens.is_some(), "--tokens"),
        (args.gave("eval_every") && args.validation_every().is_some(), "--eval-every"),
        // Measured without compute, per-layer times are zeros: no profile or prediction to make.
        (args.write_profile.is_some(), "--write-profile"),
        (!args.simulate.is_empty(), "--simulate"),
        // It times whole all-reduces, and keeps no optimizer state to shard.
        (args.gave("shard_optimizer"), "--shard-optimizer"),
        (args.gave("no_shard_optimizer"), "--no-shard-optimizer"),
        // It sends the buckets' sizes, whatever the samples: no seed draws anything. (`--batch`
        // stays: the benchmarks give every mode the same flags, and it sizes the recording.)
        (args.gave("seed"), "--seed"),
    ];
    let ignored: Vec<String> = given_flags(args, &TRAINING)
        .into_iter()
        .chain(outputs.iter().filter(|(set, _)| *set).map(|&(_, flag)| flag.to_string()))
        .collect();
    if ignored.is_empty() {
        return Ok(());
    }
    Err(Error::Config(format!("--comm-only trains nothing, so it has nothing to do with {}", ignored.join(", "))))
}

/// Refuses, with `--steps 0` (a sample from `--init-params` alone), every flag given that
/// configures training, communication or an output: none of them would do anything.
pub fn refuse_with_sample_only(args: &TrainArgs) -> Result<()> {
    if args.steps != 0 {
        return Ok(());
    }
    let running = [
        "batch",
        "log_every",
        "report",
        "report_every",
        "check_finite",
        "all_reduce",
        "comm_timeout",
        "eval_every",
        "save",
        "save_every",
        "save_params",
        "resume",
        "trace",
        "timeline",
        "write_profile",
        "simulate",
        "link",
        "grad_comm",
        "shard_optimizer",
        "no_shard_optimizer",
        "compute_only",
        "no_overlap",
        "device",
    ];
    let ignored: Vec<String> = [given_flags(args, &TRAINING), given_flags(args, &running)].concat();
    if ignored.is_empty() {
        return Ok(());
    }
    Err(Error::Config(format!("--steps 0 trains nothing, so it has nothing to do with {}", ignored.join(", "))))
}

/// A note for each flag given that this run does not read, saying what it needs.
pub fn notes(args: &TrainArgs, world: usize) -> Vec<String> {
    let given = |id: &str| args.gave(id);
    let adamw = args.optimizer == OptimizerKind::Adamw;
    let printing = args.print_schedule.is_some();
    let unread = [
        (adamw && given("momentum"), "--momentum", "with --optimizer adamw (it reads --beta1 and --beta2)"),
        (!adamw && given("beta1"), "--beta1", "with --optimizer sgd"),
        (!adamw && given("beta2"), "--beta2", "with --optimizer sgd"),
        (!adamw && given("eps"), "--eps", "with --optimizer sgd"),
        (args.sample == 0 && given("temperature"), "--temperature", "without --sample"),
        (args.sample == 0 && given("top_k"), "--top-k", "without --sample"),
        (args.sample == 0 && given("start"), "--start", "without --sample"),
        (args.sample == 0 && given("tokenizer"), "--tokenizer", "without --sample"),
        (args.validation_every().is_none() && given("eval_batches"), "--eval-batches", "without --eval-every"),
        (args.report == ReportFormat::Off && given("report_every"), "--report-every", "with --report off"),
        (args.compute_only && args.link.is_some(), "--link", "with --compute-only: nothing is all-reduced"),
        (world == 1 && given("all_reduce"), "--all-reduce", "with one rank: there is nothing to all-reduce"),
        (world == 1 && args.no_overlap, "--no-overlap", "with one rank: there is nothing to all-reduce"),
        (args.compute_only && given("all_reduce"), "--all-reduce", "with --compute-only: nothing is all-reduced"),
        (
            args.device == Device::Cuda && given("all_reduce"),
            "--all-reduce",
            "with --device cuda: NCCL sums the gradients",
        ),
        (args.comm_only && given("threads"), "--threads", "with --comm-only: nothing is computed"),
        (
            args.comm_only && given("log_every"),
            "--log-every",
            "with --comm-only: it logs no steps (its last line and report give the median step)",
        ),
        (
            world == 1 && args.comm_only,
            "--comm-only",
            "with one rank: there is nothing to all-reduce, so it times nothing",
        ),
        (
            given("decay_on") && (args.weight_decay == Some(0.0) || (!adamw && args.weight_decay.is_none())),
            "--decay-on",
            "without weight decay (--weight-decay; SGD's default is 0)",
        ),
        (args.compute_only && given("grad_comm"), "--grad-comm", "with --compute-only: nothing is all-reduced"),
        (world == 1 && args.link.is_some(), "--link", "with one rank: there is nothing to all-reduce"),
        (world == 1 && given("grad_comm"), "--grad-comm", "with one rank: there is nothing to all-reduce"),
        (
            world == 1 && given("shard_optimizer"),
            "--shard-optimizer",
            "on the state with one rank: its one slice is all of it (the run still checks the model can shard)",
        ),
    ];
    let mut noted: Vec<&str> = Vec::new();
    let mut notes = Vec::new();
    if printing {
        // It prints the schedule as compiled and runs nothing: no other flag does anything, and
        // the run-time choices are not in what it prints, whatever the ranks.
        let as_compiled = ["print_schedule", "grad_comm", "shard_optimizer", "no_shard_optimizer"];
        let others: Vec<&str> = args.given().filter(|id| !as_compiled.contains(id)).collect();
        if !others.is_empty() {
            notes.push(format!(
                "note: --print-schedule prints the schedule and runs nothing: {} {} no effect",
                given_flags(args, &others).join(", "),
                if others.len() == 1 { "has" } else { "have" }
            ));
        }
        let choices = given_flags(args, &as_compiled[1..]);
        notes.extend(choices.iter().map(|flag| format!("note: {flag} has no effect {AS_COMPILED}")));
        return notes;
    }
    // One note per flag: the first reason listed.
    for &(_, flag, why) in unread.iter().filter(|(unread, ..)| *unread) {
        if !noted.contains(&flag) {
            noted.push(flag);
            notes.push(format!("note: {flag} has no effect {why}"));
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> TrainArgs {
        let matches = TrainArgs::command().try_get_matches_from(std::iter::once("mlp").chain(args.iter().copied()));
        TrainArgs::from_matches(&matches.unwrap()).unwrap()
    }

    #[test]
    fn a_flag_given_that_the_run_does_not_read_gets_a_note_and_defaults_none() {
        assert!(notes(&parse(&[]), 2).is_empty(), "defaults are not given");
        assert!(notes(&parse(&["--optimizer", "adamw", "--beta1", "0.8"]), 2).is_empty(), "AdamW reads it");
        let said = notes(&parse(&["--optimizer", "adamw", "--momentum", "0.5", "--top-k", "5"]), 2);
        assert_eq!(
            said,
            [
                "note: --momentum has no effect with --optimizer adamw (it reads --beta1 and --beta2)",
                "note: --top-k has no effect without --sample"
            ]
        );
        let one_rank = notes(&parse(&["--link", "10gbe", "--shard-optimizer"]), 1);
        assert_eq!(
            one_rank,
            [
                "note: --link has no effect with one rank: there is nothing to all-reduce",
                "note: --shard-optimizer has no effect on the state with one rank: its one slice is all of it (the run \
                 still checks the model can shard)"
            ]
        );
        let ddp = notes(&parse(&["--print-schedule=ddp", "--shard-optimizer"]), 2);
        assert_eq!(ddp, [format!("note: --shard-optimizer has no effect {AS_COMPILED}")]);
        // With one rank too: what it prints does not depend on the ranks.
        let alone = notes(&parse(&["--print-schedule", "--shard-optimizer", "--grad-comm", "bf16"]), 1);
        assert_eq!(
            alone,
            [
                format!("note: --grad-comm has no effect {AS_COMPILED}"),
                format!("note: --shard-optimizer has no effect {AS_COMPILED}")
            ]
        );
        let printing = notes(&parse(&["--print-schedule", "--lr", "3", "--save-params", "x.st"]), 2);
        assert_eq!(
            printing,
            ["note: --print-schedule prints the schedule and runs nothing: --lr, --save-params have no effect"]
        );
        let decay = notes(&parse(&["--decay-on", "matrices", "--all-reduce", "mpi", "--no-overlap"]), 1);
        assert_eq!(
            decay,
            [
                "note: --all-reduce has no effect with one rank: there is nothing to all-reduce",
                "note: --no-overlap has no effect with one rank: there is nothing to all-reduce",
                "note: --decay-on has no effect without weight decay (--weight-decay; SGD's default is 0)"
            ]
        );
        let alone = notes(&parse(&["--comm-only"]), 1);
        assert_eq!(
            alone,
            ["note: --comm-only has no effect with one rank: there is nothing to all-reduce, so it times nothing"]
        );
        let adamw = ["--optimizer", "adamw", "--decay-on", "matrices"];
        assert!(notes(&parse(&adamw), 2).is_empty(), "AdamW decays by default");
        assert!(notes(&parse(&["--all-reduce", "mpi"]), 2).is_empty(), "it chooses the CPU's transport");
        let untransported = [
            (&["--compute-only", "--all-reduce", "mpi"][..], "with --compute-only: nothing is all-reduced"),
            (&["--device", "cuda", "--all-reduce", "mpi"], "with --device cuda: NCCL sums the gradients"),
        ];
        for (flags, why) in untransported {
            assert_eq!(notes(&parse(flags), 2), [format!("note: --all-reduce has no effect {why}")], "{flags:?}");
        }
        let timing = notes(&parse(&["--comm-only", "--threads", "2", "--log-every", "1"]), 2);
        assert_eq!(
            timing,
            [
                "note: --threads has no effect with --comm-only: nothing is computed",
                "note: --log-every has no effect with --comm-only: it logs no steps (its last line and report give \
                 the median step)"
            ]
        );
    }

    #[test]
    fn sampling_alone_refuses_the_training_flags_given() {
        let sampling = ["--steps", "0", "--sample", "5", "--init-params", "p.st", "--text", "t.txt"];
        assert!(refuse_with_sample_only(&parse(&sampling)).is_ok());
        let refused =
            refuse_with_sample_only(&parse(&[&sampling[..], &["--save-params", "q.st", "--lr", "0.1"]].concat()));
        let message = refused.unwrap_err().to_string();
        assert!(
            message.contains("--steps 0 trains nothing, so it has nothing to do with --lr, --save-params"),
            "{message}"
        );
        assert!(refuse_with_sample_only(&parse(&["--steps", "3", "--lr", "0.1"])).is_ok());
        let reported =
            refuse_with_sample_only(&parse(&[&sampling[..], &["--report", "json", "--all-reduce", "mpi"]].concat()));
        assert!(reported.unwrap_err().to_string().ends_with("nothing to do with --report, --all-reduce"));
        let unsharded = refuse_with_sample_only(&parse(&[&sampling[..], &["--no-shard-optimizer"]].concat()));
        assert!(unsharded.unwrap_err().to_string().ends_with("nothing to do with --no-shard-optimizer"));
    }

    #[test]
    fn comm_only_refuses_the_training_flags_given_and_only_those() {
        assert!(refuse_with_comm_only(&parse(&["--comm-only", "--steps", "3", "--link", "10gbe"])).is_ok());
        let refused = refuse_with_comm_only(&parse(&["--comm-only", "--lr", "0.1", "--write-profile", "p.json"]));
        let message = refused.unwrap_err().to_string();
        assert!(message.contains("nothing to do with --lr, --write-profile"), "{message}");
        let seeded = refuse_with_comm_only(&parse(&["--comm-only", "--seed", "3"])).unwrap_err().to_string();
        assert!(seeded.ends_with("nothing to do with --seed"), "{seeded}");
        for sharding in ["--shard-optimizer", "--no-shard-optimizer"] {
            let message = refuse_with_comm_only(&parse(&["--comm-only", sharding])).unwrap_err().to_string();
            assert!(message.ends_with(&format!("nothing to do with {sharding}")), "{message}");
        }
    }
}
