// The CUDA driver API on the CPU (libcuda.so), as much of it as cudarc and the GPU backend call:
// device memory is host memory (a device pointer is its address), streams and events are
// streams.h's, modules are the images NVRTC compiled, and a kernel launch runs the kernel's CPU
// build (kernel_table.cpp) on its stream. What the real driver would refuse is refused; what
// would be undefined (a copy outside an allocation, an unknown attribute, a 2-D grid the
// emulator cannot run) ends the process with a message naming it.
//
// Memory is poisoned so that the bugs a GPU hides show: a new allocation holds NaNs (all bits
// set), and a freed one is filled with NaNs and kept unused for a while, so that work still
// reading it after the free computes NaNs instead of plausible numbers.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "fake_cuda.h"
#include "kernel_table.h"
#include "streams.h"

#define EXPORT extern "C" __attribute__((visibility("default")))

namespace {
const int DEVICES_DEFAULT = 1;
const size_t TOTAL_MEMORY = 141ull << 30;
// Freed bytes kept poisoned before they are handed back to the C library.
const size_t QUARANTINE_BYTES = 1ull << 30;

std::mutex registry_mutex;
// Every stream created, for cuCtxSynchronize and for frees that wait for the device.
std::vector<std::weak_ptr<Stream>> streams;
// Live allocations: address -> bytes.
std::map<uintptr_t, size_t> allocations;
std::deque<std::pair<void*, size_t>> quarantine;
size_t quarantined = 0;

int device_count() {
    const char* set = std::getenv("FAKE_CUDA_DEVICES");
    return set ? std::max(1, std::atoi(set)) : DEVICES_DEFAULT;
}

std::shared_ptr<Stream> new_stream() {
    auto stream = std::make_shared<Stream>();
    std::lock_guard<std::mutex> lock(registry_mutex);
    streams.push_back(stream);
    return stream;
}

// The legacy default stream (NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD).
std::shared_ptr<Stream> default_stream() {
    static std::shared_ptr<Stream> stream = new_stream();
    return stream;
}

std::shared_ptr<Stream> stream_of(CUstream handle) {
    if (reinterpret_cast<uintptr_t>(handle) <= 2) return default_stream();
    return handle->stream;
}

void synchronize_all() {
    std::vector<std::shared_ptr<Stream>> live;
    {
        std::lock_guard<std::mutex> lock(registry_mutex);
        for (auto& weak : streams)
            if (auto stream = weak.lock()) live.push_back(stream);
    }
    for (auto& stream : live) stream->synchronize();
}

void check_range(CUdeviceptr at, size_t bytes, const char* what) {
    std::lock_guard<std::mutex> lock(registry_mutex);
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

CUdeviceptr allocate(size_t bytes) {
    void* memory = nullptr;
    if (posix_memalign(&memory, 256, std::max<size_t>(bytes, 1)) != 0) return 0;
    std::memset(memory, 0xff, bytes);
    std::lock_guard<std::mutex> lock(registry_mutex);
    allocations[reinterpret_cast<uintptr_t>(memory)] = bytes;
    return reinterpret_cast<CUdeviceptr>(memory);
}

CUresult release(CUdeviceptr at) {
    std::lock_guard<std::mutex> lock(registry_mutex);
    auto found = allocations.find(static_cast<uintptr_t>(at));
    if (found == allocations.end()) return CUDA_ERROR_INVALID_VALUE;
    size_t bytes = found->second;
    allocations.erase(found);
    void* memory = reinterpret_cast<void*>(at);
    std::memset(memory, 0xff, bytes);
    quarantine.emplace_back(memory, bytes);
    quarantined += bytes;
    while (quarantined > QUARANTINE_BYTES) {
        std::free(quarantine.front().first);
        quarantined -= quarantine.front().second;
        quarantine.pop_front();
    }
    return CUDA_SUCCESS;
}

struct FakeContextState {
    CUdevice device;
};
FakeContextState contexts[64];
thread_local CUcontext current = nullptr;
}  // namespace

struct FakeModule {
    std::set<std::string> kernels;
};

struct FakeFunction {
    std::string name;
    Launcher launcher;
};

EXPORT void fake_cuda_enqueue(CUstream stream, std::function<void()>* work, const char* label) {
    std::unique_ptr<std::function<void()>> owned(work);
    stream_of(stream)->enqueue(std::move(*owned), label);
}

EXPORT void fake_cuda_check_range(CUdeviceptr at, size_t bytes, const char* what) { check_range(at, bytes, what); }

// ---- Initialisation, devices, contexts ----

EXPORT CUresult cuInit(unsigned) { return CUDA_SUCCESS; }

EXPORT CUresult cuDriverGetVersion(int* version) {
    *version = 13000;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int* count) {
    *count = device_count();
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice* device, int ordinal) {
    if (ordinal < 0 || ordinal >= device_count()) return CUDA_ERROR_INVALID_VALUE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetName(char* name, int len, CUdevice) {
    std::snprintf(name, static_cast<size_t>(len), "NVIDIA H200 (fake: the CPU)");
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice) {
    *bytes = TOTAL_MEMORY;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetAttribute(int* value, int attribute, CUdevice) {
    switch (attribute) {
        case 1:  // MAX_THREADS_PER_BLOCK
        case 2:  // MAX_BLOCK_DIM_X
            *value = 1024;
            return CUDA_SUCCESS;
        case 5:  // MAX_GRID_DIM_X
            *value = 2147483647;
            return CUDA_SUCCESS;
        case 8:  // MAX_SHARED_MEMORY_PER_BLOCK
            *value = 49152;
            return CUDA_SUCCESS;
        case 10:  // WARP_SIZE
            *value = 32;
            return CUDA_SUCCESS;
        case 16:  // MULTIPROCESSOR_COUNT
            *value = 132;
            return CUDA_SUCCESS;
        case 31:  // CONCURRENT_KERNELS
        case 41:  // UNIFIED_ADDRESSING
        case 115:  // MEMORY_POOLS_SUPPORTED
            *value = 1;
            return CUDA_SUCCESS;
        case 33:  // PCI_BUS_ID
        case 34:  // PCI_DEVICE_ID
        case 50:  // PCI_DOMAIN_ID
            *value = 0;
            return CUDA_SUCCESS;
        case 75:  // COMPUTE_CAPABILITY_MAJOR
            *value = 9;
            return CUDA_SUCCESS;
        case 76:  // COMPUTE_CAPABILITY_MINOR
            *value = 0;
            return CUDA_SUCCESS;
    }
    char message[96];
    std::snprintf(message, sizeof message, "cuDeviceGetAttribute: attribute %d has no fake value yet", attribute);
    fake_cuda_fail(message);
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* context, CUdevice device) {
    if (device < 0 || device >= device_count()) return CUDA_ERROR_INVALID_VALUE;
    contexts[device].device = device;
    *context = reinterpret_cast<CUcontext>(&contexts[device]);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice) { return CUDA_SUCCESS; }

EXPORT CUresult cuCtxSetCurrent(CUcontext context) {
    current = context;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetCurrent(CUcontext* context) {
    *context = current;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetDevice(CUdevice* device) {
    if (!current) return 201;  // CUDA_ERROR_INVALID_CONTEXT
    *device = reinterpret_cast<FakeContextState*>(current)->device;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSynchronize() {
    synchronize_all();
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGetErrorString(CUresult error, const char** text) {
    switch (error) {
        case CUDA_SUCCESS: *text = "no error"; break;
        case CUDA_ERROR_INVALID_VALUE: *text = "invalid argument"; break;
        case CUDA_ERROR_OUT_OF_MEMORY: *text = "out of memory"; break;
        case CUDA_ERROR_INVALID_IMAGE: *text = "device kernel image is invalid"; break;
        case CUDA_ERROR_NOT_FOUND: *text = "named symbol not found"; break;
        case CUDA_ERROR_NOT_READY: *text = "device not ready"; break;
        default: *text = "unknown error (fake CUDA)";
    }
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGetErrorName(CUresult error, const char** text) {
    switch (error) {
        case CUDA_SUCCESS: *text = "CUDA_SUCCESS"; break;
        case CUDA_ERROR_INVALID_VALUE: *text = "CUDA_ERROR_INVALID_VALUE"; break;
        case CUDA_ERROR_OUT_OF_MEMORY: *text = "CUDA_ERROR_OUT_OF_MEMORY"; break;
        case CUDA_ERROR_INVALID_IMAGE: *text = "CUDA_ERROR_INVALID_IMAGE"; break;
        case CUDA_ERROR_NOT_FOUND: *text = "CUDA_ERROR_NOT_FOUND"; break;
        case CUDA_ERROR_NOT_READY: *text = "CUDA_ERROR_NOT_READY"; break;
        default: *text = "CUDA_ERROR_UNKNOWN";
    }
    return CUDA_SUCCESS;
}

// ---- Streams and events ----

EXPORT CUresult cuStreamCreate(CUstream* stream, unsigned) {
    *stream = new FakeStream{new_stream()};
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamDestroy_v2(CUstream stream) {
    delete stream;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamSynchronize(CUstream stream) {
    stream_of(stream)->synchronize();
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamQuery(CUstream stream) {
    auto s = stream_of(stream);
    uint64_t probe = s->enqueue([] {});
    return s->has_run(probe) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

EXPORT CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned) {
    Recording recorded = event->current();
    stream_of(stream)->enqueue([recorded] { recorded.wait(); }, "wait for an event");
    return CUDA_SUCCESS;
}

EXPORT CUresult cuLaunchHostFunc(CUstream stream, CUhostFn function, void* data) {
    stream_of(stream)->enqueue([function, data] { function(data); });
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventCreate(CUevent* event, unsigned flags) {
    *event = new FakeEvent;
    (*event)->timing = (flags & 2) == 0;  // CU_EVENT_DISABLE_TIMING
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventDestroy_v2(CUevent event) {
    delete event;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventRecord(CUevent event, CUstream stream) {
    auto s = stream_of(stream);
    auto at = std::make_shared<std::chrono::steady_clock::time_point>();
    // Queued under the event's lock, so that the ticket stored is this recording's.
    std::lock_guard<std::mutex> lock(event->mutex);
    uint64_t ticket = s->enqueue([at] { *at = std::chrono::steady_clock::now(); }, "event record");
    event->latest = Recording{s, ticket, at};
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventQuery(CUevent event) {
    return event->current().complete() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

EXPORT CUresult cuEventSynchronize(CUevent event) {
    event->current().wait();
    return CUDA_SUCCESS;
}

static CUresult elapsed(float* milliseconds, CUevent start, CUevent end) {
    if (!start->timing || !end->timing) return CUDA_ERROR_INVALID_HANDLE;
    Recording a = start->current(), b = end->current();
    if (!a.stream || !b.stream) return CUDA_ERROR_INVALID_HANDLE;
    if (!a.complete() || !b.complete()) return CUDA_ERROR_NOT_READY;
    *milliseconds = std::chrono::duration<float, std::milli>(*b.at - *a.at).count();
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end) { return elapsed(ms, start, end); }
EXPORT CUresult cuEventElapsedTime_v2(float* ms, CUevent start, CUevent end) { return elapsed(ms, start, end); }

// ---- Memory ----

EXPORT CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
    *total = TOTAL_MEMORY;
    std::lock_guard<std::mutex> lock(registry_mutex);
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
        std::lock_guard<std::mutex> lock(registry_mutex);
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

// ---- Modules and launches ----

// `image` is NVRTC's CUBIN, an ELF file: the kernels it defines are the known kernel names its
// string table holds.
EXPORT CUresult cuModuleLoadData(CUmodule* module, const void* image) {
    const unsigned char* bytes = static_cast<const unsigned char*>(image);
    if (std::memcmp(bytes, "\x7f" "ELF", 4) != 0 || bytes[4] != 2) return CUDA_ERROR_INVALID_IMAGE;
    uint64_t section_headers;
    uint16_t entry_size, entries;
    std::memcpy(&section_headers, bytes + 0x28, 8);
    std::memcpy(&entry_size, bytes + 0x3a, 2);
    std::memcpy(&entries, bytes + 0x3c, 2);
    std::string contents(reinterpret_cast<const char*>(bytes), section_headers + size_t(entry_size) * entries);
    auto loaded = new FakeModule;
    for_each_kernel([&](const char* name) {
        if (contents.find(std::string(1, '\0') + name + '\0') != std::string::npos) loaded->kernels.insert(name);
    });
    *module = loaded;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleUnload(CUmodule module) {
    delete module;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleGetFunction(CUfunction* function, CUmodule module, const char* name) {
    if (!find_kernel(name)) {
        std::string message = std::string("cuModuleGetFunction: no CPU build of kernel ") + name +
                              " (add it to tests/kernel-emulation/src/launchers.h)";
        fake_cuda_fail(message.c_str());
    }
    if (!module->kernels.count(name)) return CUDA_ERROR_NOT_FOUND;
    *function = new FakeFunction{name, find_kernel(name)};
    return CUDA_SUCCESS;
}

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block_x,
                               unsigned block_y, unsigned block_z, unsigned shared_bytes, CUstream stream,
                               void** params, void** extra) {
    char message[256];
    if (grid_y != 1 || grid_z != 1 || block_y != 1 || block_z != 1 || shared_bytes != 0 || extra != nullptr) {
        std::snprintf(message, sizeof message,
                      "%s: launched as grid (%u, %u, %u), block (%u, %u, %u), %u bytes of dynamic shared memory%s; "
                      "the emulator runs one-dimensional grids with static shared memory only",
                      f->name.c_str(), grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes,
                      extra ? ", arguments in `extra`" : "");
        fake_cuda_fail(message);
    }
    if (grid_x == 0 || block_x == 0 || block_x > 1024) return CUDA_ERROR_INVALID_VALUE;
    stream_of(stream)->enqueue(f->launcher(grid_x, block_x, params), f->name.c_str());
    return CUDA_SUCCESS;
}

// NVRTC opens libcuda.so.1 and asks it for the driver's private tables; there are none here,
// which NVRTC accepts as it does on a machine without a driver.
EXPORT CUresult cuGetExportTable(const void** table, const void*) {
    *table = nullptr;
    return CUDA_ERROR_NOT_FOUND;
}
