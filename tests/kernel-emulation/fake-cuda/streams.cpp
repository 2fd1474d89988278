// Streams and events of the fake driver (streams.h's), by handle, and the queue the fake cuBLAS
// and NCCL put their work on.
#include <mutex>
#include <vector>

#include "driver.h"

thread_local const char* running_work = nullptr;

namespace {
std::mutex registry_mutex;
// Every stream created, for cuCtxSynchronize and for frees that wait for the device.
std::vector<std::weak_ptr<Stream>> streams;

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
}  // namespace

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

EXPORT void fake_cuda_enqueue(CUstream stream, std::function<void()>* work, const char* label) {
    std::unique_ptr<std::function<void()>> owned(work);
    stream_of(stream)->enqueue(std::move(*owned), label);
}

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
    return stream_of(stream)->idle() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
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
