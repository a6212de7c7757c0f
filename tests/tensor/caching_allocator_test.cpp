// The caching allocator's bookkeeping on the CPU, over a fake device: addresses are numbers that are never
// dereferenced, the device has a fixed capacity, and each stream's events finish only when the test says so.
// The expectations come from the rules in caching_allocator.h, computed here independently of the allocator.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "kiln/tensor/caching_allocator.h"
#include "kiln/tensor/error.h"
#include "test_util.h"

namespace kiln::cuda {
namespace {

using test::KiB;
using test::MiB;

// What the fake device holds; shared between the test and the backend the allocator owns.
struct FakeDevice {
  std::mutex mutex;
  size_t capacity = 1024 * MiB;
  size_t used = 0;
  uintptr_t next_address = uintptr_t{1} << 32;
  std::map<uintptr_t, size_t> segments;  // address -> size, live
  int mallocs = 0, frees = 0, failed_mallocs = 0;
  struct FakeEvent {
    StreamHandle stream;
    bool done = false;
  };
  std::map<uintptr_t, FakeEvent> events;  // live events by handle
  uintptr_t next_event = 1;
  int waits = 0;

  // Everything queued on `stream` so far has run.
  void finish(StreamHandle stream) {
    std::lock_guard<std::mutex> lock(mutex);
    for (auto& [id, e] : events) {
      if (e.stream == stream) e.done = true;
    }
  }
};

class FakeMemory final : public DeviceMemory {
 public:
  explicit FakeMemory(FakeDevice* d) : d_(d) {}
  void* malloc(int, size_t nbytes) override {
    std::lock_guard<std::mutex> lock(d_->mutex);
    if (d_->used + nbytes > d_->capacity) {
      ++d_->failed_mallocs;
      return nullptr;
    }
    uintptr_t a = d_->next_address;
    d_->next_address += nbytes + 64 * KiB;  // a gap: segments are never adjacent
    d_->segments[a] = nbytes;
    d_->used += nbytes;
    ++d_->mallocs;
    return reinterpret_cast<void*>(a);
  }
  void free(int, void* ptr) override {
    std::lock_guard<std::mutex> lock(d_->mutex);
    auto it = d_->segments.find(reinterpret_cast<uintptr_t>(ptr));
    ASSERT_NE(it, d_->segments.end()) << "free of an address that is not a segment";
    d_->used -= it->second;
    d_->segments.erase(it);
    ++d_->frees;
  }
  void* record_event(int, StreamHandle stream) override {
    std::lock_guard<std::mutex> lock(d_->mutex);
    uintptr_t id = d_->next_event++;
    d_->events[id] = {stream, false};
    return reinterpret_cast<void*>(id);
  }
  bool event_done(int, void* event) override {
    std::lock_guard<std::mutex> lock(d_->mutex);
    return d_->events.at(reinterpret_cast<uintptr_t>(event)).done;
  }
  void wait_event(int, void* event) override {
    std::lock_guard<std::mutex> lock(d_->mutex);
    d_->events.at(reinterpret_cast<uintptr_t>(event)).done = true;  // the host waited until the stream got there
    ++d_->waits;
  }
  void release_event(int, void* event) override {
    std::lock_guard<std::mutex> lock(d_->mutex);
    EXPECT_EQ(d_->events.erase(reinterpret_cast<uintptr_t>(event)), 1u) << "release of an unknown event";
  }
  void memory_info(int, size_t* free_bytes, size_t* total_bytes) override {
    std::lock_guard<std::mutex> lock(d_->mutex);
    *free_bytes = d_->capacity - d_->used;
    *total_bytes = d_->capacity;
  }

 private:
  FakeDevice* d_;
};

StreamHandle stream(int i) { return reinterpret_cast<StreamHandle>(static_cast<uintptr_t>(0x1000 * i)); }
const StreamHandle kA = stream(1), kB = stream(2);

class CachingAllocatorTest : public ::testing::Test {
 protected:
  FakeDevice dev;
  CachingAllocator alloc{std::make_unique<FakeMemory>(&dev)};
  MemoryStats st() { return alloc.stats(0); }
};

uintptr_t addr(void* p) { return reinterpret_cast<uintptr_t>(p); }
size_t round512(size_t n) { return (n + 511) / 512 * 512; }

TEST_F(CachingAllocatorTest, RoundsSmallTo512BytesAndLargeTo2MiB) {
  for (size_t n : {size_t{1}, size_t{511}, size_t{512}, size_t{513}, size_t{4000}, 100 * KiB + 3, MiB - 1, MiB}) {
    EXPECT_EQ(CachingAllocator::round_size(n), round512(n)) << n;
    EXPECT_EQ(CachingAllocator::segment_size(CachingAllocator::round_size(n)), 2 * MiB) << n;
  }
  for (size_t n : {MiB + 1, 2 * MiB, 2 * MiB + 1, 5 * MiB, 100 * MiB + 7}) {
    size_t want = (n + 2 * MiB - 1) / (2 * MiB) * (2 * MiB);
    EXPECT_EQ(CachingAllocator::round_size(n), want) << n;
    EXPECT_EQ(CachingAllocator::segment_size(want), want) << n;
  }
  EXPECT_EQ(alloc.allocate(0, 0, kA), nullptr);
  EXPECT_EQ(st().allocations, 0u);
  void* p = alloc.allocate(0, 1000, kA);
  EXPECT_EQ(alloc.block_size(p), 1024u);
  EXPECT_EQ(st().allocated_bytes, 1024u);
  EXPECT_EQ(st().reserved_bytes, 2 * MiB);  // a small request takes a whole small segment from the device
  void* q = alloc.allocate(0, 3 * MiB + 5, kA);
  EXPECT_EQ(alloc.block_size(q), 4 * MiB);
  EXPECT_EQ(st().reserved_bytes, 6 * MiB);
  EXPECT_EQ(dev.segments.at(addr(q)), 4 * MiB);
  alloc.deallocate(p, kA);
  alloc.deallocate(q, kA);
}

TEST_F(CachingAllocatorTest, ReusesAFreedBlockOnTheSameStream) {
  void* p = alloc.allocate(0, 1000, kA);
  alloc.deallocate(p, kA);
  EXPECT_EQ(st().allocated_bytes, 0u);
  EXPECT_EQ(st().reserved_bytes, 2 * MiB);  // kept, not given back
  void* q = alloc.allocate(0, 900, kA);
  EXPECT_EQ(q, p);
  EXPECT_EQ(dev.mallocs, 1);
  EXPECT_EQ(st().cache_hits, 1u);
  EXPECT_EQ(st().allocations, 2u);
  void* big = alloc.allocate(0, 20 * MiB, kA);
  alloc.deallocate(big, kA);
  EXPECT_EQ(alloc.allocate(0, 19 * MiB, kA), big);  // rounds to the same 20 MiB
  EXPECT_EQ(dev.mallocs, 2);
  EXPECT_EQ(st().device_mallocs, 2u);
}

TEST_F(CachingAllocatorTest, KeepsEachStreamsBlocksApart) {
  void* a = alloc.allocate(0, 8 * MiB, kA);
  alloc.deallocate(a, kA);
  void* b = alloc.allocate(0, 8 * MiB, kB);  // A's cached block is not B's to take
  EXPECT_NE(b, a);
  EXPECT_EQ(dev.mallocs, 2);
  EXPECT_EQ(alloc.stream_of(b), kB);
  void* a2 = alloc.allocate(0, 8 * MiB, kA);
  EXPECT_EQ(a2, a);
  EXPECT_EQ(dev.mallocs, 2);
  // Small blocks too: B's segment is its own.
  void* sa = alloc.allocate(0, 4 * KiB, kA);
  void* sb = alloc.allocate(0, 4 * KiB, kB);
  EXPECT_EQ(dev.mallocs, 4);
  EXPECT_NE(dev.segments.count(addr(sa)), 0u);
  EXPECT_NE(dev.segments.count(addr(sb)), 0u);
}

TEST_F(CachingAllocatorTest, BestFitSplitsAndMergesSmallBlocks) {
  void* p0 = alloc.allocate(0, 256 * KiB, kA);
  void* p1 = alloc.allocate(0, 256 * KiB, kA);
  void* p2 = alloc.allocate(0, 256 * KiB, kA);
  EXPECT_EQ(dev.mallocs, 1);  // all three from one 2 MiB segment, in address order
  EXPECT_EQ(addr(p1), addr(p0) + 256 * KiB);
  EXPECT_EQ(addr(p2), addr(p1) + 256 * KiB);
  alloc.deallocate(p1, kA);
  alloc.deallocate(p0, kA);
  // Free now: [p0, 512 KiB) merged from two blocks, and the 1.25 MiB tail after p2. A 512 KiB request fits
  // only the merged block exactly; without merging it would have gone to the tail.
  void* m = alloc.allocate(0, 512 * KiB, kA);
  EXPECT_EQ(m, p0);
  // A 100 KiB request: best fit is the tail (the only free block), cut at its start.
  void* t = alloc.allocate(0, 100 * KiB, kA);
  EXPECT_EQ(addr(t), addr(p2) + 256 * KiB);
  EXPECT_EQ(dev.mallocs, 1);
  // Freeing everything merges the segment back into one block, which empty_cache gives back.
  for (void* p : {m, p2, t}) alloc.deallocate(p, kA);
  EXPECT_EQ(st().segments, 1u);
  alloc.empty_cache();
  EXPECT_EQ(dev.frees, 1);
  EXPECT_TRUE(dev.segments.empty());
  EXPECT_EQ(st().reserved_bytes, 0u);
  EXPECT_EQ(st().segments, 0u);
}

TEST_F(CachingAllocatorTest, BestFitPrefersTheSmallestBlockThatFits) {
  void* big = alloc.allocate(0, 64 * MiB, kA);
  void* mid = alloc.allocate(0, 8 * MiB, kA);
  alloc.deallocate(big, kA);
  alloc.deallocate(mid, kA);
  EXPECT_EQ(alloc.allocate(0, 6 * MiB, kA), mid);  // 8 MiB fits better than 64
  void* rest = alloc.allocate(0, 2 * MiB, kA);     // the 2 MiB split off the 8 MiB block
  EXPECT_EQ(addr(rest), addr(mid) + 6 * MiB);
  void* cut = alloc.allocate(0, 10 * MiB, kA);  // the 64 MiB block, split
  EXPECT_EQ(cut, big);
  EXPECT_EQ(alloc.allocate(0, 54 * MiB, kA), static_cast<void*>(static_cast<char*>(big) + 10 * MiB));
  EXPECT_EQ(dev.mallocs, 2);
  EXPECT_EQ(st().cache_hits, 4u);
}

TEST_F(CachingAllocatorTest, StatsAndPeaks) {
  void* a = alloc.allocate(0, 10 * MiB, kA);
  void* b = alloc.allocate(0, 1000, kA);
  MemoryStats s = st();
  EXPECT_EQ(s.allocated_bytes, 10 * MiB + 1024);
  EXPECT_EQ(s.reserved_bytes, 12 * MiB);
  EXPECT_EQ(s.peak_allocated_bytes, s.allocated_bytes);
  EXPECT_EQ(s.active_blocks, 2u);
  EXPECT_EQ(s.segments, 2u);
  alloc.deallocate(a, kA);
  s = st();
  EXPECT_EQ(s.allocated_bytes, 1024u);
  EXPECT_EQ(s.peak_allocated_bytes, 10 * MiB + 1024);
  EXPECT_EQ(s.peak_reserved_bytes, 12 * MiB);
  alloc.reset_peak_stats(0);
  s = st();
  EXPECT_EQ(s.peak_allocated_bytes, 1024u);
  EXPECT_EQ(s.peak_reserved_bytes, 12 * MiB);  // still reserved: the cache holds the 10 MiB block
  alloc.empty_cache();
  alloc.reset_peak_stats(0);
  EXPECT_EQ(st().peak_reserved_bytes, 2 * MiB);
  alloc.deallocate(b, kA);
  s = st();
  EXPECT_EQ(s.allocations, 2u);
  EXPECT_EQ(s.active_blocks, 0u);
  EXPECT_EQ(s.device_mallocs, 2u);
  EXPECT_EQ(s.device_frees, 1u);
  EXPECT_EQ(alloc.stats(3).allocations, 0u);  // a device never used
}

TEST_F(CachingAllocatorTest, EmptyCacheKeepsSegmentsInUse) {
  void* s1 = alloc.allocate(0, 64 * KiB, kA);
  void* s2 = alloc.allocate(0, 64 * KiB, kA);
  void* large = alloc.allocate(0, 6 * MiB, kA);
  alloc.deallocate(s1, kA);
  alloc.deallocate(large, kA);
  alloc.empty_cache();
  EXPECT_EQ(dev.frees, 1);  // the large segment; the small one still holds s2
  EXPECT_EQ(dev.segments.count(addr(large)), 0u);
  EXPECT_EQ(st().reserved_bytes, 2 * MiB);
  EXPECT_EQ(st().allocated_bytes, 64 * KiB);
  alloc.deallocate(s2, kA);
  alloc.empty_cache();
  EXPECT_EQ(dev.frees, 2);
  EXPECT_EQ(dev.used, 0u);
}

TEST_F(CachingAllocatorTest, OutOfMemoryEmptiesTheCacheAndRetriesOnce) {
  dev.capacity = 16 * MiB;
  void* a = alloc.allocate(0, 8 * MiB, kA);
  alloc.deallocate(a, kA);  // cached for A, useless to B
  void* b = alloc.allocate(0, 12 * MiB, kB);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(dev.failed_mallocs, 1);
  EXPECT_EQ(st().oom_retries, 1u);
  EXPECT_EQ(st().device_frees, 1u);  // A's segment went back
  EXPECT_EQ(st().reserved_bytes, 12 * MiB);

  // 6 MiB more cannot fit even with an empty cache: a clear error, with the numbers.
  try {
    alloc.allocate(0, 6 * MiB, kB);
    FAIL() << "expected an out-of-memory error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("out of memory"), std::string::npos) << m;
    EXPECT_NE(m.find("tried to allocate 6.00 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("4.00 MiB free of 16.00 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("12.00 MiB allocated"), std::string::npos) << m;
    EXPECT_NE(m.find("12.00 MiB reserved"), std::string::npos) << m;
    EXPECT_NE(m.find(":0"), std::string::npos) << m;
  }
  EXPECT_EQ(st().oom_retries, 2u);
  EXPECT_EQ(st().ooms, 1u);
  EXPECT_EQ(st().allocated_bytes, 12 * MiB);  // the failure changed nothing

  // And the allocator still works.
  void* c = alloc.allocate(0, 4 * MiB, kB);
  EXPECT_NE(c, nullptr);
  alloc.deallocate(b, kB);
  alloc.deallocate(c, kB);
  void* d = alloc.allocate(0, 12 * MiB, kB);
  EXPECT_EQ(d, b);
}

// A limit on what may be reserved acts as the device running out: the cache's wholly free segments go back
// first, and what still does not fit under the limit is an OutOfMemoryError that names the limit.
TEST_F(CachingAllocatorTest, AMemoryLimitCapsWhatIsReserved) {
  alloc.set_memory_limit(0, 10 * MiB);
  void* a = alloc.allocate(0, 4 * MiB, kA);
  alloc.deallocate(a, kA);  // cached: 4 MiB reserved
  void* b = alloc.allocate(0, 8 * MiB, kA);  // 4 + 8 would pass 10: the free 4 MiB segment goes back first
  EXPECT_EQ(st().reserved_bytes, 8 * MiB);
  EXPECT_EQ(st().device_frees, 1u);
  EXPECT_EQ(dev.failed_mallocs, 0);  // refused by the limit, not by the device
  try {
    alloc.allocate(0, 4 * MiB, kA);
    FAIL() << "expected an OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("at most 10.00 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("segment of 4.00 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("8.00 MiB reserved"), std::string::npos) << m;
  }
  EXPECT_EQ(st().ooms, 1u);
  void* c = alloc.allocate(0, 2 * MiB, kA);  // 8 + 2 is within it
  EXPECT_NE(c, nullptr);
  alloc.set_memory_limit(0, 0);  // no limit
  void* d = alloc.allocate(0, 64 * MiB, kA);
  EXPECT_EQ(st().reserved_bytes, 74 * MiB);
  for (void* p : {b, c, d}) alloc.deallocate(p, kA);
}

// Running out of the device itself is an OutOfMemoryError too, which a batch-size search catches; under a cap
// with room left, the message does not blame the cap.
TEST_F(CachingAllocatorTest, RunningOutOfTheDeviceIsAnOutOfMemoryError) {
  dev.capacity = 4 * MiB;
  EXPECT_THROW(alloc.allocate(0, size_t{1} << 63, kA), OutOfMemoryError);
  alloc.set_memory_limit(0, 100 * MiB);
  try {
    alloc.allocate(0, 6 * MiB, kA);
    FAIL() << "expected an OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("4.00 MiB free of 4.00 MiB"), std::string::npos) << m;
    EXPECT_EQ(m.find("at most"), std::string::npos) << m;
  }
}

TEST_F(CachingAllocatorTest, OutOfMemoryWaitsForBlocksPendingOnOtherStreams) {
  dev.capacity = 8 * MiB;
  void* a = alloc.allocate(0, 8 * MiB, kA);
  alloc.record_stream(a, kB);
  alloc.deallocate(a, kA);  // pending on B's work
  void* again = alloc.allocate(0, 8 * MiB, kA);  // no memory left: the allocator waits for B, then reuses
  EXPECT_EQ(again, a);
  EXPECT_EQ(dev.waits, 1);
  EXPECT_EQ(st().oom_retries, 1u);
  EXPECT_TRUE(dev.events.empty());
}

TEST_F(CachingAllocatorTest, RecordStreamDelaysReuseUntilThatStreamIsDone) {
  void* p = alloc.allocate(0, 64 * KiB, kA);
  alloc.record_stream(p, kB);
  alloc.record_stream(p, kA);  // its own stream: nothing to wait for
  alloc.deallocate(p, kA);
  EXPECT_EQ(dev.events.size(), 1u);
  EXPECT_EQ(st().allocated_bytes, 0u);
  void* q = alloc.allocate(0, 64 * KiB, kA);
  EXPECT_NE(q, p);  // B may still be using p
  dev.finish(kA);   // A finishing is not enough
  void* r = alloc.allocate(0, 64 * KiB, kA);
  EXPECT_NE(r, p);
  dev.finish(kB);
  void* s = alloc.allocate(0, 64 * KiB, kA);
  EXPECT_EQ(s, p);
  EXPECT_TRUE(dev.events.empty());
  EXPECT_EQ(dev.waits, 0);  // nobody blocked
  for (void* x : {q, r, s}) alloc.deallocate(x, kA);
}

TEST_F(CachingAllocatorTest, FreeingOnAnotherStreamCountsAsAUseThere) {
  void* p = alloc.allocate(0, 3 * MiB, kA);
  alloc.deallocate(p, kB);  // last used (and freed) under stream B
  void* q = alloc.allocate(0, 3 * MiB, kA);
  EXPECT_NE(q, p);
  dev.finish(kB);
  alloc.deallocate(q, kA);
  // Both 4 MiB blocks are free now; best fit takes the lower address among equal sizes.
  void* r = alloc.allocate(0, 3 * MiB, kA);
  EXPECT_EQ(r, std::min(p, q));
  EXPECT_TRUE(dev.events.empty());
}

TEST_F(CachingAllocatorTest, EmptyCacheWaitsForPendingBlocks) {
  void* p = alloc.allocate(0, 4 * MiB, kA);
  alloc.record_stream(p, kB);
  alloc.deallocate(p, kA);
  alloc.empty_cache();
  EXPECT_EQ(dev.waits, 1);
  EXPECT_EQ(dev.used, 0u);
  EXPECT_EQ(st().reserved_bytes, 0u);
}

TEST_F(CachingAllocatorTest, UnknownPointersAreErrors) {
  void* p = alloc.allocate(0, 100, kA);
  alloc.deallocate(p, kA);
  EXPECT_THROW(alloc.deallocate(p, kA), Error);  // twice
  int x = 0;
  EXPECT_THROW(alloc.record_stream(&x, kB), Error);
  EXPECT_EQ(alloc.stream_of(&x), nullptr);
  EXPECT_EQ(alloc.block_size(&x), 0u);
}

// Live blocks never overlap and lie inside live segments; the stats add up; everything goes back at the end.
void check_invariants(const std::map<uintptr_t, size_t>& live, FakeDevice& dev, CachingAllocator& alloc) {
  size_t total = 0;
  uintptr_t end_of_last = 0;
  for (auto [a, n] : live) {
    ASSERT_GE(a, end_of_last) << "blocks overlap";
    end_of_last = a + n;
    total += n;
    auto seg = dev.segments.upper_bound(a);
    ASSERT_NE(seg, dev.segments.begin());
    --seg;
    ASSERT_LE(a + n, seg->first + seg->second) << "block outside its segment";
  }
  MemoryStats s = alloc.stats(0);
  ASSERT_EQ(s.allocated_bytes, total);
  ASSERT_EQ(s.active_blocks, live.size());
  ASSERT_EQ(s.reserved_bytes, dev.used);
  ASSERT_EQ(s.segments, dev.segments.size());
}

TEST_F(CachingAllocatorTest, RandomTrafficKeepsBlocksApartAndStatsRight) {
  dev.capacity = size_t{1} << 40;
  std::mt19937 rng(61);
  std::map<uintptr_t, size_t> live;  // address -> rounded size
  std::map<uintptr_t, StreamHandle> owner;
  for (int step = 0; step < 4000; ++step) {
    if (live.empty() || rng() % 2 == 0) {
      size_t n = rng() % 4 == 0 ? 1 + rng() % (12 * MiB) : 1 + rng() % (300 * KiB);
      StreamHandle s = stream(1 + rng() % 3);
      void* p = alloc.allocate(0, n, s);
      ASSERT_EQ(alloc.block_size(p), CachingAllocator::round_size(n));
      live[addr(p)] = alloc.block_size(p);
      owner[addr(p)] = s;
      if (rng() % 5 == 0) alloc.record_stream(p, stream(1 + rng() % 3));
    } else {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      alloc.deallocate(reinterpret_cast<void*>(it->first), owner[it->first]);
      owner.erase(it->first);
      live.erase(it);
    }
    if (step % 50 == 0) dev.finish(stream(1 + rng() % 3));
    if (step % 997 == 0) alloc.empty_cache();
    check_invariants(live, dev, alloc);
  }
  for (auto [a, n] : live) alloc.deallocate(reinterpret_cast<void*>(a), owner[a]);
  alloc.empty_cache();
  EXPECT_EQ(dev.used, 0u);
  EXPECT_TRUE(dev.events.empty());
  EXPECT_GT(st().cache_hits, st().allocations / 2);  // the cache does serve most requests
}

TEST_F(CachingAllocatorTest, ThreadsNeverGetOverlappingBlocks) {
  dev.capacity = size_t{1} << 40;  // addresses only: nothing is backed by memory
  std::mutex live_mutex;
  std::map<uintptr_t, size_t> live;
  bool overlap = false;
  auto worker = [&](int id) {
    std::mt19937 rng(100 + id);
    std::vector<void*> mine;
    for (int i = 0; i < 2000; ++i) {
      if (mine.empty() || rng() % 2 == 0) {
        size_t n = 1 + rng() % (3 * MiB);
        void* p = alloc.allocate(0, n, stream(1 + id % 2));
        std::lock_guard<std::mutex> lock(live_mutex);
        auto next = live.lower_bound(addr(p));
        if (next != live.end() && next->first < addr(p) + n) overlap = true;
        if (next != live.begin() && std::prev(next)->first + std::prev(next)->second > addr(p)) overlap = true;
        live[addr(p)] = n;
        mine.push_back(p);
      } else {
        size_t k = rng() % mine.size();
        {
          std::lock_guard<std::mutex> lock(live_mutex);
          live.erase(addr(mine[k]));
        }
        alloc.deallocate(mine[k], stream(1 + id % 2));
        mine.erase(mine.begin() + k);
      }
    }
    for (void* p : mine) {
      {
        std::lock_guard<std::mutex> lock(live_mutex);
        live.erase(addr(p));
      }
      alloc.deallocate(p, stream(1 + id % 2));
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back(worker, i);
  for (auto& t : threads) t.join();
  EXPECT_FALSE(overlap);
  EXPECT_EQ(st().allocated_bytes, 0u);
  // Every allocation was a cache hit or got a fresh segment (the device never ran out here).
  EXPECT_EQ(st().allocations, st().cache_hits + st().device_mallocs);
  alloc.empty_cache();
  EXPECT_EQ(dev.used, 0u);
}

}  // namespace
}  // namespace kiln::cuda
