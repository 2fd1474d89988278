//! The command lines the documentation shows, parsed by the programs' own flag parsers: every
//! run of an example (`target/release/examples/mlp --steps 30`, `cargo run --example gpt --
//! --text licenses.txt`, or the shorthand `mlp --grad-comm bf16` of a command block) in the
//! README, `docs/` and the examples' doc comments, so that a renamed flag or a changed value
//! syntax fails here, not in a reader's terminal. Every other `--flag` the documentation names
//! must be one of a program's, one the project's scripts and comparisons read, or another
//! tool's flag listed below.

use clap::CommandFactory;
use overlap_cli::prepare::PrepareArgs;
use overlap_cli::TrainArgs;

/// The example programs, each parsed by `TrainArgs` but `prepare`.
const PROGRAMS: [&str; 10] =
    ["custom_layer", "gpt", "mlp", "mlp_powersgd", "mlp_zero", "prepare", "resmlp", "tower", "uneven", "uneven_ddp"];

/// The flags choosing `gpt`'s compiled shape, which only that program adds to `TrainArgs`, and the
/// shapes it holds (`SHAPES` in examples/gpt.rs, whose `--help` tests/model_shapes.rs checks).
const GPT_SHAPE_FLAGS: [&str; 4] = ["layers", "heads", "width", "vocab"];
const GPT_SHAPES: [[usize; 4]; 3] = [[4, 4, 128, 96], [6, 6, 384, 96], [4, 4, 128, 50304]];

/// Flags of other tools that the documentation names, by tool.
const OTHER_TOOLS: [(&str, &[&str]); 6] = [
    (
        "cargo",
        &[
            "--release",
            "--example",
            "--examples",
            "--features",
            "--test",
            "--bench",
            "--profile",
            "--check",
            "--ignored",
            "--include-ignored",
        ],
    ),
    ("mpirun", &["--oversubscribe", "--map-by", "--bind-to", "--mca", "--output-filename"]),
    ("timeout", &["--foreground"]),
    ("debootstrap", &["--variant"]),
    ("compute-sanitizer", &["--report-api-errors"]),
    ("rustc", &["--codegen-units"]),
];

/// One command line as written, and where.
struct Shown {
    place: String,
    program: String,
    args: Vec<String>,
}

fn root() -> &'static str {
    env!("CARGO_MANIFEST_DIR")
}

/// The README, `docs/*.md` and the examples' sources, each with its name.
fn documents() -> Vec<(String, String)> {
    let mut paths = vec![format!("{}/README.md", root())];
    for folder in ["docs", "examples"] {
        let mut found: Vec<String> = std::fs::read_dir(format!("{}/{folder}", root()))
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|e| e == "md" || e == "rs"))
            .map(|path| path.display().to_string())
            .collect();
        found.sort();
        paths.extend(found);
    }
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            (path.trim_start_matches(root()).trim_start_matches('/').to_string(), text)
        })
        .collect()
}

/// The code of a document, line by line with its number: the lines of its code blocks whole
/// (in a Rust source, its comments' code blocks), and elsewhere its `inline code` spans. A line
/// ending in `\` is joined with the next.
fn code_lines(name: &str, text: &str) -> Vec<(usize, String, bool)> {
    let rust = name.ends_with(".rs");
    let mut lines = Vec::new();
    let mut in_block = false;
    let mut pending: Option<(usize, String)> = None;
    for (number, line) in text.lines().enumerate().map(|(i, l)| (i + 1, l)) {
        let line = if rust {
            match line.trim_start().strip_prefix("//!").or_else(|| line.trim_start().strip_prefix("///")) {
                Some(comment) => comment.strip_prefix(' ').unwrap_or(comment),
                None => continue,
            }
        } else {
            line
        };
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if in_block {
            let (start, mut joined) = pending.take().unwrap_or((number, String::new()));
            joined.push_str(line.trim_end());
            match joined.strip_suffix('\\') {
                Some(continued) => pending = Some((start, continued.to_string() + " ")),
                None => lines.push((start, joined, true)),
            }
        } else {
            lines.extend(line.split('`').skip(1).step_by(2).map(|span| (number, span.to_string(), false)));
        }
    }
    lines
}

/// The words of a shell line up to its comment or its first redirection or pipe, a prompt
/// (`$ `) left out; quoted words are one (`--start "To be"`), as the shell reads them, where the
/// line's quotes pair up.
fn words(line: &str) -> Vec<String> {
    let line = line.trim_start().strip_prefix("$ ").unwrap_or(line);
    let words = shlex::split(line).unwrap_or_else(|| line.split_whitespace().map(str::to_string).collect());
    words
        .into_iter()
        .take_while(|w| !w.starts_with('#') && !["|", ">", ">>", "2>&1", "&&", ";", "&"].contains(&w.as_str()))
        .collect()
}

/// The run of an example in `words`, if any: after its path, after `cargo run`'s `--`, or (in a
/// command block or a span that starts with it) its bare name.
fn example_run(words: &[String], whole_line: bool) -> Option<(String, Vec<String>)> {
    let program_at = |w: &str| {
        let name = w.strip_prefix("target/release/examples/").or_else(|| w.strip_prefix("target/debug/examples/"))?;
        PROGRAMS.contains(&name).then(|| name.to_string())
    };
    for (i, word) in words.iter().enumerate() {
        if let Some(name) = program_at(word) {
            return Some((name, words[i + 1..].to_vec()));
        }
        if word == "--example"
            && words.first().is_some_and(|w| w == "cargo")
            && words.get(1).is_some_and(|w| w == "run")
        {
            let name = words.get(i + 1)?.clone();
            let args = match words.iter().position(|w| w == "--") {
                Some(dash) => words[dash + 1..].to_vec(),
                None => Vec::new(),
            };
            return PROGRAMS.contains(&name.as_str()).then_some((name, args));
        }
    }
    let first = words.first()?;
    (PROGRAMS.contains(&first.as_str()) && (whole_line || words.len() > 1))
        .then(|| (first.clone(), words[1..].to_vec()))
}

fn shown_runs() -> Vec<Shown> {
    let mut runs = Vec::new();
    for (name, text) in documents() {
        for (number, line, whole_line) in code_lines(&name, &text) {
            if let Some((program, args)) = example_run(&words(&line), whole_line) {
                runs.push(Shown { place: format!("{name}:{number}"), program, args });
            }
        }
    }
    runs
}

/// Why the program would refuse `args`, or `None`.
fn refusal(program: &str, args: &[String]) -> Option<String> {
    let argv = std::iter::once(program.to_string()).chain(args.iter().cloned());
    let parsed = if program == "prepare" {
        PrepareArgs::command().try_get_matches_from(argv).map(drop)
    } else {
        let shapes: &[&str] = if program == "gpt" { &GPT_SHAPE_FLAGS } else { &[] };
        let command = shapes.iter().zip(GPT_SHAPES[0]).fold(TrainArgs::command(), |command, (long, default)| {
            let arg = clap::Arg::new(*long).long(*long).value_parser(clap::value_parser!(usize));
            command.arg(arg.default_value(default.to_string()))
        });
        command.try_get_matches_from(argv).and_then(|m| {
            let shape = || GPT_SHAPE_FLAGS.map(|long| m.get_one::<usize>(long).copied());
            if program == "gpt" && !GPT_SHAPES.iter().any(|held| held.map(Some) == shape()) {
                let shape = shape();
                let message = format!("gpt holds no shape {shape:?} (--layers, --heads, --width, --vocab)");
                return Err(clap::Error::raw(clap::error::ErrorKind::ValueValidation, message));
            }
            TrainArgs::from_matches(&m).map(drop)
        })
    };
    match parsed {
        Ok(()) => None,
        Err(e) if matches!(e.kind(), clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion) => {
            None
        }
        Err(e) => Some(e.to_string()),
    }
}

#[test]
fn every_example_run_the_documentation_shows_parses() {
    let runs = shown_runs();
    // The extraction itself: the README's runs of each kind are found.
    for (program, at_least) in [("mlp", 10), ("gpt", 2), ("prepare", 1), ("tower", 1)] {
        let found = runs.iter().filter(|r| r.program == program).count();
        assert!(found >= at_least, "{found} runs of {program} found in the documentation, expected {at_least} or more");
    }
    let refused: Vec<String> = runs
        .iter()
        .filter_map(|r| {
            refusal(&r.program, &r.args).map(|why| format!("{}: {} {}\n{why}", r.place, r.program, r.args.join(" ")))
        })
        .collect();
    assert!(refused.is_empty(), "documented command lines the programs refuse:\n{}", refused.join("\n"));
}

#[test]
fn a_misspelled_flag_or_value_is_refused() {
    // The check above can fail: a flag that does not exist and a value that does not parse.
    let args = |s: &str| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    assert!(refusal("mlp", &args("--step 10")).is_some());
    assert!(refusal("mlp", &args("--steps ten")).is_some());
    assert!(refusal("mlp", &args("--link latency=5parsecs")).is_some());
    assert!(refusal("prepare", &args("--text a.txt --out shards --steps 3")).is_some());
    assert!(refusal("gpt", &args("--text a.txt --sample 300")).is_none());
    assert!(refusal("gpt", &args("--text a.txt --layers 6 --heads 6 --width 384")).is_none());
    assert!(refusal("gpt", &args("--text a.txt --layers 6 --width 384")).is_some(), "4 heads: not compiled in");
    assert!(refusal("gpt", &args("--tokens shards --vocab 50304")).is_none());
    assert!(refusal("gpt", &args("--tokens shards --layers 6 --heads 6 --width 384 --vocab 50304")).is_some());
    assert!(refusal("gpt", &args("--layers six")).is_some());
    assert!(refusal("mlp", &args("--layers 6")).is_some());
    let found =
        example_run(&words("$ mpirun -n 2 target/release/examples/mlp --steps 3   # a comment --nothing"), true);
    assert_eq!(found, Some(("mlp".into(), args("--steps 3"))));
    let found = example_run(&words("cargo run --release --example gpt -- --text licenses.txt | tee log"), false);
    assert_eq!(found, Some(("gpt".into(), args("--text licenses.txt"))));
    assert_eq!(example_run(&words("mlp"), false), None, "a span naming the program alone is prose");
}

/// Every long flag the programs take.
fn program_flags() -> Vec<String> {
    let longs = |command: clap::Command| -> Vec<String> {
        command.get_arguments().filter_map(|a| a.get_long().map(|l| format!("--{l}"))).collect()
    };
    let mut flags = longs(TrainArgs::command());
    flags.extend(longs(PrepareArgs::command()));
    flags.extend(GPT_SHAPE_FLAGS.map(|long| format!("--{long}")));
    flags.extend(["--help", "--version"].map(str::to_string));
    flags
}

/// The sources of the project's own tools: scripts, comparisons, benchmarks, the Makefile.
fn tool_sources() -> String {
    let mut text = std::fs::read_to_string(format!("{}/Makefile", root())).unwrap();
    for folder in ["scripts", "compare", "benches"] {
        for entry in std::fs::read_dir(format!("{}/{folder}", root())).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() {
                text.push_str(&std::fs::read_to_string(&path).unwrap_or_default());
            }
        }
    }
    text
}

#[test]
fn every_flag_the_documentation_names_exists() {
    let programs = program_flags();
    let tools = tool_sources();
    let others: Vec<&str> = OTHER_TOOLS.iter().flat_map(|(_, flags)| flags.iter().copied()).collect();
    let mut unknown = Vec::new();
    for (name, text) in documents() {
        for (number, line, _) in code_lines(&name, &text) {
            for flag in flag_words(&line) {
                let known = programs.contains(&flag)
                    || others.contains(&flag.as_str())
                    || tools.contains(&format!("\"{flag}\""))
                    || tools.contains(&format!("{flag} "))
                    || tools.contains(&format!("{flag})"))
                    || tools.contains(&format!("{flag}="));
                if !known {
                    unknown.push(format!("{name}:{number}: {flag}"));
                }
            }
        }
    }
    unknown.dedup();
    assert!(unknown.is_empty(), "flags no program, script or listed tool takes:\n{}", unknown.join("\n"));
}

/// The `--long-flag` words of a line (`--steps=3` as `--steps`).
fn flag_words(line: &str) -> Vec<String> {
    line.split(|c: char| c.is_whitespace() || c == '`' || c == '(' || c == ',')
        .filter_map(|w| w.strip_prefix("--"))
        .map(|w| w.split(['=', ')', ':', '.', ';', '\'', '"']).next().unwrap_or(""))
        .filter(|w| w.starts_with(|c: char| c.is_ascii_lowercase()))
        .map(|w| format!("--{w}"))
        .collect()
}
