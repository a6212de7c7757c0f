// The kiln::cuda functions of a build without CUDA: no devices, so no memory to report, and no host memory
// can be pinned. A CUDA build defines them all in
// cuda/cuda_runtime.cu instead.
#ifndef KILN_WITH_CUDA

#include "kiln/tensor/cuda/cuda.h"
#include "kiln/tensor/error.h"
#include "kiln/tensor/tensor.h"

namespace kiln::cuda {

int device_count() { return 0; }
void synchronize(int) {}
void set_poison_allocations(bool) {}
bool poison_allocations() { return false; }

MemoryStats memory_stats(int) { return {}; }
size_t memory_allocated(int) { return 0; }
size_t memory_reserved(int) { return 0; }
void reset_peak_memory_stats(int) {}
void empty_cache() {}

void set_per_process_memory_fraction(double, int) {
  detail::throw_error("set_per_process_memory_fraction: kiln was built without CUDA, so there is no CUDA device");
}
void set_memory_limit(size_t, int) {
  detail::throw_error("set_memory_limit: kiln was built without CUDA, so there is no CUDA device");
}

void record_stream(const Tensor&, const Stream&) {
  detail::throw_error("record_stream: kiln was built without CUDA, so there are no CUDA tensors or streams");
}

void* alloc_pinned(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  detail::throw_error(detail::concat("alloc_pinned: kiln was built without CUDA, so host memory cannot be pinned (",
                                     nbytes, " bytes asked)"));
}

void free_pinned(void*) {}
bool is_pinned(const void*) { return false; }
void record_pinned_use(const void*, const Stream&) {}
PinnedStats pinned_memory_stats() { return {}; }
void empty_pinned_cache() {}

void set_allow_tf32(bool) {}
bool allow_tf32() { return false; }
int cublas_version() { return 0; }
int cudnn_version() { return 0; }
std::string runtime_info() { return "CUDA: not in this build (kiln was built without a CUDA toolkit)\n"; }

Tensor empty_pinned(IntArrayRef shape, DType dtype) {
  alloc_pinned(static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype));
  detail::throw_error("empty_pinned: kiln was built without CUDA, so host memory cannot be pinned");
}

}  // namespace kiln::cuda

#endif  // KILN_WITH_CUDA
