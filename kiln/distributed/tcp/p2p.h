// Point to point for the tcp backend: connections of its own, and one engine thread per group that moves all
// of its sends and recvs at once.
//
// Why not the collectives' queue: ops there run one at a time in issue order. A recv posted before the send
// its peer is waiting for (PyTorch's irecv then isend around a ring) would hold that send up for good, and
// two ranks that both sent a large tensor first would each wait for the other to read.
//
// Connections: each rank listens on one more ephemeral port, published in the store as
// "<group>/<n>/p2p/<rank>". A rank's sends to peer p travel on a connection it opens itself on its first send
// to p (a handshake with purpose kP2PPurpose first); p's sends to it travel on the connection p opened. So a
// connection carries one direction only, nobody has to agree who connects, and groups that never send point
// to point open nothing.
//
// Matching, as in MPI and Gloo: a recv from rank p with tag t takes the oldest message p sent to this rank with
// tag t. Frames number messages per (peer, direction, tag), and the receiver checks count, dtype and number
// against its recv, so a mismatch is an error naming both sides. The engine reads every incoming connection
// all the time: a message whose recv is posted lands in the recv's tensor, one that arrives first is kept
// whole until its recv comes (no limit: a rank that never posts its recvs holds what was sent to it). So a
// send completes once its bytes are in the kernel's buffers whatever the receiver does, and sends issued
// before recvs never deadlock.
//
// Deadlines and failure: each op must finish within the group's timeout from when it was issued. Any error
// (a peer's EOF or reset, a mismatched or corrupt header, a deadline) fails the whole group, as a collective's
// error does (GroupFailure's store protocol, group_failure.h): every pending op fails with it, the
// connections close (the peers' engines see EOF at once), and the group's collectives fail from then on. A
// failure elsewhere in the group (fail()) or another rank's report in the store fails every pending op too.
//
// NOTE: the engine opens a connection (a store lookup and a connect, bounded by the op's deadline) on its own
// thread, so other point-to-point traffic of this rank pauses meanwhile; once per peer.
#pragma once

#include <memory>
#include <string>

#include "kiln/distributed/process_group.h"
#include "kiln/distributed/store.h"
#include "kiln/distributed/group_failure.h"

namespace kiln::distributed::tcp {

// Handshake::purpose of a point-to-point connection.
inline constexpr uint32_t kP2PPurpose = 0x50325020;  // "P2P "

struct P2PConfig {
  std::shared_ptr<Store> store;
  std::string group;    // the group's name (handshakes, frame headers)
  std::string keys_at;  // "<group>/<n>": this incarnation's keys in the store (Mesh::store_keys())
  int rank = 0, size = 1;
  uint64_t job_id = 0;
  std::string host;  // the address to listen on and publish
  Duration timeout{0};
  std::shared_ptr<GroupFailure> failure;  // the group's, shared with its collectives
};

class P2PEngine {
 public:
  // Listens, publishes the address, starts the engine thread.
  explicit P2PEngine(P2PConfig config);
  // Waits until every pending op has finished or failed (each bounded by its deadline), then closes everything.
  ~P2PEngine();
  P2PEngine(const P2PEngine&) = delete;
  P2PEngine& operator=(const P2PEngine&) = delete;

  // `tensor`: contiguous, on the CPU, alive until the op is done (the Work keeps it). Checked by the caller.
  std::shared_ptr<Work> send(const Tensor& tensor, int dst, int tag);
  std::shared_ptr<Work> recv(const Tensor& tensor, int src, int tag);

  // The group failed elsewhere with `message`: every pending and later op fails with it.
  void fail(const std::string& message);

 private:
  struct Impl;  // p2p.cpp
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::distributed::tcp
