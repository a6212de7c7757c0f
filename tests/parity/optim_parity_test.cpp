// kiln's LBFGS against LibTorch's on the same float64 problem, step by step: a small tanh regression (not
// quadratic, so the history, the curvature test and the line search's bracketing and zoom all take part),
// with and without the strong Wolfe line search, a history shorter than the iterations.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/optim/optim.h"
#include "nn/nn_test_util.h"
#include "parity/parity_util.h"

namespace kiln::parity {
namespace {

TEST(OptimParity, LBFGSFollowsLibTorchIterateByIterate) {
  const Tensor x = test::randn64({16, 4}, 1), y = tanh(test::randn64({16, 3}, 2));
  const Tensor w0 = test::randn64({3, 4}, 3) * 0.5, b0 = test::randn64({3}, 4) * 0.1;
  const torch::Tensor tx = to_torch(x), ty = to_torch(y);
  for (const std::string line_search : {"", "strong_wolfe"}) {
    Tensor w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
    optim::LBFGS ours({w, b}, {.lr = line_search.empty() ? 0.1 : 1.0, .max_iter = 6, .history_size = 3,
                               .line_search_fn = line_search});
    torch::Tensor tw = to_torch(w0).requires_grad_(), tb = to_torch(b0).requires_grad_();
    auto topts = torch::optim::LBFGSOptions(line_search.empty() ? 0.1 : 1.0).max_iter(6).history_size(3);
    if (!line_search.empty()) topts.line_search_fn(line_search);
    torch::optim::LBFGS theirs({tw, tb}, topts);

    for (int step = 0; step < 4; ++step) {
      const std::string what = "line search '" + line_search + "', step " + std::to_string(step);
      const Tensor l = ours.step([&] {
        ours.zero_grad();
        Tensor loss = (tanh(matmul(x, w.t()) + b) - y).pow(2).mean();
        loss.backward();
        return loss;
      });
      const torch::Tensor tl = theirs.step([&] {
        theirs.zero_grad();
        torch::Tensor loss = (torch::tanh(torch::matmul(tx, tw.t()) + tb) - ty).pow(2).mean();
        loss.backward();
        return loss;
      });
      EXPECT_NEAR(l.item<double>(), tl.item<double>(), 1e-12) << what;
      expect_same(w, tw, 1e-10, what + ": weight");
      expect_same(b, tb, 1e-10, what + ": bias");
    }
  }
}

}  // namespace
}  // namespace kiln::parity
