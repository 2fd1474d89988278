//! PowerSGD (`grad_comm = powersgd(rank = 4)`): the schedule says what travels; the loss after
//! 300 SGD steps is within 10% of FP32's with the same seed, on one process and on 2 ranks each
//! way (both transports, and without overlap); every rank ends with the same parameters, bit for
//! bit; a run-time `--grad-comm fp32` sends the buckets whole, giving FP32's results exactly;
//! and a run saved and resumed ends with the same bits as one that did not stop.

use std::path::{Path, PathBuf};

use overlap::prelude::*;
use overlap::{ReportFormat, SyntheticClassification, WireFormat};

mod common;

#[distributed_model(bucket_cap_mb = 0.25, first_bucket_mb = 0.0625)]
pub struct Classifier {
    fc1: Linear<64, 256>,
    act1: Tanh,
    fc2: Linear<256, 256>,
    act2: Tanh,
    head: Linear<256, 10>,
}

/// `Classifier` with its gradients as rank-4 factors after 10 steps sent whole.
#[distributed_model(bucket_cap_mb = 0.25, first_bucket_mb = 0.0625, grad_comm = powersgd(rank = 4, start_iter = 10))]
pub struct LowRankClassifier {
    fc1: Linear<64, 256>,
    act1: Tanh,
    fc2: Linear<256, 256>,
    act2: Tanh,
    head: Linear<256, 10>,
}

const STEPS: u64 = 300;
/// The largest relative difference from FP32's final loss allowed for PowerSGD.
const TOLERANCE: f64 = 0.10;

/// (first, final) global loss of `STEPS` steps of `M`, and the model.
fn train<M: DistributedModel>(comm: &Communicator) -> (f64, f64, M) {
    let mut model = M::new(comm, 5).unwrap();
    let mut data = SyntheticClassification::new(9, 64, 10);
    let summary = Trainer::new(comm)
        .optimizer(OptimizerConfig::sgd(0.05).momentum(0.9))
        .steps(STEPS)
        // The global batch of 2 ranks of 32, whatever the world size.
        .batch(64 / comm.world_size())
        .log_every(STEPS)
        .report(ReportFormat::Off, None)
        .fit(&mut model, &mut data, &CrossEntropyLoss)
        .unwrap();
    (summary.first_loss, summary.final_loss, model)
}

/// Every parameter's bits, hashed (FNV-1a) in definition order.
fn parameter_hash<M: DistributedModel>(model: &M) -> u64 {
    M::SCHEDULE
        .params()
        .flat_map(|p| model.param(p).iter().map(|v| v.to_bits()))
        .fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// The loss checks on `comm`'s ranks; returns the PowerSGD model's parameter hash.
fn losses_agree(comm: &mut Communicator) -> u64 {
    let (first, fp32, _) = train::<Classifier>(comm);
    assert!(fp32 < 0.85 * first, "FP32 training moved the loss: {first} -> {fp32}");
    let (_, low_rank, model) = train::<LowRankClassifier>(comm);
    let off = (low_rank - fp32).abs() / fp32;
    println!(
        "{} rank(s): PowerSGD rank 4: loss after {STEPS} steps {low_rank:.5}, FP32 {fp32:.5}: {:.2}% off",
        comm.world_size(),
        off * 100.0
    );
    assert!(off <= TOLERANCE, "PowerSGD: {low_rank} against FP32's {fp32}");
    assert_ne!(low_rank, fp32, "PowerSGD approximated something");
    // Sent whole at run time, the same buckets give FP32's arithmetic exactly.
    comm.set_wire_format(WireFormat::Fp32);
    let (_, whole, _) = train::<LowRankClassifier>(comm);
    assert_eq!(whole, fp32, "--grad-comm fp32 on a PowerSGD schedule sends the buckets whole");
    comm.use_schedule_wire_formats();
    parameter_hash(&model)
}

#[test]
fn the_schedule_counts_the_factors_and_vectors_on_the_wire() {
    let s = LowRankClassifier::SCHEDULE;
    assert!(s.buckets.iter().all(|b| b.low_rank == Some(overlap::plan::LowRank::new(4, 10))));
    // fc1.weight [256, 64], fc2.weight [256, 256] and head.weight [10, 256] as factors; biases whole.
    let factors = (256 + 64) * 4 + (256 + 256) * 4 + (10 + 256) * 4;
    assert_eq!(s.total_wire_bytes(), (factors + 256 + 256 + 10) * 4);
    assert_ne!(s.fingerprint(), Classifier::SCHEDULE.fingerprint(), "the compression is part of the plan");
    let table = s.to_string();
    assert!(table.contains("rank-4 PowerSGD factors"), "{table}");
    assert!(table.contains("whole for the first 10 steps"), "{table}");
    for k in 0..s.buckets.len() {
        let row = table.lines().find(|l| l.starts_with(&format!("b{k} "))).unwrap();
        assert!(row.contains(&format!("rank 4 {}", overlap::plan::human_bytes(s.wire_bytes(k)))), "{row}");
    }
}

#[test]
fn one_process_reaches_fp32s_loss_within_ten_percent() {
    losses_agree(&mut Communicator::single());
}

#[test]
fn two_ranks_reach_fp32s_loss_and_agree_bit_for_bit() {
    if !common::mpirun_available() {
        return;
    }
    common::run_on_two_ranks_each_way("ranks_train_with_powersgd");
}

#[test]
#[ignore = "runs under mpirun, started by two_ranks_reach_fp32s_loss_and_agree_bit_for_bit"]
fn ranks_train_with_powersgd() {
    let mut comm = common::test_communicator();
    let hash = losses_agree(&mut comm);
    let hashes = comm.all_gather_u64(hash).unwrap();
    assert!(hashes.iter().all(|&h| h == hashes[0]), "every rank holds the same parameters: {hashes:x?}");
}

/// `Classifier` compressed from its second step on.
#[distributed_model(bucket_cap_mb = 0.25, first_bucket_mb = 0.0625, grad_comm = powersgd(rank = 2, start_iter = 1))]
pub struct EarlyLowRank {
    fc1: Linear<64, 256>,
    act1: Tanh,
    fc2: Linear<256, 256>,
    act2: Tanh,
    head: Linear<256, 10>,
}

/// Cross-entropy whose gradient holds a NaN from its fourth call on (its loss stays finite).
struct NanGradientLater(std::cell::Cell<u32>);

impl overlap::Loss for NanGradientLater {
    fn loss_and_gradient(
        &self,
        output: &overlap::Matrix,
        batch: &overlap::Batch,
        grad: &mut overlap::Matrix,
    ) -> overlap::Result<f32> {
        let loss = CrossEntropyLoss.loss_and_gradient(output, batch, grad)?;
        self.0.set(self.0.get() + 1);
        if self.0.get() >= 4 {
            grad.as_mut_slice()[0] = f32::NAN;
        }
        Ok(loss)
    }
}

#[test]
fn two_ranks_name_a_non_finite_factor() {
    if !common::mpirun_available() {
        return;
    }
    common::run_on_two_ranks_each_way("ranks_name_a_non_finite_factor");
}

/// `--check-finite` on a compressed bucket finds the NaN in the factor P's sums: every rank names
/// it as PowerSGD's factor (not a parameter at P's offset), with overlap and without (where the
/// error was lost, and the wait point said the communication thread had died).
#[test]
#[ignore = "runs under mpirun, started by two_ranks_name_a_non_finite_factor"]
fn ranks_name_a_non_finite_factor() {
    let comm = common::test_communicator();
    let mut model = EarlyLowRank::new(&comm, 5).unwrap();
    let mut data = SyntheticClassification::new(9, 64, 10);
    let settings = overlap::CommConfig { check_finite: true, ..comm.config() };
    let error = Trainer::new(&comm)
        .optimizer(OptimizerConfig::sgd(0.05))
        .steps(6)
        .batch(32)
        .comm(settings)
        .report(ReportFormat::Off, None)
        .fit(&mut model, &mut data, &NanGradientLater(std::cell::Cell::new(0)))
        .unwrap_err()
        .to_string();
    assert!(error.contains("non-finite value NaN in PowerSGD's factor P of bucket b"), "{error}");
}

/// The parameter hash after `steps` steps of `LowRankClassifier`, saving into `save` at the end
/// or resuming from `resume` first.
fn run_low_rank(comm: &Communicator, steps: u64, save: Option<&Path>, resume: Option<&Path>) -> u64 {
    let mut model = LowRankClassifier::new(comm, 5).unwrap();
    let mut data = SyntheticClassification::new(9, 64, 10);
    let mut trainer = Trainer::new(comm)
        .optimizer(OptimizerConfig::sgd(0.05).momentum(0.9))
        .steps(steps)
        .batch(64 / comm.world_size())
        .log_every(steps)
        .report(ReportFormat::Off, None);
    if let Some(dir) = save {
        trainer = trainer.save(dir, None);
    }
    if let Some(dir) = resume {
        trainer = trainer.resume(dir);
    }
    trainer.fit(&mut model, &mut data, &CrossEntropyLoss).unwrap();
    parameter_hash(&model)
}

/// 30 steps straight, and 16 saved then resumed to 30 (compression starts after step 10), end
/// with the same bits: each rank's errors, Q and the step count came back.
fn resuming_changes_nothing(comm: &Communicator, dir: &Path) {
    let straight = run_low_rank(comm, 30, None, None);
    run_low_rank(comm, 16, Some(dir), None);
    assert!(dir.join("step-00000016").join("powersgd.safetensors").is_file());
    let resumed = run_low_rank(comm, 30, None, Some(dir));
    assert_eq!(resumed, straight, "a resumed PowerSGD run continues as if it had not stopped");
}

#[test]
fn a_resumed_run_continues_exactly_and_needs_as_many_ranks() {
    let comm = Communicator::single();
    let dir = common::scratch("powersgd-resume");
    let ck = dir.path().join("ck");
    resuming_changes_nothing(&comm, &ck);
    // Saved by one rank, its errors cannot be split among two.
    let mut model = LowRankClassifier::new(&comm, 5).unwrap();
    let mut optimizer = overlap::Sgd::new(0.05);
    let refused = overlap::checkpoint::load(&ck, &mut model, &mut optimizer, 0, 2).unwrap_err().to_string();
    assert!(refused.contains("error feedback of 1 rank(s); this run has 2"), "{refused}");
}

#[test]
fn two_ranks_resume_exactly() {
    if !common::mpirun_available() {
        return;
    }
    common::run_on_two_ranks_each_way("ranks_resume_powersgd");
}

#[test]
#[ignore = "runs under mpirun, started by two_ranks_resume_exactly"]
fn ranks_resume_powersgd() {
    let comm = common::test_communicator();
    // Rank 0's folder, for both: the checkpoint is written by rank 0 and read by every rank.
    let mine = common::scratch("powersgd-ranks");
    let mut path = [0u8; 512];
    let own = mine.path().to_str().unwrap().as_bytes();
    path[..own.len()].copy_from_slice(own);
    comm.broadcast_bytes_from_root(&mut path).unwrap();
    let end = path.iter().position(|&b| b == 0).unwrap();
    let shared = PathBuf::from(std::str::from_utf8(&path[..end]).unwrap());
    resuming_changes_nothing(&comm, &shared.join("ck"));
    comm.barrier().unwrap(); // Rank 0's folder outlives every rank's reads.
}

/// The `mlp_powersgd` example's model, to read its schedule here.
#[distributed_model(bucket_cap_mb = 8, first_bucket_mb = 1, grad_comm = powersgd(rank = 4))]
pub struct Mlp {
    fc1: Linear<784, 2048>,
    act1: Relu,
    fc2: Linear<2048, 2048>,
    act2: Relu,
    fc3: Linear<2048, 2048>,
    act3: Relu,
    head: Linear<2048, 10>,
}

#[test]
fn the_report_and_the_trace_show_the_factors_on_the_wire_and_the_compression() {
    if !common::mpirun_available() {
        return;
    }
    let dir = common::scratch("powersgd-report");
    let trace = dir.path().join("trace.json");
    let exe = common::example("mlp_powersgd");
    // 10 steps whole, then 14 compressed: the medians are compressed steps.
    let args = ["-n", "2", exe.to_str().unwrap(), "--steps", "24", "--batch", "8", "--report", "json"];
    let stdout = common::mpirun_ok(&[&args[..], &["--trace", trace.to_str().unwrap()]].concat());
    let report: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let buckets = report["buckets"].as_array().unwrap();
    for (k, b) in buckets.iter().enumerate() {
        assert_eq!(b["wire_format"], "rank 4");
        assert_eq!(b["wire_bytes"].as_u64().unwrap() as usize, Mlp::SCHEDULE.wire_bytes(k), "bucket {k}: {b}");
    }
    let (sent, full): (u64, u64) = buckets
        .iter()
        .map(|b| (b["wire_bytes"].as_u64().unwrap(), b["bytes"].as_u64().unwrap()))
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    assert!(full / sent >= 50, "{full} bytes of gradients, {sent} on the wire");
    assert!(report["compression_ms"].as_f64().unwrap() > 0.0, "{report}");
    // Every row of the report is of the compressed steps, and it says which it left out.
    assert_eq!((report["sent_whole_left_out"].as_u64(), report["first_step"].as_u64()), (Some(10), Some(11)));
    // Each compressed step of each rank: the compression's spans and two all-reduces per bucket.
    let trace: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    let named = |name: &str| events.iter().filter(|e| e["name"].as_str().is_some_and(|n| n.starts_with(name))).count();
    assert!(named("powersgd b0") >= 2 * 14 * 3, "compress, turnaround and decompression of b0");
    let all_reduces = events.iter().filter(|e| e["cat"] == "all-reduce").count();
    assert_eq!(all_reduces, 2 * (10 * 3 + 14 * 3 * 2), "per rank: 3 whole buckets for 10 steps, then 6 exchanges");
    // A run that ends before PowerSGD begins reports (and simulates) the whole buckets it sent.
    let args = ["-n", "2", exe.to_str().unwrap(), "--steps", "3", "--batch", "8", "--report", "json"];
    let stdout = common::mpirun_ok(&[&args[..], &["--link", "10gbe"]].concat());
    let report: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    for b in report["buckets"].as_array().unwrap() {
        assert!(b["wire_format"] == "fp32" && b["wire_bytes"] == b["bytes"], "{b}");
    }
}

#[test]
fn the_gpu_refuses_powersgd_before_it_opens_a_device() {
    let comm = Communicator::single();
    let mut model = LowRankClassifier::new(&comm, 5).unwrap();
    let mut data = SyntheticClassification::new(9, 64, 10);
    let refused = Trainer::new(&comm)
        .steps(2)
        .batch(8)
        .device(overlap::Device::Cuda { gpu: None })
        .report(ReportFormat::Off, None)
        .fit(&mut model, &mut data, &CrossEntropyLoss)
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("grad_comm = powersgd(rank = 4, start_iter = 10) is not supported on the GPU yet"),
        "{refused}"
    );
}
