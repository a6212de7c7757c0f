// Random draws on the GPU against the CPU's from the same (seed, offset): uniform, randint and bernoulli bit for
// bit in every dtype, normal within a few ulps (the device's log/cos/sin are not glibc's). Sizes 1, 3, 5 and 1001
// end mid-counter (4 or 2 values per Philox counter), so the grouping's tail is covered; a large size spans
// many blocks; strided outputs go through the frontend's temporary; and both generators advance alike.
//
// The ranges are chosen so that to - from and std are powers of two: their products are exact, and the CPU's
// result does not depend on whether its compiler fused the multiply-add (the CUDA kernel always fuses).
#include <algorithm>

#include "cuda/cuda_test_util.h"

namespace kiln {
namespace {

using test::CudaTest;
using test::expect_matches_cpu;

const int64_t kSizes[] = {1, 3, 5, 1001};

TensorOptions on_gpu(DType d) { return TensorOptions(d).device(Device::cuda()); }

std::string what(const char* op, DType d, int64_t n) {
  return std::string(op) + ", " + dtype_name(d) + ", n = " + std::to_string(n);
}

// Draws with `draw(options, generator)` on both devices from generators seeded alike; checks the values (within
// rtol; 0: exactly) and that both generators used the same counters.
template <typename Draw>
void expect_same_draws(const char* op, DType d, int64_t n, double rtol, const Draw& draw) {
  const uint64_t seed = 1234567 + static_cast<uint64_t>(n);
  Generator on_cpu(seed), on_cuda(seed);
  for (int round = 0; round < 2; ++round) {  // the second draw starts where the first left the offset
    Tensor c = draw(TensorOptions(d), &on_cpu);
    Tensor g = draw(on_gpu(d), &on_cuda);
    expect_matches_cpu(g, c, what(op, d, n) + ", draw " + std::to_string(round), rtol);
    EXPECT_EQ(on_cuda.offset(), on_cpu.offset()) << what(op, d, n);
    EXPECT_EQ(on_cuda.seed(), on_cpu.seed()) << what(op, d, n);
  }
  EXPECT_GT(on_cuda.offset(), 0u) << what(op, d, n);
}

TEST_F(CudaTest, UniformMatchesCpuBitForBit) {
  for (DType d : test::kFloatDTypes) {
    for (int64_t n : kSizes) {
      expect_same_draws("rand", d, n, 0, [&](TensorOptions o, Generator* g) { return rand({n}, o, g); });
      expect_same_draws("uniform_(-3, 5)", d, n, 0, [&](TensorOptions o, Generator* g) {
        Tensor t = empty({n}, o);
        return uniform_(t, -3.0, 5.0, g);
      });
    }
  }
}

// multinomial with replacement is uniform draws against cumulative sums, both of which have the CPU's bits on
// the GPU: the same indices. (Without replacement a log1p decides the order, whose device rounding may differ.)
TEST_F(CudaTest, MultinomialWithReplacementMatchesCpu) {
  Generator cpu_gen(31), gpu_gen(31);
  const Tensor w = tensor({0.1, 0.0, 0.3, 0.6, 0.25}).unsqueeze(0).expand({64, 5}).contiguous();
  const Tensor cpu = multinomial(w, 50, true, &cpu_gen);
  const Tensor gpu = multinomial(w.to(Device::cuda()), 50, true, &gpu_gen);
  expect_matches_cpu(gpu, cpu, "multinomial", 0);
  // Without replacement: distinct picks, never the weight-0 category.
  const std::vector<int64_t> picks = multinomial(w.to(Device::cuda()), 4, false, &gpu_gen).cpu().to_vector<int64_t>();
  for (size_t r = 0; r < 64; ++r) {
    std::vector<int64_t> row(picks.begin() + 4 * r, picks.begin() + 4 * r + 4);
    std::sort(row.begin(), row.end());
    EXPECT_EQ(row, (std::vector<int64_t>{0, 2, 3, 4})) << "row " << r;
  }
}

TEST_F(CudaTest, NormalMatchesCpuWithinUlps) {
  // NOTE: float64 results agree to ~1e-15 (the device's log, cos and sin are within an ulp or two of glibc's);
  // the other dtypes round the same double to at most one ulp apart, which the default tolerances cover.
  for (DType d : test::kFloatDTypes) {
    const double rtol = d == kFloat64 ? 1e-13 : d == kFloat32 ? 1e-6 : -1;
    for (int64_t n : kSizes) {
      expect_same_draws("randn", d, n, rtol, [&](TensorOptions o, Generator* g) { return randn({n}, o, g); });
      expect_same_draws("normal_(0.5, 2)", d, n, rtol, [&](TensorOptions o, Generator* g) {
        Tensor t = empty({n}, o);
        return normal_(t, 0.5, 2.0, g);
      });
    }
  }
}

TEST_F(CudaTest, RandintMatchesCpuBitForBit) {
  for (DType d : {kUInt8, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64}) {
    for (int64_t n : kSizes) {
      expect_same_draws("randint(-7, 100)", d, n, 0, [&](TensorOptions o, Generator* g) {
        return randint(d == kUInt8 ? 0 : -7, 100, {n}, o, g);
      });
    }
  }
  // A range of 2^41 takes two words per value (2 per counter); int64's full span stresses the uint64 modulo.
  for (int64_t n : kSizes) {
    expect_same_draws("randint(+-2^40)", kInt64, n, 0, [&](TensorOptions o, Generator* g) {
      return randint(-(int64_t{1} << 40), int64_t{1} << 40, {n}, o, g);
    });
    expect_same_draws("randint(int64 span)", kInt64, n, 0, [&](TensorOptions o, Generator* g) {
      return randint(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), {n}, o, g);
    });
  }
}

TEST_F(CudaTest, BernoulliMatchesCpuBitForBit) {
  for (DType d : test::kAllDTypes) {
    for (int64_t n : kSizes) {
      for (double p : {0.0, 0.3, 1.0}) {
        expect_same_draws("bernoulli_", d, n, 0, [&](TensorOptions o, Generator* g) {
          Tensor t = empty({n}, o);
          return bernoulli_(t, p, g);
        });
      }
    }
  }
}

TEST_F(CudaTest, LargeDrawsSpanManyBlocks) {
  // A quarter million counters over a thousand blocks, ending mid-counter.
  const int64_t n = (int64_t{1} << 20) + 3;
  for (DType d : {kFloat32, kFloat64, kFloat16}) {
    expect_same_draws("rand large", d, n, 0, [&](TensorOptions o, Generator* g) { return rand({n}, o, g); });
  }
  expect_same_draws("randint large", kInt64, n, 0,
                    [&](TensorOptions o, Generator* g) { return randint(0, 1000, {n}, o, g); });
  expect_same_draws("randn large", kFloat32, n, 1e-6,
                    [&](TensorOptions o, Generator* g) { return randn({n}, o, g); });
}

TEST_F(CudaTest, StridedOutputsFillInRowMajorOrder) {
  // Element i of the output, in row-major order, takes counter offset + i / per_call, whatever the layout.
  for (DType d : {kFloat32, kFloat64, kBFloat16}) {
    expect_same_draws("uniform_ transposed", d, 35, 0, [&](TensorOptions o, Generator* g) {
      Tensor t = empty({5, 7}, o).t();
      uniform_(t, -1.0, 1.0, g);
      return t;
    });
    expect_same_draws("bernoulli_ strided", d, 30, 0, [&](TensorOptions o, Generator* g) {
      Tensor t = empty({6, 10}, o).slice(1, 0, std::nullopt, 2);
      bernoulli_(t, 0.5, g);
      return t;
    });
  }
}

TEST_F(CudaTest, EmptyDrawsTouchNothing) {
  Generator on_cpu(5), on_cuda(5);
  EXPECT_EQ(rand({0, 3}, on_gpu(kFloat32), &on_cuda).numel(), 0);
  EXPECT_EQ(rand({0, 3}, TensorOptions(kFloat32), &on_cpu).numel(), 0);
  EXPECT_EQ(on_cuda.offset(), on_cpu.offset());
}

}  // namespace
}  // namespace kiln
