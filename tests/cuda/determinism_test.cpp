// Deterministic algorithms on the GPU (kiln/tensor/determinism.h): under DeterministicAlgorithmsGuard the ops
// that add with atomics either run kernels that add in the CPU's order, and then give the CPU's bits (index_add
// and embedding's gradient, scatter_add and nll_loss's, max_pool2d's gradient), or stop with an error naming the
// op (grid_sample's input gradient); convolution's gradients come out with the same bits run after run.
//
// The inputs are random reals, not the small integers the other indexing tests use, so the order of a sum shows
// in its last bits: the atomics would fail these comparisons, the ordered kernels must not.
#include <cstring>

#include "cuda/cuda_test_util.h"
#include "kiln/nn/nn.h"

namespace kiln {
namespace {

using test::CudaTest;
using test::expect_error;
using test::expect_matches_cpu;
using test::random_tensor;
namespace F = nn::functional;

constexpr DType kFloats[] = {kFloat32, kFloat64, kFloat16, kBFloat16};

// The same bits: two tensors of one dtype and shape whose bytes are equal.
void expect_same_bits(const Tensor& a, const Tensor& b, const std::string& context) {
  const Tensor x = a.cpu().contiguous(), y = b.cpu().contiguous();
  ASSERT_EQ(x.dtype(), y.dtype()) << context;
  ASSERT_EQ(x.sizes(), y.sizes()) << context;
  EXPECT_EQ(std::memcmp(x.raw_data_ptr(), y.raw_data_ptr(), x.nbytes()), 0) << context << ": the bits differ";
}

Tensor duplicate_heavy_index(int64_t k, int64_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int64_t> pick(0, n - 1);
  std::vector<double> v(static_cast<size_t>(k));
  for (double& e : v) e = static_cast<double>(pick(rng));
  return tensor(v, {k}).to(kInt64);
}

TEST_F(CudaTest, DeterministicIndexAddHasTheCpuBits) {
  const uint32_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  DeterministicAlgorithmsGuard on(true);
  for (DType dtype : kFloats) {
    for (int64_t dim : {0, 1, 2}) {
      for (bool strided_self : {false, true}) {
        Shape shape{6, 5, 7}, src_shape = shape;
        src_shape[static_cast<size_t>(dim)] = 300;  // 300 terms into 5 to 7 places: some 50 per element
        const Tensor index = duplicate_heavy_index(300, shape[static_cast<size_t>(dim)], rng);
        const Tensor src = random_tensor(src_shape, dtype, rng, test::Layout::Transposed);
        Tensor self = random_tensor(shape, dtype, rng, strided_self ? test::Layout::Strided : test::Layout::Contiguous);
        Tensor gself = strided_self ? self.to(Device::cuda()).transpose(0, 2).contiguous().transpose(0, 2)
                                    : self.to(Device::cuda());
        const std::string context = std::string("index_add_ ") + dtype_name(dtype) + " dim " + std::to_string(dim) +
                                    (strided_self ? " (strided self)" : "");
        index_add_(gself, dim, index.to(Device::cuda()), src.to(Device::cuda()), 0.75);
        index_add_(self, dim, index, src, 0.75);
        expect_same_bits(gself, self, context);
        // And again: the same bits.
        Tensor again = self.to(Device::cuda());
        index_add_(again, dim, index.to(Device::cuda()), src.to(Device::cuda()), 0.75);
        Tensor again2 = self.to(Device::cuda());
        index_add_(again2, dim, index.to(Device::cuda()), src.to(Device::cuda()), 0.75);
        expect_same_bits(again, again2, context + ", twice");
      }
    }
  }
}

TEST_F(CudaTest, DeterministicEmbeddingGradientHasTheCpuBits) {
  const uint32_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  DeterministicAlgorithmsGuard on(true);
  for (DType dtype : {kFloat32, kFloat16}) {
    const Tensor table = random_tensor({50, 16}, dtype, rng);
    const Tensor ids = duplicate_heavy_index(4000, 50, rng).view({40, 100});
    const Tensor g = random_tensor({40, 100, 16}, dtype, rng);
    Tensor grads[2];
    for (int on_gpu = 0; on_gpu < 2; ++on_gpu) {
      const Device device = on_gpu ? Device::cuda() : Device::cpu();
      Tensor w = table.to(device);
      w.requires_grad_();
      (F::embedding(ids.to(device), w) * g.to(device)).sum().backward();
      grads[on_gpu] = w.grad();
    }
    expect_same_bits(grads[1], grads[0], std::string("embedding's gradient, ") + dtype_name(dtype));
  }
}

TEST_F(CudaTest, DeterministicIndexAddStillReportsBadIndices) {
  DeterministicAlgorithmsGuard on(true);
  const TensorOptions cuda_int64 = TensorOptions(kInt64).device(Device::cuda());
  Tensor self = zeros({4, 3}, Device::cuda());
  std::string message;
  try {
    index_add_(self, 0, full({2}, 7, cuda_int64), ones({2, 3}, Device::cuda()));
    cuda::synchronize();
    (void)index_select(self, 0, zeros({1}, cuda_int64));
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("index 7"), std::string::npos) << "got: " << message;
  expect_matches_cpu(self, zeros({4, 3}), "nothing added for the bad index", 0);
}

TEST_F(CudaTest, DeterministicScatterAddHasTheCpuBits) {
  const uint32_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  DeterministicAlgorithmsGuard on(true);
  for (DType dtype : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64}) {
    for (int64_t dim : {0, 1, 2}) {
      // index (lines of 40 along dim into 3 to 6 places) smaller than src outside dim, src transposed.
      Shape shape{6, 5, 3}, ishape{4, 3, 2}, src_shape{5, 4, 3};
      ishape[static_cast<size_t>(dim)] = 40;
      src_shape[static_cast<size_t>(dim)] = 41;
      std::vector<double> iv(static_cast<size_t>(shape_numel(ishape)));
      std::uniform_int_distribution<int64_t> pick(0, shape[static_cast<size_t>(dim)] - 1);
      for (double& v : iv) v = static_cast<double>(pick(rng));
      const Tensor index = tensor(iv, ishape).to(kInt64);
      const Tensor src = random_tensor(src_shape, dtype, rng, test::Layout::Transposed);
      Tensor self = random_tensor(shape, dtype, rng), gself = self.to(Device::cuda());
      scatter_add_(gself, dim, index.to(Device::cuda()), src.to(Device::cuda()));
      scatter_add_(self, dim, index, src);
      expect_same_bits(gself, self, std::string("scatter_add_ ") + dtype_name(dtype) + " dim " + std::to_string(dim));
    }
  }
  // gather's gradient (nll_loss's) under the mode.
  const Tensor logp = random_tensor({64, 10}, kFloat32, rng);
  const Tensor target = duplicate_heavy_index(64, 10, rng);
  Tensor grads[2];
  for (int on_gpu = 0; on_gpu < 2; ++on_gpu) {
    const Device device = on_gpu ? Device::cuda() : Device::cpu();
    Tensor leaf = logp.to(device);
    leaf.requires_grad_();
    F::nll_loss(leaf, target.to(device)).backward();
    grads[on_gpu] = leaf.grad();
  }
  expect_same_bits(grads[1], grads[0], "nll_loss's gradient");
}

TEST_F(CudaTest, DeterministicScatterAddReportsBadIndices) {
  DeterministicAlgorithmsGuard on(true);
  const TensorOptions cuda_int64 = TensorOptions(kInt64).device(Device::cuda());
  Tensor self = zeros({4, 3}, Device::cuda());
  std::string message;
  try {
    scatter_add_(self, 0, full({1, 3}, 9, cuda_int64), ones({1, 3}, Device::cuda()));
    cuda::synchronize();
    (void)index_select(self, 0, zeros({1}, cuda_int64));
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("index 9"), std::string::npos) << "got: " << message;
}

TEST_F(CudaTest, DeterministicMaxPoolGradientHasTheCpuBits) {
  const uint32_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  DeterministicAlgorithmsGuard on(true);
  struct Geometry {
    int64_t kernel, stride, padding, dilation;
    bool ceil_mode;
  };
  // Overlapping windows (an element in up to 25), dilated ones, ceil_mode's last windows running past the
  // end, and a stride past the kernel (elements no window reads: gradient 0).
  for (DType dtype : kFloats) {
    for (Geometry geo : {Geometry{3, 1, 1, 1, false}, Geometry{5, 1, 2, 1, false}, Geometry{3, 2, 1, 2, false},
                         Geometry{3, 2, 1, 1, true}, Geometry{2, 3, 0, 1, true}}) {
      // Rounded inputs: many windows share a maximum, so elements take gradients from several.
      Tensor x = (random_tensor({3, 4, 17, 13}, kFloat32, rng) * 2).round().to(dtype);
      Tensor grads[2];
      for (int on_gpu = 0; on_gpu < 2; ++on_gpu) {
        const Device device = on_gpu ? Device::cuda() : Device::cpu();
        Tensor leaf = x.to(device);
        leaf.requires_grad_();
        const Tensor y = F::max_pool2d(leaf, geo.kernel, geo.stride, geo.padding, geo.dilation, geo.ceil_mode);
        std::mt19937 grng(7);
        const Tensor gy = random_tensor(y.sizes(), dtype, grng).to(device);
        (y * gy).sum().backward();
        grads[on_gpu] = leaf.grad();
      }
      expect_same_bits(grads[1], grads[0], std::string("max_pool2d's gradient, ") + dtype_name(dtype) + ", kernel " +
                                               std::to_string(geo.kernel) + " stride " + std::to_string(geo.stride) +
                                               " dilation " + std::to_string(geo.dilation));
    }
  }
}

// A smoke test more than a proof: two runs in one process reuse one cached algorithm, so they would agree for an
// algorithm that sums with atomics only if its order happened to repeat. What it shows is that the filtered
// choice runs for these shapes and that nothing else in the step varies.
TEST_F(CudaTest, DeterministicConvolutionGradientsRepeatTheirBits) {
  if (cuda::cudnn_version() == 0) GTEST_SKIP() << "built without cuDNN";
  const uint32_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  DeterministicAlgorithmsGuard on(true);
  const Tensor x = random_tensor({16, 8, 20, 20}, kFloat32, rng).to(Device::cuda());
  const Tensor w = random_tensor({12, 8, 3, 3}, kFloat32, rng).to(Device::cuda());
  Tensor gx[2], gw[2];
  for (int run = 0; run < 2; ++run) {
    Tensor xl = x.clone(), wl = w.clone();
    xl.requires_grad_();
    wl.requires_grad_();
    const Tensor y = F::conv2d(xl, wl, {}, 1, 1);
    (y * y).sum().backward();
    gx[run] = xl.grad(), gw[run] = wl.grad();
  }
  expect_same_bits(gx[0], gx[1], "conv2d's input gradient");
  expect_same_bits(gw[0], gw[1], "conv2d's weight gradient");
}

TEST_F(CudaTest, DeterministicGridSampleRefusesTheInputGradientOnly) {
  std::mt19937 rng(6);
  DeterministicAlgorithmsGuard on(true);
  const Tensor x = random_tensor({2, 3, 8, 8}, kFloat32, rng).to(Device::cuda());
  Tensor grid = random_tensor({2, 5, 5, 2}, kFloat32, rng, test::Layout::Contiguous, -1, 1).to(Device::cuda());
  grid.requires_grad_();
  F::grid_sample(x, grid).sum().backward();  // the grid's gradient alone: no atomics
  EXPECT_TRUE(grid.grad().defined());
  Tensor xl = x.clone();
  xl.requires_grad_();
  expect_error([&] { F::grid_sample(xl, grid).sum().backward(); }, {"grid_sample", "deterministic"});
}

}  // namespace
}  // namespace kiln
