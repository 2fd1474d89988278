//! No import cycles between the source files of any crate of the workspace: a file that imports
//! another is never imported back by it, directly or through others. Two files in a cycle are
//! one concept split in two, or two concepts each reaching into the other; either way neither
//! can be read, changed or tested without the other. What counts as an import is in `scan`.

mod graph;
mod scan;

use std::path::Path;

/// The folders of the workspace's packages: the root package and each `members` entry of the
/// root `Cargo.toml`, so that a new crate is checked without being listed here.
fn packages(root: &Path) -> Vec<String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("the root Cargo.toml");
    let members = manifest.lines().find_map(|l| l.trim().strip_prefix("members")).expect("a members list");
    let mut out = vec![".".to_string()];
    out.extend(members.split('"').skip(1).step_by(2).map(str::to_string));
    out
}

#[test]
fn no_file_imports_a_file_that_imports_it_back() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let packages = packages(root);
    assert!(packages.len() > 4, "the workspace's packages: {packages:?}");
    let mut cycles = Vec::new();
    for package in packages {
        let graph = scan::crate_graph(&root.join(&package).join("src"), root);
        cycles.extend(graph.cycles().iter().map(|c| graph.describe(c)));
    }
    assert!(cycles.is_empty(), "import cycles between files:\n  {}", cycles.join("\n  "));
}

/// The training loop drives the devices and the devices implement the loop's step contract: the
/// contract and a run's settings sit below both (`backend.rs`, `config.rs`), so that neither
/// folder imports the other back, through any of their files.
#[test]
fn the_training_loop_and_the_devices_do_not_import_each_other() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = scan::crate_graph(&root.join("runtime/src"), root);
    let folders = files.grouped(|name| {
        ["runtime/src/train/", "runtime/src/cuda/"].iter().find(|f| name.starts_with(**f)).map(|f| f.to_string())
    });
    let cycles: Vec<String> = folders.cycles().iter().map(|c| folders.describe(c)).collect();
    assert!(cycles.is_empty(), "train/ and cuda/ import each other:\n  {}", cycles.join("\n  "));
}

/// A crate of `files` (path under `src/`, contents), written to a temporary folder: the cycles
/// the scan finds in it, described.
fn cycles_in(files: &[(&str, &str)]) -> Vec<String> {
    let dir = tempfile::tempdir().expect("a temporary folder");
    for (path, text) in files {
        let path = dir.path().join("src").join(path);
        std::fs::create_dir_all(path.parent().expect("in src")).expect("the folder");
        std::fs::write(&path, text).expect("the file");
    }
    let graph = scan::crate_graph(&dir.path().join("src"), dir.path());
    graph.cycles().iter().map(|c| graph.describe(c)).collect()
}

#[test]
fn a_cycle_through_a_use_a_path_in_code_and_a_macro_is_found() {
    let cycles = cycles_in(&[
        ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
        ("a.rs", "use crate::b::Thing;\npub fn h() {}\n"),
        ("b.rs", "pub struct Thing;\npub fn f() { super::c::g() }\n"),
        ("c.rs", "pub fn g() { println!(\"{:?}\", crate::a::h()) }\n"),
    ]);
    assert_eq!(cycles, ["src/a.rs -> src/b.rs (crate::b::Thing) -> src/c.rs (super::c::g) -> src/a.rs (crate::a::h)"]);
}

#[test]
fn a_path_inside_an_attribute_is_an_import() {
    // As `thiserror`'s `#[error(...)]` calling a function of a module that uses the error.
    let error = "#[derive(Debug)]\npub enum Error {\n    #[error(\"stopped by {}\", crate::train::signal_name(*signal))]\n    Stopped { signal: i32 },\n}\n";
    let train = "use crate::error::Error;\npub fn signal_name(s: i32) -> String { s.to_string() }\npub fn fit() -> Result<(), Error> { Ok(()) }\n";
    assert_eq!(
        cycles_in(&[("lib.rs", "mod error;\nmod train;\n"), ("error.rs", error), ("train.rs", train)]),
        ["src/error.rs -> src/train.rs (crate::train::signal_name) -> src/error.rs (crate::error::Error)"]
    );
}

#[test]
fn a_parent_and_a_child_that_uses_it_are_a_cycle_once_the_parent_imports_the_child() {
    let parent = "mod child;\npub struct Shared;\npub fn f(child: u8) -> u8 { child + 1 }\n";
    let child = "use super::Shared;\npub struct Own;\n";
    // Declaring the child is no import, nor is a local named like it: no cycle.
    assert!(cycles_in(&[("lib.rs", "mod comm;\n"), ("comm/mod.rs", parent), ("comm/child.rs", child)]).is_empty());
    // Re-exporting from it is.
    let parent = "mod child;\npub use child::Own;\npub struct Shared;\n";
    assert_eq!(
        cycles_in(&[("lib.rs", "mod comm;\n"), ("comm/mod.rs", parent), ("comm/child.rs", child)]),
        ["src/comm/child.rs -> src/comm/mod.rs (super::Shared) -> src/comm/child.rs (child::Own)"]
    );
}

#[test]
fn inline_modules_visibilities_and_other_crates_are_no_imports() {
    let cycles = cycles_in(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        ("a.rs", "pub(crate) mod inner { pub(in crate::a) fn f() {} }\nuse crate::b::g;\n"),
        // `super` in an inline module is the file; `pub(in crate::a)` and `std::` reach nothing.
        ("b.rs", "pub fn g() {}\npub(in crate::b) fn v() {}\n#[cfg(test)]\nmod tests {\n    use super::*;\n    use std::fmt;\n}\n"),
    ]);
    assert!(cycles.is_empty(), "{cycles:?}");
    // The same `b.rs` naming `crate::a` from its inline module is a cycle.
    let cycles = cycles_in(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        ("a.rs", "use crate::b::g;\n"),
        ("b.rs", "pub fn g() {}\nmod tests {\n    fn t() { let _ = crate::a::X; }\n}\n"),
    ]);
    assert_eq!(cycles.len(), 1, "{cycles:?}");
}

#[test]
fn a_path_lands_in_the_deepest_module_that_exists() {
    // `crate::x::y::Z` is in x/y.rs, not x.rs: x.rs importing y (re-export) is no cycle with
    // a file that imports x/y.rs only.
    let cycles = cycles_in(&[
        ("lib.rs", "mod w;\nmod x;\n"),
        ("x.rs", "mod y;\npub use y::Z;\npub fn uses_w() { crate::w::f() }\n"),
        ("x/y.rs", "pub struct Z;\n"),
        ("w.rs", "pub fn f() { let _ = crate::x::y::Z; }\n"),
    ]);
    assert!(cycles.is_empty(), "{cycles:?}");
    // Through x itself, it is one.
    let cycles = cycles_in(&[
        ("lib.rs", "mod w;\nmod x;\n"),
        ("x.rs", "mod y;\npub use y::Z;\npub fn uses_w() { crate::w::f() }\n"),
        ("x/y.rs", "pub struct Z;\n"),
        ("w.rs", "pub fn f() { let _ = crate::x::Z; }\n"),
    ]);
    assert_eq!(cycles, ["src/w.rs -> src/x.rs (crate::x::Z) -> src/w.rs (crate::w::f)"]);
}
