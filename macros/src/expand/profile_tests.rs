//! `buckets = profile("...")`: what the macro reads from a profile file, and what it refuses to.

use quote::quote;

/// The errors of a model of two layers planned from the profile file `text`.
fn errors_planning_from(text: &str) -> String {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let file = dir.path().join("profile.json");
    std::fs::write(&file, text).expect("the profile written");
    errors_planning_at(file.to_str().expect("a UTF-8 path"))
}

/// The errors of a model of two layers planned from the profile at `path`.
fn errors_planning_at(path: &str) -> String {
    let item = quote!(
        pub struct Net {
            fc: Linear<8, 4>,
            head: Linear<4, 2>,
        }
    );
    super::expand(quote!(buckets = profile(#path)), item).to_string()
}

#[test]
fn a_file_that_is_no_profile_is_named_as_such() {
    for text in ["", "{}", "[1, 2]", r#"{"format": "overlap-profile/1"}"#] {
        let errors = errors_planning_from(text);
        assert!(errors.contains("is not a profile"), "{text:?}: {errors}");
    }
}

#[test]
fn what_is_no_regular_file_is_refused_unopened() {
    for path in ["/dev/zero", "/dev/null", "/"] {
        let errors = errors_planning_at(path);
        assert!(errors.contains("is not a regular file"), "{path}: {errors}");
    }
    let large = format!("{{\"format\": \"overlap-profile/1\", \"model\": \"{}\"}}", "x".repeat(17 << 20));
    let errors = errors_planning_from(&large);
    assert!(errors.contains("a profile is at most 16 MiB"), "{}", &errors[..200.min(errors.len())]);
}

#[test]
fn another_models_profile_is_refused_naming_what_differs() {
    let uneven = include_str!("../../../examples/profiles/uneven.json");
    let errors = errors_planning_from(uneven);
    assert!(errors.contains("does not fit this model"), "{errors}");
    assert!(errors.contains("embed"), "names a layer the model does not have: {errors}");
}

#[test]
fn a_profile_of_this_model_plans_it() {
    let text = r#"{"format": "overlap-profile/1", "model": "Net", "world_size": 2, "batch": 64,
        "link": {"latency_s": 5e-6, "bandwidth_bytes_per_s": 1e9}, "update_s_per_byte": 1e-10,
        "layers": [{"name": "fc", "forward_s": 1e-4, "backward_s": 2e-4},
                   {"name": "head", "forward_s": 1e-5, "backward_s": 2e-5}]}"#;
    let expansion = errors_planning_from(text);
    assert!(!expansion.contains("compile_error"), "{expansion}");
}
