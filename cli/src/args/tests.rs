//! The flags parsed as a user types them: defaults, refusals and their messages.

use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser};
use overlap_runtime::optim::LrSchedule;
use overlap_runtime::plan::Link;
use overlap_runtime::train::ValidationConfig;
use overlap_runtime::WireFormat;

use super::per_program::hide_unreadable;
use super::values::LONGEST_TIMEOUT;
use super::{OptimizerKind, PrintSchedule, ReportFormat, TrainArgs};

#[test]
fn print_schedule_takes_an_optional_plan() {
    let parse = |args: &[&str]| TrainArgs::try_parse_from(args).unwrap().print_schedule;
    assert_eq!(parse(&["mlp"]), None);
    assert_eq!(parse(&["mlp", "--print-schedule"]), Some(PrintSchedule::Compiled));
    assert_eq!(parse(&["mlp", "--print-schedule=ddp"]), Some(PrintSchedule::Ddp));
    assert!(TrainArgs::try_parse_from(["mlp", "--print-schedule=other"]).is_err());
}

#[test]
fn clipping_and_validation_can_be_turned_off() {
    let config = |args: &[&str]| TrainArgs::try_parse_from(args).unwrap().train_config();
    assert_eq!(config(&["gpt", "--clip-grad-norm", "1.5"]).optimizer.clip_grad_norm, Some(1.5));
    assert_eq!(config(&["gpt", "--clip-grad-norm", "off"]).optimizer.clip_grad_norm, None);
    assert_eq!(config(&["gpt"]).optimizer.clip_grad_norm, None);
    for bad in ["0", "-1", "inf", "none"] {
        assert!(TrainArgs::try_parse_from(["gpt", "--clip-grad-norm", bad]).is_err(), "{bad}");
    }
    let validation = config(&["gpt", "--eval-every", "50", "--eval-batches", "4"]).validation;
    assert_eq!(validation, Some(ValidationConfig { every: 50, batches: 4 }));
    assert_eq!(config(&["gpt", "--eval-every", "0"]).validation, None);
    assert!(TrainArgs::try_parse_from(["gpt", "--eval-batches", "0"]).is_err());
}

#[test]
fn dropout_takes_a_rate_below_one_and_the_seed() {
    let config = |args: &[&str]| TrainArgs::try_parse_from(args).unwrap().train_config();
    let dropout = config(&["gpt", "--dropout", "0.2", "--seed", "9"]).dropout;
    assert_eq!((dropout.rate, dropout.seed), (0.2, 9));
    assert_eq!(config(&["gpt"]).dropout.rate, 0.0);
    for bad in ["1", "1.5", "-0.1", "nan", "none"] {
        assert!(TrainArgs::try_parse_from(["gpt", "--dropout", bad]).is_err(), "{bad}");
    }
    let message = TrainArgs::try_parse_from(["gpt", "--dropout", "1"]).unwrap_err().to_string();
    assert!(
        message.contains("must be at least 0 and less than 1 (the share of activations dropped), got 1"),
        "{message}"
    );
    let message = TrainArgs::try_parse_from(["gpt", "--dropout", "0.99999999"]).unwrap_err().to_string();
    assert!(message.contains("got 0.99999999, which an f32 rounds to 1"), "{message}");
}

#[test]
fn bad_values_are_refused_with_a_message() {
    for bad in [
        &["--batch", "0"][..],
        &["--lr", "-1"],
        &["--lr", "nan"],
        &["--steps", "-1"],
        &["--optimizer", "lbfgs"],
        &["--momentum", "-0.5"],
        &["--beta1", "1"],
        &["--beta2", "-0.1"],
        &["--eps", "nan"],
        &["--link", "latency=5"],
        &["--link", "infiniband"],
        &["--report", "xml"],
        &["--report-every", "0"],
        &["--comm-timeout", "60"],
        &["--comm-timeout", "0s"],
        &["--comm-timeout", "-5s"],
        &["--save-every", "0"],
        &["--threads", "0"],
        &["--threads", "4097"],
        &["--simulate", "world=0,link=ib-hdr"],
        &["--simulate", "link=ib-hdr"],
        &["--grad-comm", "fp8"],
        &["--link", "latency=1e20s"],
        &["--simulate", "world=64,link=latency=1e300s"],
        &["--weight-decay", "-inf"],
        &["--lr", "-inf"],
        &["--eps", "-1e-8"],
        &["--comm-timeout", "99999999999999999999h"],
    ] {
        let err = TrainArgs::try_parse_from(std::iter::once("mlp").chain(bad.iter().copied())).unwrap_err();
        assert!(err.to_string().contains(bad[0]), "{err}");
    }
    let ok = TrainArgs::try_parse_from(["mlp", "--optimizer", "adamw", "--accumulate", "4"]).unwrap();
    assert_eq!((ok.optimizer, ok.accumulate, ok.batch, ok.threads), (OptimizerKind::Adamw, 4, 64, 1));
    // The f64 a Python float would be, not an f32 widened.
    let ok = TrainArgs::try_parse_from(["mlp", "--optimizer", "adamw", "--beta2", "0.999", "--lr", "3e-4"]).unwrap();
    let optimizer = ok.train_config().optimizer;
    assert_eq!((optimizer.betas, optimizer.lr, optimizer.eps), ((0.9, 0.999), Some(3e-4), 1e-8));
    let ok = TrainArgs::try_parse_from(["mlp", "--link", "ib-hdr", "--report", "json"]).unwrap();
    assert_eq!((ok.link, ok.report), (Link::preset("ib-hdr"), ReportFormat::Json));
    let ok = TrainArgs::try_parse_from(["mlp", "--comm-timeout", "1.5s", "--save", "d", "--save-every", "5"]).unwrap();
    assert_eq!((ok.comm_timeout(), ok.save_every), (Some(Duration::from_millis(1500)), Some(5)));
    let default = TrainArgs::try_parse_from(["mlp"]).unwrap().comm_timeout();
    assert_eq!(default, Some(overlap_runtime::comm::DEFAULT_COMM_TIMEOUT));
    assert_eq!(default, Some(Duration::from_secs(600)), "the help says 10m");
    let off = TrainArgs::try_parse_from(["mlp", "--comm-timeout", "off"]).unwrap().comm_timeout();
    assert_eq!(off, None);
    let year = TrainArgs::try_parse_from(["mlp", "--comm-timeout", "8760h"]).unwrap().comm_timeout();
    assert_eq!(year, Some(LONGEST_TIMEOUT));
    for (value, expected) in [("10", "`10` needs a unit: ms, s, m or h"), ("1us", "`us` is not a unit taken here")] {
        let err = TrainArgs::try_parse_from(["mlp", "--comm-timeout", value]).unwrap_err().to_string();
        assert!(err.contains(expected), "{value}: {err}");
    }
    let ok = TrainArgs::try_parse_from(["mlp", "--grad-comm", "bf16"]).unwrap();
    assert_eq!(ok.grad_comm, Some(WireFormat::Bf16));
    let err = TrainArgs::try_parse_from(["mlp", "--save-every", "5"]).unwrap_err();
    assert!(err.to_string().contains("--save"), "{err}");
    let cosine = TrainArgs::try_parse_from(["mlp", "--lr-schedule", "cosine:warmup=100,until=5000,min=1e-4"]);
    let schedule = cosine.unwrap().train_config().optimizer.lr_schedule;
    assert_eq!(schedule, LrSchedule::WarmupCosine { warmup: 100, decay_until: 5000, min_lr: 1e-4 });
    let err = TrainArgs::try_parse_from(["mlp", "--lr-schedule", "cosine:warmup=100"]).unwrap_err().to_string();
    assert!(err.contains("--lr-schedule") && err.contains("lacks until, min"), "{err}");
}

#[test]
fn values_that_look_like_flags_reach_their_parser() {
    for (flag, value, expected) in [
        ("--weight-decay", "-inf", "must be a finite number of at least 0, got -inf"),
        ("--lr", "-inf", "must be a finite number greater than 0, got -inf"),
        ("--momentum", "-inf", "must be a finite number of at least 0"),
        ("--beta1", "-inf", "must be at least 0 and less than 1"),
        ("--beta2", "-0.5", "must be at least 0 and less than 1"),
        ("--eps", "-inf", "must be a finite number of at least 0"),
    ] {
        let err = TrainArgs::try_parse_from(["mlp", flag, value]).unwrap_err().to_string();
        assert!(err.contains(flag) && err.contains(expected), "{flag} {value}: {err}");
    }
}

#[test]
fn absurd_timeouts_are_too_long_not_negative() {
    for long in ["99999999999999999999h", "18000000000000000000s", "8761h"] {
        let err = TrainArgs::try_parse_from(["mlp", "--comm-timeout", long]).unwrap_err().to_string();
        assert!(err.contains("is too long") && err.contains("`off`"), "{long}: {err}");
    }
}

#[test]
fn help_lists_only_the_data_flags_the_model_reads() {
    use clap::CommandFactory;
    let help = |reads_tokens| hide_unreadable(TrainArgs::command(), reads_tokens).render_long_help().to_string();
    // A flag's own entry, not a mention in another's help: `      --text <FILE>`.
    let lists = |help: &str, flag: &str| help.lines().any(|line| line.trim_start().starts_with(&format!("{flag} ")));
    let language_only = ["--text", "--tokens", "--context", "--sample", "--temperature", "--top-k"];
    let language_model = help(true);
    // `--data` is each model's own: a text or token shards here, images for a classifier.
    assert!(lists(&language_model, "--data"), "{language_model}");
    assert!(language_model.contains("A text file, read as --text, or token shards"), "{language_model}");
    assert!(!language_model.contains("MNIST-format"), "{language_model}");
    assert!(language_only.iter().all(|flag| lists(&language_model, flag)), "{language_model}");
    let classifier = help(false);
    assert!(lists(&classifier, "--data") && classifier.contains("MNIST-format"), "{classifier}");
    assert!(language_only.iter().all(|flag| !lists(&classifier, flag)), "{classifier}");
    // Nor offered by `--steps 0`, which samples only for a language model.
    let steps_help = |help: &str| {
        help.lines().skip_while(|l| !l.trim_start().starts_with("--steps ")).nth(1).map(str::trim).map(String::from)
    };
    assert_eq!(steps_help(&classifier).as_deref(), Some("Optimizer steps to run (at least 1)"), "{classifier}");
    assert!(steps_help(&language_model).is_some_and(|h| h.contains("only --sample from --init-params")));
    // Hidden, not removed: a run given one still parses it, and says why it cannot use it.
    let given = hide_unreadable(TrainArgs::command(), false).try_get_matches_from(["mlp", "--text", "a.txt"]);
    assert!(given.is_ok());
}

#[test]
fn a_flag_where_a_value_belongs_is_refused_naming_both() {
    let parse = |args: &[&str]| {
        let argv = ["gpt"].iter().chain(args).map(std::ffi::OsString::from);
        super::matches(TrainArgs::command(), argv).map(|m| TrainArgs::from_arg_matches(&m).unwrap())
    };
    for (args, flag, next) in [
        (&["--steps", "--report", "off"][..], "--steps", "--report"),
        (&["--sample", "5", "--start", "--no-overlap"], "--start", "--no-overlap"),
        (&["--lr", "--batch=8"], "--lr", "--batch=8"),
        (&["--seed", "--help"], "--seed", "--help"),
    ] {
        let message = parse(args).unwrap_err().to_string();
        assert!(message.contains(&format!("{flag} needs a value, but `{next}` after it is a flag")), "{message}");
    }
    // Values that start with `-` still reach their own parser, or are taken as given.
    assert!(parse(&["--lr", "-1"]).unwrap_err().to_string().contains("greater than 0"));
    assert_eq!(parse(&["--start", "- a list item"]).unwrap().start.as_deref(), Some("- a list item"));
    assert_eq!(parse(&["--start=--no-overlap"]).unwrap().start.as_deref(), Some("--no-overlap"));
    assert_eq!(parse(&["--start", "--not-a-flag"]).unwrap().start.as_deref(), Some("--not-a-flag"));
    // A flag of optional value, and what follows `--`, are left alone: clap then takes `--` as
    // the prompt, and what follows as flags.
    assert!(parse(&["--print-schedule", "--steps", "3"]).unwrap().print_schedule.is_some());
    assert!(!parse(&["--", "--steps"]).unwrap_err().to_string().contains("needs a value"));
    let after = parse(&["--start", "--", "--no-overlap"]).unwrap();
    assert_eq!((after.start.as_deref(), after.no_overlap), (Some("--"), true));
    // Only a flag that takes a text or a path is told how to give one starting with `--`.
    let number = parse(&["--steps", "--report", "off"]).unwrap_err().to_string();
    assert!(!number.contains("--steps=VALUE"), "{number}");
    assert!(parse(&["--start", "--lr"]).unwrap_err().to_string().contains("--start=VALUE"));
}

#[test]
fn a_timeline_is_written_under_an_svg_name_or_one_without_an_extension() {
    let timeline = |name: &str| TrainArgs::try_parse_from(["mlp", "--timeline", name]).map(|a| a.timeline);
    assert!(timeline("step.svg").is_ok() && timeline("step.SVG").is_ok() && timeline("step").is_ok());
    let message = timeline("step.png").unwrap_err().to_string();
    assert!(message.contains("give a file name ending in .svg (or without an extension), not `step.png`"), "{message}");
    assert!(timeline("step.").is_err(), "an empty extension is one");
    // A name of any bytes, as a path may hold.
    let bytes = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b"\xff.svg").to_os_string();
    let parsed = TrainArgs::try_parse_from([std::ffi::OsString::from("mlp"), "--timeline".into(), bytes.clone()]);
    assert_eq!(parsed.unwrap().timeline, Some(bytes.into()));
}
