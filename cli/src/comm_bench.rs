//! `--comm-only`: the communication of a training step without its compute. Each step launches
//! the all-reduce of every bucket of the model's schedule, in launch order, then waits for each;
//! the buckets have the model's sizes, so this is the `communication` term of the bound
//! `max(compute, communication)`, measured under the same communicator, thread and link (for a
//! model compiled with PowerSGD, that of the steps that send its buckets whole: a note says so).

use std::time::Instant;

use overlap_runtime::comm::{Communicator, GradBucket, InFlight};
use overlap_runtime::command_line::console;
use overlap_runtime::memory::RunShape;
use overlap_runtime::observe::Observer;
use overlap_runtime::{trace, train, DistributedModel, Result};

use crate::args::TrainArgs;

/// Runs `args.steps` communication-only steps of `M`'s buckets; reports like a training run.
pub fn run<M: DistributedModel>(args: &TrainArgs, comm: &Communicator) -> Result<()> {
    let schedule = M::SCHEDULE;
    // As a training run: the same schedule, wire formats and settings on every rank, or none
    // starts (another model's buckets would leave a collective waiting).
    comm.check_same_schedule(&schedule)?;
    train::agree_on_settings(&args.train_config(), comm)?;
    let mut buckets: Vec<GradBucket> =
        schedule.buckets.iter().enumerate().map(|(k, b)| GradBucket::zeros(k, b.numel).in_format(b.wire)).collect();
    let mut in_flight: Vec<InFlight> = Vec::with_capacity(buckets.len());
    let observe = args.observe_config();
    let shape = RunShape {
        steps: args.steps,
        batch: args.batch,
        accumulate: 1,
        optimizer_buffers: 0,
        optimizer_shards: 1,
        activation_bytes: Some(0),
        trains: false,
    };
    // As a training run: what the report and the trace keep must fit at rank 0.
    train::check_recording(&args.train_config(), &schedule, &shape, comm.world_size())?;
    let mut observer = Observer::start(&observe, shape, comm, schedule.clone())?;
    if schedule.shard_optimizer && comm.world_size() > 1 && comm.rank() == 0 {
        console::err_line(&format!(
            "note: {} shards its optimizer state, so its steps reduce-scatter each bucket and all-gather it in \
             the next forward; --comm-only times whole all-reduces, which move the same bytes in one collective",
            schedule.model
        ));
    }
    let compressed = schedule.buckets.iter().find_map(|b| b.low_rank).filter(|_| args.grad_comm.is_none());
    if let (Some(low_rank), true, 0) = (compressed, comm.world_size() > 1, comm.rank()) {
        console::err_line(&format!(
            "note: {} sends PowerSGD's factors after its first {} steps ({low_rank}); they are computed from the \
             gradients, which --comm-only does not compute, so it times every bucket sent whole in FP32, as those \
             first steps send them (the report of a training run shows the factors' bytes)",
            schedule.model, low_rank.start_iter
        ));
    }
    let mut times = Vec::with_capacity(args.steps.min(1 << 20) as usize);
    for step in 0..args.steps {
        trace::set_step(step);
        let started = Instant::now();
        let span = trace::step();
        in_flight.extend(buckets.drain(..).map(|b| comm.all_reduce_async(b)));
        comm.backward_done();
        for handle in in_flight.drain(..) {
            buckets.push(handle.wait()?);
        }
        drop(span);
        times.push(started.elapsed());
        observer.after_step(step, comm)?;
    }
    comm.barrier()?;
    // As the report and a training run's last line take it: two middle values are averaged.
    let median = overlap_runtime::trace::median(times.iter().map(std::time::Duration::as_secs_f64));
    let steps = if args.steps == 1 { "step" } else { "steps" };
    observer.say(&format!(
        "done: {} communication-only {steps} on {} rank(s), median step {:.1} ms{}",
        args.steps,
        comm.world_size(),
        median * 1e3,
        observer.emulation_note()
    ));
    observer.finish(comm)
}
