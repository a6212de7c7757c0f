// What kiln knows of CUDA devices: their number, synchronization, the caching allocator's statistics and
// pinned host memory. Usable in every build: without CUDA (or without a GPU or its driver) there are zero
// devices, the statistics are zeros and pinned memory is refused with an error.
#pragma once

#include <string>

#include <cstddef>
#include <cstdint>

#include "kiln/tensor/dtype.h"
#include "kiln/tensor/shape.h"

namespace kiln {
class Tensor;
}

namespace kiln::cuda {

struct Stream;  // stream.h, for code that includes the CUDA runtime

// The number of usable CUDA devices; 0 in a CPU-only build and on machines without a GPU or driver.
int device_count();
inline bool is_available() { return device_count() > 0; }
// Waits for all work on a device (the current one if -1) to finish.
void synchronize(int device = -1);

// Testing aid: when on, every block the CUDA allocator hands out is first filled with 0xFF bytes (NaN in every
// float dtype, -1 in the integers), so a kernel that leaves part of its output unwritten shows.
void set_poison_allocations(bool on);
bool poison_allocations();

// ---- the caching allocator (see caching_allocator.h for how it cuts memory) ----

// One device's numbers. Sizes are of blocks as the allocator rounded them (to 512 bytes, large ones to 2 MiB).
struct MemoryStats {
  size_t allocated_bytes = 0;       // in blocks held by tensors now
  size_t reserved_bytes = 0;        // taken from cudaMalloc and not given back: allocated plus cached
  size_t peak_allocated_bytes = 0;  // the most of each since the start or reset_peak_memory_stats
  size_t peak_reserved_bytes = 0;
  size_t active_blocks = 0;         // blocks held by tensors now
  size_t segments = 0;              // cudaMalloc'd regions held now
  uint64_t allocations = 0;         // allocations of a nonzero size
  uint64_t cache_hits = 0;          // of those, the ones served from cached memory, without cudaMalloc
  uint64_t device_mallocs = 0;      // cudaMalloc calls that succeeded
  uint64_t device_frees = 0;        // cudaFree calls
  uint64_t oom_retries = 0;         // cudaMalloc failures after which the cache was emptied and the call retried
  uint64_t ooms = 0;                // allocations that failed even then (each threw kiln::Error)
};

// device -1: the current device. Zeros where there is no such device.
MemoryStats memory_stats(int device = -1);
size_t memory_allocated(int device = -1);
size_t memory_reserved(int device = -1);
// Peaks restart from the current values.
void reset_peak_memory_stats(int device = -1);
// Caps what kiln may reserve on `device` at fraction (in (0, 1]) of its total memory, as PyTorch's function of
// this name: an allocation that would reserve more throws kiln::OutOfMemoryError once the cache has given back
// what it can. 1 lifts the cap. Throws where there is no such device.
void set_per_process_memory_fraction(double fraction, int device = -1);
// The same cap in bytes (0 lifts it).
void set_memory_limit(size_t bytes, int device = -1);
// Gives every wholly unused cached segment of every device back to CUDA (for other processes, or before
// measuring). Memory held by tensors stays.
void empty_cache();
// The storage of `t` (a CUDA tensor) is used on `stream` too, not only on the stream it was allocated on: when
// freed, it is not reused until the work queued on `stream` by then has finished.
void record_stream(const Tensor& t, const Stream& stream);

// ---- pinned (page-locked) host memory: host<->device copies from it run at full speed and can be async ----

// kiln pins host memory through a cache (pinned_cache.h): cudaHostAlloc is slow and cudaFreeHost synchronizes
// the device, so freed blocks are kept and reused, each only once the asynchronous copies that used it have run.

// nbytes of pinned host memory (nullptr for 0 bytes); throws kiln::Error without a CUDA device.
void* alloc_pinned(size_t nbytes);
// Gives memory from alloc_pinned back to the cache. The cache knows of kiln's own copies only: code that queues
// its own cudaMemcpyAsync on this memory calls record_pinned_use, or synchronizes, before freeing it.
void free_pinned(void* ptr);
// Whether ptr points into pinned host memory, kiln's or pinned some other way (false in a CPU-only build).
bool is_pinned(const void* ptr);
// A CPU tensor whose storage is pinned memory, freed when its last view goes; contents uninitialized.
Tensor empty_pinned(IntArrayRef shape, DType dtype);
// An asynchronous copy queued on `stream` reads or writes the pinned memory at host_ptr: kiln's cache does not
// hand that memory out again until the copy has run. (The non-blocking copies of Tensor::to and copy_ call
// this; memory pinned some other way is its owner's to keep alive.)
void record_pinned_use(const void* host_ptr, const Stream& stream);

struct PinnedStats {
  size_t allocated_bytes = 0;  // in blocks handed out now (as rounded)
  size_t cached_bytes = 0;     // in blocks kept for reuse
  uint64_t allocations = 0;    // requests of a nonzero size
  uint64_t cache_hits = 0;     // of those, the ones served by a cached block
  uint64_t host_allocs = 0;    // cudaHostAlloc calls that succeeded
  uint64_t host_frees = 0;     // cudaFreeHost calls
};
// Zeros without a device.
PinnedStats pinned_memory_stats();
// Gives the cached pinned blocks that no copy still uses back to the system (empty_cache() is the device's
// memory only, as in PyTorch).
void empty_pinned_cache();

// ---- matrix products (linalg_cuda.cu) ----

// Whether float32 matrix products and convolutions may run on TF32 tensor cores (inputs rounded to 10 mantissa bits, float32
// accumulation): several times faster, about 1e-3 relative error. Off by default, as PyTorch's matmul.
void set_allow_tf32(bool on);
bool allow_tf32();
// The cuBLAS library's version as major * 10000 + minor * 100 + patch (CUBLAS_VERSION's encoding); 0 without CUDA.
int cublas_version();
// The cuDNN library's version as cudnnGetVersion() gives it (major * 10000 + minor * 100 + patch since cuDNN 9);
// 0 when kiln was built without cuDNN, and then conv2d has no CUDA kernel (conv_cuda.cu).
int cudnn_version();

// What kiln runs on, for `kiln info` and bug reports: the CUDA runtime and driver, cuBLAS and cuDNN versions, and
// each device (name, compute capability, multiprocessors, memory). A CPU-only build says so.
std::string runtime_info();

}  // namespace kiln::cuda
