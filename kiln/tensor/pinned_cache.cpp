// The pinned host memory cache's bookkeeping: see pinned_cache.h.
#include "kiln/tensor/pinned_cache.h"

#include <algorithm>
#include <bit>

#include "kiln/tensor/error.h"

namespace kiln::cuda {

namespace {

constexpr size_t kMinPinnedBlock = 4096;

// The block of `blocks` (by address) that holds ptr, or blocks.end().
template <typename Map>
auto block_holding(Map& blocks, const void* ptr) {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  auto it = blocks.upper_bound(address);
  if (it == blocks.begin()) return blocks.end();
  --it;
  return address < it->first + it->second.size ? it : blocks.end();
}

}  // namespace

PinnedCache::PinnedCache(std::unique_ptr<PinnedMemory> memory) : memory_(std::move(memory)) {}

PinnedCache::~PinnedCache() {
  for (auto& [address, block] : blocks_) {
    for (const Use& u : block.uses) memory_->release_event(u.device, u.event);
    memory_->host_free(reinterpret_cast<void*>(address));
  }
}

size_t PinnedCache::round_size(size_t nbytes) { return std::bit_ceil(std::max(nbytes, kMinPinnedBlock)); }

bool PinnedCache::uses_done(Block& b) {
  // Every event is queried before any is released, so a query that throws (a CUDA error) leaves the list as
  // it was. Events of one stream complete in order; of several streams, in any: look at every one.
  std::vector<bool> done(b.uses.size());
  for (size_t k = 0; k < b.uses.size(); ++k) done[k] = memory_->event_done(b.uses[k].device, b.uses[k].event);
  size_t kept = 0;
  for (size_t k = 0; k < b.uses.size(); ++k) {
    if (done[k]) memory_->release_event(b.uses[k].device, b.uses[k].event);
    else b.uses[kept++] = b.uses[k];
  }
  b.uses.resize(kept);
  return b.uses.empty();
}

void* PinnedCache::allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  KILN_CHECK(nbytes <= (size_t{1} << 62), "pinned memory: ", nbytes, " bytes is more than any host has");
  const size_t size = round_size(nbytes);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.allocations;
    auto cls = free_.find(size);
    if (cls != free_.end()) {
      std::vector<uintptr_t>& cached = cls->second;
      // The most recently freed first (warm in the CPU's caches), skipping blocks a copy still uses.
      for (size_t k = cached.size(); k-- > 0;) {
        Block& b = blocks_.at(cached[k]);
        if (!uses_done(b)) continue;
        const uintptr_t address = cached[k];
        cached.erase(cached.begin() + static_cast<std::ptrdiff_t>(k));
        b.in_use = true;
        ++stats_.cache_hits;
        stats_.cached_bytes -= size;
        stats_.allocated_bytes += size;
        return reinterpret_cast<void*>(address);
      }
    }
  }
  // Pinning and unpinning take milliseconds (and unpinning synchronizes the device): not under the lock, which
  // the loader's other workers and the training thread's copies need meanwhile.
  void* p = memory_->host_alloc(size);
  if (p == nullptr) {
    empty();
    p = memory_->host_alloc(size);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  KILN_CHECK(p != nullptr, "pinned memory: the host would not pin ", size, " bytes (", nbytes, " asked; ",
             stats_.allocated_bytes, " bytes pinned by kiln are in use and ", stats_.cached_bytes,
             " cached, waiting for copies that use them); pin less (smaller batches, fewer loader workers)");
  ++stats_.host_allocs;
  stats_.allocated_bytes += size;
  blocks_[reinterpret_cast<uintptr_t>(p)] = Block{size, true, {}};
  return p;
}

void PinnedCache::release(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == blocks_.end() || !it->second.in_use) return;
  it->second.in_use = false;
  stats_.allocated_bytes -= it->second.size;
  stats_.cached_bytes += it->second.size;
  free_[it->second.size].push_back(it->first);
}

bool PinnedCache::record_use(const void* ptr, int device, void* stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = block_holding(blocks_, ptr);
  if (it == blocks_.end()) return false;
  // A buffer used for copy after copy collects events: drop those that have completed first.
  uses_done(it->second);
  void* event = memory_->record_event(device, stream);
  try {
    it->second.uses.push_back(Use{device, event});
  } catch (...) {
    memory_->release_event(device, event);
    throw;
  }
  return true;
}

bool PinnedCache::owns(const void* ptr) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return block_holding(blocks_, ptr) != blocks_.end();
}

void PinnedCache::empty() {
  // Taken out under the lock, given back without it (cudaFreeHost waits for the whole device).
  std::vector<void*> idle;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [size, cached] : free_) {
      for (size_t k = 0; k < cached.size();) {
        auto b = blocks_.find(cached[k]);
        if (!uses_done(b->second)) {
          ++k;
          continue;
        }
        idle.push_back(reinterpret_cast<void*>(b->first));
        ++stats_.host_frees;
        stats_.cached_bytes -= size;
        blocks_.erase(b);
        cached.erase(cached.begin() + static_cast<std::ptrdiff_t>(k));
      }
    }
  }
  for (void* p : idle) memory_->host_free(p);
}

PinnedStats PinnedCache::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace kiln::cuda
