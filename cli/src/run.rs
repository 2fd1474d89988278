//! A run, from parsed flags to its end: what each rank does (print the schedule, sample, time the
//! all-reduces, or train), the checks before it starts, and an error turned into a message and an
//! exit status on the rank that hit it.

use std::process::ExitCode;

use overlap_runtime::plan::{plan_buckets, BucketLimits, Schedule};
use overlap_runtime::train::{TrainSummary, Trainer};
use overlap_runtime::{
    command_line::{blas_core, console},
    device, Communicator, CrossEntropyLoss, DistributedModel, Error, Result,
};

use crate::args::{self, TrainArgs};
use crate::progress::Bar;
use crate::{comm_bench, datasets, example_defaults, flags, outputs, sample_text, sampling, start, unused_flags};

/// Before anything starts: this may start the program again with OpenBLAS's kernels named.
pub(crate) fn fit_blas_kernels() {
    if let Err(why) = blas_core::restart_with_fitting_kernels() {
        console::err_line(&format!("note: {why}; the products run on OpenBLAS's slower kernels"));
    }
}

pub(crate) fn run_main<M: DistributedModel>(args: TrainArgs) -> ExitCode {
    if args.cuda_libraries {
        return device::print_cuda_libraries().map_or_else(|e| report_error(&e), |()| ExitCode::SUCCESS);
    }
    if args.device == args::Device::Cuda {
        // Before MPI starts: this may start the program again with NCCL made findable.
        if let Err(e) = device::prepare_cuda_process() {
            return report_error(&e);
        }
    }
    // One value configures the run's communication: the communicator starts with it, and the
    // `Trainer` applies the same value again (`TrainConfig::comm`).
    let comm = match Communicator::start_with(&args.comm_config()) {
        Ok(comm) => comm,
        Err(e) => return report_error(&e),
    };
    // Errors are reported while the communicator is alive; then the job ends: if every rank
    // failed alike they meet and exit, otherwise the others are waiting for this rank and
    // would wait forever, so MPI_Abort ends them.
    match run::<M>(&args, &comm) {
        Ok(()) => ExitCode::SUCCESS,
        // Every rank agreed to stop after the same step: no abort, one message, 128 + signal.
        Err(e @ Error::Stopped { signal, .. }) => {
            if comm.rank() == 0 {
                console::err_line(&flags::in_flag_terms(&e.to_string()));
            }
            ExitCode::from(u8::try_from(128 + signal).unwrap_or(u8::MAX))
        }
        Err(e) => {
            let code = report_error(&e);
            comm.abort_job(overlap_runtime::comm::ABORT_GRACE);
            code
        }
    }
}

fn run<M: DistributedModel>(args: &TrainArgs, comm: &Communicator) -> Result<()> {
    let rank = comm.rank();
    // Before anything else, whatever the ranks do next: ranks of different shapes would plan
    // different collectives (every rank's binary holds the same shapes, so all or none compare).
    if let Some(shape) = args.model_shape() {
        if let Err(differ) = overlap_runtime::train::agree(comm, &[("the model's shape", shape.to_string())]) {
            // A rank that could not read its start file's shape took the default: it says why.
            return Err(start::unreadable_start(args).unwrap_or(differ));
        }
    }
    let read_as;
    let args = match datasets::data_for_language_model::<M>(args, rank) {
        Some(args) => {
            read_as = args;
            &read_as
        }
        None => args,
    };
    if rank == 0 {
        unused_flags::notes(args, comm.world_size()).iter().for_each(|note| console::err_line(note));
    }
    same_mode_on_every_rank(args, comm)?;
    if let Some(which) = args.print_schedule {
        if rank == 0 {
            if which == args::PrintSchedule::Ddp {
                console::out_line(
                    "PyTorch DDP's rebuilt buckets at its default caps for these layers (not the plan this binary runs):",
                );
            }
            console::out(&printed_schedule(&M::SCHEDULE, which)?.to_string());
            if which == args::PrintSchedule::Compiled {
                M::PLAN_NOTES.iter().for_each(|line| console::out_line(line));
            }
        }
        return Ok(());
    }
    refuse_contradictions(args)?;
    if args.device == args::Device::Cuda {
        refuse_cpu_only_flags(args)?;
    }
    // A sample from --init-params alone (--steps 0) reads back --context positions too.
    let sampling_a_file = args.steps == 0 && args.init_params.is_some();
    if args.context.is_some() && args.text.is_none() && args.tokens.is_none() && !sampling_a_file {
        return Err(Error::Config("--context sets the length of --text or --tokens samples; neither is given".into()));
    }
    if args.steps == 0 {
        return sampling::sample_only::<M>(args, comm);
    }
    if args.comm_only {
        return comm_bench::run::<M>(args, comm);
    }
    let world = comm.world_size();
    if args.compute_only && world > 1 {
        // As the `Trainer` refuses to save them or measure their held-out loss: no rank's
        // parameters are the run's result.
        if args.sample > 0 {
            return Err(Error::Config(format!(
                "--compute-only sums no gradients, so on {world} ranks each rank's parameters drift apart and none \
                 is the run's result: it has nothing to do with --sample"
            )));
        }
        if args.validation_every().is_some() && !args.gave("eval_every") {
            if comm.rank() == 0 {
                console::err_line(&format!(
                    "note: --compute-only on {world} ranks measures no held-out loss (each rank's parameters drift \
                     apart): the example's --eval-every is not applied"
                ));
            }
            let mut without = args.clone();
            without.eval_every = Some(0);
            return train::<M>(&without, comm).map(drop);
        }
    }
    train::<M>(args, comm).map(drop)
}

/// What a rank does: print the schedule, sample from saved parameters, time the all-reduces
/// alone, or train. Each runs collectives of its own, so ranks given different ones would wait
/// on each other until the timeout: they agree first, and a difference names each rank's.
fn same_mode_on_every_rank(args: &TrainArgs, comm: &Communicator) -> Result<()> {
    const MODES: [&str; 4] = ["trains", "prints the schedule (--print-schedule)", "samples (--steps 0)", "--comm-only"];
    let mode = |a: &TrainArgs| match (a.print_schedule.is_some(), a.steps == 0, a.comm_only) {
        (true, _, _) => 1,
        (_, true, _) => 2,
        (_, _, true) => 3,
        _ => 0,
    };
    let all = comm.all_gather_u64(mode(args))?;
    if all.iter().all(|&m| m == all[0]) {
        return Ok(());
    }
    let each: Vec<String> = all
        .iter()
        .enumerate()
        .map(|(rank, &m)| format!("rank {rank} {}", MODES.get(m as usize).copied().unwrap_or("?")))
        .collect();
    Err(Error::Config(format!(
        "the ranks were told to do different things: {}; give every rank the same flags",
        each.join(", ")
    )))
}

/// Trains `M` as the flags say, on the synthetic set or `--data` (the `Trainer` writes
/// `--save-params` and the other outputs).
pub fn train<M: DistributedModel>(args: &TrainArgs, comm: &Communicator) -> Result<TrainSummary> {
    // What the `Trainer` cannot compare, since it never sees it: the data and the start.
    overlap_runtime::train::agree(
        comm,
        &args.shared_beyond_train_config(overlap_runtime::model::position_rows::<M>()),
    )?;
    let config = args.train_config();
    outputs::refuse_outputs_over_inputs(args, &config)?;
    let mut data = datasets::training_data::<M>(args)?;
    datasets::note_shard_doubts(args, comm.rank());
    let (mut model, notes) = start::starting_model::<M>(args, comm, overlap_runtime::Dataset::vocabulary(&data))?;
    let recorded = match (&notes.vocabulary, &args.resume) {
        (Some(vocabulary), _) => Some((vocabulary.clone(), "--init-params")),
        (None, Some(dir)) => overlap_runtime::checkpoint::recorded_vocabulary(dir).map(|v| (v, "the checkpoint")),
        (None, None) => None,
    };
    datasets::adopt_recorded_vocabulary(
        &mut data,
        recorded.as_ref().map(|(v, from)| (v.as_str(), *from)),
        comm.rank(),
    )?;
    datasets::note_unused_rows::<M>(&data, comm.rank());
    // Refused before training, not after it: a sample needs characters (or a tokenizer) to print.
    let sample_text =
        (args.sample > 0).then(|| sample_text::sample_text::<M>(&data, notes.vocabulary.as_deref(), args)).transpose();
    // Every rank reads its own copy of what a sample prints (a rank alone failing stops them all).
    let sample_text = overlap_runtime::train::agree_on_outcome(comm, sample_text, "find what its sample prints")?;
    // Its prompt too: a character the model never saw is refused now, not after the run.
    let sample = sample_text.map(|text| sampling::prompt(args, &text).map(|prompt| (text, prompt))).transpose()?;
    let mut held_out = args.validation_every().map(|_| datasets::held_out::<M>(&data, args)).transpose()?;
    let trainer = Trainer::new(comm).config(config).started_from(notes);
    let trainer = if comm.rank() == 0 { trainer.progress(Bar::new()) } else { trainer };
    let trainer = match (&mut held_out, args.validation_every()) {
        (Some(held_out), Some(every)) => trainer.validate(held_out, every, args.eval_batches),
        _ => trainer,
    };
    let summary = trainer.fit(&mut model, &mut data, &CrossEntropyLoss);
    // A sample was asked for: the checkpoint's parameters file serves without resuming it.
    if let (Err(Error::NothingToDo { parameters: Some(file), .. }), 0, true) = (&summary, comm.rank(), args.sample > 0)
    {
        console::err_line(&format!(
            "note: to sample from the checkpoint, give `--steps 0 --init-params {} --sample {}` in place of --resume",
            file.display(),
            args.sample
        ));
    }
    let summary = summary?;
    if let (0, Some((text, prompt))) = (comm.rank(), sample) {
        sampling::print_sample(&model, &text, &prompt, overlap_runtime::Dataset::positions(&data), args)?;
    }
    Ok(summary)
}

/// The plan `--print-schedule` asked for: the compiled one, or DDP's at its default caps.
fn printed_schedule(schedule: &Schedule, which: args::PrintSchedule) -> Result<Schedule> {
    match which {
        args::PrintSchedule::Compiled => Ok(schedule.clone()),
        args::PrintSchedule::Ddp => {
            plan_buckets(&schedule.model, &schedule.layer_specs_for_ddp(), &BucketLimits::default())
                .map_err(|e| Error::Config(e.to_string()))
        }
    }
}

/// Flags that do nothing with the others given, refused rather than ignored.
fn refuse_contradictions(args: &TrainArgs) -> Result<()> {
    if args.gpu.is_some() && args.device == args::Device::Cpu {
        return Err(Error::Config("--gpu chooses a GPU for --device cuda; this run is on the CPU".into()));
    }
    unused_flags::refuse_with_comm_only(args)?;
    if args.steps > 0 && !args.comm_only {
        // Only where the rate is used: `--steps 0` and `--comm-only` refuse it themselves.
        example_defaults::refuse_lr_below_default_schedule(args)?;
    }
    Ok(())
}

/// Flags whose machinery exists only on the CPU so far, refused together with one message.
fn refuse_cpu_only_flags(args: &TrainArgs) -> Result<()> {
    let refused: Vec<&str> = [
        (args.comm_only, "--comm-only"),
        (args.link.is_some(), "--link"),
        (args.check_finite, "--check-finite"),
        (args.grad_comm.is_some_and(|f| f != overlap_runtime::WireFormat::Fp32), "--grad-comm"),
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

fn report_error(e: &Error) -> ExitCode {
    let rank = std::env::var("OMPI_COMM_WORLD_RANK").unwrap_or_else(|_| "0".into());
    // One write, so mpirun does not interleave it with other ranks' messages.
    let message = format!("rank {rank}: error: {}\n", flags::in_flag_terms(&e.to_string()));
    let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), message.as_bytes());
    ExitCode::FAILURE
}
