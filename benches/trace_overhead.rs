//! What recording costs: nanoseconds per span with recording off and on, and whole training
//! steps with recording off and on, measured side by side (alternating runs, medians).
//!
//! ```text
//! cargo bench --bench trace_overhead
//! ```

use std::hint::black_box;
use std::time::Instant;

use clap::Parser;
use overlap::prelude::*;
use overlap::{trace, Communicator};
use overlap_cli::TrainArgs;

/// The `mlp` example's model.
#[distributed_model(bucket_cap_mb = 8, first_bucket_mb = 1)]
pub struct Mlp {
    fc1: Linear<784, 2048>,
    act1: Relu,
    fc2: Linear<2048, 2048>,
    act2: Relu,
    fc3: Linear<2048, 2048>,
    act3: Relu,
    head: Linear<2048, 10>,
}

const SPANS: u32 = 1_000_000;

fn ns_per_span() -> f64 {
    let started = Instant::now();
    for i in 0..SPANS {
        drop(black_box(trace::backward(black_box(i as usize % 7))));
    }
    let ns = started.elapsed().as_nanos() as f64 / f64::from(SPANS);
    let _ = trace::take();
    ns
}

fn median_step_ms(steps: &str, extra: &[&str]) -> f64 {
    let mut argv = vec!["bench", "--steps", steps, "--log-every", "1000"];
    argv.extend_from_slice(extra);
    let args = TrainArgs::parse_from(argv);
    let summary = overlap_cli::train::<Mlp>(&args, &Communicator::single()).expect("training runs");
    summary.median_step.as_secs_f64() * 1e3
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs this too, without it, and
    // then a short smoke run is enough.
    let full = std::env::args().any(|a| a == "--bench");
    let (runs, steps) = if full { (5, "30") } else { (1, "3") };
    trace::stop();
    let off = ns_per_span();
    trace::start(0, SPANS as usize, std::time::Instant::now());
    let on = ns_per_span();
    trace::stop();
    let spans_per_step = 2 * Mlp::SCHEDULE.layers.len() + 3 * Mlp::SCHEDULE.buckets.len() + 2;

    let trace_file = std::env::temp_dir().join("overlap-trace-overhead.json");
    let (mut steps_off, mut steps_on) = (vec![], vec![]);
    for _ in 0..runs {
        steps_off.push(median_step_ms(steps, &["--report", "off"]));
        steps_on.push(median_step_ms(steps, &["--report", "off", "--trace", trace_file.to_str().unwrap()]));
    }
    let _ = std::fs::remove_file(&trace_file);
    let (step_off, step_on) = (trace::median(steps_off.iter().copied()), trace::median(steps_on.iter().copied()));
    println!(
        "\ntrace overhead (Mlp 784-2048-2048-2048-10, batch 64, one process, {runs} alternating runs of {steps} steps)"
    );
    println!("  span, recording off: {off:8.1} ns   on: {on:8.1} ns   ({spans_per_step} spans per step)");
    println!(
        "  per step from span cost: off {:.4}% of a step, on {:.4}%",
        spans_per_step as f64 * off / (step_off * 1e6) * 100.0,
        spans_per_step as f64 * on / (step_off * 1e6) * 100.0
    );
    println!("  median step, recording off: {step_off:.2} ms  {steps_off:.2?}");
    println!("  median step, recording on:  {step_on:.2} ms  {steps_on:.2?}");
    println!("  on / off: {:.4}", step_on / step_off);
}
