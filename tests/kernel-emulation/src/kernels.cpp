// The GPU backend's kernel sources, compiled for the CPU under emulator.h, and one C entry per
// kernel, `emu_<kernel>(grid, block, the kernel's own arguments)`, that launches it there.
#include "kernel_sources.h"

namespace {
template <typename... Args>
void run(void (*kernel)(Args...), unsigned grid, unsigned block, Args... args) {
    emu::launch(grid, block, [=] { kernel(args...); });
}
}  // namespace

#define LAUNCHER(kernel, params, args) \
    extern "C" void emu_##kernel(unsigned grid, unsigned block, params) { run(kernel, grid, block, args); }
#include "launchers.h"

// Whether later launches run their grid's blocks last to first (`emu::blocks_last_first`).
extern "C" void emu_run_blocks_last_first(bool on) { emu::blocks_last_first = on; }
