// Memory for tensors: one Allocator per device type.
//
// The CPU allocator hands out 64-byte aligned blocks (a cache line, and the alignment AVX-512 loads like),
// and keeps freed blocks of 64 KiB and more for reuse (see cpu_allocator.cpp for why).
// The CUDA allocator is installed by kiln/tensor/cuda when kiln is built with CUDA; without it, asking for
// CUDA memory is an error that says kiln was built without CUDA.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kiln/tensor/device.h"

namespace kiln {

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns nbytes of memory on `device` (nullptr for 0 bytes) or throws kiln::Error.
  virtual void* allocate(size_t nbytes, Device device) = 0;
  virtual void deallocate(void* ptr, size_t nbytes, Device device) = 0;
};

inline constexpr size_t kCpuAlignment = 64;

Allocator* cpu_allocator();

// The CPU allocator's cache of freed large blocks.
struct CpuCacheStats {
  size_t cached_bytes = 0;   // held for reuse now
  size_t cached_blocks = 0;
  uint64_t hits = 0;         // large allocations served from the cache
  uint64_t misses = 0;       // large allocations that went to the system
};
CpuCacheStats cpu_cache_stats();
// Returns every cached block to the system.
void cpu_empty_cache();
// The most the cache may hold (default: the smaller of 1 GiB and 1/8 of physical memory, or the environment
// variable KILN_CPU_CACHE_MB); 0 turns caching off.
void set_cpu_cache_limit(size_t bytes);
// What tensors on the CPU hold, in bytes as the allocator rounded them (64 bytes; cached sizes to 4 or 64 KiB);
// the cache's blocks are not counted.
struct CpuMemoryStats {
  size_t allocated_bytes = 0;       // held by tensors now
  size_t peak_allocated_bytes = 0;  // the most since the start or cpu_reset_peak_memory_stats
  size_t limit_bytes = 0;           // set_cpu_memory_limit's (0: none)
  uint64_t ooms = 0;                // allocations refused for the limit or by the system
};
CpuMemoryStats cpu_memory_stats();
void cpu_reset_peak_memory_stats();  // the peak restarts from what is held now
// While on, every new CPU allocation is filled with 0xff bytes: NaN in floating tensors, all bits set in integer
// ones. A debugging aid that shows elements a kernel never wrote (lab::check_variant turns it on, as
// cuda::set_poison_allocations does on the GPU). Off by default.
void set_cpu_poison_allocations(bool on);
bool cpu_poison_allocations();
// The most tensors on the CPU may hold together; an allocation that would pass it throws
// kiln::OutOfMemoryError, as running out of device memory does (so a batch-size search can run against a
// budget on the CPU, and an embedded program can bound kiln's memory). 0, the default, is no limit; the
// environment variable KILN_CPU_MEMORY_LIMIT_MB sets one at startup. Blocks already held are not affected.
void set_cpu_memory_limit(size_t bytes);
// The allocator for a device type; throws if none is registered (CUDA in a CPU-only build).
Allocator* get_allocator(DeviceType type);
void set_allocator(DeviceType type, Allocator* allocator);

}  // namespace kiln
