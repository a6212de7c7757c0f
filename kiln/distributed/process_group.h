// ProcessGroup: collective communication among the ranks of a job, behind one API whatever moves the bytes.
//
//   auto store = std::make_shared<TCPStore>(TCPStoreOptions{.port = 29500, .is_server = rank == 0});
//   auto pg = new_group("tcp", store, rank, world_size);
//   pg->allreduce(grad)->wait();   // grad: the sum over ranks, in place, the same bits on every rank
//
// Backends are registered by name: "tcp" (kiln's own, over sockets), and, when built, "mpi", "gloo" and "nccl".
// Every rank must call the same collectives in the same order with tensors of the same dtype and element count
// (the tcp backend checks this on the wire and names both sides when they differ). Tensors must be contiguous
// and on a device the backend supports (the CPU for tcp, mpi and gloo; CUDA for nccl).
//
// Each call returns a Work at once; the op runs on the group's own thread, in the order issued, so a caller
// can overlap communication with computation (DDP's gradient buckets) and wait() when it needs the result.
// Every op has a deadline (ProcessGroupOptions::timeout). A failure (a peer that died or stopped answering, a
// mismatched collective) is rethrown by wait() as a kiln::Error naming the op, this rank, the peer and the
// sequence number; once one rank fails, the group's other ranks learn it through the store and fail too,
// instead of each waiting out its own deadline.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/distributed/store.h"
#include "kiln/tensor/tensor.h"

namespace kiln::distributed {

enum class ReduceOp { Sum, Avg, Min, Max, Product };
const char* reduce_op_name(ReduceOp op);  // "sum", "avg", ...

// A collective that may still be running.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the op is done and rethrows its error. `timeout` bounds only this wait (the op keeps its own
  // deadline): running past it is a kiln::Error, and the op goes on.
  virtual void wait(std::optional<Duration> timeout = std::nullopt) = 0;
  virtual bool is_completed() = 0;
};

struct ProcessGroupOptions {
  // Every op's deadline.
  Duration timeout = kDefaultTimeout;
  // Names the group in the store and on the wire: two groups of one job need different names.
  std::string name = "default";
  // tcp: the address this rank listens on and publishes to its peers (one of this machine's that they can
  // reach; 127.0.0.1 for a job on one machine).
  std::string host = "127.0.0.1";
  // tcp: the ring pipelines messages in segments of this many bytes; messages of at most small_message_bytes
  // use a latency-optimized algorithm (recursive doubling) instead of the ring. 128 KiB: on 2 and 4 ranks
  // over loopback, recursive doubling beat the ring at 64 and 128 KiB (by 1.3-2x at 4 ranks).
  size_t segment_bytes = size_t{1} << 19;
  size_t small_message_bytes = size_t{1} << 17;
};

class ProcessGroup {
 public:
  ProcessGroup(int rank, int size) : rank_(rank), size_(size) {}
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual std::string backend() const = 0;

  // tensor becomes the reduction over ranks (in place). Avg is Sum divided by size(), floating dtypes only.
  virtual std::shared_ptr<Work> allreduce(Tensor tensor, ReduceOp op = ReduceOp::Sum) = 0;
  // Every rank's tensor becomes root's.
  virtual std::shared_ptr<Work> broadcast(Tensor tensor, int root) = 0;
  // root's tensor becomes the reduction; the others' are left as they were.
  virtual std::shared_ptr<Work> reduce(Tensor tensor, int root, ReduceOp op = ReduceOp::Sum) = 0;
  // outputs: size() tensors shaped like input; outputs[r] receives rank r's input.
  virtual std::shared_ptr<Work> allgather(std::vector<Tensor> outputs, Tensor input) = 0;
  // inputs: size() tensors shaped like output; output = the reduction over ranks of their inputs[rank()].
  virtual std::shared_ptr<Work> reduce_scatter(Tensor output, std::vector<Tensor> inputs,
                                               ReduceOp op = ReduceOp::Sum) = 0;
  virtual std::shared_ptr<Work> barrier() = 0;
  // Point to point: a send to dst with `tag` matches a recv from this rank with the same tag.
  virtual std::shared_ptr<Work> send(Tensor tensor, int dst, int tag = 0) = 0;
  virtual std::shared_ptr<Work> recv(Tensor tensor, int src, int tag = 0) = 0;

 protected:
  // Argument checks every backend runs, so that all word them alike. `what` names the op ("broadcast").
  // A root (or any rank an op names) outside the group:
  void check_rank_in_group(int r, const std::string& what) const;
  // A send's destination or a recv's source: in the group, and not this rank.
  void check_peer(int peer, bool sending, const std::string& what) const;

  int rank_, size_;
};

using BackendFactory = std::function<std::shared_ptr<ProcessGroup>(std::shared_ptr<Store> store, int rank, int size,
                                                                   const ProcessGroupOptions& options)>;
// Adds (or replaces) a backend under `name`. needs_store = false: its ranks meet without a store (new_group then
// accepts none), as mpi's, which are mpirun's.
void register_backend(const std::string& name, BackendFactory factory, bool needs_store = true);
// Whether new_group(name, ...) needs a store (true for a name no backend has: new_group reports that one).
bool backend_needs_store(const std::string& name);
// The names of the backends this build has.
std::vector<std::string> backends();
// A group of `size` ranks over `backend`, meeting through `store`; an unknown backend is an error listing
// the ones there are.
std::shared_ptr<ProcessGroup> new_group(const std::string& backend, std::shared_ptr<Store> store, int rank, int size,
                                        ProcessGroupOptions options = {});

}  // namespace kiln::distributed
