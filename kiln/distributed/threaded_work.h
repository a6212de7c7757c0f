// ThreadedWork: the Work of an op that another thread completes (a backend's worker, completer or engine
// thread), shared by the backends that run ops on threads of their own.
//
// A failure is kept as its message and wait() throws a fresh kiln::Error from it in the waiting thread: no
// exception object crosses threads.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>

#include "kiln/distributed/process_group.h"
#include "kiln/tensor/error.h"

namespace kiln::distributed {

class ThreadedWork : public Work {
 public:
  explicit ThreadedWork(std::string name) : name_(std::move(name)) {}

  void wait(std::optional<Duration> timeout) override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (timeout) {
      KILN_CHECK(cv_.wait_for(lock, *timeout, [&] { return done_; }), "wait: ", name_, " is still running after ",
                 timeout->count(), " ms (the op itself goes on until its own deadline)");
    } else {
      cv_.wait(lock, [&] { return done_; });
    }
    if (failed_) detail::throw_error(error_);
  }

  bool is_completed() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_;
  }

  // The first call completes the Work (failed: with `error` as its message); later ones change nothing.
  void complete(bool failed, std::string error = {}) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (done_) return;
      done_ = true, failed_ = failed, error_ = std::move(error);
    }
    cv_.notify_all();
  }

  const std::string& name() const { return name_; }

 private:
  const std::string name_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false, failed_ = false;
  std::string error_;
};

}  // namespace kiln::distributed
