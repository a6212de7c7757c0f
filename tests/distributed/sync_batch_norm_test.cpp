// Synchronized batch norm (functional::sync_batch_norm, distributed::convert_sync_batchnorm). The oracle is one
// process normalizing the ranks' rows all together: in float64 by hand for the function itself, and the plain
// BatchNorm layers (on the whole batch, no communication) for DDP training. Ranks are forked processes over the
// "tcp" group (tests/distributed/multiprocess.h), meeting through a FileStore.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "distributed/multiprocess.h"
#include "kiln/autograd/gradcheck.h"
#include "kiln/distributed/ddp.h"
#include "kiln/distributed/sync_batch_norm.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/sgd.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/rng.h"

namespace kiln::distributed {
namespace sync_bn_test {

using kiln::test::expect_all_ok;
using kiln::test::rank_check;
using kiln::test::run_ranks;
namespace F = nn::functional;

std::shared_ptr<ProcessGroup> group_of(const std::string& path, int rank, int world) {
  auto store = std::make_shared<FileStore>(path, -1, std::chrono::seconds(30));
  ProcessGroupOptions o;
  o.timeout = std::chrono::seconds(20);
  return new_group("tcp", store, rank, world, o);
}

// |got - want| <= tol (1 + |want|) everywhere; throws (for a forked rank) naming the first element that is not.
void expect_near(const Tensor& got, const Tensor& want, const std::string& what, double tol) {
  rank_check(got.sizes() == want.sizes(), what + ": shape " + shape_str(got.sizes()) + ", expected " +
                                              shape_str(want.sizes()));
  const auto a = got.to_vector<double>(), b = want.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i)
    rank_check(std::abs(a[i] - b[i]) <= tol * (1 + std::abs(b[i])), what + ": element " + std::to_string(i) +
                                                                        " is " + std::to_string(a[i]) +
                                                                        ", reference " + std::to_string(b[i]));
}

// Batch norm of all of x (N, C, ...) in float64, written out from its definition: y, the gradient of
// sum(y * g) with respect to x, weight and bias, and the batch's mean and unbiased variance.
struct Reference {
  Tensor y, grad_x, grad_weight, grad_bias, mean, unbiased_var;
};
Reference reference(const Tensor& x32, const Tensor& w32, const Tensor& b32, const Tensor& g32, double eps) {
  Tensor x = x32.to(kFloat64).detach().requires_grad_(true);
  Tensor w = w32.to(kFloat64).detach().requires_grad_(true);
  Tensor b = b32.to(kFloat64).detach().requires_grad_(true);
  const int64_t C = x.size(1);
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  Shape stat(static_cast<size_t>(x.dim()), 1);
  stat[1] = C;
  const double n = static_cast<double>(x.numel() / C);
  Tensor mean = x.mean(dims, true);
  Tensor var = ((x - mean) * (x - mean)).mean(dims, true);
  Tensor y = (x - mean) / (var + eps).sqrt() * w.view(stat) + b.view(stat);
  (y * g32.to(kFloat64)).sum().backward();
  return {y.detach(), x.grad(), w.grad(), b.grad(), mean.detach().view({C}), (var.detach() * (n / (n - 1))).view({C})};
}

// The rows [begin, begin + count) of t along dim 0.
Tensor rows(const Tensor& t, int64_t begin, int64_t count) { return t.narrow(0, begin, count).contiguous(); }

// ---------------------------------------------------------------------------------------------------------

// With nothing to sum across (one process), sync_batch_norm is batch norm: against the float64 definition
// (output, the three gradients, the running statistics), for (N, C), (N, C, L) and (N, C, H, W) input.
TEST(SyncBatchNorm, OneProcessIsBatchNormByDefinition) {
  const F::CrossProcessSum alone = [](Tensor&) {};
  manual_seed(5);
  for (const Shape& shape : {Shape{6, 3}, Shape{4, 3, 5}, Shape{3, 3, 4, 2}}) {
    SCOPED_TRACE(shape_str(shape));
    Tensor x = (randn(shape) * 3 + 2).requires_grad_(true);
    Tensor w = (rand({3}) + 0.5).requires_grad_(true), b = randn({3}).requires_grad_(true);
    Tensor g = randn(shape);
    Tensor rm = zeros({3}), rv = ones({3});
    Tensor y = F::sync_batch_norm(x, rm, rv, w, b, 0.25, 1e-5, alone);
    (y * g).sum().backward();
    const Reference want = reference(x, w, b, g, 1e-5);
    expect_near(y, want.y, "y", 1e-5);
    expect_near(x.grad(), want.grad_x, "grad x", 1e-4);
    expect_near(w.grad(), want.grad_weight, "grad weight", 1e-5);
    expect_near(b.grad(), want.grad_bias, "grad bias", 1e-5);
    expect_near(rm, want.mean * 0.25, "running mean", 1e-6);
    expect_near(rv, want.unbiased_var * 0.25 + 0.75, "running var", 1e-6);
  }
}

// Its backward is first-order: a second derivative is an error, not a silently wrong number.
TEST(SyncBatchNorm, CreateGraphIsAnError) {
  const F::CrossProcessSum alone = [](Tensor&) {};
  Tensor x = randn({4, 3}, kFloat64).requires_grad_(true);
  Tensor y = F::sync_batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), 0.1, 1e-5, alone);
  try {
    autograd::grad({(y * y * y).sum()}, {x}, {}, /*retain_graph=*/true, /*create_graph=*/true);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("create_graph"), std::string::npos) << e.what();
  }
}

TEST(SyncBatchNorm, GradcheckInFloat64) {
  const F::CrossProcessSum alone = [](Tensor&) {};
  manual_seed(6);
  Tensor x = randn({5, 2, 3}, kFloat64).requires_grad_(true);
  Tensor w = (rand({2}, kFloat64) + 0.5).requires_grad_(true), b = randn({2}, kFloat64).requires_grad_(true);
  EXPECT_TRUE(autograd::gradcheck(
                  [&](const std::vector<Tensor>& in) {
                    return F::sync_batch_norm(in[0], Tensor(), Tensor(), in[1], in[2], 0.1, 1e-5, alone);
                  },
                  {x, w, b})
                  .ok);
}

// One value per channel over every process cannot be normalized in training (PyTorch refuses it too).
TEST(SyncBatchNorm, OneValuePerChannelIsAnError) {
  const F::CrossProcessSum alone = [](Tensor&) {};
  try {
    F::sync_batch_norm(randn({1, 4}), Tensor(), Tensor(), Tensor(), Tensor(), 0.1, 1e-5, alone);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than 1 value per channel"), std::string::npos) << e.what();
  }
}

// Ranks with 5, 0 and 7 rows of one batch (and 2 and 10 on two ranks) normalize as one process with all 12:
// each rank's y and grad x are its rows of the whole batch's, its weight and bias gradients add up over the
// ranks to the whole batch's, and every rank's running statistics are the whole batch's, bit for bit alike.
TEST(SyncBatchNorm, RanksWithUnevenShardsNormalizeAsOneProcessWithTheirRows) {
  for (const std::vector<int64_t>& sizes : {std::vector<int64_t>{5, 0, 7}, std::vector<int64_t>{2, 10}}) {
    const int world = static_cast<int>(sizes.size());
    const std::string path = kiln::test::fresh_temp_path("sync_bn_uneven" + std::to_string(world));
    auto results = run_ranks(world, [&](int rank) {
      auto pg = group_of(path, rank, world);
      Generator gen(42);  // the same whole batch on every rank
      const Tensor x_all = randn({12, 3, 4}, {}, &gen) * 2 - 1, g_all = randn({12, 3, 4}, {}, &gen);
      const Tensor w0 = rand({3}, {}, &gen) + 0.5, b0 = randn({3}, {}, &gen);
      int64_t begin = 0;
      for (int r = 0; r < rank; ++r) begin += sizes[static_cast<size_t>(r)];
      const int64_t count = sizes[static_cast<size_t>(rank)];

      Tensor x = rows(x_all, begin, count).requires_grad_(true);
      Tensor w = w0.clone().requires_grad_(true), b = b0.clone().requires_grad_(true);
      Tensor rm = zeros({3}), rv = ones({3});
      const F::CrossProcessSum sum = [&](Tensor& t) { pg->allreduce(t)->wait(); };
      Tensor y = F::sync_batch_norm(x, rm, rv, w, b, 1.0, 1e-5, sum);
      (y * rows(g_all, begin, count)).sum().backward();

      const Reference want = reference(x_all, w0, b0, g_all, 1e-5);
      expect_near(y, rows(want.y, begin, count), "y", 1e-5);
      expect_near(x.grad(), rows(want.grad_x, begin, count), "grad x", 1e-4);
      Tensor gw = w.grad().clone(), gb = b.grad().clone();
      pg->allreduce(gw)->wait();
      pg->allreduce(gb)->wait();
      expect_near(gw, want.grad_weight, "grad weight summed over ranks", 1e-4);
      expect_near(gb, want.grad_bias, "grad bias summed over ranks", 1e-4);
      expect_near(rm, want.mean, "running mean", 1e-6);  // momentum 1: the batch's own statistics
      expect_near(rv, want.unbiased_var, "running var", 1e-5);
      std::vector<Tensor> all{zeros({3}), zeros({3}), zeros({3})};
      all.resize(static_cast<size_t>(world));
      pg->allgather(all, rv)->wait();
      for (const Tensor& other : all) rank_check(other.equal(rv), "the running variance differs between ranks");
    });
    expect_all_ok(results);
  }
}

// A small CNN with batch norms in 2-d and 1-d.
struct BnNet : nn::Module {
  nn::Conv2d conv{2, 4, 3, {.padding = 1}};
  nn::BatchNorm2d bn2{4};
  nn::Linear fc{4 * 5 * 5, 6};
  nn::BatchNorm1d bn1{6};
  nn::Linear head{6, 2};
  BnNet() {
    register_module("conv", conv);
    register_module("bn2", bn2);
    register_module("fc", fc);
    register_module("bn1", bn1);
    register_module("head", head);
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = relu(bn2(conv(x))).flatten(1);
    return head(relu(bn1(fc(h))));
  }
};

// The whole batch of step s (8 images), the same on every rank.
std::pair<Tensor, Tensor> bn_batch(int s) {
  Generator gen(500 + s);
  return {randn({8, 2, 5, 5}, {}, &gen) * 1.5 + 0.5, randn({8, 2}, {}, &gen)};
}

// 4 SGD steps; on `world` ranks through DDP (each its share of the batch), or alone on the whole batch.
void train_bn_net(BnNet& net, DistributedDataParallel* ddp, int rank, int world) {
  optim::SGD opt(net.parameters(), {.lr = 0.05});
  for (int s = 0; s < 4; ++s) {
    opt.zero_grad();
    auto [x, y] = bn_batch(s);
    const int64_t n = x.size(0) / world;
    Tensor out = ddp != nullptr ? (*ddp)(rows(x, rank * n, n)) : net(x);
    F::mse_loss(out, rows(y, rank * n, n)).backward();
    if (ddp != nullptr) ddp->finalize();
    opt.step();
  }
}

// The headline: DDP on 2 ranks with synchronized batch norms trains what one process trains on the whole batch
// (every parameter and running statistic after 4 steps). Without the synchronization the running statistics
// are the ranks' own and differ, which is what makes the first half of the test able to fail.
TEST(SyncBatchNorm, DDPOnTwoRanksTrainsWhatOneProcessTrainsOnTheWholeBatch) {
  const std::string path = kiln::test::fresh_temp_path("sync_bn_ddp");
  auto results = run_ranks(2, [&](int rank) {
    auto pg = group_of(path, rank, 2);
    manual_seed(11);
    auto single = std::make_shared<BnNet>();
    train_bn_net(*single, nullptr, 0, 1);
    const auto want = single->state_dict();

    for (bool sync : {true, false}) {
      manual_seed(11);
      auto net = std::make_shared<BnNet>();
      if (sync) rank_check(convert_sync_batchnorm(*net, pg) == 2, "expected 2 batch norms converted");
      DistributedDataParallel ddp(net, pg);
      train_bn_net(*net, &ddp, rank, 2);
      const auto got = net->state_dict();
      double worst = 0;
      for (const auto& [name, value] : want) {
        if (value.dtype() != kFloat32) continue;
        Tensor diff = (got.at(name) - value).abs().max();
        worst = std::max(worst, diff.item<double>());
        if (sync) expect_near(got.at(name), value, "synchronized: " + name, 2e-5);
      }
      if (!sync) rank_check(worst > 1e-3, "local batch norms matched the whole batch's (largest difference " +
                                              std::to_string(worst) + "): the test cannot tell sync from local");
    }
  });
  expect_all_ok(results);
}

// The layers keep a weak hold on the group: once it is gone, training through them is an error that says what
// to do; revert_sync_batchnorm makes them local again. Eval mode never communicates.
TEST(SyncBatchNorm, AGoneGroupIsAnErrorAndRevertMakesTheLayersLocal) {
  manual_seed(12);
  auto net = std::make_shared<BnNet>();
  const Tensor x = bn_batch(0).first;
  Tensor with_group;
  {
    auto pg = group_of(kiln::test::fresh_temp_path("sync_bn_gone"), 0, 1);
    EXPECT_EQ(convert_sync_batchnorm(*net, pg), 2);
    EXPECT_TRUE(net->bn2->is_synchronized());
    EXPECT_NE(net->bn2->extra_repr().find("synchronized"), std::string::npos);
    with_group = net->forward(x);  // a group of one: the batch's own statistics
  }
  const Tensor counted = net->bn2->num_batches_tracked.clone();
  try {
    net->forward(x);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("synchronized batch norm bn2 (BatchNorm2d): its process group no longer exists"),
              std::string::npos) << what;
    EXPECT_NE(what.find("revert_sync_batchnorm"), std::string::npos) << what;
  }
  EXPECT_TRUE(net->bn2->num_batches_tracked.equal(counted));  // the failed batch is not counted
  net->eval();
  EXPECT_NO_THROW(net->forward(x));
  net->train();
  EXPECT_EQ(revert_sync_batchnorm(*net), 2);
  EXPECT_FALSE(net->bn2->is_synchronized());
  expect_near(net->forward(x), with_group, "local after revert", 1e-5);  // training output: batch statistics
}

}  // namespace sync_bn_test
}  // namespace kiln::distributed
