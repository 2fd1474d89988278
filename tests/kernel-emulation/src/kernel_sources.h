// The GPU backend's kernel sources (runtime/src/cuda/kernels/*.cu, the files cuda/kernels.rs
// compiles with NVRTC) under emulator.h: what every CPU build of the kernels includes, the
// tests' C entries (kernels.cpp) and the fake driver's launch table (../fake-cuda).
#pragma once

#include "emulator.h"

#include "attention.cu"
#include "cross_entropy.cu"
#include "elementwise.cu"
#include "embedding.cu"
#include "layer_norm.cu"
#include "optim.cu"
