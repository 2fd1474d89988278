use overlap::prelude::*;

// Blocks that give no layers, used through fields of fields: each struct is read once, not once
// per use (here 4^20 uses of `Empty`), and each field that uses an empty block itself is an error
// however often its struct is used.
#[distributed_model]
mod deep {
    use overlap::prelude::*;

    pub struct Empty {}

    pub struct B1 {
        a: Empty,
        b: Empty,
        c: Empty,
        d: Empty,
    }

    pub struct B2 {
        a: B1,
        b: B1,
        c: B1,
        d: B1,
    }

    pub struct B3 {
        a: B2,
        b: B2,
        c: B2,
        d: B2,
    }

    pub struct B4 {
        a: B3,
        b: B3,
        c: B3,
        d: B3,
    }

    pub struct B5 {
        a: B4,
        b: B4,
        c: B4,
        d: B4,
    }

    pub struct B6 {
        a: B5,
        b: B5,
        c: B5,
        d: B5,
    }

    pub struct B7 {
        a: B6,
        b: B6,
        c: B6,
        d: B6,
    }

    pub struct B8 {
        a: B7,
        b: B7,
        c: B7,
        d: B7,
    }

    pub struct B9 {
        a: B8,
        b: B8,
        c: B8,
        d: B8,
    }

    pub struct B10 {
        a: B9,
        b: B9,
        c: B9,
        d: B9,
    }

    pub struct B11 {
        a: B10,
        b: B10,
        c: B10,
        d: B10,
    }

    pub struct B12 {
        a: B11,
        b: B11,
        c: B11,
        d: B11,
    }

    pub struct B13 {
        a: B12,
        b: B12,
        c: B12,
        d: B12,
    }

    pub struct B14 {
        a: B13,
        b: B13,
        c: B13,
        d: B13,
    }

    pub struct B15 {
        a: B14,
        b: B14,
        c: B14,
        d: B14,
    }

    pub struct B16 {
        a: B15,
        b: B15,
        c: B15,
        d: B15,
    }

    pub struct B17 {
        a: B16,
        b: B16,
        c: B16,
        d: B16,
    }

    pub struct B18 {
        a: B17,
        b: B17,
        c: B17,
        d: B17,
    }

    pub struct B19 {
        a: B18,
        b: B18,
        c: B18,
        d: B18,
    }

    pub struct B20 {
        a: B19,
        b: B19,
        c: B19,
        d: B19,
    }

    pub struct Net {
        fc: Linear<4, 4>,
        deep: B20,
        again: Empty,
        head: Linear<4, 2>,
    }
}

fn main() {}
