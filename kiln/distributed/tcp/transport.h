// The tcp backend's transport: one connection to every other rank (a full mesh) and the engine that moves
// framed messages over them.
//
// Setup (Mesh::connect): every rank listens on an ephemeral port and publishes "<group>/<n>/addr/<rank>" in the
// store, n counting the times this rank made a group of this name ("<group>/incarnation/<rank>"); rank 0 also
// publishes "<group>/<n>/job_id" (a random number). Rank i connects to every j < i and accepts
// from every j > i: connecting never waits on a higher rank, so no cycle of waits can form. Each connection
// opens with a Handshake both ways (magic, version, job id, group, world size, both ranks).
//
// The engine (Mesh::run) sends a queue of messages to one rank while it receives a queue from another (or the
// same) rank, with non-blocking sockets and poll(): a ring never deadlocks on full socket buffers, because
// every rank drains its left neighbour while it fills its right one. A send may wait for a receive (its data is
// what that receive produced), which is how segments pipeline through a ring or a chain. A frame's header and
// payload go out in one sendmsg and come in with one readv. With nothing to do, the engine yields the CPU and
// retries for a few tens of microseconds before it sleeps in poll(): on a few shared cores a sleep and its
// wakeup cost more than a small message's whole exchange.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/distributed/store.h"
#include "kiln/distributed/tcp/frame.h"
#include "kiln/distributed/tcp/socket.h"

namespace kiln::distributed::tcp {

// What one op may spend and what it watches while it waits.
struct OpContext {
  std::string name;  // "allreduce #7", for errors
  Clock::time_point deadline;
  Duration timeout{0};  // the deadline's length, for errors
  // Called about every tick while waiting: throws to abandon the op (another rank failed, the group closes).
  std::function<void()> check;
};

struct SendItem {
  FrameHeader header;        // header.payload_bytes bytes of `data` follow it
  const void* data = nullptr;
  int after_recv = -1;       // waits until receive #after_recv has completed (-1: no wait)
};

struct RecvItem {
  FrameHeader expect;            // what the header must say (payload_bytes included)
  void* dest = nullptr;          // where the payload lands
  std::function<void()> on_done; // runs once the payload is in (a reduction), before dependent sends start
};

// The rest of a frame from byte `done` on (header, then payload_bytes at `payload`), as at most two pieces for
// one sendmsg/readv; returns how many.
int frame_pieces(FrameHeader* header, void* payload, size_t payload_bytes, size_t done, iovec* pieces);

// "host:port" as published in the store; a kiln::Error starting with `what` when it is malformed.
std::pair<std::string, uint16_t> parse_address(const Bytes& value, const std::string& what);

class Mesh {
 public:
  // Setup through `store`, as above; rank and size as in the group. Failing to hear from a rank by `deadline`
  // is a kiln::Error naming the missing ranks. A rank whose setup fails writes "<group>/<n>/error" before it
  // throws, and the others, waiting for it, fail at once with its report.
  static std::unique_ptr<Mesh> connect(Store& store, const std::string& group, int rank, int size,
                                       const std::string& host, Clock::time_point deadline);
  // An already connected mesh: peers[rank] is unused (tests build one from socket pairs).
  Mesh(std::vector<Socket> peers, int rank, int size);

  int rank() const { return rank_; }
  int size() const { return size_; }
  uint64_t job_id() const { return job_id_; }
  // "<group>/<n>": where this incarnation of the group keeps its keys in the store (its failure report too).
  const std::string& store_keys() const { return keys_at_; }

  // Sends `sends` to rank `to` and receives `recvs` from rank `from`, each in order, concurrently (to and from
  // may be equal; -1 with an empty queue when there is nothing that way). Returns when all are done; a peer's
  // EOF or reset, a mismatched header, the deadline or ctx.check() ends it with a kiln::Error naming this rank,
  // the peer and ctx.name.
  void run(int to, const std::vector<SendItem>& sends, int from, std::vector<RecvItem>& recvs, const OpContext& ctx);

  // Closes every connection (after a failure: the peers see EOF at once instead of waiting for a deadline).
  void close_all();

 private:
  static std::unique_ptr<Mesh> connect_at(Store& store, const std::string& group, const std::string& keys_at,
                                          int rank, int size, const std::string& host, Clock::time_point deadline);

  std::vector<Socket> peers_;
  int rank_, size_;
  uint64_t job_id_ = 0;
  std::string keys_at_;
};

}  // namespace kiln::distributed::tcp
