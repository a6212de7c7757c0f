// Handshake and frame-header checks for the tcp backend: see frame.h.
#include "kiln/distributed/tcp/frame.h"

#include <algorithm>
#include <cstring>

#include "kiln/tensor/error.h"

namespace kiln::distributed::tcp {

namespace {

std::string group_of(const Handshake& h) {
  return std::string(h.group, strnlen(h.group, kMaxGroupName));
}

// "sum of 1000 float32" (reducing kinds) or "1000 float32".
std::string describe_payload(const FrameHeader& h) {
  std::string s = op_kind_reduces(h.kind) ? std::string(reduce_op_name(h.reduce_op)) + " of " : "";
  s += std::to_string(h.count) + " " + dtype_name(h.dtype);
  if (h.kind == OpKind::SendRecv) s += " with tag " + std::to_string(h.tag);
  return s;
}

}  // namespace

Handshake make_handshake(uint64_t job_id, int from, int to, int world_size, const std::string& group) {
  Handshake h;
  h.job_id = job_id;
  h.from_rank = from;
  h.to_rank = to;
  h.world_size = world_size;
  std::memcpy(h.group, group.data(), std::min(group.size(), kMaxGroupName - 1));
  return h;
}

void check_handshake(const Handshake& got, const Handshake& mine, int me, int expected_from) {
  const std::string who = "tcp handshake: rank " + std::to_string(me) + " ";
  KILN_CHECK(got.magic == kHandshakeMagic, who, "received magic 0x", std::hex, got.magic, " instead of 0x",
             kHandshakeMagic, std::dec, " (not a kiln tcp peer, or one of the other byte order)");
  KILN_CHECK(got.version == kProtocolVersion, who, "speaks protocol version ", kProtocolVersion,
             " but rank ", got.from_rank, " speaks version ", got.version);
  KILN_CHECK(group_of(got) == group_of(mine), who, "of group '", group_of(mine), "' reached rank ", got.from_rank,
             " of group '", group_of(got), "'");
  KILN_CHECK(got.job_id == mine.job_id, who, "has job id ", mine.job_id, " but rank ", got.from_rank,
             " has job id ", got.job_id, " (a process of another job, or a stale address in the store)");
  KILN_CHECK(got.world_size == mine.world_size, who, "has world size ", mine.world_size, " but rank ",
             got.from_rank, " has world size ", got.world_size);
  KILN_CHECK(got.to_rank == me, who, "was reached by rank ", got.from_rank, " which wanted rank ", got.to_rank);
  if (expected_from >= 0) {
    KILN_CHECK(got.from_rank == expected_from, who, "connected to rank ", expected_from, " but rank ",
               got.from_rank, " answered");
  } else {
    KILN_CHECK(got.from_rank > me && got.from_rank < mine.world_size, who, "accepts only ranks ", me + 1, "..",
               mine.world_size - 1, " but rank ", got.from_rank, " connected");
  }
}

const char* op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::Allreduce: return "allreduce";
    case OpKind::Broadcast: return "broadcast";
    case OpKind::Reduce: return "reduce";
    case OpKind::Allgather: return "allgather";
    case OpKind::ReduceScatter: return "reduce_scatter";
    case OpKind::Barrier: return "barrier";
    case OpKind::SendRecv: return "send/recv";
    case OpKind::PsInit: return "ps init";
    case OpKind::PsPull: return "ps pull";
    case OpKind::PsOptions: return "ps optimizer options";
    case OpKind::PsPush: return "ps push";
    case OpKind::PsFetch: return "ps fetch";
    case OpKind::PsDone: return "ps done";
    case OpKind::PsReply: return "ps reply";
    case OpKind::PsState: return "ps optimizer state";
  }
  return "?";
}

bool op_kind_reduces(OpKind kind) {
  return kind == OpKind::Allreduce || kind == OpKind::Reduce || kind == OpKind::ReduceScatter;
}

uint32_t group_id_of(const std::string& group) {
  uint32_t h = 2166136261u;  // FNV-1a: a stable hash, the same in every process
  for (unsigned char c : group) h = (h ^ c) * 16777619u;
  return h;
}

std::string describe_frame(const FrameHeader& h) {
  return std::string(op_kind_name(h.kind)) + " #" + std::to_string(h.seq) + " (" + describe_payload(h) + ")";
}

void check_frame(const FrameHeader& got, const FrameHeader& expected, int sender, int receiver) {
  const std::string op = std::string(op_kind_name(expected.kind)) + " #" + std::to_string(expected.seq) + ": ";
  const std::string s = "rank " + std::to_string(sender), r = "rank " + std::to_string(receiver);
  KILN_CHECK(got.magic == kFrameMagic && got.group_id == expected.group_id, op, r, " received a corrupt header from ",
             s, " (magic 0x", std::hex, got.magic, ", group 0x", got.group_id, std::dec,
             "): the streams are out of step");
  KILN_CHECK(got.kind == expected.kind && got.seq == expected.seq, op, s, " sent ", describe_frame(got), ", ", r,
             " expects ", describe_frame(expected));
  const bool same_payload = got.count == expected.count && got.dtype == expected.dtype &&
                            got.tag == expected.tag &&
                            (!op_kind_reduces(got.kind) || got.reduce_op == expected.reduce_op);
  KILN_CHECK(same_payload, op, s, " sent ", describe_payload(got), ", ", r, " expects ", describe_payload(expected));
  KILN_CHECK(got.segment == expected.segment && got.payload_bytes == expected.payload_bytes, op, s,
             " sent segment ", got.segment, " of ", got.payload_bytes, " bytes, ", r, " expects segment ",
             expected.segment, " of ", expected.payload_bytes,
             " bytes (do the ranks' segment_bytes and small_message_bytes options differ?)");
}

}  // namespace kiln::distributed::tcp
