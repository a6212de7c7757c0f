// The tcp backend's wire format: the handshake that opens each connection and the header before every message.
//
// Every message on a connection is a FrameHeader and then `payload_bytes` of raw tensor data. The receiver
// knows what it expects (the op, the sequence number, the dtype, the element count, the segment), so it
// compares the header with its own expectation before it accepts the payload: two ranks that called different
// collectives fail with a message naming both sides instead of hanging or mixing data. (Header and payload are
// read in one call, so the expected payload's bytes may already be in the destination when a header is
// rejected; the op fails either way, and a failed op's tensors hold no defined values.)
//
// NOTE: headers travel in host byte order: the handshake's magic number (read back byte-swapped on a
// machine of the other endianness) is what rejects mixing them.
#pragma once

#include <cstdint>
#include <string>

#include "kiln/distributed/process_group.h"
#include "kiln/tensor/dtype.h"

namespace kiln::distributed::tcp {

inline constexpr uint32_t kHandshakeMagic = 0x4b544350;  // "KTCP"
inline constexpr uint32_t kFrameMagic = 0x4b46524d;      // "KFRM"
inline constexpr uint32_t kProtocolVersion = 1;
inline constexpr size_t kMaxGroupName = 64;

// Sent by the connecting rank, answered by the accepting one with `from` and `to` swapped.
struct Handshake {
  uint32_t magic = kHandshakeMagic;
  uint32_t version = kProtocolVersion;
  uint64_t job_id = 0;
  int32_t from_rank = -1;
  int32_t to_rank = -1;
  int32_t world_size = 0;
  uint32_t purpose = 0;  // what the connection is for: 0 a collectives mesh, kP2PPurpose (p2p.h), a digest (ps)
  char group[kMaxGroupName] = {};  // the group name, truncated, zero-padded
};
static_assert(sizeof(Handshake) == 96);

// Fills a handshake for `group` (names longer than kMaxGroupName are compared by their first 63 bytes).
Handshake make_handshake(uint64_t job_id, int from, int to, int world_size, const std::string& group);
// Checks what `me` received from the connection it believes leads to `expected_from` (-1: any rank above `me`,
// on the accepting side); a kiln::Error naming both ranks and the field that differs.
void check_handshake(const Handshake& got, const Handshake& mine, int me, int expected_from);

// The collectives, then the parameter server's messages (kiln/distributed/ps), which use the same frames.
enum class OpKind : uint8_t {
  Allreduce, Broadcast, Reduce, Allgather, ReduceScatter, Barrier, SendRecv,
  PsInit, PsPull, PsOptions, PsPush, PsFetch, PsDone, PsReply, PsState
};
const char* op_kind_name(OpKind kind);
// Whether messages of this kind carry a reduce op (allreduce, reduce, reduce_scatter).
bool op_kind_reduces(OpKind kind);

struct FrameHeader {
  uint32_t magic = kFrameMagic;
  uint32_t group_id = 0;  // a hash of the group name
  uint64_t seq = 0;       // the op's sequence number in its group (p2p: per peer and direction)
  int64_t count = 0;      // the op's element count (the whole tensor, not this segment)
  uint64_t payload_bytes = 0;
  uint32_t segment = 0;  // which message of the op this is, between these two ranks
  int32_t tag = 0;       // send/recv's tag
  ReduceOp reduce_op = ReduceOp::Sum;  // (an int)
  OpKind kind = OpKind::Allreduce;
  DType dtype = DType::Float32;
  uint8_t reserved[2] = {};
};
static_assert(sizeof(FrameHeader) == 48);

uint32_t group_id_of(const std::string& group);

// "allreduce #7: sum of 1000 float32" style pieces, for errors.
std::string describe_frame(const FrameHeader& h);

// Compares a header received from rank `sender` with what rank `receiver` expects; a kiln::Error such as
//   allreduce #7: rank 0 sent sum of 1000 float32, rank 1 expects max of 1000 float32
void check_frame(const FrameHeader& got, const FrameHeader& expected, int sender, int receiver);

}  // namespace kiln::distributed::tcp
