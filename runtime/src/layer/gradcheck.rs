//! The built-in layers' gradients against finite differences (`GradientCheck`), plus the
//! layer-contract checks the macro relies on.

use super::*;
use crate::init::InitRng;
use crate::tensor::Matrix;

const ROWS: usize = 4;

/// Checks parameter gradients only, for a layer whose input has no gradient (token ids).
fn check_params_in<L: Layer>(layer: L, ctx: &StepContext, input: Matrix, seed: u64) {
    let check = GradientCheck::new().seed(seed).parameters_only().keep_parameters();
    check.run(layer, ctx, input).unwrap_or_else(|e| panic!("{e}"));
}

/// Checks input and parameter gradients of `layer` (parameters re-drawn at random so that, e.g.,
/// LayerNorm's unit weight does not hide errors) on `input`, rows of independent samples.
fn check<L: Layer>(layer: L, input: Matrix, seed: u64) {
    let ctx = StepContext::rows(input.rows());
    check_in(layer, &ctx, input, seed)
}

/// `check` on rows grouped as `ctx` says.
fn check_in<L: Layer>(layer: L, ctx: &StepContext, input: Matrix, seed: u64) {
    let compared = GradientCheck::new().seed(seed).run(layer, ctx, input).unwrap_or_else(|e| panic!("{e}"));
    assert!(compared > 0 || L::PARAMS.is_empty(), "elements compared");
}

fn random_input(cols: usize, seed: u64) -> Matrix {
    Matrix::from_vec(ROWS, cols, InitRng::new(seed).uniform(ROWS * cols, 2.0))
}

#[test]
fn linear() {
    check(Linear::<5, 3>::init(&mut InitRng::new(1)), random_input(5, 2), 3);
}

#[test]
fn per_token_layers_ignore_how_rows_group_into_sequences() {
    let ctx = StepContext::sequences(2, ROWS / 2);
    check_in(Linear::<5, 3>::init(&mut InitRng::new(1)), &ctx, random_input(5, 2), 3);
    check_in(LayerNorm::<6>::init(&mut InitRng::new(1)), &ctx, random_input(6, 4), 5);
    check_in(Gelu, &ctx, random_input(5, 8), 9);
}

#[test]
fn embedding() {
    // Ids repeat, so that rows of one token add up in its gradient row.
    let ids = Matrix::from_vec(6, 1, vec![3.0, 0.0, 3.0, 6.0, 1.0, 3.0]);
    check_params_in(Embedding::<7, 5>::init(&mut InitRng::new(1)), &StepContext::sequences(2, 3), ids, 2);
}

#[test]
fn position_embedding() {
    // Two sequences of three positions in a table of four: each position's row gets both.
    let ctx = StepContext::sequences(2, 3);
    check_in(
        PositionEmbedding::<4, 5>::init(&mut InitRng::new(1)),
        &ctx,
        Matrix::from_vec(6, 5, InitRng::new(3).uniform(30, 2.0)),
        4,
    );
}

#[test]
fn causal_self_attention() {
    // Two sequences of three positions, two heads of four features.
    let ctx = StepContext::sequences(2, 3);
    check_in(
        CausalSelfAttention::<8, 2>::init(&mut InitRng::new(5)),
        &ctx,
        Matrix::from_vec(6, 8, InitRng::new(6).uniform(48, 1.0)),
        7,
    );
}

#[test]
fn causal_self_attention_over_several_causal_panels() {
    // One sequence of 150 positions: attention's products go in panels of 64 positions, the
    // last one ragged.
    let ctx = StepContext::sequences(1, 150);
    check_in(
        CausalSelfAttention::<8, 2>::init(&mut InitRng::new(5)),
        &ctx,
        Matrix::from_vec(150, 8, InitRng::new(6).uniform(1200, 1.0)),
        7,
    );
}

#[test]
fn causal_self_attention_dropping_its_weights() {
    // Two sequences of 70 positions (two panels each); the mask is fixed by the context.
    let ctx = StepContext::sequences(2, 70).with_dropout(DropoutDraw::new(0.3, 5, 140).for_layer(2));
    check_in(
        CausalSelfAttention::<8, 2>::init(&mut InitRng::new(5)),
        &ctx,
        Matrix::from_vec(140, 8, InitRng::new(6).uniform(1120, 1.0)),
        7,
    );
    check_in(Dropout, &ctx, Matrix::from_vec(140, 8, InitRng::new(8).uniform(1120, 1.0)), 9);
}

#[test]
fn layer_norm() {
    check(LayerNorm::<6>::init(&mut InitRng::new(1)), random_input(6, 4), 5);
}

#[test]
fn relu() {
    // Keep inputs at least 0.1 from the kink, well beyond the finite-difference step.
    let mut input = random_input(5, 6);
    for x in input.as_mut_slice() {
        *x = if *x >= 0.0 { *x + 0.1 } else { *x - 0.1 };
    }
    check(Relu, input, 7);
}

#[test]
fn gelu() {
    check(Gelu, random_input(5, 8), 9);
}

#[test]
fn tanh() {
    check(Tanh, random_input(5, 10), 11);
}

#[test]
fn sigmoid() {
    check(Sigmoid, random_input(5, 12), 13);
}

#[test]
fn layer_matches_checks_width_names_shapes_and_ready_order() {
    let (fixed, rev, def) = (Width::Fixed { input: 3, output: 2 }, ReadyOrder::Reverse, ReadyOrder::Definition);
    let linear = [("weight", &[2, 3][..]), ("bias", &[2])];
    assert!(layer_matches::<Linear<3, 2>>(fixed, &linear, rev, None));
    assert!(!layer_matches::<Linear<3, 2>>(fixed, &linear, def, None), "Linear readies bias first");
    assert!(!layer_matches::<Linear<3, 2>>(fixed, &[("weight", &[3, 2]), ("bias", &[2])], rev, None));
    assert!(!layer_matches::<Linear<3, 2>>(fixed, &[("weight", &[2, 3])], rev, None));
    assert!(!layer_matches::<Linear<3, 2>>(fixed, &[("weight", &[2, 3]), ("bias", &[2, 1])], rev, None));
    assert!(!layer_matches::<Linear<3, 2>>(fixed, &[("bias", &[2, 3]), ("weight", &[2])], rev, None), "names in order");
    assert!(!layer_matches::<Linear<3, 2>>(fixed, &[("weight", &[2, 3]), ("bia", &[2])], rev, None));
    assert!(!layer_matches::<Linear<3, 2>>(Width::Fixed { input: 2, output: 3 }, &linear, rev, None));
    assert!(!layer_matches::<Linear<3, 2>>(Width::Preserving, &linear, rev, None));
    let four = Width::Fixed { input: 4, output: 4 };
    assert!(layer_matches::<LayerNorm<4>>(four, &[("weight", &[4]), ("bias", &[4])], def, None));
    assert!(
        !layer_matches::<LayerNorm<4>>(four, &[("weight", &[4]), ("bias", &[4])], rev, None),
        "LayerNorm readies weight first"
    );
    assert!(layer_matches::<Relu>(Width::Preserving, &[], rev, None));
    assert!(!layer_matches::<Gelu>(Width::Fixed { input: 3, output: 3 }, &[], rev, None));
    // A built-in by its name: the type must declare that built-in's kernel too.
    let relu = Some(DeviceOp::Relu);
    assert!(layer_matches::<Relu>(Width::Preserving, &[], rev, relu));
    assert!(!layer_matches::<Gelu>(Width::Preserving, &[], rev, relu), "Gelu under Relu's name");
    let linear_op = |input, output| Some(DeviceOp::Linear { input, output });
    assert!(layer_matches::<Linear<3, 2>>(fixed, &linear, rev, linear_op(3, 2)));
    assert!(!layer_matches::<Linear<3, 2>>(fixed, &linear, rev, linear_op(2, 3)));
}

/// What differs first is what the generated check's message names.
#[test]
fn layout_mismatch_names_the_constant_that_differs() {
    use super::LayoutMismatch as M;
    let (fixed, rev, def) = (Width::Fixed { input: 3, output: 2 }, ReadyOrder::Reverse, ReadyOrder::Definition);
    let linear = [("weight", &[2, 3][..]), ("bias", &[2])];
    let of = |width, params: &[(&str, &[usize])], ready, op| {
        super::layout_mismatch::<Linear<3, 2>>(width, params, ready, op)
    };
    assert_eq!(of(fixed, &linear, rev, None), M::None);
    assert_eq!(of(fixed, &linear, rev, Some(DeviceOp::Relu)), M::DeviceOp);
    assert_eq!(of(Width::Preserving, &linear, rev, None), M::Width);
    assert_eq!(of(fixed, &linear[..1], rev, None), M::ParamCount);
    assert_eq!(of(fixed, &linear, def, None), M::ReadyOrder);
    assert_eq!(of(fixed, &[("weight", &[2, 3]), ("bia", &[2])], rev, None), M::Name(1));
    assert_eq!(of(fixed, &[("weight", &[3, 2]), ("bias", &[2])], rev, None), M::Shape(0));
    assert_eq!(of(fixed, &[("weight", &[2, 3]), ("bias", &[2, 1])], rev, None), M::Shape(1));
}

#[test]
fn linear_init_is_deterministic_and_bounded() {
    let a = Linear::<16, 8>::init(&mut InitRng::for_layer(42, 0));
    assert_eq!(a, Linear::<16, 8>::init(&mut InitRng::for_layer(42, 0)));
    assert_ne!(a, Linear::<16, 8>::init(&mut InitRng::for_layer(43, 0)));
    assert_eq!((a.weight.len(), a.bias.len()), (128, 8));
    let bound = 1.0 / 4.0;
    assert!(a.weight.iter().chain(&a.bias).all(|v| v.abs() <= bound));
    // Not degenerate: values spread over the interval.
    assert!(a.weight.iter().any(|&v| v > bound / 2.0) && a.weight.iter().any(|&v| v < -bound / 2.0));
}
