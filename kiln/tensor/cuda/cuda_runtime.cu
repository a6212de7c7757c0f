// Device discovery, device memory (the caching allocator over cudaMalloc) and pinned host memory (the pinned
// cache over cudaHostAlloc, pinned_cache.h).
//
// NOTE: on a machine without a GPU or without its driver, cudaGetDeviceCount fails ("CUDA driver version is
// insufficient for CUDA runtime version", "no CUDA-capable device is detected"). kiln treats any such
// failure as zero devices, so a CUDA build runs its CPU work anywhere.
//
// Device memory comes from cudaMalloc only (never managed memory), through the caching allocator of
// caching_allocator.h: a block is allocated for the calling thread's current stream, and freed blocks are
// reused by that stream without synchronization. The allocator's single instance is never destroyed: tensors
// held in static variables may be freed after it would have been, and cudaFree at exit is pointless anyway.
#include <algorithm>
#include <atomic>
#include <memory>
#include <vector>

#include "kiln/tensor/allocator.h"
#include "kiln/tensor/caching_allocator.h"
#include "kiln/tensor/pinned_cache.h"
#include "kiln/tensor/cuda/cuda.h"
#include "kiln/tensor/cuda/cuda_check.h"
#include "kiln/tensor/cuda/stream.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/ops/register.h"

namespace kiln::cuda {

int device_count() {
  static int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky error so later calls do not report it
      return 0;
    }
    return n;
  }();
  return count;
}

void synchronize(int device) {
  if (device_count() == 0) return;
  if (device < 0) {
    KILN_CUDA_CHECK(cudaDeviceSynchronize(), "synchronize");
    return;
  }
  DeviceGuard guard(device);
  KILN_CUDA_CHECK(cudaDeviceSynchronize(), "synchronize");
}

namespace {
std::atomic<bool> g_poison{false};
}  // namespace

void set_poison_allocations(bool on) { g_poison = on; }
bool poison_allocations() { return g_poison; }

namespace {

void check_device(Device device, const char* what) {
  int n = device_count();
  KILN_CHECK(n > 0, what, ": no CUDA device is available on this machine (asked for ", device, ")");
  KILN_CHECK(device.index >= 0 && device.index < n, what, ": ", device, " does not exist (this machine has ", n,
             " CUDA device", n == 1 ? "" : "s", ")");
}

// Events recorded to mark a stream's progress (a freed block's last use, a copy from pinned memory), kept for
// reuse once finished, per device: cudaEventCreate is not free. Not locked: each owner calls it under its own
// mutex. `what` names the operation in errors.
class EventPool {
 public:
  cudaEvent_t record(int device, cudaStream_t stream, const char* what) {
    DeviceGuard guard(device);
    std::vector<cudaEvent_t>& spare = spare_events(device);
    cudaEvent_t event = nullptr;
    if (!spare.empty()) {
      event = spare.back();
      spare.pop_back();
    } else {
      KILN_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), what);
    }
    cudaError_t err = cudaEventRecord(event, stream);
    if (err != cudaSuccess) {
      spare.push_back(event);
      KILN_CUDA_CHECK(err, what);
    }
    return event;
  }

  static bool done(cudaEvent_t event, const char* what) {
    cudaError_t err = cudaEventQuery(event);
    if (err == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    KILN_CUDA_CHECK(err, what);
    return true;
  }

  void release(int device, cudaEvent_t event) { spare_events(device).push_back(event); }

 private:
  std::vector<cudaEvent_t>& spare_events(int device) {
    if (static_cast<size_t>(device) >= spare_.size()) spare_.resize(device + 1);
    return spare_[device];
  }
  std::vector<std::vector<cudaEvent_t>> spare_;  // recorded and finished events, per device
};

// The caching allocator's view of CUDA. Only ever called with the allocator's mutex held, so the event pool
// needs no lock of its own.
class CudaMemory final : public DeviceMemory {
 public:
  void* malloc(int device, size_t nbytes) override {
    DeviceGuard guard(device);
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, nbytes);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // not sticky: clear it so that later checks do not report it
      return nullptr;
    }
    KILN_CUDA_CHECK(err, "allocate");
    return p;
  }

  void free(int device, void* ptr) override {
    // NOTE: errors here cannot be thrown (called from destructors); a later check reports a broken context.
    int previous = 0;
    if (cudaGetDevice(&previous) == cudaSuccess && cudaSetDevice(device) == cudaSuccess) {
      cudaFree(ptr);
      cudaSetDevice(previous);
    }
    cudaGetLastError();
  }

  void* record_event(int device, StreamHandle stream) override {
    return events_.record(device, static_cast<cudaStream_t>(stream), "free (record_stream)");
  }

  bool event_done(int, void* event) override {
    return EventPool::done(static_cast<cudaEvent_t>(event), "allocate (waiting for a block used on another stream)");
  }

  void wait_event(int, void* event) override {
    KILN_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)),
                    "allocate (waiting for a block used on another stream)");
  }

  void release_event(int device, void* event) override { events_.release(device, static_cast<cudaEvent_t>(event)); }

  void memory_info(int device, size_t* free_bytes, size_t* total_bytes) override {
    DeviceGuard guard(device);
    KILN_CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes), "memory_info");
  }

 private:
  EventPool events_;
};

CachingAllocator& caching_allocator() {
  static CachingAllocator* allocator = new CachingAllocator(std::make_unique<CudaMemory>());  // never freed
  return *allocator;
}

class CudaAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, Device device) override {
    check_device(device, "allocate");
    if (nbytes == 0) return nullptr;
    Stream stream = current_stream(device.index);
    void* p = caching_allocator().allocate(device.index, nbytes, stream.handle);
    if (g_poison) {
      try {
        DeviceGuard guard(device.index);
        // On the block's stream: it runs before any kernel that stream queues into the block afterwards.
        KILN_CUDA_CHECK(cudaMemsetAsync(p, 0xFF, nbytes, stream.handle), "allocate (poison)");
      } catch (...) {
        caching_allocator().deallocate(p, stream.handle);
        throw;
      }
    }
    return p;
  }

  void deallocate(void* ptr, size_t, Device device) override {
    if (ptr == nullptr) return;
    try {
      // The freeing thread's current stream: if it is not the block's, the block was likely last used there,
      // and its reuse waits for that stream's queued work (as if record_stream had been called).
      caching_allocator().deallocate(ptr, current_stream(device.index).handle);
    } catch (...) {
      // NOTE: called from destructors, which must not throw; the block is lost to the cache.
    }
  }
};

int resolve_device(int device) { return device < 0 ? current_device() : device; }

}  // namespace

Allocator* cuda_allocator() {
  static CudaAllocator allocator;
  return &allocator;
}

MemoryStats memory_stats(int device) {
  if (device_count() == 0) return {};
  return caching_allocator().stats(resolve_device(device));
}

size_t memory_allocated(int device) { return memory_stats(device).allocated_bytes; }
size_t memory_reserved(int device) { return memory_stats(device).reserved_bytes; }

void reset_peak_memory_stats(int device) {
  if (device_count() == 0) return;
  caching_allocator().reset_peak_stats(resolve_device(device));
}

void set_memory_limit(size_t bytes, int device) {
  KILN_CHECK(device_count() > 0, "set_memory_limit: no CUDA device is present");
  device = resolve_device(device);
  KILN_CHECK(device < device_count(), "set_memory_limit: no device cuda:", device, " (", device_count(), " present)");
  caching_allocator().set_memory_limit(device, bytes);
}

void set_per_process_memory_fraction(double fraction, int device) {
  KILN_CHECK(fraction > 0 && fraction <= 1, "set_per_process_memory_fraction: expected a fraction in (0, 1], got ",
             fraction);
  KILN_CHECK(device_count() > 0, "set_per_process_memory_fraction: no CUDA device is present");
  device = resolve_device(device);
  KILN_CHECK(device < device_count(), "set_per_process_memory_fraction: no device cuda:", device, " (",
             device_count(), " present)");
  size_t free_bytes = 0, total_bytes = 0;
  {
    DeviceGuard guard(device);
    KILN_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes), "set_per_process_memory_fraction");
  }
  // (at least a byte: 0 would lift the cap)
  const auto bytes = std::max<size_t>(1, static_cast<size_t>(fraction * static_cast<double>(total_bytes)));
  set_memory_limit(fraction == 1 ? 0 : bytes, device);
}

void empty_cache() {
  if (device_count() == 0) return;
  caching_allocator().empty_cache();
}

void record_stream(const Tensor& t, const Stream& stream) {
  KILN_CHECK(t.defined() && t.is_cuda(), "record_stream: expected a CUDA tensor, got ",
             t.defined() ? t.device().str() : std::string("an undefined tensor"));
  KILN_CHECK(stream.device == t.device().index, "record_stream: the stream is on cuda:", stream.device,
             " but the tensor on ", t.device());
  caching_allocator().record_stream(t.storage()->data(), stream.handle);
}

// ---- pinned host memory ----

namespace {

// The pinned cache's view of CUDA (pinned_cache.h). Its events are only touched with the cache's mutex held
// (host_alloc and host_free run without it and touch nothing shared).
class CudaPinnedMemory final : public PinnedMemory {
 public:
  void* host_alloc(size_t nbytes) override {
    void* p = nullptr;
    // Portable: pinned for every device's context, not only the current one's.
    cudaError_t err = cudaHostAlloc(&p, nbytes, cudaHostAllocPortable);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return nullptr;
    }
    KILN_CUDA_CHECK(err, "pin host memory");
    return p;
  }

  void host_free(void* ptr) override {
    // NOTE: cudaFreeHost synchronizes with the device; errors cannot be thrown here (called from destructors).
    cudaFreeHost(ptr);
    cudaGetLastError();
  }

  void* record_event(int device, void* stream) override {
    return events_.record(device, static_cast<cudaStream_t>(stream), "copy (pinned memory's event)");
  }

  bool event_done(int, void* event) override {
    return EventPool::done(static_cast<cudaEvent_t>(event), "pinned memory (waiting for a copy that used it)");
  }

  void release_event(int device, void* event) override { events_.release(device, static_cast<cudaEvent_t>(event)); }

 private:
  EventPool events_;
};

// Never destroyed, as the device allocator: pinned tensors held in static variables may go after it would have.
PinnedCache& pinned_cache() {
  static PinnedCache* cache = new PinnedCache(std::make_unique<CudaPinnedMemory>());
  return *cache;
}

}  // namespace

void* alloc_pinned(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  KILN_CHECK(device_count() > 0, "alloc_pinned: no CUDA device is available on this machine, so host memory "
             "cannot be pinned (", nbytes, " bytes asked)");
  return pinned_cache().allocate(nbytes);
}

void free_pinned(void* ptr) {
  if (ptr == nullptr) return;
  pinned_cache().release(ptr);
}

bool is_pinned(const void* ptr) {
  if (ptr == nullptr || device_count() == 0) return false;
  if (pinned_cache().owns(ptr)) return true;
  cudaPointerAttributes attr{};  // host memory pinned some other way (cudaHostRegister, another library)
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeHost;
}

void record_pinned_use(const void* host_ptr, const Stream& stream) {
  if (host_ptr == nullptr || device_count() == 0) return;
  pinned_cache().record_use(host_ptr, stream.device, stream.handle);
}

PinnedStats pinned_memory_stats() {
  if (device_count() == 0) return {};
  return pinned_cache().stats();
}

void empty_pinned_cache() {
  if (device_count() == 0) return;
  pinned_cache().empty();
}

Tensor empty_pinned(IntArrayRef shape, DType dtype) {
  size_t nbytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  void* p = alloc_pinned(nbytes);
  try {
    return from_blob(p, shape, dtype, [](void* q) { free_pinned(q); });
  } catch (...) {
    free_pinned(p);
    throw;
  }
}

}  // namespace kiln::cuda

namespace kiln::detail {

// One per file of kernels; each installs its ops' CUDA kernels.
void register_cuda_copy_kernels();         // copy_cuda.cu
void register_cuda_elementwise_kernels();  // elementwise_cuda.cu
void register_cuda_reduce_kernels();       // reduce_cuda.cu
void register_cuda_softmax_kernels();      // softmax_cuda.cu
void register_cuda_along_dim_kernels();    // along_dim_cuda.cu
void register_cuda_linalg_kernels();       // linalg_cuda.cu
void register_cuda_indexing_kernels();     // indexing_cuda.cu
void register_cuda_random_kernels();       // random_cuda.cu
void register_cuda_conv_kernels();         // conv_cuda.cu
void register_cuda_max_pool_kernels();     // max_pool_cuda.cu
void register_cuda_adaptive_pool_kernels(); // adaptive_pool_cuda.cu
void register_cuda_pad_kernels();          // pad_cuda.cu
void register_cuda_optim_kernels();        // optim_cuda.cu
void register_cuda_cross_entropy_kernels(); // cross_entropy_cuda.cu
void register_cuda_ctc_kernels();          // ctc_cuda.cu
void register_cuda_embedding_bag_kernels(); // embedding_bag_cuda.cu
void register_cuda_grid_sample_kernels();  // grid_sample_cuda.cu
void register_cuda_resize_taps_kernels();  // resize_taps_cuda.cu
void register_cuda_normalization_kernels(); // normalization_cuda.cu
void register_cuda_activation_kernels();   // activation_cuda.cu

void register_cuda_kernels() {
  register_cuda_copy_kernels();
  register_cuda_elementwise_kernels();
  register_cuda_activation_kernels();
  register_cuda_reduce_kernels();
  register_cuda_softmax_kernels();
  register_cuda_along_dim_kernels();
  register_cuda_linalg_kernels();
  register_cuda_indexing_kernels();
  register_cuda_random_kernels();
  register_cuda_conv_kernels();
  register_cuda_max_pool_kernels();
  register_cuda_adaptive_pool_kernels();
  register_cuda_pad_kernels();
  register_cuda_optim_kernels();
  register_cuda_cross_entropy_kernels();
  register_cuda_ctc_kernels();
  register_cuda_embedding_bag_kernels();
  register_cuda_grid_sample_kernels();
  register_cuda_resize_taps_kernels();
  register_cuda_normalization_kernels();
}

}  // namespace kiln::detail
