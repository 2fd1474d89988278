// The kernel sources under the emulator (kernel_sources.h), and a table from each kernel's
// name to a launcher that reads its arguments the way the driver does: one pointer per argument,
// each read as the type the kernel's signature gives it.
#include "kernel_sources.h"

#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <utility>

#include "kernel_table.h"

namespace {
template <typename... Args, size_t... I>
std::tuple<Args...> copy_arguments(void** params, std::index_sequence<I...>) {
    return std::tuple<Args...>{*static_cast<Args*>(params[I])...};
}

// The driver copies a launch's arguments when it is queued; the launch runs later.
template <typename... Args>
std::function<void()> bind(void (*kernel)(Args...), unsigned grid, unsigned block, void** params) {
    std::tuple<Args...> arguments = copy_arguments<Args...>(params, std::index_sequence_for<Args...>{});
    return [=] {
        std::apply([&](Args... a) { emu::launch(grid, block, [=] { kernel(a...); }); }, arguments);
    };
}

#define LAUNCHER(kernel, params, args) \
    {#kernel, [](unsigned grid, unsigned block, void** p) { return bind(kernel, grid, block, p); }},
const std::map<std::string, Launcher> kernels = {
#include "launchers.h"
};
}  // namespace

Launcher find_kernel(const char* name) {
    auto found = kernels.find(name);
    return found == kernels.end() ? nullptr : found->second;
}

void for_each_kernel(const std::function<void(const char*)>& each) {
    for (const auto& [name, launcher] : kernels) each(name.c_str());
}
