//! PowerSGD (Vogels et al., NeurIPS 2019) for one gradient bucket: its large matrices travel as
//! two thin factors, the rest whole, with the compression error fed back into the next step.
//!
//! Per matrix gradient M (`rows x cols`, this rank's gradient plus its previous error), as
//! PyTorch's `powerSGD_hook`: Q orthogonalised; P = M·Q,
//! all-reduced (the sum over ranks, with the values sent whole in the same message); P
//! orthogonalised; Q = Mᵀ·P, all-reduced; M̂ = P·Qᵀ. The buckets hold sums over ranks, so M̂
//! approximates Σ M_i, and each rank keeps e = M − M̂ / world: what the ranks' approximation of
//! their mean missed of its own share. Q is warm-started from the previous step's sum (same on
//! every rank, so every rank computes the same P, Q and M̂: parameters stay identical), and the
//! first Q is the same pseudo-random matrix everywhere. The first `start_iter` steps go whole
//! (10 by default; PyTorch's default is 1000, see `LowRank::DEFAULT_START_ITER`).
//! `state/reference_tests.rs` follows every pass against an f64 replica of the hook.
//!
//! The error lives in the bucket itself: between steps a low-rank bucket holds e where its
//! matrices' gradients go (zeros elsewhere), and backward adds the next gradients to it (the
//! generated code passes `accumulate = true`), so M = g + e costs no pass of its own. A step
//! reads M three times (P, Q, M̂ with e) and writes it once; the update uses each row of M̂ as
//! it is made (parameters lent, as for the other buckets). With `--check-finite` nothing is lent:
//! M̂ goes into the bucket for the update after the wait point, and e waits aside until `clear`.
//!
//! The buffers are allocated once (the aside buffer on its first use): steps allocate nothing.
//! `state` holds what a bucket keeps and does the passes; `in_flight` has the stages' types and
//! `exchange` the communicator's side: the launch, and the turnaround to Q.

mod exchange;
mod in_flight;
mod kernels;
pub(super) mod state;

pub use in_flight::{LowRankP, LowRankQ};
pub use state::LowRankState;
