//! Models in a crate that names `overlap` `ml`: they compile without `crate = ".."` and train.
#![deny(warnings)]

use ml::prelude::*;

/// A chain of built-in layers.
#[distributed_model(bucket_cap_mb = 1)]
pub struct Mlp {
    fc1: Linear<4, 8>,
    act: Relu,
    head: Linear<8, 2>,
}

/// A module of blocks, whose code the macro writes inside the module.
#[distributed_model]
pub mod net {
    use ml::prelude::*;

    /// `x + fc(x)`.
    #[residual]
    pub struct Block {
        fc: Linear<4, 4>,
    }

    /// Two blocks and a head.
    pub struct Net {
        blocks: [Block; 2],
        head: Linear<4, 2>,
    }
}

#[cfg(test)]
mod tests {
    use ml::prelude::*;
    use ml::{DistributedModel, ReportFormat, SyntheticClassification};

    fn two_steps<M: DistributedModel>() -> f64 {
        let comm = Communicator::single();
        let mut model = M::new(&comm, 0).unwrap();
        let trainer = Trainer::new(&comm).steps(2).batch(4).report(ReportFormat::Off, None);
        let mut data = SyntheticClassification::new(3, 4, 2);
        trainer.fit(&mut model, &mut data, &CrossEntropyLoss).unwrap().final_loss
    }

    #[test]
    fn models_of_a_renamed_dependency_are_planned_and_train() {
        assert_eq!(<super::Mlp as DistributedModel>::SCHEDULE.layers.len(), 3);
        assert_eq!(<super::net::Net as DistributedModel>::SCHEDULE.layers[1].name, "blocks.1.fc");
        assert!(two_steps::<super::Mlp>().is_finite());
        assert!(two_steps::<super::net::Net>().is_finite());
    }
}
