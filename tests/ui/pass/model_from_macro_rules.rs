//! A model written by a `macro_rules!` macro: its field types (`$t:ty`), a block repeated
//! through a type fragment and a length fragment (`[$b; $n]`), and literals in the attributes
//! (`$w:literal`) read as written out.
use overlap::prelude::*;
#[path = "../support/scale.rs"]
mod scale;
use scale::Scale;

macro_rules! chain {
    ($name:ident { $($field:ident : $t:ty),* $(,)? }) => {
        #[distributed_model]
        pub struct $name { $($field: $t),* }
    };
}

chain!(Net { fc: Linear<4, 8>, act: Relu, head: Linear<8, 2> });

macro_rules! stack {
    ($module:ident, $b:ty, $n:expr) => {
        #[distributed_model]
        mod $module {
            use overlap::prelude::*;

            pub struct Block {
                fc: Linear<4, 4>,
            }

            pub struct Deep {
                blocks: [$b; $n],
                head: Linear<4, 2>,
            }
        }
    };
}

stack!(deep, Block, 3);

macro_rules! scaled {
    ($name:ident, $w:literal, $std:literal, $world:literal) => {
        #[distributed_model(buckets = auto(link = "ib-hdr", world = $world))]
        pub struct $name {
            #[init(std = $std, ends_with("fc.bias", std = $std))]
            fc: Linear<$w, $w>,
            #[layer(params(weight = [$w]))]
            #[bucket_boundary]
            scale: Scale,
            head: Linear<$w, 2>,
        }
    };
}

scaled!(Scaled, 4, 0.5, 8);

fn main() {
    let names: Vec<String> = Net::SCHEDULE.layers.iter().map(|l| l.name.to_string()).collect();
    assert_eq!(names, ["fc", "act", "head"]);
    let names: Vec<String> = deep::Deep::SCHEDULE.layers.iter().map(|l| l.name.to_string()).collect();
    assert_eq!(names, ["blocks.0.fc", "blocks.1.fc", "blocks.2.fc", "head"]);
    let names: Vec<String> = Scaled::SCHEDULE.layers.iter().map(|l| l.name.to_string()).collect();
    assert_eq!(names, ["fc", "scale", "head"]);
}
