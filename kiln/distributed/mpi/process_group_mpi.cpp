// ProcessGroupMPI: MPI's initialization, the process-wide lock, polling with a deadline, and each op as
// non-blocking MPI calls. See the header.
#include "kiln/distributed/mpi/process_group_mpi.h"

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "kiln/distributed/tcp/reduce_kernels.h"
#include "kiln/tensor/error.h"

namespace kiln::distributed::mpi {

namespace {

// MPI as this process has it: initialized once, by kiln or before it.
struct Runtime {
  int provided = MPI_THREAD_SINGLE;
  bool serialize = true;  // less than MPI_THREAD_MULTIPLE: every call under `mutex`
  std::mutex mutex;
  // Some group gave up on a request MPI may still be working on: MPI_Finalize could wait on it forever (the
  // peer that never answered), so kiln's exit handler skips it.
  std::atomic<bool> abandoned{false};
};

Runtime& runtime() {
  static Runtime* r = [] {
    auto* rt = new Runtime;
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) {
      MPI_Query_thread(&rt->provided);
    } else {
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &rt->provided);
      // Finalized at exit only because kiln initialized it; a program that called MPI_Init finalizes itself.
      // Not after an abandoned request (Runtime::abandoned): the process exits without finalizing instead.
      std::atexit([] {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized && !runtime().abandoned.load()) MPI_Finalize();
      });
    }
    rt->serialize = rt->provided < MPI_THREAD_MULTIPLE;
    return rt;
  }();
  return *r;
}

// Held around every MPI call when the library is not MPI_THREAD_MULTIPLE.
std::unique_lock<std::mutex> mpi_lock() {
  Runtime& rt = runtime();
  return rt.serialize ? std::unique_lock<std::mutex>(rt.mutex) : std::unique_lock<std::mutex>();
}

// Whether MPI was finalized (the program's own MPI_Finalize, or kiln's at exit). MPI_Finalized is one of the
// few calls MPI allows at any time, from any thread.
bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

// An op's body about to call MPI: after MPI_Finalize every MPI call is erroneous (most libraries crash), so the
// op fails here instead (a group still running or destroying queued ops at exit, say).
void check_not_finalized(const char* what) {
  KILN_CHECK(!mpi_finalized(), what, ": MPI was finalized already (MPI_Finalize ran, by the program or at exit): "
             "the mpi backend cannot call MPI any more; finish or destroy the group before MPI_Finalize");
}

// The buffers and tensors of requests that were given up on while MPI may still read or write them. Never
// freed, on purpose: MPI cannot cancel a collective, so releasing this memory could let MPI write into memory
// that was handed out again (a use after free in another op, or in the caller's next tensors). A leak, bounded
// by the ops that timed out, and a group that timed out is not usable again anyway.
struct Abandoned {
  std::mutex mutex;
  std::vector<Tensor> tensors;
  std::vector<std::vector<uint8_t>> buffers;
};

Abandoned& abandoned_memory() {
  static auto* a = new Abandoned;  // never destroyed: MPI may still use it while static destructors run
  return *a;
}

void check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  KILN_CHECK(false, call, " failed: ", std::string(text, static_cast<size_t>(len)));
}

int mpi_count(size_t n, const std::string& what) {
  KILN_CHECK(n <= static_cast<size_t>(INT_MAX), what, ": ", n, " elements or bytes exceed MPI's int counts (at most ",
             INT_MAX, ")");
  return static_cast<int>(n);
}

MPI_Datatype reduction_type(DType dtype, const std::string& what) {
  switch (dtype) {
    case DType::Float32: return MPI_FLOAT;
    case DType::Float64: return MPI_DOUBLE;
    case DType::Int32: return MPI_INT32_T;
    case DType::Int64: return MPI_INT64_T;
    case DType::UInt8: return MPI_UINT8_T;
    case DType::Bool: return MPI_C_BOOL;
    default: break;
  }
  KILN_CHECK(false, "mpi backend: ", what, " of ", dtype_name(dtype),
             " is not supported (MPI has no 16-bit floating types; use float32, or the tcp or gloo backend)");
  return MPI_DATATYPE_NULL;
}

MPI_Op reduction_op(DType dtype, ReduceOp op) {
  if (dtype == DType::Bool) return op == ReduceOp::Sum || op == ReduceOp::Max ? MPI_LOR : MPI_LAND;
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return MPI_SUM;  // then divided
    case ReduceOp::Product: return MPI_PROD;
    case ReduceOp::Min: return MPI_MIN;
    case ReduceOp::Max: return MPI_MAX;
  }
  return MPI_SUM;
}

// The arguments of a reduction, checked on the caller's thread.
void check_reduction(const Tensor& t, ReduceOp op, const char* what) {
  check_cpu_tensor(t, "mpi", what);
  tcp::check_reduce_op(op, t.dtype(), what);
  reduction_type(t.dtype(), what);
  mpi_count(static_cast<size_t>(t.numel()), what);
}

}  // namespace

struct ProcessGroupMPI::Comm {
  MPI_Comm comm = MPI_COMM_NULL;
  // An op ran past its deadline: MPI may still use the communicator. Read by the destructor's thread, written
  // by the worker's or the completer's.
  std::atomic<bool> abandoned{false};
  int rank = 0;

  // Polls `request` until it completes or `timeout` passes. The first polls only yield (a small op completes in
  // microseconds); then the thread sleeps between polls, so a long wait does not take a core from the ranks.
  // `tensors` and `buffer` (may be null): what the request reads or writes. When the wait gives up, the request
  // is still live in MPI: they move to abandoned_memory(), never freed (see there), and `*buffer` is left empty.
  MPI_Status wait(MPI_Request& request, Duration timeout, std::vector<Tensor> tensors,
                  std::vector<uint8_t>* buffer = nullptr) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    MPI_Status status;
    for (int polls = 0;; ++polls) {
      int done = 0;
      {
        auto lock = mpi_lock();
        check_not_finalized("MPI_Test");
        check_mpi(MPI_Test(&request, &done, &status), "MPI_Test");
      }
      if (done) return status;
      if (std::chrono::steady_clock::now() > deadline) {
        {
          Abandoned& a = abandoned_memory();
          std::lock_guard<std::mutex> lock(a.mutex);
          for (Tensor& t : tensors) a.tensors.push_back(std::move(t));
          if (buffer != nullptr) a.buffers.push_back(std::move(*buffer));
        }
        abandoned = true;
        runtime().abandoned = true;
        KILN_CHECK(false, "did not finish within ", timeout.count(),
                   " ms (a rank died, stopped, or called something else). MPI cannot cancel a collective: this "
                   "group is unusable now");
      }
      if (polls < 200) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(polls < 2000 ? 20 : 200));
    }
  }
};

ProcessGroupMPI::ProcessGroupMPI(int rank, int size, ProcessGroupOptions options)
    : ProcessGroup(rank, size), options_(std::move(options)) {
  KILN_CHECK(options_.timeout.count() > 0, "ProcessGroupMPI: timeout must be positive, got ", options_.timeout.count(),
             " ms");
  const Runtime& rt = runtime();
  // MPI_THREAD_FUNNELED or SINGLE would allow only the thread that initialized MPI to call it, and kiln calls
  // MPI from the group's worker threads.
  KILN_CHECK(rt.provided >= MPI_THREAD_SERIALIZED,
             "ProcessGroupMPI: MPI runs at thread level ", rt.provided, " (MPI_THREAD_SINGLE is ", MPI_THREAD_SINGLE,
             ", MPI_THREAD_FUNNELED ", MPI_THREAD_FUNNELED, "), but kiln calls MPI from its own threads and needs "
             "MPI_THREAD_SERIALIZED or better: initialize MPI with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...) "
             "(or MPI_THREAD_SERIALIZED), not MPI_Init, or let kiln initialize it");
  KILN_CHECK(!mpi_finalized(), "ProcessGroupMPI: MPI was finalized already; a group must be made before "
             "MPI_Finalize");
  int world_rank = 0, world_size = 0;
  comm_ = std::make_shared<Comm>();
  comm_->rank = rank;
  {
    auto lock = mpi_lock();
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  }
  KILN_CHECK(world_rank == rank && world_size == size, "ProcessGroupMPI: asked for rank ", rank, " of ", size,
             " but MPI_COMM_WORLD has this process as rank ", world_rank, " of ", world_size,
             ": start every rank under mpirun (mpirun -np ", size,
             " ...); kiln launch and torchrun start processes MPI does not know of");
  {
    auto lock = mpi_lock();
    check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm_->comm), "MPI_Comm_dup");
    check_mpi(MPI_Comm_set_errhandler(comm_->comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  }
  worker_ = std::make_unique<OpWorker>("mpi", rank);
}

ProcessGroupMPI::~ProcessGroupMPI() {
  worker_->stop();
  int finalized = 0;
  auto lock = mpi_lock();
  MPI_Finalized(&finalized);
  if (!finalized && !comm_->abandoned) MPI_Comm_free(&comm_->comm);
}

std::shared_ptr<Work> ProcessGroupMPI::allreduce(Tensor tensor, ReduceOp op) {
  check_reduction(tensor, op, "allreduce");
  return worker_->enqueue("allreduce", "", "", [this, tensor, op](const std::string& name) -> Completion {
    MPI_Request request;
    {
      auto lock = mpi_lock();
      check_not_finalized("MPI_Iallreduce");
      check_mpi(MPI_Iallreduce(MPI_IN_PLACE, tensor.raw_data_ptr(), static_cast<int>(tensor.numel()),
                               reduction_type(tensor.dtype(), name), reduction_op(tensor.dtype(), op), comm_->comm,
                               &request),
                "MPI_Iallreduce");
    }
    comm_->wait(request, options_.timeout, {tensor});
    if (op == ReduceOp::Avg) tcp::divide_by(tensor.raw_data_ptr(), tensor.numel(), tensor.dtype(), size_);
    return {};
  });
}

std::shared_ptr<Work> ProcessGroupMPI::broadcast(Tensor tensor, int root) {
  check_cpu_tensor(tensor, "mpi", "broadcast");
  check_rank_in_group(root, "broadcast");
  mpi_count(tensor.nbytes(), "broadcast");
  return worker_->enqueue("broadcast", "", " from rank " + std::to_string(root),
                          [this, tensor, root](const std::string&) -> Completion {
    MPI_Request request;
    {
      auto lock = mpi_lock();
      check_not_finalized("MPI_Ibcast");
      check_mpi(MPI_Ibcast(tensor.raw_data_ptr(), static_cast<int>(tensor.nbytes()), MPI_BYTE, root, comm_->comm,
                           &request),
                "MPI_Ibcast");
    }
    comm_->wait(request, options_.timeout, {tensor});
    return {};
  });
}

std::shared_ptr<Work> ProcessGroupMPI::reduce(Tensor tensor, int root, ReduceOp op) {
  check_reduction(tensor, op, "reduce");
  check_rank_in_group(root, "reduce");
  return worker_->enqueue("reduce", "", " to rank " + std::to_string(root),
                          [this, tensor, root, op](const std::string& name) -> Completion {
    MPI_Request request;
    void* data = tensor.raw_data_ptr();
    {
      auto lock = mpi_lock();
      check_not_finalized("MPI_Ireduce");
      // The root reduces in place; the others only send, their tensors stay as they were.
      check_mpi(MPI_Ireduce(rank_ == root ? MPI_IN_PLACE : data, rank_ == root ? data : nullptr,
                            static_cast<int>(tensor.numel()), reduction_type(tensor.dtype(), name),
                            reduction_op(tensor.dtype(), op), root, comm_->comm, &request),
                "MPI_Ireduce");
    }
    comm_->wait(request, options_.timeout, {tensor});
    if (op == ReduceOp::Avg && rank_ == root) tcp::divide_by(data, tensor.numel(), tensor.dtype(), size_);
    return {};
  });
}

std::shared_ptr<Work> ProcessGroupMPI::allgather(std::vector<Tensor> outputs, Tensor input) {
  check_cpu_tensor(input, "mpi", "allgather");
  check_tensor_list(outputs, input, size_, "mpi", "allgather", "output");
  mpi_count(input.nbytes() * static_cast<size_t>(size_), "allgather");
  return worker_->enqueue("allgather", "", "", [this, outputs, input](const std::string&) -> Completion {
    const size_t bytes = input.nbytes();
    std::vector<uint8_t> all(bytes * static_cast<size_t>(size_));
    MPI_Request request;
    {
      auto lock = mpi_lock();
      check_not_finalized("MPI_Iallgather");
      check_mpi(MPI_Iallgather(input.raw_data_ptr(), static_cast<int>(bytes), MPI_BYTE, all.data(),
                               static_cast<int>(bytes), MPI_BYTE, comm_->comm, &request),
                "MPI_Iallgather");
    }
    comm_->wait(request, options_.timeout, {input}, &all);
    for (int r = 0; r < size_; ++r)
      if (bytes > 0) std::memcpy(outputs[r].raw_data_ptr(), all.data() + r * bytes, bytes);
    return {};
  });
}

std::shared_ptr<Work> ProcessGroupMPI::reduce_scatter(Tensor output, std::vector<Tensor> inputs, ReduceOp op) {
  check_reduction(output, op, "reduce_scatter");
  check_tensor_list(inputs, output, size_, "mpi", "reduce_scatter", "input");
  mpi_count(static_cast<size_t>(output.numel()) * static_cast<size_t>(size_), "reduce_scatter");
  return worker_->enqueue("reduce_scatter", "", "", [this, output, inputs, op](const std::string& name) -> Completion {
    const size_t bytes = output.nbytes();
    std::vector<uint8_t> all(bytes * static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r)
      if (bytes > 0) std::memcpy(all.data() + r * bytes, inputs[r].raw_data_ptr(), bytes);
    MPI_Request request;
    {
      auto lock = mpi_lock();
      check_not_finalized("MPI_Ireduce_scatter_block");
      check_mpi(MPI_Ireduce_scatter_block(all.data(), output.raw_data_ptr(), static_cast<int>(output.numel()),
                                          reduction_type(output.dtype(), name), reduction_op(output.dtype(), op),
                                          comm_->comm, &request),
                "MPI_Ireduce_scatter_block");
    }
    comm_->wait(request, options_.timeout, {output}, &all);
    if (op == ReduceOp::Avg) tcp::divide_by(output.raw_data_ptr(), output.numel(), output.dtype(), size_);
    return {};
  });
}

std::shared_ptr<Work> ProcessGroupMPI::barrier() {
  return worker_->enqueue("barrier", "", "", [this](const std::string&) -> Completion {
    MPI_Request request;
    {
      auto lock = mpi_lock();
      check_not_finalized("MPI_Ibarrier");
      check_mpi(MPI_Ibarrier(comm_->comm, &request), "MPI_Ibarrier");
    }
    comm_->wait(request, options_.timeout, {});
    return {};
  });
}

namespace {

// MPI guarantees tags up to 32767 (MPI_TAG_UB may allow more; kiln keeps to what every MPI has).
void check_tag(int tag, const char* what) {
  KILN_CHECK(tag >= 0 && tag <= 32767, what, ": tag ", tag, " is outside MPI's portable range 0..32767");
}

}  // namespace

std::shared_ptr<Work> ProcessGroupMPI::send(Tensor tensor, int dst, int tag) {
  check_cpu_tensor(tensor, "mpi", "send");
  check_peer(dst, true, "send");
  check_tag(tag, "send");
  mpi_count(tensor.nbytes(), "send");
  const std::string suffix = " to rank " + std::to_string(dst) + " (tag " + std::to_string(tag) + ")";
  return worker_->enqueue("send", "send " + std::to_string(dst), suffix,
                          [this, tensor, dst, tag](const std::string&) -> Completion {
    // Posted here, in issue order; waited for on the completion thread (see op_worker.h).
    auto request = std::make_shared<MPI_Request>();
    {
      auto lock = mpi_lock();
      check_not_finalized("MPI_Isend");
      check_mpi(MPI_Isend(tensor.raw_data_ptr(), static_cast<int>(tensor.nbytes()), MPI_BYTE, dst, tag, comm_->comm,
                          request.get()),
                "MPI_Isend");
    }
    return [comm = comm_, request, tensor, timeout = options_.timeout] { comm->wait(*request, timeout, {tensor}); };
  }, "send " + std::to_string(dst) + " tag " + std::to_string(tag));
}

std::shared_ptr<Work> ProcessGroupMPI::recv(Tensor tensor, int src, int tag) {
  check_cpu_tensor(tensor, "mpi", "recv");
  check_peer(src, false, "recv");
  check_tag(tag, "recv");
  mpi_count(tensor.nbytes(), "recv");
  const std::string suffix = " from rank " + std::to_string(src) + " (tag " + std::to_string(tag) + ")";
  return worker_->enqueue("recv", "recv " + std::to_string(src), suffix,
                          [this, tensor, src, tag](const std::string&) -> Completion {
    // Posted here and waited for on the completion thread, as a send is: a recv issued before a send (irecv,
    // then isend) must not hold up that send, which the peer's own recv may be waiting for.
    auto request = std::make_shared<MPI_Request>();
    {
      auto lock = mpi_lock();
      check_not_finalized("MPI_Irecv");
      check_mpi(MPI_Irecv(tensor.raw_data_ptr(), static_cast<int>(tensor.nbytes()), MPI_BYTE, src, tag, comm_->comm,
                          request.get()),
                "MPI_Irecv");
    }
    return [comm = comm_, request, tensor, src, timeout = options_.timeout] {
      MPI_Status status = comm->wait(*request, timeout, {tensor});
      int got = 0;
      {
        auto lock = mpi_lock();
        check_mpi(MPI_Get_count(&status, MPI_BYTE, &got), "MPI_Get_count");
      }
      KILN_CHECK(static_cast<size_t>(got) == tensor.nbytes(), "rank ", src, " sent ", got,
                 " bytes, this recv expects ", tensor.nbytes(), " (", tensor.numel(), " ",
                 dtype_name(tensor.dtype()), ")");
    };
  }, "recv " + std::to_string(src) + " tag " + std::to_string(tag));
}

}  // namespace kiln::distributed::mpi
