//! `#[init(..)]`: nanoGPT's initialisation of a model of blocks, drawn deterministically.

use super::*;

/// A layer of one's own for the `#[init]` test: `y = x * weight + bias` per feature, its weight
/// a `[1, D]` matrix starting at ones and its bias at one half, so that its own `init` shows.
pub struct Affine<const D: usize> {
    weight: Vec<f32>,
    bias: Vec<f32>,
}

impl<const D: usize> Layer for Affine<D> {
    const PARAMS: &'static [overlap::ParamDef] =
        &[overlap::ParamDef { name: "weight", shape: &[1, D] }, overlap::ParamDef { name: "bias", shape: &[D] }];
    const WIDTH: overlap::Width = overlap::Width::Preserving;
    type Saved = ();

    fn init(_: &mut overlap::InitRng) -> Self {
        Affine { weight: vec![1.0; D], bias: vec![0.5; D] }
    }

    fn param(&self, index: usize) -> &[f32] {
        [&self.weight, &self.bias][index]
    }

    fn param_mut(&mut self, index: usize) -> &mut [f32] {
        match index {
            0 => &mut self.weight,
            _ => &mut self.bias,
        }
    }

    fn forward(&self, _: &StepContext, input: &Matrix, output: &mut Matrix, _: &mut ()) {
        output.resize(input.rows(), D);
        for r in 0..input.rows() {
            for (((y, x), w), b) in output.row_mut(r).iter_mut().zip(input.row(r)).zip(&self.weight).zip(&self.bias) {
                *y = x * w + b;
            }
        }
    }

    fn backward(
        &self,
        _: &StepContext,
        input: &Matrix,
        _: &Matrix,
        _: &(),
        grad_output: &Matrix,
        grads: &mut [&mut [f32]],
        _accumulate: bool,
        grad_input: Option<&mut Matrix>,
    ) {
        for r in 0..input.rows() {
            for (c, (x, dy)) in input.row(r).iter().zip(grad_output.row(r)).enumerate() {
                grads[0][c] += x * dy;
                grads[1][c] += dy;
            }
        }
        if let Some(dx) = grad_input {
            dx.resize(input.rows(), D);
            for r in 0..input.rows() {
                for ((d, dy), w) in dx.row_mut(r).iter_mut().zip(grad_output.row(r)).zip(&self.weight) {
                    *d = dy * w;
                }
            }
        }
    }
}

/// `#[init(..)]` on a layer or a block of layers: nanoGPT's initialisation, its residual
/// projections at a spread of their own, an inner `#[init]` deciding its layer whole, and layers
/// of one's own left to their `init` by a block's `std` unless a suffix or their own field's
/// `#[init]` names them.
#[distributed_model(bucket_cap_mb = 1)]
pub mod initialised {
    use overlap::prelude::*;

    #[residual]
    pub struct Res {
        norm: LayerNorm<8>,
        fc: Linear<8, 8>,
        #[init(std = 0.5)]
        out: Linear<8, 8>,
        #[layer(params(weight = [1, 8], bias = [8]))]
        kept: super::Affine<8>,
        #[layer(params(weight = [1, 8], bias = [8]))]
        named: super::Affine<8>,
        #[init(std = 0.3)]
        #[layer(params(weight = [1, 8], bias = [8]))]
        drawn: super::Affine<8>,
    }

    pub struct Net {
        #[init(std = 0.02)]
        wte: Embedding<11, 8>,
        #[init(std = 0.02, ends_with("fc.weight", std = 0.002), ends_with("named.weight", std = 5.0))]
        blocks: [Res; 2],
        #[init(ends_with("head.bias", std = 1.0))]
        head: Linear<8, 11>,
    }
}

#[test]
fn init_redraws_the_weights_of_a_layer_and_of_every_layer_of_a_block_and_the_parameters_a_suffix_names() {
    let model = initialised::Net::new(&Communicator::single(), 2).unwrap();
    let s = &initialised::Net::SCHEDULE;
    let param = |name: &str| model.param(s.params().find(|&p| s.param_name(p) == name).unwrap()).to_vec();
    let spread = |v: &[f32]| (v.iter().map(|x| x * x).sum::<f32>() / v.len() as f32).sqrt();
    let about = |name: &str, low: f32, high: f32| {
        let std = spread(&param(name));
        assert!((low..high).contains(&std), "{name}: spread {std}, not in {low}..{high}");
    };
    about("wte.weight", 0.01, 0.03);
    for block in ["blocks.0", "blocks.1"] {
        about(&format!("{block}.fc.weight"), 0.001, 0.003);
        about(&format!("{block}.out.weight"), 0.3, 0.7);
        assert!(param(&format!("{block}.fc.bias")).iter().all(|&b| b == 0.0), "biases zeroed");
        assert!(param(&format!("{block}.out.bias")).iter().all(|&b| b == 0.0), "biases zeroed");
        assert!(param(&format!("{block}.norm.weight")).iter().all(|&g| g == 1.0), "LayerNorm's gains kept");
        // A layer of one's own: the block's `std` keeps its `init`; a suffix draws what it names,
        // and an `#[init]` on its own field decides it as it decides a built-in layer.
        assert!(param(&format!("{block}.kept.weight")).iter().all(|&w| w == 1.0), "own init kept");
        assert!(param(&format!("{block}.kept.bias")).iter().all(|&b| b == 0.5), "own init kept");
        about(&format!("{block}.named.weight"), 2.5, 8.0);
        assert!(param(&format!("{block}.named.bias")).iter().all(|&b| b == 0.5), "not named: own init kept");
        about(&format!("{block}.drawn.weight"), 0.15, 0.45);
        assert!(param(&format!("{block}.drawn.bias")).iter().all(|&b| b == 0.0), "its own `std` zeroes its bias");
    }
    // `head.weight` keeps PyTorch's default, U(-1/√8, 1/√8): a spread of about 0.2.
    about("head.weight", 0.1, 0.3);
    // Out of reach of the default, whose spread is at most 1/√8 ≈ 0.354.
    about("head.bias", 0.6, 1.6);
    let again = initialised::Net::new(&Communicator::single(), 2).unwrap();
    assert_eq!(again.param(overlap::plan::ParamRef { layer: 0, param: 0 }), &param("wte.weight")[..], "deterministic");
}
