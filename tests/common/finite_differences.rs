//! A model's gradients against central finite differences of its own forward, for the tests of
//! layers and blocks that assume nothing about how backward is written.

use overlap::{DistributedModel, GradientBuckets, Matrix, StepContext};

/// `Σ output ⊙ w` on `x` grouped as `ctx`, in f64: its gradient with respect to the output is `w`.
fn loss<M: DistributedModel>(model: &M, ctx: &StepContext, x: &Matrix, w: &Matrix) -> f64 {
    let out = model.forward_with(ctx, x, &mut M::Workspace::default()).clone();
    out.as_slice().iter().zip(w.as_slice()).map(|(o, w)| f64::from(*o) * f64::from(*w)).sum()
}

/// Checks every `stride`-th element of every parameter's gradient, from one backward of the
/// loss above, against central differences with a step of 1e-2, within `abs + rel·|numeric|`;
/// returns how many elements it checked.
pub fn check<M: DistributedModel>(
    model: &mut M,
    (ctx, x, w): (&StepContext, &Matrix, &Matrix),
    stride: usize,
    (abs, rel): (f64, f64),
) -> usize {
    let (mut ws, mut grads) = (M::Workspace::default(), model.new_grads());
    model.forward_with(ctx, x, &mut ws);
    model.backward_no_sync(&mut ws, w, &mut grads);
    let buckets = grads.buckets();
    let schedule = &M::SCHEDULE;
    let mut checked = 0;
    for p in schedule.params() {
        let info = schedule.param(p);
        let analytic = buckets[info.bucket].view(info.offset, info.numel()).to_vec();
        for (k, &a) in analytic.iter().enumerate().step_by(stride) {
            let (h, original) = (1e-2f32, model.param(p)[k]);
            model.param_mut(p)[k] = original + h;
            let up = loss(&*model, ctx, x, w);
            model.param_mut(p)[k] = original - h;
            let down = loss(&*model, ctx, x, w);
            model.param_mut(p)[k] = original;
            let numeric = (up - down) / (2.0 * f64::from(h));
            let name = schedule.param_name(p);
            assert!(
                (f64::from(a) - numeric).abs() <= abs + rel * numeric.abs(),
                "{name}[{k}]: backward {a}, finite differences {numeric}"
            );
            checked += 1;
        }
    }
    checked
}
