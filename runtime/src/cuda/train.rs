//! The training loop on the GPU: the same data, sharding, logging, report and trace as the CPU
//! loop, with the step queued on the GPU and one host synchronisation at its end.

use std::time::Instant;

use super::{check_supported, Gpu, GpuComm, GpuModel, GpuOptimizer, Timeline};
use crate::args::TrainArgs;
use crate::checkpoint::{self, Position};
use crate::comm::{CommMode, Communicator};
use crate::data::shard_start_after;
use crate::device::gpu_ordinal;
use crate::error::{Error, Result};
use crate::fault;
use crate::model::{grad_scale, DistributedModel};
use crate::observe::Observer;
use crate::optim::ChosenOptimizer;
use crate::params_file::save_params;
use crate::tensor::Matrix;
use crate::trace;
use crate::train::{progress_bar, resume, saves_after, training_data, LoggedStep, LossLog, TrainSummary};

/// Trains `M` on this rank's GPU for `args.steps` steps.
pub fn train<M: DistributedModel>(args: &TrainArgs, comm: &Communicator) -> Result<TrainSummary> {
    refuse_cpu_only_flags(args)?;
    check_supported::<M>()?;
    let schedule = M::SCHEDULE;
    let data = training_data(args, &schedule)?;
    let (rank, world) = (comm.rank(), comm.world_size());
    let gpu = Gpu::open(gpu_ordinal(args))?;
    let mut model = M::new(comm, args.seed)?;
    // A checkpoint loads into host structures first, then goes to the device with the model.
    let mut restored = ChosenOptimizer::from_args(args);
    let mut position = resume(args, &mut model, &mut restored, rank)?;
    let mut device = GpuModel::new(&gpu, &model, args.batch, GpuOptimizer::like(&restored, args))?;
    device.load_state(&gpu, &restored)?;
    drop(restored);
    let mut observer = Observer::start(args, comm, schedule.clone())?;
    let mut timeline = Timeline::new(trace::is_enabled());
    let gpu_comm = GpuComm::new(&gpu, comm, timeline.is_enabled())?;
    if rank == 0 {
        observer.say(&format!("training {} on {} per rank", schedule.model, gpu.describe()));
    }

    let first_step = position.next_step;
    let mut saves = 0u64;
    let progress = progress_bar(rank == 0, args.steps);
    progress.set_position(first_step);
    let (mut inputs, mut labels, mut labels32) = (Matrix::default(), Vec::new(), Vec::new());
    let mut step_times = Vec::with_capacity(args.steps as usize);
    let mut log = LossLog::new(first_step);
    let global_batch = (args.batch * args.accumulate * world) as u64;
    for step in first_step..args.steps {
        fault::at_step(rank, step);
        trace::set_step(step);
        let started = Instant::now();
        timeline.begin_step(&gpu)?;
        let step_span = trace::step();
        let logging = log.logs(args, step);
        let mut loss = 0.0;
        let mut in_flight = Vec::new();
        for micro in 0..args.accumulate {
            let first = shard_start_after(position.samples_seen, micro, world, rank, args.batch);
            data.fill(first, args.batch, &mut inputs, &mut labels);
            labels32.clear();
            labels32.extend(labels.iter().map(|&l| l as u32));
            device.forward_loss(&gpu, inputs.as_slice(), &labels32, &mut timeline)?;
            if logging {
                // Copies the loss out, which waits for the GPU: only on the steps that log.
                loss += device.loss(&gpu)?;
            }
            let last = micro + 1 == args.accumulate;
            let mode = if last { comm.mode() } else { CommMode::Skip };
            let buckets = device.backward(&gpu, &gpu_comm, (mode, micro > 0), &mut timeline)?;
            if last {
                in_flight = buckets;
            } else {
                device.keep_gradients(&gpu, buckets)?;
            }
        }
        let reducing = if comm.mode() == CommMode::Skip { 1 } else { world };
        device.step(&gpu, in_flight, grad_scale(reducing, args.accumulate), &mut timeline)?;
        gpu.synchronize()?;
        drop(step_span);
        timeline.end_step()?;
        position = Position { next_step: step + 1, samples_seen: position.samples_seen + global_batch };
        step_times.push(started.elapsed());
        progress.inc(1);
        if logging {
            log.record(LoggedStep { args, comm, observer: &observer, progress: &progress }, step, loss, started)?;
        }
        progress.suspend(|| observer.after_step(step, comm))?;
        if let (0, Some(dir), true) = (rank, &args.save, saves_after(args, step)) {
            saves += 1;
            let mut snapshot = ChosenOptimizer::from_args(args);
            device.save_state(&gpu, &mut model, &mut snapshot)?;
            let written = checkpoint::save(dir, &model, &snapshot, position, saves)?;
            progress.suspend(|| observer.say(&format!("checkpoint: {}", written.display())));
        }
    }
    progress.finish_and_clear();
    if let (0, Some(path)) = (rank, &args.save_params) {
        device.download(&gpu, &mut model)?;
        save_params(&model, path)?;
    }
    comm.barrier()?;
    let summary = TrainSummary::new(args, world, &log, step_times);
    observer.say(&format!("{} on {}", summary.describe(comm.mode()), gpu.describe()));
    observer.finish(comm)?;
    Ok(summary)
}

/// Flags whose machinery exists only on the CPU so far, refused together with one message.
fn refuse_cpu_only_flags(args: &TrainArgs) -> Result<()> {
    let refused: Vec<&str> = [
        (args.comm_only, "--comm-only"),
        (args.link.is_some(), "--link"),
        (args.comm_timeout.is_some(), "--comm-timeout"),
        (args.check_finite, "--check-finite"),
        (args.write_profile.is_some(), "--write-profile"),
        (!args.simulate.is_empty(), "--simulate"),
    ]
    .into_iter()
    .filter_map(|(set, flag)| set.then_some(flag))
    .collect();
    if refused.is_empty() {
        Ok(())
    } else {
        Err(Error::Config(format!("not supported with --device cuda yet: {}", refused.join(", "))))
    }
}
