//! The all-gathers of sharded optimizer state in the expansion of every model (without PowerSGD
//! buckets): their launches at the end of backward, in the order forward reads them, and their
//! wait points in `forward_gathering_on`, each right before the first layer that reads its
//! bucket. `shard_optimizer` only makes sharding the model's default.

use quote::quote;

use super::tests::{function, mlp_with};

fn mlp_zero() -> String {
    mlp_with(quote!(shard_optimizer, bucket_cap_mb = 8, first_bucket_mb = 1))
}

/// The statements of `body` that launch, wait for or read, in order, flattened to one line each.
fn gather_events(body: &str) -> Vec<String> {
    let flat = body.split_whitespace().collect::<Vec<_>>().join(" ").replace(" .", ".").replace("( ", "(");
    flat.split(';')
        .filter_map(|s| {
            let s = s.trim();
            let call =
                |name: &str| s.split_once(name).map(|(_, args)| args.split([',', ')']).next().unwrap_or("").trim());
            if let Some((_, args)) = s.split_once("dev.launch_gather(") {
                let args: Vec<&str> = args.trim_end_matches(")?").split(',').map(str::trim).collect();
                Some(format!("launch_gather {} b{} {}", args[0], args[1], args.get(2).unwrap_or(&"")))
            } else if let Some(index) = call("gather.wait_gather(") {
                Some(format!("wait_gather {index}"))
            } else if s.contains("dev.launch(") {
                Some("launch".into())
            } else if s.contains("dev.backward_done()") {
                Some("backward_done".into())
            } else {
                s.split_once("dev.forward(").map(|(_, args)| {
                    let layer = args.split("&self.").nth(1).and_then(|r| r.split(',').next()).unwrap_or("");
                    format!("forward {layer}")
                })
            }
        })
        .collect()
}

#[test]
fn mlp_zero_expansion_snapshot() {
    expect_test::expect_file!["../../tests/expand/mlp_zero.expanded.rs"].assert_eq(&mlp_zero());
}

#[test]
fn the_all_gathers_are_launched_after_the_last_reduce_scatter_in_forward_order() {
    let code = mlp_zero();
    let events = gather_events(function(&code, "backward_on"));
    let tail: Vec<&str> = events.iter().rev().take(5).rev().map(String::as_str).collect();
    let want = [
        "launch",
        "launch_gather 0 b2 0..1607680",
        "launch_gather 1 b1 0..4196352",
        "launch_gather 2 b0 0..4216842",
        "backward_done",
    ];
    assert_eq!(tail, want);
    assert_eq!(events.iter().filter(|e| e.starts_with("launch_gather")).count(), 3);
}

#[test]
fn forward_waits_for_each_all_gather_right_before_the_first_layer_that_reads_it() {
    let code = mlp_zero();
    let events = gather_events(function(&code, "forward_gathering_on"));
    let want = [
        "wait_gather 0",
        "forward fc1",
        "forward act1",
        "wait_gather 1",
        "forward fc2",
        "forward act2",
        "wait_gather 2",
        "forward fc3",
        "forward act3",
        "forward head",
    ];
    assert_eq!(events, want);
}

#[test]
fn a_model_without_shard_optimizer_has_the_same_gather_points() {
    let (plain, zero) = (mlp_with(quote!(bucket_cap_mb = 8, first_bucket_mb = 1)), mlp_zero());
    for f in ["backward_on", "forward_gathering_on"] {
        assert_eq!(gather_events(function(&plain, f)), gather_events(function(&zero, f)), "{f}");
    }
}

#[test]
fn a_model_with_powersgd_buckets_gathers_its_other_buckets_only() {
    let code = mlp_with(quote!(bucket_cap_mb = 8, first_bucket_mb = 1, grad_comm = powersgd(rank = 2)));
    let launched = gather_events(function(&code, "backward_on"));
    let waited = gather_events(function(&code, "forward_gathering_on"));
    let (launched, waited) = (
        launched.iter().filter(|e| e.starts_with("launch_gather")).count(),
        waited.iter().filter(|e| e.starts_with("wait_gather")).count(),
    );
    assert!(code.contains("launch_low_rank"), "some bucket is PowerSGD's");
    assert!(launched == waited && launched < 3, "{launched} launched, {waited} waited for");
}

/// A grouping other than the buckets' (as a cost model chooses it: `choose_gathers`): one
/// bucket gathered in one piece per layer, each launched in forward order and waited for right
/// before its layer.
#[test]
fn a_bucket_gathered_by_layer_is_launched_and_waited_for_piece_by_piece() {
    let item: syn::ItemStruct = syn::parse_quote! {
        pub struct Two { fc1: Linear<4, 8>, act: Relu, fc2: Linear<8, 4> }
    };
    let mut errors = crate::errors::Errors::default();
    let model = crate::ast::Model::from_struct(&item, &mut errors);
    let mut schedule =
        overlap_plan::plan_buckets("Two", &model.specs(), &overlap_plan::BucketLimits::Unlimited).unwrap();
    schedule.gathers = std::borrow::Cow::Owned(overlap_plan::gathers_per_layer(&schedule));
    let planned = crate::planning::Planned { schedule, notes: vec![], input_file: None, target: None };
    let code = super::tests::pretty(super::emit::emit(&model, &planned));
    let launches = gather_events(function(&code, "backward_on"));
    let launches: Vec<&str> = launches.iter().filter(|e| e.starts_with("launch_gather")).map(String::as_str).collect();
    assert_eq!(launches, ["launch_gather 0 b0 36..76", "launch_gather 1 b0 0..36"]);
    let waits = gather_events(function(&code, "forward_gathering_on"));
    assert_eq!(waits, ["wait_gather 0", "forward fc1", "forward act", "wait_gather 1", "forward fc2"]);
    assert!(code.contains("all-gathers of sharded state, in launch order: b0[36..76] before fc1, b0[0..36] before fc2"));
}

#[test]
fn a_plan_chosen_for_sharded_state_is_planned_and_predicted_as_such() {
    let chosen = mlp_with(quote!(shard_optimizer, buckets = auto(link = "ib-hdr", world = 8)));
    let note = "for sharded optimizer state:";
    assert!(chosen.contains(note) && chosen.contains("PLAN_NOTES"), "the note, in the doc comment and PLAN_NOTES");
    let whole = mlp_with(quote!(buckets = auto(link = "ib-hdr", world = 8)));
    assert!(!whole.contains(note) && whole.contains("PLAN_NOTES"));
}
