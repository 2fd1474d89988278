// Guarded device memory: each allocation ends against an inaccessible page, so that a kernel or a
// cuBLAS call reading or writing past its end stops the process, naming the allocation (what
// compute-sanitizer's memcheck reports on a GPU, which PyTorch's wheels do not ship).
#pragma once

#include <cstddef>

// `bytes` of memory filled with NaNs (all bits set), 16-byte aligned, ending where an
// inaccessible page begins; another such page lies before the page it starts in. nullptr when
// the system refuses the mapping.
void* guarded_allocate(size_t bytes);

// Ends the process, naming the allocation, if anything wrote into the bytes around `bytes` at
// `start` that no guard page covers; then makes the whole allocation inaccessible, so that work
// still reading or writing it after the free stops the process too. The address space is kept
// until later frees have put a gigabyte behind it, so that no new allocation hides such an access.
void guarded_release(void* start, size_t bytes);
