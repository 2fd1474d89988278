// Device memory of the fake driver: host memory, a device pointer its address. It is poisoned and
// guarded (guarded.cpp) so that the bugs a GPU hides show: a new allocation holds NaNs (all bits
// set); an access past either end of it, or to it once freed, ends the process naming the
// allocation. Copies and fills outside a live allocation end the process with a message naming
// them before they run.
#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "driver.h"
#include "guarded.h"

namespace {
const size_t TOTAL_MEMORY = 141ull << 30;

std::mutex memory_mutex;
// Live allocations: address -> bytes.
std::map<uintptr_t, size_t> allocations;

}  // namespace

void check_range(CUdeviceptr at, size_t bytes, const char* what) {
    std::lock_guard<std::mutex> lock(memory_mutex);
    auto after = allocations.upper_bound(static_cast<uintptr_t>(at));
    if (after != allocations.begin()) {
        auto [base, size] = *std::prev(after);
        if (at >= base && at + bytes <= base + size) return;
    }
    char message[256];
    std::snprintf(message, sizeof message, "%s: %zu bytes at 0x%llx are not inside one live allocation", what, bytes,
                  at);
    fake_cuda_fail(message);
}

static CUdeviceptr allocate(size_t bytes) {
    void* memory = guarded_allocate(bytes);
    if (memory == nullptr) return 0;
    std::lock_guard<std::mutex> lock(memory_mutex);
    allocations[reinterpret_cast<uintptr_t>(memory)] = bytes;
    return reinterpret_cast<CUdeviceptr>(memory);
}

static CUresult release(CUdeviceptr at) {
    size_t bytes;
    {
        std::lock_guard<std::mutex> lock(memory_mutex);
        auto found = allocations.find(static_cast<uintptr_t>(at));
        if (found == allocations.end()) return CUDA_ERROR_INVALID_VALUE;
        bytes = found->second;
        allocations.erase(found);
    }
    guarded_release(reinterpret_cast<void*>(at), bytes);
    return CUDA_SUCCESS;
}

EXPORT void fake_cuda_check_range(CUdeviceptr at, size_t bytes, const char* what) { check_range(at, bytes, what); }

EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice) {
    *bytes = TOTAL_MEMORY;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
    *total = TOTAL_MEMORY;
    std::lock_guard<std::mutex> lock(memory_mutex);
    size_t used = 0;
    for (auto& [base, bytes] : allocations) used += bytes;
    *free = TOTAL_MEMORY - std::min(used, TOTAL_MEMORY);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* at, size_t bytes) {
    *at = allocate(bytes);
    return *at ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

// Stream-ordered allocation: the memory is usable by work queued on `stream` after this, and
// by other streams once they are ordered after it; allocating at once is one valid schedule.
EXPORT CUresult cuMemAllocAsync(CUdeviceptr* at, size_t bytes, CUstream) { return cuMemAlloc_v2(at, bytes); }

// As cudaFree: waits for the device, so that nothing queued still uses the memory.
EXPORT CUresult cuMemFree_v2(CUdeviceptr at) {
    synchronize_all();
    return release(at);
}

// Freed when `stream` reaches this point; work on other streams not ordered before it that
// still reads the memory afterwards reads NaNs.
EXPORT CUresult cuMemFreeAsync(CUdeviceptr at, CUstream stream) {
    {
        std::lock_guard<std::mutex> lock(memory_mutex);
        if (!allocations.count(static_cast<uintptr_t>(at))) return CUDA_ERROR_INVALID_VALUE;
    }
    stream_of(stream)->enqueue([at] { release(at); }, "free");
    return CUDA_SUCCESS;
}

// From pageable host memory: the source is staged before the call returns, as the driver does,
// so the caller may reuse its buffer at once.
EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream) {
    check_range(dst, bytes, "cuMemcpyHtoDAsync");
    auto staged = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char*>(src),
                                                               static_cast<const unsigned char*>(src) + bytes);
    stream_of(stream)->enqueue([dst, staged] {
        check_range(dst, staged->size(), "cuMemcpyHtoDAsync (when it ran)");
        std::memcpy(reinterpret_cast<void*>(dst), staged->data(), staged->size());
    }, "copy to the device");
    return CUDA_SUCCESS;
}

// To pageable host memory: returns once the copy is done, after the work queued before it.
EXPORT CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t bytes, CUstream stream) {
    check_range(src, bytes, "cuMemcpyDtoHAsync");
    auto s = stream_of(stream);
    uint64_t ticket = s->enqueue([dst, src, bytes] {
        check_range(src, bytes, "cuMemcpyDtoHAsync (when it ran)");
        std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
    }, "copy to the host");
    s->wait_for(ticket);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
    check_range(dst, bytes, "cuMemcpyDtoDAsync destination");
    check_range(src, bytes, "cuMemcpyDtoDAsync source");
    stream_of(stream)->enqueue([dst, src, bytes] {
        check_range(dst, bytes, "cuMemcpyDtoDAsync destination (when it ran)");
        check_range(src, bytes, "cuMemcpyDtoDAsync source (when it ran)");
        std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
    }, "copy on the device");
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t count, CUstream stream) {
    check_range(dst, count, "cuMemsetD8Async");
    stream_of(stream)->enqueue([dst, value, count] {
        check_range(dst, count, "cuMemsetD8Async (when it ran)");
        std::memset(reinterpret_cast<void*>(dst), value, count);
    }, "memset");
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned value, size_t count, CUstream stream) {
    check_range(dst, count * 4, "cuMemsetD32Async");
    stream_of(stream)->enqueue([dst, value, count] {
        check_range(dst, count * 4, "cuMemsetD32Async (when it ran)");
        std::fill_n(reinterpret_cast<unsigned*>(dst), count, value);
    }, "memset");
    return CUDA_SUCCESS;
}
