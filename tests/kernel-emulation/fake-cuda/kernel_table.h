// The backend's kernels, compiled for the CPU under the emulator, by the name NVRTC gives them.
#pragma once

#include <functional>

// Copies a launch's arguments out of `params` (the driver's array of pointers to each argument,
// read by the kernel's own signature) and returns the launch, to run on a stream later.
using Launcher = std::function<void()> (*)(unsigned grid, unsigned block, void** params);

// The launcher of `name`, or nullptr if the fake has no CPU build of it.
Launcher find_kernel(const char* name);
// Calls `each` with every kernel's name.
void for_each_kernel(const std::function<void(const char*)>& each);
