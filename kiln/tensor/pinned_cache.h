// The bookkeeping of kiln's pinned (page-locked) host memory, apart from any device runtime.
//
// Copies between host and device run at full speed, and can run asynchronously, only from and into pinned host
// memory. But cudaHostAlloc is slow (milliseconds for a few megabytes) and cudaFreeHost synchronizes the whole
// device, so a data loader that pinned each batch afresh would stall every step. Freed blocks are kept and
// handed out again instead, as PyTorch's host allocator does:
// - requests round up to a power of two (at least 4 KiB): a loader's batches come in a few sizes, and a block
//   of a class serves every request of that class;
// - a block that an asynchronous copy used is not handed out again until that copy has run. The copy is queued
//   on a stream and may not have started when the tensor that owned the block is freed (a batch copied to the
//   device with non_blocking = true and then dropped), so the copy records an event on its stream
//   (record_use), and a cached block is reused only once all of its events have completed;
// - when the host refuses to pin more, every cached block that no copy still uses goes back, and the request
//   is tried once more;
// - pinning and unpinning run without the lock held: they take milliseconds (unpinning synchronizes the whole
//   device), and a loader's other workers and the training thread's copies need the cache meanwhile.
// The core below works against a small PinnedMemory interface; cuda_runtime.cu backs it with cudaHostAlloc and
// cudaEvent, the tests with a fake, so the logic is tested on machines without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "kiln/tensor/cuda/cuda.h"

namespace kiln::cuda {

// What the pinned cache needs from a device runtime. Streams and events are opaque handles.
class PinnedMemory {
 public:
  virtual ~PinnedMemory() = default;
  // nbytes of fresh pinned host memory, or nullptr when the host will not pin that much (other failures throw).
  virtual void* host_alloc(size_t nbytes) = 0;
  // Gives memory from host_alloc back; must not throw.
  virtual void host_free(void* ptr) = 0;
  // A marker queued on `stream` of `device` now: done once everything queued there before it has finished.
  virtual void* record_event(int device, void* stream) = 0;
  virtual bool event_done(int device, void* event) = 0;
  virtual void release_event(int device, void* event) = 0;
};

// Thread-safe: one mutex guards the bookkeeping (not held while memory is pinned or unpinned).
class PinnedCache {
 public:
  explicit PinnedCache(std::unique_ptr<PinnedMemory> memory);
  ~PinnedCache();  // gives every block back, also those handed out
  PinnedCache(const PinnedCache&) = delete;
  PinnedCache& operator=(const PinnedCache&) = delete;

  // nbytes of pinned memory (nullptr for 0 bytes); throws kiln::Error when the host will not pin it.
  void* allocate(size_t nbytes);
  // Takes back a block from allocate. Must not throw; a pointer the cache does not know is ignored.
  void release(void* ptr);
  // An asynchronous copy queued on `stream` of `device` reads or writes the block that holds `ptr` (a pointer
  // anywhere inside it): the block is not handed out again until that copy has run. False when no block of
  // this cache holds ptr (host memory pinned some other way: its owner keeps it alive).
  bool record_use(const void* ptr, int device, void* stream);
  // Whether a block of this cache holds ptr.
  bool owns(const void* ptr) const;
  // Gives back every cached block that no copy uses any more.
  void empty();
  PinnedStats stats() const;

  static size_t round_size(size_t nbytes);  // the block size for a request of nbytes

 private:
  struct Use {
    int device;
    void* event;
  };
  struct Block {
    size_t size = 0;
    bool in_use = false;
    std::vector<Use> uses;  // events of copies that may still be running, oldest first
  };

  // Queries the block's events, releasing the completed ones; true when none is left. Called with mutex_ held.
  bool uses_done(Block& b);

  std::unique_ptr<PinnedMemory> memory_;
  mutable std::mutex mutex_;
  std::map<uintptr_t, Block> blocks_;             // every block, by address
  std::map<size_t, std::vector<uintptr_t>> free_;  // cached blocks per size, most recently freed last
  PinnedStats stats_;
};

}  // namespace kiln::cuda
