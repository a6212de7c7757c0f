// ProcessGroupMPI: the "mpi" backend, kiln's ProcessGroup over MPI (built against Open MPI), CPU tensors.
//
// The job is MPI's: start every rank under `mpirun -np N` (kiln launch starts processes MPI does not know of,
// each its own world of one). The first group of a process initializes MPI (MPI_Init_thread, asking for
// MPI_THREAD_MULTIPLE; kiln finalizes at exit only what it initialized), and a group's rank and size must be
// MPI_COMM_WORLD's. Each group works on its own duplicate of MPI_COMM_WORLD, so two groups never match each
// other's messages; groups must be made in the same order on every rank (MPI_Comm_dup is collective). The
// store is not used: MPI has its own rendezvous.
//
// Threads: each group issues its MPI calls from its worker (and, for sends, its completion thread; see
// op_worker.h), so a process with two groups calls MPI from several threads. That needs MPI_THREAD_MULTIPLE;
// when the library grants less (MPI_THREAD_SERIALIZED), every MPI call of the process goes through one mutex
// instead. Below MPI_THREAD_SERIALIZED (a program that called MPI_Init, or MPI_Init_thread with
// MPI_THREAD_FUNNELED, before making a group) only one thread may call MPI, and the group refuses to start.
//
// Deadline: every op is non-blocking (MPI_Iallreduce, MPI_Isend, ...) and polled with MPI_Test until
// ProcessGroupOptions::timeout, then fails naming the op, its sequence number and this rank. MPI cannot cancel a
// collective: the group is not usable after that (its later ops fail at once) and its communicator is left
// as it is. The tensors and buffers of the request given up on are kept alive until the process ends (MPI may
// still write them), and kiln no longer finalizes MPI at exit (MPI_Finalize could wait on the stuck peer). MPI's
// own errors return as codes (MPI_ERRORS_RETURN) and become kiln::Errors with MPI's text. Ops that run after
// MPI_Finalize (a group still alive at exit) fail at once instead of calling MPI.
//
// Dtypes: the reductions map float32, float64, int32, int64, uint8 and bool (sum/max: MPI_LOR, product/min:
// MPI_LAND) to MPI's types; MPI has no 16-bit floats, so reductions of float16 and bfloat16 are errors (the
// tcp and gloo backends have them). Ops that only move bytes (broadcast, allgather, send/recv) take any dtype.
// Avg is sum, then a division (floating dtypes only). Counts are MPI ints: at most 2^31 - 1 bytes an op.
#pragma once

#include <memory>
#include <string>

#include "kiln/distributed/op_worker.h"
#include "kiln/distributed/process_group.h"

namespace kiln::distributed::mpi {

class ProcessGroupMPI : public ProcessGroup {
 public:
  // Collective over MPI_COMM_WORLD (the communicator's duplication).
  ProcessGroupMPI(int rank, int size, ProcessGroupOptions options);
  // Finishes the ops already queued (each bounded by its deadline), then frees the communicator.
  ~ProcessGroupMPI() override;

  std::string backend() const override { return "mpi"; }

  std::shared_ptr<Work> allreduce(Tensor tensor, ReduceOp op = ReduceOp::Sum) override;
  std::shared_ptr<Work> broadcast(Tensor tensor, int root) override;
  std::shared_ptr<Work> reduce(Tensor tensor, int root, ReduceOp op = ReduceOp::Sum) override;
  std::shared_ptr<Work> allgather(std::vector<Tensor> outputs, Tensor input) override;
  std::shared_ptr<Work> reduce_scatter(Tensor output, std::vector<Tensor> inputs,
                                       ReduceOp op = ReduceOp::Sum) override;
  std::shared_ptr<Work> barrier() override;
  std::shared_ptr<Work> send(Tensor tensor, int dst, int tag = 0) override;
  std::shared_ptr<Work> recv(Tensor tensor, int src, int tag = 0) override;

 private:
  struct Comm;  // the MPI communicator, kept out of this header (no mpi.h for kiln's users)
  ProcessGroupOptions options_;
  std::shared_ptr<Comm> comm_;
  std::unique_ptr<OpWorker> worker_;  // last: stopped first, while the communicator is still alive
};

}  // namespace kiln::distributed::mpi
