use super::*;

fn never(_: &ExampleDefaults, _: &ModelShapes, _: ChosenShape) -> ExitCode {
    ExitCode::FAILURE
}

fn no_positions() -> Option<usize> {
    None
}

fn positions_64() -> Option<usize> {
    Some(64)
}

fn none() -> ParameterShapes {
    Vec::new()
}

const SHAPES: ModelShapes = ModelShapes {
    flags: &[("--layers", "Blocks"), ("--width", "Features")],
    compiled: &[
        ModelShape { values: &[4, 128], main: never, parameters: none, positions: positions_64 },
        ModelShape { values: &[6, 384], main: never, parameters: none, positions: no_positions },
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
    // Help and the version, whatever shape is asked for: clap answers them.
    assert_eq!(chosen(&["--layers", "5", "--help"]).unwrap(), &[4, 128]);
    assert_eq!(chosen(&["-V", "--width", "7"]).unwrap(), &[4, 128]);
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
    const SHORT: ModelShapes = ModelShapes {
        compiled: &[ModelShape { values: &[6], main: never, parameters: none, positions: no_positions }],
        ..SHAPES
    };
    let _ = SHORT.chosen(&[OsString::from("gpt")]);
}

#[test]
fn help_names_every_shape_and_the_default() {
    let command = SHAPES.with_flags(clap::Command::new("gpt"));
    let help = command.clone().render_long_help().to_string();
    assert!(help.contains("--layers <N>"), "{help}");
    let held = "The shapes this program holds: `--layers 4 --width 128` (--context up to 64), `--layers 6 --width 384`";
    assert!(help.contains(held), "{help}");
    assert!(help.contains("[default: 4]"), "{help}");
    let matches = command.clone().try_get_matches_from(["gpt", "--width", "384", "--layers", "6"]).unwrap();
    assert_eq!(SHAPES.check_parsed(&matches, &SHAPES.compiled[1]).unwrap(), "--layers 6 --width 384");
    let err = SHAPES.check_parsed(&matches, &SHAPES.compiled[0]).unwrap_err().to_string();
    assert!(err.contains("reads as `--layers 6 --width 384`, but `--layers 4 --width 128` was chosen"), "{err}");
}
