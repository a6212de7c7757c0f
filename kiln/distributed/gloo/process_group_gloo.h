// ProcessGroupGloo: the "gloo" backend, kiln's ProcessGroup over Gloo (Debian's libgloo-dev), CPU tensors.
//
// Rendezvous goes through kiln's own Store (an adapter under "<group name>/gloo/<incarnation>/", so groups of
// one store do not clash and a group made again under the same name gets fresh keys); the ranks then connect
// a full mesh with Gloo's tcp transport on ProcessGroupOptions::host. Every Gloo call carries
// ProcessGroupOptions::timeout as its deadline.
//
// The ops map onto Gloo's collectives (allreduce, broadcast, reduce, allgather, barrier) and its unbound
// buffers (send/recv, one slot per tag). Gloo has no public reduce-scatter: it is an allreduce of the
// concatenated inputs, of which each rank keeps its block (size() times the traffic of a real one). Reductions
// combine elements with the tcp backend's combine() (tcp/reduce_kernels.h), so every dtype kiln has works
// with the same semantics as there (f16/bf16 in float, integers wrap, bool sum/max is or); avg is sum, then a
// division, floating dtypes only.
//
// Ops run in issue order on the group's worker (op_worker.h); a failure (gloo::IoException, a timeout) becomes
// a kiln::Error naming the op, its sequence number, this rank and the peers whose connections had ended
// (Gloo names a peer by an address only); the group is not usable afterwards. Failures spread as on tcp (OpWorker's FailureSharing):
// the first is reported through the store under "<name>/gloo/<incarnation>/error", and a rank whose op fails
// ends all its connections, so the ranks waiting on it fail at once, with the report as the cause. A rank
// with nothing to see end reads the report within about half a second, fails its pending ops and ends its own
// connections in turn (Gloo's calls waiting on them fail too, so the group's destructor does not wait out
// their deadlines). A peer that hangs alive (SIGSTOP) is found only at the deadline, as on tcp.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/distributed/op_worker.h"
#include "kiln/distributed/process_group.h"

namespace gloo {
class Context;
}

namespace kiln::distributed::gloo_backend {

class ProcessGroupGloo : public ProcessGroup {
 public:
  // Collective: every rank of the group constructs it (connecting the mesh), up to options.timeout.
  ProcessGroupGloo(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options);
  // Finishes the ops already queued (each bounded by its deadline), then closes the connections.
  ~ProcessGroupGloo() override;

  std::string backend() const override { return "gloo"; }

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
  // Finds this group's sockets among the process's (Gloo does not expose them) and keeps a descriptor of each.
  // Called once the mesh is connected; a collective step (every rank publishes what it needs in the store).
  void find_connections(const std::shared_ptr<Store>& store);
  // Shuts down this group's connections (FailureSharing::close): Gloo's calls waiting on them fail, on this
  // rank and on the peers.
  void end_connections();
  // `what` with the peers whose connections have ended (Gloo names a peer by an address only).
  std::string explain_peer(const std::string& what) const;

  ProcessGroupOptions options_;
  std::string keys_;  // "<name>/gloo/<incarnation>/": this group's keys in the store
  std::shared_ptr<gloo::Context> context_;
  std::vector<std::pair<int, int>> connection_fds_;  // (peer, kiln's descriptor of its socket): find_connections
  std::unique_ptr<OpWorker> worker_;  // last: stopped first, while the context is still alive
};

}  // namespace kiln::distributed::gloo_backend
