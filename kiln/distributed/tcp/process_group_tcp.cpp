// ProcessGroupTCP: argument checks, the op queue and its worker thread, failure propagation. See the header.
#include "kiln/distributed/tcp/process_group_tcp.h"

#include <condition_variable>
#include <deque>
#include <mutex>

#include "kiln/distributed/tcp/reduce_kernels.h"
#include "kiln/tensor/error.h"

namespace kiln::distributed::tcp {

namespace {

class WorkTCP;

}  // namespace

struct QueuedOp {
  std::string name;
  FrameHeader header;
  std::function<void(const Collective&)> body;
  std::shared_ptr<WorkTCP> work;
  bool issued_to_idle = false;  // nothing ran or waited in the queue when it was issued
};

// Who starts an op nobody waits for yet. Waking the worker at every issue costs a thread wakeup per op even
// when the caller waits at once and runs the op itself (then the worker wakes for nothing, on cores the ranks
// need: 4 KiB all-reduces on 2 ranks took about twice as long). So once a caller is seen to wait right after
// issuing (`callers_wait`), ops are issued silently and the worker looks at the queue every kWorkerPoll
// instead: an op nobody waits for starts at most that late, and the first such op turns the wakeups back on.
// After kWorkerPollsBeforeParking looks in a row with no op issued, the worker sleeps until woken
// (`worker_parked`: then every issue wakes it), so an idle group costs nothing.
constexpr auto kWorkerPoll = std::chrono::microseconds(200);
constexpr int kWorkerPollsBeforeParking = 10;

struct OpQueue {
  std::mutex mutex;
  std::condition_variable worker_cv;  // for the worker: an op to run, or stop
  std::condition_variable done_cv;    // for waiting callers: an op finished
  std::deque<std::unique_ptr<QueuedOp>> ops;
  bool running = false;  // some thread (the worker or a waiting caller) is running an op
  bool stop = false;
  bool callers_wait = false;   // see kWorkerPoll
  bool worker_parked = false;  // the worker waits without a timeout: an issued op must wake it
  uint64_t issued = 0;         // ops issued so far
  // The group's run_task. Only called with an op taken from `ops`, and the group's destructor waits until `ops`
  // is empty and nothing runs: the group is alive whenever this is called.
  std::function<void(QueuedOp&)> run;

  // Takes the first op and runs it on this thread. `lock` holds `mutex` on entry and on return.
  void run_front(std::unique_lock<std::mutex>& lock) {
    std::unique_ptr<QueuedOp> op = std::move(ops.front());
    ops.pop_front();
    running = true;
    lock.unlock();
    try {
      run(*op);
    } catch (...) {
      lock.lock();
      running = false;
      worker_cv.notify_one();
      throw;
    }
    op.reset();  // the op's tensors and Work, released outside the lock
    lock.lock();
    running = false;
    // The next op is the worker's, unless a waiting caller takes it first (the worker itself waits on nothing
    // while it runs: then this wakes no one).
    if (!ops.empty() || stop) worker_cv.notify_one();
  }
};

namespace {

// A Work completed by whichever thread ran its op. A failure is kept as its message and wait() throws a fresh
// kiln::Error from it in the waiting thread: no exception object is shared between two threads.
class WorkTCP : public Work {
 public:
  WorkTCP(std::string name, std::shared_ptr<OpQueue> queue) : name_(std::move(name)), queue_(std::move(queue)) {}

  void wait(std::optional<Duration> timeout) override {
    std::unique_lock<std::mutex> lock(queue_->mutex);
    if (timeout) {
      // Bounded: leave the op to the worker, running it here could outlast the timeout.
      KILN_CHECK(queue_->done_cv.wait_for(lock, *timeout, [&] { return done_; }), "wait: ", name_,
                 " is still running after ", timeout->count(), " ms (the op itself goes on until its own deadline)");
    } else {
      while (!done_) {
        // Not done and nothing running: this op is still queued (ops leave the queue in issue order and are done
        // before `running` drops), so run the queue up to it here instead of waiting for the worker.
        if (!queue_->running && !queue_->ops.empty()) {
          // An op issued to an idle group and waited for before the worker started it: the caller's pattern is
          // issue-then-wait, so the worker need not be woken for the ops to come (see kWorkerPoll).
          if (queue_->ops.front()->issued_to_idle) queue_->callers_wait = true;
          queue_->run_front(lock);
        } else {
          queue_->done_cv.wait(lock);
        }
      }
    }
    if (failed_) detail::throw_error(error_);
  }

  bool is_completed() override {
    std::lock_guard<std::mutex> lock(queue_->mutex);
    return done_;
  }

  void finish() { complete(false, {}); }
  void fail(std::string message) { complete(true, std::move(message)); }

 private:
  void complete(bool failed, std::string message) {
    {
      std::lock_guard<std::mutex> lock(queue_->mutex);
      done_ = true, failed_ = failed, error_ = std::move(message);
    }
    queue_->done_cv.notify_all();
  }

  std::string name_;
  std::shared_ptr<OpQueue> queue_;
  bool done_ = false, failed_ = false;  // guarded by queue_->mutex
  std::string error_;
};

void check_tensor(const Tensor& t, const std::string& what) {
  KILN_CHECK(t.defined(), what, ": the tensor is undefined");
  KILN_CHECK(t.device().is_cpu(), what, ": the tcp backend needs CPU tensors, got one on ", t.device().str());
  KILN_CHECK(t.is_contiguous(), what, ": the tensor must be contiguous (call .contiguous() first)");
}

}  // namespace

ProcessGroupTCP::ProcessGroupTCP(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options,
                                 std::string host)
    : ProcessGroup(rank, size), store_(std::move(store)), options_(std::move(options)) {
  KILN_CHECK(store_ != nullptr, "ProcessGroupTCP: no store");
  KILN_CHECK(!options_.name.empty(), "ProcessGroupTCP: the group needs a name");
  KILN_CHECK(options_.timeout.count() > 0, "ProcessGroupTCP: timeout must be positive, got ",
             options_.timeout.count(), " ms");
  mesh_ = Mesh::connect(*store_, options_.name, rank, size, host, Clock::now() + options_.timeout);
  failure_ = std::make_shared<GroupFailure>(store_, mesh_->store_keys() + "/error", rank);
  p2p_ = std::make_unique<P2PEngine>(P2PConfig{store_, options_.name, mesh_->store_keys(), rank, size,
                                               mesh_->job_id(), host, options_.timeout, failure_});
  queue_ = std::make_shared<OpQueue>();
  queue_->run = [this](QueuedOp& op) { run_task(op); };
  worker_ = std::thread([this] { worker_loop(); });
}

ProcessGroupTCP::~ProcessGroupTCP() {
  {
    std::lock_guard<std::mutex> lock(queue_->mutex);
    queue_->stop = true;
  }
  queue_->worker_cv.notify_all();
  if (worker_.joinable()) worker_.join();  // returns once every queued op has run, whichever thread ran it
  p2p_.reset();                            // the same for point to point
  mesh_->close_all();
}

FrameHeader ProcessGroupTCP::header_for(OpKind kind, const Tensor& t, ReduceOp op) {
  FrameHeader h;
  h.group_id = group_id_of(options_.name);
  h.kind = kind;
  h.reduce_op = op;
  h.dtype = t.defined() ? t.dtype() : DType::UInt8;
  h.count = t.defined() ? t.numel() : 0;
  return h;
}

std::shared_ptr<Work> ProcessGroupTCP::enqueue(const char* op, FrameHeader header, const std::string& suffix,
                                               std::function<void(const Collective&)> body) {
  std::shared_ptr<WorkTCP> work;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(queue_->mutex);
    header.seq = next_seq_++;  // in issue order
    std::string name = std::string(op) + " #" + std::to_string(header.seq) + suffix;
    KILN_CHECK(!queue_->stop, name, ": the process group is shutting down");
    work = std::make_shared<WorkTCP>(name, queue_);
    const bool idle = !queue_->running && queue_->ops.empty();
    queue_->ops.push_back(std::make_unique<QueuedOp>(QueuedOp{std::move(name), header, std::move(body), work, idle}));
    ++queue_->issued;
    // A running op passes the queue on when it is done; a polling worker finds the op by itself (kWorkerPoll).
    wake = !queue_->running && (queue_->worker_parked || !queue_->callers_wait);
  }
  if (wake) queue_->worker_cv.notify_one();
  return work;
}

void ProcessGroupTCP::worker_loop() {
  OpQueue& q = *queue_;
  std::unique_lock<std::mutex> lock(q.mutex);
  uint64_t seen = q.issued;
  int quiet_polls = 0;
  bool polled = false;  // the last wait ended by its timeout, not by a wakeup
  for (;;) {
    if (!q.running && !q.ops.empty()) {
      // Found by polling: nobody waited for this op, so the caller overlaps its ops with work: announce them again.
      if (polled) q.callers_wait = false;
      q.run_front(lock);
      polled = false;
      continue;
    }
    if (q.stop && !q.running) return;  // stopping, nothing left to run and nothing running
    quiet_polls = q.issued == seen ? quiet_polls + 1 : 0;
    seen = q.issued;
    if (q.callers_wait && quiet_polls < kWorkerPollsBeforeParking) {
      polled = q.worker_cv.wait_for(lock, kWorkerPoll) == std::cv_status::timeout;
    } else {
      q.worker_parked = true;
      q.worker_cv.wait(lock);
      q.worker_parked = false;
      quiet_polls = 0, polled = false;
    }
  }
}

void ProcessGroupTCP::run_task(QueuedOp& task) {
  if (const std::string earlier = failure_->first(); !earlier.empty()) {
    mesh_->close_all();  // the failure may have been point to point's, which leaves the mesh to this thread
    task.work->fail(task.name + ": rank " + std::to_string(rank_) + ": the group failed earlier: " + earlier);
    return;
  }
  OpContext ctx;
  ctx.name = task.name;
  ctx.timeout = options_.timeout;
  ctx.deadline = Clock::now() + options_.timeout;  // from when the op starts, not from when it was queued
  auto last_read = Clock::now() - std::chrono::seconds(1);
  bool remote = false;
  ctx.check = [&] {
    const std::string report = failure_->read_report(last_read);
    remote = !report.empty();
    KILN_CHECK(!remote, task.name, ": rank ", rank_, " stopped because ", report);
  };
  try {
    const Collective c{*mesh_, ctx, task.header, std::max<size_t>(options_.segment_bytes, 1), &scratch_};
    task.body(c);
    task.work->finish();
  } catch (const std::exception& e) {
    // A failure read from the store is another rank's, reported already; anything else is this rank's own.
    const std::string message = remote ? e.what() : failure_->report(task.name, e.what());
    mesh_->close_all();
    failure_->record(message);  // (report() did, unless the failure was read from the store)
    p2p_->fail(message);
    task.work->fail(message);
  }
}

std::shared_ptr<Work> ProcessGroupTCP::allreduce(Tensor tensor, ReduceOp op) {
  check_tensor(tensor, "allreduce");
  check_reduce_op(op, tensor.dtype(), "allreduce");
  const bool small = tensor.nbytes() <= options_.small_message_bytes;
  return enqueue("allreduce", header_for(OpKind::Allreduce, tensor, op), "", [tensor, small](const Collective& c) {
    if (small) allreduce_recursive_doubling(c, tensor.raw_data_ptr());
    else allreduce_ring(c, tensor.raw_data_ptr());
  });
}

std::shared_ptr<Work> ProcessGroupTCP::broadcast(Tensor tensor, int root) {
  check_tensor(tensor, "broadcast");
  check_rank_in_group(root, "broadcast");
  return enqueue("broadcast", header_for(OpKind::Broadcast, tensor, ReduceOp::Sum), " from rank " + std::to_string(root),
                 [tensor, root](const Collective& c) { broadcast_chain(c, tensor.raw_data_ptr(), root); });
}

std::shared_ptr<Work> ProcessGroupTCP::reduce(Tensor tensor, int root, ReduceOp op) {
  check_tensor(tensor, "reduce");
  check_rank_in_group(root, "reduce");
  check_reduce_op(op, tensor.dtype(), "reduce");
  return enqueue("reduce", header_for(OpKind::Reduce, tensor, op), " to rank " + std::to_string(root),
                 [tensor, root](const Collective& c) { reduce_chain(c, tensor.raw_data_ptr(), root); });
}

std::shared_ptr<Work> ProcessGroupTCP::allgather(std::vector<Tensor> outputs, Tensor input) {
  check_tensor(input, "allgather");
  KILN_CHECK(static_cast<int>(outputs.size()) == size_, "allgather: expected ", size_, " output tensors (one per rank), got ",
             outputs.size());
  for (size_t r = 0; r < outputs.size(); ++r) {
    check_tensor(outputs[r], "allgather output " + std::to_string(r));
    KILN_CHECK(outputs[r].dtype() == input.dtype() && outputs[r].numel() == input.numel(), "allgather: output ", r,
               " has ", outputs[r].numel(), " ", dtype_name(outputs[r].dtype()), " but the input has ", input.numel(),
               " ", dtype_name(input.dtype()));
  }
  return enqueue("allgather", header_for(OpKind::Allgather, input, ReduceOp::Sum), "",
                 [outputs, input](const Collective& c) {
                   std::vector<void*> out;
                   for (const Tensor& t : outputs) out.push_back(t.raw_data_ptr());
                   allgather_ring(c, out, input.raw_data_ptr());
                 });
}

std::shared_ptr<Work> ProcessGroupTCP::reduce_scatter(Tensor output, std::vector<Tensor> inputs, ReduceOp op) {
  check_tensor(output, "reduce_scatter");
  check_reduce_op(op, output.dtype(), "reduce_scatter");
  KILN_CHECK(static_cast<int>(inputs.size()) == size_, "reduce_scatter: expected ", size_,
             " input tensors (one per rank), got ", inputs.size());
  for (size_t r = 0; r < inputs.size(); ++r) {
    check_tensor(inputs[r], "reduce_scatter input " + std::to_string(r));
    KILN_CHECK(inputs[r].dtype() == output.dtype() && inputs[r].numel() == output.numel(), "reduce_scatter: input ",
               r, " has ", inputs[r].numel(), " ", dtype_name(inputs[r].dtype()), " but the output has ",
               output.numel(), " ", dtype_name(output.dtype()));
  }
  return enqueue("reduce_scatter", header_for(OpKind::ReduceScatter, output, op), "",
                 [output, inputs](const Collective& c) {
                   std::vector<const void*> in;
                   for (const Tensor& t : inputs) in.push_back(t.raw_data_ptr());
                   reduce_scatter_ring(c, output.raw_data_ptr(), in);
                 });
}

std::shared_ptr<Work> ProcessGroupTCP::barrier() {
  FrameHeader h = header_for(OpKind::Barrier, Tensor(), ReduceOp::Max);
  return enqueue("barrier", h, "", [](const Collective& c) { barrier_recursive_doubling(c); });
}

std::shared_ptr<Work> ProcessGroupTCP::send(Tensor tensor, int dst, int tag) {
  check_tensor(tensor, "send");
  check_peer(dst, true, "send");
  return p2p_->send(tensor, dst, tag);
}

std::shared_ptr<Work> ProcessGroupTCP::recv(Tensor tensor, int src, int tag) {
  check_tensor(tensor, "recv");
  check_peer(src, false, "recv");
  return p2p_->recv(tensor, src, tag);
}

}  // namespace kiln::distributed::tcp
