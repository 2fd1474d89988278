//! The passes against an f64 replica of PyTorch's `powerSGD_hook` (torch 2.15,
//! `ddp_comm_hooks/powerSGD_hook.py`, default state: `orthogonalization_epsilon = 0`, warm
//! start, error feedback), step by step on three simulated ranks: each rank's `LowRankState`
//! runs `compress`, `project` and `decompress` as the communicator calls them, the messages
//! summed in rank order between the passes as the all-reduce sums them.
//!
//! The hook, per bucket and step: M = gradient + error; orthogonalise Q (the warm start, or the
//! first random Q); P = M·Q; all-reduce P (a sum); orthogonalise P; Q = Mᵀ·P; all-reduce Q, then
//! divide it by world; M̂ = P·Qᵀ (the mean's approximation); error = M − M̂. Our buckets hold sums,
//! so our M̂ is world times the hook's and our Q the undivided sum; the error is the same.

use super::*;
use overlap_plan::{plan_buckets, BucketLimits, GradComm, LayerSpec, Width};

const WORLD: usize = 3;
const RANK: usize = 4;

/// Row-major f64 matrices, as small as the test needs.
#[derive(Clone, Debug)]
struct Mat {
    rows: usize,
    cols: usize,
    v: Vec<f64>,
}

impl Mat {
    fn zeros(rows: usize, cols: usize) -> Self {
        Mat { rows, cols, v: vec![0.0; rows * cols] }
    }
    fn at(&self, i: usize, j: usize) -> f64 {
        self.v[i * self.cols + j]
    }
    fn set(&mut self, i: usize, j: usize, x: f64) {
        self.v[i * self.cols + j] = x;
    }
    fn t(&self) -> Mat {
        let mut out = Mat::zeros(self.cols, self.rows);
        (0..self.rows).for_each(|i| (0..self.cols).for_each(|j| out.set(j, i, self.at(i, j))));
        out
    }
    fn mul(&self, b: &Mat) -> Mat {
        let mut out = Mat::zeros(self.rows, b.cols);
        for i in 0..self.rows {
            for j in 0..b.cols {
                out.set(i, j, (0..self.cols).map(|k| self.at(i, k) * b.at(k, j)).sum());
            }
        }
        out
    }
    fn add(&self, b: &Mat, scale: f64) -> Mat {
        Mat { rows: self.rows, cols: self.cols, v: self.v.iter().zip(&b.v).map(|(x, y)| x + scale * y).collect() }
    }
    fn norm(&self) -> f64 {
        self.v.iter().map(|x| x * x).sum::<f64>().sqrt()
    }
    /// `_orthogonalize_gram_schmidt` with epsilon 0: normalise column i, then remove it from the
    /// columns after it (a zero column becomes zeros, the hook's recovery from its NaNs).
    fn gram_schmidt(&mut self) {
        for i in 0..self.cols {
            let norm = (0..self.rows).map(|r| self.at(r, i).powi(2)).sum::<f64>().sqrt();
            (0..self.rows).for_each(|r| self.set(r, i, if norm > 0.0 { self.at(r, i) / norm } else { 0.0 }));
            for j in i + 1..self.cols {
                let dot: f64 = (0..self.rows).map(|r| self.at(r, i) * self.at(r, j)).sum();
                (0..self.rows).for_each(|r| self.set(r, j, self.at(r, j) - dot * self.at(r, i)));
            }
        }
    }
}

/// A `rows x cols` matrix with singular values `sigma` and pseudo-random singular vectors.
fn with_spectrum(rng: &mut InitRng, rows: usize, cols: usize, sigma: &[f64]) -> Mat {
    let orthonormal = |rng: &mut InitRng, n: usize| {
        let mut m = Mat {
            rows: n,
            cols: sigma.len(),
            v: rng.uniform(n * sigma.len(), 1.0).into_iter().map(f64::from).collect(),
        };
        m.gram_schmidt();
        m
    };
    let (u, v) = (orthonormal(rng, rows), orthonormal(rng, cols));
    let mut us = u.clone();
    (0..rows).for_each(|i| (0..sigma.len()).for_each(|k| us.set(i, k, u.at(i, k) * sigma[k])));
    us.mul(&v.t())
}

/// The hook's state for one matrix, in f64: Q (the divided sum) and each rank's error.
struct Reference {
    q: Mat,
    errors: Vec<Mat>,
}

/// What one step of the hook computes for one matrix: P, the summed Q (undivided, as ours keeps
/// it), the mean's M̂, and each rank's new error.
struct StepResult {
    p: Mat,
    q_sum: Mat,
    mean_approx: Mat,
}

impl Reference {
    fn step(&mut self, grads: &[Mat]) -> StepResult {
        let world = grads.len() as f64;
        let ms: Vec<Mat> = grads.iter().zip(&self.errors).map(|(g, e)| g.add(e, 1.0)).collect();
        self.q.gram_schmidt();
        let mut p = ms.iter().map(|m| m.mul(&self.q)).reduce(|a, b| a.add(&b, 1.0)).unwrap();
        p.gram_schmidt();
        let q_sum = ms.iter().map(|m| m.t().mul(&p)).reduce(|a, b| a.add(&b, 1.0)).unwrap();
        self.q = Mat { v: q_sum.v.iter().map(|x| x / world).collect(), ..q_sum.clone() };
        let mean_approx = p.mul(&self.q.t());
        self.errors = ms.iter().map(|m| m.add(&mean_approx, -1.0)).collect();
        StepResult { p, q_sum, mean_approx }
    }
}

fn close(got: impl Iterator<Item = f64>, want: &Mat, tolerance: f64, what: &str) {
    let got: Vec<f64> = got.collect();
    let diff = got.iter().zip(&want.v).map(|(a, b)| (a - b).powi(2)).sum::<f64>().sqrt();
    assert!(diff <= tolerance, "{what}: off by {diff:e}, more than {tolerance:e} (norm {:e})", want.norm());
}

#[test]
fn every_pass_follows_pytorchs_hook_from_tiny_to_large_singular_values() {
    // Two weight matrices in one bucket: one whose largest singular value is 3e-4 (a plain Q
    // warm start left its P columns short of unit length there), one spanning 1e2 to 1e-4.
    let (tiny, wide) = ([3e-4, 2e-4, 1.5e-4, 1e-4], [1e2, 1e1, 1.0, 1e-1, 1e-2, 1e-3, 1e-4]);
    let layers = [
        LayerSpec::new("tiny", "Linear", Width::Fixed { input: 40, output: 48 }).with_param("weight", &[48, 40]),
        LayerSpec::new("wide", "Linear", Width::Fixed { input: 48, output: 36 }).with_param("weight", &[36, 48]),
    ];
    let spec = LowRank::new(RANK, 0);
    let s = plan_buckets("M", &layers, &BucketLimits::Unlimited).unwrap().with_grad_comm(GradComm::LowRank(spec));
    let mut states: Vec<LowRankState> = (0..WORLD).map(|_| LowRankState::new(&s, 0, spec)).collect();
    let mut grads = vec![vec![0.0f32; s.buckets[0].numel]; WORLD];
    let mut rng = InitRng::new(23);
    let shapes = [(48, 40, &tiny[..]), (36, 48, &wide[..])];
    let bases: Vec<Mat> = shapes.iter().map(|&(r, c, sigma)| with_spectrum(&mut rng, r, c, sigma)).collect();
    let matrices = &states[0].matrices.clone();
    assert_eq!(matrices.len(), 2);
    let mut references: Vec<Reference> = matrices
        .iter()
        .map(|m| {
            let qt = &states[0].q_message.as_ref().unwrap()[m.q(RANK)];
            let mut q = Mat::zeros(m.cols, RANK);
            (0..m.cols).for_each(|i| (0..RANK).for_each(|c| q.set(i, c, f64::from(qt[c * m.cols + i]))));
            Reference { q, errors: vec![Mat::zeros(m.rows, m.cols); WORLD] }
        })
        .collect();
    // Which base a matrix is: the planner orders the bucket by ready order (`wide` first).
    let base_of = |m: &Factorised| bases.iter().position(|b| (b.rows, b.cols) == (m.rows, m.cols)).unwrap();

    for step in 0..6 {
        // Rank r's gradient: the base, scaled per rank and step, plus a rank's own perturbation
        // at a hundredth of the smallest singular value.
        let mut rank_grads: Vec<Vec<Mat>> = vec![Vec::new(); matrices.len()];
        for (j, m) in matrices.iter().enumerate() {
            let base = &bases[base_of(m)];
            let smallest = shapes[base_of(m)].2.last().unwrap();
            for (r, bucket) in grads.iter_mut().enumerate() {
                let scale = 1.0 + 0.25 * r as f64 + 0.1 * step as f64;
                let noise = rng.uniform(m.rows * m.cols, 1.0);
                let g = Mat {
                    rows: m.rows,
                    cols: m.cols,
                    v: base.v.iter().zip(&noise).map(|(b, n)| b * scale + 0.01 * smallest * f64::from(*n)).collect(),
                };
                // Rounded to f32, as our bucket holds it; the reference starts from the same values.
                let g = Mat { v: g.v.iter().map(|&x| f64::from(x as f32)).collect(), ..g };
                // Backward adds the gradient to the error the bucket holds.
                for (dst, x) in bucket[m.gradient()].iter_mut().zip(&g.v) {
                    *dst += *x as f32;
                }
                rank_grads[j].push(g);
            }
        }

        // Ours: the passes in the communicator's order, messages summed in rank order.
        let sum = |messages: Vec<Vec<f32>>| {
            let mut total = messages[0].clone();
            messages[1..].iter().for_each(|m| total.iter_mut().zip(m).for_each(|(t, x)| *t += x));
            total
        };
        let p_sum = sum(states
            .iter_mut()
            .zip(&grads)
            .map(|(st, g)| {
                assert!(st.begin_step(WORLD));
                st.compress(g)
            })
            .collect());
        let q_sum = sum(states.iter_mut().zip(&grads).map(|(st, g)| st.project(g, p_sum.clone())).collect());
        for (st, g) in states.iter_mut().zip(&mut grads) {
            st.decompress(g, &mut Lent::default(), q_sum.clone());
        }

        for (j, m) in matrices.iter().enumerate() {
            let want = references[j].step(&rank_grads[j]);
            let what = |x: &str| format!("step {step}, {}x{} matrix, {x}", m.rows, m.cols);
            let p = &states[0].p_message.as_ref().unwrap()[m.p(RANK)];
            close(p.iter().map(|&x| f64::from(x)), &want.p, 1e-4, &what("orthogonalised P"));
            let qt = &states[0].q_message.as_ref().unwrap()[m.q(RANK)];
            let q = (0..m.cols).flat_map(|i| (0..RANK).map(move |c| f64::from(qt[c * m.cols + i])));
            close(q, &want.q_sum, 1e-4 * want.q_sum.norm(), &what("summed Q"));
            let scale = want.mean_approx.norm();
            for (r, bucket) in grads.iter().enumerate() {
                // Nothing lent: M̂ of the sum is in the bucket for the update.
                let mean = bucket[m.gradient()].iter().map(|&x| f64::from(x) / WORLD as f64);
                close(mean, &want.mean_approx, 1e-5 * scale, &what(&format!("rank {r}'s M̂ / world")));
            }
            // M̂ captures the top four directions: almost all of the mean's norm.
            let mean: Mat = rank_grads[j].iter().skip(1).fold(rank_grads[j][0].clone(), |a, b| a.add(b, 1.0));
            let ratio = scale / (mean.norm() / WORLD as f64);
            assert!(ratio > 0.99, "{}: ‖M̂‖ / ‖mean‖ = {ratio}", what("the approximation"));
        }
        // The errors come back as the bucket is cleared (after the update): compare them too.
        for (r, (st, bucket)) in states.iter_mut().zip(&mut grads).enumerate() {
            bucket.fill(0.0);
            st.restore_aside(bucket);
            for (j, m) in matrices.iter().enumerate() {
                let want = &references[j].errors[r];
                let tolerance = 1e-5 * rank_grads[j][r].norm();
                let got = bucket[m.gradient()].iter().map(|&x| f64::from(x));
                close(got, want, tolerance, &format!("step {step}, {}x{} matrix, rank {r}'s error", m.rows, m.cols));
            }
        }
    }
}
