//! A model with a layer the macro does not know: `Gain<D>`, a learnable per-feature scale,
//! described to the macro with `#[layer(...)]` and checked at compile time against its
//! `overlap::Layer` constants. Also uses `LayerNorm`, `Gelu` and a forced bucket boundary.
//!
//! ```text
//! mpirun -n 2 target/release/examples/custom_layer --steps 50
//! ```

use overlap::prelude::*;

/// `y = x * gain`, one gain per feature, initialised to ones.
pub struct Gain<const D: usize> {
    gain: Vec<f32>,
}

impl<const D: usize> Layer for Gain<D> {
    const PARAMS: &'static [ParamDef] = &[ParamDef { name: "gain", shape: &[D] }];
    const WIDTH: Width = Width::Fixed { input: D, output: D };
    type Saved = ();

    fn init(_: &mut InitRng) -> Self {
        Gain { gain: vec![1.0; D] }
    }

    fn param(&self, index: usize) -> &[f32] {
        assert_eq!(index, 0, "Gain has one parameter");
        &self.gain
    }

    fn param_mut(&mut self, index: usize) -> &mut [f32] {
        assert_eq!(index, 0, "Gain has one parameter");
        &mut self.gain
    }

    fn forward(&self, _ctx: &StepContext, input: &Matrix, output: &mut Matrix, _: &mut ()) {
        output.resize(input.rows(), D);
        for r in 0..input.rows() {
            for ((y, x), g) in output.row_mut(r).iter_mut().zip(input.row(r)).zip(&self.gain) {
                *y = x * g;
            }
        }
    }

    fn backward(
        &self,
        _ctx: &StepContext,
        input: &Matrix,
        _output: &Matrix,
        _: &(),
        grad_output: &Matrix,
        grads: &mut [&mut [f32]],
        _accumulate: bool,
        grad_input: Option<&mut Matrix>,
    ) {
        // Gradients start every step cleared, so adding serves the first micro-step and the
        // ones that accumulate alike.
        let dgain = &mut *grads[0];
        for r in 0..input.rows() {
            for ((dg, x), dy) in dgain.iter_mut().zip(input.row(r)).zip(grad_output.row(r)) {
                *dg += x * dy;
            }
        }
        if let Some(dx) = grad_input {
            dx.resize(input.rows(), D);
            for r in 0..input.rows() {
                for ((d, dy), g) in dx.row_mut(r).iter_mut().zip(grad_output.row(r)).zip(&self.gain) {
                    *d = dy * g;
                }
            }
        }
    }
}

/// Gradients are ready head first: the boundary on `head` closes a bucket of its own (10 KiB,
/// launched right after its backward), and the rest (785 KiB, `gain` first, `embed.weight`
/// last) stays under the 1 MiB cap, one bucket launched after `embed`'s backward.
#[distributed_model(bucket_cap_mb = 1, first_bucket_mb = 1)]
pub struct Classifier {
    embed: Linear<784, 256>,
    norm: LayerNorm<256>,
    act: Gelu,
    #[layer(input = 256, output = 256, params(gain = [256]))]
    gain: Gain<256>,
    #[bucket_boundary]
    head: Linear<256, 10>,
}

fn main() -> std::process::ExitCode {
    overlap_cli::main::<Classifier>()
}
