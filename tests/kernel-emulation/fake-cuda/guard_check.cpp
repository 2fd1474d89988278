// The guard pages' own check (run.sh runs it before the GPU tests): each misuse given as the
// argument must end the process with its message, and a clean use must not. Without it, guards
// that stopped working would leave every GPU test passing and nothing checked.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "guarded.h"

thread_local const char* running_work = nullptr;

int main(int argc, char** argv) {
    const char* misuse = argc > 1 ? argv[1] : "";
    float* p = static_cast<float*>(guarded_allocate(20));
    volatile float sink = 0.0f;
    if (std::strcmp(misuse, "write-past-the-end") == 0) {
        p[5] = 1.0f;  // into the bytes before the guard page: found by the free
        guarded_release(p, 20);
    } else if (std::strcmp(misuse, "read-past-the-end") == 0) {
        running_work = "a kernel";
        sink = p[8];  // the guard page
    } else if (std::strcmp(misuse, "write-before-the-start") == 0) {
        p[-1] = 1.0f;
        guarded_release(p, 20);
    } else if (std::strcmp(misuse, "read-after-the-free") == 0) {
        guarded_release(p, 20);
        sink = p[0];
    } else if (std::strcmp(misuse, "clean") == 0) {
        for (int i = 0; i < 5; ++i) p[i] = static_cast<float>(i);
        sink = p[4];
        guarded_release(p, 20);
        std::puts("clean");
    } else {
        std::fprintf(stderr, "usage: guard_check write-past-the-end|read-past-the-end|write-before-the-start|"
                             "read-after-the-free|clean\n");
        return 2;
    }
    return static_cast<int>(sink) == 4 ? 0 : 1;
}
