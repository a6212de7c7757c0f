// Collective algorithms of the tcp backend as message schedules: see algorithms.h.
//
// A schedule is two queues for Mesh::run: messages to one rank, messages from another. A send that forwards
// what a receive produced names that receive (after_recv), so segment k moves on as soon as it is in while
// segment k+1 is still on the wire: the ring and the chains pipeline without threads.
#include "kiln/distributed/tcp/algorithms.h"

#include <algorithm>
#include <cstring>

#include "kiln/distributed/tcp/reduce_kernels.h"
#include "kiln/tensor/error.h"

namespace kiln::distributed::tcp {

namespace {

size_t elem_size(const Collective& c) { return dtype_size(c.header.dtype); }

// How many segments a block of `elems` elements travels in (at least one: an empty block still sends a header,
// so even a zero-count collective checks that the ranks agree).
int segments_for(const Collective& c, int64_t elems) {
  const size_t bytes = static_cast<size_t>(elems) * elem_size(c);
  const size_t seg = std::max<size_t>(c.segment_bytes, elem_size(c));
  return static_cast<int>(std::max<size_t>(1, (bytes + seg - 1) / seg));
}

FrameHeader frame(const Collective& c, uint32_t index, int64_t elems) {
  FrameHeader h = c.header;
  h.segment = index;
  h.payload_bytes = static_cast<uint64_t>(elems) * elem_size(c);
  return h;
}

uint8_t* at(void* base, const Collective& c, int64_t elem) {
  return static_cast<uint8_t*>(base) + static_cast<size_t>(elem) * elem_size(c);
}

// `bytes` of working memory: the group's scratch when there is one, else `local` (freed with the op).
uint8_t* scratch_of(const Collective& c, size_t bytes, std::unique_ptr<uint8_t[]>& local) {
  if (c.scratch) return c.scratch->get(bytes);
  local.reset(new uint8_t[std::max<size_t>(bytes, 1)]);
  return local.get();
}

int mod(int a, int n) { return ((a % n) + n) % n; }

void finish_avg(const Collective& c, void* data, int64_t count) {
  if (c.header.reduce_op == ReduceOp::Avg) divide_by(data, count, c.header.dtype, c.mesh.size());
}

}  // namespace

Span part_of(int64_t n, int parts, int i) {
  const int64_t base = n / parts, extra = n % parts;
  return {i * base + std::min<int64_t>(i, extra), base + (i < extra ? 1 : 0)};
}

void allreduce_ring(const Collective& c, void* data) {
  const int P = c.mesh.size(), r = c.mesh.rank();
  const int64_t n = c.header.count;
  if (P == 1) return finish_avg(c, data, n);
  const int right = (r + 1) % P, left = (r + P - 1) % P;
  // Chunks differ by one element at most; every chunk is cut into the same number of segments, so segment k
  // of a chunk is the same range on every rank.
  const int nseg = segments_for(c, part_of(n, P, 0).count);
  const auto seg = [&](int chunk, int k) {
    const Span ch = part_of(n, P, chunk);
    const Span s = part_of(ch.count, nseg, k);
    return Span{ch.begin + s.begin, s.count};
  };
  std::unique_ptr<uint8_t[]> own;
  uint8_t* const scratch =
      scratch_of(c, static_cast<size_t>(part_of(part_of(n, P, 0).count, nseg, 0).count) * elem_size(c), own);
  std::vector<SendItem> sends;
  std::vector<RecvItem> recvs;
  const int steps = 2 * (P - 1);
  sends.reserve(static_cast<size_t>(steps * nseg)), recvs.reserve(static_cast<size_t>(steps * nseg));
  for (int s = 0; s < steps; ++s) {
    const bool scatter = s < P - 1;  // reduce-scatter steps, then all-gather steps
    const int send_chunk = scatter ? mod(r - s, P) : mod(r + 1 - (s - (P - 1)), P);
    const int recv_chunk = scatter ? mod(r - s - 1, P) : mod(r - (s - (P - 1)), P);
    for (int k = 0; k < nseg; ++k) {
      const uint32_t index = static_cast<uint32_t>(s * nseg + k);
      const Span out = seg(send_chunk, k), in = seg(recv_chunk, k);
      // What this step forwards is what the previous step received into the same chunk and segment.
      const int after = s == 0 ? -1 : (s - 1) * nseg + k;
      sends.push_back(SendItem{frame(c, index, out.count), at(data, c, out.begin), after});
      RecvItem item{frame(c, index, in.count), nullptr, nullptr};
      if (scatter) {
        // received (the chunk's partial result from the ranks before) combined with this rank's own part
        uint8_t* dst = at(data, c, in.begin);
        item.dest = scratch;
        item.on_done = [&c, dst, in, buf = scratch] {
          combine(dst, buf, dst, in.count, c.header.dtype, c.header.reduce_op);
        };
      } else {
        item.dest = at(data, c, in.begin);  // a finished chunk: copied as it is
      }
      recvs.push_back(std::move(item));
    }
  }
  c.mesh.run(right, sends, left, recvs, c.ctx);
  finish_avg(c, data, n);
}

void allreduce_recursive_doubling(const Collective& c, void* data) {
  const int P = c.mesh.size(), r = c.mesh.rank();
  const int64_t n = c.header.count;
  if (P == 1) return finish_avg(c, data, n);
  int pow2 = 1;
  while (pow2 * 2 <= P) pow2 *= 2;
  const int extra = P - pow2;  // ranks 0..2*extra-1 pair up: the even one folds into the odd one
  const DType dtype = c.header.dtype;
  const ReduceOp op = c.header.reduce_op;
  std::unique_ptr<uint8_t[]> own;
  uint8_t* const tmp = scratch_of(c, static_cast<size_t>(n) * elem_size(c), own);
  const std::vector<SendItem> none_sent;
  std::vector<RecvItem> none_received;
  int steps = 0;
  for (int m = 1; m < pow2; m <<= 1) ++steps;
  const auto final_index = static_cast<uint32_t>(steps + 1);

  if (r < 2 * extra && r % 2 == 0) {
    // Folded in: hand the data to r + 1, get the result back.
    std::vector<SendItem> sends{SendItem{frame(c, 0, n), data, -1}};
    std::vector<RecvItem> recvs{RecvItem{frame(c, final_index, n), data, nullptr}};
    c.mesh.run(r + 1, sends, r + 1, recvs, c.ctx);
    return finish_avg(c, data, n);
  }
  if (r < 2 * extra) {
    std::vector<RecvItem> recvs{RecvItem{frame(c, 0, n), tmp, nullptr}};
    c.mesh.run(-1, none_sent, r - 1, recvs, c.ctx);
    combine(data, tmp, data, n, dtype, op);  // r - 1 is the lower rank
  }
  // New ranks 0..pow2-1 cover contiguous, increasing ranges of old ranks: a lower new rank covers lower ranks.
  const int me = r < 2 * extra ? r / 2 : r - extra;
  int step = 1;
  for (int mask = 1; mask < pow2; mask <<= 1, ++step) {
    const int partner_new = me ^ mask;
    const int partner = partner_new < extra ? partner_new * 2 + 1 : partner_new + extra;
    std::vector<SendItem> sends{SendItem{frame(c, static_cast<uint32_t>(step), n), data, -1}};
    std::vector<RecvItem> recvs{RecvItem{frame(c, static_cast<uint32_t>(step), n), tmp, nullptr}};
    c.mesh.run(partner, sends, partner, recvs, c.ctx);
    if (partner_new < me) combine(data, tmp, data, n, dtype, op);
    else combine(data, data, tmp, n, dtype, op);
  }
  if (r < 2 * extra) {
    std::vector<SendItem> sends{SendItem{frame(c, final_index, n), data, -1}};
    c.mesh.run(r - 1, sends, -1, none_received, c.ctx);
  }
  finish_avg(c, data, n);
}

void allreduce_reference(const Collective& c, void* data) {
  const int P = c.mesh.size(), r = c.mesh.rank();
  const int64_t n = c.header.count;
  const size_t bytes = static_cast<size_t>(n) * elem_size(c);
  std::vector<std::vector<uint8_t>> all(static_cast<size_t>(P));
  all[r].assign(static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + bytes);
  // Pairs exchange in one global order (ascending (lower rank, higher rank)), so no cycle of waits can form.
  for (int p = 0; p < P; ++p) {
    if (p == r) continue;
    all[p].resize(bytes);
    std::vector<SendItem> sends{SendItem{frame(c, 0, n), all[r].data(), -1}};
    std::vector<RecvItem> recvs{RecvItem{frame(c, 0, n), all[p].data(), nullptr}};
    c.mesh.run(p, sends, p, recvs, c.ctx);
  }
  std::vector<uint8_t> acc = all[0];
  for (int p = 1; p < P; ++p) combine(acc.data(), acc.data(), all[p].data(), n, c.header.dtype, c.header.reduce_op);
  if (bytes > 0) std::memcpy(data, acc.data(), bytes);
  finish_avg(c, data, n);
}

void broadcast_chain(const Collective& c, void* data, int root) {
  const int P = c.mesh.size(), r = c.mesh.rank();
  if (P == 1) return;
  const int v = mod(r - root, P);  // position in the chain
  const int64_t n = c.header.count;
  const int nseg = segments_for(c, n);
  std::vector<SendItem> sends;
  std::vector<RecvItem> recvs;
  for (int k = 0; k < nseg; ++k) {
    const Span s = part_of(n, nseg, k);
    if (v > 0) recvs.push_back(RecvItem{frame(c, static_cast<uint32_t>(k), s.count), at(data, c, s.begin), nullptr});
    if (v < P - 1) sends.push_back(SendItem{frame(c, static_cast<uint32_t>(k), s.count), at(data, c, s.begin),
                                            v > 0 ? k : -1});
  }
  c.mesh.run(v < P - 1 ? (r + 1) % P : -1, sends, v > 0 ? mod(r - 1, P) : -1, recvs, c.ctx);
}

void reduce_chain(const Collective& c, void* data, int root) {
  const int P = c.mesh.size(), r = c.mesh.rank();
  const int64_t n = c.header.count;
  if (P == 1) return finish_avg(c, data, n);
  const int v = mod(r - root, P);  // the chain runs from position P-1 down to the root at 0
  const int nseg = segments_for(c, n);
  // The root accumulates in place; the others in a copy, since their tensors must stay as they were.
  std::vector<uint8_t> copy;
  void* acc = data;
  if (v != 0) {
    copy.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + n * elem_size(c));
    acc = copy.data();
  }
  std::unique_ptr<uint8_t[]> own;
  uint8_t* const scratch = scratch_of(c, static_cast<size_t>(part_of(n, nseg, 0).count) * elem_size(c), own);
  std::vector<SendItem> sends;
  std::vector<RecvItem> recvs;
  for (int k = 0; k < nseg; ++k) {
    const Span s = part_of(n, nseg, k);
    const auto index = static_cast<uint32_t>(k);
    if (v < P - 1) {
      uint8_t* dst = at(acc, c, s.begin);
      recvs.push_back(RecvItem{frame(c, index, s.count), scratch, [&c, dst, s, buf = scratch] {
                                 combine(dst, dst, buf, s.count, c.header.dtype, c.header.reduce_op);
                               }});
    }
    if (v > 0) sends.push_back(SendItem{frame(c, index, s.count), at(acc, c, s.begin), v < P - 1 ? k : -1});
  }
  c.mesh.run(v > 0 ? mod(r - 1, P) : -1, sends, v < P - 1 ? (r + 1) % P : -1, recvs, c.ctx);
  if (v == 0) finish_avg(c, data, n);
}

void allgather_ring(const Collective& c, const std::vector<void*>& outputs, const void* input) {
  const int P = c.mesh.size(), r = c.mesh.rank();
  const int64_t n = c.header.count;
  const size_t bytes = static_cast<size_t>(n) * elem_size(c);
  if (outputs[r] != input && bytes > 0) std::memcpy(outputs[r], input, bytes);
  if (P == 1) return;
  const int nseg = segments_for(c, n);
  std::vector<SendItem> sends;
  std::vector<RecvItem> recvs;
  for (int s = 0; s < P - 1; ++s) {
    const int send_block = mod(r - s, P), recv_block = mod(r - s - 1, P);
    for (int k = 0; k < nseg; ++k) {
      const Span sp = part_of(n, nseg, k);
      const auto index = static_cast<uint32_t>(s * nseg + k);
      sends.push_back(SendItem{frame(c, index, sp.count), at(outputs[send_block], c, sp.begin),
                               s == 0 ? -1 : (s - 1) * nseg + k});
      recvs.push_back(RecvItem{frame(c, index, sp.count), at(outputs[recv_block], c, sp.begin), nullptr});
    }
  }
  c.mesh.run((r + 1) % P, sends, mod(r - 1, P), recvs, c.ctx);
}

void reduce_scatter_ring(const Collective& c, void* output, const std::vector<const void*>& inputs) {
  const int P = c.mesh.size(), r = c.mesh.rank();
  const int64_t n = c.header.count;
  const size_t bytes = static_cast<size_t>(n) * elem_size(c);
  if (P == 1) {
    if (bytes > 0 && output != inputs[0]) std::memcpy(output, inputs[0], bytes);
    return finish_avg(c, output, n);
  }
  // A working copy of every block: the inputs stay as they were. Block b is reduced along the ring starting at
  // rank b + 1 and ends, complete, at rank b.
  std::vector<uint8_t> work(bytes * static_cast<size_t>(P));
  for (int b = 0; b < P; ++b)
    if (bytes > 0) std::memcpy(work.data() + bytes * static_cast<size_t>(b), inputs[b], bytes);
  const auto block = [&](int b) { return work.data() + bytes * static_cast<size_t>(b); };
  const int nseg = segments_for(c, n);
  std::unique_ptr<uint8_t[]> own;
  uint8_t* const scratch = scratch_of(c, static_cast<size_t>(part_of(n, nseg, 0).count) * elem_size(c), own);
  std::vector<SendItem> sends;
  std::vector<RecvItem> recvs;
  for (int s = 0; s < P - 1; ++s) {
    const int send_block = mod(r - s - 1, P), recv_block = mod(r - s - 2, P);
    for (int k = 0; k < nseg; ++k) {
      const Span sp = part_of(n, nseg, k);
      const auto index = static_cast<uint32_t>(s * nseg + k);
      sends.push_back(SendItem{frame(c, index, sp.count), at(block(send_block), c, sp.begin),
                               s == 0 ? -1 : (s - 1) * nseg + k});
      uint8_t* dst = at(block(recv_block), c, sp.begin);
      recvs.push_back(RecvItem{frame(c, index, sp.count), scratch, [&c, dst, sp, buf = scratch] {
                                 combine(dst, buf, dst, sp.count, c.header.dtype, c.header.reduce_op);
                               }});
    }
  }
  c.mesh.run((r + 1) % P, sends, mod(r - 1, P), recvs, c.ctx);
  if (bytes > 0) std::memcpy(output, block(r), bytes);
  finish_avg(c, output, n);
}

void barrier_recursive_doubling(const Collective& c) {
  uint8_t token = 1;
  Collective one = c;
  one.header.count = 1;
  one.header.dtype = DType::UInt8;
  one.header.reduce_op = ReduceOp::Max;
  allreduce_recursive_doubling(one, &token);
}

}  // namespace kiln::distributed::tcp
