//! What one rank's training needs in memory (parameters, gradients, optimizer state and
//! activations), counted from the model's plan and the batch's shape: the report prints peak RSS
//! beside it, and the run is refused before step 1 when it cannot fit.

use overlap_plan::{assign_grad_slots, Schedule, Width, ELEM_BYTES};

use crate::layer::{DeviceOp, DropoutDraw, StepContext};
use crate::model::DistributedModel;

/// The size of the run being observed: for the recording buffers and the memory estimate.
#[derive(Clone, Copy, Debug)]
pub struct RunShape {
    /// Optimizer steps the run reaches (`TrainConfig::steps`): how many the trace keeps spans of.
    pub steps: u64,
    /// Samples per rank per micro-step (`TrainConfig::batch`).
    pub batch: usize,
    /// Micro-steps per optimizer step (`TrainConfig::accumulate`).
    pub accumulate: usize,
    /// Optimizer buffers per parameter element (0, 1 or 2).
    pub optimizer_buffers: usize,
    /// Ranks the optimizer state is sharded over (`CommConfig::shard_optimizer`); 1 when every
    /// rank keeps all of it.
    pub optimizer_shards: usize,
    /// What one micro-step keeps for backward (`memory::activation_bytes`); `None` when that
    /// does not fit in the address space.
    pub activation_bytes: Option<usize>,
    /// Whether the run trains; `false` for a communication-only run (`--comm-only`), which
    /// holds the gradient buckets alone: no parameters, optimizer state or activations.
    pub trains: bool,
}

/// Parameters, gradients, optimizer state and activations of one rank, in bytes (the gradient
/// buckets alone when the run does not train); `None` when that does not even fit in the
/// address space.
pub fn needed_bytes(schedule: &Schedule, run: &RunShape) -> Option<usize> {
    let params = schedule.total_bytes();
    if !run.trains {
        return Some(params);
    }
    let state = optimizer_state_bytes(schedule, run)?;
    params.checked_mul(2)?.checked_add(state)?.checked_add(run.activation_bytes?)
}

/// The optimizer state of the rank that keeps the most, in bytes: all of it, or when it is
/// sharded over `run.optimizer_shards` ranks, rank 0's slices (the largest, by an element per
/// bucket at most; see `overlap_plan::shard_of`).
pub fn optimizer_state_bytes(schedule: &Schedule, run: &RunShape) -> Option<usize> {
    let shards = run.optimizer_shards.max(1);
    let elements = schedule.buckets.iter().map(|b| overlap_plan::shard_of(b.numel, shards, 0).len()).sum::<usize>();
    run.optimizer_buffers.checked_mul(elements)?.checked_mul(ELEM_BYTES)
}

/// `activation_bytes` for model `M` on micro-batches of `batch` sequences of `positions` rows,
/// trained with dropout at `dropout` (0: none).
pub fn activation_bytes_of<M: DistributedModel>(batch: usize, positions: usize, dropout: f32) -> Option<usize> {
    let mut ctx = StepContext::sequences(batch, positions.max(1));
    if dropout > 0.0 && dropout < 1.0 {
        ctx = ctx.with_dropout(DropoutDraw::new(dropout, 0, 0));
    }
    activation_bytes(&M::SCHEDULE, M::DEVICE_OPS, M::RESIDUALS, &ctx)
}

/// What one micro-step keeps for backward, in bytes, as the generated workspace holds it: the
/// input, every layer's output, each residual block's sum, what the built-in layers save
/// besides (LayerNorm's row statistics; attention's queries, keys, values, heads and weights, and
/// its weights after dropout when `ctx` drops),
/// backward's gradient buffers, shared by liveness (`assign_grad_slots`), each as wide as the
/// widest gradient it carries, and the loss's gradient; with the work buffers of attention's
/// backward, the largest a layer takes while it runs. A user layer's own saved state is not
/// known here.
pub fn activation_bytes(
    schedule: &Schedule,
    ops: &[DeviceOp],
    residuals: &[(usize, usize)],
    ctx: &StepContext,
) -> Option<usize> {
    let layers = &schedule.layers;
    // Each layer's output width, following the widths through width-preserving layers.
    let mut widths = Vec::with_capacity(layers.len());
    let Some((mut width, _)) = schedule.io_widths() else { return Some(0) };
    let mut per_row = width; // the input's copy
    for layer in layers.iter() {
        if let Width::Fixed { output, .. } = layer.width {
            width = output;
        }
        widths.push(width);
        per_row = per_row.checked_add(width)?;
    }
    per_row = per_row.checked_add(width)?; // the loss's gradient with respect to the output
    for &(_, last) in residuals {
        per_row = per_row.checked_add(*widths.get(last)?)?;
    }
    let (mut per_sequence, mut scratch_per_row) = (0usize, 0usize);
    for op in ops {
        match *op {
            DeviceOp::LayerNorm { .. } => per_row = per_row.checked_add(2)?,
            DeviceOp::CausalSelfAttention { width, heads } => {
                per_row = per_row.checked_add(width.checked_mul(4)?)?;
                let copies = if ctx.dropout().active() { 2 } else { 1 };
                let scores = ctx.positions().checked_mul(ctx.positions())?.checked_mul(heads)?.checked_mul(copies)?;
                per_sequence = per_sequence.checked_add(scores)?;
                // Backward's gradients of the heads and of the queries, keys and values.
                scratch_per_row = scratch_per_row.max(width.checked_mul(4)?);
            }
            _ => {}
        }
    }
    per_row = per_row.checked_add(scratch_per_row)?;
    let (slots, count) = assign_grad_slots(layers.len(), schedule.first_layer_with_params(), residuals);
    let mut slot_widths = vec![0usize; count];
    for (slot, width) in slots.iter().zip(&widths) {
        if let Some(slot) = *slot {
            slot_widths[slot] = slot_widths[slot].max(*width);
        }
    }
    per_row = per_row.checked_add(slot_widths.iter().sum())?;
    let floats = ctx.row_count().checked_mul(per_row)?.checked_add(ctx.sequence_count().checked_mul(per_sequence)?)?;
    floats.checked_mul(ELEM_BYTES)
}

/// Memory the kernel says is available to new allocations (`MemAvailable`; Linux only).
pub fn available_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// This process's peak resident set size (`VmHWM` in `/proc/self/status`; Linux only).
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
