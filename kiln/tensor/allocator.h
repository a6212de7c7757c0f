// Memory for tensors: one Allocator per device type.
//
// The CPU allocator hands out 64-byte aligned blocks (a cache line, and the alignment AVX-512 loads like).
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
// The allocator for a device type; throws if none is registered (CUDA in a CPU-only build).
Allocator* get_allocator(DeviceType type);
void set_allocator(DeviceType type, Allocator* allocator);

}  // namespace kiln
