// The caching allocator's bookkeeping (see caching_allocator.h for the rules it follows).
//
// Every segment from the backend is a doubly linked list of blocks in address order; each block is handed out
// (in active_), free (in its stream's pool), or pending (freed, waiting for events of other streams). Free
// neighbours are always merged at once, so a segment with nothing handed out or pending is a single free block
// with no neighbours: that is how empty_cache recognizes a segment it can give back.
#include "kiln/tensor/caching_allocator.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "kiln/tensor/error.h"

namespace kiln::cuda {

struct CachingAllocator::Block {
  enum class State { kFree, kAllocated, kPending };
  void* ptr = nullptr;
  size_t size = 0;
  int device = 0;
  StreamHandle stream = nullptr;
  bool small = false;  // in the small pool (carved from 2 MiB segments) or the large one
  State state = State::kFree;
  Block* prev = nullptr;  // neighbours in the same segment
  Block* next = nullptr;
  std::vector<StreamHandle> uses;  // streams other than `stream` that used the block (record_stream)
  int pending_events = 0;          // events still to finish before the block may be reused
};

bool CachingAllocator::BlockOrder::operator()(const Block* a, const Block* b) const {
  auto sa = reinterpret_cast<uintptr_t>(a->stream), sb = reinterpret_cast<uintptr_t>(b->stream);
  if (sa != sb) return sa < sb;
  if (a->size != b->size) return a->size < b->size;
  return reinterpret_cast<uintptr_t>(a->ptr) < reinterpret_cast<uintptr_t>(b->ptr);
}

namespace {

std::string format_bytes(size_t n) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  if (n < 1024) return std::to_string(n) + " bytes";
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

void* offset(void* p, size_t n) { return static_cast<char*>(p) + n; }

}  // namespace

CachingAllocator::CachingAllocator(std::unique_ptr<DeviceMemory> backend) : backend_(std::move(backend)) {}

CachingAllocator::~CachingAllocator() {
  std::set<Block*> all;
  for (auto& [ptr, b] : active_) all.insert(b);
  for (size_t d = 0; d < devices_.size(); ++d) {
    if (!devices_[d]) continue;
    DeviceState& s = *devices_[d];
    all.insert(s.small.begin(), s.small.end());
    all.insert(s.large.begin(), s.large.end());
    for (auto& [event, b] : s.pending) {
      if (event != nullptr) backend_->release_event(static_cast<int>(d), event);
      all.insert(b);
    }
  }
  for (Block* b : all) {
    if (b->prev == nullptr) backend_->free(b->device, b->ptr);  // a segment's first block: the segment's address
  }
  for (Block* b : all) delete b;
}

size_t CachingAllocator::round_size(size_t nbytes) {
  if (nbytes <= kSmallRequest) return (nbytes + kAllocRound - 1) / kAllocRound * kAllocRound;
  return (nbytes + kSegmentRound - 1) / kSegmentRound * kSegmentRound;
}

size_t CachingAllocator::segment_size(size_t block_size) {
  return block_size <= kSmallRequest ? kSegmentRound : block_size;
}

CachingAllocator::Pool& CachingAllocator::pool_for(DeviceState& s, const Block* b) {
  return b->small ? s.small : s.large;
}

CachingAllocator::DeviceState& CachingAllocator::state(int device) {
  KILN_CHECK(device >= 0 && device < 1024, "CUDA allocator: bad device index ", device);
  if (static_cast<size_t>(device) >= devices_.size()) devices_.resize(device + 1);
  if (!devices_[device]) devices_[device] = std::make_unique<DeviceState>();
  return *devices_[device];
}

// Splits `b` (taken out of its pool) so that it keeps `size` bytes; the rest becomes a free block of the pool.
// A small block's rest is always worth keeping (it is a multiple of 512 bytes); a large block's only when it
// could serve a large request, otherwise large segments would slowly be cut into crumbs no one asks for.
void CachingAllocator::split(DeviceState& s, Block* b, size_t size) {
  size_t rest = b->size - size;
  if (rest == 0 || (!b->small && rest <= kSmallRequest)) return;
  auto* r = new Block;
  r->ptr = offset(b->ptr, size);
  r->size = rest;
  r->device = b->device;
  r->stream = b->stream;
  r->small = b->small;
  r->prev = b;
  r->next = b->next;
  if (b->next != nullptr) b->next->prev = r;
  b->next = r;
  b->size = size;
  pool_for(s, r).insert(r);  // its right neighbour is not free: free neighbours are always merged
}

CachingAllocator::Block* CachingAllocator::take_cached(DeviceState& s, size_t size, bool small, StreamHandle stream) {
  Pool& pool = small ? s.small : s.large;
  Block key;
  key.stream = stream;
  key.size = size;
  key.ptr = nullptr;
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  Block* b = *it;
  pool.erase(it);
  split(s, b, size);
  return b;
}

CachingAllocator::Block* CachingAllocator::take_fresh(int device, DeviceState& s, size_t size, bool small,
                                                      StreamHandle stream) {
  size_t seg = segment_size(size);
  if (s.limit != 0 && s.stats.reserved_bytes + seg > s.limit) return nullptr;
  void* p = backend_->malloc(device, seg);
  if (p == nullptr) return nullptr;
  auto* b = new Block;
  b->ptr = p;
  b->size = seg;
  b->device = device;
  b->stream = stream;
  b->small = small;
  MemoryStats& st = s.stats;
  ++st.device_mallocs;
  ++st.segments;
  st.reserved_bytes += seg;
  st.peak_reserved_bytes = std::max(st.peak_reserved_bytes, st.reserved_bytes);
  split(s, b, size);
  return b;
}

// A free (or no longer pending) block rejoins its pool, merged with free neighbours.
void CachingAllocator::return_to_pool(DeviceState& s, Block* b) {
  Pool& pool = pool_for(s, b);
  if (b->prev != nullptr && b->prev->state == Block::State::kFree) {
    Block* p = b->prev;
    pool.erase(p);  // before its size (part of the pool's order) changes
    p->size += b->size;
    p->next = b->next;
    if (b->next != nullptr) b->next->prev = p;
    delete b;
    b = p;
  }
  if (b->next != nullptr && b->next->state == Block::State::kFree) {
    Block* n = b->next;
    pool.erase(n);
    b->size += n->size;
    b->next = n->next;
    if (n->next != nullptr) n->next->prev = b;
    delete n;
  }
  b->state = Block::State::kFree;
  b->uses.clear();
  pool.insert(b);
}

void CachingAllocator::process_pending(int device, DeviceState& s, bool wait) {
  for (auto it = s.pending.begin(); it != s.pending.end();) {
    auto [event, b] = *it;
    if (wait) backend_->wait_event(device, event);
    else if (!backend_->event_done(device, event)) {
      ++it;
      continue;
    }
    backend_->release_event(device, event);
    it = s.pending.erase(it);
    if (--b->pending_events == 0) return_to_pool(s, b);
  }
}

void CachingAllocator::release_free_segments(int device, DeviceState& s) {
  for (Pool* pool : {&s.small, &s.large}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* b = *it;
      if (b->prev != nullptr || b->next != nullptr) {
        ++it;
        continue;
      }
      backend_->free(device, b->ptr);
      MemoryStats& st = s.stats;
      st.reserved_bytes -= b->size;
      --st.segments;
      ++st.device_frees;
      it = pool->erase(it);
      delete b;
    }
  }
}

void CachingAllocator::throw_oom(int device, DeviceState& s, size_t nbytes, size_t size) {
  size_t free_b = 0, total_b = 0;
  try {
    backend_->memory_info(device, &free_b, &total_b);
  } catch (...) {
    // the message goes out without the device's own numbers
  }
  const MemoryStats& st = s.stats;
  // The cap is named where it is what refused: a fresh segment would pass it (else the device itself did).
  const size_t segment = segment_size(size);
  const std::string limit =
      s.limit == 0 || st.reserved_bytes + segment <= s.limit
          ? std::string()
          : detail::concat(" kiln may reserve at most ", format_bytes(s.limit), " on it (set_memory_limit ",
                           "or set_per_process_memory_fraction), and a fresh segment of ", format_bytes(segment),
                           " would pass that.");
  throw OutOfMemoryError(detail::concat(
      backend_->device_kind(), " out of memory: tried to allocate ", format_bytes(nbytes), " (", nbytes,
      " bytes, a block of ", format_bytes(size), ") on ", backend_->device_kind(), ":", device, ". The device has ",
      format_bytes(free_b), " free of ", format_bytes(total_b), ";", limit, " kiln has ",
      format_bytes(st.allocated_bytes), " allocated to tensors and ", format_bytes(st.reserved_bytes),
      " reserved, of which ", format_bytes(st.reserved_bytes - st.allocated_bytes),
      " is cached but cannot serve this request (held in segments that are partly in use, or by other streams)"));
}

void* CachingAllocator::allocate(int device, size_t nbytes, StreamHandle stream) {
  if (nbytes == 0) return nullptr;
  if (nbytes > (size_t{1} << 62))
    throw OutOfMemoryError(detail::concat(backend_->device_kind(), " out of memory: cannot allocate ", nbytes,
                                          " bytes"));
  std::lock_guard<std::mutex> lock(mutex_);
  DeviceState& s = state(device);
  process_pending(device, s, /*wait=*/false);
  size_t size = round_size(nbytes);
  bool small = size <= kSmallRequest;
  Block* b = take_cached(s, size, small, stream);
  bool hit = b != nullptr;
  if (b == nullptr) b = take_fresh(device, s, size, small, stream);
  if (b == nullptr) {
    // Out of memory: cached memory this stream cannot use may be what is missing. Wait for the pending frees,
    // try the cache again, then give back every wholly free segment and ask the backend once more.
    ++s.stats.oom_retries;
    process_pending(device, s, /*wait=*/true);
    b = take_cached(s, size, small, stream);
    hit = b != nullptr;
    if (b == nullptr) {
      release_free_segments(device, s);
      b = take_fresh(device, s, size, small, stream);
    }
    if (b == nullptr) {
      ++s.stats.ooms;
      throw_oom(device, s, nbytes, size);
    }
  }
  b->state = Block::State::kAllocated;
  active_.emplace(b->ptr, b);
  MemoryStats& st = s.stats;
  st.allocated_bytes += b->size;
  st.peak_allocated_bytes = std::max(st.peak_allocated_bytes, st.allocated_bytes);
  ++st.active_blocks;
  ++st.allocations;
  if (hit) ++st.cache_hits;
  return b->ptr;
}

void CachingAllocator::deallocate(void* ptr, StreamHandle freeing_stream) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = active_.find(ptr);
  KILN_CHECK(it != active_.end(), backend_->device_kind(), " allocator: free of ", ptr,
             ", which is not a block it handed out (freed twice, or memory from elsewhere)");
  Block* b = it->second;
  active_.erase(it);
  DeviceState& s = state(b->device);
  s.stats.allocated_bytes -= b->size;
  --s.stats.active_blocks;
  if (freeing_stream != b->stream && std::find(b->uses.begin(), b->uses.end(), freeing_stream) == b->uses.end()) {
    b->uses.push_back(freeing_stream);
  }
  if (b->uses.empty()) {
    return_to_pool(s, b);
    return;
  }
  b->state = Block::State::kPending;
  for (StreamHandle other : b->uses) {
    void* event = nullptr;
    try {
      event = backend_->record_event(b->device, other);
    } catch (...) {
      // NOTE: without the event nothing says when the other stream is done with the block, so it is never
      // reused (pending_events cannot reach zero). This runs in destructors and must not throw.
      ++b->pending_events;
      continue;
    }
    ++b->pending_events;
    s.pending.emplace_back(event, b);
  }
}

void CachingAllocator::record_stream(void* ptr, StreamHandle stream) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = active_.find(ptr);
  KILN_CHECK(it != active_.end(), "record_stream: ", ptr, " is not the start of a block of kiln's ",
             backend_->device_kind(), " allocator (memory from elsewhere, or already freed)");
  Block* b = it->second;
  if (stream != b->stream && std::find(b->uses.begin(), b->uses.end(), stream) == b->uses.end()) {
    b->uses.push_back(stream);
  }
}

StreamHandle CachingAllocator::stream_of(void* ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = active_.find(ptr);
  return it == active_.end() ? nullptr : it->second->stream;
}

size_t CachingAllocator::block_size(void* ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = active_.find(ptr);
  return it == active_.end() ? 0 : it->second->size;
}

MemoryStats CachingAllocator::stats(int device) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (device < 0 || static_cast<size_t>(device) >= devices_.size() || !devices_[device]) return {};
  return devices_[device]->stats;
}

void CachingAllocator::reset_peak_stats(int device) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (device < 0 || static_cast<size_t>(device) >= devices_.size() || !devices_[device]) return;
  MemoryStats& st = devices_[device]->stats;
  st.peak_allocated_bytes = st.allocated_bytes;
  st.peak_reserved_bytes = st.reserved_bytes;
}

void CachingAllocator::set_memory_limit(int device, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  state(device).limit = bytes;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t d = 0; d < devices_.size(); ++d) {
    if (!devices_[d]) continue;
    process_pending(static_cast<int>(d), *devices_[d], /*wait=*/true);
    release_free_segments(static_cast<int>(d), *devices_[d]);
  }
}

}  // namespace kiln::cuda
