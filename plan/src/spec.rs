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
    Fixed { input: usize, output: usize },
    Preserving,
}

/// One parameter tensor of a layer, e.g. `weight` with shape `[out, in]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamSpec {
    pub name: Cow<'static, str>,
    pub shape: Cow<'static, [usize]>,
}

impl ParamSpec {
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

/// One field of the model struct, as the planner sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerSpec {
    /// The field name, e.g. `fc1`.
    pub name: Cow<'static, str>,
    /// The layer type as written, e.g. `Linear<784, 2048>`, for tables and fingerprints.
    pub kind: Cow<'static, str>,
    pub width: Width,
    pub params: Vec<ParamSpec>,
    /// Forward floating-point operations per sample (backward is about twice that).
    pub flops_per_sample: u64,
    /// Start a new bucket at this layer's first parameter, whatever the caps say.
    pub bucket_boundary: bool,
}

impl LayerSpec {
    pub fn new(name: impl Into<Cow<'static, str>>, kind: impl Into<Cow<'static, str>>, width: Width) -> Self {
        LayerSpec {
            name: name.into(),
            kind: kind.into(),
            width,
            params: Vec::new(),
            flops_per_sample: 0,
            bucket_boundary: false,
        }
    }

    pub fn with_param(mut self, name: &'static str, shape: &[usize]) -> Self {
        self.params.push(ParamSpec::new(name, shape.to_vec()));
        self
    }

    pub fn with_flops(mut self, flops_per_sample: u64) -> Self {
        self.flops_per_sample = flops_per_sample;
        self
    }

    pub fn with_bucket_boundary(mut self) -> Self {
        self.bucket_boundary = true;
        self
    }
}
