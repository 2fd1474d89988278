//! A flag given where another flag's value belongs: `--steps --batch 8`, `--start --no-overlap`.
//!
//! The number flags take values that start with `-` (so that `--lr -1` is refused by their own
//! parser, saying what it takes), and `--start` takes any text; clap would so read the next flag
//! as the value and then either run with it (`--start --no-overlap` sampled from the prompt
//! "--no-overlap", with overlap on) or fail on what follows (`--steps --report off`: "unexpected
//! argument 'off'"), naming neither flag. A value that is the name of one of the program's own
//! long flags is refused here instead, naming both; `--start=--x` still gives such a text.

use std::ffi::OsString;

use clap::error::ErrorKind;

/// Refuses, as clap refuses a bad value, a flag of `command` that takes a value and is followed
/// by another of its long flags (`args`: the program's arguments, without its name).
pub(crate) fn refuse_flag_as_value(command: &mut clap::Command, args: &[OsString]) -> Result<(), clap::Error> {
    command.build();
    let named = |name: &str| command.get_arguments().find(|arg| arg.get_long() == Some(name));
    let is_flag = |name: &str| name == "help" || name == "version" || named(name).is_some();
    let takes_value = |arg: &&clap::Arg| arg.get_num_args().is_some_and(|n| n.min_values() >= 1);
    // A text or a path (`--start TEXT`, `--save DIR`), which may start with `--`; not a number.
    let takes_text = |arg: &clap::Arg| {
        arg.get_value_names().is_some_and(|v| v.iter().any(|v| ["TEXT", "FILE", "DIR", "PATH"].contains(&v.as_str())))
    };
    let mut at = 0;
    while let Some(given) = args.get(at) {
        if given == "--" {
            break;
        }
        let Some((name, arg)) = bare_long(given).and_then(|name| Some((name, named(name).filter(takes_value)?))) else {
            at += 1;
            continue;
        };
        let next = args.get(at + 1).and_then(|next| next.to_str()).unwrap_or_default();
        let next_name = next.strip_prefix("--").map(|rest| rest.split('=').next().unwrap_or(rest));
        if next_name.is_some_and(|n| !n.is_empty() && is_flag(n)) {
            let how = if takes_text(arg) {
                format!("; a value that starts with `--` is given as --{name}=VALUE")
            } else {
                String::new()
            };
            return Err(command.error(
                ErrorKind::InvalidValue,
                format!("--{name} needs a value, but `{next}` after it is a flag of its own{how}"),
            ));
        }
        at += 2;
    }
    Ok(())
}

/// The name of `--name` given without `=`, as a flag is given before its value.
fn bare_long(arg: &OsString) -> Option<&str> {
    arg.to_str()?.strip_prefix("--").filter(|name| !name.is_empty() && !name.contains('='))
}
