//! Compile-fail tests for `#[distributed_model]`: each `tests/ui/*.rs` is a program the macro
//! (or the ownership contract of the code it emits) must reject, and the matching `.stderr` is
//! the exact diagnostic, spans included. Regenerate with `TRYBUILD=overwrite cargo test --test ui`.
//! Each `tests/ui/pass/*.rs` is an unusual but valid input that must compile and run.

#[test]
fn ui() {
    // trybuild builds the whole dependency tree again in a project of its own, at the default
    // profile's full debug info, which no diagnostic reads: without it the build is 30 s shorter.
    // (The only test in this binary: nothing else reads the environment meanwhile.)
    std::env::set_var("CARGO_PROFILE_DEV_DEBUG", "0");
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
    t.pass("tests/ui/pass/*.rs");
}
