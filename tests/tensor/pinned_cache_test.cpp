// The pinned host memory cache's bookkeeping on the CPU, over a fake runtime: addresses are numbers that are
// never dereferenced, the host pins up to a fixed amount, and each event completes only when the test says so.
// The expectations follow the rules in pinned_cache.h.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "kiln/tensor/error.h"
#include "test_util.h"
#include "kiln/tensor/pinned_cache.h"

namespace kiln::cuda {
namespace {

using test::KiB;
using test::MiB;

struct FakeHost {
  std::mutex mutex;  // the cache calls host_alloc and host_free without its own lock
  size_t capacity = 64 * MiB, pinned = 0;
  uintptr_t next = uintptr_t{1} << 32;
  std::map<uintptr_t, size_t> live;
  int allocs = 0, frees = 0, refusals = 0;
  struct Event {
    int device;
    void* stream;
    bool done = false;
    bool released = false;
  };
  std::map<uintptr_t, Event> events;
  uintptr_t next_event = 1;
};

class FakePinnedMemory final : public PinnedMemory {
 public:
  explicit FakePinnedMemory(std::shared_ptr<FakeHost> host) : host_(std::move(host)) {}
  void* host_alloc(size_t nbytes) override {
    std::lock_guard<std::mutex> lock(host_->mutex);
    if (host_->pinned + nbytes > host_->capacity) {
      ++host_->refusals;
      return nullptr;
    }
    const uintptr_t a = host_->next;
    host_->next += nbytes + 4096;  // a gap: a pointer one past a block is in no block
    host_->live[a] = nbytes;
    host_->pinned += nbytes;
    ++host_->allocs;
    return reinterpret_cast<void*>(a);
  }
  void host_free(void* ptr) override {
    std::lock_guard<std::mutex> lock(host_->mutex);
    auto it = host_->live.find(reinterpret_cast<uintptr_t>(ptr));
    ASSERT_NE(it, host_->live.end()) << "freed a block it was not given";
    host_->pinned -= it->second;
    host_->live.erase(it);
    ++host_->frees;
  }
  void* record_event(int device, void* stream) override {
    std::lock_guard<std::mutex> lock(host_->mutex);
    const uintptr_t id = host_->next_event++;
    host_->events[id] = FakeHost::Event{device, stream};
    return reinterpret_cast<void*>(id);
  }
  bool event_done(int, void* event) override {
    std::lock_guard<std::mutex> lock(host_->mutex);
    return host_->events.at(reinterpret_cast<uintptr_t>(event)).done;
  }
  void release_event(int, void* event) override {
    std::lock_guard<std::mutex> lock(host_->mutex);
    FakeHost::Event& e = host_->events.at(reinterpret_cast<uintptr_t>(event));
    EXPECT_FALSE(e.released) << "an event released twice";
    e.released = true;
  }

 private:
  std::shared_ptr<FakeHost> host_;
};

struct Fixture {
  std::shared_ptr<FakeHost> host = std::make_shared<FakeHost>();
  std::unique_ptr<PinnedCache> cache = std::make_unique<PinnedCache>(std::make_unique<FakePinnedMemory>(host));
  void* stream = reinterpret_cast<void*>(0x5);
  // Completes every event recorded so far.
  void finish_all() {
    std::lock_guard<std::mutex> lock(host->mutex);
    for (auto& [id, e] : host->events) e.done = true;
  }
};

TEST(PinnedCache, RoundsToPowersOfTwoOfAtLeastFourKiB) {
  EXPECT_EQ(PinnedCache::round_size(1), 4 * KiB);
  EXPECT_EQ(PinnedCache::round_size(4 * KiB), 4 * KiB);
  EXPECT_EQ(PinnedCache::round_size(4 * KiB + 1), 8 * KiB);
  EXPECT_EQ(PinnedCache::round_size(3 * MiB), 4 * MiB);
  EXPECT_EQ(PinnedCache::round_size(401408), 512 * KiB);  // a 128 x 28 x 28 float32 batch
}

TEST(PinnedCache, AFreedBlockServesTheNextRequestOfItsClassWithoutPinningAgain) {
  Fixture f;
  EXPECT_EQ(f.cache->allocate(0), nullptr);
  void* a = f.cache->allocate(300 * KiB);
  EXPECT_EQ(f.host->allocs, 1);
  EXPECT_EQ(f.host->live.at(reinterpret_cast<uintptr_t>(a)), 512 * KiB);
  f.cache->release(a);
  void* b = f.cache->allocate(500 * KiB);  // the same class
  EXPECT_EQ(b, a);
  void* c = f.cache->allocate(600 * KiB);  // the next class: fresh
  EXPECT_NE(c, a);
  EXPECT_EQ(f.host->allocs, 2);
  const PinnedStats s = f.cache->stats();
  EXPECT_EQ(s.allocations, 3u);
  EXPECT_EQ(s.cache_hits, 1u);
  EXPECT_EQ(s.allocated_bytes, 512 * KiB + 1 * MiB);
  EXPECT_EQ(s.cached_bytes, 0u);
  f.cache->release(b);
  f.cache->release(c);
  EXPECT_EQ(f.cache->stats().cached_bytes, 512 * KiB + 1 * MiB);
  EXPECT_EQ(f.cache->stats().allocated_bytes, 0u);
}

TEST(PinnedCache, ABlockAPendingCopyUsesIsNotHandedOutUntilTheCopyHasRun) {
  Fixture f;
  void* batch = f.cache->allocate(100 * KiB);
  // A copy from the middle of the block (a view of a pinned tensor) is queued; the tensor is dropped at once.
  EXPECT_TRUE(f.cache->record_use(static_cast<char*>(batch) + 1000, 0, f.stream));
  f.cache->release(batch);
  void* next = f.cache->allocate(100 * KiB);
  EXPECT_NE(next, batch) << "handed out while the copy may still read it";
  EXPECT_EQ(f.host->allocs, 2);
  f.finish_all();
  f.cache->release(next);
  void* third = f.cache->allocate(100 * KiB);  // both are free now: the most recently freed first
  EXPECT_EQ(third, next);
  void* fourth = f.cache->allocate(100 * KiB);
  EXPECT_EQ(fourth, batch) << "the copy has run: the block is reusable";
  EXPECT_EQ(f.host->allocs, 2);
  for (auto& [id, e] : f.host->events) EXPECT_TRUE(e.released) << "event " << id << " leaked";
}

TEST(PinnedCache, AnOlderFreeBlockServesWhenTheNewestIsBusy) {
  Fixture f;
  void* older = f.cache->allocate(8 * KiB);
  void* newer = f.cache->allocate(8 * KiB);
  f.cache->release(older);
  EXPECT_TRUE(f.cache->record_use(newer, 0, f.stream));
  f.cache->release(newer);  // the most recently freed, but its copy is still running
  EXPECT_EQ(f.cache->allocate(8 * KiB), older);
  EXPECT_NE(f.cache->allocate(8 * KiB), newer);
  EXPECT_EQ(f.host->allocs, 3);
}

TEST(PinnedCache, UsesOfSeveralStreamsAllHaveToComplete) {
  Fixture f;
  void* p = f.cache->allocate(8 * KiB);
  EXPECT_TRUE(f.cache->record_use(p, 0, reinterpret_cast<void*>(0x1)));
  EXPECT_TRUE(f.cache->record_use(p, 1, reinterpret_cast<void*>(0x2)));
  f.cache->release(p);
  f.host->events.begin()->second.done = true;  // the first stream's copy only
  EXPECT_NE(f.cache->allocate(8 * KiB), p);
  f.finish_all();
  EXPECT_EQ(f.cache->allocate(8 * KiB), p);
}

TEST(PinnedCache, AReusedBufferDropsTheEventsOfCopiesThatRan) {
  Fixture f;
  void* p = f.cache->allocate(8 * KiB);
  for (int i = 0; i < 100; ++i) {
    EXPECT_TRUE(f.cache->record_use(p, 0, f.stream));
    f.finish_all();
  }
  int unreleased = 0;
  for (auto& [id, e] : f.host->events) unreleased += e.released ? 0 : 1;
  EXPECT_EQ(unreleased, 1) << "only the latest copy's event is still held";
}

TEST(PinnedCache, KnowsOnlyItsOwnBlocks) {
  Fixture f;
  void* p = f.cache->allocate(4 * KiB);
  EXPECT_TRUE(f.cache->owns(p));
  EXPECT_TRUE(f.cache->owns(static_cast<char*>(p) + 4 * KiB - 1));
  EXPECT_FALSE(f.cache->owns(static_cast<char*>(p) + 4 * KiB));
  EXPECT_FALSE(f.cache->owns(reinterpret_cast<void*>(0x10)));
  EXPECT_FALSE(f.cache->record_use(reinterpret_cast<void*>(0x10), 0, f.stream));
  f.cache->release(reinterpret_cast<void*>(0x10));  // unknown: ignored
  f.cache->release(p);
  f.cache->release(p);  // twice: ignored
  EXPECT_EQ(f.cache->stats().cached_bytes, 4 * KiB);
}

TEST(PinnedCache, WhenTheHostRefusesIdleCachedBlocksGoBackAndTheRequestIsRetried) {
  Fixture f;
  f.host->capacity = 3 * MiB;
  void* a = f.cache->allocate(1 * MiB);
  void* b = f.cache->allocate(1 * MiB);
  EXPECT_TRUE(f.cache->record_use(b, 0, f.stream));  // b's copy is still running
  f.cache->release(a);
  f.cache->release(b);
  void* big = f.cache->allocate(2 * MiB);  // needs a's megabyte back; b must stay
  EXPECT_NE(big, nullptr);
  EXPECT_EQ(f.host->refusals, 1);
  EXPECT_EQ(f.host->live.count(reinterpret_cast<uintptr_t>(a)), 0u);
  EXPECT_EQ(f.host->live.count(reinterpret_cast<uintptr_t>(b)), 1u) << "freed while a copy may still use it";
  try {
    f.cache->allocate(1 * MiB);
    ADD_FAILURE() << "pinned past the host's limit";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("would not pin 1048576 bytes"), std::string::npos) << e.what();
  }
  f.finish_all();
  f.cache->empty();
  EXPECT_EQ(f.host->live.count(reinterpret_cast<uintptr_t>(b)), 0u);
  EXPECT_EQ(f.cache->stats().cached_bytes, 0u);
  f.cache->release(big);
  f.cache.reset();  // gives back the rest
  EXPECT_TRUE(f.host->live.empty());
  EXPECT_EQ(f.host->allocs, f.host->frees);
}

// Loader workers pin batches while the training thread records copies and frees them: the bookkeeping holds
// (no block handed out twice, nothing lost) with every thread at it at once.
TEST(PinnedCache, ThreadsAllocatingRecordingAndReleasingAtOnce) {
  Fixture f;
  f.host->capacity = 1024 * MiB;
  std::atomic<bool> clash{false};
  std::mutex held_mutex;
  std::set<void*> held;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      std::vector<void*> mine;
      for (int i = 0; i < 2000; ++i) {
        if (mine.empty() || rng() % 3 != 0) {
          void* p = f.cache->allocate((rng() % 4 + 1) * 16 * KiB);
          std::lock_guard<std::mutex> lock(held_mutex);
          if (!held.insert(p).second) clash = true;
          mine.push_back(p);
        } else {
          void* p = mine.back();
          mine.pop_back();
          if (rng() % 2) f.cache->record_use(static_cast<char*>(p) + 100, t, f.stream);
          {
            std::lock_guard<std::mutex> lock(held_mutex);
            held.erase(p);
          }
          f.cache->release(p);
        }
        if (i % 100 == 0) f.finish_all();
      }
      for (void* p : mine) {
        {
          std::lock_guard<std::mutex> lock(held_mutex);
          held.erase(p);
        }
        f.cache->release(p);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_FALSE(clash.load()) << "a block was handed to two holders at once";
  const PinnedStats s = f.cache->stats();
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.allocations, s.cache_hits + s.host_allocs);
  f.finish_all();
  f.cache->empty();
  EXPECT_EQ(f.cache->stats().cached_bytes, 0u);
  EXPECT_TRUE(f.host->live.empty());
  for (auto& [id, e] : f.host->events) EXPECT_TRUE(e.released) << "event " << id << " leaked";
}

}  // namespace
}  // namespace kiln::cuda
