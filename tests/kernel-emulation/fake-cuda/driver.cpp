// The CUDA driver API on the CPU (libcuda.so), as much of it as cudarc and the GPU backend call:
// devices and contexts here, with modules (the images NVRTC compiled) and kernel launches (the
// kernel's CPU build, kernel_table.cpp, queued on its stream); streams and events in
// streams.cpp, device memory in memory.cpp. What the real driver would refuse is refused; what
// would be undefined (an unknown attribute, a 2-D grid the emulator cannot run) ends the process
// with a message naming it.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "driver.h"
#include "kernel_table.h"

namespace {
const int DEVICES_DEFAULT = 1;
const int DEVICES_AT_MOST = 64;

int device_count() {
    const char* set = std::getenv("FAKE_CUDA_DEVICES");
    return set ? std::clamp(std::atoi(set), 1, DEVICES_AT_MOST) : DEVICES_DEFAULT;
}

struct FakeContextState {
    CUdevice device;
};
FakeContextState contexts[DEVICES_AT_MOST];
thread_local CUcontext current = nullptr;
}  // namespace

struct FakeModule {
    std::set<std::string> kernels;
};

struct FakeFunction {
    std::string name;
    Launcher launcher;
};

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

namespace {
// An H200's answers to the attributes asked for (CUdevice_attribute's numbers).
const std::pair<int, int> ATTRIBUTES[] = {
    {1, 1024},        // MAX_THREADS_PER_BLOCK
    {2, 1024},        // MAX_BLOCK_DIM_X
    {5, 2147483647},  // MAX_GRID_DIM_X
    {8, 49152},       // MAX_SHARED_MEMORY_PER_BLOCK
    {10, 32},         // WARP_SIZE
    {16, 132},        // MULTIPROCESSOR_COUNT
    {31, 1},          // CONCURRENT_KERNELS
    {33, 0},          // PCI_BUS_ID
    {34, 0},          // PCI_DEVICE_ID
    {41, 1},          // UNIFIED_ADDRESSING
    {50, 0},          // PCI_DOMAIN_ID
    {75, 9},          // COMPUTE_CAPABILITY_MAJOR
    {76, 0},          // COMPUTE_CAPABILITY_MINOR
    {115, 1},         // MEMORY_POOLS_SUPPORTED
};
}  // namespace

EXPORT CUresult cuDeviceGetAttribute(int* value, int attribute, CUdevice) {
    for (auto [known, answer] : ATTRIBUTES) {
        if (known == attribute) {
            *value = answer;
            return CUDA_SUCCESS;
        }
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

namespace {
// The results this fake returns, by name and in words.
struct Described {
    CUresult code;
    const char* name;
    const char* text;
};
const Described RESULTS[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
};
const Described UNKNOWN = {-1, "CUDA_ERROR_UNKNOWN", "unknown error (fake CUDA)"};

const Described& described(CUresult code) {
    for (const Described& d : RESULTS)
        if (d.code == code) return d;
    return UNKNOWN;
}
}  // namespace

EXPORT CUresult cuGetErrorString(CUresult error, const char** text) {
    *text = described(error).text;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGetErrorName(CUresult error, const char** text) {
    *text = described(error).name;
    return CUDA_SUCCESS;
}

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
