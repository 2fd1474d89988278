//! The host's compute resources, below everything that computes: OpenBLAS and its kernel choice
//! (`blas_core`), or oneMKL in its place (`mkl`, the `mkl` feature), the matrix products on it
//! (`gemm`), the threads they run on (`threads`) and the memory pages of large buffers
//! (`huge_pages`). Internal: users reach them only through the layers, the optimizers and the
//! `Trainer`.

pub mod blas_core;
pub(crate) mod gemm;
pub(crate) mod huge_pages;
pub(crate) mod mat_view;
#[cfg(feature = "mkl")]
pub mod mkl;
pub(crate) mod threads;
