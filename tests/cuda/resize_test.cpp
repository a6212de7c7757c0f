// The CUDA resize_taps kernels against the CPU's on the same random inputs (a fresh seed each run, printed with
// every failure; device memory poisoned first). Both round each product before adding it and add in one order,
// so the results must be the CPU's bits: the op alone on random taps (unsorted, repeated, some input positions
// read by no output) along every dim, and interpolate's fused path in every mode it serves, output and
// gradient; then first and second derivatives by finite differences in float64 on the GPU.
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "kiln/autograd/gradcheck.h"
#include "kiln/kiln.h"
#include "kiln/tensor/ops/resize_taps.h"

namespace kiln {
namespace {

namespace F = nn::functional;

class CudaResize : public test::CudaTest {};

std::string resize_seed(uint32_t seed) { return " (seed " + std::to_string(seed) + ")"; }

TEST_F(CudaResize, TheOpHasTheCpusBitsAlongEveryDim) {
  const uint32_t seed = test::fresh_seed();
  std::mt19937 rng(seed);
  for (DType dtype : {kFloat32, kFloat64}) {
    const Tensor x = test::random_tensor({3, 17, 5, 9}, dtype, rng);
    for (int64_t dim = 0; dim < x.dim(); ++dim) {
      const int64_t in = x.size(dim);
      for (int64_t taps : {1, 2, 4}) {
        const int64_t out = 2 * in + 3;
        std::uniform_int_distribution<int64_t> pos(0, in / 2);  // the upper half of the input is never read
        std::vector<int64_t> idx(static_cast<size_t>(taps * out));
        for (int64_t& p : idx) p = pos(rng);
        const Tensor idx_cpu = tensor(idx, {taps, out});
        const Tensor w_cpu = test::random_tensor({taps, out}, dtype, rng);
        const std::string what = std::string("resize_taps ") + dtype_name(dtype) + " dim " + std::to_string(dim) +
                                 ", " + std::to_string(taps) + " taps" + resize_seed(seed);
        const Tensor y_cpu = ops::resize_taps(x, dim, idx_cpu, w_cpu);
        const Tensor y = ops::resize_taps(x.to(Device::cuda()), dim, idx_cpu.to(Device::cuda()), w_cpu.to(Device::cuda()));
        ASSERT_TRUE(y.is_cuda()) << what;
        EXPECT_TRUE(y.cpu().equal(y_cpu)) << what << ": the output differs from the CPU's";
        const Tensor g = test::random_tensor(y_cpu.sizes(), dtype, rng);
        const Tensor gx_cpu = ops::resize_taps_backward(g, dim, idx_cpu, w_cpu, in);
        const Tensor gx = ops::resize_taps_backward(g.to(Device::cuda()), dim, idx_cpu.to(Device::cuda()),
                                                    w_cpu.to(Device::cuda()), in);
        EXPECT_TRUE(gx.cpu().equal(gx_cpu)) << what << ": the gradient differs from the CPU's";
        if (HasFailure()) {
          test::expect_matches_cpu(y, y_cpu, what + ": output");  // names the first elements that differ
          test::expect_matches_cpu(gx, gx_cpu, what + ": gradient");
          return;
        }
      }
    }
  }
}

struct InterpolateCase {
  Shape x;
  std::vector<int64_t> size;
  const char* mode;
};

TEST_F(CudaResize, InterpolateTakesTheKernelsAndHasTheCpusBits) {
  const uint32_t seed = test::fresh_seed();
  std::mt19937 rng(seed);
  const std::vector<InterpolateCase> cases = {
      {{2, 3, 11}, {23}, "linear"},         {{2, 3, 7, 9}, {14, 18}, "bilinear"}, {{2, 3, 7, 9}, {5, 20}, "bilinear"},
      {{1, 2, 6, 5}, {13, 3}, "bicubic"},   {{1, 2, 3, 4, 5}, {6, 3, 9}, "trilinear"},
  };
  for (const InterpolateCase& c : cases)
    for (bool align : {false, true})
      for (DType dtype : {kFloat32, kFloat64}) {
        const std::string what = std::string(c.mode) + " " + shape_str(c.x) + (align ? " align_corners " : " ") +
                                 dtype_name(dtype) + resize_seed(seed);
        const Tensor x = test::random_tensor(c.x, dtype, rng);
        Shape ys(c.x.begin(), c.x.begin() + 2);
        ys.insert(ys.end(), c.size.begin(), c.size.end());
        const Tensor g = test::random_tensor(ys, dtype, rng);
        Tensor ys_cpu, gx_cpu;
        for (Device device : {kCPU, Device::cuda()}) {
          const Tensor leaf = x.to(device).detach().requires_grad_();
          const Tensor y = F::interpolate(leaf, {.size = c.size, .mode = c.mode, .align_corners = align});
          EXPECT_STREQ(y.grad_fn()->name(), "InterpolateBackward") << what << " on " << device;
          y.backward(g.to(device));
          if (device == kCPU) {
            ys_cpu = y.detach(), gx_cpu = leaf.grad();
            continue;
          }
          EXPECT_TRUE(y.detach().cpu().equal(ys_cpu)) << what << ": the output differs from the CPU's";
          EXPECT_TRUE(leaf.grad().cpu().equal(gx_cpu)) << what << ": the gradient differs from the CPU's";
        }
        if (HasFailure()) return;
      }
}

// Through the fused kernels on the GPU: the backward records the adjoint, whose backward is the resize.
TEST_F(CudaResize, FirstAndSecondDerivativesOnTheGpu) {
  Generator gen(test::fresh_seed());
  const Tensor x = randn({1, 2, 4, 5}, kFloat64, &gen).requires_grad_();
  const Tensor v = randn({1, 2, 7, 3}, kFloat64, &gen).requires_grad_();
  for (const char* mode : {"bilinear", "bicubic"}) {
    SCOPED_TRACE(mode);
    EXPECT_TRUE(autograd::gradcheck([&](const std::vector<Tensor>& t) {
      return F::interpolate(t[0].to(Device::cuda()), {.size = {7, 3}, .mode = mode});
    }, {x}).ok);
    auto first_order = [&](const std::vector<Tensor>& in) {
      EnableGradGuard grad_on;
      const Tensor a = in[0].requires_grad() ? in[0] : in[0].detach().requires_grad_();
      const Tensor y = F::interpolate(a.to(Device::cuda()), {.size = {7, 3}, .mode = mode});
      // y * y makes the first derivative depend on x, so that the second is not zero.
      return autograd::grad({y * y}, {a}, {in[1].to(Device::cuda())}, std::nullopt, /*create_graph=*/true);
    };
    EXPECT_TRUE(autograd::gradcheck(first_order, {x, v}).ok);
  }
}

}  // namespace
}  // namespace kiln
