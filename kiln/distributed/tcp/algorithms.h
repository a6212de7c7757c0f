// The collective algorithms of the tcp backend, written as schedules of messages for the Mesh engine.
//
// Each takes raw contiguous buffers and a Collective: the mesh, the op's context (deadline, checks) and the
// header every message of the op carries (kind, sequence number, dtype, element count, reduce op), so a rank
// that called something else fails on the first header it receives.
//
// How every rank ends with the same bits:
//   ring allreduce      chunk c is reduced along the ring once, in a fixed order (rank c, c+1, ..., c-1), by
//                       exactly one chain of combines; the all-gather then copies the finished chunk verbatim.
//   recursive doubling  partners combine with the operand covering the lower ranks first, so both compute the
//                       same expression on the same bits; the folded-in extra ranks receive a copy.
//   avg                 sum, then every rank divides identical bits by the same size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kiln/distributed/tcp/transport.h"

namespace kiln::distributed::tcp {

// Working memory an algorithm borrows for one op, kept from op to op by the group (ops run one at a time):
// growing it is the only allocation, and nothing zero-fills it. Its size stays bounded by the largest
// segment or small message the group has seen.
class Scratch {
 public:
  uint8_t* get(size_t bytes) {
    if (bytes > size_) data_.reset(new uint8_t[bytes]), size_ = bytes;  // default-initialised: no zero fill
    return data_.get();
  }

 private:
  std::unique_ptr<uint8_t[]> data_;
  size_t size_ = 0;
};

struct Collective {
  Mesh& mesh;
  const OpContext& ctx;
  FrameHeader header;  // kind, seq, group_id, dtype, count, reduce_op (and tag) of this op
  size_t segment_bytes;
  Scratch* scratch = nullptr;  // the group's; nullptr: the algorithm allocates its own for this op
};

// data: (count,) of header.dtype, reduced in place on every rank with header.reduce_op (avg included).
void allreduce_ring(const Collective& c, void* data);
void allreduce_recursive_doubling(const Collective& c, void* data);

// The reference the two above are tested against: every rank sends its whole buffer to every other rank and
// reduces the size() buffers itself in rank order. size() - 1 full copies per rank: slow, obviously correct,
// and the same bits everywhere by construction.
void allreduce_reference(const Collective& c, void* data);

// data: (count,); every rank's becomes root's. A pipelined chain root -> root+1 -> ... in segments.
void broadcast_chain(const Collective& c, void* data, int root);

// data: (count,); root's becomes the reduction, the others' stay as they were. A pipelined chain ending at root.
void reduce_chain(const Collective& c, void* data, int root);

// input: (count,); outputs: size() buffers of (count,), outputs[r] receives rank r's input. A ring.
void allgather_ring(const Collective& c, const std::vector<void*>& outputs, const void* input);

// inputs: size() buffers of (count,); output: (count,) = the reduction over ranks of their inputs[rank]. A ring.
void reduce_scatter_ring(const Collective& c, void* output, const std::vector<const void*>& inputs);

// Returns once every rank has entered (recursive doubling on one byte).
void barrier_recursive_doubling(const Collective& c);

// [begin, begin + count) of the i-th of `parts` near-equal parts of n elements (the first n % parts one longer).
struct Span {
  int64_t begin = 0, count = 0;
};
Span part_of(int64_t n, int parts, int i);

}  // namespace kiln::distributed::tcp
