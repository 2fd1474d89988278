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
//! target/release/examples/gpt --text licenses.txt --layers 6 --heads 6 --width 384
//! target/release/examples/gpt --tokens llmc/tinyshakespeare --vocab 50304
//! ```
//!
//! The model is compiled in three shapes, chosen by `--layers`, `--heads`, `--width` and `--vocab`
//! (nanoGPT's `n_layer`, `n_head`, `n_embd`, `vocab_size`): nanoGPT's CPU run (4, 4, 128, a
//! vocabulary of 96 characters, 64 positions; the default), the "baby GPT" of its GPU run (6, 6,
//! 384, 96, 256 positions), and the CPU run's trunk over GPT-2's tokens (4, 4, 128, and 50304
//! token ids: GPT-2's 50257 padded to a multiple of 64, as nanoGPT's `GPTConfig` pads them), which
//! reads llm.c's GPT-2 token shards (its `dev/data/tinyshakespeare.py` writes them). A shape is a
//! type, its buckets planned when it compiles, so flags choose among compiled shapes and do not
//! make new ones: another is one more `nanogpt!` line below and its entry in `SHAPES`.
//! `--context` takes any length up to the shape's positions. Without shape flags, `--init-params`
//! and `--resume` run the shape their file holds.
//!
//! Buckets of 0.5 MiB (about two per block in the default shape, four in the baby GPT), so that
//! the last one (the first block's LayerNorm, `wpe` and the tied `wte`, complete only after the
//! embedding's backward) is small; over GPT-2's ids `wte` alone is 24.56 MiB, a parameter a
//! bucket never splits, so that shape's last bucket is its largest.
//!
//! Names follow nanoGPT's where the structure is the same (`wte`, `wpe`, `h.3.mlp.c_fc`,
//! `ln_f`); each residual half of a block is a block of its own here, so nanoGPT's
//! `h.N.ln_1` and `h.N.attn` are `h.N.attend.ln_1` and `h.N.attend.attn`, and `h.N.ln_2` is
//! `h.N.mlp.ln_2`. The head is nanoGPT's: no bias, its weight `wte`'s (`lm_head.weight` is
//! `wte.weight`). Weights start as nanoGPT's: N(0, 0.02²), biases at zero (`#[init(std = 0.02)]`),
//! and the residual projections (the parameters whose path ends in `c_proj.weight`, in attention
//! and in the MLP) at N(0, (0.02/√(2·L))²), as nanoGPT scales them for L blocks.
//!
//! `--dropout P` drops where nanoGPT's `dropout` does: after the embeddings (`drop`), attention's
//! weights (inside `CausalSelfAttention`, nanoGPT's `attn_dropout`), after attention's output
//! projection (`resid_dropout`) and after the MLP (`dropout`). The default, nanoGPT's CPU run's,
//! is 0: the `Dropout` layers then copy their input.

use overlap::prelude::*;

/// The GPT, in module `$name`: `$layers` blocks of `$heads` heads, `$width` features (`$hidden` in
/// the MLP, four times as many), `$vocab` token ids, `$positions` positions, the residual
/// projections drawn at 0.02/√(2·`$layers`).
macro_rules! nanogpt {
    ($name:ident: layers $layers:literal, heads $heads:literal, width $width:literal, hidden $hidden:literal,
     vocab $vocab:literal, positions $positions:literal, c_proj_std $c_proj_std:literal) => {
        #[distributed_model(bucket_cap_mb = 0.5, first_bucket_mb = 0.5)]
        pub mod $name {
            use overlap::prelude::*;

            /// `x + dropout(attn(ln_1(x)))`.
            #[residual]
            pub struct Attend {
                ln_1: LayerNorm<$width>,
                attn: CausalSelfAttention<$width, $heads>,
                resid_dropout: Dropout,
            }

            /// `x + dropout(c_proj(gelu(c_fc(ln_2(x)))))`.
            #[residual]
            pub struct Mlp {
                ln_2: LayerNorm<$width>,
                c_fc: Linear<$width, $hidden>,
                gelu: Gelu,
                c_proj: Linear<$hidden, $width>,
                dropout: Dropout,
            }

            pub struct Block {
                attend: Attend,
                mlp: Mlp,
            }

            pub struct Gpt {
                #[init(std = 0.02)]
                wte: Embedding<$vocab, $width>,
                #[init(std = 0.02)]
                wpe: PositionEmbedding<$positions, $width>,
                drop: Dropout,
                #[init(std = 0.02, ends_with("c_proj.weight", std = $c_proj_std))]
                h: [Block; $layers],
                ln_f: LayerNorm<$width>,
                #[tied(wte)]
                lm_head: TiedHead<$width, $vocab>,
            }
        }
    };
}

// nanoGPT's CPU run of shakespeare_char (the default).
nanogpt!(gpt: layers 4, heads 4, width 128, hidden 512, vocab 96, positions 64, c_proj_std 0.0070710678);
// Its GPU run's "baby GPT" (`config/train_shakespeare_char.py`): 10.8 M parameters.
nanogpt!(baby_gpt: layers 6, heads 6, width 384, hidden 1536, vocab 96, positions 256, c_proj_std 0.0057735027);
// The CPU run's trunk over GPT-2's tokens (llm.c's GPT-2 token shards), its vocabulary padded as
// nanoGPT's `GPTConfig` pads it: 7.2 M parameters, 6.4 M of them the token embedding.
nanogpt!(gpt2_tokens: layers 4, heads 4, width 128, hidden 512, vocab 50304, positions 64, c_proj_std 0.0070710678);

/// The shapes above, chosen by flags named after nanoGPT's `n_layer`, `n_head`, `n_embd` and
/// `vocab_size`.
const SHAPES: overlap_cli::ModelShapes = overlap_cli::ModelShapes {
    flags: &[
        ("--layers", "Transformer blocks (nanoGPT's n_layer)"),
        ("--heads", "Attention heads per block (n_head)"),
        ("--width", "Features per position (n_embd)"),
        ("--vocab", "Token ids read and predicted (vocab_size): 96 characters, or GPT-2's tokens padded"),
    ],
    compiled: &[
        overlap_cli::ModelShape::of::<gpt::Gpt>(&[4, 4, 128, 96]),
        overlap_cli::ModelShape::of::<baby_gpt::Gpt>(&[6, 6, 384, 96]),
        overlap_cli::ModelShape::of::<gpt2_tokens::Gpt>(&[4, 4, 128, 50304]),
    ],
    another: "A model's shape is a type, planned when it compiles: another is one more `nanogpt!` line (and \
              `SHAPES` entry) in examples/gpt.rs, then a rebuild.",
};

/// nanoGPT's `config/train_shakespeare_char.py` with its README's CPU settings.
const NANOGPT_CPU: overlap_cli::ExampleDefaults = overlap_cli::ExampleDefaults {
    about: "Train nanoGPT's character-level GPT on a UTF-8 text (--text) or llm.c token shards \
            (--tokens), with nanoGPT's CPU settings as the defaults below (--layers, --heads and --width \
            choose its baby GPT instead; --vocab 50304 reads llm.c's GPT-2 token shards). Run it with \
            `mpirun -n N` for N data-parallel ranks; the global batch is batch x N x accumulate.",
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
    overlap_cli::main_with_shapes(&NANOGPT_CPU, &SHAPES)
}
