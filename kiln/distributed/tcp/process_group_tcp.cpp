// ProcessGroupTCP: argument checks, the op queue and its worker thread, failure propagation. See the header.
#include "kiln/distributed/tcp/process_group_tcp.h"

#include "kiln/distributed/tcp/reduce_kernels.h"
#include "kiln/tensor/error.h"

namespace kiln::distributed::tcp {

namespace {

// A Work completed by the worker thread. A failure is kept as its message and wait() throws a fresh kiln::Error
// from it in the waiting thread: no exception object is shared between the two threads.
class WorkTCP : public Work {
 public:
  explicit WorkTCP(std::string name) : name_(std::move(name)) {}

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

  void finish() { complete(false, {}); }
  void fail(std::string message) { complete(true, std::move(message)); }

 private:
  void complete(bool failed, std::string message) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true, failed_ = failed, error_ = std::move(message);
    }
    cv_.notify_all();
  }

  std::string name_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false, failed_ = false;
  std::string error_;
};

void check_tensor(const Tensor& t, const std::string& what) {
  KILN_CHECK(t.defined(), what, ": the tensor is undefined");
  KILN_CHECK(t.device().is_cpu(), what, ": the tcp backend needs CPU tensors, got one on ", t.device().str());
  KILN_CHECK(t.is_contiguous(), what, ": the tensor must be contiguous (call .contiguous() first)");
}

void check_rank(int r, int size, const std::string& what) {
  KILN_CHECK(r >= 0 && r < size, what, ": rank ", r, " is not in a group of size ", size);
}

}  // namespace

struct ProcessGroupTCP::Task {
  std::string name;
  FrameHeader header;
  std::function<void(const Collective&)> body;
  std::shared_ptr<WorkTCP> work;
};

ProcessGroupTCP::ProcessGroupTCP(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options,
                                 std::string host)
    : ProcessGroup(rank, size), store_(std::move(store)), options_(std::move(options)) {
  KILN_CHECK(store_ != nullptr, "ProcessGroupTCP: no store");
  KILN_CHECK(!options_.name.empty(), "ProcessGroupTCP: the group needs a name");
  KILN_CHECK(options_.timeout.count() > 0, "ProcessGroupTCP: timeout must be positive, got ",
             options_.timeout.count(), " ms");
  mesh_ = Mesh::connect(*store_, options_.name, rank, size, host, Clock::now() + options_.timeout);
  send_seq_.assign(static_cast<size_t>(size), 0);
  recv_seq_.assign(static_cast<size_t>(size), 0);
  worker_ = std::thread([this] { worker_loop(); });
}

ProcessGroupTCP::~ProcessGroupTCP() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
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
                                               std::function<void(const Collective&)> body, int send_peer,
                                               int recv_peer) {
  std::shared_ptr<WorkTCP> work;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Sequence numbers are drawn in issue order: collectives count per group, point to point per peer and
    // direction (a send is matched by the peer's recv, not by the group's collectives).
    header.seq = send_peer >= 0 ? send_seq_[send_peer]++ : recv_peer >= 0 ? recv_seq_[recv_peer]++ : next_seq_++;
    std::string name = std::string(op) + " #" + std::to_string(header.seq) + suffix;
    KILN_CHECK(!stop_, name, ": the process group is shutting down");
    work = std::make_shared<WorkTCP>(name);
    queue_.push_back(std::make_unique<Task>(Task{std::move(name), header, std::move(body), work}));
  }
  cv_.notify_all();
  return work;
}

void ProcessGroupTCP::worker_loop() {
  for (;;) {
    std::unique_ptr<Task> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to run
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    run_task(*task);
  }
}

void ProcessGroupTCP::check_remote_failure(const std::string& op, Clock::time_point& last_read) {
  const auto now = Clock::now();
  if (now - last_read < std::chrono::milliseconds(500)) return;
  last_read = now;
  if (!store_->check({error_key()})) return;
  const std::string what = store_->get_string(error_key());
  KILN_CHECK(false, op, ": rank ", rank_, " stopped because ", what);
}

void ProcessGroupTCP::run_task(Task& task) {
  if (!failure_.empty()) {
    task.work->fail(task.name + ": rank " + std::to_string(rank_) + ": the group failed earlier: " + failure_);
    return;
  }
  OpContext ctx;
  ctx.name = task.name;
  ctx.timeout = options_.timeout;
  ctx.deadline = Clock::now() + options_.timeout;  // from when the op starts, not from when it was queued
  auto last_read = Clock::now() - std::chrono::seconds(1);
  bool remote = false;
  ctx.check = [&] {
    try {
      check_remote_failure(task.name, last_read);
    } catch (const Error&) {
      remote = true;
      throw;
    }
  };
  try {
    const Collective c{*mesh_, ctx, task.header, std::max<size_t>(options_.segment_bytes, 1)};
    task.body(c);
    task.work->finish();
  } catch (const std::exception& e) {
    std::string message = e.what();
    try {
      if (!remote && store_->check({error_key()})) {
        // A peer that failed first closed its sockets: its report (in the store before it closed them) is the
        // cause, what this rank saw (EOF) only the consequence.
        message = task.name + ": rank " + std::to_string(rank_) + " stopped because " +
                  store_->get_string(error_key()) + " (here: " + e.what() + ")";
        remote = true;
      }
      if (!remote) {
        const std::string report = "rank " + std::to_string(rank_) + " failed: " + e.what();
        store_->compare_set(error_key(), {}, Bytes(report.begin(), report.end()));
      }
    } catch (const std::exception&) {
      // The store is unreachable too: this rank's own error is all there is to report.
    }
    mesh_->close_all();
    failure_ = message;
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
  check_rank(root, size_, "broadcast");
  return enqueue("broadcast", header_for(OpKind::Broadcast, tensor, ReduceOp::Sum), " from rank " + std::to_string(root),
                 [tensor, root](const Collective& c) { broadcast_chain(c, tensor.raw_data_ptr(), root); });
}

std::shared_ptr<Work> ProcessGroupTCP::reduce(Tensor tensor, int root, ReduceOp op) {
  check_tensor(tensor, "reduce");
  check_rank(root, size_, "reduce");
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
  check_rank(dst, size_, "send");
  KILN_CHECK(dst != rank_, "send: rank ", rank_, " cannot send to itself");
  FrameHeader h = header_for(OpKind::SendRecv, tensor, ReduceOp::Sum);
  h.tag = tag;
  return enqueue("send", h, " to rank " + std::to_string(dst) + " (tag " + std::to_string(tag) + ")",
                 [tensor, dst](const Collective& c) { send_to(c, tensor.raw_data_ptr(), dst); }, dst, -1);
}

std::shared_ptr<Work> ProcessGroupTCP::recv(Tensor tensor, int src, int tag) {
  check_tensor(tensor, "recv");
  check_rank(src, size_, "recv");
  KILN_CHECK(src != rank_, "recv: rank ", rank_, " cannot receive from itself");
  FrameHeader h = header_for(OpKind::SendRecv, tensor, ReduceOp::Sum);
  h.tag = tag;
  return enqueue("recv", h, " from rank " + std::to_string(src) + " (tag " + std::to_string(tag) + ")",
                 [tensor, src](const Collective& c) { recv_from(c, tensor.raw_data_ptr(), src); }, -1, src);
}

}  // namespace kiln::distributed::tcp
