//! An example's own configuration as the command line's defaults.
//!
//! `gpt` starts from nanoGPT's settings rather than the synthetic set's. Making them the flags'
//! defaults (not arguments slipped in front of the user's) lets `--help` print the values the
//! program will actually use, and any flag given on the command line still wins.

use clap::{ArgMatches, CommandFactory, FromArgMatches};

use overlap_runtime::optim::LrSchedule;
use overlap_runtime::DistributedModel;

use crate::args::TrainArgs;

/// What an example changes about the common command line.
#[derive(Clone, Copy, Debug)]
pub struct ExampleDefaults {
    /// The first paragraph of `--help`: what this program trains, and on what.
    pub about: &'static str,
    /// `(flag, value)` pairs, the flag spelled as on the command line (`"--batch"`).
    pub flags: &'static [(&'static str, &'static str)],
}

/// The command line with `defaults` applied. Panics if a flag does not exist or its value does
/// not parse: both are mistakes in the example's source, not in what a user typed.
pub fn command(defaults: &ExampleDefaults) -> clap::Command {
    let mut command = TrainArgs::command().about(defaults.about).long_about(None);
    for &(flag, value) in defaults.flags {
        let long = flag.strip_prefix("--").unwrap_or(flag);
        let id = command
            .get_arguments()
            .find(|arg| arg.get_long() == Some(long))
            .map(|arg| arg.get_id().clone())
            .unwrap_or_else(|| panic!("example default {flag}: the command line has no such flag"));
        command = command.mut_arg(id, |arg| {
            let arg = match arg.get_long_help().map(|h| h.to_string()) {
                Some(help) => arg.long_help(without_stated_default(&help)),
                None => arg,
            };
            let arg = match arg.get_help().map(|h| h.to_string()) {
                Some(help) => arg.help(without_stated_default(&help)),
                None => arg,
            };
            arg.default_value(value)
        });
    }
    // Fails here, on every run, rather than only on the run that leaves the flag out.
    let checked = command.clone().no_binary_name(true).try_get_matches_from([""; 0]);
    if let Err(e) = checked.and_then(|matches| TrainArgs::from_arg_matches(&matches)) {
        panic!("an example default does not parse: {e}");
    }
    command
}

/// A flag's help without the default its doc comment states in words (`[default: off]`, which
/// clap cannot know), since the example's value now follows it in clap's own brackets.
fn without_stated_default(help: &str) -> String {
    match help.find(" [default:") {
        Some(at) => {
            let end = help[at..].find(']').map_or(help.len(), |close| at + close + 1);
            format!("{}{}", &help[..at], &help[end..])
        }
        None => help.to_owned(),
    }
}

/// Parses `argv` (program name first) against `M`'s command line with `defaults` applied, exiting
/// with clap's message on a bad flag as `Parser::parse` does.
pub fn parse<M: DistributedModel>(
    defaults: &ExampleDefaults,
    argv: impl IntoIterator<Item = std::ffi::OsString>,
) -> TrainArgs {
    parse_with::<M>(defaults, argv, |command| command, |_, args| Ok(args))
}

/// `parse`, with flags of the program's own added to the command line (`extend`) and read back
/// from what it parsed (`finish`, which may refuse them as clap refuses a bad value).
pub(crate) fn parse_with<M: DistributedModel>(
    defaults: &ExampleDefaults,
    argv: impl IntoIterator<Item = std::ffi::OsString>,
    extend: impl FnOnce(clap::Command) -> clap::Command,
    finish: impl FnOnce(&ArgMatches, TrainArgs) -> Result<TrainArgs, clap::Error>,
) -> TrainArgs {
    let command = extend(crate::args::for_model::<M>(command(defaults)));
    let parsed = crate::args::matches(command, argv)
        .and_then(|matches| TrainArgs::from_matches(&matches).and_then(|args| finish(&matches, args)));
    parsed.unwrap_or_else(|e| crate::parse_failure::exit(e))
}

/// Refuses a `--lr` below the minimum rate of a `--lr-schedule` the user did not give (the
/// example's default, such as `gpt`'s cosine decay to 1e-4), naming the default and how to
/// replace it, rather than the library's message about a schedule the user never typed.
pub fn refuse_lr_below_default_schedule(args: &TrainArgs) -> overlap_runtime::Result<()> {
    let (LrSchedule::WarmupCosine { warmup, decay_until, min_lr }, Some(lr)) = (args.lr_schedule, args.lr) else {
        return Ok(());
    };
    if args.gave("lr_schedule") || !args.gave("lr") || min_lr <= lr {
        return Ok(());
    }
    // A tenth of the rate to three digits: `3e-6`, not `3.0000000000000004e-6`.
    let tenth = format!("{:.2e}", lr / 10.0).parse().unwrap_or(lr / 10.0);
    let lower = LrSchedule::WarmupCosine { warmup, decay_until, min_lr: tenth };
    Err(overlap_runtime::Error::Config(format!(
        "--lr {lr:e} is below the minimum rate {min_lr:e} of this program's default --lr-schedule {}: give a \
         schedule with it, `--lr-schedule constant` or one decaying to a lower rate (nanoGPT's minimum is a tenth of \
         the rate: `--lr-schedule {lower}`)",
        args.lr_schedule
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULTS: ExampleDefaults = ExampleDefaults {
        about: "Train the test's model.",
        flags: &[("--batch", "12"), ("--optimizer", "adamw"), ("--clip-grad-norm", "1.0")],
    };

    fn try_parse(args: &[&str]) -> TrainArgs {
        let matches = command(&DEFAULTS).try_get_matches_from(std::iter::once("gpt").chain(args.iter().copied()));
        TrainArgs::from_arg_matches(&matches.unwrap()).unwrap()
    }

    #[test]
    fn example_defaults_apply_and_the_command_line_wins() {
        let plain = try_parse(&[]);
        assert_eq!(plain.batch, 12);
        assert!(matches!(plain.optimizer, crate::args::OptimizerKind::Adamw));
        assert_eq!(plain.train_config().optimizer.clip_grad_norm, Some(1.0));
        let given = try_parse(&["--batch", "3", "--clip-grad-norm", "off"]);
        assert_eq!(given.batch, 3);
        assert_eq!(given.train_config().optimizer.clip_grad_norm, None);
    }

    #[test]
    fn a_rate_below_the_default_schedules_minimum_names_the_default() {
        const GPT: ExampleDefaults = ExampleDefaults {
            about: "Train the test's model.",
            flags: &[("--lr", "1e-3"), ("--lr-schedule", "cosine:warmup=100,until=2000,min=1e-4")],
        };
        let parse = |args: &[&str]| {
            let matches = command(&GPT).try_get_matches_from(std::iter::once("gpt").chain(args.iter().copied()));
            TrainArgs::from_matches(&matches.unwrap()).unwrap()
        };
        let err = refuse_lr_below_default_schedule(&parse(&["--lr", "3e-5"])).unwrap_err().to_string();
        assert!(err.contains("min=3e-6`"), "{err}");
        let err = refuse_lr_below_default_schedule(&parse(&["--lr", "5e-5"])).unwrap_err().to_string();
        assert!(
            err.contains("--lr 5e-5 is below the minimum rate 1e-4 of this program's default --lr-schedule"),
            "{err}"
        );
        assert!(err.contains("`--lr-schedule cosine:warmup=100,until=2000,min=5e-6`"), "{err}");
        // The defaults agree; a schedule the user gives is the library's to check.
        refuse_lr_below_default_schedule(&parse(&[])).unwrap();
        refuse_lr_below_default_schedule(&parse(&["--lr", "2e-4"])).unwrap();
        refuse_lr_below_default_schedule(&parse(&["--lr", "5e-5", "--lr-schedule", "constant"])).unwrap();
        let given = parse(&["--lr", "5e-5", "--lr-schedule", "cosine:warmup=1,until=9,min=1e-4"]);
        refuse_lr_below_default_schedule(&given).unwrap();
    }

    #[test]
    fn help_shows_the_example_defaults_and_its_description() {
        let help = command(&DEFAULTS).render_long_help().to_string();
        assert!(help.starts_with("Train the test's model."), "{help}");
        assert!(!help.contains("synthetic classification set"), "{help}");
        let batch = help.split("--batch").nth(1).unwrap();
        let batch = &batch[..batch.find("--").unwrap()];
        assert!(batch.contains("[default: 12]"), "{batch}");
        assert!(!batch.contains("[default: 64]"), "{batch}");
        // The stated default of the common command line gives way to the example's.
        let clip = help.split("--clip-grad-norm").nth(1).unwrap();
        let clip = &clip[..clip.find("--").unwrap()];
        assert!(clip.contains("[default: 1.0]") && !clip.contains("[default: off]"), "{clip}");
    }

    #[test]
    #[should_panic(expected = "--no-such-flag: the command line has no such flag")]
    fn an_unknown_flag_in_the_defaults_is_named() {
        command(&ExampleDefaults { about: "", flags: &[("--no-such-flag", "1")] });
    }

    #[test]
    #[should_panic(expected = "an example default does not parse")]
    fn a_default_that_does_not_parse_is_refused() {
        command(&ExampleDefaults { about: "", flags: &[("--batch", "none")] });
    }
}
