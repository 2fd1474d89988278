//! The element-wise optimizers through their lent state: the same floats as their own `update`,
//! and their state back where it was.

use super::{AdamW, ElementwiseRule, Optimizer, Sgd};

/// Three steps through `update` on the whole parameter, and through lent state in pieces.
fn whole_and_in_pieces(mut whole: impl Optimizer, mut pieces: impl Optimizer) {
    let start: Vec<f32> = (0..1000).map(|i| (i % 11) as f32 / 11.0).collect();
    let (mut a, mut b) = (start.clone(), start);
    for s in 0..3 {
        let g: Vec<f32> = (0..1000).map(|i| ((i * 7 + s * 13) % 17) as f32 - 8.0).collect();
        whole.begin_step();
        whole.update(2, &mut a, &g, 0.5);
        pieces.begin_step();
        let mut lent = pieces.lend(2, b.len()).expect("an element-wise rule");
        for at in (0..b.len()).step_by(300) {
            let end = (at + 300).min(b.len());
            lent.apply(at..end, &mut b[at..end], &g[at..end], 0.5);
        }
        pieces.give_back(2, lent);
    }
    assert_eq!(a, b);
}

#[test]
fn lent_updates_in_pieces_equal_whole_updates() {
    let damped = || Sgd::new(0.1).momentum(0.9).dampening(0.1).weight_decay(0.01);
    whole_and_in_pieces(damped(), damped());
    let nesterov = || Sgd::new(0.1).momentum(0.9).weight_decay(0.01).nesterov(true);
    whole_and_in_pieces(nesterov(), nesterov());
    whole_and_in_pieces(Sgd::new(0.1), Sgd::new(0.1));
    whole_and_in_pieces(AdamW::new(1e-2), AdamW::new(1e-2));
}

#[test]
fn given_back_state_is_the_optimizer_state() {
    let mut opt = Sgd::new(0.1).momentum(0.9);
    opt.begin_step();
    let mut lent = opt.lend(0, 3).unwrap();
    assert!(matches!(lent.rule, ElementwiseRule::Sgd { first: true, .. }));
    let mut p = [1.0, 2.0, 3.0];
    lent.apply(0..3, &mut p, &[1.0, 1.0, 1.0], 1.0);
    opt.give_back(0, lent);
    assert_eq!(opt.momentum_buffer(0), Some(&[1.0, 1.0, 1.0][..]));
    assert!(matches!(opt.lend(0, 3).unwrap().rule, ElementwiseRule::Sgd { first: false, .. }));
}
