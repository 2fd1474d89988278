//! A model written by a `macro_rules!` macro: its field types (`$t:ty`), a block repeated
//! through a type fragment and a length fragment (`[$b; $n]`) read as written out.
use overlap::prelude::*;

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

fn main() {
    let names: Vec<String> = Net::SCHEDULE.layers.iter().map(|l| l.name.to_string()).collect();
    assert_eq!(names, ["fc", "act", "head"]);
    let names: Vec<String> = deep::Deep::SCHEDULE.layers.iter().map(|l| l.name.to_string()).collect();
    assert_eq!(names, ["blocks.0.fc", "blocks.1.fc", "blocks.2.fc", "head"]);
}
