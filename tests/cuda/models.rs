//! The small models the GPU tests run on both devices: every layer kind (`Probe`), embeddings,
//! a tied head, attention in a residual block, and residual blocks alone.

use overlap::prelude::*;
use overlap::Matrix;

/// Every layer kind the GPU runs, at small odd widths.
#[distributed_model(bucket_cap_mb = 1, first_bucket_mb = 1)]
pub struct Probe {
    fc1: Linear<16, 40>,
    act1: Gelu,
    norm: LayerNorm<40>,
    fc2: Linear<40, 33>,
    act2: Tanh,
    fc3: Linear<33, 24>,
    act3: Sigmoid,
    fc4: Linear<24, 24>,
    act4: Relu,
    head: Linear<24, 5>,
}

/// A deterministic batch of `rows` samples for `Probe`.
pub fn batch(rows: usize) -> (Matrix, Vec<usize>) {
    let mut inputs = Matrix::default();
    inputs.resize(rows, 16);
    for (i, v) in inputs.as_mut_slice().iter_mut().enumerate() {
        *v = ((i * 7919 % 113) as f32 / 113.0 - 0.5) * 2.0;
    }
    (inputs, (0..rows).map(|r| r * 3 % 5).collect())
}

/// Token and position embeddings, three sequences of five positions.
#[distributed_model(bucket_cap_mb = 1)]
pub struct TinyLm {
    wte: Embedding<13, 16>,
    wpe: PositionEmbedding<8, 16>,
    norm: LayerNorm<16>,
    head: Linear<16, 13>,
}

/// The head tied to the token embedding: one weight, two contributions to its gradient.
#[distributed_model(bucket_cap_mb = 1)]
pub struct TiedLm {
    wte: Embedding<13, 16>,
    wpe: PositionEmbedding<8, 16>,
    norm: LayerNorm<16>,
    #[tied(wte)]
    head: TiedHead<16, 13>,
}

/// Two heads tied to one embedding: three contributions to one gradient, the first of them
/// written by the later head, the others added.
#[distributed_model(bucket_cap_mb = 1)]
pub struct TwoHeadLm {
    wte: Embedding<13, 16>,
    wpe: PositionEmbedding<8, 16>,
    #[tied(wte)]
    head1: TiedHead<16, 13>,
    proj: Linear<13, 16>,
    #[tied(wte)]
    head2: TiedHead<16, 13>,
}

/// A GPT in miniature: embeddings, a residual causal self-attention block, the head.
#[distributed_model(bucket_cap_mb = 1)]
pub mod tiny_gpt {
    use overlap::prelude::*;

    #[residual]
    pub struct Attend {
        ln_1: LayerNorm<16>,
        attn: CausalSelfAttention<16, 4>,
    }

    pub struct TinyGpt {
        wte: Embedding<13, 16>,
        wpe: PositionEmbedding<8, 16>,
        attend: Attend,
        ln_f: LayerNorm<16>,
        lm_head: Linear<16, 13>,
    }
}

/// Residual blocks alone: a linear layer and GELU inside the skip.
#[distributed_model(bucket_cap_mb = 1)]
pub mod residual_net {
    use overlap::prelude::*;

    #[residual]
    pub struct Block {
        fc: Linear<8, 8>,
        act: Gelu,
    }

    pub struct ResidualNet {
        input: Linear<4, 8>,
        block: Block,
        head: Linear<8, 2>,
    }
}

/// Dropout after a layer and inside a residual block.
#[distributed_model(bucket_cap_mb = 1)]
pub mod dropped_net {
    use overlap::prelude::*;

    #[residual]
    pub struct Block {
        fc: Linear<8, 8>,
        act: Gelu,
        drop: Dropout,
    }

    pub struct DroppedNet {
        input: Linear<4, 8>,
        drop: Dropout,
        block: Block,
        head: Linear<8, 2>,
    }
}

/// Unusual nesting in one model: a residual block opening the model with a layer that has no
/// parameters, residual blocks inside a repeated residual block, one of a lone ReLU, a bucket
/// boundary inside the repeats, and buckets small enough to hold a layer or less.
#[distributed_model(bucket_cap_mb = 0.0002, first_bucket_mb = 0.0001)]
pub mod nested_net {
    use overlap::prelude::*;

    #[residual]
    pub struct Opening {
        act: Tanh,
        fc: Linear<8, 8>,
    }

    #[residual]
    pub struct Lone {
        act: Relu,
    }

    #[residual]
    pub struct Inner {
        norm: LayerNorm<8>,
        fc: Linear<8, 8>,
        act: Gelu,
    }

    #[residual]
    pub struct Outer {
        inner: [Inner; 2],
        lone: Lone,
        #[bucket_boundary]
        fc: Linear<8, 8>,
    }

    pub struct NestedNet {
        open: Opening,
        outer: [Outer; 2],
        act: Sigmoid,
        head: Linear<8, 5>,
    }
}
