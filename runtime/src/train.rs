//! The training loop every example runs: synthetic data sharded by rank, softmax cross-entropy,
//! the model's compiled backward/step, progress and throughput on rank 0.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use overlap_plan::Schedule;

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use overlap_plan::Width;

use crate::args::TrainArgs;
use crate::checkpoint::{self, Position};
use crate::comm::{CommMode, Communicator};
use crate::comm_bench;
use crate::data::{shard_start_after, SyntheticClassification, TrainingData};
use crate::device::{self, Device};
use crate::error::{Error, Result};
use crate::fault;
use crate::loss::CrossEntropyLoss;
use crate::model::DistributedModel;
use crate::observe::Observer;
use crate::optim::ChosenOptimizer;
use crate::params_file::save_params;
use crate::tensor::Matrix;
use crate::trace;

/// How long a failing rank waits for the others to fail too before aborting the job.
const ABORT_GRACE: Duration = Duration::from_secs(2);

/// What a run did, as rank 0 reports it.
#[derive(Clone, Debug)]
pub struct TrainSummary {
    pub steps: u64,
    pub world_size: usize,
    pub first_loss: f64,
    pub final_loss: f64,
    pub median_step: Duration,
    /// Samples per second over all ranks, from the median step time.
    pub samples_per_sec: f64,
}

impl TrainSummary {
    /// From the per-step times of steps `log.first_step..args.steps` and the losses `log` kept.
    pub(crate) fn new(args: &TrainArgs, world_size: usize, log: &LossLog, mut step_times: Vec<Duration>) -> Self {
        step_times.sort();
        let median_step = step_times[step_times.len() / 2];
        TrainSummary {
            steps: args.steps - log.first_step,
            world_size,
            first_loss: log.first,
            final_loss: log.last,
            median_step,
            samples_per_sec: (args.batch * args.accumulate * world_size) as f64 / median_step.as_secs_f64(),
        }
    }

    /// The closing line rank 0 prints.
    pub(crate) fn describe(&self, mode: CommMode) -> String {
        format!(
            "done: {} steps on {} rank(s) ({}), loss {:.4} -> {:.4}, median step {:.1} ms, {:.0} samples/s",
            self.steps,
            self.world_size,
            mode.name(),
            self.first_loss,
            self.final_loss,
            self.median_step.as_secs_f64() * 1e3,
            self.samples_per_sec,
        )
    }
}

/// Parses the command line, trains `M`, and turns any error into a message and a non-zero exit
/// status on the rank that hit it.
pub fn run_cli<M: DistributedModel>() -> ExitCode {
    let args = TrainArgs::parse();
    if args.cuda_libraries {
        return device::print_cuda_libraries().map_or_else(|e| report_error(&e), |()| ExitCode::SUCCESS);
    }
    if args.device == Device::Cuda {
        // Before MPI starts: this may start the program again with NCCL made findable.
        if let Err(e) = device::prepare_cuda_process() {
            return report_error(&e);
        }
    }
    let mut comm = match Communicator::from_env_with(args.all_reduce) {
        Ok(comm) => comm.with_mode(match (args.no_overlap, args.compute_only) {
            (true, _) => CommMode::AfterBackward,
            (_, true) => CommMode::Skip,
            _ => CommMode::Overlap,
        }),
        Err(e) => return report_error(&e),
    };
    if let Err(e) = comm.emulate_link(args.link) {
        return report_error(&e);
    }
    comm.set_wait_timeout(args.comm_timeout);
    comm.set_check_finite(args.check_finite);
    // Errors are reported while the communicator is alive; then the job ends: if every rank
    // failed alike they meet and exit, otherwise the others are waiting for this rank and
    // would wait forever, so MPI_Abort ends them.
    match run::<M>(&args, &comm) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let code = report_error(&e);
            comm.abort_job(ABORT_GRACE);
            code
        }
    }
}

fn run<M: DistributedModel>(args: &TrainArgs, comm: &Communicator) -> Result<()> {
    let rank = comm.rank();
    if args.print_schedule {
        if rank == 0 {
            print!("{}", M::SCHEDULE);
        }
        return Ok(());
    }
    match args.device {
        Device::Cpu => use_threads(args.threads, rank),
        Device::Cuda if args.threads > 1 && rank == 0 => {
            eprintln!("note: --threads has no effect with --device cuda: the GPU runs the products")
        }
        Device::Cuda => {}
    }
    match args.device {
        Device::Cpu if args.comm_only => comm_bench::run::<M>(args, comm)?,
        Device::Cpu => _ = train::<M>(args, comm)?,
        Device::Cuda => _ = device::train_on_gpu::<M>(args, comm)?,
    };
    Ok(())
}

fn report_error(e: &Error) -> ExitCode {
    let rank = std::env::var("OMPI_COMM_WORLD_RANK").unwrap_or_else(|_| "0".into());
    // One write, so mpirun does not interleave it with other ranks' messages.
    let message = format!("rank {rank}: error: {e}\n");
    let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), message.as_bytes());
    ExitCode::FAILURE
}

/// Runs this process's matrix products on `threads` threads, with a note (rank 0) when fewer
/// cores than that are open to it: mpirun binds each rank to one core unless told otherwise.
fn use_threads(threads: usize, rank: usize) {
    crate::threads::set(threads);
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    if threads > cores && rank == 0 {
        eprintln!(
            "note: --threads {threads}, but this process may run on only {cores} core(s); its threads \
             take turns there. Give each rank more cores, e.g. mpirun --map-by slot:PE={threads} \
             (or --bind-to none)"
        );
    }
}

/// Trains `M` for `args.steps` optimizer steps on `comm`'s ranks.
pub fn train<M: DistributedModel>(args: &TrainArgs, comm: &Communicator) -> Result<TrainSummary> {
    let schedule = M::SCHEDULE;
    let data = training_data(args, &schedule)?;
    let (rank, world) = (comm.rank(), comm.world_size());

    let mut model = M::new(comm, args.seed)?;
    let mut optimizer = ChosenOptimizer::from_args(args);
    let mut position = resume(args, &mut model, &mut optimizer, rank)?;
    let global_batch = (args.batch * args.accumulate * world) as u64;
    let mut saves = 0u64;
    let mut grads = model.new_grads();
    let mut ws = M::Workspace::default();
    let (mut inputs, mut labels, mut grad_logits) = (Matrix::default(), Vec::new(), Matrix::default());

    let mut observer = Observer::start(args, comm, schedule.clone())?;
    if let (0, Some(link), 1) = (rank, args.link, world) {
        eprintln!("note: --link {link} has no effect with one rank: there is nothing to all-reduce");
    }
    let first_step = position.next_step;
    let progress = progress_bar(rank == 0, args.steps);
    progress.set_position(first_step);
    let mut step_times = Vec::with_capacity(args.steps as usize);
    let mut log = LossLog::new(first_step);
    for step in position.next_step..args.steps {
        fault::at_step(rank, step);
        trace::set_step(step);
        let started = Instant::now();
        let step_span = trace::step();
        let mut loss = 0.0f64;
        for micro in 0..args.accumulate {
            let first = shard_start_after(position.samples_seen, micro, world, rank, args.batch);
            data.fill(first, args.batch, &mut inputs, &mut labels);
            let logits = model.forward(&inputs, &mut ws);
            let loss_span = trace::loss();
            loss += f64::from(CrossEntropyLoss.forward_backward(logits, &labels, &mut grad_logits));
            drop(loss_span);
            if fault::poison_gradient(rank, step) {
                grad_logits.as_mut_slice()[0] = f32::NAN;
            }
            if micro + 1 < args.accumulate {
                model.backward_no_sync(&mut ws, &grad_logits, &mut grads);
            }
        }
        let in_flight = model.backward(&mut ws, &grad_logits, grads, comm, &mut optimizer);
        grads = model.step(in_flight, &mut optimizer).map_err(|e| name_parameter(e, &schedule, step))?;
        drop(step_span);
        position = Position { next_step: step + 1, samples_seen: position.samples_seen + global_batch };
        step_times.push(started.elapsed());
        progress.inc(1);

        if log.logs(args, step) {
            log.record(LoggedStep { args, comm, observer: &observer, progress: &progress }, step, loss, started)?;
        }
        progress.suspend(|| observer.after_step(step, comm))?;
        if let (0, Some(dir), true) = (rank, &args.save, saves_after(args, step)) {
            saves += 1;
            let written = checkpoint::save(dir, &model, &optimizer, position, saves)?;
            progress.suspend(|| observer.say(&format!("checkpoint: {}", written.display())));
        }
    }
    progress.finish_and_clear();
    if let (0, Some(path)) = (rank, &args.save_params) {
        save_params(&model, path)?;
    }
    comm.barrier()?;

    let summary = TrainSummary::new(args, world, &log, step_times);
    observer.say(&format!("{}{}", summary.describe(comm.mode()), observer.emulation_note()));
    observer.finish(comm)?;
    Ok(summary)
}

/// Which steps log their loss (the first, every --log-every, the last) and the first and last
/// global losses logged.
pub(crate) struct LossLog {
    first_step: u64,
    first: f64,
    last: f64,
}

/// What printing one step's loss line needs.
pub(crate) struct LoggedStep<'a> {
    pub args: &'a TrainArgs,
    pub comm: &'a Communicator,
    pub observer: &'a Observer<'a>,
    pub progress: &'a ProgressBar,
}

impl LossLog {
    pub(crate) fn new(first_step: u64) -> Self {
        LossLog { first_step, first: f64::NAN, last: f64::NAN }
    }

    pub(crate) fn logs(&self, args: &TrainArgs, step: u64) -> bool {
        step == self.first_step || (step + 1).is_multiple_of(args.log_every) || step + 1 == args.steps
    }

    /// Averages `loss` (this rank's, summed over its micro-steps) over micro-steps and ranks,
    /// keeps it, and prints the step's line with the throughput since `started`.
    pub(crate) fn record(&mut self, at: LoggedStep, step: u64, loss: f64, started: Instant) -> Result<()> {
        let LoggedStep { args, comm, observer, progress } = at;
        let world = comm.world_size();
        let global = comm.sum_f64(loss / args.accumulate as f64)? / world as f64;
        if step == self.first_step {
            self.first = global;
        }
        self.last = global;
        let rate = (args.batch * args.accumulate * world) as f64 / started.elapsed().as_secs_f64();
        let note = observer.emulation_note();
        progress
            .suspend(|| observer.say(&format!("step {:>6}  loss {global:.4}  {rate:>8.0} samples/s{note}", step + 1)));
        Ok(())
    }
}

/// Where training starts: step 0, or the newest checkpoint of `--resume` (loaded into `model`
/// and `optimizer`), which must be before `--steps`.
pub(crate) fn resume<M: DistributedModel>(
    args: &TrainArgs,
    model: &mut M,
    optimizer: &mut ChosenOptimizer,
    rank: usize,
) -> Result<Position> {
    let mut position = Position { next_step: 0, samples_seen: 0 };
    if let Some(dir) = &args.resume {
        position = checkpoint::load(dir, model, optimizer)?;
        if rank == 0 {
            eprintln!("resumed from {} at step {}", dir.display(), position.next_step);
        }
    }
    if position.next_step >= args.steps {
        return Err(Error::Config(format!(
            "the checkpoint is at step {}, and --steps {} is the total to reach: nothing to do",
            position.next_step, args.steps
        )));
    }
    Ok(position)
}

/// Whether step `step` (0-based) ends with a checkpoint: the last one, and every --save-every.
pub(crate) fn saves_after(args: &TrainArgs, step: u64) -> bool {
    args.save.is_some() && (step + 1 == args.steps || args.save_every.is_some_and(|n| (step + 1).is_multiple_of(n)))
}

/// The synthetic set, or the IDX files of `--data`, shaped for the model's input and output.
pub(crate) fn training_data(args: &TrainArgs, schedule: &Schedule) -> Result<TrainingData> {
    let (features, classes) =
        io_widths(&schedule.layers.iter().map(|l| l.width).collect::<Vec<_>>()).ok_or_else(|| {
            Error::Config(format!("{} has no layer with fixed widths, so its input size is unknown", schedule.model))
        })?;
    Ok(match &args.data {
        None => {
            TrainingData::Synthetic(SyntheticClassification::new(args.seed.wrapping_add(0x5eed), features, classes))
        }
        Some(dir) => TrainingData::from_idx_dir(dir, features, classes)?,
    })
}

/// Input width of the first fixed-width layer and output width of the last one.
fn io_widths(widths: &[Width]) -> Option<(usize, usize)> {
    let fixed = || {
        widths.iter().filter_map(|w| if let Width::Fixed { input, output } = *w { Some((input, output)) } else { None })
    };
    Some((fixed().next()?.0, fixed().next_back()?.1))
}

pub(crate) fn progress_bar(visible: bool, steps: u64) -> ProgressBar {
    if !visible {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(steps);
    if let Ok(style) = ProgressStyle::with_template("{bar:40} {pos}/{len} steps [{elapsed_precise} < {eta_precise}]") {
        bar.set_style(style);
    }
    bar
}

/// A non-finite gradient found at a wait point, named by parameter and step.
fn name_parameter(e: Error, schedule: &Schedule, step: u64) -> Error {
    let Error::NonFiniteGradient { bucket, offset, value } = e else { return e };
    let found = schedule.buckets.get(bucket).and_then(|b| {
        b.params.iter().find_map(|&p| {
            let info = schedule.param(p);
            (info.offset..info.offset + info.numel())
                .contains(&offset)
                .then(|| (schedule.param_name(p), offset - info.offset))
        })
    });
    match found {
        Some((param, element)) => Error::NonFiniteParameter { param, element, step: step + 1, value },
        None => Error::NonFiniteGradient { bucket, offset, value },
    }
}
