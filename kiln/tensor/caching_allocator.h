// The bookkeeping of kiln's caching device allocator, apart from any device runtime.
//
// cudaMalloc and cudaFree are slow (cudaFree also synchronizes the device), and a training step frees and
// allocates the same sizes again and again, so freed blocks are kept and handed out again. The core below
// does that bookkeeping against a small DeviceMemory interface; cuda_runtime.cu backs it with cudaMalloc and
// cudaEvent, the tests with a fake, so all of the logic is tested on machines without a GPU.
//
// How memory is cut:
// - requests round up to 512 bytes; requests of at most 1 MiB are "small" and are carved from 2 MiB segments,
//   larger ones round up to a multiple of 2 MiB and get a segment of exactly that size;
// - a freed block goes back to the pool of the stream it was allocated on, and only that stream reuses it: work
//   on one stream runs in order, so the next user's kernels run after the last user's without any waiting;
// - an allocation takes the smallest cached block of its stream that fits (best fit), splits off the rest when
//   the rest is worth keeping, and a freed block merges with free neighbours of its segment;
// - a block also used on other streams (record_stream) is not reused until the work those streams had queued
//   at its free has finished: events are recorded at the free and queried before reuse;
// - when the device is out of memory, every wholly free cached segment goes back to the device and the
//   allocation is tried once more before it fails with a message that says where the memory is;
// - a limit per device (set_memory_limit; PyTorch's set_per_process_memory_fraction) caps the reserved bytes:
//   a segment that would pass it counts as the device being out of memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include "kiln/tensor/cuda/cuda.h"

namespace kiln::cuda {

// A stream as the allocator sees it: an opaque handle (cudaStream_t; nullptr is the default stream).
using StreamHandle = void*;

// What the caching allocator needs from a device runtime. Events are opaque handles owned by the backend.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // nbytes of fresh memory on `device`, or nullptr when the device is out of memory (other failures throw).
  virtual void* malloc(int device, size_t nbytes) = 0;
  // Gives memory from malloc back; must not throw.
  virtual void free(int device, void* ptr) = 0;
  // A marker queued on `stream` now: done once everything queued on the stream before it has finished.
  virtual void* record_event(int device, StreamHandle stream) = 0;
  virtual bool event_done(int device, void* event) = 0;
  virtual void wait_event(int device, void* event) = 0;  // the host waits
  virtual void release_event(int device, void* event) = 0;
  // What the device has free and in total (for the out-of-memory message).
  virtual void memory_info(int device, size_t* free_bytes, size_t* total_bytes) = 0;
  // Names the device in messages ("cuda:0").
  virtual const char* device_kind() const { return "cuda"; }
};

inline constexpr size_t kAllocRound = 512;                // every block is a multiple of this
inline constexpr size_t kSmallRequest = size_t{1} << 20;  // at most this much is a small request
inline constexpr size_t kSegmentRound = size_t{2} << 20;  // small segments, and the rounding of large ones

// Thread-safe: one mutex guards everything.
class CachingAllocator {
 public:
  explicit CachingAllocator(std::unique_ptr<DeviceMemory> backend);
  ~CachingAllocator();  // returns all memory, also blocks still handed out
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // nbytes on `device` for use on `stream` (nullptr for 0 bytes); throws kiln::Error when out of memory.
  void* allocate(int device, size_t nbytes, StreamHandle stream);
  // Takes back a block from allocate. `freeing_stream`, when it is not the block's own stream, is treated as
  // if record_stream had been called with it: the block's last use was likely there.
  void deallocate(void* ptr, StreamHandle freeing_stream);
  // The block at ptr is used on `stream` as well: after it is freed, it waits for the work `stream` had
  // queued at that time before anyone reuses it. ptr must be a block from allocate, not a pointer inside one.
  void record_stream(void* ptr, StreamHandle stream);
  // The stream a block was allocated for (nullptr for pointers the allocator does not know).
  StreamHandle stream_of(void* ptr);
  // Size of the block at ptr as the allocator rounded it (0 for unknown pointers).
  size_t block_size(void* ptr);

  MemoryStats stats(int device);
  void reset_peak_stats(int device);
  // The most `device` may reserve from the backend (0: no limit). Segments already reserved stay. (Device first,
  // as every method here; cuda::set_memory_limit takes the bytes first, as PyTorch's fraction function.)
  void set_memory_limit(int device, size_t bytes);
  // Returns every wholly free segment of every device to the backend (waiting for pending frees first).
  void empty_cache();

  static size_t round_size(size_t nbytes);  // a block's size for a request of nbytes
  static size_t segment_size(size_t block_size);  // the size of a fresh segment for a block

 private:
  struct Block;
  struct BlockOrder {  // by stream, then size, then address: lower_bound finds the best fit of a stream
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BlockOrder>;
  struct DeviceState {
    Pool small, large;
    std::list<std::pair<void*, Block*>> pending;  // (event, block) of freed blocks waiting on other streams
    MemoryStats stats;
    size_t limit = 0;  // set_memory_limit's
  };

  DeviceState& state(int device);
  static Pool& pool_for(DeviceState& s, const Block* b);
  Block* take_cached(DeviceState& s, size_t size, bool small, StreamHandle stream);
  Block* take_fresh(int device, DeviceState& s, size_t size, bool small, StreamHandle stream);
  void split(DeviceState& s, Block* b, size_t size);
  void return_to_pool(DeviceState& s, Block* b);
  void process_pending(int device, DeviceState& s, bool wait);
  void release_free_segments(int device, DeviceState& s);
  [[noreturn]] void throw_oom(int device, DeviceState& s, size_t nbytes, size_t size);

  std::unique_ptr<DeviceMemory> backend_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<DeviceState>> devices_;
  std::unordered_map<void*, Block*> active_;  // blocks handed out, by address
};

}  // namespace kiln::cuda
