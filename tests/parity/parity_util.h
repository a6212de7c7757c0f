// What the parity tests share: copying tensors between kiln and LibTorch (float64, contiguous), comparing them
// element by element, and giving a LibTorch module a kiln module's parameters by name.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn/module.h"
#include "nn/nn_test_util.h"

namespace kiln::parity {

inline torch::Tensor to_torch(const Tensor& t) {
  const Tensor c = t.detach().contiguous().to(kFloat64);
  std::vector<int64_t> shape(c.sizes().begin(), c.sizes().end());
  return torch::from_blob(const_cast<double*>(c.data_ptr<double>()), shape, torch::kDouble).clone();
}

inline std::vector<double> torch_values(const torch::Tensor& t) {
  const torch::Tensor c = t.detach().contiguous().to(torch::kDouble);
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

inline std::vector<double> kiln_values(const Tensor& t) {
  return t.detach().contiguous().to(kFloat64).to_vector<double>();
}

// Same shape, and each element within tol * max(1, |LibTorch's value|) (NaN matches NaN, an infinity itself;
// tol 0: the same values).
inline void expect_same(const Tensor& ours, const torch::Tensor& theirs, double tol, const std::string& what) {
  std::vector<int64_t> shape(ours.sizes().begin(), ours.sizes().end());
  ASSERT_EQ(shape, theirs.sizes().vec()) << what;
  const std::vector<double> a = kiln_values(ours), b = torch_values(theirs);
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i]))) continue;
    ASSERT_NEAR(a[i], b[i], tol * std::max(1.0, std::fabs(b[i]))) << what << " at " << i;
  }
}

// Gives the torch module kiln's parameter values, by name.
inline void copy_parameters(nn::Module& ours, torch::nn::Module& theirs) {
  auto named = theirs.named_parameters();
  ASSERT_EQ(named.size(), ours.named_parameters().size());
  torch::NoGradGuard no_grad;
  for (const auto& [name, p] : ours.named_parameters()) {
    ASSERT_TRUE(named.contains(name)) << "LibTorch has no parameter " << name;
    torch::Tensor& t = named[name];
    ASSERT_EQ(std::vector<int64_t>(p.sizes().begin(), p.sizes().end()), t.sizes().vec()) << name;
    t.copy_(to_torch(p));
  }
}

// Runs f on kiln's inputs and g on LibTorch's copies of them, a random probe dotted with each output and
// backpropagated: the outputs and every input's gradient must agree within tol (an input kiln's graph does not
// reach must get none or zeros from LibTorch).
template <class KilnFn, class TorchFn>
void expect_parity(const std::vector<Tensor>& inputs, KilnFn f, TorchFn g, double tol, const std::string& what,
                   uint64_t seed) {
  std::vector<Tensor> ours;
  std::vector<torch::Tensor> theirs;
  for (const Tensor& t : inputs) {
    ours.push_back(t.detach().requires_grad_());
    theirs.push_back(to_torch(t).requires_grad_());
  }
  const Tensor y = f(ours);
  const torch::Tensor ty = g(theirs);
  const Tensor probe = test::randn64(y.sizes(), seed);
  (y * probe).sum().backward();
  (ty * to_torch(probe)).sum().backward();
  expect_same(y, ty, tol, what);
  for (size_t i = 0; i < ours.size(); ++i) {
    const std::string which = what + ": gradient of input " + std::to_string(i);
    if (!ours[i].grad().defined()) {  // no path to this input: LibTorch's gradient must be absent or zero
      EXPECT_TRUE(!theirs[i].grad().defined() || theirs[i].grad().abs().max().item<double>() == 0) << which;
      continue;
    }
    expect_same(ours[i].grad(), theirs[i].grad(), tol, which);
  }
}

}  // namespace kiln::parity
