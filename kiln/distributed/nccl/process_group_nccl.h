// ProcessGroupNCCL: collectives between CUDA tensors through NVIDIA's NCCL, registered as "nccl" (built only
// when the CUDA toolkit has NCCL: KILN_WITH_NCCL).
//
// Communicators are made lazily, one per CUDA device, by the first op on a tensor of that device (a barrier
// before any op uses the current device): constructing the group touches neither CUDA nor NCCL, so a process
// can make its group before it picks its device, and a group is never tied to a device it does not use.
// Every rank must therefore make its communicators in the same order (in practice: one device per rank). For
// the k-th communicator, rank 0 draws an ncclUniqueId and publishes it in the store under
// "<name>/nccl/<n>/comm/<k>" (n: this incarnation of the group, counted per rank as the tcp backend does);
// the others read it with the store's timeout. Two ranks of one group on the same GPU are refused by NCCL.
//
// Streams: each communicator has its own stream. An op makes that stream wait (an event) for the caller's
// current stream on the tensor's device, so it sees the tensors as the caller left them, queues the NCCL
// call, and records an event after it. The op's tensors stay alive in the Work and are marked as used on the
// NCCL stream (cuda::record_stream), so the caching allocator does not hand their memory out early.
// Work::wait() makes the caller's current stream wait for that event, then blocks the host until the op is
// done, polling the event and the communicator's asynchronous error (PyTorch's "blocking wait"). Past the
// op's deadline (ProcessGroupOptions::timeout, counted from when it was issued) the communicator is aborted
// and wait() throws a kiln::Error naming the op, the rank and the sequence number; every later op on that
// communicator fails at once (make a new group). An error while an op is queued (an NCCL call that returns one,
// a failed CUDA call) is thrown by the op's call and fails the communicator the same way: it is aborted, and
// every later op fails naming that first error. An op that finished before such a failure (or before the
// group was destroyed) still waits without error.
//
// Avg is NCCL's ncclAvg. NOTE: NCCL scales each rank's input by 1/size() and then sums, so the result is not
// bit-identical to the tcp, mpi and gloo backends' sum-then-divide (it differs in the last bits).
//
// Point to point: NCCL has no tags, so only tag 0 is accepted, and a recv from src matches src's sends to
// this rank in issue order. Sends and recvs are queued on the communicator's one stream like the collectives,
// so they run one after the other: two ranks that each send to the other before receiving deadlock once the
// messages are too large for NCCL to buffer (each send waits for a recv queued behind it). Order them (one
// rank sends first, the other receives first), as with blocking sockets.
//
// Deadlines: communicators are nonblocking (ncclConfig_t::blocking = 0), so no NCCL call blocks the caller.
// Making a communicator waits at most the group's timeout for every rank to join, then aborts it and throws
// (a rank that never issues its first op); queueing an op (the first on a communicator connects to the peers)
// waits at most the timeout too, and fails the communicator like any error while queueing.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/distributed/process_group.h"

namespace kiln::distributed::nccl {

// One device's communicator and stream (process_group_nccl.cpp); shared with the Works that use it.
struct DeviceComm;

class ProcessGroupNCCL : public ProcessGroup {
 public:
  ProcessGroupNCCL(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options);
  // Waits (up to the timeout) for the ops still queued, then destroys the communicators (aborting the ones
  // whose ops did not finish).
  ~ProcessGroupNCCL() override;

  std::string backend() const override { return "nccl"; }

  // tensor: any shape, contiguous, on a CUDA device (the same for every argument of one call).
  std::shared_ptr<Work> allreduce(Tensor tensor, ReduceOp op = ReduceOp::Sum) override;
  std::shared_ptr<Work> broadcast(Tensor tensor, int root) override;
  std::shared_ptr<Work> reduce(Tensor tensor, int root, ReduceOp op = ReduceOp::Sum) override;
  // outputs: size() tensors shaped like input. When they lie back to back in memory (views of one buffer) NCCL
  // writes them directly, else it gathers into a staging buffer that is then copied out.
  std::shared_ptr<Work> allgather(std::vector<Tensor> outputs, Tensor input) override;
  // inputs: size() tensors shaped like output; back to back in memory, or staged as for allgather.
  std::shared_ptr<Work> reduce_scatter(Tensor output, std::vector<Tensor> inputs,
                                       ReduceOp op = ReduceOp::Sum) override;
  // An allreduce of one element; its wait() returns once every rank has reached the barrier.
  std::shared_ptr<Work> barrier() override;
  // tag must be 0 (see above).
  std::shared_ptr<Work> send(Tensor tensor, int dst, int tag = 0) override;
  std::shared_ptr<Work> recv(Tensor tensor, int src, int tag = 0) override;

  const ProcessGroupOptions& options() const { return options_; }

 private:
  // The communicator of `device`, made on first use.
  std::shared_ptr<DeviceComm> comm_for(int device);
  // The next op's sequence number.
  uint64_t draw_seq();

  std::shared_ptr<Store> store_;
  ProcessGroupOptions options_;
  std::string keys_;  // "<name>/nccl/<n>": this incarnation's keys in the store

  std::mutex mutex_;  // guards the members below
  std::vector<std::shared_ptr<DeviceComm>> comms_;  // in the order they were made
  uint64_t next_seq_ = 0;                            // every op this rank issued on the group
};

}  // namespace kiln::distributed::nccl
