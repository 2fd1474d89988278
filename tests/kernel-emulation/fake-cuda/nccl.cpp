// NCCL on the CPU (libnccl.so.2), between the processes of one machine: a communicator is a
// POSIX shared-memory segment named by its unique id, with one staging slot and one progress
// counter per rank. A collective runs on the caller's stream, as NCCL's kernels do, in chunks
// that fit a slot: each rank stages its part, all meet, each reads what it needs, all meet again.
// Sums are added in rank order, and each collective starts late, as over a slow link. Each rank
// also posts what collective it is running, and every rank checks the others post the same one:
// mismatched calls, which hang or corrupt on a GPU, end the process with a message naming both.
// A rank that waits a minute for the others says so and ends the process too. Only the
// collectives the backend calls exist: all-reduce, reduce and broadcast.
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "fake_cuda.h"

#define EXPORT extern "C" __attribute__((visibility("default")))

typedef int ncclResult_t;
enum : ncclResult_t { ncclSuccess = 0, ncclSystemError = 2, ncclInvalidArgument = 4, ncclInvalidUsage = 5 };
enum { ncclInt8 = 0, ncclUint8, ncclInt32, ncclUint32, ncclInt64, ncclUint64, ncclFloat16, ncclFloat32, ncclFloat64 };
enum { ncclSum = 0 };
struct ncclUniqueId {
    char internal[128];
};

namespace {
const size_t SLOT_BYTES = 4 << 20;
const int MAX_RANKS = 64;
const auto PATIENCE = std::chrono::seconds(60);
// Each collective starts this late (FAKE_NCCL_LATENCY_US overrides it): a link is slow next to
// the kernels, and work that reads a sum without waiting for it then reads it unsummed.
const int LATENCY_US_DEFAULT = 20000;

void link_latency() {
    static const int latency = [] {
        const char* set = std::getenv("FAKE_NCCL_LATENCY_US");
        return set ? std::atoi(set) : LATENCY_US_DEFAULT;
    }();
    if (latency > 0) std::this_thread::sleep_for(std::chrono::microseconds(latency));
}

// What a rank is running, posted for the others to compare.
struct Posted {
    uint64_t sequence;
    int kind, datatype, root;
    size_t count;
};

struct alignas(64) RankHeader {
    std::atomic<uint64_t> arrived;
    Posted posted;
};

struct Segment {
    std::atomic<int> joined;
    RankHeader ranks[MAX_RANKS];
};

const char* kind_name(int kind) {
    static const char* names[] = {"all-reduce", "reduce", "broadcast"};
    return names[kind];
}
// The collectives the backend calls (its reduce-scatter and all-gather are per-rank reduces and
// broadcasts, since its shards differ in length).
enum Kind { ALL_REDUCE, REDUCE, BROADCAST };

size_t element_size(int datatype) {
    switch (datatype) {
        case ncclInt8:
        case ncclUint8: return 1;
        case ncclFloat16: return 2;
        case ncclInt32:
        case ncclUint32:
        case ncclFloat32: return 4;
        case ncclInt64:
        case ncclUint64:
        case ncclFloat64: return 8;
    }
    return 0;
}

// out += in, `count` elements of `datatype`.
void add(int datatype, void* out, const void* in, size_t count) {
    auto sum = [&](auto* o, const auto* i) {
        for (size_t e = 0; e < count; ++e) o[e] += i[e];
    };
    switch (datatype) {
        case ncclFloat32: sum(static_cast<float*>(out), static_cast<const float*>(in)); break;
        case ncclFloat64: sum(static_cast<double*>(out), static_cast<const double*>(in)); break;
        case ncclInt32: sum(static_cast<int32_t*>(out), static_cast<const int32_t*>(in)); break;
        case ncclUint32: sum(static_cast<uint32_t*>(out), static_cast<const uint32_t*>(in)); break;
        case ncclInt64: sum(static_cast<int64_t*>(out), static_cast<const int64_t*>(in)); break;
        case ncclUint64: sum(static_cast<uint64_t*>(out), static_cast<const uint64_t*>(in)); break;
        default: fake_cuda_fail("fake NCCL: sums of this data type are not emulated");
    }
}
}  // namespace

struct FakeComm {
    int ranks, rank;
    Segment* segment;
    unsigned char* slots;
    // Barriers passed; the counters in the segment hold it.
    uint64_t met = 0;
    // Collectives run, for the posted descriptions.
    uint64_t sequence = 0;

    unsigned char* slot(int r) const { return slots + size_t(r) * SLOT_BYTES; }

    void meet(const char* during) {
        ++met;
        segment->ranks[rank].arrived.store(met, std::memory_order_release);
        auto start = std::chrono::steady_clock::now();
        for (int r = 0; r < ranks; ++r) {
            while (segment->ranks[r].arrived.load(std::memory_order_acquire) < met) {
                if (std::chrono::steady_clock::now() - start > PATIENCE) {
                    std::string message = "fake NCCL: rank " + std::to_string(rank) + " waited " +
                                          std::to_string(PATIENCE.count()) + " s for rank " + std::to_string(r) +
                                          " in " + during + " (collective " + std::to_string(sequence) + ")";
                    fake_cuda_fail(message.c_str());
                }
                sched_yield();
            }
        }
    }

    // Posts this rank's collective, meets the others, and checks they run the same one.
    void agree(const Posted& mine) {
        segment->ranks[rank].posted = mine;
        meet(kind_name(mine.kind));
        for (int r = 0; r < ranks; ++r) {
            const Posted& theirs = segment->ranks[r].posted;
            if (theirs.sequence != mine.sequence || theirs.kind != mine.kind || theirs.datatype != mine.datatype ||
                theirs.root != mine.root || theirs.count != mine.count) {
                char message[320];
                std::snprintf(message, sizeof message,
                              "fake NCCL: collective %llu differs between ranks: rank %d runs %s of %zu elements "
                              "(type %d, root %d), rank %d runs %s of %zu elements (type %d, root %d)",
                              static_cast<unsigned long long>(mine.sequence), rank, kind_name(mine.kind), mine.count,
                              mine.datatype, mine.root, r, kind_name(theirs.kind), theirs.count, theirs.datatype,
                              theirs.root);
                fake_cuda_fail(message);
            }
        }
        // Nobody overwrites a posting before everybody has compared it.
        meet(kind_name(mine.kind));
    }

    // Every rank's `send` reduced into `recv` on `root` (all ranks when root < 0).
    void reduce(const unsigned char* send, unsigned char* recv, size_t count, int datatype, int root) {
        size_t size = element_size(datatype), per_chunk = SLOT_BYTES / size;
        for (size_t at = 0; at < count; at += per_chunk) {
            size_t n = std::min(per_chunk, count - at), bytes = n * size;
            std::memcpy(slot(rank), send + at * size, bytes);
            meet("a reduction");
            if (root < 0 || root == rank) {
                std::vector<unsigned char> sum(slot(0), slot(0) + bytes);
                for (int r = 1; r < ranks; ++r) add(datatype, sum.data(), slot(r), n);
                std::memcpy(recv + at * size, sum.data(), bytes);
            }
            meet("a reduction");
        }
    }

    void broadcast(const unsigned char* send, unsigned char* recv, size_t bytes, int root) {
        for (size_t at = 0; at < bytes; at += SLOT_BYTES) {
            size_t n = std::min(SLOT_BYTES, bytes - at);
            if (rank == root) std::memcpy(slot(rank), send + at, n);
            meet("a broadcast");
            std::memmove(recv + at, slot(root), n);
            meet("a broadcast");
        }
    }
};

namespace {
struct Call {
    CUstream stream;
    const char* label;
    std::function<void()> run;
};
thread_local int group_depth = 0;
thread_local std::vector<Call> grouped;

ncclResult_t submit(FakeComm* comm, CUstream stream, Kind kind, int datatype, int root, size_t count,
                    std::function<void(FakeComm*)> body) {
    if (!comm || element_size(datatype) == 0 || root >= comm->ranks) return ncclInvalidArgument;
    Posted posted{++comm->sequence, kind, datatype, root, count};
    Call call{stream, kind_name(kind), [comm, posted, body] {
                  link_latency();
                  comm->agree(posted);
                  body(comm);
              }};
    if (group_depth > 0) {
        grouped.push_back(std::move(call));
    } else {
        enqueue(call.stream, call.label, std::move(call.run));
    }
    return ncclSuccess;
}

void check(const void* at, size_t bytes, const char* what) {
    if (bytes) fake_cuda_check_range(reinterpret_cast<CUdeviceptr>(at), bytes, what);
}
}  // namespace

EXPORT ncclResult_t ncclGetVersion(int* version) {
    *version = 22703;
    return ncclSuccess;
}

EXPORT const char* ncclGetErrorString(ncclResult_t result) {
    switch (result) {
        case ncclSuccess: return "no error";
        case ncclInvalidArgument: return "invalid argument";
        case ncclInvalidUsage: return "invalid usage";
        default: return "system error (fake NCCL)";
    }
}

EXPORT const char* ncclGetLastError(FakeComm*) { return ""; }

EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    std::memset(id->internal, 0, sizeof id->internal);
    std::random_device random;
    std::snprintf(id->internal, sizeof id->internal, "/fake-nccl-%d-%08x%08x", getpid(), random(), random());
    return ncclSuccess;
}

EXPORT ncclResult_t ncclCommInitRank(FakeComm** out, int ranks, ncclUniqueId id, int rank) {
    if (ranks < 1 || ranks > MAX_RANKS || rank < 0 || rank >= ranks) return ncclInvalidArgument;
    id.internal[sizeof id.internal - 1] = 0;
    size_t bytes = sizeof(Segment) + size_t(ranks) * SLOT_BYTES;
    int fd = shm_open(id.internal, O_CREAT | O_RDWR, 0600);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) return ncclSystemError;
    void* mapped = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (mapped == MAP_FAILED) return ncclSystemError;
    auto comm = new FakeComm{ranks, rank, static_cast<Segment*>(mapped),
                             static_cast<unsigned char*>(mapped) + sizeof(Segment)};
    comm->segment->joined.fetch_add(1);
    comm->meet("joining the communicator");
    // Everyone has it mapped: the name is no longer needed, and nothing is left in /dev/shm.
    if (rank == 0) shm_unlink(id.internal);
    *out = comm;
    return ncclSuccess;
}

// The communicator and its segment are kept: a stream may still run its last collectives.
EXPORT ncclResult_t ncclCommDestroy(FakeComm*) { return ncclSuccess; }

EXPORT ncclResult_t ncclCommAbort(FakeComm* comm) { return ncclCommDestroy(comm); }
EXPORT ncclResult_t ncclCommFinalize(FakeComm*) { return ncclSuccess; }

EXPORT ncclResult_t ncclCommGetAsyncError(FakeComm*, ncclResult_t* error) {
    *error = ncclSuccess;
    return ncclSuccess;
}

EXPORT ncclResult_t ncclCommCount(const FakeComm* comm, int* count) {
    *count = comm->ranks;
    return ncclSuccess;
}

EXPORT ncclResult_t ncclCommUserRank(const FakeComm* comm, int* rank) {
    *rank = comm->rank;
    return ncclSuccess;
}

EXPORT ncclResult_t ncclCommCuDevice(const FakeComm*, int* device) {
    *device = 0;
    return ncclSuccess;
}

EXPORT ncclResult_t ncclGroupStart() {
    ++group_depth;
    return ncclSuccess;
}

// The group's calls go to their streams in the order they were made; every rank makes them in
// the same order, which NCCL requires too.
EXPORT ncclResult_t ncclGroupEnd() {
    if (group_depth == 0) return ncclInvalidUsage;
    if (--group_depth == 0) {
        for (Call& call : grouped) enqueue(call.stream, call.label, std::move(call.run));
        grouped.clear();
    }
    return ncclSuccess;
}

EXPORT ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, int datatype, int op, FakeComm* comm,
                                  CUstream stream) {
    if (op != ncclSum) return ncclInvalidArgument;
    check(send, count * element_size(datatype), "ncclAllReduce send buffer");
    check(recv, count * element_size(datatype), "ncclAllReduce receive buffer");
    return submit(comm, stream, ALL_REDUCE, datatype, -1, count, [=](FakeComm* c) {
        c->reduce(static_cast<const unsigned char*>(send), static_cast<unsigned char*>(recv), count, datatype, -1);
    });
}

EXPORT ncclResult_t ncclReduce(const void* send, void* recv, size_t count, int datatype, int op, int root,
                               FakeComm* comm, CUstream stream) {
    if (op != ncclSum || root < 0) return ncclInvalidArgument;
    check(send, count * element_size(datatype), "ncclReduce send buffer");
    if (comm && comm->rank == root) check(recv, count * element_size(datatype), "ncclReduce receive buffer");
    return submit(comm, stream, REDUCE, datatype, root, count, [=](FakeComm* c) {
        c->reduce(static_cast<const unsigned char*>(send), static_cast<unsigned char*>(recv), count, datatype, root);
    });
}

EXPORT ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, int datatype, int root, FakeComm* comm,
                                  CUstream stream) {
    if (root < 0) return ncclInvalidArgument;
    size_t bytes = count * element_size(datatype);
    if (comm && comm->rank == root) check(send, bytes, "ncclBroadcast send buffer");
    check(recv, bytes, "ncclBroadcast receive buffer");
    return submit(comm, stream, BROADCAST, datatype, root, count, [=](FakeComm* c) {
        c->broadcast(static_cast<const unsigned char*>(send), static_cast<unsigned char*>(recv), bytes, root);
    });
}
