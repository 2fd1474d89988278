// Streams and events as the driver defines them: a stream runs its work in the order it was
// queued, on a thread of its own, so that work on two streams runs at once unless an event
// orders it, as on the GPU. A missing wait between streams then shows as a wrong or poisoned
// value (or a different one from run to run), not as luck of a serial order.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

// What this thread's stream is running now (nullptr between pieces of work), for messages about
// a fault in it.
extern thread_local const char* running_work;

class Stream {
   public:
    Stream() : worker_([this] { run(); }) {}
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    // As cuStreamDestroy: the work already queued still runs.
    ~Stream() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stopping_ = true;
        }
        queued_.notify_all();
        worker_.join();
    }

    // Queues `work`; the ticket is what `wait_for` waits for to know it has run. With
    // FAKE_CUDA_SERIAL set, every stream runs its work before the call returns (one order of
    // all work, as if each call waited for the device): a difference between the two modes
    // points at a missing order between streams rather than at the numbers.
    uint64_t enqueue(std::function<void()> work, const char* label = "work") {
        static const bool serial = std::getenv("FAKE_CUDA_SERIAL") != nullptr;
        uint64_t ticket;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            queue_.push_back(Work{std::move(work), label});
            queued_.notify_all();
            ticket = ++enqueued_;
        }
        if (serial) wait_for(ticket);
        return ticket;
    }

    void wait_for(uint64_t ticket) {
        std::unique_lock<std::mutex> lock(mutex_);
        ran_.wait(lock, [&] { return completed_ >= ticket; });
    }

    bool has_run(uint64_t ticket) {
        std::lock_guard<std::mutex> lock(mutex_);
        return completed_ >= ticket;
    }

    // Everything queued so far has run.
    bool idle() {
        std::lock_guard<std::mutex> lock(mutex_);
        return completed_ == enqueued_;
    }

    // Waits until everything queued so far has run.
    void synchronize() {
        uint64_t last;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            last = enqueued_;
        }
        wait_for(last);
    }

   private:
    // A piece of work and what FAKE_CUDA_TRACE and the guard pages' messages call it.
    struct Work {
        std::function<void()> run;
        std::string label;
    };

    void run() {
        static const bool traced = std::getenv("FAKE_CUDA_TRACE") != nullptr;
        std::unique_lock<std::mutex> lock(mutex_);
        for (;;) {
            queued_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
            if (queue_.empty()) return;
            Work work = std::move(queue_.front());
            queue_.pop_front();
            lock.unlock();
            if (traced) {
                std::fprintf(stderr, "fake CUDA trace: pid %d stream %p runs %s\n", getpid(), static_cast<void*>(this),
                             work.label.c_str());
            }
            running_work = work.label.c_str();
            work.run();
            running_work = nullptr;
            lock.lock();
            ++completed_;
            ran_.notify_all();
        }
    }

    std::mutex mutex_;
    std::condition_variable queued_, ran_;
    std::deque<Work> queue_;
    uint64_t enqueued_ = 0, completed_ = 0;
    bool stopping_ = false;
    // Last: it starts running `run` as soon as it is constructed.
    std::thread worker_;
};

// One cuEventRecord: where in which stream, and when it ran there.
struct Recording {
    std::shared_ptr<Stream> stream;
    uint64_t ticket = 0;
    std::shared_ptr<std::chrono::steady_clock::time_point> at;

    bool complete() const { return !stream || stream->has_run(ticket); }
    void wait() const {
        if (stream) stream->wait_for(ticket);
    }
};

struct FakeEvent {
    std::mutex mutex;
    bool timing = true;
    // The latest recording: what waits and queries refer to, as the driver's events do.
    Recording latest;

    Recording current() {
        std::lock_guard<std::mutex> lock(mutex);
        return latest;
    }
};

struct FakeStream {
    std::shared_ptr<Stream> stream;
};
