// CUDA's execution model on the CPU, enough of it to run the GPU backend's kernels
// (runtime/src/cuda/kernels/*.cu) unchanged where there is no GPU: a grid's blocks run one after
// another (first to last, or last to first: `blocks_last_first`), each block's threads at once on threads of their own, meeting at __syncthreads() on a
// barrier (built with EMU_FIBERS, as fibers of one thread taking turns between the barriers); a
// kernel's __shared__ arrays become static ones, which is each block's own memory since blocks do
// not overlap. Atomics are std::atomic_ref. The intrinsics that fix a rounding (__fmaf_rn and the
// like) round as they do on the GPU; the rest is the host's IEEE arithmetic with nothing
// contracted into FMAs (built with -ffp-contract=off), and the host's libm for expf, logf and
// tanhf (within an ulp or two of CUDA's).
#pragma once

#include <atomic>
#include <barrier>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
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

// Runs each grid's blocks last to first: a GPU runs them in any order, so what a kernel computes
// must not depend on it (a test turns this on and compares; any kernel launched meanwhile must
// compute the same either way).
inline std::atomic<bool> blocks_last_first{false};

// Block `b` of `grid` in the order a launch runs them (`last_first`: `blocks_last_first` as the
// launch began; a test may turn it while other tests' launches run).
inline unsigned nth_block(unsigned b, unsigned grid, bool last_first) { return last_first ? grid - 1 - b : b; }

// One launch at a time, as on one stream: the grid's dimensions and the kernels' __shared__
// arrays are the process's, not a launch's (Rust's test threads launch concurrently).
inline std::mutex launching;

#if defined(EMU_FIBERS) && !defined(__x86_64__)
#error "the fibers switch stacks in x86-64 assembly"
#endif
#ifdef EMU_FIBERS
// A block's threads as fibers of the calling thread instead of threads of their own (the fake
// driver's build, which launches thousands of kernels: creating and meeting hundreds of system
// threads per launch took minutes). Each fiber runs until it reaches __syncthreads() or returns;
// the block goes round its fibers until all have returned, so that a round takes every fiber from
// one barrier to the next, as the barrier would. A switch saves and loads only the registers a
// call preserves (glibc's swapcontext also makes a system call for the signal mask, which was
// half of the time); include this header in one translation unit only, for the symbol below.
}  // namespace emu

// Saves the callee-saved registers on the current stack, stores its pointer in *from, and
// continues on `to`, a stack this function saved earlier or one `emu::fiber_stack` prepared.
extern "C" void emu_switch(void** from, void* to);
asm(R"(
    .text
    .globl emu_switch
    .hidden emu_switch
    .type emu_switch, @function
emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_switch, .-emu_switch
)");

namespace emu {
struct Fibers {
    void* scheduler = nullptr;
    std::vector<void*> saved;
    std::vector<std::unique_ptr<char[]>> stacks;
    std::vector<bool> done;
    unsigned running = 0;
    const std::function<void()>* body = nullptr;
};
inline thread_local Fibers fibers;
constexpr size_t FIBER_STACK = 256 * 1024;

[[noreturn]] inline void fiber_entry() {
    (*fibers.body)();
    fibers.done[fibers.running] = true;
    emu_switch(&fibers.saved[fibers.running], fibers.scheduler);
    __builtin_unreachable();
}

// A fresh stack whose first switch to it enters `fiber_entry` as if called: six zeroed
// registers to pop, then the entry as the return address, then a null one for its own frame.
inline void* fiber_stack(char* base) {
    auto top = reinterpret_cast<uintptr_t>(base + FIBER_STACK) & ~uintptr_t(15);
    auto* slots = reinterpret_cast<void**>(top) - 8;
    for (int i = 0; i < 6; ++i) slots[i] = nullptr;
    slots[6] = reinterpret_cast<void*>(&fiber_entry);
    slots[7] = nullptr;
    return slots;
}

template <typename Kernel>
void launch(unsigned grid, unsigned block, Kernel kernel) {
    std::lock_guard<std::mutex> one_at_a_time(launching);
    grid_dim = {grid, 1, 1};
    block_dim = {block, 1, 1};
    const bool last_first = blocks_last_first;
    const std::function<void()> body = kernel;
    Fibers& f = fibers;
    f.body = &body;
    f.saved.resize(block);
    // Left uninitialised, so that only the pages a fiber touches are ever backed by memory.
    while (f.stacks.size() < block) f.stacks.emplace_back(new char[FIBER_STACK]);
    for (unsigned b = 0; b < grid; ++b) {
        block_index = {nth_block(b, grid, last_first), 0, 0};
        f.done.assign(block, false);
        for (unsigned t = 0; t < block; ++t) f.saved[t] = fiber_stack(f.stacks[t].get());
        for (unsigned live = block; live > 0;) {
            live = 0;
            for (unsigned t = 0; t < block; ++t) {
                if (f.done[t]) continue;
                f.running = t;
                thread_index = {t, 0, 0};
                emu_switch(&f.scheduler, f.saved[t]);
                live += !f.done[t];
            }
        }
    }
}

inline void sync_block() { emu_switch(&fibers.saved[fibers.running], fibers.scheduler); }
#else
// Runs `kernel` (a call of one __global__ function) over `grid` blocks of `block` threads.
template <typename Kernel>
void launch(unsigned grid, unsigned block, Kernel kernel) {
    std::lock_guard<std::mutex> one_at_a_time(launching);
    grid_dim = {grid, 1, 1};
    block_dim = {block, 1, 1};
    const bool last_first = blocks_last_first;
    std::vector<std::unique_ptr<std::barrier<>>> barriers;
    for (unsigned b = 0; b < grid; ++b) barriers.push_back(std::make_unique<std::barrier<>>(block));
    std::barrier<> block_done(block);
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < block; ++t) {
        threads.emplace_back([&, t] {
            thread_index = {t, 0, 0};
            for (unsigned b = 0; b < grid; ++b) {
                block_index = {nth_block(b, grid, last_first), 0, 0};
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

inline void sync_block() { block_barrier->arrive_and_wait(); }
#endif
}  // namespace emu

#define threadIdx emu::thread_index
#define blockIdx emu::block_index
#define blockDim emu::block_dim
#define gridDim emu::grid_dim
#define __global__
#define __device__
#define __shared__ static

inline void __syncthreads() { emu::sync_block(); }

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
