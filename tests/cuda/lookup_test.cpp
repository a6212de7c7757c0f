// The fused embedding_bag and grid_sample CUDA kernels against the CPU's fused kernels on the same random inputs
// (a fresh seed each run, printed with every failure; device memory poisoned first), through nn::functional
// and autograd: outputs and every gradient, each mode, float32 and float64; against the GPU's own composite of
// differentiable ops; embedding_bag's table gradient bit for bit the same over two runs (it has no atomics);
// and both by finite differences in float64 on the GPU.
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "kiln/autograd/gradcheck.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

namespace F = nn::functional;

class CudaLookup : public test::CudaTest {};

std::string lookup_seed(uint32_t seed) { return " (seed " + std::to_string(seed) + ")"; }

namespace bag_case {

// A 1-d input of `bags` bags over a table of V rows: empty bags, rows named twice within a bag, the padding
// row (3) here and there.
struct Batch {
  Tensor input, offsets;
};

Batch draw(int64_t bags, int64_t V, std::mt19937& rng) {
  std::uniform_int_distribution<int64_t> len(0, 6), row(0, V - 1);
  std::vector<int64_t> ids, offsets;
  for (int64_t b = 0; b < bags; ++b) {
    offsets.push_back(static_cast<int64_t>(ids.size()));
    const int64_t n = b % 5 == 1 ? 0 : len(rng);
    for (int64_t k = 0; k < n; ++k) ids.push_back(k == 2 && !ids.empty() ? ids.back() : row(rng));
  }
  return {tensor(ids, {static_cast<int64_t>(ids.size())}), tensor(offsets, {bags})};
}

struct Result {
  Tensor out, grad_weight, grad_psw;
};

// embedding_bag on `device` with autograd, then backward of sum(out * g).
Result run(const Batch& batch, const Tensor& weight, const Tensor& psw, const Tensor& g, const F::EmbeddingBagOptions& o,
           Device device) {
  Tensor w = weight.to(device).detach().requires_grad_();
  Tensor p = psw.defined() ? psw.to(device).detach().requires_grad_() : Tensor();
  Tensor out = F::embedding_bag(batch.input.to(device), w, batch.offsets.defined() ? batch.offsets.to(device) : Tensor(),
                                o, p);
  (out * g.to(device)).sum().backward();
  return {out.detach(), w.grad(), p.defined() ? p.grad() : Tensor()};
}

}  // namespace bag_case

TEST_F(CudaLookup, EmbeddingBagMatchesTheCpu) {
  const uint32_t seed = test::fresh_seed();
  std::mt19937 rng(seed);
  const F::BagMode modes[] = {F::BagMode::Sum, F::BagMode::Mean, F::BagMode::Max};
  for (DType dtype : {kFloat32, kFloat64}) {
    for (int64_t D : {1, 19, 300}) {  // 300: two column slices of 256 threads
      const int64_t V = 40, B = 23;
      const bag_case::Batch batch = bag_case::draw(B, V, rng);
      const Tensor weight = test::random_tensor({V, D}, dtype, rng, test::Layout::Contiguous, -2, 2);
      const Tensor g = test::random_tensor({B, D}, dtype, rng);
      for (F::BagMode mode : modes) {
        for (bool weighted : {false, true}) {
          if (weighted && mode != F::BagMode::Sum) continue;
          const Tensor psw = weighted ? test::random_tensor({batch.input.numel()}, dtype, rng) : Tensor();
          F::EmbeddingBagOptions o;
          o.mode = mode;
          o.padding_idx = 3;
          const std::string what = std::string("embedding_bag ") + dtype_name(dtype) + " D = " + std::to_string(D) +
                                   " mode " + std::to_string(static_cast<int>(mode)) +
                                   (weighted ? " weighted" : "") + lookup_seed(seed);
          const bag_case::Result cpu = bag_case::run(batch, weight, psw, g, o, kCPU);
          const bag_case::Result gpu = bag_case::run(batch, weight, psw, g, o, Device::cuda());
          const double rtol = test::cuda_rtol(dtype);
          test::expect_matches_cpu(gpu.out, cpu.out, what + ": output", rtol, rtol);
          test::expect_matches_cpu(gpu.grad_weight, cpu.grad_weight, what + ": the table's gradient", rtol, rtol);
          if (weighted) test::expect_matches_cpu(gpu.grad_psw, cpu.grad_psw, what + ": psw's gradient", rtol, rtol);
          // No atomics: a second run gives the same bits.
          const bag_case::Result again = bag_case::run(batch, weight, psw, g, o, Device::cuda());
          EXPECT_TRUE(equal(again.grad_weight.cpu(), gpu.grad_weight.cpu())) << what << ": not the same bits twice";
          // And the GPU's composite agrees.
          F::CompositeOnlyGuard composite;
          const bag_case::Result slow = bag_case::run(batch, weight, psw, g, o, Device::cuda());
          test::expect_matches_cpu(gpu.out, slow.out.cpu(), what + ": against the GPU's composite", rtol, rtol);
          test::expect_matches_cpu(gpu.grad_weight, slow.grad_weight.cpu(), what + ": composite's table gradient",
                                   rtol, rtol);
          if (HasFailure()) return;
        }
      }
    }
  }
}

TEST_F(CudaLookup, EmbeddingBagOfATwoDimensionalInputAndEmptyBagsMatchesTheCpu) {
  // Bags as rows of a 2-d input, all padding in one row; and a batch of only empty bags.
  const Tensor weight = randn({6, 5}, kFloat64);
  const Tensor input = tensor(std::vector<int64_t>{1, 2, 2, 0, 0, 0, 5, 4, 1}, {3, 3});
  const Tensor g = randn({3, 5}, kFloat64);
  for (F::BagMode mode : {F::BagMode::Sum, F::BagMode::Mean, F::BagMode::Max}) {
    F::EmbeddingBagOptions o;
    o.mode = mode;
    o.padding_idx = 0;
    const bag_case::Result cpu = bag_case::run({input, {}}, weight, {}, g, o, kCPU);
    const bag_case::Result gpu = bag_case::run({input, {}}, weight, {}, g, o, Device::cuda());
    test::expect_matches_cpu(gpu.out, cpu.out, "2-d input: output");
    test::expect_matches_cpu(gpu.grad_weight, cpu.grad_weight, "2-d input: the table's gradient");
    const bag_case::Batch empty_bags{tensor(std::vector<int64_t>{}, {0}), tensor(std::vector<int64_t>{0, 0, 0}, {3})};
    const bag_case::Result e = bag_case::run(empty_bags, weight, {}, g, o, Device::cuda());
    test::expect_matches_cpu(e.out, zeros({3, 5}, kFloat64), "empty bags: output");
    test::expect_matches_cpu(e.grad_weight, zeros({6, 5}, kFloat64), "empty bags: the table's gradient");
  }
}

namespace grid_case {

struct Result {
  Tensor out, grad_x, grad_grid;
};

Result run(const Tensor& x, const Tensor& grid, const Tensor& g, const F::GridSampleOptions& o, Device device) {
  Tensor xd = x.to(device).detach().requires_grad_(), gd = grid.to(device).detach().requires_grad_();
  Tensor out = F::grid_sample(xd, gd, o);
  (out * g.to(device)).sum().backward();
  return {out.detach(), xd.grad(), gd.grad()};
}

}  // namespace grid_case

TEST_F(CudaLookup, GridSampleMatchesTheCpu) {
  const uint32_t seed = test::fresh_seed();
  std::mt19937 rng(seed);
  for (DType dtype : {kFloat32, kFloat64}) {
    // Positions past the edges (every padding rule comes up), and an exact identity grid (the clamped edges).
    const Tensor x = test::random_tensor({3, 4, 7, 9}, dtype, rng);
    const Tensor random_grid = test::random_tensor({3, 5, 6, 2}, dtype, rng, test::Layout::Contiguous, -1.4, 1.4);
    for (const char* mode : {"bilinear", "nearest"})
      for (const char* padding : {"zeros", "border", "reflection"})
        for (bool align : {false, true}) {
          const Tensor theta = tensor(std::vector<double>{1, 0, 0, 0, 1, 0}, {1, 2, 3}, dtype).expand({3, 2, 3});
          for (const Tensor& grid : {random_grid, F::affine_grid(theta, {3, 4, 7, 9}, align)}) {
            const F::GridSampleOptions o{.mode = mode, .padding_mode = padding, .align_corners = align};
            const std::string what = std::string("grid_sample ") + dtype_name(dtype) + " " + mode + " " + padding +
                                     (align ? " align_corners" : "") + " grid " + shape_str(grid.sizes()) +
                                     lookup_seed(seed);
            const Tensor g = test::random_tensor({3, 4, grid.size(1), grid.size(2)}, dtype, rng);
            const grid_case::Result cpu = grid_case::run(x, grid, g, o, kCPU);
            const grid_case::Result gpu = grid_case::run(x, grid, g, o, Device::cuda());
            const double rtol = test::cuda_rtol(dtype);
            test::expect_matches_cpu(gpu.out, cpu.out, what + ": output", rtol, rtol);
            test::expect_matches_cpu(gpu.grad_x, cpu.grad_x, what + ": x's gradient", 4 * rtol, 4 * rtol);
            if (cpu.grad_grid.defined())
              test::expect_matches_cpu(gpu.grad_grid, cpu.grad_grid, what + ": grid's gradient", 4 * rtol, 4 * rtol);
            else
              EXPECT_FALSE(gpu.grad_grid.defined()) << what << ": nearest gives the grid no gradient";
            F::CompositeOnlyGuard composite;
            const grid_case::Result slow = grid_case::run(x, grid, g, o, Device::cuda());
            test::expect_matches_cpu(gpu.out, slow.out.cpu(), what + ": against the GPU's composite", rtol, rtol);
            if (HasFailure()) return;
          }
        }
  }
}

TEST_F(CudaLookup, GradcheckEmbeddingBagAndGridSampleOnTheGpu) {
  Generator gen(test::fresh_seed());
  const Tensor weight = randn({7, 3}, kFloat64, &gen).requires_grad_();
  const Tensor psw = randn({6}, kFloat64, &gen).requires_grad_();
  const Tensor input = tensor(std::vector<int64_t>{1, 4, 4, 0, 6, 2}, {6});
  const Tensor offsets = tensor(std::vector<int64_t>{0, 2, 2, 5}, {4});
  autograd::gradcheck(
      [&](const std::vector<Tensor>& in) {
        const Tensor w = in[0].to(Device::cuda()), p = in[1].to(Device::cuda());
        const Tensor i = input.to(Device::cuda()), off = offsets.to(Device::cuda());
        F::EmbeddingBagOptions sum, mean;
        sum.mode = F::BagMode::Sum;
        return std::vector<Tensor>{F::embedding_bag(i, w, off, sum, p), F::embedding_bag(i, w, off, mean)};
      },
      {weight, psw});
  // Positions kept off the pixel lines, where bilinear's derivative jumps.
  const Tensor x = randn({2, 3, 5, 4}, kFloat64, &gen).requires_grad_();
  const Tensor grid = (rand({2, 3, 3, 2}, kFloat64, &gen) * 1.6 - 0.8).requires_grad_();
  for (const char* padding : {"zeros", "border", "reflection"}) {
    autograd::gradcheck(
        [&](const std::vector<Tensor>& in) {
          const F::GridSampleOptions o{.padding_mode = padding};
          return std::vector<Tensor>{F::grid_sample(in[0].to(Device::cuda()), in[1].to(Device::cuda()), o)};
        },
        {x, grid});
  }
}

}  // namespace
}  // namespace kiln
