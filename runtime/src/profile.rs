//! What a run measured about its own layers, turned into predictions: the profile file that
//! `buckets = profile("...")` plans from (`--write-profile`; the format is `overlap_plan::Profile`,
//! which the macro reads back), and the predicted step of this model on clusters we do not have,
//! for the compiled plan and the alternatives (`--simulate`).

mod cluster;
mod shown;

use std::path::Path;

use overlap_plan::{
    gathers_per_layer, plan_auto, plan_auto_sharded, plan_buckets, plan_buckets_in, sharded_step, sim_buckets,
    simulate, simulate_sharded, BucketLimits, BucketOrder, GradComm, LayerSpec, Link, Prediction, Profile, Schedule,
    SimSharding, StepCosts, Strategy, Target, WireFormat, DEFAULT_BUCKET_CAP_MB, MIB,
};

use crate::error::{Error, Result};
use crate::process::atomic_write::write_atomically;
use crate::trace::{median, StepBreakdown};
pub use cluster::Cluster;
pub use shown::{prediction_json, prediction_table};

/// Per-layer times over the measured steps (the run's first, `warm_up`, left out when there are
/// others: a report's window of later steps keeps all of its own): in each step the slowest
/// rank's time, since every rank waits for it at the next collective; then the median over
/// steps. `None` without a complete step.
pub fn measured_costs(breakdowns: &[StepBreakdown], schedule: &Schedule, warm_up: u64) -> Option<StepCosts> {
    let mut steps: Vec<&[StepBreakdown]> = breakdowns.chunk_by(|a, b| a.step == b.step).collect();
    if steps.is_empty() {
        return None;
    }
    if steps.len() > 1 {
        steps.retain(|s| s[0].step != warm_up);
    }
    let slowest = |f: &dyn Fn(&StepBreakdown) -> u64| -> f64 {
        median(steps.iter().map(|s| s.iter().map(f).max().unwrap_or(0) as f64 / 1e9))
    };
    let layers = schedule.layers.len();
    let bytes = schedule.total_bytes().max(1) as f64;
    Some(StepCosts {
        forward_s: (0..layers).map(|i| slowest(&|b| b.layer_forward_ns.get(i).copied().unwrap_or(0))).collect(),
        backward_s: (0..layers).map(|i| slowest(&|b| b.layer_backward_ns.get(i).copied().unwrap_or(0))).collect(),
        // Updates lent to the all-reduces run inside them (timed per bucket, `updates_ns`, for
        // the bus bandwidth); for them the simulator keeps the default rate, with which its
        // predictions were checked against emulated runs.
        update_s_per_byte: match slowest(&|b| b.update_ns) / bytes {
            0.0 => overlap_plan::DEFAULT_UPDATE_S_PER_BYTE,
            measured => measured,
        },
    })
}

/// Writes `costs` as a profile; `batch` is samples per rank per step.
pub fn write_profile(
    path: &Path,
    schedule: &Schedule,
    costs: &StepCosts,
    world_size: usize,
    batch: usize,
    link: Option<Link>,
) -> Result<()> {
    let json = Profile::measured(schedule, costs, world_size, batch, link).to_json();
    write_atomically(path, |out| out.write_all(json.as_bytes()), || {})
        .map_err(|source| Error::Io { path: path.to_path_buf(), source })
}

/// How a run keeps its optimizer state, as the simulator runs it: whole, or (`sharded`) with
/// the all-gathers where the generated code puts them, in the next forward.
pub fn sim_sharding(sharded: bool) -> SimSharding {
    if sharded {
        SimSharding::GatherInForward
    } else {
        SimSharding::Whole
    }
}

/// The compiled plan and the alternatives, each simulated on `cluster` with `costs`; the
/// compiled plan with the optimizer state kept as the run keeps it (`sharding`), and kept the
/// other way.
pub fn predictions(
    schedule: &Schedule,
    costs: &StepCosts,
    cluster: Cluster,
    sharding: SimSharding,
) -> Vec<(String, usize, Prediction)> {
    let target = Target { costs: costs.clone(), link: cluster.link, world: cluster.world };
    let sim = |s: &Schedule| simulate(&sim_buckets(s), costs, &cluster.link, cluster.world, true);
    let as_run = |s: &Schedule, overlap: bool, sharding: SimSharding| {
        let link = (&cluster.link, cluster.world);
        simulate_sharded(&sim_buckets(s), &s.gather_groups(), costs, link, overlap, sharding)
    };
    let specs = schedule.layer_specs();
    let n = schedule.buckets.len();
    let mut out = vec![
        ("compiled (this binary)".to_string(), n, as_run(schedule, true, sharding)),
        ("compiled, no overlap".to_string(), n, as_run(schedule, false, sharding)),
    ];
    // The other ways to keep the state, for the cost or gain of sharding on this cluster.
    let others = match sharding {
        SimSharding::Whole => [(SimSharding::GatherInForward, "compiled, sharded state (ZeRO-1)")],
        _ => [(SimSharding::Whole, "compiled, whole optimizer state")],
    };
    let inside = (SimSharding::GatherHere, "compiled, sharded, all-gathers inside the step");
    if schedule.buckets.iter().all(|b| b.low_rank.is_none()) {
        for (other, name) in others.into_iter().chain([inside]) {
            out.push((name.to_string(), n, as_run(schedule, true, other)));
        }
        // What `gathers = per_layer` would do here.
        let by_layer = gathers_per_layer(schedule);
        if by_layer != schedule.gather_groups() {
            let split = Schedule { gathers: std::borrow::Cow::Owned(by_layer), ..schedule.clone() };
            let row = "compiled, sharded, all-gathers per layer".to_string();
            out.push((row, n, as_run(&split, true, SimSharding::GatherInForward)));
        }
    }
    if schedule.narrows() {
        // The gain of the narrow formats on this cluster: the same buckets in FP32.
        let fp32 = schedule.clone().with_wire(WireFormat::Fp32);
        out.push(("compiled, FP32 on the wire".to_string(), fp32.buckets.len(), sim(&fp32)));
    }
    // The alternatives send in the compiled format (when one for all), so that they differ in
    // their buckets only.
    let first = schedule.buckets.first().map(|b| (b.wire, b.low_rank));
    let compiled = first.filter(|&f| schedule.buckets.iter().all(|b| (b.wire, b.low_rank) == f)).map(|f| match f {
        (_, Some(low_rank)) => GradComm::LowRank(low_rank),
        (wire, None) => GradComm::Format(wire),
    });
    // Auto and MG-WFBP choose their boundaries for that format (FP32 where the buckets differ),
    // and keep those the model forces (`#[bucket_boundary]`), as `buckets = auto(..)` would; DDP
    // knows no such boundaries.
    let chosen_for = compiled.unwrap_or(GradComm::Format(WireFormat::Fp32));
    let per_layer: Vec<LayerSpec> =
        specs.iter().map(|l| LayerSpec { bucket_boundary: !l.params.is_empty(), ..l.clone() }).collect();
    // Each alternative's buckets, predicted with the state kept whole; the auto plan's, kept as
    // the run keeps it: sharded state is its own plan, as the macro plans it.
    let whole = |plan: Schedule| (plan.buckets.len(), sim(&plan.with_grad_comm(chosen_for)));
    let auto = if sharding == SimSharding::Whole {
        let plan = plan_auto(&schedule.model, &specs, &target, Strategy::Optimal, chosen_for);
        ("auto (optimal for this cluster)", plan.ok().map(|p| whole(p.0)))
    } else {
        let plan = plan_auto_sharded(&schedule.model, &specs, &target, chosen_for);
        let predicted = plan.ok().map(|(p, _)| (p.buckets.len(), sharded_step(&p, &target, chosen_for)));
        ("auto (optimal for this cluster, sharded state)", predicted)
    };
    let mg_wfbp = plan_auto(&schedule.model, &specs, &target, Strategy::MgWfbp, chosen_for).ok();
    let each_layer = plan_buckets(&schedule.model, &per_layer, &BucketLimits::Unlimited).ok();
    let alternatives =
        ddp_layouts(schedule, &schedule.layer_specs_for_ddp()).into_iter().map(|(name, plan)| (name, plan.map(whole)));
    out.extend(
        alternatives
            .chain([
                (auto.0.to_string(), auto.1),
                ("MG-WFBP merge rule".to_string(), mg_wfbp.map(|p| whole(p.0))),
                ("one bucket per layer".to_string(), each_layer.map(whole)),
            ])
            .filter_map(|(name, predicted)| predicted.map(|(buckets, p)| (name, buckets, p))),
    );
    out
}

/// The layouts PyTorch DDP (2.3 and later) runs for this model, as `compare/ready_order.py`
/// observes them: with default arguments, one bucket in the first iteration (since 1.12), then
/// the rebuilt buckets in ready order, the first at 1 MiB and the rest at 25 MiB; with
/// `bucket_cap_mb` given, the rebuilt first bucket at that cap too (since 2.3, PR #121640);
/// with `find_unused_parameters=True`, a first iteration in definition order with the small
/// first bucket launched last (what `bucket_order = ddp_first_iteration` compiles).
fn ddp_layouts(schedule: &Schedule, specs: &[LayerSpec]) -> Vec<(String, Option<Schedule>)> {
    let model = &schedule.model;
    let defaults = BucketLimits::default();
    let mut rows = vec![
        ("DDP defaults, rebuilt (1 MiB, then 25 MiB)".to_string(), plan_buckets(model, specs, &defaults).ok()),
        ("DDP defaults, step 1 (one bucket)".to_string(), plan_buckets(model, specs, &BucketLimits::Unlimited).ok()),
    ];
    if let BucketLimits::Capped { bucket_cap_bytes: cap, .. } = schedule.limits {
        if cap != DEFAULT_BUCKET_CAP_MB * MIB {
            let explicit = BucketLimits::Capped { first_bucket_bytes: cap, bucket_cap_bytes: cap };
            // Four significant digits: the cap in bytes, in MiB, is rarely a short decimal.
            let mb: f64 = format!("{:.3e}", cap as f64 / MIB as f64).parse().unwrap_or(0.0);
            rows.push((
                format!("DDP bucket_cap_mb={mb}, rebuilt (first too)"),
                plan_buckets(model, specs, &explicit).ok(),
            ));
        }
    }
    rows.push((
        "DDP find_unused_parameters, step 1".to_string(),
        plan_buckets_in(model, specs, &defaults, BucketOrder::DdpFirstIteration).ok(),
    ));
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prediction_columns_stay_apart_however_wide_their_numbers() {
        let cluster: Cluster = "world=16777216,link=latency=3600s,bandwidth=1B/s".parse().unwrap();
        let huge = Prediction {
            step_s: 3.3e12,
            forward_s: 1e-3,
            backward_s: 2e-3,
            update_s: 0.0,
            comm_s: 3.3e12,
            exposed_s: 3.3e12,
            all_gather_s: 0.0,
            gather_exposed_s: 0.0,
            buckets: Vec::new(),
        };
        let table = prediction_table("M", cluster, &[("compiled".to_string(), 3, huge)]);
        let row = table.lines().last().unwrap();
        assert_eq!(row.split_whitespace().count(), 6, "{table}");
    }

    #[test]
    fn an_explicit_caps_row_shows_it_in_four_digits() {
        let specs = vec![LayerSpec::new("fc", "Linear", overlap_plan::Width::Fixed { input: 2, output: 2 })
            .with_param("weight", &[2, 2])];
        // A cap of 0.01 MB in the attribute is 10486 bytes: 0.010000228881835938 MiB.
        let limits = BucketLimits::Capped { first_bucket_bytes: 10486, bucket_cap_bytes: 10486 };
        let schedule = plan_buckets("M", &specs, &limits).unwrap();
        let labels: Vec<String> = ddp_layouts(&schedule, &specs).into_iter().map(|(label, _)| label).collect();
        assert!(labels.contains(&"DDP bucket_cap_mb=0.01, rebuilt (first too)".to_string()), "{labels:?}");
    }

    #[test]
    fn the_runs_first_step_is_left_out_and_a_later_windows_first_kept() {
        let specs = vec![LayerSpec::new("fc", "Linear", overlap_plan::Width::Fixed { input: 2, output: 2 })
            .with_param("weight", &[2, 2])];
        let schedule = plan_buckets("M", &specs, &BucketLimits::Unlimited).unwrap();
        let step = |step: u64, forward_ms: u64| StepBreakdown {
            step,
            layer_forward_ns: vec![forward_ms * 1_000_000],
            layer_backward_ns: vec![0],
            ..StepBreakdown::default()
        };
        let run = [step(0, 90), step(1, 10)];
        assert_eq!(measured_costs(&run, &schedule, 0).unwrap().forward_s, [0.010], "the warm-up left out");
        let window = [step(100, 10), step(101, 30)];
        assert_eq!(measured_costs(&window, &schedule, 0).unwrap().forward_s, [0.020], "both steps kept");
    }

    #[test]
    fn clusters_parse_with_presets_and_explicit_links() {
        let c: Cluster = "world=64,link=ib-ndr".parse().unwrap();
        assert_eq!((c.world, c.link), (64, Link::preset("ib-ndr").unwrap()));
        let c: Cluster = "world=8,link=latency=5us,bandwidth=25GB/s".parse().unwrap();
        assert!((c.link.bandwidth_bytes_per_s - 25e9).abs() < 1.0);
        let spaced: Cluster = " world=8, link=latency=5us, bandwidth=25GB/s".parse().unwrap();
        assert_eq!((spaced.world, spaced.link), (c.world, c.link));
        for bad in ["world=0,link=ib-hdr", "link=ib-hdr", "world=8", "world=x,link=ib-hdr", "world=8,link=token-ring"] {
            assert!(bad.parse::<Cluster>().is_err(), "{bad}");
        }
        // A program returning `overlap::Result` parses with `?`.
        let parsed = || -> Result<Cluster> { Ok("world=x,link=ib-hdr".parse::<Cluster>()?) };
        assert!(matches!(parsed(), Err(Error::Config(m)) if m.starts_with("world `x`")));
        assert_eq!(
            "world=8".parse::<Cluster>().unwrap_err().to_string(),
            "`world=8` names no link: expected `world=<ranks>,link=<preset or latency=..,bandwidth=..>`, e.g. \
             world=64,link=ib-ndr"
        );
        let twice = "world=64,link=ib-ndr,world=3".parse::<Cluster>().unwrap_err().0;
        assert!(
            twice.starts_with("link `ib-ndr,world=3`: ") && twice.ends_with("(world= comes first, link= last)"),
            "{twice}"
        );
    }

    /// A layer `name` of an `input` by `output` weight.
    fn linear(name: &'static str, input: usize, output: usize) -> LayerSpec {
        LayerSpec::new(name, "Linear", overlap_plan::Width::Fixed { input, output })
            .with_param("weight", &[output, input])
            .with_flops(2 * (input * output) as u64)
    }

    #[test]
    fn the_compiled_plan_is_predicted_with_its_optimizer_state_kept_both_ways() {
        let specs = vec![linear("fc1", 256, 512), linear("fc2", 512, 512)];
        let limits = BucketLimits::Capped { first_bucket_bytes: 1, bucket_cap_bytes: 1 };
        let schedule = plan_buckets("M", &specs, &limits).unwrap();
        let costs = StepCosts { forward_s: vec![1e-3; 2], backward_s: vec![2e-3; 2], update_s_per_byte: 1e-10 };
        let cluster: Cluster = "world=8,link=10gbe".parse().unwrap();
        let row = |rows: &[(String, usize, Prediction)], name: &str| {
            rows.iter().find(|r| r.0 == name).map(|r| r.2.clone()).unwrap_or_else(|| panic!("no row {name}"))
        };
        let sharded = predictions(&schedule, &costs, cluster, sim_sharding(true));
        let (compiled, whole) =
            (row(&sharded, "compiled (this binary)"), row(&sharded, "compiled, whole optimizer state"));
        assert!(compiled.all_gather_s > 0.0 && whole.all_gather_s == 0.0);
        assert!(compiled.update_s < whole.update_s, "each rank updates an eighth");
        let unsharded = predictions(&schedule, &costs, cluster, sim_sharding(false));
        assert_eq!(row(&unsharded, "compiled (this binary)"), whole);
        assert_eq!(row(&unsharded, "compiled, sharded state (ZeRO-1)"), compiled);
        let inside = row(&sharded, "compiled, sharded, all-gathers inside the step");
        assert!(inside.all_gather_s == 0.0 && inside.step_s >= compiled.step_s, "{inside:?} against {compiled:?}");
        // A bucket per layer already: no row for gathering by layer; one bucket for both: a row.
        assert!(!sharded.iter().any(|r| r.0 == "compiled, sharded, all-gathers per layer"));
        let one = plan_buckets("M", &specs, &BucketLimits::Unlimited).unwrap();
        let rows = predictions(&one, &costs, cluster, sim_sharding(true));
        let split = row(&rows, "compiled, sharded, all-gathers per layer");
        assert!(split.gather_exposed_s < row(&rows, "compiled (this binary)").gather_exposed_s);
    }

    #[test]
    fn the_planned_alternatives_keep_the_boundaries_the_model_forces_and_its_state_sharded() {
        let mut specs = vec![linear("fc1", 64, 64), linear("fc2", 64, 64), linear("fc3", 64, 64)];
        specs[1].bucket_boundary = true;
        let schedule = plan_buckets("M", &specs, &BucketLimits::Unlimited).unwrap();
        assert!(schedule.layers[1].bucket_boundary && !schedule.layers[2].bucket_boundary);
        let costs = StepCosts { forward_s: vec![1e-6; 3], backward_s: vec![2e-6; 3], update_s_per_byte: 1e-12 };
        // Latency dwarfs all else: one bucket is best, where nothing forces two.
        let cluster: Cluster = "world=8,link=latency=1s,bandwidth=100GB/s".parse().unwrap();
        let buckets = |rows: &[(String, usize, Prediction)], name: &str| {
            rows.iter().find(|r| r.0 == name).map(|r| r.1).unwrap_or_else(|| panic!("no row {name} in {rows:?}"))
        };
        // MG-WFBP sends the last layer alone (the link is free then) and merges the rest but
        // where the model forces a bucket.
        let unforced =
            plan_buckets("M", &[specs[0].clone(), linear("fc2", 64, 64), specs[2].clone()], &BucketLimits::Unlimited);
        let rows = predictions(&unforced.unwrap(), &costs, cluster, SimSharding::Whole);
        assert_eq!(buckets(&rows, "auto (optimal for this cluster)"), 1);
        assert_eq!(buckets(&rows, "MG-WFBP merge rule"), 2);
        let rows = predictions(&schedule, &costs, cluster, SimSharding::Whole);
        assert_eq!(buckets(&rows, "auto (optimal for this cluster)"), 2, "the forced boundary and no other");
        assert_eq!(buckets(&rows, "MG-WFBP merge rule"), 3);
        assert_eq!(buckets(&rows, "DDP defaults, step 1 (one bucket)"), 1, "DDP knows no forced boundary");
        assert_eq!(buckets(&rows, "one bucket per layer"), 3);
        // A sharded run's auto plan is planned and predicted sharded, as `buckets = auto(..)` is.
        let rows = predictions(&schedule, &costs, cluster, sim_sharding(true));
        assert!(!rows.iter().any(|r| r.0 == "auto (optimal for this cluster)"), "{rows:?}");
        let auto =
            rows.iter().find(|r| r.0 == "auto (optimal for this cluster, sharded state)").expect("a sharded row");
        let target = Target { costs: costs.clone(), link: cluster.link, world: cluster.world };
        let (plan, _) = plan_auto_sharded("M", &specs, &target, GradComm::Format(WireFormat::Fp32)).unwrap();
        let flags = |layers: &[overlap_plan::LayerInfo]| layers.iter().map(|l| l.bucket_boundary).collect::<Vec<_>>();
        assert_eq!(flags(&plan.layers), [false, true, false], "the boundaries the model forced, no others");
        assert!(plan.buckets.len() >= 2, "{plan:?}");
        assert_eq!(
            (auto.1, &auto.2),
            (plan.buckets.len(), &sharded_step(&plan, &target, GradComm::Format(WireFormat::Fp32)))
        );
        assert!(auto.2.all_gather_s > 0.0, "{auto:?}");
    }

    #[test]
    fn a_narrow_schedule_is_predicted_against_its_fp32_self_and_compared_in_its_format() {
        let specs = vec![linear("fc1", 256, 512), linear("fc2", 512, 512)];
        let fp32 = plan_buckets("M", &specs, &BucketLimits::default()).unwrap();
        let costs = StepCosts { forward_s: vec![1e-3; 2], backward_s: vec![2e-3; 2], update_s_per_byte: 0.0 };
        let cluster: Cluster = "world=8,link=10gbe".parse().unwrap();
        let rows = |s: &Schedule| predictions(s, &costs, cluster, SimSharding::Whole);
        let (wide, narrow) = (rows(&fp32), rows(&fp32.clone().with_wire(WireFormat::Bf16)));
        let step = |rows: &[(String, usize, Prediction)], name: &str| {
            rows.iter().find(|r| r.0 == name).map(|r| r.2.step_s).unwrap_or_else(|| panic!("no row {name}"))
        };
        assert!(!wide.iter().any(|r| r.0 == "compiled, FP32 on the wire"), "an FP32 schedule has no such row");
        assert_eq!(step(&narrow, "compiled, FP32 on the wire"), step(&wide, "compiled (this binary)"));
        assert!(step(&narrow, "compiled (this binary)") < step(&wide, "compiled (this binary)"));
        let one = "DDP defaults, step 1 (one bucket)";
        assert!(step(&narrow, one) < step(&wide, one), "alternatives send bf16 too");
    }
}
