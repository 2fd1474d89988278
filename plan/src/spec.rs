//! What the planner needs to know about a model: its layers, in definition order, and their
//! parameters.

use std::borrow::Cow;

/// Bytes per gradient element: every parameter and gradient is `f32`.
pub const ELEM_BYTES: usize = 4;
/// One mebibyte, the unit of `bucket_cap_mb` and `first_bucket_mb` (as in PyTorch DDP).
pub const MIB: usize = 1 << 20;
/// The most elements one parameter tensor may have: the GPU kernels, cuBLAS and the MPI calls
/// address a tensor with a C `int`, so the macro refuses larger tensors when it compiles the
/// model rather than letting the run abort when it first touches one.
pub const MAX_TENSOR_NUMEL: usize = i32::MAX as usize;

/// How a layer maps widths: a fixed `input -> output`, or whatever width it is given
/// (element-wise layers such as activations).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Width {
    /// Reads `input` values per row and writes `output` (an embedding reads 1, the token id).
    Fixed {
        /// Values per row it reads.
        input: usize,
        /// Values per row it writes.
        output: usize,
    },
    /// Writes as many values per row as it reads: element-wise layers, and any layer declared
    /// without widths.
    Preserving,
}

/// The order in which backward makes a layer's parameter gradients ready, as PyTorch's autograd
/// does for the same layer: it decides which bucket a parameter joins when a cap falls inside a
/// layer, and so must agree with PyTorch's for the plan to be DDP's rebuilt buckets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ReadyOrder {
    /// Last parameter first: `nn.Linear` readies its bias (a direct input of `AddmmBackward0`)
    /// before its weight (behind `TBackward0`).
    #[default]
    Reverse,
    /// First parameter first: `nn.LayerNorm` readies its weight before its bias (equal-priority
    /// inputs of `NativeLayerNormBackward0`, taken in input order).
    Definition,
}

impl ReadyOrder {
    /// The parameter indices of a layer with `count` parameters, in ready order.
    pub fn indices(self, count: usize) -> impl DoubleEndedIterator<Item = usize> + ExactSizeIterator {
        (0..count).map(move |i| self.index(i, count))
    }

    /// The parameter that becomes ready `position`-th of `count` (a `const fn`, for the macro's
    /// compile-time check of a layer type against its plan).
    pub const fn index(self, position: usize, count: usize) -> usize {
        match self {
            ReadyOrder::Reverse => count - 1 - position,
            ReadyOrder::Definition => position,
        }
    }
}

/// One parameter tensor of a layer, e.g. `weight` with shape `[out, in]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamSpec {
    /// The parameter's name within its layer, e.g. `weight` or `c_attn.bias`.
    pub name: Cow<'static, str>,
    /// Its dimensions, outermost first, e.g. `[out, in]`.
    pub shape: Cow<'static, [usize]>,
}

/// What `#[init(std = ..)]` does to a parameter it decides without naming it (GPT-2's and
/// nanoGPT's initialisation). One rule for the macro, which refuses an `#[init]` that would
/// change nothing, and the runtime, which applies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StdInit {
    /// Two or more dimensions (weights, embedding tables): drawn from N(0, std²).
    Draw,
    /// A bias: zeroed.
    Zero,
    /// Anything else (LayerNorm's gains): kept.
    Keep,
}

impl StdInit {
    /// The rule for a parameter called `name` (`bias`, `c_attn.bias`) of `dims` dimensions.
    pub fn of(name: &str, dims: usize) -> Self {
        if dims >= 2 {
            StdInit::Draw
        } else if name == "bias" || name.ends_with(".bias") {
            StdInit::Zero
        } else {
            StdInit::Keep
        }
    }
}

impl ParamSpec {
    /// A parameter called `name` of `shape`.
    pub fn new(name: impl Into<Cow<'static, str>>, shape: impl Into<Cow<'static, [usize]>>) -> Self {
        ParamSpec { name: name.into(), shape: shape.into() }
    }

    /// Number of elements (the product of the shape; 1 for a scalar); saturates rather than
    /// overflowing (the macro refuses such sizes first, with `checked_numel`).
    pub fn numel(&self) -> usize {
        self.shape.iter().fold(1usize, |acc, &d| acc.saturating_mul(d))
    }

    /// Number of elements, or `None` when the product overflows `usize`.
    pub fn checked_numel(&self) -> Option<usize> {
        self.shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
    }
}

/// A parameter, by layer index and parameter index within that layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ParamRef {
    /// Index of the layer, in definition order.
    pub layer: usize,
    /// Index of the parameter within that layer, in definition order.
    pub param: usize,
}

/// One field of the model struct, as the planner sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerSpec {
    /// The layer's path from the model, e.g. `fc1` or `blocks.3.fc1`.
    pub name: Cow<'static, str>,
    /// The layer type as written, e.g. `Linear<784, 2048>`, for tables and fingerprints.
    pub kind: Cow<'static, str>,
    /// The widths it reads and writes per row.
    pub width: Width,
    /// Its parameters, in definition order.
    pub params: Vec<ParamSpec>,
    /// The order backward makes `params`' gradients ready in.
    pub ready: ReadyOrder,
    /// Forward floating-point operations per sample (backward is about twice that).
    pub flops_per_sample: u64,
    /// Start a new bucket at this layer's first parameter, whatever the caps say.
    pub bucket_boundary: bool,
    /// The parameter of an earlier layer this one reads as its weight and adds its gradient to
    /// (a language model's head tied to its token embedding): one parameter, one bucket slot,
    /// both layers' contributions summed in it before its bucket is reduced.
    pub tied: Option<ParamRef>,
}

impl LayerSpec {
    /// A layer with no parameters, no FLOPs and no boundary, readying in reverse order; the `with_`
    /// methods add the rest.
    pub fn new(name: impl Into<Cow<'static, str>>, kind: impl Into<Cow<'static, str>>, width: Width) -> Self {
        LayerSpec {
            name: name.into(),
            kind: kind.into(),
            width,
            params: Vec::new(),
            ready: ReadyOrder::Reverse,
            flops_per_sample: 0,
            bucket_boundary: false,
            tied: None,
        }
    }

    /// Adds a parameter called `name` of `shape` after the others.
    pub fn with_param(mut self, name: &'static str, shape: &[usize]) -> Self {
        self.params.push(ParamSpec::new(name, shape.to_vec()));
        self
    }

    /// Sets the forward FLOPs per sample.
    pub fn with_flops(mut self, flops_per_sample: u64) -> Self {
        self.flops_per_sample = flops_per_sample;
        self
    }

    /// Sets the order backward readies the parameters in.
    pub fn with_ready(mut self, ready: ReadyOrder) -> Self {
        self.ready = ready;
        self
    }

    /// Makes the layer start a new bucket (`#[bucket_boundary]`).
    pub fn with_bucket_boundary(mut self) -> Self {
        self.bucket_boundary = true;
        self
    }
}
