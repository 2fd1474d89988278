//! A model's loss on data, with nothing trained (`Trainer::evaluate`): the held-out measurement
//! `fit` makes every so many steps (`Trainer::validate`), made once, for a trained or loaded
//! model (Lightning's `Trainer.validate`, nanoGPT's `estimate_loss` alone).

use super::validation::{self, HeldOutLoss};
use super::{agreement, noting_failure, preflight, tables, Trainer};
use crate::backend::CpuBackend;
use crate::config::{Device, OptimizerConfig, ValidationConfig};
use crate::data::{Batch, Dataset};
use crate::error::{Error, Result};
use crate::loss::Loss;
use crate::model::DistributedModel;
use crate::process::console;

impl Trainer<'_> {
    /// The mean loss of `model` over `batches` batches of `data` per rank, each of
    /// `TrainConfig::batch` samples (the same ones at every call, sharded over the ranks as
    /// training batches are), averaged over every rank's batches: what `fit` measures on its
    /// held-out data, measured once; `model` is not changed. Every rank calls it. On the CPU.
    ///
    /// An error on some ranks only ends the job as it does in `fit`.
    pub fn evaluate<M: DistributedModel>(
        self,
        model: &mut M,
        data: &mut impl Dataset,
        loss: &impl Loss,
        batches: usize,
    ) -> Result<f64> {
        let comm = self.comm;
        noting_failure(comm, || {
            let Trainer { comm, mut config, .. } = self;
            if config.device != Device::Cpu {
                return Err(Error::Config(
                    "`Trainer::evaluate` runs on the CPU: give it a Trainer without `Trainer::device`".into(),
                ));
            }
            if config.batch == 0 || batches == 0 || config.threads == 0 {
                return Err(Error::Config(format!(
                    "`Trainer::evaluate` on {batches} batch(es) of {} sample(s) on {} thread(s): each must be at least 1",
                    config.batch, config.threads
                )));
            }
            preflight::check_features::<M>(data)?;
            tables::check::<M>(data, "evaluated")?;
            config.validation = Some(ValidationConfig { every: 1, batches });
            agreement::agree_on_settings(&config, comm)?;
            let measured =
                [config.batch, batches, comm.world_size()].iter().fold(1u64, |n, &f| n.saturating_mul(f as u64));
            let notes = [
                crate::host::threads::use_for_products(config.threads),
                preflight::counted_twice(data, "data", measured),
            ];
            for note in notes.into_iter().flatten().filter(|_| comm.rank() == 0) {
                console::err_line(&format!("note: {note}"));
            }
            // No step runs: the optimizer is never asked to update, so the Trainer's own settings,
            // whatever they are, need not hold; a stateless rule stands in for them.
            let idle = OptimizerConfig::sgd(0.0).momentum(0.0).build(&M::SCHEDULE);
            let mut backend = CpuBackend::new(model, idle, comm);
            match validation::loss(&mut backend, data, loss, (&config, None), comm, &mut Batch::default())? {
                HeldOutLoss::Measured(mean) => Ok(mean),
                HeldOutLoss::CutShort { done, of } => {
                    unreachable!("a pass without stop signals measured {done} of {of} batches")
                }
            }
        })
    }
}
