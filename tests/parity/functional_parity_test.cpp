// nn::functional's activations, distances and margin losses against LibTorch's on the same float64 inputs: the
// values, and the gradients of sum(w * f(x)) for fixed random weights w, through both libraries' autograd.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "parity/parity_util.h"

namespace kiln::parity {
namespace {

namespace F = nn::functional;

Tensor uniform_tensor(std::mt19937& rng, Shape shape, double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& e : v) e = u(rng);
  return tensor(v, shape);
}

struct UnaryCase {
  std::string name;
  std::function<Tensor(const Tensor&)> ours;
  std::function<torch::Tensor(const torch::Tensor&)> theirs;
  double grad_tol = 1e-13;
};

TEST(FunctionalParity, ActivationsMatchLibTorch) {
  std::mt19937 rng(31);
  const Tensor x0 = uniform_tensor(rng, {4, 6}, -5, 5), w = uniform_tensor(rng, {4, 6}, -1, 1);
  const std::vector<UnaryCase> cases = {
      {"elu", [](const Tensor& x) { return F::elu(x, 1.3); }, [](const torch::Tensor& x) { return torch::elu(x, 1.3); }},
      {"selu", [](const Tensor& x) { return F::selu(x); }, [](const torch::Tensor& x) { return torch::selu(x); }},
      // alpha 0.5: LibTorch's celu gradient uses 1 / alpha rounded to float32, which 0.5 survives exactly.
      {"celu", [](const Tensor& x) { return F::celu(x, 0.5); }, [](const torch::Tensor& x) { return torch::celu(x, 0.5); }},
      {"hardtanh", [](const Tensor& x) { return F::hardtanh(x, -0.6, 1.4); },
       [](const torch::Tensor& x) { return torch::hardtanh(x, -0.6, 1.4); }},
      {"relu6", [](const Tensor& x) { return F::relu6(x); }, [](const torch::Tensor& x) { return torch::hardtanh(x, 0, 6); }},
      // LibTorch's hardsigmoid gradient is 1/6 rounded to float32 (3e-8 off) even in float64.
      {"hardsigmoid", [](const Tensor& x) { return F::hardsigmoid(x); },
       [](const torch::Tensor& x) { return torch::hardsigmoid(x); }, 1e-7},
      {"hardswish", [](const Tensor& x) { return F::hardswish(x); },
       [](const torch::Tensor& x) { return torch::hardswish(x); }},
      {"mish", [](const Tensor& x) { return F::mish(x); }, [](const torch::Tensor& x) { return torch::mish(x); }},
      {"logsigmoid", [](const Tensor& x) { return F::logsigmoid(x); },
       [](const torch::Tensor& x) { return torch::log_sigmoid(x); }},
      {"softshrink", [](const Tensor& x) { return F::softshrink(x, 0.7); },
       [](const torch::Tensor& x) { return torch::softshrink(x, 0.7); }},
      {"hardshrink", [](const Tensor& x) { return F::hardshrink(x, 0.7); },
       [](const torch::Tensor& x) { return torch::hardshrink(x, 0.7); }},
      {"threshold", [](const Tensor& x) { return F::threshold(x, 0.4, -3.0); },
       [](const torch::Tensor& x) { return torch::threshold(x, 0.4, -3.0); }},
      {"glu", [](const Tensor& x) { return F::glu(x, 1); }, [](const torch::Tensor& x) { return torch::glu(x, 1); }},
      {"softmin", [](const Tensor& x) { return F::softmin(x, 0); },
       [](const torch::Tensor& x) {
         return torch::nn::functional::softmin(x, torch::nn::functional::SoftminFuncOptions(0));
       }},
      {"prelu", [](const Tensor& x) { return F::prelu(x.view({2, 3, 4}), tensor({0.1, -0.5, 2.0}, kFloat64)); },
       [](const torch::Tensor& x) {
         return torch::prelu(x.view({2, 3, 4}), torch::tensor({0.1, -0.5, 2.0}, torch::kDouble));
       }},
  };
  for (const UnaryCase& c : cases) {
    Tensor x = x0.clone().requires_grad_();
    torch::Tensor tx = to_torch(x0).requires_grad_();
    const Tensor y = c.ours(x);
    const torch::Tensor ty = c.theirs(tx);
    expect_same(y, ty, 1e-14, c.name);
    (y * w.narrow(1, 0, y.numel() / 4).reshape(y.sizes())).sum().backward();
    (ty * to_torch(w).narrow(1, 0, ty.numel() / 4).reshape(ty.sizes())).sum().backward();
    expect_same(x.grad(), tx.grad(), c.grad_tol, c.name + " gradient");
  }
}

}  // namespace
}  // namespace kiln::parity
