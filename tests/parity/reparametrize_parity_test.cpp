// weight_norm and spectral_norm against LibTorch: a weight-normalized layer's output and the gradients of g and
// v against the same layer over LibTorch's _weight_norm; one spectral-norm power step against the same step in
// LibTorch's ops, and the normalized weight's limit against LibTorch's singular values.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <optional>
#include <string>

#include "kiln/kiln.h"
#include "parity/parity_util.h"

namespace kiln::parity {
namespace {

TEST(ReparametrizeParity, WeightNormMatchesLibTorch) {
  for (std::optional<int64_t> dim : {std::optional<int64_t>(0), std::optional<int64_t>(2), std::optional<int64_t>()}) {
    const std::string what = "weight_norm, dim " + (dim ? std::to_string(*dim) : std::string("none"));
    manual_seed(41);
    nn::Conv1d conv(3, 5, 3);
    conv->to(kFloat64);
    nn::weight_norm(*conv, "weight", dim);
    const Tensor g = test::own_tensor(*conv, "weight_g"), v = test::own_tensor(*conv, "weight_v");
    {
      NoGradGuard no_grad;
      g.copy_(test::randn64(g.sizes(), 42));
      v.copy_(test::randn64(v.sizes(), 43));
    }
    const Tensor x = test::randn64({2, 3, 8}, 44);
    const Tensor y = conv(x), probe = test::randn64(y.sizes(), 45);
    (y * probe).sum().backward();

    const torch::Tensor tg = to_torch(g).requires_grad_(), tv = to_torch(v).requires_grad_();
    // LibTorch spells "the whole tensor" as dim -1.
    const torch::Tensor tw = torch::_weight_norm(tv, tg, dim ? *dim : -1);
    const torch::Tensor ty = torch::conv1d(to_torch(x), tw, to_torch(conv->bias));
    (ty * to_torch(probe)).sum().backward();
    expect_same(y, ty, 1e-13, what + ": output");
    expect_same(conv->weight, tw, 1e-14, what + ": weight");
    expect_same(g.grad(), tg.grad(), 1e-12, what + ": gradient of g");
    expect_same(v.grad(), tv.grad(), 1e-12, what + ": gradient of v");
  }
}

TEST(ReparametrizeParity, SpectralNormMatchesLibTorch) {
  manual_seed(46);
  nn::Conv2d conv(4, 6, 3);
  conv->to(kFloat64);
  nn::spectral_norm(*conv);
  const torch::Tensor w = to_torch(test::own_tensor(*conv, "weight_orig")).reshape({6, -1});
  const torch::Tensor u0 = to_torch(test::own_tensor(*conv, "weight_u"));
  namespace tf = torch::nn::functional;
  const auto unit = tf::NormalizeFuncOptions().dim(0).eps(1e-12);
  const torch::Tensor v1 = tf::normalize(torch::mv(w.t(), u0), unit), u1 = tf::normalize(torch::mv(w, v1), unit);
  const torch::Tensor sigma = torch::dot(u1, torch::mv(w, v1));
  const Tensor x = test::randn64({1, 4, 5, 5}, 47);
  conv(x);
  expect_same(test::own_tensor(*conv, "weight_u"), u1, 1e-14, "spectral_norm: u after one step");
  expect_same(test::own_tensor(*conv, "weight_v"), v1, 1e-14, "spectral_norm: v after one step");
  expect_same(conv->weight.reshape({6, -1}), w / sigma, 1e-14, "spectral_norm: weight after one step");
  for (int i = 0; i < 300; ++i) conv(x);
  const torch::Tensor largest = torch::linalg_svdvals(w)[0];
  expect_same(conv->weight.reshape({6, -1}), w / largest, 1e-10, "spectral_norm: weight at convergence");
}

}  // namespace
}  // namespace kiln::parity
