//! Gradients on the wire as bf16 or fp16, summed in FP32 (issue 17), under real mpirun with 2 and
//! 3 ranks and each transport: parameters after 20 SGD steps stay within a stated tolerance of
//! FP32 communication, and closer to it than the per-hop-rounding scheme of a ring all-reduce in
//! the narrow type (PyTorch DDP's `fp16_compress_hook` over NCCL), which this file implements as
//! the reference; updates lent to the all-reduce give the floats of updates after the wait; every
//! rank ends bit-identical; fp16 gradients near 6e4, whose narrow sum overflows, stay finite and
//! correct; and an fp16 overflow that remains is a clear error with `--check-finite`. One process
//! sends nothing, so it rounds nothing: its results are FP32's, bit for bit.

use half::{bf16, f16};
use overlap::prelude::*;
use overlap::{GradBucket, WireFormat};
use overlap_runtime::grad_scale;

mod common;

/// Three buckets; fc2's weight (327,680 values) fills one alone, longer than a shared-memory
/// chunk (262,144), so its all-reduce crosses a chunk boundary.
#[distributed_model(bucket_cap_mb = 1, first_bucket_mb = 0.25)]
pub struct Net {
    fc1: Linear<32, 512>,
    act1: Tanh,
    fc2: Linear<512, 640>,
    act2: Tanh,
    head: Linear<640, 10>,
}

/// `Net` compiled to send bf16.
#[distributed_model(bucket_cap_mb = 1, first_bucket_mb = 0.25, grad_comm = bf16)]
pub struct NetBf16 {
    fc1: Linear<32, 512>,
    act1: Tanh,
    fc2: Linear<512, 640>,
    act2: Tanh,
    head: Linear<640, 10>,
}

const STEPS: usize = 20;
/// The largest deviation from FP32 communication allowed after `STEPS` steps, relative to how far
/// FP32 moved the parameters (`deviation`). Measured on 2 and 3 ranks: see the launcher's output.
const BF16_TOLERANCE: f64 = 2e-2;
const FP16_TOLERANCE: f64 = 3e-3;

/// Rank `rank`'s batch at step `step`: each rank's gradients differ.
fn batch(rank: usize, step: usize) -> (Matrix, Vec<usize>) {
    let x = (0..16 * 32).map(|i| ((i * 7 + rank * 13 + step * 29) % 31) as f32 / 31.0 - 0.5).collect();
    (Matrix::from_vec(16, 32, x), (0..16).map(|i| (i + rank + step) % 10).collect())
}

fn sgd() -> Sgd {
    Sgd::new(0.05).momentum(0.9)
}

fn params<M: DistributedModel>(model: &M) -> Vec<Vec<f32>> {
    M::SCHEDULE.params().map(|p| model.param(p).to_vec()).collect()
}

/// Parameters after `STEPS` steps on `comm`, with the buckets' all-reduces as `comm` does them.
fn train(comm: &Communicator) -> Vec<Vec<f32>> {
    train_model(comm, Net::new(comm, 11).unwrap())
}

/// `train`, of `model`.
fn train_model<M: DistributedModel>(comm: &Communicator, mut model: M) -> Vec<Vec<f32>> {
    let mut optimizer = sgd();
    let (mut grads, mut ws, mut dy) = (model.new_grads(), M::Workspace::default(), Matrix::default());
    for step in 0..STEPS {
        let (x, labels) = batch(comm.rank(), step);
        let logits = model.forward(&x, &mut ws);
        CrossEntropyLoss.forward_backward(logits, &labels, &mut dy);
        let in_flight = model.backward(&mut ws, &dy, grads, comm, &mut optimizer);
        grads = model.step(in_flight, &mut optimizer).unwrap();
    }
    params(&model)
}

/// Parameters after `STEPS` steps on `comm`'s ranks with each bucket summed by `sum` from every
/// rank's gradients (exchanged exactly), then the SGD update, as the runtime averages it.
fn train_with(comm: &Communicator, sum: impl Fn(&[Vec<f32>]) -> Vec<f32>) -> Vec<Vec<f32>> {
    let (mut model, mut optimizer) = (Net::new(comm, 11).unwrap(), sgd());
    let (mut ws, mut dy) = (NetWorkspace::default(), Matrix::default());
    let scale = grad_scale(comm.world_size(), 1);
    for step in 0..STEPS {
        let mut grads = model.new_grads();
        let (x, labels) = batch(comm.rank(), step);
        let logits = model.forward(&x, &mut ws);
        CrossEntropyLoss.forward_backward(logits, &labels, &mut dy);
        model.backward_no_sync(&mut ws, &dy, &mut grads);
        optimizer.begin_step();
        for (k, bucket) in grads.buckets().into_iter().enumerate() {
            let summed = sum(&all_gather(comm, k, bucket.as_slice()));
            let schedule = Net::SCHEDULE;
            for &p in schedule.buckets[k].params.iter() {
                let index = schedule.params().position(|q| q == p).unwrap();
                let info = schedule.param(p);
                optimizer.update(index, model.param_mut(p), &summed[info.offset..info.offset + info.numel()], scale);
            }
        }
    }
    params(&model)
}

/// Every rank's `mine`, by rank: an FP32 all-reduce in which each rank contributes its values at
/// its own place and zeros elsewhere, so every sum is exact.
fn all_gather(comm: &Communicator, k: usize, mine: &[f32]) -> Vec<Vec<f32>> {
    let n = mine.len();
    let mut bucket = GradBucket::zeros(100 + k, n * comm.world_size());
    bucket.as_mut_slice()[comm.rank() * n..][..n].copy_from_slice(mine);
    let bucket = comm.all_reduce_async(bucket).wait().unwrap();
    bucket.as_slice().chunks(n).map(<[f32]>::to_vec).collect()
}

/// `x` rounded to `format` (to nearest even) and back.
fn round(format: WireFormat, x: f32) -> f32 {
    match format {
        WireFormat::Bf16 => bf16::from_f32(x).to_f32(),
        WireFormat::Fp16 => f16::from_f32(x).to_f32(),
        WireFormat::Fp32 => x,
    }
}

/// What the runtime scales by before narrowing (fp16: 1/world), as DDP's hooks do.
fn pre_scale(format: WireFormat, world: usize) -> f32 {
    if format == WireFormat::Fp16 {
        1.0 / world as f32
    } else {
        1.0
    }
}

/// The sum in FP32, in rank order.
fn exact_sum(all: &[Vec<f32>]) -> Vec<f32> {
    (0..all[0].len()).map(|i| all.iter().skip(1).fold(all[0][i], |s, rank| s + rank[i])).collect()
}

/// The reference: a ring all-reduce in the narrow type. Every rank's values are narrowed; the
/// bucket's `world` chunks travel the ring, chunk c from rank c + 1 around to rank c, and each hop
/// adds the next rank's value to the partial sum and rounds it to the narrow type again.
fn per_hop_sum(format: WireFormat, all: &[Vec<f32>]) -> Vec<f32> {
    let (world, n) = (all.len(), all[0].len());
    let (scale, chunk) = (pre_scale(format, world), n.div_ceil(world));
    (0..n)
        .map(|i| {
            let c = i / chunk;
            let sent = |hop: usize| round(format, all[(c + 1 + hop) % world][i] * scale);
            let partial = (1..world).fold(sent(0), |p, hop| round(format, p + sent(hop)));
            partial / scale
        })
        .collect()
}

/// `‖a − fp32‖ / ‖fp32 − init‖`: how far `a` is from FP32 communication's parameters, relative to
/// how far training moved them.
fn deviation(a: &[Vec<f32>], fp32: &[Vec<f32>], init: &[Vec<f32>]) -> f64 {
    let sq = |x: &[Vec<f32>], y: &[Vec<f32>]| -> f64 {
        x.iter().flatten().zip(y.iter().flatten()).map(|(p, q)| f64::from(p - q).powi(2)).sum()
    };
    (sq(a, fp32) / sq(fp32, init)).sqrt()
}

/// A fingerprint of the parameters' bits, to compare ranks.
fn fingerprint(params: &[Vec<f32>]) -> u64 {
    params
        .iter()
        .flatten()
        .fold(0xcbf2_9ce4_8422_2325, |h: u64, v| (h ^ u64::from(v.to_bits())).wrapping_mul(0x100_0000_01b3))
}

#[test]
fn one_process_sends_nothing_so_rounds_nothing() {
    let fp32 = train(&Communicator::single());
    for format in [WireFormat::Bf16, WireFormat::Fp16] {
        let mut comm = Communicator::single();
        comm.set_wire_format(format);
        assert_eq!(train(&comm), fp32, "{format} on one process");
    }
}

#[test]
fn formats_can_differ_by_bucket() {
    let mut comm = Communicator::single();
    let formats = |comm: &Communicator| (0..3).map(|k| comm.wire_format(&Net::SCHEDULE, k)).collect::<Vec<_>>();
    comm.set_bucket_wire_formats(&[WireFormat::Bf16, WireFormat::Fp16]);
    assert_eq!(formats(&comm), [WireFormat::Bf16, WireFormat::Fp16, WireFormat::Fp32], "FP32 past the list");
    comm.set_wire_format(WireFormat::Fp16);
    assert_eq!(formats(&comm), [WireFormat::Fp16; 3], "the last choice stands");
}

#[test]
fn narrow_formats_on_two_and_three_ranks_with_each_transport() {
    if !common::mpirun_available() {
        eprintln!("skipped: no mpirun here");
        return;
    }
    for ranks in [2, 3] {
        for transport in ["shared-memory", "mpi"] {
            common::run_on_ranks("ranks_train_with_narrow_formats", ranks, transport, "overlap");
        }
    }
}

/// The body of `narrow_formats_on_two_and_three_ranks_with_each_transport`, on each rank.
#[test]
#[ignore = "runs under mpirun, started by narrow_formats_on_two_and_three_ranks_with_each_transport"]
fn ranks_train_with_narrow_formats() {
    let mut comm = common::test_communicator();
    let (rank, world) = (comm.rank(), comm.world_size());
    let init = params(&Net::new(&comm, 11).unwrap());
    let fp32 = train(&comm);
    let exact = train_with(&comm, exact_sum);
    let harness = deviation(&exact, &fp32, &init);
    let mut chosen_bf16 = Vec::new();
    assert!(harness < 1e-5, "the reference's own FP32 sums are {harness:e} from the runtime's");
    for (format, tolerance) in [(WireFormat::Bf16, BF16_TOLERANCE), (WireFormat::Fp16, FP16_TOLERANCE)] {
        comm.set_wire_format(format);
        let ours = train(&comm);
        if format == WireFormat::Bf16 {
            chosen_bf16.clone_from(&ours);
        }
        // With --check-finite nothing is lent: the update runs after the wait point.
        comm.set_check_finite(true);
        assert!(train(&comm) == ours, "{format}: lent updates and updates after the wait differ");
        comm.set_check_finite(false);
        let fingerprints = comm.all_gather_u64(fingerprint(&ours)).unwrap();
        assert!(fingerprints.iter().all(|&f| f == fingerprints[0]), "{format}: ranks differ: {fingerprints:x?}");
        comm.set_wire_format(WireFormat::Fp32);
        let per_hop = train_with(&comm, |all| per_hop_sum(format, all));
        let (ours, per_hop) = (deviation(&ours, &fp32, &init), deviation(&per_hop, &fp32, &init));
        if rank == 0 {
            println!("{world} ranks, {format}: deviation from fp32 {ours:.3e}, per-hop rounding {per_hop:.3e}");
        }
        assert!(ours <= tolerance, "{format}: {ours:e} from fp32, above the tolerance {tolerance:e}");
        assert!(ours < per_hop, "{format}: {ours:e} from fp32, not closer than per-hop rounding ({per_hop:e})");
    }
    // Each model sends as it was compiled, whichever model the communicator met last.
    comm.use_schedule_wire_formats();
    let (net, _built_after) = (Net::new(&comm, 11).unwrap(), NetBf16::new(&comm, 11).unwrap());
    assert!(train_model(&comm, net) == fp32, "Net sent as the model built after it");
    let (net_bf16, _built_after) = (NetBf16::new(&comm, 11).unwrap(), Net::new(&comm, 11).unwrap());
    assert!(train_model(&comm, net_bf16) == chosen_bf16, "NetBf16 sent otherwise than bf16");
    fp16_gradients_near_its_largest_value_stay_finite(&mut comm);
    fp16_overflow_is_an_error_with_check_finite(&mut comm);
}

/// Rank `rank`'s gradients near 6e4, below fp16's largest value (65504), though two of them
/// already sum past it; not all representable, so each rounding shows.
fn near_fp16_max(rank: usize, len: usize) -> Vec<f32> {
    (0..len).map(|i| 6.0e4 - (i % 7) as f32 * 32.0 - rank as f32 * 64.0 + (i % 11) as f32 * 1.37).collect()
}

fn fp16_gradients_near_its_largest_value_stay_finite(comm: &mut Communicator) {
    let (rank, world) = (comm.rank(), comm.world_size());
    comm.set_wire_format(WireFormat::Fp16);
    // Longer than a shared-memory chunk.
    let len = (1 << 18) + 1000;
    let mut bucket = GradBucket::zeros(0, len);
    bucket.as_mut_slice().copy_from_slice(&near_fp16_max(rank, len));
    let summed = comm.all_reduce_async(bucket).wait().unwrap();
    let all: Vec<Vec<f32>> = (0..world).map(|r| near_fp16_max(r, len)).collect();
    let exact = exact_sum(&all);
    // The naive narrow sums, unscaled, overflow: every value rounded, then the sum.
    let naive = round(WireFormat::Fp16, all.iter().map(|g| round(WireFormat::Fp16, g[0])).sum());
    assert_eq!(naive, f32::INFINITY, "the naive fp16 sum of {world} values near 6e4 overflows");
    // Each value rounded at most twice (sent, then summed), 2^-11 relative each.
    let worst = summed.as_slice().iter().zip(&exact).map(|(s, e)| ((s - e) / e).abs()).fold(0.0, f32::max);
    assert!(summed.as_slice().iter().all(|s| s.is_finite()), "fp16 sums near 6e4 on {world} ranks overflowed");
    assert!(worst <= 2f32.powi(-10), "fp16 sums near 6e4: relative error {worst:e}");
    if rank == 0 {
        println!("{world} ranks, fp16 near 6e4: finite, largest relative error {worst:.3e}");
    }
    comm.set_wire_format(WireFormat::Fp32);
}

/// Means past fp16's range overflow even scaled: `--check-finite` says so, naming the bucket and
/// the format; without it the infinity reaches the sums.
fn fp16_overflow_is_an_error_with_check_finite(comm: &mut Communicator) {
    comm.set_wire_format(WireFormat::Fp16);
    let too_large = || {
        let mut bucket = GradBucket::zeros(0, 64);
        bucket.as_mut_slice().fill(7.0e4);
        bucket
    };
    let summed = comm.all_reduce_async(too_large()).wait().unwrap();
    assert!(summed.as_slice().iter().all(|s| *s == f32::INFINITY), "without --check-finite: inf");
    comm.set_check_finite(true);
    let error = comm.all_reduce_async(too_large()).wait().unwrap_err().to_string();
    for part in ["b0", "overflowed fp16", "bf16"] {
        assert!(error.contains(part), "{error}");
    }
    comm.set_check_finite(false);
    comm.set_wire_format(WireFormat::Fp32);
}
