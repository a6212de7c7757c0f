// ProcessGroupNCCL: the communicators, the launcher every op goes through, and the Work that waits for it
// (see the header for the design). Only the NCCL and CUDA runtime C APIs: no kernels (avg is NCCL's ncclAvg).
#include "kiln/distributed/nccl/process_group_nccl.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <thread>

#include "kiln/tensor/cuda/cuda.h"
#include "kiln/tensor/cuda/cuda_check.h"
#include "kiln/tensor/cuda/stream.h"
#include "kiln/tensor/error.h"
#include "kiln/tensor/factories.h"

// Checks an NCCL call: a failure throws kiln::Error naming what kiln was doing, the call, NCCL's error and
// NCCL's last message ("allreduce #3 (nccl): ncclAllReduce(...) failed: invalid usage (...)").
#define KILN_NCCL_CHECK(expr, what)                                                                      \
  do {                                                                                                   \
    ncclResult_t kiln_nccl_ = (expr);                                                                    \
    if (kiln_nccl_ != ncclSuccess) [[unlikely]] {                                                        \
      ::kiln::detail::throw_error(::kiln::detail::concat(what, ": ", #expr, " failed: ",                 \
                                                         ncclGetErrorString(kiln_nccl_), " (",           \
                                                         ncclGetLastError(nullptr), ")"));               \
    }                                                                                                    \
  } while (0)

// An NCCL call that queues an op on a nonblocking communicator: ncclInProgress is no error (launch() waits for
// the call to be done before it records the op's event).
#define KILN_NCCL_ENQUEUE(expr, what)                                                                    \
  do {                                                                                                   \
    ncclResult_t kiln_nccl_q_ = (expr);                                                                  \
    if (kiln_nccl_q_ != ncclInProgress) KILN_NCCL_CHECK(kiln_nccl_q_, what);                             \
  } while (0)

// Nonblocking communicators (ncclConfig_t, ncclCommInitRankConfig, ncclCommFinalize) came with NCCL 2.14.
#if !defined(NCCL_VERSION_CODE) || NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "kiln's nccl backend needs NCCL 2.14 or later (nonblocking communicators); build with -DKILN_NCCL=OFF"
#endif

namespace kiln::distributed::nccl {

using Clock = std::chrono::steady_clock;

// One op's "done" event, shared by its Work and, until it is seen to have happened, by its DeviceComm.
struct OpEvent {
  cudaEvent_t event = nullptr;
  uint64_t index = 0;  // the op's place among its communicator's ops
  // NOTE: destroying an event still pending is allowed: CUDA frees it once it has happened.
  ~OpEvent() {
    if (event != nullptr) cudaEventDestroy(event);
  }
};

struct DeviceComm {
  int device = 0;
  ncclComm_t comm = nullptr;    // nullptr once aborted or destroyed
  cuda::Stream stream;          // the NCCL stream (kiln's streams live until the program ends)
  cudaEvent_t ready = nullptr;  // recorded on the caller's stream before each op, waited for by `stream`
  float* one_element = nullptr; // the barrier's operand
  std::mutex mutex;             // one thread at a time calls NCCL on `comm`; guards the members below
  std::string failure;          // the first error; every later op fails at once
  bool aborted = false;
  // Completion, recorded apart from `aborted`: after an abort the kernels return early and every event
  // happens, done or not, so an op counts as done only if its event happened before the abort. Ops finish in
  // issue order (one stream), so one count says which: ops [0, finished) are done.
  uint64_t launched = 0, finished = 0;
  std::deque<std::shared_ptr<OpEvent>> in_flight;  // launched, not yet seen done, in issue order
};

namespace {

// Moves `finished` past the ops whose events have happened. Only before an abort (see DeviceComm::finished).
// `c.mutex` must be held.
void note_finished_locked(DeviceComm& c) {
  if (c.aborted) return;
  while (!c.in_flight.empty() && cudaEventQuery(c.in_flight.front()->event) == cudaSuccess) {
    c.finished = c.in_flight.front()->index + 1;
    c.in_flight.pop_front();
  }
  cudaGetLastError();  // cudaErrorNotReady is not an error: leave nothing behind
}

// Aborts the communicator (once) and keeps the first failure; the ops done by then stay done. `c.mutex` must
// be held.
void abort_locked(DeviceComm& c, const std::string& message) {
  note_finished_locked(c);
  if (c.failure.empty()) c.failure = message;
  if (c.comm != nullptr) ncclCommAbort(c.comm);  // best effort: the error being reported is `message`
  c.comm = nullptr;
  c.aborted = true;
}

// Waits for a pending call on a nonblocking communicator (its creation, an op being queued, finalize) to be
// done: NCCL returns ncclInProgress from such calls and asks that ncclCommGetAsyncError be polled until it says
// ncclSuccess before the next call. Throws an NCCL error, or `late` at the deadline.
void await_comm(ncclComm_t comm, Clock::time_point deadline, const std::string& what, const std::string& late) {
  for (int polls = 0;; ++polls) {
    ncclResult_t state = ncclInProgress;
    KILN_NCCL_CHECK(ncclCommGetAsyncError(comm, &state), what);
    if (state == ncclSuccess) return;
    KILN_CHECK(state == ncclInProgress, what, ": NCCL reported an error: ", ncclGetErrorString(state), " (",
               ncclGetLastError(comm), ")");
    KILN_CHECK(Clock::now() < deadline, what, ": ", late);
    if (polls < 64) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

// What await_comm says when queueing an op outlasts the group's timeout.
std::string queue_late(int rank, Duration timeout) {
  return "rank " + std::to_string(rank) + ": NCCL had not queued the op after " + std::to_string(timeout.count()) +
         " ms (ProcessGroupOptions::timeout; a peer that never issues it?)";
}

class WorkNCCL : public Work {
 public:
  WorkNCCL(std::string name, int rank, std::shared_ptr<DeviceComm> comm, std::vector<Tensor> tensors,
           Duration timeout)
      : name_(std::move(name)), rank_(rank), comm_(std::move(comm)), tensors_(std::move(tensors)),
        timeout_(timeout), deadline_(Clock::now() + timeout), op_(std::make_shared<OpEvent>()) {
    KILN_CUDA_CHECK(cudaEventCreateWithFlags(&op_->event, cudaEventDisableTiming), name_);
  }

  const std::shared_ptr<OpEvent>& op() const { return op_; }
  void restart_deadline() { deadline_ = Clock::now() + timeout_; }

  void wait(std::optional<Duration> timeout) override {
    {
      cuda::DeviceGuard guard(comm_->device);
      KILN_CUDA_CHECK(cudaStreamWaitEvent(cuda::current_stream(comm_->device).handle, op_->event, 0),
                      name_ + ": wait");
    }
    const auto started = Clock::now();
    for (int polls = 0;; ++polls) {
      const cudaError_t state = cudaEventQuery(op_->event);
      if (state != cudaErrorNotReady) KILN_CUDA_CHECK(state, name_ + ": wait");
      cudaGetLastError();  // cudaErrorNotReady is not an error: leave nothing behind
      const auto now = Clock::now();
      {
        std::lock_guard<std::mutex> lock(comm_->mutex);
        // Done first: an op that finished stays finished whatever failed after it (a later op's timeout, the
        // group's destruction). An aborted communicator's kernels return early, so their events happen without
        // the op being done: after an abort only the count taken before it (DeviceComm::finished) says done.
        if (op_->index < comm_->finished) return;
        if (!comm_->aborted && state == cudaSuccess) return;
        KILN_CHECK(!comm_->aborted, name_, ": rank ", rank_, ": the nccl group failed: ", comm_->failure);
        ncclResult_t async = ncclSuccess;
        if (comm_->comm != nullptr) KILN_NCCL_CHECK(ncclCommGetAsyncError(comm_->comm, &async), name_ + ": wait");
        if (async != ncclSuccess && async != ncclInProgress) {
          abort_locked(*comm_, name_ + ": rank " + std::to_string(rank_) + ": NCCL reported an error: " +
                                   ncclGetErrorString(async) + " (" + ncclGetLastError(nullptr) + ")");
          detail::throw_error(comm_->failure);
        }
        if (now > deadline_) {
          abort_locked(*comm_, name_ + ": rank " + std::to_string(rank_) + ": not done after " +
                                   std::to_string(timeout_.count()) +
                                   " ms (ProcessGroupOptions::timeout); the communicator on cuda:" +
                                   std::to_string(comm_->device) + " was aborted");
          detail::throw_error(comm_->failure);
        }
      }
      KILN_CHECK(!timeout || now - started <= *timeout, "wait: ", name_, " (rank ", rank_, ") is still running after ",
                 timeout->count(), " ms (the op itself goes on until its own deadline)");
      // Short ops finish within a few polls; past those, stop spinning on a core the caller may need.
      if (polls < 64) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  bool is_completed() override {
    {
      std::lock_guard<std::mutex> lock(comm_->mutex);
      if (comm_->aborted) return true;  // wait() returns (done before the abort) or throws the failure
    }
    const cudaError_t state = cudaEventQuery(op_->event);
    cudaGetLastError();
    return state != cudaErrorNotReady;  // an error is "completed" too: wait() reports it
  }

 private:
  std::string name_;
  int rank_;
  std::shared_ptr<DeviceComm> comm_;
  std::vector<Tensor> tensors_;  // alive until the op is done, whatever the caller drops
  Duration timeout_;
  Clock::time_point deadline_;
  std::shared_ptr<OpEvent> op_;  // its event happens when the op is done (or the communicator was aborted)
};

ncclDataType_t nccl_dtype(DType dtype, const std::string& what) {
  switch (dtype) {
    case DType::Float32: return ncclFloat32;
    case DType::Float64: return ncclFloat64;
    case DType::Float16: return ncclFloat16;
    case DType::BFloat16: return ncclBfloat16;
    case DType::Int32: return ncclInt32;
    case DType::Int64: return ncclInt64;
    case DType::UInt8: return ncclUint8;
    case DType::Bool: return ncclUint8;  // bytes 0 and 1; reductions map to max / min (nccl_op)
  }
  KILN_CHECK(false, what, ": the nccl backend has no NCCL type for ", dtype_name(dtype));
  return ncclUint8;
}

// The tcp backend's semantics (reduce_kernels.h): avg on floating dtypes only; on bool, sum and max are "or",
// product and min are "and".
ncclRedOp_t nccl_op(ReduceOp op, DType dtype, const std::string& what) {
  KILN_CHECK(op != ReduceOp::Avg || is_floating(dtype), what, ": avg needs a floating dtype, not ", dtype_name(dtype),
             " (use sum and divide)");
  if (dtype == kBool) return op == ReduceOp::Sum || op == ReduceOp::Max ? ncclMax : ncclMin;
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Min: return ncclMin;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Product: return ncclProd;
  }
  return ncclSum;
}

void check_tensor(const Tensor& t, const std::string& what) {
  KILN_CHECK(t.defined(), what, ": the tensor is undefined");
  KILN_CHECK(t.is_cuda(), what, ": the nccl backend needs CUDA tensors, got one on ", t.device().str(),
             " (use the tcp, gloo or mpi backend for CPU tensors)");
  KILN_CHECK(t.is_contiguous(), what, ": the nccl backend needs contiguous tensors (call .contiguous() first)");
}


// Checks `ts` (size() tensors like `like`, one call's outputs or inputs) and returns whether they lie back to
// back in memory, in rank order: then NCCL reads or writes them as one buffer.
bool check_parts(const std::vector<Tensor>& ts, const Tensor& like, int size, const std::string& what,
                 const char* part) {
  KILN_CHECK(static_cast<int>(ts.size()) == size, what, ": expected ", size, " ", part, " tensors (one per rank), got ",
             ts.size());
  bool back_to_back = true;
  for (size_t r = 0; r < ts.size(); ++r) {
    check_tensor(ts[r], what + " " + part + " " + std::to_string(r));
    KILN_CHECK(ts[r].dtype() == like.dtype() && ts[r].numel() == like.numel(), what, ": ", part, " ", r, " has ",
               ts[r].numel(), " ", dtype_name(ts[r].dtype()), " but expected ", like.numel(), " ",
               dtype_name(like.dtype()));
    KILN_CHECK(ts[r].device() == like.device(), what, ": ", part, " ", r, " is on ", ts[r].device().str(),
               ", not on ", like.device().str(), " with the others");
    back_to_back = back_to_back && static_cast<char*>(ts[r].raw_data_ptr()) ==
                                       static_cast<char*>(ts[0].raw_data_ptr()) + r * like.nbytes();
  }
  return back_to_back;
}

// Queues one op on c's stream after the caller's current work, and returns its Work. `tensors`: every tensor
// the op touches (kept alive by the Work); body: the NCCL calls. A failure while queueing (an NCCL call that
// returns an error, a CUDA call that fails) leaves the communicator in a state kiln cannot know: it fails the
// group as a timeout does (the communicator is aborted, every later op fails naming this first error).
std::shared_ptr<Work> launch(const std::shared_ptr<DeviceComm>& c, const std::string& name, int rank,
                             Duration timeout, std::vector<Tensor> tensors,
                             const std::function<void(ncclComm_t, cudaStream_t)>& body) {
  std::lock_guard<std::mutex> lock(c->mutex);
  KILN_CHECK(!c->aborted, name, ": rank ", rank, ": the nccl group failed earlier: ", c->failure);
  cuda::DeviceGuard guard(c->device);
  for (const Tensor& t : tensors) {
    if (t.nbytes() == 0) continue;
    try {
      cuda::record_stream(t, c->stream);
    } catch (const Error&) {
      // Memory from outside kiln's allocator: nothing of kiln's can reuse it early.
    }
  }
  auto work = std::make_shared<WorkNCCL>(name, rank, c, std::move(tensors), timeout);
  note_finished_locked(*c);  // keeps in_flight short
  try {
    KILN_CUDA_CHECK(cudaEventRecord(c->ready, cuda::current_stream(c->device).handle), name);
    KILN_CUDA_CHECK(cudaStreamWaitEvent(c->stream.handle, c->ready, 0), name);
    body(c->comm, c->stream.handle);
    // The op's kernels are on the stream only once NCCL is done queueing them (the first op on a communicator
    // also connects to the peers): the event must come after them.
    await_comm(c->comm, Clock::now() + timeout, name, queue_late(rank, timeout));
    work->restart_deadline();  // the op's own deadline counts from when it is queued
    work->op()->index = c->launched;
    KILN_CUDA_CHECK(cudaEventRecord(work->op()->event, c->stream.handle), name);
  } catch (const std::exception& e) {
    abort_locked(*c, std::string(e.what()) + " (rank " + std::to_string(rank) + "; the communicator on cuda:" +
                         std::to_string(c->device) + " was aborted)");
    throw;
  }
  ++c->launched;
  c->in_flight.push_back(work->op());
  return work;
}

// Destroys a communicator whose ops are done within `timeout`, and aborts it otherwise. Never throws.
void close_comm(DeviceComm& c, Duration timeout) {
  std::lock_guard<std::mutex> lock(c.mutex);
  cudaSetDevice(c.device);
  const auto deadline = Clock::now() + timeout;
  cudaError_t state = cudaSuccess;
  // A communicator that never came up (its creation failed) has no stream of its own to wait for.
  while (c.comm != nullptr && (state = cudaStreamQuery(c.stream.handle)) == cudaErrorNotReady &&
         Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  cudaGetLastError();
  note_finished_locked(c);  // the ops done by now stay done for their Works
  if (c.comm != nullptr) {
    bool finalized = false;
    if (state == cudaSuccess) {
      // A nonblocking communicator is finalized (its pending work flushed, which may take a while) before
      // it is destroyed; one that does not finalize in time is aborted.
      try {
        KILN_NCCL_ENQUEUE(ncclCommFinalize(c.comm), "nccl: finalize");
        await_comm(c.comm, std::max(deadline, Clock::now() + std::chrono::seconds(1)), "nccl: finalize",
                   "not finalized in time");
        finalized = true;
      } catch (const std::exception&) {
      }
    }
    if (finalized) ncclCommDestroy(c.comm);
    else abort_locked(c, state == cudaSuccess ? "the process group was destroyed and its communicator did not finalize"
                                              : "the process group was destroyed while an op was still running");
  }
  c.comm = nullptr;
  if (!c.aborted) c.aborted = true, c.failure = "the process group was destroyed";
  cudaFree(c.one_element);
  if (c.ready != nullptr) cudaEventDestroy(c.ready);
  c.one_element = nullptr, c.ready = nullptr;
}

}  // namespace

ProcessGroupNCCL::ProcessGroupNCCL(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options)
    : ProcessGroup(rank, size), store_(std::move(store)), options_(std::move(options)) {
  KILN_CHECK(store_ != nullptr, "ProcessGroupNCCL: no store");
  KILN_CHECK(!options_.name.empty(), "ProcessGroupNCCL: the group needs a name");
  KILN_CHECK(options_.timeout.count() > 0, "ProcessGroupNCCL: timeout must be positive, got ",
             options_.timeout.count(), " ms");
  // Each rank counts the groups of this name it made: the n-th group of every rank is the same group.
  const int64_t n = store_->add(options_.name + "/nccl/incarnation/" + std::to_string(rank), 1);
  keys_ = options_.name + "/nccl/" + std::to_string(n);
}

ProcessGroupNCCL::~ProcessGroupNCCL() {
  if (comms_.empty()) return;  // never touched CUDA
  int previous = 0;
  const bool restore = cudaGetDevice(&previous) == cudaSuccess;
  for (auto& c : comms_) close_comm(*c, options_.timeout);
  if (restore) cudaSetDevice(previous);
}

uint64_t ProcessGroupNCCL::draw_seq() {
  std::lock_guard<std::mutex> lock(mutex_);
  return next_seq_++;
}

std::shared_ptr<DeviceComm> ProcessGroupNCCL::comm_for(int device) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& c : comms_) {
    if (c->device == device) return c;
  }
  const std::string what = "nccl: rank " + std::to_string(rank_) + " making its communicator on cuda:" +
                           std::to_string(device);
  const std::string key = keys_ + "/comm/" + std::to_string(comms_.size());
  cuda::DeviceGuard guard(device);
  ncclUniqueId id;
  if (rank_ == 0) {
    KILN_NCCL_CHECK(ncclGetUniqueId(&id), what);
    const auto* bytes = reinterpret_cast<const uint8_t*>(&id);
    store_->set(key, Bytes(bytes, bytes + sizeof id));
  } else {
    const Bytes bytes = store_->get(key);  // bounded by the store's timeout
    KILN_CHECK(bytes.size() == sizeof id, what, ": the store's ", key, " holds ", bytes.size(),
               " bytes, not an ncclUniqueId (", sizeof id, " bytes)");
    std::memcpy(&id, bytes.data(), sizeof id);
  }
  auto c = std::make_shared<DeviceComm>();
  c->device = device;
  // Nonblocking, so that creation (which waits for every rank) and every later call are bounded by the
  // group's timeout instead of blocking inside NCCL.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  try {
    KILN_NCCL_ENQUEUE(ncclCommInitRankConfig(&c->comm, size_, id, rank_, &config), what);
    await_comm(c->comm, Clock::now() + options_.timeout, what,
               "not every rank of the " + std::to_string(size_) + " joined within " +
                   std::to_string(options_.timeout.count()) + " ms (ProcessGroupOptions::timeout)");
  } catch (const std::exception& e) {
    if (c->comm != nullptr) ncclCommAbort(c->comm);
    c->comm = nullptr;
    // The device's communicator stays failed: every later op on it fails at once, naming this error, rather
    // than trying again under the same store key, where a peer could still read the last attempt's id.
    c->aborted = true;
    c->failure = e.what();
    comms_.push_back(c);
    throw;
  }
  try {
    c->stream = cuda::Stream::create(device);
    KILN_CUDA_CHECK(cudaEventCreateWithFlags(&c->ready, cudaEventDisableTiming), what);
    KILN_CUDA_CHECK(cudaMalloc(&c->one_element, sizeof(float)), what);
    KILN_CUDA_CHECK(cudaMemset(c->one_element, 0, sizeof(float)), what);
  } catch (...) {
    close_comm(*c, Duration(0));
    throw;
  }
  comms_.push_back(c);
  return c;
}

std::shared_ptr<Work> ProcessGroupNCCL::allreduce(Tensor tensor, ReduceOp op) {
  check_tensor(tensor, "allreduce (nccl)");
  const ncclDataType_t type = nccl_dtype(tensor.dtype(), "allreduce");
  const ncclRedOp_t red = nccl_op(op, tensor.dtype(), "allreduce (nccl)");
  auto c = comm_for(tensor.device().index);
  const std::string name = "allreduce #" + std::to_string(draw_seq());
  return launch(c, name, rank_, options_.timeout, {tensor}, [&](ncclComm_t comm, cudaStream_t s) {
    void* p = tensor.raw_data_ptr();
    KILN_NCCL_ENQUEUE(ncclAllReduce(p, p, static_cast<size_t>(tensor.numel()), type, red, comm, s), name);
  });
}

std::shared_ptr<Work> ProcessGroupNCCL::broadcast(Tensor tensor, int root) {
  check_tensor(tensor, "broadcast (nccl)");
  check_rank_in_group(root, "broadcast (nccl)");
  const ncclDataType_t type = nccl_dtype(tensor.dtype(), "broadcast");
  auto c = comm_for(tensor.device().index);
  const std::string name = "broadcast #" + std::to_string(draw_seq()) + " from rank " + std::to_string(root);
  return launch(c, name, rank_, options_.timeout, {tensor}, [&](ncclComm_t comm, cudaStream_t s) {
    void* p = tensor.raw_data_ptr();
    KILN_NCCL_ENQUEUE(ncclBroadcast(p, p, static_cast<size_t>(tensor.numel()), type, root, comm, s), name);
  });
}

std::shared_ptr<Work> ProcessGroupNCCL::reduce(Tensor tensor, int root, ReduceOp op) {
  check_tensor(tensor, "reduce (nccl)");
  check_rank_in_group(root, "reduce (nccl)");
  const ncclDataType_t type = nccl_dtype(tensor.dtype(), "reduce");
  const ncclRedOp_t red = nccl_op(op, tensor.dtype(), "reduce (nccl)");
  auto c = comm_for(tensor.device().index);
  const std::string name = "reduce #" + std::to_string(draw_seq()) + " to rank " + std::to_string(root);
  // NCCL writes the result on root only: the other ranks' tensors stay as they were.
  return launch(c, name, rank_, options_.timeout, {tensor}, [&](ncclComm_t comm, cudaStream_t s) {
    void* p = tensor.raw_data_ptr();
    KILN_NCCL_ENQUEUE(ncclReduce(p, p, static_cast<size_t>(tensor.numel()), type, red, root, comm, s), name);
  });
}

std::shared_ptr<Work> ProcessGroupNCCL::allgather(std::vector<Tensor> outputs, Tensor input) {
  check_tensor(input, "allgather (nccl)");
  const bool direct = check_parts(outputs, input, size_, "allgather (nccl)", "output");
  const ncclDataType_t type = nccl_dtype(input.dtype(), "allgather");
  const int device = input.device().index;
  auto c = comm_for(device);
  const size_t nbytes = input.nbytes();
  // staging: (size() * numel,) on the input's device, when the outputs are not one buffer already
  Tensor staging = direct ? outputs[0] : empty({size_ * input.numel()}, TensorOptions(input.dtype()).device(input.device()));
  std::vector<Tensor> touched = outputs;
  touched.push_back(input);
  touched.push_back(staging);
  const std::string name = "allgather #" + std::to_string(draw_seq());
  return launch(c, name, rank_, options_.timeout, std::move(touched), [&](ncclComm_t comm, cudaStream_t s) {
    char* all = static_cast<char*>(staging.raw_data_ptr());
    KILN_NCCL_ENQUEUE(ncclAllGather(input.raw_data_ptr(), all, static_cast<size_t>(input.numel()), type, comm, s), name);
    if (direct) return;
    // The copies out of the staging buffer must follow NCCL's kernels on the stream: wait until they are queued.
    await_comm(comm, Clock::now() + options_.timeout, name, queue_late(rank_, options_.timeout));
    for (size_t r = 0; r < outputs.size(); ++r) {
      KILN_CUDA_CHECK(cudaMemcpyAsync(outputs[r].raw_data_ptr(), all + r * nbytes, nbytes, cudaMemcpyDeviceToDevice, s),
                      name);
    }
  });
}

std::shared_ptr<Work> ProcessGroupNCCL::reduce_scatter(Tensor output, std::vector<Tensor> inputs, ReduceOp op) {
  check_tensor(output, "reduce_scatter (nccl)");
  const bool direct = check_parts(inputs, output, size_, "reduce_scatter (nccl)", "input");
  const ncclDataType_t type = nccl_dtype(output.dtype(), "reduce_scatter");
  const ncclRedOp_t red = nccl_op(op, output.dtype(), "reduce_scatter (nccl)");
  auto c = comm_for(output.device().index);
  const size_t nbytes = output.nbytes();
  // staging: (size() * numel,) on the output's device, when the inputs are not one buffer already
  Tensor staging = direct ? inputs[0] : empty({size_ * output.numel()}, TensorOptions(output.dtype()).device(output.device()));
  std::vector<Tensor> touched = inputs;
  touched.push_back(output);
  touched.push_back(staging);
  const std::string name = "reduce_scatter #" + std::to_string(draw_seq());
  return launch(c, name, rank_, options_.timeout, std::move(touched), [&](ncclComm_t comm, cudaStream_t s) {
    char* all = static_cast<char*>(staging.raw_data_ptr());
    if (!direct) {
      for (size_t r = 0; r < inputs.size(); ++r) {
        KILN_CUDA_CHECK(cudaMemcpyAsync(all + r * nbytes, inputs[r].raw_data_ptr(), nbytes, cudaMemcpyDeviceToDevice, s),
                        name);
      }
    }
    KILN_NCCL_ENQUEUE(ncclReduceScatter(all, output.raw_data_ptr(), static_cast<size_t>(output.numel()), type, red, comm, s),
                    name);
  });
}

std::shared_ptr<Work> ProcessGroupNCCL::barrier() {
  int device;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    device = comms_.empty() ? -1 : comms_.back()->device;
  }
  if (device < 0) device = cuda::current_device();
  auto c = comm_for(device);
  const std::string name = "barrier #" + std::to_string(draw_seq());
  return launch(c, name, rank_, options_.timeout, {}, [&](ncclComm_t comm, cudaStream_t s) {
    KILN_NCCL_ENQUEUE(ncclAllReduce(c->one_element, c->one_element, 1, ncclFloat32, ncclSum, comm, s), name);
  });
}

std::shared_ptr<Work> ProcessGroupNCCL::send(Tensor tensor, int dst, int tag) {
  check_tensor(tensor, "send (nccl)");
  KILN_CHECK(tag == 0, "send (nccl): NCCL has no tags, so the nccl backend takes tag 0 only (got ", tag,
             "); sends to one rank are received in the order they were issued");
  check_peer(dst, true, "send (nccl)");
  const ncclDataType_t type = nccl_dtype(tensor.dtype(), "send");
  auto c = comm_for(tensor.device().index);
  const std::string name = "send #" + std::to_string(draw_seq()) + " to rank " + std::to_string(dst);
  return launch(c, name, rank_, options_.timeout, {tensor}, [&](ncclComm_t comm, cudaStream_t s) {
    KILN_NCCL_ENQUEUE(ncclSend(tensor.raw_data_ptr(), static_cast<size_t>(tensor.numel()), type, dst, comm, s), name);
  });
}

std::shared_ptr<Work> ProcessGroupNCCL::recv(Tensor tensor, int src, int tag) {
  check_tensor(tensor, "recv (nccl)");
  KILN_CHECK(tag == 0, "recv (nccl): NCCL has no tags, so the nccl backend takes tag 0 only (got ", tag,
             "); a recv matches the peer's sends in the order they were issued");
  check_peer(src, false, "recv (nccl)");
  const ncclDataType_t type = nccl_dtype(tensor.dtype(), "recv");
  auto c = comm_for(tensor.device().index);
  const std::string name = "recv #" + std::to_string(draw_seq()) + " from rank " + std::to_string(src);
  return launch(c, name, rank_, options_.timeout, {tensor}, [&](ncclComm_t comm, cudaStream_t s) {
    KILN_NCCL_ENQUEUE(ncclRecv(tensor.raw_data_ptr(), static_cast<size_t>(tensor.numel()), type, src, comm, s), name);
  });
}

}  // namespace kiln::distributed::nccl
