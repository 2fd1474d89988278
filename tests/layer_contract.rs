//! A layer of one's own that breaks the `Layer` contract is named where it breaks it: its
//! `init` sizing a parameter otherwise than `PARAMS` (an error when the model is built), its
//! forward writing another shape than `WIDTH` says, or its backward an input gradient of another
//! shape than the input (a panic naming the layer, not the built-in layer after it that reads
//! the output, as before). `GradientCheck` finds what breaks the gradients themselves.

use overlap::prelude::*;
use overlap::{gemm, GradientMismatch, InitRng, MatRef, ParamDef, ReportFormat, SyntheticClassification, Width};

/// `y = x * gain`, with one bug chosen by `BUG`.
pub struct Buggy<const BUG: u8> {
    gain: Vec<f32>,
}

const NONE: u8 = 0;
const SHORT_INIT: u8 = 1;
const WIDE_OUTPUT: u8 = 2;
const SHORT_INPUT_GRADIENT: u8 = 3;
/// The gain's gradient with the wrong sign.
const NEGATED_GRADIENT: u8 = 4;
/// The gain's gradient written over what is there instead of added to it.
const OVERWRITTEN_GRADIENT: u8 = 5;

impl<const BUG: u8> Layer for Buggy<BUG> {
    const PARAMS: &'static [ParamDef] = &[ParamDef { name: "gain", shape: &[4] }];
    const WIDTH: Width = Width::Fixed { input: 4, output: 4 };
    type Saved = ();

    fn init(_: &mut InitRng) -> Self {
        Buggy { gain: vec![1.0; if BUG == SHORT_INIT { 3 } else { 4 }] }
    }

    fn param(&self, _: usize) -> &[f32] {
        &self.gain
    }

    fn param_mut(&mut self, _: usize) -> &mut [f32] {
        &mut self.gain
    }

    fn forward(&self, _: &StepContext, input: &Matrix, output: &mut Matrix, _: &mut ()) {
        output.resize(input.rows(), if BUG == WIDE_OUTPUT { 5 } else { 4 });
        for r in 0..input.rows() {
            for ((y, x), g) in output.row_mut(r).iter_mut().zip(input.row(r)).zip(&self.gain) {
                *y = x * g;
            }
        }
    }

    fn backward(
        &self,
        _: &StepContext,
        input: &Matrix,
        _: &Matrix,
        _: &(),
        dy: &Matrix,
        grads: &mut [&mut [f32]],
        _: bool,
        dx: Option<&mut Matrix>,
    ) {
        if BUG == OVERWRITTEN_GRADIENT {
            grads[0].fill(0.0);
        }
        let sign = if BUG == NEGATED_GRADIENT { -1.0 } else { 1.0 };
        for r in 0..input.rows() {
            for ((dg, x), d) in grads[0].iter_mut().zip(input.row(r)).zip(dy.row(r)) {
                *dg += sign * x * d;
            }
        }
        if let Some(dx) = dx {
            let rows = if BUG == SHORT_INPUT_GRADIENT { input.rows() - 1 } else { input.rows() };
            dx.resize(rows, 4);
            for r in 0..rows {
                for ((d, dy), g) in dx.row_mut(r).iter_mut().zip(dy.row(r)).zip(&self.gain) {
                    *d = dy * g;
                }
            }
        }
    }
}

macro_rules! model {
    ($name:ident, $bug:expr) => {
        #[distributed_model(bucket_cap_mb = 1, first_bucket_mb = 1)]
        pub struct $name {
            fc: Linear<6, 4>,
            #[layer(input = 4, output = 4, params(gain = [4]))]
            gain: Buggy<$bug>,
            head: Linear<4, 3>,
        }
    };
}

model!(Sound, NONE);
model!(ShortInit, SHORT_INIT);
model!(WideOutput, WIDE_OUTPUT);
model!(ShortInputGradient, SHORT_INPUT_GRADIENT);

fn fit<M: DistributedModel>() -> std::thread::Result<overlap::Result<TrainSummary>> {
    std::panic::catch_unwind(|| {
        let comm = Communicator::single();
        let mut model = M::new(&comm, 1)?;
        let mut data = SyntheticClassification::new(3, 6, 3);
        Trainer::new(&comm).steps(2).batch(4).report(ReportFormat::Off, None).fit(
            &mut model,
            &mut data,
            &CrossEntropyLoss,
        )
    })
}

fn panic_message(result: std::thread::Result<overlap::Result<TrainSummary>>) -> String {
    let payload = result.map(|_| ()).expect_err("a broken layer panics");
    payload.downcast_ref::<String>().cloned().or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string())).unwrap()
}

#[test]
fn a_layer_that_breaks_its_contract_is_named() {
    assert!(fit::<Sound>().unwrap().is_ok(), "the sound layer trains");
    let error = fit::<ShortInit>().unwrap().map(|_| ()).unwrap_err().to_string();
    assert!(error.contains("`gain.gain` holds 3 values after `Layer::init`, but its shape [4] has 4"), "{error}");
    let message = panic_message(fit::<WideOutput>());
    assert!(message.contains("layer `gain` (") && message.contains("Buggy<2>, layer 1)"), "{message}");
    assert!(message.contains("forward wrote a 4x5 output for a 4x4 input; its `WIDTH` says 4x4"), "{message}");
    let message = panic_message(fit::<ShortInputGradient>());
    assert!(
        message.contains("backward wrote a 3x4 gradient for a 4x4 input") && message.contains("Buggy<3>"),
        "{message}"
    );
    // In a repeated block, by its path: backward meets the last copy first.
    let message = panic_message(fit::<in_blocks::Net>());
    assert!(message.starts_with("layer `blocks.1.gain` ("), "{message}");
    assert!(message.contains("Buggy<3>, layer 2): backward wrote a 3x4 gradient for a 4x4 input"), "{message}");
}

/// An input of the wrong width, given to a model in a loop of one's own, is named at the layer
/// that reads it, by its path, rather than by that layer's own assertion.
#[test]
fn an_input_of_the_wrong_width_names_the_first_layer() {
    let comm = Communicator::single();
    let model = in_blocks::Net::new(&comm, 1).unwrap();
    let mut ws = <in_blocks::Net as DistributedModel>::Workspace::default();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        model.forward(&Matrix::zeros(8, 10), &mut ws);
    }));
    let payload = result.expect_err("a model given 10 columns for 6 panics");
    let message = payload.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(message.starts_with("layer `fc` ("), "{message}");
    assert!(message.contains("layer 0): forward got a 8x10 input; its `WIDTH` takes 6 columns"), "{message}");
}

/// The short input gradient in the second of two blocks.
#[distributed_model(bucket_cap_mb = 1, first_bucket_mb = 1)]
pub mod in_blocks {
    use overlap::prelude::*;

    pub struct Block {
        #[layer(input = 4, output = 4, params(gain = [4]))]
        gain: super::Buggy<{ super::SHORT_INPUT_GRADIENT }>,
    }

    pub struct Net {
        fc: Linear<6, 4>,
        blocks: [Block; 2],
        head: Linear<4, 3>,
    }
}

/// `GradientCheck` on the layer alone, as one checks a layer of one's own before training with it:
/// the sound one passes; a wrong sign, a gradient written over the accumulated one, an output
/// wider than `WIDTH` and a short input gradient are each named.
#[test]
fn the_gradient_check_finds_what_a_layer_of_ones_own_gets_wrong() {
    fn check<const BUG: u8>() -> Result<usize, GradientMismatch> {
        let input = Matrix::from_vec(3, 4, InitRng::new(4).uniform(12, 2.0));
        GradientCheck::new().seed(2).run(Buggy::<BUG>::init(&mut InitRng::new(1)), &StepContext::rows(3), input)
    }
    // Every input element and every gain.
    assert_eq!(check::<NONE>(), Ok(12 + 4));
    let negated = check::<NEGATED_GRADIENT>().unwrap_err();
    assert!(matches!(&negated, GradientMismatch::Value { what, .. } if what == "gain[0]"), "{negated}");
    let overwritten = check::<OVERWRITTEN_GRADIENT>().unwrap_err();
    assert!(
        matches!(&overwritten, GradientMismatch::Value { what, .. } if what == "accumulated gain[0]"),
        "{overwritten}"
    );
    let wide = check::<WIDE_OUTPUT>().unwrap_err();
    assert_eq!(wide.to_string(), "the output (by its `WIDTH`) is 3x5, not 3x4");
    let short = check::<SHORT_INPUT_GRADIENT>().unwrap_err();
    assert_eq!(short.to_string(), "the input's gradient is 2x4, not 3x4");
}

/// A layer that declares a parameter but leaves `param` and `param_mut` to their defaults,
/// which only a layer without parameters may: the sound `Buggy` otherwise.
pub struct Forgetful(Buggy<NONE>);

impl Layer for Forgetful {
    const PARAMS: &'static [ParamDef] = Buggy::<NONE>::PARAMS;
    const WIDTH: Width = Buggy::<NONE>::WIDTH;
    type Saved = ();

    fn init(rng: &mut InitRng) -> Self {
        Forgetful(Buggy::init(rng))
    }

    fn forward(&self, ctx: &StepContext, input: &Matrix, output: &mut Matrix, saved: &mut ()) {
        self.0.forward(ctx, input, output, saved)
    }

    fn backward(
        &self,
        ctx: &StepContext,
        input: &Matrix,
        output: &Matrix,
        saved: &(),
        dy: &Matrix,
        grads: &mut [&mut [f32]],
        accumulate: bool,
        dx: Option<&mut Matrix>,
    ) {
        self.0.backward(ctx, input, output, saved, dy, grads, accumulate, dx)
    }
}

#[distributed_model(bucket_cap_mb = 1, first_bucket_mb = 1)]
pub struct WithForgetful {
    fc: Linear<6, 4>,
    #[layer(input = 4, output = 4, params(gain = [4]))]
    gain: Forgetful,
    head: Linear<4, 3>,
}

#[test]
fn a_layer_with_parameters_that_does_not_give_them_is_named_when_its_model_is_built() {
    let message = panic_message(fit::<WithForgetful>());
    assert!(
        message.contains(
            "Forgetful declares 1 parameter(s) in `PARAMS` but does not give them: a layer with parameters \
             writes `Layer::param` and `Layer::param_mut`"
        ),
        "{message}"
    );
}

/// A dense layer of one's own on the library's products (`overlap::gemm` over `MatRef` views, a
/// transpose without a copy), as a user writes one: `y = x·Wᵀ`, no bias.
pub struct Dense<const IN: usize, const OUT: usize> {
    weight: Vec<f32>,
}

impl<const IN: usize, const OUT: usize> Layer for Dense<IN, OUT> {
    const PARAMS: &'static [ParamDef] = &[ParamDef { name: "weight", shape: &[OUT, IN] }];
    const WIDTH: Width = Width::Fixed { input: IN, output: OUT };
    type Saved = ();

    fn init(rng: &mut InitRng) -> Self {
        Dense { weight: rng.uniform(OUT * IN, 1.0 / (IN as f32).sqrt()) }
    }

    fn param(&self, _: usize) -> &[f32] {
        &self.weight
    }

    fn param_mut(&mut self, _: usize) -> &mut [f32] {
        &mut self.weight
    }

    fn forward(&self, _: &StepContext, x: &Matrix, y: &mut Matrix, _: &mut ()) {
        y.resize(x.rows(), OUT);
        let (x, w) = (MatRef::row_major(x.as_slice(), x.rows(), IN), MatRef::row_major(&self.weight, OUT, IN));
        let rows = y.rows();
        gemm(1.0, x, w.t(), 0.0, y.as_mut_slice(), rows, OUT);
    }

    fn backward(
        &self,
        _: &StepContext,
        x: &Matrix,
        _: &Matrix,
        _: &(),
        dy: &Matrix,
        grads: &mut [&mut [f32]],
        _: bool,
        dx: Option<&mut Matrix>,
    ) {
        let rows = x.rows();
        let (x, dy_view) = (MatRef::row_major(x.as_slice(), rows, IN), MatRef::row_major(dy.as_slice(), rows, OUT));
        // dW += dyᵀ·x: gradients arrive cleared, or hold the micro-steps before.
        gemm(1.0, dy_view.t(), x, 1.0, grads[0], OUT, IN);
        if let Some(dx) = dx {
            dx.resize(rows, IN);
            gemm(1.0, dy_view, MatRef::row_major(&self.weight, OUT, IN), 0.0, dx.as_mut_slice(), rows, IN);
        }
    }
}

/// The library's products serve a layer of one's own: it passes the gradient check, and with
/// `Linear`'s weight and a zero bias it computes `Linear`'s output.
#[test]
fn a_layer_of_ones_own_on_the_librarys_products_passes_the_gradient_check() {
    let input = Matrix::from_vec(5, 6, InitRng::new(3).uniform(30, 2.0));
    let dense = Dense::<6, 4>::init(&mut InitRng::new(1));
    let compared = GradientCheck::new().seed(4).run(dense, &StepContext::rows(5), input.clone());
    assert_eq!(compared, Ok(15 + 24), "every other input element (at most 24 a tensor), every weight");
    let mut linear = Linear::<6, 4>::init(&mut InitRng::new(2));
    linear.param_mut(1).fill(0.0);
    let mut dense = Dense::<6, 4>::init(&mut InitRng::new(1));
    dense.param_mut(0).copy_from_slice(linear.param(0));
    let (mut ours, mut theirs) = (Matrix::default(), Matrix::default());
    dense.forward(&StepContext::rows(5), &input, &mut ours, &mut ());
    linear.forward(&StepContext::rows(5), &input, &mut theirs, &mut Default::default());
    assert_eq!(ours.as_slice(), theirs.as_slice());
}
