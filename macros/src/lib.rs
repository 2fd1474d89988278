//! `#[distributed_model]`: reads a struct of layers, plans its gradient buckets in
//! gradient-ready order with `overlap-plan`, and emits straight-line forward / backward / step code in which every
//! bucket's all-reduce is launched right after the backward call that completes it.
//!
//! Pipeline, one module each: `attr` (attribute syntax) → `ast` (the model, borrowing the user's
//! tokens for spans) → `layers` (what each field type means) → `check` (cross-field rules) →
//! `planning` (caps, `auto` or `profile`) → `expand` (code) or `fallback` (on errors: the struct alone, plus every error at once).
//! Every stage reports to `errors` and shares the small helpers of `helpers`.

#![warn(missing_docs)]

mod ast;
mod attr;
mod attr_items;
mod cfg;
mod check;
mod crate_path;
mod emitted_struct;
mod errors;
mod expand;
mod fallback;
mod field_attr;
mod generated_names;
mod helpers;
mod init_attr;
mod layer_limit;
mod layers;
mod lint_allows;
mod nesting;
mod planning;
mod profile;
mod schedule_code;
mod schedule_tokens;
mod shard_attr;
mod tied;
mod ungroup;

use proc_macro::TokenStream;

/// Turns a struct of layers into a data-parallel model with a compile-time communication schedule.
///
/// ```text
/// #[distributed_model(bucket_cap_mb = 25, first_bucket_mb = 1)]
/// pub struct Mlp {
///     fc1: Linear<784, 2048>,
///     act1: Relu,
///     #[bucket_boundary] // optional: fc2 never shares a bucket with the layers before it
///     fc2: Linear<2048, 10>,
/// }
/// ```
///
/// Built-in layers (`Linear<IN, OUT>`, `LayerNorm<D>`, `Relu`, `Gelu`, `Tanh`, `Sigmoid`,
/// `Dropout`, `Embedding<V, D>`, `PositionEmbedding<T, D>`, `CausalSelfAttention<D, H>`, `TiedHead<D, V>`) are
/// read from the type; `#[tied(wte)] lm_head: TiedHead<D, V>` reads the weight of the earlier
/// `wte: Embedding<V, D>` and adds its gradient to it (nanoGPT's tied head); any other type needs
/// `#[layer(input = N, output = M, params(weight = [M, N], bias = [M]))]` (omit `input` and
/// `output` for width-preserving layers; add `ready = definition` when the first parameter's
/// gradient is ready first, as `nn.LayerNorm`'s), which is checked at compile time against the
/// type's `overlap::Layer` constants (`PARAMS`, `WIDTH`, `READY_ORDER`).
///
/// `crate = "path"` (as serde's `#[serde(crate = "...")]`) names where the generated code finds
/// `overlap` when it is not `::overlap`: a re-export or an alias. A renamed dependency (`ml = {
/// package = "overlap" }`) needs none: the macro reads its name from the crate's `Cargo.toml`.
///
/// On a module holding a model and its blocks, the model is the struct no other uses; `model =
/// Net` names it instead, and the module may then also hold structs of the program's own, which
/// are left as written.
///
/// Parameters are assigned to buckets in the order backward produces their gradients (the last
/// layer first, each layer's parameters in its `READY_ORDER`), each bucket closed once it
/// reaches its cap (the first at `first_bucket_mb`), and launched in that order: PyTorch DDP's
/// buckets after its first iteration. `bucket_order = ddp_first_iteration` gives the buckets of
/// DDP's first iteration with `find_unused_parameters=True` instead (definition order, launched
/// in reverse), for comparison.
///
/// Instead of size caps, `buckets = auto(link = "ib-hdr", world = 64)` (optionally `batch`,
/// `gflops`) chooses the bucket boundaries that minimise the simulated step on that cluster (within
/// the runs of layers between `#[bucket_boundary]` ones), and
/// `buckets = profile("profile.json")` does the same from per-layer times measured by a run with
/// `--write-profile profile.json` (optionally overriding `link` and `world`).
#[proc_macro_attribute]
pub fn distributed_model(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(attr.into(), item.into()).into()
}
