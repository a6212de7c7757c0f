// The CPU allocator: 64-byte aligned memory, with a cache of freed large blocks.
//
// Why a cache: glibc serves large blocks (above 32 MiB at most) with fresh mmap'd pages and unmaps them on
// free. Every new 64 MiB result then costs 16384 page faults and the kernel zeroing each page before kiln
// writes it: measured here, `a + b` on 64 MiB tensors ran at a fifth of the speed of the same add into
// existing memory. Smaller blocks come from the heap, but freeing one at its top gives the pages back to the
// system (glibc trims past 128 KiB) and the next block of that size faults them in again: a 256x256 float
// product, 0.23 ms into existing memory, took 0.30 ms into a fresh result. Training loops allocate the same
// sizes step after step, so keeping freed blocks and handing them out again removes that cost. Blocks of
// 64 KiB and more are cached, keyed by their size rounded up to 4 KiB (64 KiB from 1 MiB up), up to a limit;
// blocks of 4 MiB and more are 2 MiB aligned and advised as transparent huge pages, which makes first
// touches 512 times rarer.
//
// A block freed into a full cache pushes the oldest cached blocks out (they go back to the system), rather
// than being refused: sizes used once (loading a dataset, one evaluation pass) then do not hold the cache
// for good while the sizes of the training step go uncached, and the cache's bytes, which count in the
// process's resident memory, stay bounded by the limit.
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/tensor/allocator.h"
#include "kiln/tensor/error.h"

namespace kiln {
namespace {

std::atomic<bool> poison{false};  // set_cpu_poison_allocations

constexpr size_t kCacheMinBytes = size_t{64} << 10;

// The size a cached block of nbytes has: rounding trades a little memory for more reuse between sizes
// that differ a little (an epoch's last, smaller batch).
size_t cached_size(size_t nbytes) {
  const size_t granule = nbytes < (size_t{1} << 20) ? size_t{4} << 10 : size_t{64} << 10;
  return (nbytes + granule - 1) / granule * granule;
}
constexpr size_t kHugeMinBytes = size_t{4} << 20;
constexpr size_t kHugePage = size_t{2} << 20;

size_t default_cache_limit() {
  if (const char* mb = std::getenv("KILN_CPU_CACHE_MB")) return static_cast<size_t>(std::strtoull(mb, nullptr, 10)) << 20;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  size_t physical = pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : 0;
  return std::min<size_t>(size_t{1} << 30, physical / 8);
}

size_t default_memory_limit() {
  const char* mb = std::getenv("KILN_CPU_MEMORY_LIMIT_MB");
  return mb == nullptr ? 0 : static_cast<size_t>(std::strtoull(mb, nullptr, 10)) << 20;
}

std::string format_mib(size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f MiB", static_cast<double>(bytes) / double(1 << 20));
  return text;
}

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, Device) override {
    if (nbytes == 0) return nullptr;
    if (nbytes > (size_t{1} << 62)) {
      ooms_.fetch_add(1, std::memory_order_relaxed);
      throw OutOfMemoryError(detail::concat("out of CPU memory: cannot allocate ", nbytes, " bytes"));
    }
    const size_t held = nbytes < kCacheMinBytes ? round_up(nbytes, kCpuAlignment) : cached_size(nbytes);
    const size_t held_now = count_in(held, nbytes);
    void* p = nullptr;
    try {
      p = allocate_counted(nbytes);
    } catch (...) {
      allocated_.fetch_sub(held, std::memory_order_relaxed);
      throw;
    }
    note_peak(held_now);
    if (poison.load(std::memory_order_relaxed)) [[unlikely]] std::memset(p, 0xff, nbytes);
    return p;
  }

  void deallocate(void* ptr, size_t nbytes, Device) override {
    if (ptr == nullptr) return;
    allocated_.fetch_sub(nbytes < kCacheMinBytes ? round_up(nbytes, kCpuAlignment) : cached_size(nbytes),
                         std::memory_order_relaxed);
    release(ptr, nbytes);
  }

  CpuMemoryStats memory_stats() const {
    return {allocated_.load(std::memory_order_relaxed), peak_.load(std::memory_order_relaxed),
            memory_limit_.load(std::memory_order_relaxed), ooms_.load(std::memory_order_relaxed)};
  }
  void reset_peak() { peak_.store(allocated_.load(std::memory_order_relaxed), std::memory_order_relaxed); }
  void set_memory_limit(size_t bytes) { memory_limit_.store(bytes, std::memory_order_relaxed); }

  CpuCacheStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return {cached_bytes_, age_.size(), hits_, misses_};
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Block& b : age_) std::free(b.ptr);
    age_.clear();
    free_.clear();
    cached_bytes_ = 0;
  }

  void set_limit(size_t bytes) {
    std::vector<void*> evicted;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      limit_ = bytes;
      while (cached_bytes_ > limit_) evicted.push_back(evict_oldest());
    }
    for (void* p : evicted) std::free(p);
  }

 private:
  // Counts `held` bytes as taken and returns what tensors hold with them, or refuses them for the limit,
  // counting nothing: the check and the count are one compare-exchange, so that a refused request never shows
  // in the total another thread checks against.
  size_t count_in(size_t held, size_t nbytes) {
    const size_t limit = memory_limit_.load(std::memory_order_relaxed);
    if (limit == 0) return allocated_.fetch_add(held, std::memory_order_relaxed) + held;
    size_t current = allocated_.load(std::memory_order_relaxed);
    do {
      if (current + held > limit) [[unlikely]] {
        ooms_.fetch_add(1, std::memory_order_relaxed);
        throw OutOfMemoryError(detail::concat(
            "out of CPU memory: tried to allocate ", format_mib(held), " (", nbytes, " bytes) with ",
            format_mib(current), " held by tensors, over the limit of ", format_mib(limit),
            " (set_cpu_memory_limit or KILN_CPU_MEMORY_LIMIT_MB)"));
      }
    } while (!allocated_.compare_exchange_weak(current, current + held, std::memory_order_relaxed));
    return current + held;
  }

  void note_peak(size_t held_now) {
    size_t peak = peak_.load(std::memory_order_relaxed);
    while (held_now > peak && !peak_.compare_exchange_weak(peak, held_now, std::memory_order_relaxed)) {
    }
  }

  void* allocate_counted(size_t nbytes) {
    if (nbytes < kCacheMinBytes) return system_alloc(round_up(nbytes, kCpuAlignment), kCpuAlignment);
    const size_t size = cached_size(nbytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.find(size);
      if (it != free_.end()) {
        void* p = it->second->ptr;
        age_.erase(it->second);
        free_.erase(it);
        cached_bytes_ -= size;
        ++hits_;
        return p;
      }
      ++misses_;
    }
    void* p = system_alloc(size, size >= kHugeMinBytes ? kHugePage : kCpuAlignment);
    if (size >= kHugeMinBytes) madvise(p, size, MADV_HUGEPAGE);  // a hint: fine if the kernel declines
    return p;
  }

  void release(void* ptr, size_t nbytes) {
    if (nbytes >= kCacheMinBytes) {
      const size_t size = cached_size(nbytes);
      std::vector<void*> evicted;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (size <= limit_) {
          age_.push_back({size, ptr});
          free_.emplace(size, std::prev(age_.end()));
          cached_bytes_ += size;
          while (cached_bytes_ > limit_) evicted.push_back(evict_oldest());
          ptr = nullptr;
        }
      }
      for (void* p : evicted) std::free(p);  // outside the lock
      if (ptr == nullptr) return;
    }
    std::free(ptr);
  }

  static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

  void* system_alloc(size_t size, size_t alignment) {
    void* p = std::aligned_alloc(alignment, round_up(size, alignment));
    if (p == nullptr) {  // give the cached blocks back and try once more
      empty_cache();
      p = std::aligned_alloc(alignment, round_up(size, alignment));
    }
    if (p == nullptr) {
      ooms_.fetch_add(1, std::memory_order_relaxed);
      throw OutOfMemoryError(detail::concat("out of CPU memory: the system could not allocate ", format_mib(size),
                                            " (", size, " bytes)"));
    }
    return p;
  }

  struct Block {
    size_t size;
    void* ptr;
  };
  using Age = std::list<Block>;

  // Drops the block cached longest ago from the cache and returns it, for the caller to free. Lock held.
  void* evict_oldest() {
    Block b = age_.front();
    auto [lo, hi] = free_.equal_range(b.size);
    for (auto it = lo; it != hi; ++it)
      if (it->second == age_.begin()) {
        free_.erase(it);
        break;
      }
    age_.pop_front();
    cached_bytes_ -= b.size;
    return b.ptr;
  }

  std::mutex mutex_;
  Age age_;                                  // the cached blocks, oldest first
  std::multimap<size_t, Age::iterator> free_;  // the same blocks by size
  size_t cached_bytes_ = 0;
  size_t limit_ = default_cache_limit();
  uint64_t hits_ = 0, misses_ = 0;
  std::atomic<size_t> allocated_{0}, peak_{0};
  std::atomic<size_t> memory_limit_{default_memory_limit()};
  std::atomic<uint64_t> ooms_{0};
};

CpuAllocator& instance() {
  // Never destroyed: tensors that outlive main's statics may still free into it at exit.
  static CpuAllocator* allocator = new CpuAllocator;
  return *allocator;
}

}  // namespace

Allocator* cpu_allocator() { return &instance(); }
CpuCacheStats cpu_cache_stats() { return instance().stats(); }
void cpu_empty_cache() { instance().empty_cache(); }
void set_cpu_cache_limit(size_t bytes) { instance().set_limit(bytes); }
CpuMemoryStats cpu_memory_stats() { return instance().memory_stats(); }
void set_cpu_poison_allocations(bool on) { poison.store(on, std::memory_order_relaxed); }
bool cpu_poison_allocations() { return poison.load(std::memory_order_relaxed); }
void cpu_reset_peak_memory_stats() { instance().reset_peak(); }
void set_cpu_memory_limit(size_t bytes) { instance().set_memory_limit(bytes); }

}  // namespace kiln
