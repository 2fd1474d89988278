//! nanoGPT's GPT, character level, in the DSL: token and position embeddings, 4 blocks of
//! pre-norm causal self-attention (4 heads) and a pre-norm MLP (4x wide, GELU), each with its
//! residual connection, a final LayerNorm and the head. Its defaults are nanoGPT's CPU run of
//! shakespeare_char (128 features, context 64, batch 12, AdamW at 1e-3 with warm-up and cosine
//! decay to 1e-4, weight decay 0.1 on matrices, beta2 0.99, gradients clipped to norm 1, the loss on
//! the text's last 10% every 250 steps over 20 batches); any flag given overrides them.
//!
//! ```text
//! cat /usr/share/common-licenses/* > licenses.txt
//! cargo run --release --example gpt -- --text licenses.txt
//! mpirun -n 2 target/release/examples/gpt --text licenses.txt --batch 6
//! ```
//!
//! Buckets of 0.5 MiB, about two per block, so that the last one (the first block's LayerNorm,
//! `wpe` and the tied `wte`, complete only after the embedding's backward) is small.
//!
//! Names follow nanoGPT's where the structure is the same (`wte`, `wpe`, `h.3.mlp.c_fc`,
//! `ln_f`); each residual half of a block is a block of its own here, so nanoGPT's
//! `h.N.ln_1` and `h.N.attn` are `h.N.attend.ln_1` and `h.N.attend.attn`, and `h.N.ln_2` is
//! `h.N.mlp.ln_2`. The head is nanoGPT's: no bias, its weight `wte`'s (`lm_head.weight` is
//! `wte.weight`). Weights start as nanoGPT's: N(0, 0.02²), biases at zero (`#[init(std = 0.02)]`),
//! and the residual projections (the parameters whose path ends in `c_proj.weight`, in attention
//! and in the MLP) at N(0, (0.02/√(2·4))²), as nanoGPT scales them for 4 blocks. The vocabulary is
//! at most 96 characters.
//!
//! `--dropout P` drops where nanoGPT's `dropout` does: after the embeddings (`drop`), attention's
//! weights (inside `CausalSelfAttention`, nanoGPT's `attn_dropout`), after attention's output
//! projection (`resid_dropout`) and after the MLP (`dropout`). The default, nanoGPT's CPU run's,
//! is 0: the `Dropout` layers then copy their input.

use overlap::prelude::*;

#[distributed_model(bucket_cap_mb = 0.5, first_bucket_mb = 0.5)]
pub mod gpt {
    use overlap::prelude::*;

    /// `x + dropout(attn(ln_1(x)))`.
    #[residual]
    pub struct Attend {
        ln_1: LayerNorm<128>,
        attn: CausalSelfAttention<128, 4>,
        resid_dropout: Dropout,
    }

    /// `x + dropout(c_proj(gelu(c_fc(ln_2(x)))))`.
    #[residual]
    pub struct Mlp {
        ln_2: LayerNorm<128>,
        c_fc: Linear<128, 512>,
        gelu: Gelu,
        c_proj: Linear<512, 128>,
        dropout: Dropout,
    }

    pub struct Block {
        attend: Attend,
        mlp: Mlp,
    }

    pub struct Gpt {
        #[init(std = 0.02)]
        wte: Embedding<96, 128>,
        #[init(std = 0.02)]
        wpe: PositionEmbedding<64, 128>,
        drop: Dropout,
        #[init(std = 0.02, ends_with("c_proj.weight", std = 0.0070710678))]
        h: [Block; 4],
        ln_f: LayerNorm<128>,
        #[tied(wte)]
        lm_head: TiedHead<128, 96>,
    }
}

/// nanoGPT's `config/train_shakespeare_char.py` with its README's CPU settings.
const NANOGPT_CPU: overlap_cli::ExampleDefaults = overlap_cli::ExampleDefaults {
    about: "Train nanoGPT's character-level GPT on a UTF-8 text (--text) or llm.c token shards \
            (--tokens), with nanoGPT's CPU settings as the defaults below. Run it with `mpirun -n N` for N \
            data-parallel ranks; the global batch is batch x N x accumulate.",
    flags: &[
        ("--batch", "12"),
        ("--steps", "2000"),
        ("--optimizer", "adamw"),
        ("--lr", "1e-3"),
        ("--beta2", "0.99"),
        ("--weight-decay", "0.1"),
        ("--decay-on", "matrices"),
        ("--lr-schedule", "cosine:warmup=100,until=2000,min=1e-4"),
        ("--clip-grad-norm", "1.0"),
        ("--eval-every", "250"),
        ("--eval-batches", "20"),
        ("--log-every", "100"),
    ],
};

fn main() -> std::process::ExitCode {
    overlap_cli::main_with_defaults::<gpt::Gpt>(&NANOGPT_CPU)
}
