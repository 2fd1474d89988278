//! The plan as data: which parameter gradient lives in which bucket at which offset, and after
//! which layer's backward each bucket's all-reduce is launched.
//!
//! The same type is built owned by the planner (inside the macro) and emitted as a `const` with
//! borrowed `'static` slices, so `Model::SCHEDULE` is exactly what the compiler planned.

use std::borrow::Cow;

use crate::gather_group::GatherGroup;
use crate::limits::BucketLimits;
use crate::low_rank::LowRank;
use crate::spec::{LayerSpec, ParamSpec, ReadyOrder, Width, ELEM_BYTES};
use crate::wire::{GradComm, WireFormat};

pub use crate::spec::ParamRef;

/// Where one parameter's gradient lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamInfo {
    /// The parameter's name within its layer, e.g. `weight` (`Schedule::param_name` prefixes the
    /// layer's).
    pub name: Cow<'static, str>,
    /// Its dimensions, outermost first, e.g. `[out, in]`.
    pub shape: Cow<'static, [usize]>,
    /// Its position among all the model's parameters in definition order: how the optimizer
    /// and checkpoints address it.
    pub index: usize,
    /// Bucket index, in launch order.
    pub bucket: usize,
    /// Offset of the gradient inside its bucket's flat buffer, in elements.
    pub offset: usize,
}

impl ParamInfo {
    /// Number of elements (the product of the shape); saturates rather than overflowing.
    pub fn numel(&self) -> usize {
        self.shape.iter().fold(1usize, |acc, &d| acc.saturating_mul(d))
    }
}

/// One layer of the model, in definition order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerInfo {
    /// The layer's path from the model, e.g. `fc1` or `blocks.3.fc1`.
    pub name: Cow<'static, str>,
    /// The layer type as written, e.g. `Linear<784, 2048>`.
    pub kind: Cow<'static, str>,
    /// The widths it reads and writes per row.
    pub width: Width,
    /// Forward floating-point operations per sample (backward is about twice that).
    pub flops_per_sample: u64,
    /// Its parameters, in definition order, with where each gradient lives.
    pub params: Cow<'static, [ParamInfo]>,
    /// The order backward makes the parameters' gradients ready in (the plan followed it).
    pub ready: ReadyOrder,
    /// The earlier layer's parameter this layer is tied to (see `LayerSpec::tied`): it adds to
    /// that parameter's gradient, in that parameter's bucket.
    pub tied: Option<ParamRef>,
    /// The model starts a bucket at this layer whatever the plan (`#[bucket_boundary]`): the
    /// alternatives `--simulate` plans for this model keep it too.
    pub bucket_boundary: bool,
}

/// One gradient bucket: a flat `f32` buffer reduced by one all-reduce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BucketInfo {
    /// Members in buffer order (ascending offsets).
    pub params: Cow<'static, [ParamRef]>,
    /// Buffer length in elements.
    pub numel: usize,
    /// Index of the layer whose backward completes this bucket; its all-reduce is launched
    /// right after that call.
    pub launch_after: usize,
    /// The format its gradients travel in (`grad_comm`); they are summed in FP32 whatever it is.
    pub wire: WireFormat,
    /// PowerSGD's factors instead of the large matrices' gradients (`grad_comm = powersgd(..)`):
    /// two all-reduces, of P (with the values sent whole) and of Q.
    pub low_rank: Option<LowRank>,
}

impl BucketInfo {
    /// Buffer length in bytes (every gradient is `f32`).
    pub fn bytes(&self) -> usize {
        self.numel.saturating_mul(ELEM_BYTES)
    }
}

/// The complete communication plan of a model. Buckets are numbered in launch order: bucket 0
/// holds the output layer's gradients and is reduced first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// The model struct's name, e.g. `Mlp`.
    pub model: Cow<'static, str>,
    /// The size caps the buckets were planned with (`Unlimited` when only boundaries closed them).
    pub limits: BucketLimits,
    /// Every layer, in definition order, blocks unrolled (`blocks.3.fc1`).
    pub layers: Cow<'static, [LayerInfo]>,
    /// The gradient buckets, in launch order.
    pub buckets: Cow<'static, [BucketInfo]>,
    /// `#[distributed_model(shard_optimizer)]`: by default each rank keeps optimizer state for
    /// its own slice of every bucket (see `shard_of`), the buckets reduce-scattered and the
    /// updated slices all-gathered. A run may choose otherwise (`CommConfig::shard_optimizer`).
    pub shard_optimizer: bool,
    /// The all-gathers of sharded state in the next forward, in launch order, when they are not
    /// one per bucket (the default, and what empty means; see `gather_groups`).
    pub gathers: Cow<'static, [GatherGroup]>,
}

impl Schedule {
    /// The parameter `r` refers to.
    pub fn param(&self, r: ParamRef) -> &ParamInfo {
        &self.layers[r.layer].params[r.param]
    }

    /// The layers of a schedule written as a constant (the macro's `SCHEDULE`), which outlive it;
    /// none for one built at run time.
    pub fn static_layers(&self) -> &'static [LayerInfo] {
        match self.layers {
            Cow::Borrowed(layers) => layers,
            Cow::Owned(_) => &[],
        }
    }

    /// `layer.param`, the name PyTorch's `state_dict` would use (e.g. `fc1.weight`).
    pub fn param_name(&self, r: ParamRef) -> String {
        format!("{}.{}", self.layers[r.layer].name, self.param(r).name)
    }

    /// Every parameter in definition order.
    pub fn params(&self) -> impl Iterator<Item = ParamRef> + '_ {
        self.layers
            .iter()
            .enumerate()
            .flat_map(|(layer, l)| (0..l.params.len()).map(move |param| ParamRef { layer, param }))
    }

    /// Input width of the first fixed-width layer and output width of the last one: what the
    /// model reads and writes per row.
    pub fn io_widths(&self) -> Option<(usize, usize)> {
        let fixed = || {
            self.layers.iter().filter_map(|l| match l.width {
                Width::Fixed { input, output } => Some((input, output)),
                Width::Preserving => None,
            })
        };
        Some((fixed().next()?.0, fixed().next_back()?.1))
    }

    /// The first layer with parameters: backward stops there, since nothing before it has
    /// gradients (0 when no layer has any).
    pub fn first_layer_with_params(&self) -> usize {
        self.layers.iter().position(|l| !l.params.is_empty()).unwrap_or(0)
    }

    /// Elements of all parameters, a tied one counted once: the buckets' lengths summed.
    pub fn param_count(&self) -> usize {
        self.buckets.iter().map(|b| b.numel).fold(0, usize::saturating_add)
    }

    /// The layers as the planner takes them, with the boundaries the model forces, to plan the same
    /// model otherwise.
    pub fn layer_specs(&self) -> Vec<LayerSpec> {
        self.layers
            .iter()
            .map(|l| LayerSpec {
                name: l.name.clone(),
                kind: l.kind.clone(),
                width: l.width,
                params: l.params.iter().map(|p| ParamSpec::new(p.name.clone(), p.shape.clone())).collect(),
                ready: l.ready,
                flops_per_sample: l.flops_per_sample,
                bucket_boundary: l.bucket_boundary,
                tied: l.tied,
            })
            .collect()
    }

    /// `layer_specs` as PyTorch DDP plans them: it knows no forced boundary.
    pub fn layer_specs_for_ddp(&self) -> Vec<LayerSpec> {
        self.layer_specs().into_iter().map(|l| LayerSpec { bucket_boundary: false, ..l }).collect()
    }

    /// Bytes of all gradients in FP32: `param_count` × 4.
    pub fn total_bytes(&self) -> usize {
        self.param_count().saturating_mul(ELEM_BYTES)
    }

    /// Every bucket sent in `format` (`--grad-comm`), whole: no low-rank compression.
    pub fn with_wire(mut self, format: WireFormat) -> Self {
        self.buckets.to_mut().iter_mut().for_each(|b| (b.wire, b.low_rank) = (format, None));
        self
    }

    /// Every bucket sent as `grad_comm = ...` says.
    pub fn with_grad_comm(self, grad_comm: GradComm) -> Self {
        match grad_comm {
            GradComm::Format(format) => self.with_wire(format),
            GradComm::LowRank(low_rank) => {
                let mut s = self.with_wire(WireFormat::Fp32);
                s.buckets.to_mut().iter_mut().for_each(|b| b.low_rank = Some(low_rank));
                s
            }
        }
    }

    /// What `grad_comm` chose, as written (`bf16`, `powersgd(rank = 4, start_iter = 10)`), when
    /// some bucket does not travel as FP32 values.
    pub fn grad_comm(&self) -> Option<String> {
        self.buckets.iter().find_map(|b| match b.low_rank {
            Some(low_rank) => Some(low_rank.to_string()),
            None => (b.wire != WireFormat::Fp32).then(|| b.wire.to_string()),
        })
    }

    /// Whether some bucket travels narrower than FP32 or as low-rank factors.
    pub fn narrows(&self) -> bool {
        self.buckets.iter().any(|b| b.wire != WireFormat::Fp32 || b.low_rank.is_some())
    }

    /// Bytes one rank sends for bucket `k` per step: its values in its wire format, or, for a
    /// low-rank bucket, the factors P and Q of its large matrices and its other values whole.
    /// (All steps after `start_iter`; the steps before send `bytes`.)
    pub fn wire_bytes(&self, k: usize) -> usize {
        let b = &self.buckets[k];
        let values = match b.low_rank {
            None => b.numel,
            Some(low_rank) => {
                b.params.iter().map(|&r| low_rank.wire_values(&self.param(r).shape)).fold(0, usize::saturating_add)
            }
        };
        values.saturating_mul(b.wire.bytes_per_value())
    }

    /// Bytes on the wire for all buckets (one rank's copy).
    pub fn total_wire_bytes(&self) -> usize {
        (0..self.buckets.len()).map(|k| self.wire_bytes(k)).fold(0, usize::saturating_add)
    }

    /// A stable 64-bit hash (FNV-1a) of everything that must agree between ranks: layers, shapes,
    /// bucket layout and launch points. Ranks compare it before exchanging any gradient.
    pub fn fingerprint(&self) -> u64 {
        self.plan_fingerprint_with(self.shard_optimizer)
    }

    /// The fingerprint without where the optimizer state lives: a checkpoint records it, so that
    /// resuming sharded what ran whole, or the reverse, is no other schedule (their files and
    /// results are the same). Equal to `fingerprint` for an unsharded model.
    pub fn plan_fingerprint(&self) -> u64 {
        self.plan_fingerprint_with(false)
    }

    fn plan_fingerprint_with(&self, shard_optimizer: bool) -> u64 {
        let mut h = self.plan_hash();
        // Unsharded adds nothing, so such a model's fingerprint is what it was before sharding.
        if shard_optimizer {
            h.str("shard_optimizer");
        }
        // So does the default grouping of the all-gathers.
        for g in self.gathers.iter() {
            [g.bucket, g.start, g.end, g.first_read].iter().for_each(|&v| h.usize(v));
        }
        h.0
    }

    fn plan_hash(&self) -> Fnv {
        let mut h = Fnv::new();
        h.str(&self.model);
        match self.limits {
            BucketLimits::Capped { first_bucket_bytes, bucket_cap_bytes } => {
                h.usize(first_bucket_bytes);
                h.usize(bucket_cap_bytes);
            }
            BucketLimits::Unlimited => h.usize(usize::MAX),
        }
        h.usize(self.layers.len());
        for layer in self.layers.iter() {
            h.str(&layer.name);
            h.str(&layer.kind);
            match layer.width {
                Width::Fixed { input, output } => {
                    h.usize(input);
                    h.usize(output);
                }
                Width::Preserving => h.usize(usize::MAX),
            }
            if let Some(t) = layer.tied {
                h.str("tied");
                h.usize(t.layer);
                h.usize(t.param);
            }
            h.usize(layer.params.len());
            for p in layer.params.iter() {
                h.str(&p.name);
                h.usize(p.shape.len());
                p.shape.iter().for_each(|&d| h.usize(d));
                h.usize(p.bucket);
                h.usize(p.offset);
            }
        }
        h.usize(self.buckets.len());
        for b in self.buckets.iter() {
            h.usize(b.numel);
            h.usize(b.launch_after);
            // FP32 adds nothing, so an FP32 model's fingerprint is what it was before formats.
            if b.wire != WireFormat::Fp32 {
                h.str(b.wire.name());
            }
            if let Some(low_rank) = b.low_rank {
                h.str("powersgd");
                h.usize(low_rank.rank);
                h.usize(low_rank.start_iter as usize);
            }
        }
        h
    }
}

/// FNV-1a, 64 bits: the same on every rank and build, for what ranks compare before they
/// exchange anything (the schedule here, a run's settings in the runtime).
pub struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv::new()
    }
}

impl Fnv {
    /// The FNV-1a offset basis: the hash of nothing.
    pub fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    /// The hash of everything fed so far.
    pub fn finish(&self) -> u64 {
        self.0
    }
    fn bytes(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
    /// Feeds `v` as 8 little-endian bytes, the same on 32- and 64-bit targets.
    pub fn usize(&mut self, v: usize) {
        self.bytes(&(v as u64).to_le_bytes());
    }
    /// Feeds `s` as its length, then its UTF-8 bytes, so that `"ab", "c"` and `"a", "bc"` differ.
    pub fn str(&mut self, s: &str) {
        self.usize(s.len());
        self.bytes(s.as_bytes());
    }
}
