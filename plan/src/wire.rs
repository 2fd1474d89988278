//! The number format a bucket's gradients travel in between ranks: part of the schedule (the
//! `grad_comm` key of `#[distributed_model]`), so the bytes on the wire are known when the model
//! compiles. How the runtime narrows and sums them is the runtime's `comm::wire`.

use crate::low_rank::LowRank;

/// What `grad_comm = ...` chose: a wire format for the gradients as they are, or PowerSGD's
/// low-rank factors (which travel in FP32).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GradComm {
    /// The gradients themselves, in this format.
    Format(WireFormat),
    /// PowerSGD's factors of the large matrices (in FP32), the other gradients whole.
    LowRank(LowRank),
}

/// How a bucket's gradients travel between ranks (`grad_comm = ...`, or `--grad-comm` at run time).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub enum WireFormat {
    /// 4 bytes per value, summed exactly as without this choice.
    #[default]
    Fp32,
    /// 2 bytes: FP32's range, 8 significant bits.
    Bf16,
    /// 2 bytes: 11 significant bits, largest value 65504 (values are scaled by 1/world first).
    Fp16,
}

impl WireFormat {
    /// `fp32`, `bf16` or `fp16`, as the command line and messages say it.
    pub fn name(self) -> &'static str {
        match self {
            WireFormat::Fp32 => "fp32",
            WireFormat::Bf16 => "bf16",
            WireFormat::Fp16 => "fp16",
        }
    }

    /// Bytes one gradient value takes on the wire.
    pub fn bytes_per_value(self) -> usize {
        match self {
            WireFormat::Fp32 => 4,
            WireFormat::Bf16 | WireFormat::Fp16 => 2,
        }
    }
}

impl std::fmt::Display for WireFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for WireFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fp32" => Ok(WireFormat::Fp32),
            "bf16" => Ok(WireFormat::Bf16),
            "fp16" => Ok(WireFormat::Fp16),
            _ => Err(format!("unknown gradient wire format `{s}`: expected fp32, bf16 or fp16")),
        }
    }
}
