use overlap::prelude::*;

// Two problems of one layer are two errors: its width and its size, its tie and its width.
#[distributed_model]
struct Sized {
    a: Linear<4, 8>,
    b: Linear<3, 3000000000>,
}

#[distributed_model]
struct Tied {
    wte: Embedding<100, 8>,
    fc: Linear<8, 16>,
    #[tied(nope)]
    head: TiedHead<8, 100>,
}

fn main() {}
