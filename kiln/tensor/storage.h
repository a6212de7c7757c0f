// Storage: one refcounted block of memory on one device, shared by every tensor that views it.
//
// The version counter lives here too: views share storage, so an in-place write through any view bumps the
// version that every other view (and, later, autograd's saved tensors) sees.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>

#include "kiln/tensor/allocator.h"
#include "kiln/tensor/device.h"

namespace kiln {

class StorageImpl {
 public:
  // Allocates nbytes on device with the device's allocator.
  StorageImpl(size_t nbytes, Device device);
  // Wraps memory kiln does not own; `deleter` (may be empty) runs when the last tensor lets go of it.
  StorageImpl(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter);
  ~StorageImpl();
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  // `op` names the in-place op that wrote (a string literal), so that autograd's error for a saved tensor that
  // was modified can say which op modified it.
  void bump_version(const char* op) {
    version_.fetch_add(1, std::memory_order_relaxed);
    last_writer_.store(op, std::memory_order_relaxed);
  }
  const char* last_writer() const { return last_writer_.load(std::memory_order_relaxed); }
  // In-place writes that autograd recorded (a subset of the versions): see kiln/autograd/meta.cpp.
  uint64_t recorded_writes() const { return recorded_writes_.load(std::memory_order_relaxed); }
  void count_recorded_write() { recorded_writes_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;          // set when kiln allocated the memory
  std::function<void(void*)> deleter_;      // set when the memory came from outside
  std::atomic<uint64_t> version_{0};
  std::atomic<const char*> last_writer_{nullptr};
  std::atomic<uint64_t> recorded_writes_{0};
};

using Storage = std::shared_ptr<StorageImpl>;

}  // namespace kiln
