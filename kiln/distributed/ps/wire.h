// The parameter server's connections and messages, shared by servers and workers (internal to ps/).
//
// A message is a tcp FrameHeader (kind one of the Ps* kinds, seq the worker's clock, count and dtype of the
// payload) followed by its payload. Requests flow worker -> server and each is answered (PsReply, with
// PsState after it where state travels):
//   PsInit  [values] (+ PsState when tag = 1)  worker 0 only, once: the shard's initial parameters (and state)
//   PsPull                                     the parameters, once initialized
//   PsOptions [every group's options, float64], then PsPush [gradients]
//                                              a step: answered with the new parameters (or the mean gradient)
//   PsFetch                                    worker 0: the shard's parameters, then PsState
//   PsDone                                     the worker is finished
#pragma once

#include <string>

#include "kiln/distributed/ps/parameter_server.h"
#include "kiln/distributed/tcp/frame.h"
#include "kiln/distributed/tcp/socket.h"

namespace kiln::distributed::ps::detail {

using tcp::Clock;
using tcp::FrameHeader;
using tcp::OpKind;

// One end of a worker-server connection.
struct Link {
  tcp::Socket socket;
  std::string name;         // the parameter server's name (the frames' group)
  std::string me, peer;     // "worker 1", "server 0": for errors
  Duration timeout{0};

  FrameHeader header(OpKind kind, uint64_t seq, DType dtype, int64_t count, int32_t tag = 0) const;
  // Sends a header and `bytes` of payload (header.payload_bytes is set here).
  void send(FrameHeader header, const void* payload, size_t bytes) const;
  // Receives the next header (any kind of this parameter server's), waiting up to the timeout; `idle`: with
  // no deadline (a server waiting for a worker's next request: EOF or shut_down() still end the wait).
  FrameHeader recv_header(const std::string& waiting_for, bool idle = false) const;
  // Receives a header that must match `expect` (kind, seq, count, dtype, tag, payload bytes) and its payload.
  void recv_expected(const FrameHeader& expect, void* payload, const std::string& waiting_for) const;
  void recv_payload(const FrameHeader& h, void* payload) const;
  // Wakes any thread waiting on this connection (it sees EOF) without closing the descriptor under it.
  void shut_down() const;
};

// What is served: the optimizer's parameters (its groups in order), their group, their one dtype, and the
// plan that places them on the servers.
struct Layout {
  std::vector<Tensor> params;
  std::vector<int> group_of;
  DType dtype = DType::Float32;
  ShardPlan plan;
  std::vector<int64_t> shard_numel;  // per server
};
Layout layout_of(const optim::Optimizer& optimizer, int num_servers, const PSOptions& options, const std::string& who);

// An optimizer state as bytes on the wire, and back.
Bytes encode_state(const optim::OptimizerState& state);
optim::OptimizerState decode_state(const Bytes& bytes, const std::string& where);

// Store keys of the parameter server `name` (its failure key is failure_key(), parameter_server.h).
std::string address_key(const std::string& name, int server);
std::string job_id_key(const std::string& name);
// Waits until `key` is in the store, failing at once when the job has recorded a failure (which the error
// names) and at the deadline.
Bytes wait_for_key(Store& store, const std::string& name, const std::string& key, Duration timeout,
                   const std::string& who, const std::string& what);

// A 32-bit digest of what both ends must agree on (mode, staleness, placement, split size, the parameters'
// shapes and dtype), carried in the handshake's spare field: a worker and a server built differently fail at
// the handshake instead of exchanging misread bytes.
uint32_t agreement_digest(const PSOptions& options, const Layout& layout);
// Records `message` as the job's failure unless another was recorded first; never throws.
void report_failure(Store& store, const std::string& name, const std::string& message);
// The failure recorded in the store ("" when none, or when the store cannot be reached); never throws.
std::string recorded_failure(Store& store, const std::string& name);

}  // namespace kiln::distributed::ps::detail
