use overlap::prelude::*;

// The schedule is planned from the fields before `cfg` is evaluated: a conditional field is
// refused once, at its `cfg`, instead of three errors about a field the struct lost.
#[distributed_model]
struct Model {
    fc1: Linear<8, 8>,
    #[cfg(test)]
    probe: Linear<8, 8>,
    head: Linear<8, 2>,
}

fn main() {}
