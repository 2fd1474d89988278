//! The user's crate as a library whose public items must all be documented: the code
//! `#[distributed_model]` generates for a model of blocks, with a residual connection, repeated,
//! is public too, and documents itself (this crate does not compile otherwise).
#![deny(missing_docs, warnings)]

/// A residual network of two repeated blocks.
#[ml::distributed_model(bucket_cap_mb = 1, first_bucket_mb = 1, crate = "::ml")]
pub mod residual {
    use ml::prelude::*;

    /// `x + fc2(gelu(fc1(norm(x))))`.
    #[residual]
    pub struct Block {
        norm: LayerNorm<16>,
        fc1: Linear<16, 32>,
        act: Gelu,
        fc2: Linear<32, 16>,
    }

    /// The model: a projection in, the blocks, a head.
    pub struct Net {
        input: Linear<8, 16>,
        blocks: [Block; 2],
        head: Linear<16, 2>,
    }
}
