//! PowerSGD's state for one bucket and the passes over its matrices: P = M·Q, the
//! orthogonalisation and Q = Mᵀ·P, and M̂ = P·Qᵀ with the new error (see `low_rank` for the
//! scheme). The messages are plain vectors here; `in_flight` sends them as buckets.

use std::ops::Range;

use overlap_plan::{LowRank, Schedule};

use super::super::lent::Lent;
use super::kernels::{self, GROUP};
use crate::init::InitRng;

/// One factorised matrix of the bucket.
#[derive(Clone, Debug, PartialEq)]
struct Factorised {
    /// Where its gradient lives in the bucket.
    offset: usize,
    rows: usize,
    cols: usize,
    /// Where its P (`rows x rank`, row-major) lives in the P message, its Q (stored transposed,
    /// `rank x cols`, so that every pass reads rows) in the Q message, its error in `aside`.
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
}

/// A value range sent whole, inside the P message.
#[derive(Clone, Debug, PartialEq)]
struct Whole {
    offset: usize,
    len: usize,
    at: usize,
}

/// PowerSGD's state for one bucket: kept from step to step, and checkpointed (the errors, Q and
/// the step count).
#[derive(Debug)]
pub struct LowRankState {
    spec: LowRank,
    matrices: Vec<Factorised>,
    whole: Vec<Whole>,
    /// This rank's errors, one `rows x cols` block per matrix, while M̂ fills the bucket for an
    /// update after the wait point (nothing lent); empty until first needed.
    aside: Vec<f32>,
    /// Whether `aside` holds errors that `clear` must put back.
    errors_aside: bool,
    /// Values `aside` needs.
    error_values: usize,
    /// P factors, then the values sent whole; `None` while it is being summed.
    p_message: Option<Vec<f32>>,
    /// Q factors: the warm start between steps; `None` while it is being summed.
    q_message: Option<Vec<f32>>,
    /// Synchronised steps so far: compression starts when it reaches `start_iter`.
    steps: u64,
    /// Ranks in the step in progress (`M̂ / world` is this rank's share).
    world: usize,
    /// One row of M̂ at a time, for `decompress`.
    scratch: Vec<f32>,
}

impl LowRankState {
    /// The state of bucket `k` of `schedule`, compressed as `spec` says.
    pub(crate) fn new(schedule: &Schedule, k: usize, spec: LowRank) -> Self {
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
        let mut q_message = vec![0.0; q_len];
        for (j, m) in matrices.iter().enumerate() {
            // The same on every rank: seeded by the bucket and the matrix alone.
            let first_q =
                InitRng::new(0x9e37_79b9_7f4a_7c15 ^ ((k as u64) << 32 | j as u64)).uniform(m.cols * spec.rank, 1.0);
            q_message[m.q(spec.rank)].copy_from_slice(&first_q);
        }
        let scratch = vec![0.0; matrices.iter().map(|m| m.cols).max().unwrap_or(0)];
        LowRankState {
            spec,
            matrices,
            whole,
            aside: Vec::new(),
            errors_aside: false,
            error_values: e_len,
            p_message: Some(vec![0.0; p_len]),
            q_message: Some(q_message),
            steps: 0,
            world: 1,
            scratch,
        }
    }

    /// Whether this step compresses (past `start_iter`); counts the step.
    pub(super) fn begin_step(&mut self, world: usize) -> bool {
        self.world = world;
        self.steps += 1;
        self.steps > self.spec.start_iter
    }

    /// Orthogonalises each Q (the warm start: last step's sum, or the first pseudo-random one),
    /// then P = M·Q into the P message (M: the bucket, gradients plus errors), with the values
    /// sent whole after the factors. Returns the P message, ready to be summed.
    ///
    /// Q is orthogonalised first as PyTorch's hook does: the summed Q scales with world·σ², so
    /// P = M·Q with it as is would scale with σ⁴ and lose small gradients' directions to rounding.
    pub(super) fn compress(&mut self, grads: &[f32]) -> Vec<f32> {
        let r = self.spec.rank;
        let mut p_message = self.p_message.take().expect("P is home between steps");
        let q_message = self.q_message.as_mut().expect("Q is home between steps");
        for m in &self.matrices {
            // Stored transposed: column c of Q is row c of Qᵀ.
            orthogonalise(&mut q_message[m.q(r)], m.cols, r, |i, c| c * m.cols + i);
        }
        let p = &mut p_message[..];
        for m in &self.matrices {
            let qt = &q_message[m.q(r)];
            for (g, p) in grads[m.gradient()].chunks_exact(m.cols).zip(p[m.p(r)].chunks_exact_mut(r)) {
                for group in kernels::groups(r) {
                    let qt = &qt[group.start * m.cols..group.end * m.cols];
                    match <&mut [f32; GROUP]>::try_from(&mut p[group.clone()]) {
                        Ok(p) => *p = kernels::dots(g, rows(qt, m.cols)),
                        Err(_) => p[group.start] = kernels::dots(g, [qt])[0],
                    }
                }
            }
        }
        for w in &self.whole {
            p[w.at..w.at + w.len].copy_from_slice(&grads[w.offset..w.offset + w.len]);
        }
        p_message
    }

    /// With P summed: orthogonalises each P and computes Q = Mᵀ·P into the Q message (one pass
    /// over M), which it returns to be summed; keeps the P message for `decompress`.
    pub(super) fn project(&mut self, grads: &[f32], mut p_message: Vec<f32>) -> Vec<f32> {
        let r = self.spec.rank;
        let mut q_message = self.q_message.take().expect("Q is home until the turnaround");
        for m in &self.matrices {
            orthogonalise(&mut p_message[m.p(r)], m.rows, r, |i, c| i * r + c);
            let qt = &mut q_message[m.q(r)];
            qt.fill(0.0);
            for (g, p) in grads[m.gradient()].chunks_exact(m.cols).zip(p_message[m.p(r)].chunks_exact(r)) {
                for group in kernels::groups(r) {
                    let qt = &mut qt[group.start * m.cols..group.end * m.cols];
                    match <[f32; GROUP]>::try_from(&p[group.clone()]) {
                        Ok(p) => kernels::axpys(p, g, rows_mut(qt, m.cols)),
                        Err(_) => kernels::axpys([p[group.start]], g, [qt]),
                    }
                }
            }
        }
        self.p_message = Some(p_message);
        q_message
    }

    /// With Q summed: M̂ = P·Qᵀ row by row, each row given to the `lent` parameters' update
    /// and e = M − M̂ / world left in its place; the values sent whole likewise, their place
    /// cleared. With nothing lent, M̂ and the sums go into the bucket for the update after the
    /// wait point, and e aside until `clear`. Keeps Q for the next warm start.
    pub(super) fn decompress(&mut self, grads: &mut [f32], lent: &mut Lent, q_message: Vec<f32>) {
        let fused = !lent.is_empty();
        if !fused && self.aside.len() < self.error_values {
            self.aside.resize(self.error_values, 0.0); // Once, at the first such step.
        }
        self.errors_aside = !fused;
        let r = self.spec.rank;
        let p_message = self.p_message.as_ref().expect("P came home at the turnaround");
        let share = -1.0 / self.world as f32;
        for m in &self.matrices {
            let qt = &q_message[m.q(r)];
            let approx = &mut self.scratch[..m.cols];
            let pairs = grads[m.gradient()].chunks_exact_mut(m.cols).zip(p_message[m.p(r)].chunks_exact(r));
            for (i, (g, p)) in pairs.enumerate() {
                for (n, group) in kernels::groups(r).enumerate() {
                    let qt = &qt[group.start * m.cols..group.end * m.cols];
                    match <[f32; GROUP]>::try_from(&p[group.clone()]) {
                        Ok(p) => kernels::combine(p, rows(qt, m.cols), approx, n > 0),
                        Err(_) => kernels::combine([p[group.start]], [qt], approx, n > 0),
                    }
                }
                if fused {
                    g.iter_mut().zip(&*approx).for_each(|(g, a)| *g += share * a);
                    let start = m.offset + i * m.cols;
                    // The compression's span covers it (`in_flight::compressing`).
                    lent.update_untimed(start..start + m.cols, approx);
                } else {
                    let e = &mut self.aside[m.e_at + i * m.cols..m.e_at + (i + 1) * m.cols];
                    g.iter_mut().zip(e).zip(&*approx).for_each(|((g, e), a)| (*e, *g) = (*g + share * a, *a));
                }
            }
        }
        let p = &p_message[..];
        for w in &self.whole {
            let (range, sums) = (w.offset..w.offset + w.len, &p[w.at..w.at + w.len]);
            if fused {
                lent.update_untimed(range.clone(), sums);
                grads[range].fill(0.0);
            } else {
                grads[range].copy_from_slice(sums);
            }
        }
        self.q_message = Some(q_message);
    }

    /// Puts the errors set aside by `decompress` back into the cleared bucket `grads` (after an
    /// update that ran after the wait point).
    pub(crate) fn restore_aside(&mut self, grads: &mut [f32]) {
        if std::mem::take(&mut self.errors_aside) {
            for m in &self.matrices {
                grads[m.gradient()].copy_from_slice(&self.aside[m.errors()]);
            }
        }
    }

    /// What a checkpoint keeps besides the errors (which `error_ranges` finds in the bucket):
    /// the warm-start Q, the same on every rank, and the steps counted so far.
    pub fn warm_start(&self) -> (&[f32], u64) {
        let q = self.q_message.as_ref().expect("Q is home between steps");
        (q, self.steps)
    }

    /// Where the bucket holds this rank's errors between steps: each factorised matrix's range.
    pub fn error_ranges(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        self.matrices.iter().map(Factorised::gradient)
    }

    /// Restores what `warm_start` gave; `false` (nothing changed) when the length differs.
    pub fn restore_warm_start(&mut self, q: &[f32], steps: u64) -> bool {
        let home = self.q_message.as_mut().expect("Q is home between steps");
        if q.len() != home.len() {
            return false;
        }
        home.copy_from_slice(q);
        self.steps = steps;
        true
    }
}

/// `GROUP` rows of `cols` values, from a slice of exactly that many.
fn rows(values: &[f32], cols: usize) -> [&[f32]; GROUP] {
    std::array::from_fn(|k| &values[k * cols..(k + 1) * cols])
}

/// `rows`, mutable.
fn rows_mut(values: &mut [f32], cols: usize) -> [&mut [f32]; GROUP] {
    let mut each = values.chunks_exact_mut(cols);
    std::array::from_fn(|_| each.next().expect("GROUP rows"))
}

/// Gram-Schmidt, with re-orthogonalisation, on the `rank` columns of a `rows x rank` matrix
/// whose element `(i, c)` is `m[at(i, c)]`, in place: orthonormal columns spanning what they did.
/// A zero column stays zero (PyTorch's hook, with its default `orthogonalization_epsilon = 0`,
/// divides by the exact norm and fills a zero column with zeros; no ε is added, so a column of
/// small values is normalised like any other). Accumulates in f64, so every rank, starting from
/// the same sums, ends with the same bits.
fn orthogonalise(m: &mut [f32], rows: usize, rank: usize, at: impl Fn(usize, usize) -> usize) {
    debug_assert_eq!(m.len(), rows * rank);
    for c in 0..rank {
        // Twice: a column (nearly) in the span of the previous ones leaves a residual of rounding
        // errors, which one pass leaves far from orthogonal to them; the second pass makes it so.
        for prev in (0..c).chain(0..c) {
            let dot: f64 = (0..rows).map(|i| f64::from(m[at(i, c)]) * f64::from(m[at(i, prev)])).sum();
            let dot = dot as f32;
            (0..rows).for_each(|i| m[at(i, c)] -= dot * m[at(i, prev)]);
        }
        let norm = (0..rows).map(|i| f64::from(m[at(i, c)]).powi(2)).sum::<f64>().sqrt();
        if norm > 0.0 {
            (0..rows).for_each(|i| m[at(i, c)] = (f64::from(m[at(i, c)]) / norm) as f32);
        }
    }
}

#[cfg(test)]
mod pytorch_tests;
#[cfg(test)]
mod reference_tests;
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orthogonalised_columns_are_orthonormal_and_a_zero_column_stays_zero() {
        // 4 x 3, row-major; the third column is zero.
        let mut p = vec![1.0, 2.0, 0.0, 3.0, 1.0, 0.0, 0.0, 1.0, 0.0, 2.0, 5.0, 0.0];
        orthogonalise(&mut p, 4, 3, |i, c| i * 3 + c);
        let col = |c: usize| p.chunks_exact(3).map(|r| r[c]).collect::<Vec<f32>>();
        let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
        assert!((dot(&col(0), &col(0)) - 1.0).abs() < 1e-6);
        assert!((dot(&col(1), &col(1)) - 1.0).abs() < 1e-6);
        assert!(dot(&col(0), &col(1)).abs() < 1e-6);
        assert!(col(2).iter().all(|v| *v == 0.0));
    }

    #[test]
    fn a_rank_one_gradient_is_recovered_exactly_and_the_error_is_what_it_missed() {
        use overlap_plan::{plan_buckets, BucketLimits, GradComm, LayerSpec, Width};
        let layer = LayerSpec::new("fc", "Linear", Width::Fixed { input: 16, output: 8 })
            .with_param("weight", &[8, 16])
            .with_param("bias", &[8]);
        let s = plan_buckets("M", &[layer], &BucketLimits::Unlimited)
            .unwrap()
            .with_grad_comm(GradComm::LowRank(LowRank::new(2, 0)));
        let mut state = LowRankState::new(&s, 0, LowRank::new(2, 0));
        let mut grads = vec![0.0; s.buckets[0].numel];
        let weight = s.layers[0].params[0].offset;
        // M = u·vᵀ: rank one, so rank-2 factors reproduce it (up to rounding); the bias is whole.
        let (u, v): (Vec<f32>, Vec<f32>) =
            ((1..=8).map(|i| i as f32).collect(), (1..=16).map(|j| 0.5 - j as f32).collect());
        for (i, ui) in u.iter().enumerate() {
            for (j, vj) in v.iter().enumerate() {
                grads[weight + i * 16 + j] = ui * vj;
            }
        }
        let bias = s.layers[0].params[1].offset;
        grads[bias..bias + 8].copy_from_slice(&[3.0; 8]);
        let original = grads.clone();
        assert!(state.begin_step(1), "start_iter = 0 compresses from the first step");
        let p = state.compress(&grads);
        assert_eq!(p.len(), 8 * 2 + 8, "P factors, then the bias whole");
        let q = state.project(&grads, p);
        assert_eq!(q.len(), 16 * 2);
        state.decompress(&mut grads, &mut Lent::default(), q);
        // Within FP32 rounding of the largest value (8 · 15.5).
        for (k, (got, want)) in grads.iter().zip(&original).enumerate() {
            assert!((got - want).abs() <= 1e-4 * 124.0, "value {k}: {got} against {want}");
        }
        assert_eq!(state.warm_start().1, 1);
        // Nothing lent: M̂ is in the bucket for the update; the errors come back as it is cleared.
        grads.fill(0.0);
        state.restore_aside(&mut grads);
        assert!(grads.iter().all(|e| e.abs() < 1e-2), "a rank-one gradient leaves (almost) no error");
    }
}
