//! Which models the GPU runs: every layer needs device kernels (`Layer::DEVICE_OP`), checked
//! by name before a GPU is opened.

use crate::error::{Error, Result};
use crate::layer::{DeviceOp, Layer};
use crate::model::DistributedModel;

/// Fails, naming them, when layers of `M` have no device kernels (their `Layer::DEVICE_OP` is
/// `Unsupported`). Needs no GPU, so the training loop asks before opening one.
pub fn check_supported<M: DistributedModel>() -> Result<()> {
    let schedule = M::SCHEDULE;
    let unsupported: Vec<String> = (schedule.layers.iter().zip(M::DEVICE_OPS))
        .filter(|(_, op)| **op == DeviceOp::Unsupported)
        .map(|(l, _)| format!("`{}` ({})", l.name, l.kind))
        .collect();
    // The batch's token ids are checked against the vocabulary before they are uploaded; an
    // embedding later in the model (after a layer of one's own, the only one the macro accepts
    // there) would index its table with values nothing checked. The CPU checks each id it reads.
    let later_embedding = (schedule.layers.iter().zip(M::DEVICE_OPS).skip(1))
        .find(|(_, op)| matches!(op, DeviceOp::Embedding { .. }))
        .map(|(l, _)| &l.name);
    if let Some(name) = later_embedding {
        return Err(Error::Cuda(format!(
            "{} cannot run on the GPU: its embedding `{name}` is not its first layer, and on the GPU an embedding reads \
             token ids only as the first layer, from the batch (checked there); use `TrainConfig::device` cpu",
            schedule.model
        )));
    }
    if unsupported.is_empty() {
        return Ok(());
    }
    Err(Error::Cuda(format!(
        "{} cannot run on the GPU: layer(s) {} have no device kernels (their `Layer::DEVICE_OP` is `Unsupported`); \
         use `TrainConfig::device` cpu",
        schedule.model,
        unsupported.join(", ")
    )))
}

/// A layer call the run should never have reached: `check_supported` refused its model before.
pub(super) fn unsupported<L: Layer>() -> Error {
    Error::Cuda(format!(
        "`{}` has no device kernels (refused before the run: this is a bug)",
        std::any::type_name::<L>()
    ))
}
