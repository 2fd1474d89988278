// What the fake driver's files share: its streams by handle, and its device memory's bounds.
#pragma once

#include <memory>

#include "fake_cuda.h"
#include "streams.h"

#define EXPORT extern "C" __attribute__((visibility("default")))

// The stream behind a handle; NULL, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD are the default
// stream.
std::shared_ptr<Stream> stream_of(CUstream handle);
// Waits until every stream has run everything queued on it (cudaFree's and cuCtxSynchronize's
// wait for the device).
void synchronize_all();
// Fails unless [at, at + bytes) lies inside one live allocation; `what` names the caller.
void check_range(CUdeviceptr at, size_t bytes, const char* what);
