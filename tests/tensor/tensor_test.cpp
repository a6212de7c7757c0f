// Tensor basics: storage sharing, metadata, element access, copies and conversion between dtypes.
#include "test_util.h"

namespace kiln {
namespace {

using test::element;
using test::values;

TEST(Tensor, EmptyHasShapeStridesAndDtype) {
  Tensor t = empty({2, 3, 4});
  EXPECT_EQ(t.sizes(), (Shape{2, 3, 4}));
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.dtype(), kFloat32);
  EXPECT_TRUE(t.device().is_cpu());
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data_ptr()) % kCpuAlignment, 0u);
}

TEST(Tensor, UndefinedTensorIsAnError) {
  Tensor t;
  EXPECT_FALSE(t.defined());
  test::expect_error([&] { (void)t.sizes(); }, {"undefined"});
}

TEST(Tensor, CopySharesStorage) {
  Tensor a = zeros({3});
  Tensor b = a;
  b.fill_(7);
  EXPECT_EQ(values(a), (std::vector<double>{7, 7, 7}));
  EXPECT_TRUE(a.shares_storage_with(b));
}

TEST(Tensor, ItemAndDataPtr) {
  Tensor t = full({}, 2.5, kFloat64);
  EXPECT_EQ(t.dim(), 0);
  EXPECT_DOUBLE_EQ(t.item<double>(), 2.5);
  EXPECT_EQ(t.item<int>(), 2);
  test::expect_error([] { (void)ones({2}).item(); }, {"item", "one element", "(2)"});
  test::expect_error([] { (void)ones({2}).data_ptr<double>(); }, {"data_ptr", "float32", "float64"});
}

TEST(Tensor, ConvertsBetweenEveryPairOfDtypes) {
  // Values every dtype holds exactly (bool aside); conversions compared with C++'s own casts.
  const std::vector<double> v{0, 1, 2, 5, 17, 100};
  for (DType from : test::kAllDTypes) {
    for (DType to : test::kAllDTypes) {
      Tensor src = test::make_tensor(v, {6}, from);
      Tensor dst = src.to(to);
      ASSERT_EQ(dst.dtype(), to);
      for (size_t i = 0; i < v.size(); ++i) {
        double want = from == kBool || to == kBool ? (v[i] != 0 ? 1 : 0) : v[i];
        if (from == kBool) want = v[i] != 0;
        EXPECT_EQ(element(dst, static_cast<int64_t>(i)), want) << from << " -> " << to << " element " << i;
      }
    }
  }
}

TEST(Tensor, ToReturnsSelfWhenNothingChanges) {
  Tensor a = ones({2});
  EXPECT_EQ(a.to(kFloat32).impl(), a.impl());
  EXPECT_NE(a.to(kFloat64).impl(), a.impl());
}

TEST(Tensor, FloatToHalfRoundsToNearestEven) {
  // 1 + 2^-11 lies exactly between two half values (1 and 1 + 2^-10): ties go to the even one, 1.
  // 1 + 3 * 2^-11 lies between 1 + 2^-10 and 1 + 2^-9: ties to even gives 1 + 2^-9.
  Tensor t = tensor(std::vector<float>{1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65504.0f, 65520.0f, 1e-8f, -0.0f});
  auto h = t.to(kFloat16).to(kFloat64);
  EXPECT_EQ(values(h), (std::vector<double>{1.0, 1.0 + 0x1p-9, 65504.0, INFINITY, 0.0, -0.0}));
  // bfloat16: 1 + 2^-8 ties between 1 and 1 + 2^-7 -> 1.
  auto b = tensor(std::vector<float>{1.0f + 0x1p-8f, 3.0f}).to(kBFloat16).to(kFloat64);
  EXPECT_EQ(values(b), (std::vector<double>{1.0, 3.0}));
  // Subnormal halves: 2^-24 is the smallest.
  auto s = tensor(std::vector<float>{0x1p-24f, 0x1p-25f * 3}).to(kFloat16).to(kFloat64);
  EXPECT_EQ(values(s), (std::vector<double>{0x1p-24, 0x1p-23}));
}

TEST(Tensor, CopyBroadcastsAndConverts) {
  Tensor dst = zeros({2, 3}, kFloat64);
  dst.copy_(tensor(std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(values(dst), (std::vector<double>{1, 2, 3, 1, 2, 3}));
  uint64_t v = dst.version();
  dst.copy_(ones({1}));
  EXPECT_GT(dst.version(), v);
  test::expect_error([&] { dst.copy_(ones({4})); }, {"copy_", "(4)", "(2, 3)"});
}

TEST(Tensor, CopyIntoTransposedView) {
  Tensor base = zeros({3, 2});
  Tensor view = base.t();  // (2, 3) view of (3, 2) memory
  view.copy_(tensor(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}));
  EXPECT_EQ(values(base), (std::vector<double>{1, 4, 2, 5, 3, 6}));
}

TEST(Tensor, CloneIsIndependentAndContiguous) {
  Tensor a = tensor(std::vector<float>{1, 2, 3, 4}, {2, 2}).t();
  Tensor c = a.clone();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_FALSE(c.shares_storage_with(a));
  EXPECT_EQ(values(c), values(a));
  EXPECT_EQ(a.contiguous().impl() == a.impl(), false);
  Tensor contiguous = ones({3});
  EXPECT_EQ(contiguous.contiguous().impl(), contiguous.impl());
}

TEST(Tensor, ToVector) {
  Tensor t = arange(6).view({2, 3}).t();
  EXPECT_EQ(t.to_vector<int64_t>(), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
}

TEST(Tensor, FromBlobWrapsWithoutCopying) {
  std::vector<float> buf{1, 2, 3, 4, 5, 6};
  bool deleted = false;
  {
    Tensor t = from_blob(buf.data(), {2, 3}, kFloat32, [&](void*) { deleted = true; });
    t.select(1, 0).fill_(0);
    EXPECT_EQ(buf, (std::vector<float>{0, 2, 3, 0, 5, 6}));
  }
  EXPECT_TRUE(deleted);
  Tensor copied = from_buffer(buf.data(), {6}, kFloat32);
  buf[1] = 100;
  EXPECT_EQ(element(copied, 1), 2);
}

TEST(Tensor, CudaDeviceWithoutGpuIsAClearError) {
  if (cuda::is_available()) GTEST_SKIP() << "a GPU is present";
  test::expect_error([] { (void)empty({2}, Device::cuda()); }, {"cuda:0"});
}

TEST(Tensor, DeviceParsing) {
  EXPECT_EQ(Device("cpu"), kCPU);
  EXPECT_EQ(Device("cuda:1"), Device::cuda(1));
  EXPECT_EQ(Device("cuda"), Device::cuda(0));
  test::expect_error([] { Device("gpu"); }, {"Device", "gpu", "cuda:N"});
  test::expect_error([] { Device("cuda:x"); }, {"cuda:x"});
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

TEST(CpuAllocator, ReusesFreedLargeBlocksUpToItsLimit) {
  cpu_empty_cache();
  void* first = nullptr;
  {
    Tensor big = empty({3 << 20});  // 12 MiB
    first = big.raw_data_ptr();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % (2 << 20), 0u);  // huge-page aligned
  }
  CpuCacheStats s = cpu_cache_stats();
  EXPECT_EQ(s.cached_blocks, 1u);
  EXPECT_GE(s.cached_bytes, size_t{12} << 20);
  uint64_t hits = s.hits;
  Tensor again = empty({3 << 20});
  EXPECT_EQ(again.raw_data_ptr(), first);
  EXPECT_EQ(cpu_cache_stats().hits, hits + 1);
  EXPECT_EQ(cpu_cache_stats().cached_bytes, 0u);
  // Blocks under 64 KiB never enter the cache; with a zero limit, nothing does.
  { Tensor small = empty({1000}); }
  EXPECT_EQ(cpu_cache_stats().cached_blocks, 0u);
  // A 256 KiB block (a 256x256 float result) is cached and handed out again, rounded to 4 KiB: a block
  // 100 bytes larger is of another size.
  void* mid_ptr = nullptr;
  {
    Tensor mid = empty({65536});
    mid_ptr = mid.raw_data_ptr();
  }
  EXPECT_EQ(cpu_cache_stats().cached_blocks, 1u);
  EXPECT_EQ(cpu_cache_stats().cached_bytes, size_t{256} << 10);
  { Tensor other = empty({65536 + 25}); }
  EXPECT_EQ(cpu_cache_stats().cached_blocks, 2u);
  hits = cpu_cache_stats().hits;
  Tensor mid_again = empty({65536});
  EXPECT_EQ(mid_again.raw_data_ptr(), mid_ptr);
  EXPECT_EQ(cpu_cache_stats().hits, hits + 1);
  mid_again = Tensor();
  cpu_empty_cache();
  set_cpu_cache_limit(0);
  { Tensor big = empty({3 << 20}); }
  EXPECT_EQ(cpu_cache_stats().cached_blocks, 0u);
  set_cpu_cache_limit(size_t{1} << 30);
  { Tensor big = empty({3 << 20}); }
  EXPECT_EQ(cpu_cache_stats().cached_blocks, 1u);
  cpu_empty_cache();
  EXPECT_EQ(cpu_cache_stats().cached_bytes, 0u);
}

// A block freed into a full cache pushes out the blocks cached longest ago, so sizes used once do not keep
// the sizes in use now out of the cache.
TEST(CpuAllocator, AFullCacheEvictsItsOldestBlocks) {
  cpu_empty_cache();
  set_cpu_cache_limit(size_t{20} << 20);  // room for two of the 8 MiB blocks below, not three
  void* c_ptr = nullptr;
  {
    Tensor a = empty({2 << 20}), b = empty({(2 << 20) + 16384}), c = empty({(2 << 20) + 32768});  // ~8 MiB each
    c_ptr = c.raw_data_ptr();
    a = Tensor();  // freed first: the oldest in the cache
    b = Tensor();
    EXPECT_EQ(cpu_cache_stats().cached_blocks, 2u);
  }  // c freed: a goes back to the system
  CpuCacheStats s = cpu_cache_stats();
  EXPECT_EQ(s.cached_blocks, 2u);
  EXPECT_LE(s.cached_bytes, size_t{20} << 20);
  uint64_t hits = s.hits;
  Tensor c2 = empty({(2 << 20) + 32768});  // c's size is still cached...
  EXPECT_EQ(c2.raw_data_ptr(), c_ptr);
  EXPECT_EQ(cpu_cache_stats().hits, hits + 1);
  Tensor a2 = empty({2 << 20});  // ... a's is not
  EXPECT_EQ(cpu_cache_stats().hits, hits + 1);
  // A block larger than the whole limit is not cached and evicts nothing.
  { Tensor huge = empty({6 << 20}); }
  EXPECT_EQ(cpu_cache_stats().cached_blocks, 1u);
  // Lowering the limit evicts down to it.
  set_cpu_cache_limit(size_t{4} << 20);
  EXPECT_EQ(cpu_cache_stats().cached_blocks, 0u);
  set_cpu_cache_limit(size_t{1} << 30);
  cpu_empty_cache();
}

// What tensors hold, counted as the allocator rounds it (64 bytes under 64 KiB; 4 KiB steps above), with its
// peak; a limit refuses what would pass it with an OutOfMemoryError that says so, and changes nothing.
TEST(CpuAllocator, CountsWhatTensorsHoldAndRefusesWhatPassesTheLimit) {
  struct LiftLimit {
    ~LiftLimit() { set_cpu_memory_limit(0); }
  } lift;
  const size_t base = cpu_memory_stats().allocated_bytes;
  Tensor a = empty({10}, TensorOptions().dtype(kFloat64));   // 80 bytes -> 128
  Tensor b = empty({70000}, TensorOptions().dtype(kUInt8));  // 70000 bytes -> 72 KiB
  EXPECT_EQ(cpu_memory_stats().allocated_bytes, base + 128 + 72 * 1024);
  Tensor view = b.slice(0, 5, 100);  // a view holds nothing more
  EXPECT_EQ(cpu_memory_stats().allocated_bytes, base + 128 + 72 * 1024);
  b = Tensor();
  view = Tensor();
  EXPECT_EQ(cpu_memory_stats().allocated_bytes, base + 128);
  cpu_reset_peak_memory_stats();
  EXPECT_EQ(cpu_memory_stats().peak_allocated_bytes, base + 128);
  { Tensor c = empty({1 << 20}); }  // 4 MiB, then freed: the peak keeps it
  EXPECT_EQ(cpu_memory_stats().peak_allocated_bytes, base + 128 + (size_t{4} << 20));
  EXPECT_EQ(cpu_memory_stats().allocated_bytes, base + 128);

  set_cpu_memory_limit(base + (size_t{1} << 20));
  EXPECT_EQ(cpu_memory_stats().limit_bytes, base + (size_t{1} << 20));
  const uint64_t ooms = cpu_memory_stats().ooms;
  Tensor fits = empty({200000});  // 800000 bytes -> 784 KiB, under the 1 MiB left
  try {
    Tensor more = empty({100000});  // 400000 bytes more would pass it
    FAIL() << "expected an OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("out of CPU memory"), std::string::npos) << m;
    EXPECT_NE(m.find("(400000 bytes)"), std::string::npos) << m;
    EXPECT_NE(m.find("over the limit"), std::string::npos) << m;
  }
  EXPECT_EQ(cpu_memory_stats().ooms, ooms + 1);
  EXPECT_EQ(cpu_memory_stats().allocated_bytes, base + 128 + 784 * 1024);  // the refusal took nothing
  // Ops that allocate hit it too, as the same error type.
  EXPECT_THROW((void)(fits + 1.0f), OutOfMemoryError);
  fits = Tensor();
  Tensor now_fits = empty({100000});
  set_cpu_memory_limit(0);  // no limit
  Tensor big = empty({8 << 20});
  EXPECT_EQ(cpu_memory_stats().allocated_bytes, base + 128 + 392 * 1024 + (size_t{32} << 20));
}

}  // namespace
}  // namespace kiln
