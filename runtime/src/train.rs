//! The training loop every example runs: synthetic data sharded by rank, softmax cross-entropy,
//! the model's compiled backward/step, progress and throughput on rank 0.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use overlap_plan::Width;

use crate::args::{OptimizerKind, TrainArgs};
use crate::comm::{CommMode, Communicator};
use crate::data::{shard_start, SyntheticClassification};
use crate::error::{Error, Result};
use crate::loss::CrossEntropyLoss;
use crate::model::DistributedModel;
use crate::observe::Observer;
use crate::optim::{AdamW, Optimizer, Sgd};
use crate::params_file::save_params;
use crate::tensor::Matrix;
use crate::trace;

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

/// Parses the command line, trains `M`, and turns any error into a message and a non-zero exit
/// status on the rank that hit it.
pub fn run_cli<M: DistributedModel>() -> ExitCode {
    let args = TrainArgs::parse();
    let mut comm = match Communicator::from_env() {
        Ok(comm) => comm.with_mode(if args.no_overlap { CommMode::AfterBackward } else { CommMode::Overlap }),
        Err(e) => return report_error(&e),
    };
    if let Err(e) = comm.emulate_link(args.link) {
        return report_error(&e);
    }
    // Errors are reported while the communicator is alive: finalising MPI synchronises the
    // ranks, so every rank gets to say why it stops before mpirun ends the job.
    match run::<M>(&args, &comm) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => report_error(&e),
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
    train::<M>(args, comm)?;
    Ok(())
}

fn report_error(e: &Error) -> ExitCode {
    let rank = std::env::var("OMPI_COMM_WORLD_RANK").unwrap_or_else(|_| "0".into());
    // One write, so mpirun does not interleave it with other ranks' messages.
    let message = format!("rank {rank}: error: {e}\n");
    let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), message.as_bytes());
    ExitCode::FAILURE
}

/// Trains `M` for `args.steps` optimizer steps on `comm`'s ranks.
pub fn train<M: DistributedModel>(args: &TrainArgs, comm: &Communicator) -> Result<TrainSummary> {
    let schedule = M::SCHEDULE;
    let (features, classes) =
        io_widths(&schedule.layers.iter().map(|l| l.width).collect::<Vec<_>>()).ok_or_else(|| {
            Error::Config(format!("{} has no layer with fixed widths, so its input size is unknown", schedule.model))
        })?;
    let data = SyntheticClassification::new(args.seed.wrapping_add(0x5eed), features, classes);
    let (rank, world) = (comm.rank(), comm.world_size());

    let mut model = M::new(comm, args.seed)?;
    let mut optimizer = ChosenOptimizer::from_args(args);
    let mut grads = model.new_grads();
    let mut ws = M::Workspace::default();
    let (mut inputs, mut labels, mut grad_logits) = (Matrix::default(), Vec::new(), Matrix::default());

    let mut observer = Observer::start(args, comm, schedule.clone())?;
    if let (0, Some(link), 1) = (rank, args.link, world) {
        eprintln!("note: --link {link} has no effect with one rank: there is nothing to all-reduce");
    }
    let progress = progress_bar(rank == 0, args.steps);
    let mut step_times = Vec::with_capacity(args.steps as usize);
    let (mut first_loss, mut final_loss) = (f64::NAN, f64::NAN);
    for step in 0..args.steps {
        trace::set_step(step);
        let started = Instant::now();
        let step_span = trace::step();
        let mut loss = 0.0f64;
        for micro in 0..args.accumulate {
            let first = shard_start(step, micro, args.accumulate, world, rank, args.batch);
            data.fill(first, args.batch, &mut inputs, &mut labels);
            let logits = model.forward(&inputs, &mut ws);
            let loss_span = trace::loss();
            loss += f64::from(CrossEntropyLoss.forward_backward(logits, &labels, &mut grad_logits));
            drop(loss_span);
            if micro + 1 < args.accumulate {
                model.backward_no_sync(&mut ws, &grad_logits, &mut grads);
            }
        }
        let in_flight = model.backward(&mut ws, &grad_logits, grads, comm);
        grads = model.step(in_flight, &mut optimizer)?;
        drop(step_span);
        step_times.push(started.elapsed());
        progress.inc(1);

        if step == 0 || (step + 1) % args.log_every == 0 || step + 1 == args.steps {
            let global = comm.sum_f64(loss / args.accumulate as f64)? / world as f64;
            if step == 0 {
                first_loss = global;
            }
            final_loss = global;
            let rate = (args.batch * args.accumulate * world) as f64 / started.elapsed().as_secs_f64();
            let note = observer.emulation_note();
            progress.suspend(|| {
                observer.say(&format!("step {:>6}  loss {global:.4}  {rate:>8.0} samples/s{note}", step + 1))
            });
        }
        progress.suspend(|| observer.after_step(step, comm))?;
    }
    progress.finish_and_clear();
    if let (0, Some(path)) = (rank, &args.save_params) {
        save_params(&model, path)?;
    }
    comm.barrier()?;

    step_times.sort();
    let median_step = step_times[step_times.len() / 2];
    let summary = TrainSummary {
        steps: args.steps,
        world_size: world,
        first_loss,
        final_loss,
        median_step,
        samples_per_sec: (args.batch * args.accumulate * world) as f64 / median_step.as_secs_f64(),
    };
    observer.say(&format!(
        "done: {} steps on {} rank(s) ({}), loss {:.4} -> {:.4}, median step {:.1} ms, {:.0} samples/s{}",
        summary.steps,
        summary.world_size,
        comm.mode().name(),
        summary.first_loss,
        summary.final_loss,
        summary.median_step.as_secs_f64() * 1e3,
        summary.samples_per_sec,
        observer.emulation_note(),
    ));
    observer.finish(comm)?;
    Ok(summary)
}

/// Input width of the first fixed-width layer and output width of the last one.
fn io_widths(widths: &[Width]) -> Option<(usize, usize)> {
    let fixed = || {
        widths.iter().filter_map(|w| if let Width::Fixed { input, output } = *w { Some((input, output)) } else { None })
    };
    Some((fixed().next()?.0, fixed().next_back()?.1))
}

fn progress_bar(visible: bool, steps: u64) -> ProgressBar {
    if !visible {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(steps);
    if let Ok(style) = ProgressStyle::with_template("{bar:40} {pos}/{len} steps [{elapsed_precise} < {eta_precise}]") {
        bar.set_style(style);
    }
    bar
}

/// The optimizer the command line asked for.
enum ChosenOptimizer {
    Sgd(Sgd),
    AdamW(AdamW),
}

impl ChosenOptimizer {
    fn from_args(args: &TrainArgs) -> Self {
        match args.optimizer {
            OptimizerKind::Sgd => ChosenOptimizer::Sgd(
                Sgd::new(args.lr.unwrap_or(0.05))
                    .momentum(args.momentum)
                    .weight_decay(args.weight_decay.unwrap_or(0.0)),
            ),
            OptimizerKind::Adamw => ChosenOptimizer::AdamW(
                AdamW::new(args.lr.unwrap_or(1e-3)).weight_decay(args.weight_decay.unwrap_or(0.01)),
            ),
        }
    }
}

impl Optimizer for ChosenOptimizer {
    fn begin_step(&mut self) {
        match self {
            ChosenOptimizer::Sgd(o) => o.begin_step(),
            ChosenOptimizer::AdamW(o) => o.begin_step(),
        }
    }

    fn update(&mut self, index: usize, value: &mut [f32], grad: &[f32], grad_scale: f32) {
        match self {
            ChosenOptimizer::Sgd(o) => o.update(index, value, grad, grad_scale),
            ChosenOptimizer::AdamW(o) => o.update(index, value, grad, grad_scale),
        }
    }
}
