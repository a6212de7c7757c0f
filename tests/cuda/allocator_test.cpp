// The caching CUDA allocator with real tensors: reuse, statistics against cudaMemGetInfo, empty_cache, streams
// (a stream held at a host function makes "not yet reusable" deterministic), poison on reuse, pinned host
// memory (its cache, non-blocking copies, a loader's pinned batches) and out-of-memory recovery. The bookkeeping itself is tested on the CPU (caching_allocator_test.cpp).
//
// Most tests allocate on a fresh stream of their own: its pool starts empty, so which block comes back is
// known exactly, whatever other tests left cached on the default stream.
#include "cuda/cuda_test_util.h"

// Streams and cudaMemGetInfo need the CUDA runtime; without CUDA every test here would skip anyway.
#ifdef KILN_WITH_CUDA

#include <atomic>
#include <chrono>
#include <thread>

#include "kiln/data/dataloader.h"
#include "kiln/tensor/caching_allocator.h"
#include "kiln/tensor/cuda/stream.h"

namespace kiln {
namespace {

using test::MiB;

const TensorOptions kF32Cuda = TensorOptions(kFloat32).device(Device::cuda(0));

void* ptr(const Tensor& t) { return t.storage()->data(); }

size_t device_free_bytes() {
  size_t free_b = 0, total_b = 0;
  EXPECT_EQ(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
  return free_b;
}

// Holds a stream at a host function until opened (or destroyed), so that the work queued behind it has
// certainly not run yet.
class Gate {
 public:
  explicit Gate(cuda::Stream s) : stream_(s) {
    EXPECT_EQ(cudaLaunchHostFunc(s.handle, &Gate::wait, this), cudaSuccess);
  }
  ~Gate() {
    open();
    cudaStreamSynchronize(stream_.handle);  // the host function reads this object
  }
  void open() { open_.store(true); }
  // Whether the gate gave up waiting (20 s): a test whose host thread blocked on the held stream, instead of
  // hanging.
  bool timed_out() const { return timed_out_.load(); }

 private:
  static void CUDART_CB wait(void* self) {
    Gate& g = *static_cast<Gate*>(self);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!g.open_.load()) {
      if (std::chrono::steady_clock::now() > until) {
        g.timed_out_.store(true);
        return;
      }
      std::this_thread::yield();
    }
  }
  cuda::Stream stream_;
  std::atomic<bool> open_{false}, timed_out_{false};
};

using CudaAllocator = test::CudaTest;

TEST_F(CudaAllocator, ReusesAFreedBlockOnItsStream) {
  cuda::Stream s = cuda::Stream::create(0);
  cuda::StreamGuard guard(s);
  cuda::MemoryStats before = cuda::memory_stats(0);
  Tensor a = empty({1000, 1000}, kF32Cuda);
  void* pa = ptr(a);
  a = Tensor();
  Tensor b = empty({999, 1001}, kF32Cuda);  // a little smaller: the same 4 MiB block
  EXPECT_EQ(ptr(b), pa);
  cuda::MemoryStats after = cuda::memory_stats(0);
  EXPECT_EQ(after.allocations - before.allocations, 2u);
  EXPECT_EQ(after.cache_hits - before.cache_hits, 1u);
  EXPECT_EQ(after.device_mallocs - before.device_mallocs, 1u);
  s.synchronize();
}

TEST_F(CudaAllocator, StatsFollowTensorsAndTheDevice) {
  cuda::empty_cache();
  cuda::Stream s = cuda::Stream::create(0);
  cuda::StreamGuard guard(s);
  cuda::MemoryStats before = cuda::memory_stats(0);
  EXPECT_EQ(cuda::memory_stats(-1).allocations, before.allocations);  // device 0 is current
  size_t free_before = device_free_bytes();

  const size_t big = 256 * MiB + 12;  // a large block: rounds up to 258 MiB
  const size_t big_block = (big + 2 * MiB - 1) / (2 * MiB) * (2 * MiB);
  Tensor x = empty({static_cast<int64_t>(big)}, TensorOptions(kUInt8).device(Device::cuda(0)));
  Tensor y = empty({1000}, kF32Cuda);  // a small block: 4000 bytes round up to 4096, in a 2 MiB segment
  cuda::MemoryStats during = cuda::memory_stats(0);
  EXPECT_EQ(during.allocated_bytes - before.allocated_bytes, big_block + 4096);
  EXPECT_EQ(during.reserved_bytes - before.reserved_bytes, big_block + 2 * MiB);
  EXPECT_EQ(cuda::memory_allocated(0), during.allocated_bytes);
  EXPECT_EQ(cuda::memory_reserved(0), during.reserved_bytes);
  EXPECT_EQ(during.active_blocks - before.active_blocks, 2u);
  EXPECT_EQ(during.device_mallocs - before.device_mallocs, 2u);
  EXPECT_GE(during.peak_allocated_bytes, during.allocated_bytes);
  EXPECT_GE(free_before - device_free_bytes(), big_block);  // the device agrees the memory is taken

  x = Tensor();
  y = Tensor();
  cuda::MemoryStats freed = cuda::memory_stats(0);
  EXPECT_EQ(freed.allocated_bytes, before.allocated_bytes);
  EXPECT_EQ(freed.reserved_bytes, during.reserved_bytes);  // cached, not given back
  EXPECT_EQ(freed.peak_allocated_bytes, during.peak_allocated_bytes);
  cuda::reset_peak_memory_stats(0);
  EXPECT_EQ(cuda::memory_stats(0).peak_allocated_bytes, freed.allocated_bytes);
  EXPECT_EQ(cuda::memory_stats(0).peak_reserved_bytes, freed.reserved_bytes);

  size_t free_cached = device_free_bytes();
  s.synchronize();
  cuda::empty_cache();
  cuda::MemoryStats emptied = cuda::memory_stats(0);
  EXPECT_EQ(emptied.reserved_bytes, before.reserved_bytes);
  EXPECT_EQ(emptied.device_frees - before.device_frees, 2u);
  EXPECT_GE(device_free_bytes() - free_cached, big_block);  // and the device has it back
}

TEST_F(CudaAllocator, StreamsDoNotShareCachedBlocks) {
  cuda::Stream s1 = cuda::Stream::create(0), s2 = cuda::Stream::create(0);
  void* p1 = nullptr;
  {
    cuda::StreamGuard g(s1);
    Tensor a = full({1 << 20}, 1.0, kF32Cuda);
    p1 = ptr(a);
  }
  {
    cuda::StreamGuard g(s2);
    Tensor b = full({1 << 20}, 2.0, kF32Cuda);  // s1's cached block would race with s1's queued work
    EXPECT_NE(ptr(b), p1);
    s2.synchronize();
    EXPECT_EQ(test::values(b.cpu()), std::vector<double>(1 << 20, 2.0));
  }
  {
    cuda::StreamGuard g(s1);
    Tensor c = full({1 << 20}, 3.0, kF32Cuda);
    EXPECT_EQ(ptr(c), p1);
    s1.synchronize();
    EXPECT_EQ(test::values(c.cpu()), std::vector<double>(1 << 20, 3.0));
  }
}

TEST_F(CudaAllocator, ABlockUsedOnAnotherStreamWaitsForIt) {
  cuda::Stream s1 = cuda::Stream::create(0), s2 = cuda::Stream::create(0);
  cuda::StreamGuard g(s1);
  const size_t n = 1 << 20;
  // record_stream: x is used on s2, whose work cannot have run (the gate holds it).
  {
    Tensor x = full({static_cast<int64_t>(n)}, 1.0, kF32Cuda);
    void* px = ptr(x);
    Gate gate(s2);
    cuda::record_stream(x, s2);
    x = Tensor();
    Tensor y = empty({static_cast<int64_t>(n)}, kF32Cuda);
    EXPECT_NE(ptr(y), px);  // s2 may still read x
    gate.open();
    s2.synchronize();
    Tensor z = empty({static_cast<int64_t>(n)}, kF32Cuda);
    EXPECT_EQ(ptr(z), px);  // now it may be reused
  }
  // Freeing under another stream counts as a use there: the block's last reader was likely on it.
  {
    Tensor x = full({static_cast<int64_t>(n)}, 1.0, kF32Cuda);
    void* px = ptr(x);
    {
      Gate gate(s2);
      cuda::StreamGuard on_s2(s2);
      x = Tensor();
      cuda::StreamGuard back(s1);
      Tensor y = empty({static_cast<int64_t>(n)}, kF32Cuda);
      EXPECT_NE(ptr(y), px);
    }
    s2.synchronize();
    Tensor z = empty({static_cast<int64_t>(n)}, kF32Cuda);
    EXPECT_EQ(ptr(z), px);
  }
  s1.synchronize();
  EXPECT_THROW(cuda::record_stream(full({3}, 1.0), s2), Error);  // a CPU tensor
}

TEST_F(CudaAllocator, PoisonsEveryBlockItHandsOutAlsoReusedOnes) {
  cuda::Stream s = cuda::Stream::create(0);
  cuda::StreamGuard g(s);
  const int64_t n = 1 << 20;
  Tensor a = full({n}, 1.5, kF32Cuda);
  void* pa = ptr(a);
  a = Tensor();
  Tensor b = empty({n}, kF32Cuda);
  ASSERT_EQ(ptr(b), pa);
  s.synchronize();
  for (double v : test::values(b.cpu())) ASSERT_TRUE(std::isnan(v)) << "a reused block kept its old values";
  b = Tensor();
  Tensor c = empty({n}, TensorOptions(kInt32).device(Device::cuda(0)));
  ASSERT_EQ(ptr(c), pa);
  s.synchronize();
  EXPECT_EQ(test::values(c.cpu()), std::vector<double>(n, -1.0));
  c = Tensor();
  // Without poison the old contents stay: the NaNs above came from the poison, not from fresh memory.
  cuda::set_poison_allocations(false);
  Tensor d = full({n}, 2.5, kF32Cuda);
  d = Tensor();
  Tensor e = empty({n}, kF32Cuda);
  ASSERT_EQ(ptr(e), pa);
  s.synchronize();
  EXPECT_EQ(test::values(e.cpu()), std::vector<double>(n, 2.5));
  cuda::set_poison_allocations(true);
}

TEST_F(CudaAllocator, PinnedMemoryRoundTrip) {
  EXPECT_EQ(cuda::alloc_pinned(0), nullptr);
  void* raw = cuda::alloc_pinned(3 * MiB);
  EXPECT_TRUE(cuda::is_pinned(raw));
  cuda::free_pinned(raw);

  Tensor h = cuda::empty_pinned({1000, 3}, kFloat32);
  EXPECT_TRUE(h.device().is_cpu());
  EXPECT_EQ(h.sizes(), (Shape{1000, 3}));
  EXPECT_TRUE(cuda::is_pinned(h.raw_data_ptr()));
  EXPECT_FALSE(cuda::is_pinned(zeros({1000}).raw_data_ptr()));
  float* p = h.data_ptr<float>();
  std::vector<double> want(3000);
  for (int i = 0; i < 3000; ++i) want[i] = p[i] = 0.25f * static_cast<float>(i) - 100.0f;
  Tensor g = h.to(Device::cuda(0));
  EXPECT_EQ(test::values(g.cpu()), want);
  Tensor back = cuda::empty_pinned({1000, 3}, kFloat32);
  back.copy_(g);
  EXPECT_EQ(test::values(back), want);
}

// Non-blocking copies between kiln's pinned memory and the GPU are only queued: behind a closed gate they have
// not run, and the pinned block a waiting copy reads or writes is not handed out again, though its tensor is
// gone (another block is). Once the gate opens the results are right and the blocks are reused. Pinned
// blocks are made before the gate closes: pinning memory may wait for the device.
TEST_F(CudaAllocator, NonBlockingCopiesQueueAndKeepTheirPinnedMemoryFromReuse) {
  cuda::Stream s = cuda::Stream::create(0);
  cuda::StreamGuard guard(s);
  const int64_t n = int64_t{1} << 20;  // 4 MiB of float32: one size class for every block below
  {
    std::vector<Tensor> spare;
    for (int i = 0; i < 6; ++i) spare.push_back(cuda::empty_pinned({n}, kFloat32));
  }  // six idle blocks of the class in the cache: enough for every one taken below
  Tensor host = cuda::empty_pinned({n}, kFloat32);
  host.fill_(1.5);
  Tensor bytes = cuda::empty_pinned({n}, kUInt8);
  bytes.fill_(200);
  void* host_block = host.raw_data_ptr();
  Tensor dev, widened, back;
  void* dropped_block = nullptr;
  {
    Gate gate(s);
    dev = host.to(Device::cuda(0), /*non_blocking=*/true);  // returns: the copy waits behind the gate
    widened = bytes.to(Device::cuda(0), kFloat32, /*non_blocking=*/true);  // moved as bytes, widened on the GPU
    host = Tensor();  // dropped while its copy waits
    Tensor next = cuda::empty_pinned({n}, kFloat32);
    EXPECT_NE(next.raw_data_ptr(), host_block) << "a block was handed out again while a copy from it waited";
    next.fill_(-7.0);  // would overwrite what the waiting copy is to read, had the block been reused
    Tensor dropped = dev.to(kCPU, /*non_blocking=*/true);  // device to host: a pinned result, the copy queued
    EXPECT_TRUE(cuda::is_pinned(dropped.raw_data_ptr()));
    dropped_block = dropped.raw_data_ptr();
    dropped = Tensor();  // dropped while the copy into it waits
    Tensor other = cuda::empty_pinned({n}, kFloat32);
    EXPECT_NE(other.raw_data_ptr(), dropped_block) << "a block was handed out again while a copy into it waited";
    back = dev.to(kCPU, /*non_blocking=*/true);
    gate.open();
    s.synchronize();
    EXPECT_FALSE(gate.timed_out()) << "the host waited for the held stream: a copy did not just queue";
  }
  EXPECT_EQ(test::values(dev.cpu()), std::vector<double>(n, 1.5));
  EXPECT_EQ(test::values(back), std::vector<double>(n, 1.5));
  EXPECT_EQ(test::values(widened.cpu()), std::vector<double>(n, 200.0));
  const uint64_t hits = cuda::pinned_memory_stats().cache_hits;
  Tensor again = cuda::empty_pinned({n}, kFloat32);
  EXPECT_EQ(cuda::pinned_memory_stats().cache_hits, hits + 1) << "the copies have run: their blocks are reusable";
  // Into pinned memory that is not laid out as the source, non_blocking still waits: the host lays the data
  // out, so it must have arrived, and reading it at once gives it.
  Tensor rows = arange(2 * n, TensorOptions(kFloat32)).view({2, n});
  Tensor wide = cuda::empty_pinned({n, 2}, kFloat32);
  wide.t().copy_(rows.to(Device::cuda(0)), /*non_blocking=*/true);
  EXPECT_EQ(test::values(wide.t()), test::values(rows));
}

// A loader with pin_memory builds its batches in pinned memory (on its workers too), and the Trainer's
// non-blocking copy of such a batch gives the batch.
TEST_F(CudaAllocator, DataLoaderPinsItsBatches) {
  std::vector<double> xs;
  for (int i = 0; i < 40; ++i) xs.push_back(i * 0.5);
  auto ds = std::make_shared<data::TensorDataset>(
      std::vector<Tensor>{test::make_tensor(xs, {20, 2}, kFloat32), arange(20)});
  for (int workers : {0, 2}) {
    data::DataLoader loader(ds, {.batch_size = 8, .num_workers = workers, .pin_memory = true});
    EXPECT_TRUE(loader.pins_memory());
    int64_t seen = 0;
    for (auto& batch : loader) {
      for (const Tensor& t : batch) EXPECT_TRUE(cuda::is_pinned(t.raw_data_ptr())) << workers << " workers";
      Tensor x = batch[0].to(Device::cuda(0), true), y = batch[1].to(Device::cuda(0), true);
      const std::vector<double> want(xs.begin() + 2 * seen, xs.begin() + 2 * (seen + batch[1].numel()));
      EXPECT_EQ(test::values(x.cpu()), want);
      EXPECT_EQ(test::values(y.cpu())[0], static_cast<double>(seen));
      seen += batch[1].numel();
    }
    EXPECT_EQ(seen, 20);
  }
}

TEST_F(CudaAllocator, TooLargeAnAllocationFailsClearlyAndTheAllocatorRecovers) {
  cuda::MemoryStats before = cuda::memory_stats(0);
  try {
    Tensor huge = empty({int64_t{1} << 40}, TensorOptions(kUInt8).device(Device::cuda(0)));  // 1 TiB
    FAIL() << "a 1 TiB allocation succeeded";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("out of memory"), std::string::npos) << m;
    EXPECT_NE(m.find("tried to allocate 1.00 TiB"), std::string::npos) << m;
    EXPECT_NE(m.find("cuda:0"), std::string::npos) << m;
    EXPECT_NE(m.find("free of"), std::string::npos) << m;
  }
  cuda::MemoryStats after = cuda::memory_stats(0);
  EXPECT_EQ(after.ooms - before.ooms, 1u);
  EXPECT_EQ(after.oom_retries - before.oom_retries, 1u);
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // the failed cudaMalloc left no error behind

  Tensor x = full({5000}, 3.0, kF32Cuda);
  EXPECT_EQ(test::values(x.cpu()), std::vector<double>(5000, 3.0));
}

}  // namespace
}  // namespace kiln

#endif  // KILN_WITH_CUDA
