// Guarded device memory (see guarded.h). Each allocation is a mapping of its own: an inaccessible
// page, the pages holding the allocation, another inaccessible page. The allocation ends 0 to 15
// bytes before the second (its start 16-byte aligned, where a real driver aligns to 256: nothing
// here reads a pointer's alignment), and the bytes around it in its pages keep the NaNs they were
// filled with unless something writes out of bounds, which the free checks. An access to an
// inaccessible page stops the process with a line naming the allocation and how far outside it
// the access was; a fault anywhere else goes to the handler that was there before (Rust's, which
// reports stack overflows).
#include "guarded.h"

#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "fake_cuda.h"
#include "streams.h"

namespace {
const size_t ALIGN = 16;
// Freed allocations kept inaccessible before their address space is handed back: at most this
// many bytes, and this many mappings (each is one entry of the kernel's map count).
const size_t QUARANTINE_BYTES = 1ull << 30;
const size_t QUARANTINE_MAPPINGS = 16384;
const unsigned char POISON = 0xff;

struct Mapping {
    uintptr_t start;  // the allocation's first byte
    size_t bytes;     // the allocation's size
    size_t length;    // the whole mapping, both guard pages included
    bool freed;
};

// A lock the fault handler can try without blocking, and without the undefined behaviour of a
// thread trying a `std::mutex` it holds.
std::atomic_flag busy = ATOMIC_FLAG_INIT;
struct Held {
    Held() {
        while (busy.test_and_set(std::memory_order_acquire)) std::this_thread::yield();
    }
    ~Held() { busy.clear(std::memory_order_release); }
};

// Every mapping, live or freed and kept, by its first address.
std::map<uintptr_t, Mapping> mappings;
std::deque<uintptr_t> quarantine;
size_t quarantined = 0;

struct sigaction previous;
std::once_flag handler_installed;

size_t page_size() {
    static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    return page;
}

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// `text` to stderr through write(2), which a signal handler may call.
void say(const char* text) {
    size_t left = std::strlen(text);
    while (left > 0) {
        ssize_t written = write(STDERR_FILENO, text, left);
        if (written <= 0) return;
        text += written;
        left -= static_cast<size_t>(written);
    }
}

// What `at` is, when it lies in one of the mappings: written into `message`.
bool describe(uintptr_t at, char* message, size_t size) {
    auto after = mappings.upper_bound(at);
    if (after == mappings.begin()) return false;
    const auto& [base, m] = *std::prev(after);
    if (at >= base + m.length) return false;
    // Inside the allocation, only a free (under way, or done) makes a page inaccessible.
    const bool inside = at >= m.start && at < m.start + m.bytes;
    const char* where = m.freed || inside ? "already freed" : at >= m.start ? "past its end" : "before its start";
    std::snprintf(message, size, "fake CUDA: an access at byte %lld of the %zu-byte device allocation at 0x%llx, %s\n",
                  static_cast<long long>(at) - static_cast<long long>(m.start), m.bytes,
                  static_cast<unsigned long long>(m.start), where);
    return true;
}

void on_fault(int number, siginfo_t* info, void* context) {
    char message[320];
    bool ours = false;
    // Another thread may be allocating or freeing for a moment; a fault inside this file's own
    // bookkeeping would find the lock taken for good, hence the bound.
    for (int attempt = 0; attempt < 100000; ++attempt) {
        if (!busy.test_and_set(std::memory_order_acquire)) {
            ours = describe(reinterpret_cast<uintptr_t>(info->si_addr), message, sizeof message);
            busy.clear(std::memory_order_release);
            break;
        }
        sched_yield();
    }
    if (ours) {
        say(message);
        if (running_work != nullptr) {
            say("fake CUDA: by ");
            say(running_work);
            say(", running on a stream\n");
        } else {
            say("fake CUDA: not by work queued on a stream\n");
        }
        std::abort();
    }
    // Not a guard page: the handler there before decides; with none, returning faults again
    // under the default action.
    if (previous.sa_flags & SA_SIGINFO) {
        previous.sa_sigaction(number, info, context);
    } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
        previous.sa_handler(number);
    } else {
        struct sigaction fallback {};
        fallback.sa_handler = SIG_DFL;
        sigaction(number, &fallback, nullptr);
    }
}

void install_handler() {
    struct sigaction action {};
    action.sa_sigaction = on_fault;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    sigaction(SIGSEGV, &action, &previous);
}

// Ends the process if a byte of [from, to) is not the poison any more: a write out of bounds
// (`before` the allocation's start, or past its end) that no guard page caught.
void check_untouched(uintptr_t from, uintptr_t to, const Mapping& m, bool before) {
    auto first = reinterpret_cast<const unsigned char*>(from);
    auto last = reinterpret_cast<const unsigned char*>(to);
    auto written = reinterpret_cast<uintptr_t>(std::find_if(first, last, [](unsigned char b) { return b != POISON; }));
    if (written == to) return;
    char message[256];
    std::snprintf(message, sizeof message, "a write at byte %lld of the %zu-byte device allocation at 0x%llx, %s",
                  static_cast<long long>(written) - static_cast<long long>(m.start), m.bytes,
                  static_cast<unsigned long long>(m.start), before ? "before its start" : "past its end");
    fake_cuda_fail(message);
}
}  // namespace

void* guarded_allocate(size_t bytes) {
    std::call_once(handler_installed, install_handler);
    const size_t page = page_size();
    const size_t used = round_up(std::max<size_t>(bytes, 1), ALIGN);
    const size_t data = round_up(used, page);
    const size_t length = data + 2 * page;
    void* mapped = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapped == MAP_FAILED) return nullptr;
    const auto base = reinterpret_cast<uintptr_t>(mapped);
    if (mprotect(mapped, page, PROT_NONE) != 0 ||
        mprotect(reinterpret_cast<void*>(base + page + data), page, PROT_NONE) != 0) {
        munmap(mapped, length);
        return nullptr;
    }
    std::memset(reinterpret_cast<void*>(base + page), POISON, data);
    const uintptr_t start = base + page + data - used;
    Held held;
    mappings[base] = Mapping{start, bytes, length, false};
    return reinterpret_cast<void*>(start);
}

void guarded_release(void* pointer, size_t bytes) {
    const auto start = reinterpret_cast<uintptr_t>(pointer);
    const size_t page = page_size();
    Mapping m;
    uintptr_t base;
    {
        Held held;
        auto found = std::prev(mappings.upper_bound(start));
        base = found->first;
        m = found->second;
    }
    const uintptr_t data_begin = base + page, data_end = base + m.length - page;
    check_untouched(data_begin, start, m, true);
    check_untouched(start + bytes, data_end, m, false);
    // The pages' memory goes back to the system now; their addresses stay inaccessible.
    madvise(reinterpret_cast<void*>(data_begin), data_end - data_begin, MADV_DONTNEED);
    mprotect(reinterpret_cast<void*>(data_begin), data_end - data_begin, PROT_NONE);
    Held held;
    mappings[base].freed = true;
    quarantine.push_back(base);
    quarantined += m.length;
    while (quarantined > QUARANTINE_BYTES || quarantine.size() > QUARANTINE_MAPPINGS) {
        auto oldest = mappings.find(quarantine.front());
        quarantine.pop_front();
        quarantined -= oldest->second.length;
        munmap(reinterpret_cast<void*>(oldest->first), oldest->second.length);
        mappings.erase(oldest);
    }
}
