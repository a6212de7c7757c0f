// ProcessGroupTCP: kiln's own collective backend over TCP sockets, registered as "tcp".
//
// The constructor builds the mesh (transport.h). Each call checks its tensors, takes the next sequence number
// and queues the op; ops run one at a time, in issue order. The group's worker thread runs them, so an op
// issued and not waited for (DDP's buckets) progresses while the caller computes; but a wait() (without a
// timeout) on an op that has not started yet runs the queue up to and including that op on the waiting thread
// itself, so the common `pg->allreduce(t)->wait()` costs no thread handoff (one wakeup each way cost about as
// much as a 4 KiB all-reduce). When callers keep waiting right after issuing, the worker is not even woken: it
// looks at the queue every 200 us instead (process_group_tcp.cpp, kWorkerPoll).
// Allreduce uses recursive doubling up to small_message_bytes and the pipelined ring above (algorithms.h).
//
// Failure: the first error of an op (a lost peer, a mismatched header, the deadline) is written to the store
// under "<group>/<n>/error" (n: this incarnation of the group, see transport.h) as "rank R failed: ..." (the
// first writer wins), then this rank closes its sockets, so its peers see EOF at once; a rank waiting in an op
// also reads that key every half second. Afterwards every op of the group fails at once with the first error:
// a group that failed is not usable again (make a new one of the same name: it gets fresh keys).
//
// Point to point runs apart from the collectives, on connections of its own and the group's P2PEngine thread
// (p2p.h): a recv from src with tag t takes the oldest message src sent to this rank with tag t, a message that
// comes before its recv is kept until the recv is posted, and a send completes once its bytes are in the
// kernel's buffers. Sends and recvs may be issued in any order on any rank without deadlocking. Its failures
// are the group's, like a collective's.
//
// NOTE: the thread running an op (the worker, or a waiting caller) uses the store (about every 0.5 s during an
// op): the store must tolerate calls from several threads (kiln's stores do).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kiln/distributed/process_group.h"
#include "kiln/distributed/tcp/algorithms.h"
#include "kiln/distributed/tcp/p2p.h"

namespace kiln::distributed::tcp {

// One queued op, and the queue a group shares with its Works (both in process_group_tcp.cpp).
struct QueuedOp;
struct OpQueue;

class ProcessGroupTCP : public ProcessGroup {
 public:
  // `host`: the address this rank listens on and publishes (ProcessGroupOptions::host).
  ProcessGroupTCP(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options,
                  std::string host = "127.0.0.1");
  // Finishes the ops already queued (each bounded by its deadline), then closes the connections.
  ~ProcessGroupTCP() override;

  std::string backend() const override { return "tcp"; }

  std::shared_ptr<Work> allreduce(Tensor tensor, ReduceOp op = ReduceOp::Sum) override;
  std::shared_ptr<Work> broadcast(Tensor tensor, int root) override;
  std::shared_ptr<Work> reduce(Tensor tensor, int root, ReduceOp op = ReduceOp::Sum) override;
  std::shared_ptr<Work> allgather(std::vector<Tensor> outputs, Tensor input) override;
  std::shared_ptr<Work> reduce_scatter(Tensor output, std::vector<Tensor> inputs,
                                       ReduceOp op = ReduceOp::Sum) override;
  std::shared_ptr<Work> barrier() override;
  std::shared_ptr<Work> send(Tensor tensor, int dst, int tag = 0) override;
  std::shared_ptr<Work> recv(Tensor tensor, int src, int tag = 0) override;

  const ProcessGroupOptions& options() const { return options_; }

 private:
  // Draws the op's sequence number, names it ("<op> #<seq><suffix>") and queues `body` for the worker, which
  // runs it with a Collective carrying `header`.
  std::shared_ptr<Work> enqueue(const char* op, FrameHeader header, const std::string& suffix,
                                std::function<void(const Collective&)> body);
  FrameHeader header_for(OpKind kind, const Tensor& t, ReduceOp op);
  void worker_loop();
  // Runs one op; every failure ends up in the op's Work (never thrown). Called by whichever thread took the op.
  void run_task(QueuedOp& task);

  std::shared_ptr<Store> store_;
  ProcessGroupOptions options_;
  std::unique_ptr<Mesh> mesh_;

  // The queue, shared with the Works (a waiting Work may take ops from it); its mutex also guards next_seq_.
  std::shared_ptr<OpQueue> queue_;
  uint64_t next_seq_ = 0;                   // collectives, in issue order
  std::shared_ptr<GroupFailure> failure_;   // the group's first error, from the collectives or point to point
  Scratch scratch_;                         // the algorithms' working memory (the thread running an op)
  std::thread worker_;
  std::unique_ptr<P2PEngine> p2p_;
};

}  // namespace kiln::distributed::tcp
