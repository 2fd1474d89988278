//! PowerSGD (Vogels et al., NeurIPS 2019) for one gradient bucket: its large matrices travel as
//! two thin factors, the rest whole, with the compression error fed back into the next step.
//!
//! Per matrix gradient M (`rows x cols`, with this rank's previous error added first, M += e):
//! P = M·Q, all-reduced (the sum over ranks, with the values sent whole in the same message);
//! P orthogonalised; Q = Mᵀ·P, all-reduced; M̂ = P·Qᵀ. The buckets hold sums over ranks, so M̂
//! approximates Σ M_i, and each rank keeps e = M − M̂ / world: what the ranks' approximation of
//! their mean missed of its own share. Q is warm-started from the previous step's sum (same on
//! every rank, so every rank computes the same P, Q and M̂: parameters stay identical), and the
//! first Q is the same pseudo-random matrix everywhere. The first `start_iter` steps go whole.
//!
//! The buffers are allocated once, with the bucket: a step allocates nothing. `in_flight` moves
//! the messages between the stages the generated code places.

mod in_flight;

pub use in_flight::{LowRankP, LowRankQ};

use std::ops::Range;

use overlap_plan::{LowRank, Schedule};

use super::bucket::GradBucket;
use super::lent::Lent;
use crate::gemm::{gemm, MatRef};
use crate::init::InitRng;

/// Added to a column's norm before dividing by it: a zero column stays finite.
const EPSILON: f32 = 1e-8;

/// Values of a matrix handled at a time (128 KiB of f32): the passes over M run row block by
/// row block, so the product that follows an element-wise pass reads the block from cache.
const BLOCK_VALUES: usize = 1 << 15;

/// One factorised matrix of the bucket.
#[derive(Clone, Debug, PartialEq)]
struct Factorised {
    /// Where its gradient lives in the bucket.
    offset: usize,
    rows: usize,
    cols: usize,
    /// Where its P lives in the P message, its Q in the Q message, its error in `errors`.
    p_at: usize,
    q_at: usize,
    e_at: usize,
}

impl Factorised {
    fn gradient(&self) -> Range<usize> {
        self.offset..self.offset + self.rows * self.cols
    }
    fn errors(&self) -> Range<usize> {
        self.e_at..self.e_at + self.rows * self.cols
    }
    fn p(&self, rank: usize) -> Range<usize> {
        self.p_at..self.p_at + self.rows * rank
    }
    fn q(&self, rank: usize) -> Range<usize> {
        self.q_at..self.q_at + self.cols * rank
    }
    /// Rows per block of the passes over M: `BLOCK_VALUES` worth, at least one.
    fn block_rows(&self) -> usize {
        (BLOCK_VALUES / self.cols.max(1)).max(1)
    }
}

/// A value range sent whole, inside the P message.
#[derive(Clone, Debug, PartialEq)]
struct Whole {
    offset: usize,
    len: usize,
    at: usize,
}

/// PowerSGD's state for one bucket: kept from step to step, and checkpointed (`errors`, Q and
/// the step count).
#[derive(Debug)]
pub struct LowRankState {
    spec: LowRank,
    matrices: Vec<Factorised>,
    whole: Vec<Whole>,
    /// This rank's error feedback, one `rows x cols` block per matrix.
    errors: Vec<f32>,
    /// P factors, then the values sent whole; `None` while it is being summed.
    p_message: Option<GradBucket>,
    /// Q factors: the warm start between steps; `None` while it is being summed.
    q_message: Option<GradBucket>,
    /// Synchronised steps so far: compression starts when it reaches `start_iter`.
    steps: u64,
    /// Ranks in the step in progress (`M̂ / world` is this rank's share).
    world: usize,
    /// One row block of M̂ at a time, for `decompress`.
    scratch: Vec<f32>,
}

impl GradBucket {
    /// Bucket `k` of `schedule`, zeroed, with PowerSGD's state when the schedule compresses it
    /// (`grad_comm = powersgd(..)`); a plain bucket otherwise.
    pub fn low_rank(schedule: &Schedule, k: usize) -> Self {
        let info = &schedule.buckets[k];
        let mut bucket = GradBucket::zeros(k, info.numel);
        if let Some(spec) = info.low_rank {
            bucket.set_low_rank(LowRankState::new(schedule, k, spec));
        }
        bucket
    }
}

impl LowRankState {
    fn new(schedule: &Schedule, k: usize, spec: LowRank) -> Self {
        let (mut matrices, mut whole) = (Vec::new(), Vec::new());
        let (mut p_len, mut q_len, mut e_len) = (0, 0, 0);
        for &r in schedule.buckets[k].params.iter() {
            let param = schedule.param(r);
            match spec.matrix(&param.shape) {
                Some((rows, cols)) => {
                    matrices.push(Factorised {
                        offset: param.offset,
                        rows,
                        cols,
                        p_at: p_len,
                        q_at: q_len,
                        e_at: e_len,
                    });
                    (p_len, q_len, e_len) = (p_len + rows * spec.rank, q_len + cols * spec.rank, e_len + rows * cols);
                }
                None => whole.push(Whole { offset: param.offset, len: param.numel(), at: 0 }),
            }
        }
        for w in &mut whole {
            w.at = p_len;
            p_len += w.len;
        }
        let mut q_message = GradBucket::zeros(k, q_len);
        for (j, m) in matrices.iter().enumerate() {
            // The same on every rank: seeded by the bucket and the matrix alone.
            let first_q =
                InitRng::new(0x9e37_79b9_7f4a_7c15 ^ ((k as u64) << 32 | j as u64)).uniform(m.cols * spec.rank, 1.0);
            q_message.as_mut_slice()[m.q(spec.rank)].copy_from_slice(&first_q);
        }
        let scratch = vec![0.0; BLOCK_VALUES.max(matrices.iter().map(|m| m.cols).max().unwrap_or(0))];
        LowRankState {
            spec,
            matrices,
            whole,
            errors: crate::huge_pages::zeroed(e_len),
            p_message: Some(GradBucket::zeros(k, p_len)),
            q_message: Some(q_message),
            steps: 0,
            world: 1,
            scratch,
        }
    }

    /// Whether this step compresses (past `start_iter`); counts the step.
    fn begin_step(&mut self, world: usize) -> bool {
        self.world = world;
        self.steps += 1;
        self.steps > self.spec.start_iter
    }

    /// M += e for every matrix; P = M·Q into the P message, with the values sent whole after
    /// the factors. Returns the P message, ready to be summed.
    fn compress(&mut self, grads: &mut [f32]) -> GradBucket {
        let r = self.spec.rank;
        let mut p_message = self.p_message.take().expect("P is home between steps");
        let q_message = self.q_message.as_ref().expect("Q is home between steps");
        let p = p_message.as_mut_slice();
        for m in &self.matrices {
            let q = MatRef::row_major(&q_message.as_slice()[m.q(r)], m.cols, r);
            let block = m.block_rows();
            let rows =
                grads[m.gradient()].chunks_mut(block * m.cols).zip(self.errors[m.errors()].chunks(block * m.cols));
            for ((g, e), p) in rows.zip(p[m.p(r)].chunks_mut(block * r)) {
                g.iter_mut().zip(e).for_each(|(g, e)| *g += e);
                let n = g.len() / m.cols;
                gemm(1.0, MatRef::row_major(g, n, m.cols), q, 0.0, p, n, r);
            }
        }
        for w in &self.whole {
            p[w.at..w.at + w.len].copy_from_slice(&grads[w.offset..w.offset + w.len]);
        }
        p_message
    }

    /// With P summed: orthogonalises each P and computes Q = Mᵀ·P into the Q message, which it
    /// returns to be summed; keeps the P message for `decompress`.
    fn project(&mut self, grads: &[f32], mut p_message: GradBucket) -> GradBucket {
        let r = self.spec.rank;
        let mut q_message = self.q_message.take().expect("Q is home until the turnaround");
        for m in &self.matrices {
            let p = &mut p_message.as_mut_slice()[m.p(r)];
            orthogonalise(p, m.rows, r);
            let g = MatRef::row_major(&grads[m.gradient()], m.rows, m.cols);
            let p = MatRef::row_major(&p_message.as_slice()[m.p(r)], m.rows, r);
            gemm(1.0, g.t(), p, 0.0, &mut q_message.as_mut_slice()[m.q(r)], m.cols, r);
        }
        self.p_message = Some(p_message);
        q_message
    }

    /// With Q summed: M̂ = P·Qᵀ, e = M − M̂ / world, and M̂ and the values sent whole into the
    /// bucket; or, with parameters `lent`, each block of them used for the update at once and
    /// the bucket cleared (one pass over M instead of three). Keeps Q for the next warm start.
    fn decompress(&mut self, grads: &mut [f32], lent: &mut Lent, q_message: GradBucket) {
        let fused = !lent.is_empty();
        let r = self.spec.rank;
        let p_message = self.p_message.as_ref().expect("P came home at the turnaround");
        let share = -1.0 / self.world as f32;
        for m in &self.matrices {
            let q = MatRef::row_major(&q_message.as_slice()[m.q(r)], m.cols, r);
            let block = m.block_rows();
            let rows =
                grads[m.gradient()].chunks_mut(block * m.cols).zip(self.errors[m.errors()].chunks_mut(block * m.cols));
            for (b, ((g, e), p)) in rows.zip(p_message.as_slice()[m.p(r)].chunks(block * r)).enumerate() {
                let n = g.len() / m.cols;
                let approx = &mut self.scratch[..g.len()];
                gemm(1.0, MatRef::row_major(p, n, r), q.t(), 0.0, approx, n, m.cols);
                if fused {
                    g.iter_mut()
                        .zip(e.iter_mut())
                        .zip(&*approx)
                        .for_each(|((g, e), a)| (*e, *g) = (*g + share * a, 0.0));
                    let start = m.offset + b * block * m.cols;
                    lent.update(start..start + approx.len(), approx);
                } else {
                    g.iter_mut()
                        .zip(e.iter_mut())
                        .zip(&*approx)
                        .for_each(|((g, e), a)| (*e, *g) = (*g + share * a, *a));
                }
            }
        }
        let p = p_message.as_slice();
        for w in &self.whole {
            let (range, sums) = (w.offset..w.offset + w.len, &p[w.at..w.at + w.len]);
            if fused {
                lent.update(range.clone(), sums);
                grads[range].fill(0.0);
            } else {
                grads[range].copy_from_slice(sums);
            }
        }
        self.q_message = Some(q_message);
    }

    /// Bytes this rank sends per compressed step (P and Q messages).
    pub fn wire_bytes(&self) -> usize {
        let len = |m: &Option<GradBucket>| m.as_ref().map_or(0, GradBucket::len);
        (len(&self.p_message) + len(&self.q_message)) * std::mem::size_of::<f32>()
    }

    /// What a checkpoint keeps: this rank's errors, the warm-start Q (the same on every rank)
    /// and the steps counted so far.
    pub fn saved(&self) -> (&[f32], &[f32], u64) {
        let q = self.q_message.as_ref().expect("Q is home between steps");
        (&self.errors, q.as_slice(), self.steps)
    }

    /// Restores what `saved` gave; `false` (nothing changed) when the lengths differ.
    pub fn restore(&mut self, errors: &[f32], q: &[f32], steps: u64) -> bool {
        let home = self.q_message.as_mut().expect("Q is home between steps");
        if errors.len() != self.errors.len() || q.len() != home.len() {
            return false;
        }
        self.errors.copy_from_slice(errors);
        home.as_mut_slice().copy_from_slice(q);
        self.steps = steps;
        true
    }
}

/// Gram-Schmidt, with re-orthogonalisation, on the `rank` columns of the row-major `rows x rank` matrix `p`, in place:
/// orthonormal columns spanning what P's did (a zero column stays zero). Accumulates in f64, so
/// every rank, starting from the same sums, ends with the same bits.
fn orthogonalise(p: &mut [f32], rows: usize, rank: usize) {
    debug_assert_eq!(p.len(), rows * rank);
    for c in 0..rank {
        // Twice: a column (nearly) in the span of the previous ones leaves a residual of rounding
        // errors, which one pass leaves far from orthogonal to them; the second pass makes it so.
        for prev in (0..c).chain(0..c) {
            let dot: f64 = p.chunks_exact(rank).map(|row| f64::from(row[c]) * f64::from(row[prev])).sum();
            let dot = dot as f32;
            p.chunks_exact_mut(rank).for_each(|row| row[c] -= dot * row[prev]);
        }
        let norm: f64 = p.chunks_exact(rank).map(|row| f64::from(row[c]).powi(2)).sum();
        let scale = 1.0 / (norm.sqrt() as f32 + EPSILON);
        p.chunks_exact_mut(rank).for_each(|row| row[c] *= scale);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orthogonalised_columns_are_orthonormal_and_a_zero_column_stays_finite() {
        // 4 x 3, row-major; the third column is zero.
        let mut p = vec![1.0, 2.0, 0.0, 3.0, 1.0, 0.0, 0.0, 1.0, 0.0, 2.0, 5.0, 0.0];
        orthogonalise(&mut p, 4, 3);
        let col = |c: usize| p.chunks_exact(3).map(|r| r[c]).collect::<Vec<f32>>();
        let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
        assert!((dot(&col(0), &col(0)) - 1.0).abs() < 1e-6);
        assert!((dot(&col(1), &col(1)) - 1.0).abs() < 1e-6);
        assert!(dot(&col(0), &col(1)).abs() < 1e-6);
        assert!(col(2).iter().all(|v| *v == 0.0));
    }

    #[test]
    fn a_rank_one_gradient_is_recovered_exactly_and_the_error_is_what_it_missed() {
        use overlap_plan::{plan_buckets, BucketLimits, GradComm, LayerSpec, ParamSpec, Width};
        use std::borrow::Cow;
        let layer = LayerSpec {
            name: Cow::Borrowed("fc"),
            kind: Cow::Borrowed("Linear"),
            width: Width::Fixed { input: 16, output: 8 },
            params: vec![
                ParamSpec::new(Cow::Borrowed("weight"), Cow::Owned(vec![8, 16])),
                ParamSpec::new(Cow::Borrowed("bias"), Cow::Owned(vec![8])),
            ],
            flops_per_sample: 0,
            bucket_boundary: false,
        };
        let s = plan_buckets("M", &[layer], &BucketLimits::Unlimited)
            .unwrap()
            .with_grad_comm(GradComm::LowRank(LowRank::new(2, 0)));
        let mut bucket = GradBucket::low_rank(&s, 0);
        let weight = s.layers[0].params[0].offset;
        // M = u·vᵀ: rank one, so rank-2 factors reproduce it (up to rounding); the bias is whole.
        let (u, v): (Vec<f32>, Vec<f32>) =
            ((1..=8).map(|i| i as f32).collect(), (1..=16).map(|j| 0.5 - j as f32).collect());
        for (i, ui) in u.iter().enumerate() {
            for (j, vj) in v.iter().enumerate() {
                bucket.as_mut_slice()[weight + i * 16 + j] = ui * vj;
            }
        }
        let bias = s.layers[0].params[1].offset;
        bucket.as_mut_slice()[bias..bias + 8].copy_from_slice(&[3.0; 8]);
        let original = bucket.as_slice().to_vec();
        let (state, grads, lent) = bucket.low_rank_parts().unwrap();
        assert!(state.begin_step(1), "start_iter = 0 compresses from the first step");
        let p = state.compress(grads);
        assert_eq!(p.len(), 8 * 2 + 8, "P factors, then the bias whole");
        let q = state.project(grads, p);
        assert_eq!(q.len(), 16 * 2);
        state.decompress(grads, lent, q);
        // Within FP32 rounding of the largest value (8 · 15.5).
        for (k, (got, want)) in bucket.as_slice().iter().zip(&original).enumerate() {
            assert!((got - want).abs() <= 1e-4 * 124.0, "value {k}: {got} against {want}");
        }
        let (errors, _, steps) = bucket.low_rank_state().unwrap().saved();
        assert_eq!(steps, 1);
        assert!(errors.iter().all(|e| e.abs() < 1e-2), "a rank-one gradient leaves (almost) no error");
    }
}
