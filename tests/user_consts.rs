//! A crate's own lowercase constants and statics named like the locals of the generated code
//! (`dev`, `b0`, `grads`, a parameter's gradient view `fc_weight`, ...) leave its models
//! compiling and training. A `let` cannot shadow a constant or a static (the name would be a
//! pattern, or refused), and macro hygiene does not keep items out, so the generated code names
//! its locals where no user's item reaches: `__dev`, `__b0`, ....

#![allow(non_upper_case_globals, dead_code)]

use overlap::prelude::*;

// `Gain`, a layer of one's own: its layout is checked by generated code of its own.
#[path = "../examples/custom_layer.rs"]
mod custom_layer;
use custom_layer::Gain;

/// Every name a generated function of the models below binds, were it not prefixed: its
/// arguments, its locals, the buckets and their in-flight handles, the gradient views named
/// after the models' fields, and the layout check of a layer of one's own.
macro_rules! consts_named_like_generated_locals {
    () => {
        const accumulate: u8 = 0;
        const b0: u8 = 0;
        const b1: u8 = 0;
        const b2: u8 = 0;
        const b0_in_flight: u8 = 0;
        const b1_in_flight: u8 = 0;
        const bucket: u8 = 0;
        const comm: u8 = 0;
        const ctx: u8 = 0;
        const dev: u8 = 0;
        const dy: u8 = 0;
        const gather: u8 = 0;
        const grad_scale: u8 = 0;
        const grads: u8 = 0;
        const in_flight: u8 = 0;
        const index: u8 = 0;
        const input: u8 = 0;
        const micro_steps: u8 = 0;
        const optimizer: u8 = 0;
        const output: u8 = 0;
        const p: u8 = 0;
        const rng: u8 = 0;
        const schedule: u8 = 0;
        const seed: u8 = 0;
        const ws: u8 = 0;
        const fc_weight: u8 = 0;
        const fc_bias: u8 = 0;
        const head_weight: u8 = 0;
        const wte_weight: u8 = 0;
        const lm_head_tied_grad: u8 = 0;
        const mismatch: u8 = 0;
        const gain_gain: u8 = 0;
        const h_0_mlp_fc_weight: u8 = 0;
        const h_1_attend_attn_c_attn_weight: u8 = 0;
        static h_1_attend_ln_weight: u8 = 0;
        static b3: u8 = 0;
    };
}

consts_named_like_generated_locals!();

/// A chain whose buckets are compressed (PowerSGD's locals too), with a layer of one's own.
#[distributed_model(bucket_cap_mb = 0.0001, first_bucket_mb = 0.0001, grad_comm = powersgd(rank = 2))]
struct Compressed {
    fc: Linear<6, 8>,
    act: Relu,
    #[layer(input = 8, output = 8, params(gain = [8]))]
    gain: Gain<8>,
    head: Linear<8, 3>,
}

/// A chain whose optimizer state is sharded (the all-gathers' wait points in forward).
#[distributed_model(shard_optimizer, bucket_cap_mb = 0.0001, first_bucket_mb = 0.0001)]
struct Sharded {
    fc: Linear<6, 8>,
    act: Tanh,
    head: Linear<8, 3>,
}

/// A language model of repeated residual blocks with a tied head.
#[distributed_model(bucket_cap_mb = 0.001, first_bucket_mb = 0.001)]
mod lm {
    #![allow(non_upper_case_globals, dead_code)]
    use overlap::prelude::*;

    consts_named_like_generated_locals!();

    #[residual]
    pub struct Attend {
        ln: LayerNorm<8>,
        attn: CausalSelfAttention<8, 2>,
    }

    #[residual]
    pub struct Mlp {
        fc: Linear<8, 16>,
        gelu: Gelu,
        proj: Linear<16, 8>,
    }

    pub struct Block {
        attend: Attend,
        mlp: Mlp,
    }

    pub struct Lm {
        #[init(std = 0.02)]
        wte: Embedding<11, 8>,
        wpe: PositionEmbedding<4, 8>,
        h: [Block; 2],
        ln_f: LayerNorm<8>,
        #[tied(wte)]
        lm_head: TiedHead<8, 11>,
    }
}

/// One SGD step (learning rate 0.5) of `M` on `batch`, the loss `Σ output ⊙ w`: each parameter
/// must move by −0.5 times the gradient `backward_no_sync` finds for it. (This file's own
/// locals avoid the constants' names, which would capture them too.)
fn one_step_moves_each_parameter_against_its_gradient<M: DistributedModel>(shape: &StepContext, batch: &Matrix) {
    let single = Communicator::single();
    let mut model = M::new(&single, 3).unwrap();
    let mut work = M::Workspace::default();
    let out = model.forward_with(shape, batch, &mut work).clone();
    let weights = (0..out.as_slice().len()).map(|i| (i % 5) as f32 - 2.0).collect();
    let w = Matrix::from_vec(out.rows(), out.cols(), weights);
    let mut expected = model.new_grads();
    model.backward_no_sync(&mut work, &w, &mut expected);
    let before: Vec<Vec<f32>> = M::SCHEDULE.params().map(|r| model.param(r).to_vec()).collect();
    let mut sgd = Sgd::new(0.5);
    model.forward_with(shape, batch, &mut work);
    let cleared = model.new_grads();
    let pending = model.backward(&mut work, &w, cleared, &single, &mut sgd);
    single.backward_done();
    drop(model.step(pending, &mut sgd).unwrap());
    let (plan, sums, mut moved) = (&M::SCHEDULE, expected.buckets(), 0);
    for (r, before) in plan.params().zip(&before) {
        let info = plan.param(r);
        let gradient = sums[info.bucket].view(info.offset, info.numel());
        for ((after, before), g) in model.param(r).iter().zip(before).zip(gradient) {
            let want = before - 0.5 * g;
            let name = plan.param_name(r);
            assert!((after - want).abs() <= 1e-6 * (1.0 + want.abs()), "{name}: {after} against {want}");
            moved += usize::from(*g != 0.0);
        }
    }
    assert!(moved > 0, "every gradient was zero");
}

fn rows(count: usize, width: usize) -> Matrix {
    Matrix::from_vec(count, width, (0..count * width).map(|i| ((i * 7 % 13) as f32 - 6.0) / 6.0).collect())
}

#[test]
fn chains_train_beside_constants_named_like_their_locals() {
    one_step_moves_each_parameter_against_its_gradient::<Compressed>(&StepContext::rows(5), &rows(5, 6));
    one_step_moves_each_parameter_against_its_gradient::<Sharded>(&StepContext::rows(5), &rows(5, 6));
}

#[test]
fn a_language_model_of_blocks_trains_beside_constants_named_like_its_locals() {
    let tokens = Matrix::from_vec(8, 1, (0..8).map(|i| (i * 3 % 11) as f32).collect());
    one_step_moves_each_parameter_against_its_gradient::<lm::Lm>(&StepContext::sequences(2, 4), &tokens);
}
