//! `auto` and `profile` for sharded optimizer state: each bucket reduce-scattered in backward,
//! 1/N of the update on each rank, and the updated slices all-gathered in the next forward,
//! grouped as `choose_gathers` chooses. The exhaustive search and the dynamic program find the
//! best boundaries for an all-reduce; a search as exact for sharded state would group every
//! candidate's all-gathers anew, too slow for a compiler. So a few plans are simulated sharded
//! and the fastest kept: the all-reduce's optimum, MG-WFBP's merge, one bucket per layer with
//! parameters, and the fewest buckets (each within the forced boundaries); then single
//! boundaries are added or removed while that shortens the sharded step.

use crate::auto::{forced_as_written, plan_auto, Strategy, Target};
use crate::bucket::{plan_buckets, PlanError};
use crate::gather::choose_gathers;
use crate::limits::BucketLimits;
use crate::schedule::Schedule;
use crate::simulate::{sim_buckets, simulate_sharded, Prediction, SimSharding};
use crate::spec::LayerSpec;
use crate::wire::GradComm;

/// The plan above for sharded state on `target`, with its prediction (the all-gathers grouped
/// by `choose_gathers`). Ties keep the all-reduce's optimum.
pub fn plan_auto_sharded(
    model: &str,
    layers: &[LayerSpec],
    target: &Target,
    grad_comm: GradComm,
) -> Result<(Schedule, Prediction), PlanError> {
    let optimum = plan_auto(model, layers, target, Strategy::Optimal, grad_comm)?.0;
    let merged = plan_auto(model, layers, target, Strategy::MgWfbp, grad_comm)?.0;
    let mut each = layers.to_vec();
    each.iter_mut().filter(|l| !l.params.is_empty()).for_each(|l| l.bucket_boundary = true);
    let per_layer = plan_buckets(model, &each, &BucketLimits::Unlimited)?;
    let fewest = plan_buckets(model, layers, &BucketLimits::Unlimited)?;
    let mut best: Option<(Schedule, Prediction)> = None;
    for candidate in [optimum, merged, per_layer, fewest] {
        let predicted = sharded_step(&candidate, target, grad_comm);
        if best.as_ref().is_none_or(|(_, b)| shorter(predicted.step_s, b.step_s)) {
            best = Some((candidate, predicted));
        }
    }
    let (mut schedule, mut predicted) = best.expect("four candidates");
    // Then one boundary at a time, added or removed, while that shortens the step (a few passes
    // at most: each move groups the all-gathers anew), within a budget of trials that a deep
    // model spreads over its boundaries.
    let free: Vec<usize> =
        (1..layers.len()).filter(|&i| !layers[i].params.is_empty() && !layers[i].bucket_boundary).collect();
    let mut marked = boundaries_of(&schedule, layers);
    let mut trials = trial_budget(layers.len());
    let stride = free.len().div_ceil((trials / HILL_CLIMB_PASSES).max(1)).max(1);
    for pass in 0..HILL_CLIMB_PASSES {
        let mut improved = false;
        // Passes that cannot try every boundary try every `stride`-th, starting a quarter of a
        // stride further each pass, so that together they cover the depth evenly.
        for &i in free.iter().skip(pass * stride / HILL_CLIMB_PASSES).step_by(stride) {
            if trials == 0 {
                break;
            }
            trials -= 1;
            marked[i].bucket_boundary = !marked[i].bucket_boundary;
            let trial = plan_buckets(model, &marked, &BucketLimits::Unlimited)?;
            let p = sharded_step(&trial, target, grad_comm);
            if shorter(p.step_s, predicted.step_s) {
                (schedule, predicted, improved) = (trial, p, true);
            } else {
                marked[i].bucket_boundary = !marked[i].bucket_boundary; // Undone: no shorter.
            }
        }
        if !improved && stride == 1 {
            break;
        }
    }
    Ok((forced_as_written(schedule, layers), predicted))
}

/// Whether a predicted step of `a` seconds is shorter than one of `b` by more than rounding: sums
/// of the same costs in another order differ in their last bits, and such a tie keeps the plan
/// found first (the all-reduce's optimum, or fewer moves), as `plan_auto`'s ties do.
fn shorter(a: f64, b: f64) -> bool {
    a < b - 1e-12 * b.abs().max(1.0)
}

/// Passes of single-boundary moves after the candidates.
const HILL_CLIMB_PASSES: usize = 4;

/// Layers squared times trials, at most, in the single-boundary moves: a trial plans and
/// simulates the whole model and groups its all-gathers anew, which grows with the square of
/// its layers, and the macro runs this unoptimised while the user's crate compiles. Every pass
/// tries every boundary up to about 128 layers; 512 layers get 64 trials in all. Measured on 512
/// one-`Linear` blocks: 4.8 s optimised before the budget, 0.4 s with it (4.1 s unoptimised, as
/// a macro runs; 1024 blocks 0.7 s and 6.6 s, where it grew with the cube of the layers before).
const TRIAL_WORK: usize = 1 << 24;

/// Trials the single-boundary moves may make for a model of `layers` layers.
fn trial_budget(layers: usize) -> usize {
    (TRIAL_WORK / layers.max(1).saturating_pow(2)).max(1)
}

/// `layers` with a boundary where `schedule` starts a bucket (each bucket's first layer in
/// definition order) and where `layers` force one.
fn boundaries_of(schedule: &Schedule, layers: &[LayerSpec]) -> Vec<LayerSpec> {
    let mut marked = layers.to_vec();
    for b in schedule.buckets.iter() {
        if let Some(first) = b.params.iter().map(|r| r.layer).min() {
            marked[first].bucket_boundary = true;
        }
    }
    marked
}

/// The sharded step of `schedule` on `target`, its gradients sent as `grad_comm` says.
pub fn sharded_step(schedule: &Schedule, target: &Target, grad_comm: GradComm) -> Prediction {
    let sent = schedule.clone().with_grad_comm(grad_comm);
    let gathers = choose_gathers(&sent, target);
    let link = (&target.link, target.world);
    simulate_sharded(&sim_buckets(&sent), &gathers, &target.costs, link, true, SimSharding::GatherInForward)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::Link;
    use crate::simulate::StepCosts;
    use crate::spec::Width;
    use crate::wire::WireFormat;

    const FP32: GradComm = GradComm::Format(WireFormat::Fp32);

    fn layer(name: &str, numel: usize) -> LayerSpec {
        LayerSpec::new(name.to_string(), "Custom".to_string(), Width::Preserving).with_param("w", &[numel])
    }

    #[test]
    fn sharded_state_can_want_more_buckets_than_an_all_reduce() {
        // 1000 and 3000 bytes; forward 3 s then 0, backward 2 s then 1; a 1 s, 1000 B/s link.
        let layers = [layer("l0", 250), layer("l1", 750)];
        let target = Target {
            costs: StepCosts { forward_s: vec![3.0, 0.0], backward_s: vec![2.0, 1.0], update_s_per_byte: 0.0 },
            link: Link { latency_s: 1.0, bandwidth_bytes_per_s: 1000.0 },
            world: 2,
        };
        let (whole, _) = plan_auto("M", &layers, &target, Strategy::Optimal, FP32).unwrap();
        let (sharded, predicted) = plan_auto_sharded("M", &layers, &target, FP32).unwrap();
        assert_eq!((whole.buckets.len(), sharded.buckets.len()), (1, 2));
        assert!(predicted.step_s < sharded_step(&whole, &target, FP32).step_s, "{predicted:?}");
        assert_eq!(predicted.step_s, sharded_step(&sharded, &target, FP32).step_s, "the prediction is the plan's");
    }

    #[test]
    fn the_single_boundary_moves_try_every_boundary_of_a_small_model_and_a_bounded_few_of_a_deep_one() {
        assert!(trial_budget(128) >= HILL_CLIMB_PASSES * 127, "every pass tries every boundary");
        for layers in [512, 1024, 2048, 1 << 20, usize::MAX] {
            let trials = trial_budget(layers);
            assert!(trials >= 1 && (trials == 1 || trials * layers.pow(2) <= TRIAL_WORK), "{layers}: {trials}");
        }
        assert_eq!(trial_budget(512), 64);
    }

    #[test]
    fn ties_within_rounding_keep_the_all_reduce_optimum() {
        // One rank: nothing travels, every plan's step is the same sum in another order.
        let layers: Vec<LayerSpec> = (0..8).map(|i| layer(&format!("l{i}"), 1000 * (i + 1))).collect();
        for (latency_s, update_s_per_byte) in [(0.0, 1.5e-10), (5e-6, 3.3e-10), (-0.0, 0.0)] {
            let target = Target {
                costs: StepCosts {
                    forward_s: vec![0.3, 0.7, 1.1, 0.1, 0.9, 1.3, 0.2, 0.6],
                    backward_s: vec![0.45; 8],
                    update_s_per_byte,
                },
                link: Link { latency_s, bandwidth_bytes_per_s: 1e9 },
                world: 1,
            };
            let (optimum, _) = plan_auto("M", &layers, &target, Strategy::Optimal, FP32).unwrap();
            let (sharded, _) = plan_auto_sharded("M", &layers, &target, FP32).unwrap();
            assert_eq!(sharded.buckets.len(), optimum.buckets.len(), "latency {latency_s}, update {update_s_per_byte}");
        }
    }

    #[test]
    fn forced_boundaries_hold_in_every_candidate() {
        let mut layers: Vec<LayerSpec> = (0..6).map(|i| layer(&format!("l{i}"), 1000 * (i + 1))).collect();
        layers[3].bucket_boundary = true;
        let target = Target {
            costs: StepCosts { forward_s: vec![0.01; 6], backward_s: vec![0.02; 6], update_s_per_byte: 1e-9 },
            link: Link { latency_s: 5e-6, bandwidth_bytes_per_s: 1e9 },
            world: 4,
        };
        let (sharded, _) = plan_auto_sharded("M", &layers, &target, FP32).unwrap();
        let splits_at_3 = sharded.buckets.iter().all(|b| {
            let layers: Vec<usize> = b.params.iter().map(|r| r.layer).collect();
            layers.iter().all(|&l| l < 3) || layers.iter().all(|&l| l >= 3)
        });
        assert!(splits_at_3, "no bucket spans the forced boundary");
    }
}
