//! What rank 0 says before the first step about settings that work but may surprise: threads
//! a GPU ignores, a warm-up longer than the run, a decay shorter than it, a link slower than the timeout, slower BLAS
//! kernels, compute-only runs of sharded state.

use super::preflight::link_outlasts_timeout;
use crate::comm::{CommMode, Communicator};
use crate::config::{Device, TrainConfig};
use crate::model::DistributedModel;
use crate::process::console;

/// Prints the notes `config` calls for, with what setting the products' threads said
/// (`threads_note`); the trainer calls it on rank 0 only.
pub(super) fn print<M: DistributedModel>(config: &TrainConfig, comm: &Communicator, threads_note: Option<String>) {
    if comm.world_size() > 1 && comm.shards_optimizer(&M::SCHEDULE) && comm.mode() == CommMode::Skip {
        console::err_line(
            "note: compute-only with sharded optimizer state: each rank updates its own slice of every bucket \
             and gathers none, so the rest of its parameters keep their first values (the steps time a sharded \
             step without its communication)",
        );
    }
    if let Some(note) = threads_note {
        console::err_line(&format!("note: {note}"));
    }
    #[cfg(feature = "mkl")]
    if let Device::Cpu = config.device {
        for note in crate::host::mkl::notes(crate::host::threads::count()) {
            console::err_line(&format!("note: {note}"));
        }
    }
    if let Some(note) = link_outlasts_timeout(config, &M::SCHEDULE, comm.world_size()) {
        console::err_line(&format!("note: {note}"));
    }
    let base = config.optimizer.base_lr();
    let schedule = &config.optimizer.lr_schedule;
    let notes = [schedule.unfinished_warm_up(base, config.steps), schedule.decay_ends_early(config.steps)];
    for note in notes.into_iter().flatten() {
        console::err_line(&format!("note: {note}"));
    }
    if let (Device::Cpu, Some(note)) = (config.device, crate::host::blas_core::slower_kernels_note()) {
        console::err_line(&format!("note: {note}"));
    }
}
