use super::*;
use crate::bucket::plan_buckets;
use crate::limits::BucketLimits;
use crate::spec::Width;

/// A profile `--write-profile` wrote (the one `examples/uneven.rs` plans from).
const WRITTEN: &str = include_str!("../../../examples/profiles/uneven.json");

fn layers() -> Vec<LayerSpec> {
    vec![
        LayerSpec::new("fc", "Linear<4, 8>", Width::Fixed { input: 4, output: 8 }).with_param("weight", &[8, 4]),
        LayerSpec::new("act", "Relu", Width::Preserving),
    ]
}

fn profile() -> Profile {
    let schedule = plan_buckets("M", &layers(), &BucketLimits::default()).unwrap();
    let costs = StepCosts { forward_s: vec![1e-3, 2e-5], backward_s: vec![2e-3, 3e-5], update_s_per_byte: 1e-10 };
    Profile::measured(&schedule, &costs, 2, 64, Some(Link { latency_s: 1e-6, bandwidth_bytes_per_s: 25e9 }))
}

#[test]
fn a_written_profile_reads_back_and_writes_the_same_text() {
    let read = Profile::from_json(WRITTEN).unwrap();
    assert_eq!(
        (read.model.as_str(), read.world_size, read.batch, read.layers.len()),
        ("UnevenDdp", Some(2), Some(256), 15)
    );
    assert_eq!(read.to_json(), WRITTEN);
    let p = profile();
    assert_eq!(Profile::from_json(&p.to_json()).unwrap(), p);
    assert!(p.to_json().starts_with("{\n  \"format\": \"overlap-profile/1\",\n  \"model\": \"M\","), "{}", p.to_json());
}

#[test]
fn other_formats_and_other_shapes_are_refused() {
    let other = WRITTEN.replace("overlap-profile/1", "overlap-profile/2");
    assert_eq!(
        Profile::from_json(&other).unwrap_err(),
        "format is \"overlap-profile/2\", expected \"overlap-profile/1\""
    );
    assert!(Profile::from_json("{}").unwrap_err().starts_with("format is missing"));
    assert!(Profile::from_json("{").unwrap_err().starts_with("not JSON"));
    let no_layers = r#"{"format": "overlap-profile/1", "update_s_per_byte": 0.0}"#;
    assert!(Profile::from_json(no_layers).unwrap_err().contains("missing field `layers`"));
    // A misspelt key, or one given twice, is refused, not dropped or overridden unseen.
    let misspelt = WRITTEN.replace("\"world_size\"", "\"wrld_size\"");
    assert!(Profile::from_json(&misspelt).unwrap_err().contains("unknown field `wrld_size`"));
    let layer_typo = WRITTEN.replacen("\"forward_s\"", "\"forwrd_s\"", 1);
    assert!(Profile::from_json(&layer_typo).unwrap_err().contains("unknown field `forwrd_s`"));
    let twice = WRITTEN.replacen("\"batch\": 256,", "\"batch\": 256, \"batch\": 1,", 1);
    assert!(Profile::from_json(&twice).unwrap_err().contains("duplicate field `batch`"), "{twice}");
    // What a hand-written profile may leave out.
    let minimal = r#"{"format": "overlap-profile/1", "update_s_per_byte": 0.0, "layers": []}"#;
    let p = Profile::from_json(minimal).unwrap();
    assert_eq!((p.world_size, p.link, p.batch, p.model.as_str()), (None, None, None, ""));
}

#[test]
fn the_target_is_the_measured_costs_on_the_run_s_cluster_unless_overridden() {
    let p = profile();
    let t = p.target(&layers(), None, None).unwrap();
    assert_eq!((t.costs.forward_s.clone(), t.world, t.link), (vec![1e-3, 2e-5], 2, p.link.unwrap()));
    let link = Link { latency_s: 0.0, bandwidth_bytes_per_s: 1e9 };
    let t = p.target(&layers(), Some(link), Some(64)).unwrap();
    assert_eq!((t.world, t.link), (64, link));
    let unknown = Profile { world_size: None, link: None, ..p };
    let problems = unknown.target(&layers(), None, None).unwrap_err();
    assert!(problems.contains("no world size") && problems.contains("emulated no link"), "{problems}");
    assert!(unknown.target(&layers(), Some(link), Some(4)).is_ok());
}

#[test]
fn a_profile_of_other_layers_or_impossible_times_lists_every_problem() {
    let mut p = profile();
    p.layers[1].name = "gelu".into();
    p.layers[0].backward_s = -1.0;
    p.update_s_per_byte = f64::NAN;
    let problems = p.target(&layers(), None, None).unwrap_err();
    assert_eq!(
        problems,
        "layers[0].backward_s is -1, expected a non-negative number; layer 1 is \"gelu\", the model's is `act`; \
         update_s_per_byte is NaN, expected a non-negative number"
    );
    let mut no_link = profile();
    no_link.link = Some(Link { latency_s: 0.0, bandwidth_bytes_per_s: 0.0 });
    let problems = no_link.target(&layers(), None, None).unwrap_err();
    assert_eq!(problems, "link.bandwidth_bytes_per_s is 0, expected at least 1 (1 byte per second)");
    let problems = profile().target(&layers()[..1], None, None).unwrap_err();
    assert_eq!(problems, "it has 2 layers, the model has 1");
}

#[test]
fn times_a_step_cannot_take_and_clusters_beyond_what_runs_are_refused() {
    // Each finite, but their sums would not be: the predictions would print `inf` and `NaN`.
    let mut p = profile();
    p.layers[0].forward_s = 1e308;
    p.layers[1].backward_s = 86_401.0;
    p.update_s_per_byte = 2.0;
    p.link = Some(Link { latency_s: 1e300, bandwidth_bytes_per_s: 25e9 });
    p.world_size = Some(usize::MAX);
    let problems = p.target(&layers(), None, None).unwrap_err();
    assert_eq!(
        problems,
        "layers[0].forward_s is 1e308, expected at most 86400; \
         layers[1].backward_s is 86401, expected at most 86400; update_s_per_byte is 2, expected at most 1; \
         link.latency_s is 1e300, expected at most 3600; \
         world_size is 18446744073709551615, expected at most 16777216"
    );
    let mut edge = profile();
    edge.layers[0].forward_s = 86_400.0;
    edge.world_size = Some(crate::simulate::MAX_WORLD);
    edge.link = Some(Link { latency_s: 3600.0, bandwidth_bytes_per_s: 1.0 });
    let t = edge.target(&layers(), None, None).unwrap();
    assert_eq!((t.world, t.costs.forward_s[0]), (crate::simulate::MAX_WORLD, 86_400.0));
}
