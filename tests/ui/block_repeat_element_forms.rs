// An array repeats a block named by its struct's name (alone, or after `self::`: tests/ui/pass):
// arrays of arrays and other paths are each told what to write instead. (Parentheses around the
// name are read through: tests/ui/pass.)
#[overlap::distributed_model]
mod net {
    use overlap::prelude::*;

    pub struct Block {
        fc: Linear<4, 4>,
    }

    pub struct Net {
        grid: [[Block; 2]; 2],
        pathed: [net::Block; 2],
        // A block's name mistyped: no block of this module.
        typo: [Blok; 2],
        // A layer through a path, repeated: told to make a block of it.
        layers: [overlap::prelude::Tanh; 2],
        head: Linear<4, 2>,
    }
}

fn main() {}
