// What the fake CUDA libraries share: the driver API's handle types (declared here, since no CUDA
// header is installed where this builds), and the fake driver's streams, which the fake cuBLAS
// and NCCL queue their work on as the real ones queue kernels on the caller's stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct FakeContext* CUcontext;
typedef struct FakeStream* CUstream;
typedef struct FakeEvent* CUevent;
typedef struct FakeModule* CUmodule;
typedef struct FakeFunction* CUfunction;
typedef void (*CUhostFn)(void* user_data);

enum : CUresult {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_INVALID_IMAGE = 200,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_NOT_SUPPORTED = 801,
};

// A misuse the real driver would answer with an error or undefined behaviour: said, then the
// process ends, so that the test that caused it fails where it happened.
[[noreturn]] inline void fake_cuda_fail(const char* what) {
    std::fprintf(stderr, "fake CUDA: %s\n", what);
    std::fflush(stderr);
    std::abort();
}

extern "C" {
// Queues `work` on `stream` (NULL: the default stream), to run after everything queued there
// before it, as a kernel would. Exported by the fake libcuda for the fake cuBLAS and NCCL.
void fake_cuda_enqueue(CUstream stream, std::function<void()>* work, const char* label);
// Fails unless [at, at + bytes) lies inside one live device allocation; `what` names the caller.
void fake_cuda_check_range(CUdeviceptr at, size_t bytes, const char* what);
}

// `work` on `stream`, owned by the queue from here on; `label` names it in FAKE_CUDA_TRACE's lines.
inline void enqueue(CUstream stream, const char* label, std::function<void()> work) {
    fake_cuda_enqueue(stream, new std::function<void()>(std::move(work)), label);
}
