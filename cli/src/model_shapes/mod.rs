//! An example compiled in several shapes, one chosen by flags.
//!
//! A model's structure is a type: its bucket plan and its unrolled program are made when it
//! compiles, so no flag can make a built binary's model deeper or wider. An example can hold a few
//! shapes instead (`gpt`: nanoGPT's CPU run and its "baby GPT"), and flags such as `--layers`,
//! `--heads` and `--width` (nanoGPT's `--n_layer`, `--n_head`, `--n_embd`) choose among them. A
//! combination the binary does not hold is refused naming those it does, and how to add one;
//! without shape flags, a run starting from a parameters file runs the shape the file holds.

mod start_file;
#[cfg(test)]
mod tests;
mod words;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::error::ErrorKind;

use overlap_runtime::command_line::console;
use overlap_runtime::DistributedModel;

use crate::args::TrainArgs;
use crate::example_defaults::{self, ExampleDefaults};
use crate::parse_failure::launched_rank;
use crate::run;
pub use start_file::ParameterShapes;
use words::{asks_help_or_version, last_value, with_leading};

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
    /// Trains this shape, given the command line.
    main: fn(&ExampleDefaults, &ModelShapes, ChosenShape) -> ExitCode,
    /// The model's parameters as a parameters file names them, with their shapes: how a file
    /// given without shape flags tells which shape it holds.
    parameters: fn() -> ParameterShapes,
    /// The rows of its position embedding, where it has one: the longest `--context` it takes.
    positions: fn() -> Option<usize>,
}

impl ModelShape {
    /// Model `M`, chosen by the flags' `values`.
    pub const fn of<M: DistributedModel>(values: &'static [usize]) -> Self {
        ModelShape {
            values,
            main: run_in_shape::<M>,
            parameters: parameters_of::<M>,
            positions: overlap_runtime::model::position_rows::<M>,
        }
    }
}

/// The command line a chosen shape runs, and what rank 0 says about the choice once it parses.
#[derive(Debug)]
struct ChosenShape {
    argv: Vec<OsString>,
    note: Option<String>,
}

/// `main_with_defaults` for `M`, the shape `main_with_shapes` chose.
fn run_in_shape<M: DistributedModel>(
    defaults: &ExampleDefaults,
    shapes: &ModelShapes,
    chosen: ChosenShape,
) -> ExitCode {
    let args = parse_in_shape::<M>(defaults, shapes, chosen.argv);
    if let (Some(note), 0) = (chosen.note, launched_rank().unwrap_or(0)) {
        console::err_line(&note);
    }
    run::run_main::<M>(args)
}

/// `M`'s parameters, by the names and shapes its parameters files record.
fn parameters_of<M: DistributedModel>() -> ParameterShapes {
    let s = M::SCHEDULE;
    let mut named: ParameterShapes = s.params().map(|p| (s.param_name(p), s.param(p).shape.to_vec())).collect();
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
        if asks_help_or_version(argv) {
            return Ok(default);
        }
        let mut asked = default.values.to_vec();
        for (at, &(flag, _)) in self.flags.iter().enumerate() {
            match last_value(argv, flag).map(|v| v.to_str().and_then(|v| v.parse::<usize>().ok())) {
                Some(Some(n)) => asked[at] = n,
                Some(None) => return Ok(default),
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

    /// `command` with the shape flags, their help naming the compiled shapes.
    pub(crate) fn with_flags(&self, mut command: clap::Command) -> clap::Command {
        let held: Vec<String> = self
            .compiled
            .iter()
            .map(|s| match (s.positions)() {
                Some(rows) => format!("`{}` (--context up to {rows})", self.described(s.values)),
                None => format!("`{}`", self.described(s.values)),
            })
            .collect();
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

    /// `values` as the words of a command line: `--layers 6 --heads 6 --width 384`.
    fn flag_words(&self, values: &[usize]) -> Vec<OsString> {
        let each = self.flags.iter().zip(values).map(|(&(flag, _), v)| [flag.into(), v.to_string().into()]);
        each.flatten().collect()
    }

    /// Whether `argv` gives any of the shape flags.
    fn gives_flags(&self, argv: &[OsString]) -> bool {
        self.flags.iter().any(|&(flag, _)| last_value(argv, flag).is_some())
    }

    fn error(&self, message: String) -> clap::Error {
        clap::Error::raw(ErrorKind::ValueValidation, format!("{message}\n"))
    }
}

/// The clap id of a shape flag: apart from `TrainArgs`'s own.
fn shape_id(long: &str) -> String {
    format!("shape-{long}")
}

/// `example_defaults::parse` for `M`, one of `shapes`: the one `argv` chooses, whose flags it
/// takes too, recorded in the arguments for the ranks to compare.
fn parse_in_shape<M: DistributedModel>(
    defaults: &ExampleDefaults,
    shapes: &ModelShapes,
    argv: Vec<OsString>,
) -> TrainArgs {
    let chosen = shapes.chosen(&argv);
    example_defaults::parse_with::<M>(
        defaults,
        argv,
        |command| shapes.with_flags(command),
        |matches, mut args| {
            args.model_shape = Some(shapes.check_parsed(matches, chosen?)?);
            Ok(args)
        },
    )
}

/// Trains the shape of `shapes` that the command line asks for: the one its flags name or,
/// where it names none, the one whose parameters `--init-params` or `--resume` starts from (as
/// nanoGPT's `sample.py` and `init_from='resume'` take the model's sizes from the checkpoint).
pub fn main_with_shapes(defaults: &ExampleDefaults, shapes: &ModelShapes) -> ExitCode {
    // First, since it may start the program again: before any file is read or note said.
    run::fit_blas_kernels();
    let mut argv: Vec<OsString> = std::env::args_os().collect();
    let given = shapes.gives_flags(&argv);
    let start = start_file::parameters_of_start(&argv).and_then(|(held, from)| {
        let fits = |shape: &ModelShape| (shape.parameters)() == held;
        shapes.compiled.iter().position(fits).map(|at| (at, from))
    });
    let held = start.as_ref().map(|(at, from)| (&shapes.compiled[*at], *at, from));
    let mut note = None;
    if let (Some((shape, at, from)), false) = (held, given) {
        if at != 0 {
            argv = with_leading(argv, shapes.flag_words(shape.values));
            note =
                Some(format!("note: {from} holds the model of `{}`: that shape runs", shapes.described(shape.values)));
        }
    }
    let chosen = shapes.chosen(&argv);
    if let (Some((shape, _, from)), true) = (held, given) {
        if !chosen.as_ref().is_ok_and(|c| std::ptr::eq(*c, shape)) && !asks_help_or_version(&argv) {
            note = Some(format!(
                "note: {from} holds the model of `{}`, which the shape flags given do not name: give those, or none",
                shapes.described(shape.values)
            ));
        }
    }
    match chosen {
        Ok(shape) => (shape.main)(defaults, shapes, ChosenShape { argv, note }),
        Err(e) => {
            if let (Some(note), 0) = (note, launched_rank().unwrap_or(0)) {
                console::err_line(&note);
            }
            crate::parse_failure::exit(e)
        }
    }
}
