//! The two halves of an MNIST-style folder and their files' names.

use std::fmt;

/// Which half of an MNIST-style directory to load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// `train-images-idx3-ubyte` / `train-labels-idx1-ubyte`.
    Train,
    /// `t10k-images-idx3-ubyte` / `t10k-labels-idx1-ubyte`.
    Test,
}

impl Split {
    pub(super) fn prefix(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Test => "t10k",
        }
    }

    /// The images' and the labels' file names, original and dotted.
    pub(super) fn names(self) -> [[String; 2]; 2] {
        let prefix = self.prefix();
        ["images-idx3", "labels-idx1"].map(|kind| {
            let (what, format) = kind.split_once('-').expect("a dash");
            [format!("{prefix}-{what}-{format}-ubyte"), format!("{prefix}-{what}.{format}-ubyte")]
        })
    }
}

impl fmt::Display for Split {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Split::Train => "train",
            Split::Test => "test",
        })
    }
}
