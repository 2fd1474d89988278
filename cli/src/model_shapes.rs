//! An example compiled in several shapes, one chosen by flags.
//!
//! A model's structure is a type: its bucket plan and its unrolled program are made when it
//! compiles, so no flag can make a built binary's model deeper or wider. An example can hold a few
//! shapes instead (`gpt`: nanoGPT's CPU run and its "baby GPT"), and flags such as `--layers`,
//! `--heads` and `--width` (nanoGPT's `--n_layer`, `--n_head`, `--n_embd`) choose among them. A
//! combination the binary does not hold is refused naming those it does, and how to add one;
//! without shape flags, a run starting from a parameters file runs the shape the file holds.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::error::ErrorKind;

use overlap_runtime::DistributedModel;

use crate::args::TrainArgs;
use crate::example_defaults::{self, ExampleDefaults};
use crate::run;

/// The shapes an example is compiled in, and the flags that choose one.
#[derive(Clone, Copy, Debug)]
pub struct ModelShapes {
    /// `(flag, help)`, the flag spelled as on the command line (`"--layers"`); each shape gives
    /// one value per flag, in this order.
    pub flags: &'static [(&'static str, &'static str)],
    /// The compiled shapes; the first is the default.
    pub compiled: &'static [ModelShape],
    /// How to train a shape the binary does not hold, said when one is asked for.
    pub another: &'static str,
}

/// One compiled shape of an example's model: `ModelShape::of::<Model>(&[6, 6, 384])`.
#[derive(Clone, Copy, Debug)]
pub struct ModelShape {
    /// The value of each of `ModelShapes::flags`, in their order.
    pub values: &'static [usize],
    /// Trains this shape, given the command line (set by `ModelShape::of`).
    pub main: fn(&ExampleDefaults, &ModelShapes, Vec<OsString>) -> ExitCode,
    /// The model's parameters as a parameters file names them, with their shapes: how a file
    /// given without shape flags tells which shape it holds.
    pub parameters: fn() -> Vec<(String, Vec<usize>)>,
}

impl ModelShape {
    /// Model `M`, chosen by the flags' `values`.
    pub const fn of<M: DistributedModel>(values: &'static [usize]) -> Self {
        ModelShape { values, main: run_in_shape::<M>, parameters: parameters_of::<M> }
    }
}

/// `main_with_defaults` for `M`, one of `shapes`: the one `argv` chose.
fn run_in_shape<M: DistributedModel>(
    defaults: &ExampleDefaults,
    shapes: &ModelShapes,
    argv: Vec<OsString>,
) -> ExitCode {
    run::fit_blas_kernels();
    run::run_main::<M>(parse_in_shape::<M>(defaults, shapes, argv))
}

/// `M`'s parameters, by the names and shapes its parameters files record.
fn parameters_of<M: DistributedModel>() -> Vec<(String, Vec<usize>)> {
    let s = M::SCHEDULE;
    let mut named: Vec<(String, Vec<usize>)> =
        s.params().map(|p| (s.param_name(p), s.param(p).shape.to_vec())).collect();
    named.sort();
    named
}

impl ModelShapes {
    /// The shape `argv` asks for (the default for each flag not given), or clap's error naming
    /// the compiled ones. A value that is not a number is left to clap's own parser to refuse.
    /// Panics if a shape gives other than one value per flag: a mistake in the example's source,
    /// not in what a user typed (as `ExampleDefaults`).
    pub(crate) fn chosen(&self, argv: &[OsString]) -> Result<&ModelShape, clap::Error> {
        if let Some(odd) = self.compiled.iter().find(|s| s.values.len() != self.flags.len()) {
            panic!(
                "example shape {:?}: {} values for the {} flags {:?}",
                odd.values,
                odd.values.len(),
                self.flags.len(),
                self.flags
            );
        }
        let default = self.compiled.first().ok_or_else(|| self.error("no shape is compiled in".into()))?;
        let mut asked = default.values.to_vec();
        for (at, &(flag, _)) in self.flags.iter().enumerate() {
            match last_value(argv, flag).map(|v| v.parse::<usize>()) {
                Some(Ok(n)) => asked[at] = n,
                Some(Err(_)) => return Ok(default),
                None => {}
            }
        }
        self.compiled.iter().find(|shape| shape.values == asked.as_slice()).ok_or_else(|| {
            let asked = self.described(&asked);
            let held: Vec<String> = self.compiled.iter().map(|s| self.described(s.values)).collect();
            self.error(format!(
                "no model of `{asked}` is compiled into this program: it holds `{}` (the first is the default). {}",
                held.join("`, `"),
                self.another
            ))
        })
    }

    /// Where `argv` gives no shape flag but starts from a parameters file (`--init-params FILE`,
    /// or the newest checkpoint of `--resume DIR`) that is not the default shape's, the compiled
    /// shape whose parameters it holds, and the file as the flag gave it. A file none holds is
    /// left to the run to refuse, naming every difference.
    fn held_by_start(&self, argv: &[OsString]) -> Option<(&ModelShape, String)> {
        if self.flags.iter().any(|&(flag, _)| last_value(argv, flag).is_some()) {
            return None;
        }
        let (file, from) = match (last_value(argv, "--init-params"), last_value(argv, "--resume")) {
            (Some(file), _) => (std::path::PathBuf::from(&file), format!("--init-params {file}")),
            (None, Some(dir)) => {
                (overlap_runtime::checkpoint::latest_model_file(dir.as_ref())?, format!("--resume {dir}"))
            }
            (None, None) => return None,
        };
        let mut held: Vec<(String, Vec<usize>)> = overlap_runtime::params_file::load_params(&file)
            .ok()?
            .into_iter()
            .map(|(name, shape, _)| (name, shape))
            .collect();
        held.sort();
        let fits = |shape: &&ModelShape| (shape.parameters)() == held;
        match self.compiled.iter().find(fits) {
            Some(shape) if !std::ptr::eq(shape, self.compiled.first()?) => Some((shape, from)),
            _ => None,
        }
    }

    /// `command` with the shape flags, their help naming the compiled shapes.
    pub(crate) fn with_flags(&self, mut command: clap::Command) -> clap::Command {
        let held: Vec<String> = self.compiled.iter().map(|s| format!("`{}`", self.described(s.values))).collect();
        for (at, &(flag, help)) in self.flags.iter().enumerate() {
            let long = flag.strip_prefix("--").unwrap_or(flag);
            let Some(default) = self.compiled.first().map(|s| s.values[at]) else { break };
            command = command.arg(
                clap::Arg::new(shape_id(long))
                    .long(long)
                    .value_name("N")
                    .value_parser(clap::value_parser!(usize))
                    .default_value(default.to_string())
                    .help(help)
                    .long_help(format!("{help}. The shapes this program holds: {}", held.join(", "))),
            );
        }
        command
    }

    /// The shape `chosen` as the command line gives it; refuses a parse whose shape flags differ
    /// from it, read off the same words (so the program never trains a shape other than the one
    /// its flags name).
    pub(crate) fn check_parsed(&self, matches: &clap::ArgMatches, chosen: &ModelShape) -> Result<String, clap::Error> {
        let parsed: Vec<usize> = self
            .flags
            .iter()
            .map(|&(flag, _)| matches.get_one::<usize>(&shape_id(flag.trim_start_matches('-'))).copied().unwrap_or(0))
            .collect();
        if parsed == chosen.values {
            return Ok(self.described(chosen.values));
        }
        Err(self.error(format!(
            "the command line reads as `{}`, but `{}` was chosen from it: give each of {} once, as `--flag N`",
            self.described(&parsed),
            self.described(chosen.values),
            self.flags.iter().map(|f| f.0).collect::<Vec<_>>().join(", ")
        )))
    }

    /// `--layers 4 --heads 4 --width 128`: a shape as the command line gives it.
    fn described(&self, values: &[usize]) -> String {
        let each = self.flags.iter().zip(values).map(|(&(flag, _), v)| format!("{flag} {v}"));
        each.collect::<Vec<_>>().join(" ")
    }

    fn error(&self, message: String) -> clap::Error {
        clap::Error::raw(ErrorKind::ValueValidation, format!("{message}\n"))
    }
}

/// The clap id of a shape flag: apart from `TrainArgs`'s own.
fn shape_id(long: &str) -> String {
    format!("shape-{long}")
}

/// The value of the last `--flag V` or `--flag=V` in `argv` (a repeated flag overrides, as the
/// others do).
fn last_value(argv: &[OsString], flag: &str) -> Option<String> {
    let words: Vec<&str> = argv.iter().skip(1).filter_map(|w| w.to_str()).collect();
    let mut found = None;
    for (at, word) in words.iter().enumerate() {
        if *word == flag {
            found = Some(words.get(at + 1).map_or_else(String::new, |v| (*v).to_owned()));
        } else if let Some(value) = word.strip_prefix(flag).and_then(|rest| rest.strip_prefix('=')) {
            found = Some(value.to_owned());
        }
    }
    found
}

/// `example_defaults::parse` for `M`, one of `shapes`: the one `argv` chooses, whose flags it
/// takes too, recorded in the arguments for the ranks to compare.
fn parse_in_shape<M: DistributedModel>(
    defaults: &ExampleDefaults,
    shapes: &ModelShapes,
    argv: Vec<OsString>,
) -> TrainArgs {
    let command = shapes.with_flags(crate::args::for_model::<M>(example_defaults::command(defaults)));
    let parsed = crate::args::named(command).try_get_matches_from(&argv).and_then(|matches| {
        let mut args = TrainArgs::from_matches(&matches)?;
        args.model_shape = Some(shapes.check_parsed(&matches, shapes.chosen(&argv)?)?);
        Ok(args)
    });
    parsed.unwrap_or_else(|e| crate::parse_failure::exit(e))
}

/// Trains the shape of `shapes` that the command line asks for: the one its flags name or,
/// where it names none, the one whose parameters `--init-params` or `--resume` starts from (as
/// nanoGPT's `sample.py` and `init_from='resume'` take the model's sizes from the checkpoint).
pub fn main_with_shapes(defaults: &ExampleDefaults, shapes: &ModelShapes) -> ExitCode {
    let mut argv: Vec<OsString> = std::env::args_os().collect();
    if let Some((shape, from)) = shapes.held_by_start(&argv) {
        if crate::parse_failure::launched_rank().unwrap_or(0) == 0 {
            let said =
                format!("note: {from} holds the model of `{}`: that shape runs\n", shapes.described(shape.values));
            let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), said.as_bytes());
        }
        let flags = shapes.flags.iter().zip(shape.values);
        argv.extend(flags.flat_map(|(&(flag, _), value)| [OsString::from(flag), OsString::from(value.to_string())]));
    }
    match shapes.chosen(&argv) {
        Ok(shape) => (shape.main)(defaults, shapes, argv),
        Err(e) => crate::parse_failure::exit(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn never(_: &ExampleDefaults, _: &ModelShapes, _: Vec<OsString>) -> ExitCode {
        ExitCode::FAILURE
    }

    fn none() -> Vec<(String, Vec<usize>)> {
        Vec::new()
    }

    const SHAPES: ModelShapes = ModelShapes {
        flags: &[("--layers", "Blocks"), ("--width", "Features")],
        compiled: &[
            ModelShape { values: &[4, 128], main: never, parameters: none },
            ModelShape { values: &[6, 384], main: never, parameters: none },
        ],
        another: "Add it to the example's list and rebuild.",
    };

    fn chosen(args: &[&str]) -> Result<&'static [usize], String> {
        let argv: Vec<OsString> = std::iter::once("gpt").chain(args.iter().copied()).map(OsString::from).collect();
        SHAPES.chosen(&argv).map(|s| s.values).map_err(|e| e.to_string())
    }

    #[test]
    fn flags_choose_a_compiled_shape_and_the_first_is_the_default() {
        assert_eq!(chosen(&[]).unwrap(), &[4, 128]);
        assert_eq!(chosen(&["--layers", "6", "--steps", "3", "--width=384"]).unwrap(), &[6, 384]);
        assert_eq!(chosen(&["--layers", "6", "--width", "384", "--layers", "4", "--width", "128"]).unwrap(), &[4, 128]);
        // Not a number: clap's parser says so, on the default shape's command line.
        assert_eq!(chosen(&["--layers", "six"]).unwrap(), &[4, 128]);
        assert_eq!(chosen(&["--layers"]).unwrap(), &[4, 128]);
    }

    #[test]
    fn a_shape_not_compiled_in_names_the_compiled_ones() {
        let err = chosen(&["--layers", "6"]).unwrap_err();
        assert!(err.contains("no model of `--layers 6 --width 128` is compiled into this program"), "{err}");
        assert!(err.contains("it holds `--layers 4 --width 128`, `--layers 6 --width 384` (the first"), "{err}");
        assert!(err.contains("Add it to the example's list and rebuild."), "{err}");
    }

    #[test]
    #[should_panic(expected = "example shape [6]: 1 values for the 2 flags")]
    fn a_shape_without_a_value_per_flag_is_named() {
        const SHORT: ModelShapes =
            ModelShapes { compiled: &[ModelShape { values: &[6], main: never, parameters: none }], ..SHAPES };
        let _ = SHORT.chosen(&[OsString::from("gpt")]);
    }

    #[test]
    fn help_names_every_shape_and_the_default() {
        let command = SHAPES.with_flags(clap::Command::new("gpt"));
        let help = command.clone().render_long_help().to_string();
        assert!(help.contains("--layers <N>"), "{help}");
        let held = "The shapes this program holds: `--layers 4 --width 128`, `--layers 6 --width 384`";
        assert!(help.contains(held), "{help}");
        assert!(help.contains("[default: 4]"), "{help}");
        let matches = command.clone().try_get_matches_from(["gpt", "--width", "384", "--layers", "6"]).unwrap();
        assert_eq!(SHAPES.check_parsed(&matches, &SHAPES.compiled[1]).unwrap(), "--layers 6 --width 384");
        let err = SHAPES.check_parsed(&matches, &SHAPES.compiled[0]).unwrap_err().to_string();
        assert!(err.contains("reads as `--layers 6 --width 384`, but `--layers 4 --width 128` was chosen"), "{err}");
    }
}
