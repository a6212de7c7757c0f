// Index values checked on the device, for the CUDA kernels that index with values they read (indexing_cuda.cu,
// cross_entropy_cuda.cu): reading the values on the host would need a synchronization per op. A kernel that
// meets a bad value skips it and records it in one slot of mapped (zero-copy) host memory; the next such op
// launched after the faulty one has finished throws the error (at once with KILN_CUDA_SYNC_DEBUG).
#pragma once

#include <cstdint>
#include <utility>

namespace kiln::cuda {

// Which op met the bad value; its name and wording come with the error.
enum IndexOpId : int32_t {
  kIndexSelectId,
  kGatherId,
  kScatterId,
  kScatterAddId,
  kIndexAddId,
  kCrossEntropyId,          // a target class: "target V is out of range for S classes"
  kCrossEntropyBackwardId,
  kNumIndexOps
};
const char* index_op_name(IndexOpId op);

// The slot: kernels write it, the host reads it without a copy.
struct IndexError {
  int64_t value, size;
  int32_t dim, op;
  int32_t set;
};

// The slot as the host sees it (first) and as kernels do (second); made on first use. Defined in
// indexing_cuda.cu.
std::pair<IndexError*, IndexError*> index_error_slot();
// Throws the error an earlier (finished) launch recorded, and clears it.
void raise_pending_index_error();

// What a kernel needs to check its index values and report the first bad one.
struct IndexCheck {
  IndexError* slot;
  int64_t size;
  int32_t dim, op;

  __device__ __forceinline__ bool ok(int64_t idx) const { return idx >= 0 && idx < size; }
  __device__ void report(int64_t idx) const {
    volatile IndexError* e = slot;
    if (e->set != 0) return;  // one is enough; racing writers may mix fields of two bad indices of one op
    e->value = idx;
    e->size = size;
    e->dim = dim;
    e->op = op;
    __threadfence_system();
    e->set = 1;
  }
};

inline IndexCheck make_index_check(IndexOpId op, int64_t dim, int64_t size) {
  return IndexCheck{index_error_slot().second, size, static_cast<int32_t>(dim), op};
}

}  // namespace kiln::cuda
