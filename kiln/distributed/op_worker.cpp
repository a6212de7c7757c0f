// OpWorker: the queue, its two threads and the Work they complete. See the header.
#include "kiln/distributed/op_worker.h"

#include <pthread.h>

#include <csignal>

#include "kiln/distributed/threaded_work.h"
#include "kiln/tensor/error.h"

namespace kiln::distributed {

BlockSigpipe::BlockSigpipe() {
  sigset_t pipe, old;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, &old);
  was_blocked_ = sigismember(&old, SIGPIPE) == 1;
}

BlockSigpipe::~BlockSigpipe() {
  if (was_blocked_) return;
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  const timespec now{0, 0};
  while (sigtimedwait(&pipe, nullptr, &now) == SIGPIPE) {
  }
  pthread_sigmask(SIG_UNBLOCK, &pipe, nullptr);
}

void check_cpu_tensor(const Tensor& t, const std::string& backend, const std::string& what) {
  KILN_CHECK(t.defined(), what, ": the tensor is undefined");
  KILN_CHECK(t.device().is_cpu(), what, ": the ", backend, " backend needs CPU tensors, got one on ", t.device().str());
  KILN_CHECK(t.is_contiguous(), what, ": the tensor must be contiguous (call .contiguous() first)");
}

void check_tensor_list(const std::vector<Tensor>& tensors, const Tensor& like, int size, const std::string& backend,
                       const std::string& what, const std::string& role) {
  KILN_CHECK(static_cast<int>(tensors.size()) == size, what, ": expected ", size, " ", role,
             " tensors (one per rank), got ", tensors.size());
  for (size_t r = 0; r < tensors.size(); ++r) {
    check_cpu_tensor(tensors[r], backend, what + " " + role + " " + std::to_string(r));
    KILN_CHECK(tensors[r].dtype() == like.dtype() && tensors[r].numel() == like.numel(), what, ": ", role, " ", r,
               " has ", tensors[r].numel(), " ", dtype_name(tensors[r].dtype()), " but the ",
               role == "output" ? "input" : "output", " has ", like.numel(), " ", dtype_name(like.dtype()));
  }
}

struct OpWorker::Task {
  std::string name;
  std::string stream;
  std::function<Completion(const std::string&)> body;
  Completion completion;
  std::shared_ptr<ThreadedWork> work;
};

// How long a completer's thread waits for another completion before it ends (the worker makes a new one when
// its stream has work again): point to point makes one per (peer, tag), and tags may be many.
constexpr auto kCompleterIdle = std::chrono::milliseconds(500);

struct OpWorker::Completer {
  std::deque<std::unique_ptr<Task>> queue;
  std::thread thread;
  bool ended = false;  // its thread has returned (idle): to be joined and replaced
};

// How often the watcher looks for another rank's report while ops are in flight (GroupFailure::read_report
// reads the store at most this often too).
constexpr auto kWatchInterval = std::chrono::milliseconds(500);

OpWorker::OpWorker(std::string backend, int rank, FailureSharing sharing)
    : backend_(std::move(backend)), rank_(rank), sharing_(std::move(sharing)) {
  const BlockSigpipe no_sigpipe;  // the worker and, through it, every completer
  worker_ = std::thread([this] { run_worker(); });
  if (sharing_.reports) {
    try {
      watcher_ = std::thread([this] { run_watcher(); });
    } catch (...) {
      stop();  // the worker thread must not outlive a constructor that throws
      throw;
    }
  }
}

OpWorker::~OpWorker() { stop(); }

void OpWorker::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  // The worker is done: no completer is made from here on, and each returns once its queue is empty.
  for (auto& [stream, c] : completers_)
    if (c->thread.joinable()) c->thread.join();
  // Every op has ended: nothing left to watch.
  {
    std::lock_guard<std::mutex> lock(mutex_);
    watcher_stop_ = true;
  }
  watcher_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
}

std::shared_ptr<Work> OpWorker::enqueue(const std::string& op, const std::string& stream, const std::string& suffix,
                                        std::function<Completion(const std::string&)> body,
                                        const std::string& completer) {
  std::shared_ptr<ThreadedWork> work;
  bool watch = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string name = op + " #" + std::to_string(seq_[stream]++) + suffix;
    KILN_CHECK(!stop_, backend_, " ", name, ": rank ", rank_, ": the process group is shutting down");
    work = std::make_shared<ThreadedWork>(name);
    if (!failure_.empty()) {
      // Failed already: at once, not behind an op that may still be stuck in the engine.
      work->complete(true, failed_earlier(name));
      return work;
    }
    ops_.push_back(std::make_unique<Task>(Task{std::move(name), completer.empty() ? stream : completer,
                                               std::move(body), {}, work}));
    watch = sharing_.reports != nullptr && live_.empty();  // the watcher sleeps until ops are in flight
    if (sharing_.reports) live_.push_back(work);
  }
  cv_.notify_all();
  if (watch) watcher_cv_.notify_all();
  return work;
}

std::string OpWorker::failed_earlier(const std::string& name) const {
  return backend_ + " " + name + ": rank " + std::to_string(rank_) + ": the group failed earlier (a failed " +
         backend_ + " group is not usable again): " + failure_;
}

void OpWorker::fail_after_failure(Task& task) {
  std::string message;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    message = failed_earlier(task.name);
  }
  task.work->complete(true, message);
}

void OpWorker::fail(Task& task, std::string what) {
  const std::string me = "rank " + std::to_string(rank_);
  bool first = false, close = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    first = failure_.empty() && !reporting_;
    reporting_ = reporting_ || first;  // the watcher must not take this rank's own report for another's
    close = sharing_.close && !closed_;
    closed_ = true;
  }
  std::string message;
  if (first) {
    if (sharing_.explain) {
      try {
        what = sharing_.explain(what);
      } catch (const std::exception&) {
        // the engine's own words are still the error
      }
    }
    const std::string op = backend_ + " " + task.name;
    message = op + ": " + me + ": " + what;
    if (sharing_.reports) {
      // Reported before the connections close: a peer that sees them close finds the cause in the store.
      const std::string own = op + ": " + what;
      const std::string reported = sharing_.reports->report(op, own);
      if (reported != own) message = reported;  // another rank failed first: its report is the cause
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (failure_.empty()) failure_ = message;
    reporting_ = false;
  } else {
    std::lock_guard<std::mutex> lock(mutex_);
    // (Another thread of this rank may still be reporting the first failure: then this op's own error it is.)
    message = failure_.empty() ? backend_ + " " + task.name + ": " + me + ": " + what
                               : failed_earlier(task.name) + " (here: " + what + ")";
  }
  if (close) sharing_.close();
  task.work->complete(true, message);
}

void OpWorker::run_worker() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !ops_.empty(); });
    if (ops_.empty()) break;  // stopping, and nothing left
    std::unique_ptr<Task> task = std::move(ops_.front());
    ops_.pop_front();
    const bool failed_before = !failure_.empty();
    lock.unlock();
    if (failed_before) {
      fail_after_failure(*task);
    } else {
      try {
        task->completion = task->body(task->name);
        task->body = nullptr;  // its captured tensors, released now
        if (!task->completion) task->work->complete(false, {});
      } catch (const std::exception& e) {
        task->completion = nullptr;
        fail(*task, e.what());
      }
    }
    lock.lock();
    if (task->completion) {
      reap_idle_completers();
      std::unique_ptr<Completer>& c = completers_[task->stream];
      if (c == nullptr) {
        auto made = std::make_unique<Completer>();
        Completer* raw = made.get();
        try {
          made->thread = std::thread([this, raw] { run_completer(*raw); });
          c = std::move(made);
        } catch (const std::exception& e) {  // no thread to be had (a system limit): the op fails, not the process
          completers_.erase(task->stream);
          lock.unlock();
          fail(*task, std::string("could not start a thread to wait for it: ") + e.what());
          lock.lock();
          continue;
        }
      }
      c->queue.push_back(std::move(task));
      cv_.notify_all();
    }
  }
  worker_done_ = true;
  cv_.notify_all();
}

void OpWorker::reap_idle_completers() {
  for (auto it = completers_.begin(); it != completers_.end();) {
    if (!it->second->ended) {
      ++it;
      continue;
    }
    it->second->thread.join();  // it has returned already: no wait
    it = completers_.erase(it);
  }
}

void OpWorker::run_completer(Completer& c) {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    const bool woken = cv_.wait_for(lock, kCompleterIdle, [&] { return worker_done_ || !c.queue.empty(); });
    if (c.queue.empty()) {
      // The worker is done, and so is every completion of this stream; or nothing came for a while: end, and
      // let the worker join this thread (it checks `ended` under the lock before it queues here again).
      if (!woken) c.ended = true;
      return;
    }
    std::unique_ptr<Task> task = std::move(c.queue.front());
    c.queue.pop_front();
    lock.unlock();
    try {
      task->completion();
      task->work->complete(false, {});
    } catch (const std::exception& e) {
      fail(*task, e.what());
    }
    task.reset();
    lock.lock();
  }
}

void OpWorker::run_watcher() {
  auto last_read = std::chrono::steady_clock::now() - kWatchInterval;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    std::erase_if(live_, [](const std::weak_ptr<ThreadedWork>& w) {
      const std::shared_ptr<ThreadedWork> work = w.lock();
      return work == nullptr || work->is_completed();
    });
    if (watcher_stop_) return;
    if (live_.empty() || !failure_.empty()) {
      // Nothing in flight, or the group failed already (later ops fail at once): wait for an op.
      watcher_cv_.wait(lock);
      continue;
    }
    watcher_cv_.wait_for(lock, kWatchInterval);
    if (watcher_stop_ || !failure_.empty() || reporting_) continue;
    lock.unlock();
    std::string report;
    try {
      report = sharing_.reports->read_report(last_read);
    } catch (const std::exception&) {
      // The store is unreachable (its server's rank has left): nothing learned; the ops' own deadlines hold.
    }
    lock.lock();
    // This rank's own report (written by fail() meanwhile) is no news: fail() records it.
    if (report.empty() || !failure_.empty() || reporting_ ||
        report.rfind("rank " + std::to_string(rank_) + " failed:", 0) == 0)
      continue;
    const std::string cause = "rank " + std::to_string(rank_) + " stopped because " + report;
    failure_ = backend_ + ": " + cause;
    std::vector<std::shared_ptr<ThreadedWork>> doomed;
    for (const auto& w : live_)
      if (std::shared_ptr<ThreadedWork> work = w.lock()) doomed.push_back(std::move(work));
    live_.clear();
    const bool close = sharing_.close && !closed_;
    closed_ = true;
    lock.unlock();
    sharing_.reports->record(failure_);
    for (const auto& work : doomed) work->complete(true, backend_ + " " + work->name() + ": " + cause);
    // After the Works: an op failing on the ended connections meanwhile finds the group failed already.
    if (close) sharing_.close();
    lock.lock();
  }
}

}  // namespace kiln::distributed
