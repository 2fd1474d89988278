// CUDA's execution model on the CPU, enough of it to run the GPU backend's kernels
// (runtime/src/cuda/kernels/*.cu) unchanged where there is no GPU: a grid's blocks run one after
// another, each block's threads at once on threads of their own, meeting at __syncthreads() on a
// barrier; a kernel's __shared__ arrays become static ones, which is each block's own memory since
// blocks do not overlap. Atomics are std::atomic_ref. The intrinsics that fix a rounding
// (__fmaf_rn and the like) round as they do on the GPU; the rest is the host's IEEE arithmetic
// with nothing contracted into FMAs (built with -ffp-contract=off), and the host's libm for
// expf, logf and tanhf (within an ulp or two of CUDA's).
#pragma once

#include <atomic>
#include <barrier>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

struct dim3 {
    unsigned x, y, z;
};

namespace emu {
inline thread_local dim3 thread_index{0, 0, 0};
inline thread_local dim3 block_index{0, 0, 0};
inline dim3 block_dim{1, 1, 1};
inline dim3 grid_dim{1, 1, 1};
// The barrier of the block the calling thread is running.
inline thread_local std::barrier<>* block_barrier = nullptr;

// One launch at a time, as on one stream: the grid's dimensions and the kernels' __shared__
// arrays are the process's, not a launch's (Rust's test threads launch concurrently).
inline std::mutex launching;

// Runs `kernel` (a call of one __global__ function) over `grid` blocks of `block` threads.
template <typename Kernel>
void launch(unsigned grid, unsigned block, Kernel kernel) {
    std::lock_guard<std::mutex> one_at_a_time(launching);
    grid_dim = {grid, 1, 1};
    block_dim = {block, 1, 1};
    std::vector<std::unique_ptr<std::barrier<>>> barriers;
    for (unsigned b = 0; b < grid; ++b) barriers.push_back(std::make_unique<std::barrier<>>(block));
    std::barrier<> block_done(block);
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < block; ++t) {
        threads.emplace_back([&, t] {
            thread_index = {t, 0, 0};
            for (unsigned b = 0; b < grid; ++b) {
                block_index = {b, 0, 0};
                block_barrier = barriers[b].get();
                kernel();
                // A thread that has returned no longer holds the others at __syncthreads.
                block_barrier->arrive_and_drop();
                // The next block reuses the static __shared__ arrays: nobody starts it before
                // everybody has left this one.
                block_done.arrive_and_wait();
            }
        });
    }
    for (auto& thread : threads) thread.join();
}
}  // namespace emu

#define threadIdx emu::thread_index
#define blockIdx emu::block_index
#define blockDim emu::block_dim
#define gridDim emu::grid_dim
#define __global__
#define __device__
#define __shared__ static

inline void __syncthreads() { emu::block_barrier->arrive_and_wait(); }

inline float __int_as_float(int bits) {
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float rsqrtf(float a) { return 1.0f / std::sqrt(a); }
inline float atomicAdd(float* at, float value) { return std::atomic_ref<float>(*at).fetch_add(value); }
