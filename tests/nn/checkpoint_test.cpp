// Activation checkpointing (autograd::checkpoint, nn::checkpoint_sequential): the same gradients as the plain
// graph, bit for bit (the segment's ops run again, in the same order, on the same values), through backward,
// grad and create_graph, with dropout's masks repeated and under autocast; the memory a forward keeps,
// measured; and the errors when a segment cannot be recomputed faithfully.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "tensor/test_util.h"

namespace kiln {
namespace {

using test::expect_error;

nn::Sequential make_block(int64_t width, int64_t hidden, double dropout = 0) {
  nn::Sequential block(nn::Linear(width, hidden), nn::Tanh());
  if (dropout > 0) block->push_back(nn::Dropout(dropout));
  block->push_back(nn::Linear(hidden, width));
  return block;
}

struct Stack {
  std::vector<nn::Sequential> blocks;
  Stack(int depth, int64_t width, int64_t hidden, double dropout = 0) {
    manual_seed(5);
    for (int i = 0; i < depth; ++i) blocks.push_back(make_block(width, hidden, dropout));
  }
  std::vector<Tensor> parameters() const {
    std::vector<Tensor> out;
    for (const auto& b : blocks)
      for (const Tensor& p : b->parameters()) out.push_back(p);
    return out;
  }
  void zero_grad() {
    for (auto& b : blocks) b->zero_grad();
  }
  // Residual blocks, each checkpointed or not.
  Tensor forward(const Tensor& x, bool checkpointed, autograd::CheckpointOptions options = {}) {
    Tensor h = x;
    for (auto& block : blocks) {
      auto f = [block](const Tensor& in) { return in + block->forward(in); };
      h = checkpointed ? autograd::checkpoint(f, h, options) : f(h);
    }
    return h;
  }
};

Tensor loss_of(const Tensor& y) { return (y * y).mean(); }

// The gradients of the parameters and of x after loss.backward(), plain and checkpointed.
std::vector<Tensor> grads_after_backward(Stack& s, const Tensor& x, bool checkpointed) {
  s.zero_grad();
  x.set_grad(Tensor());
  loss_of(s.forward(x, checkpointed)).backward();
  std::vector<Tensor> out{x.grad()};
  for (const Tensor& p : s.parameters()) out.push_back(p.grad());
  return out;
}

void expect_same_bits(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(a[i].defined() && b[i].defined()) << "gradient " << i;
    EXPECT_TRUE(a[i].equal(b[i])) << "gradient " << i << " differs by up to "
                                  << (a[i] - b[i]).abs().max().item<double>() << " (of up to "
                                  << a[i].abs().max().item<double>() << ")";
  }
}

TEST(Checkpoint, BackwardGivesTheUncheckpointedGradientsBitForBit) {
  Stack s(3, 8, 16);
  const Tensor x = randn({5, 8}).requires_grad_();
  const auto plain = grads_after_backward(s, x, false);
  const auto checkpointed = grads_after_backward(s, x, true);
  expect_same_bits(plain, checkpointed);
}

TEST(Checkpoint, GradAndParametersOnlySegments) {
  Stack s(2, 6, 12);
  const Tensor x = randn({4, 6});  // no gradient wanted for x: the segments still reach the parameters
  const auto params = s.parameters();
  const auto plain = autograd::grad({loss_of(s.forward(x, false))}, params);
  const auto checkpointed = autograd::grad({loss_of(s.forward(x, true))}, params);
  expect_same_bits(plain, checkpointed);
  for (const Tensor& p : params) EXPECT_FALSE(p.grad().defined()) << "grad() must not touch .grad";
}

TEST(Checkpoint, CreateGraphGivesTheSecondDerivative) {
  // The first derivative is the plain graph's bits. The second derivatives add the same terms in another order
  // (the recomputed segment's recorded backward joins the graph at another point), so they agree to rounding.
  Stack s(2, 4, 8);
  const Tensor x = randn({3, 4}, kFloat64).requires_grad_();
  for (auto& b : s.blocks) b->to(kFloat64);
  std::vector<std::vector<Tensor>> results;
  for (bool checkpointed : {false, true}) {
    s.zero_grad();
    x.set_grad(Tensor());
    const Tensor g = autograd::grad({loss_of(s.forward(x, checkpointed))}, {x}, {}, std::nullopt, true)[0];
    (g * g).sum().backward();  // through the gradient itself: second derivatives of x and the parameters
    std::vector<Tensor> out{g.detach(), x.grad()};
    for (const Tensor& p : s.parameters()) out.push_back(p.grad());
    results.push_back(out);
  }
  EXPECT_TRUE(results[0][0].equal(results[1][0]));
  for (size_t i = 1; i < results[0].size(); ++i) {
    ASSERT_TRUE(results[1][i].defined()) << "second derivative " << i;
    EXPECT_TRUE(results[0][i].allclose(results[1][i], 1e-12, 1e-15)) << "second derivative " << i;
  }
}

TEST(Checkpoint, DropoutMasksRepeatAndTheGeneratorEndsWhereThePlainRunLeftIt) {
  Stack s(2, 8, 32, 0.5);
  const Tensor x = randn({6, 8}).requires_grad_();
  manual_seed(11);
  const auto plain = grads_after_backward(s, x, false);
  const uint64_t plain_offset = default_generator().offset();
  manual_seed(11);
  const auto checkpointed = grads_after_backward(s, x, true);
  EXPECT_EQ(default_generator().offset(), plain_offset) << "the recomputation must not use up random numbers";
  expect_same_bits(plain, checkpointed);

  // Without preserve_rng_state the recomputation draws new masks: its gradients are not the forward's.
  manual_seed(11);
  s.zero_grad();
  x.set_grad(Tensor());
  loss_of(s.forward(x, true, {.preserve_rng_state = false})).backward();
  EXPECT_FALSE(s.parameters()[0].grad().equal(plain[1]));
}

TEST(Checkpoint, AForwardKeepsOnlyTheSegmentsInputs) {
  // Eight residual blocks on a (256, 64) input with a 1024-wide hidden layer: the plain graph keeps each
  // block's (256, 1024) activations (1 MiB a tensor); the checkpointed one keeps each block's (256, 64) input.
  Stack s(8, 64, 1024);
  const Tensor x = randn({256, 64}).requires_grad_();
  std::vector<size_t> kept, peak;
  for (bool checkpointed : {false, true}) {
    const size_t before = cpu_memory_stats().allocated_bytes;
    cpu_reset_peak_memory_stats();
    Tensor loss = loss_of(s.forward(x, checkpointed));
    kept.push_back(cpu_memory_stats().allocated_bytes - before);
    s.zero_grad();
    cpu_reset_peak_memory_stats();
    loss.backward();
    peak.push_back(cpu_memory_stats().peak_allocated_bytes - before);
  }
  const size_t activation = 256 * 1024 * sizeof(float);
  EXPECT_GT(kept[0], 8 * activation) << "the plain graph keeps each block's hidden activation";
  // Measured: 8.9 MB against 0.52 MB kept, and a backward peak of 13.4 MB against 5.1 MB.
  EXPECT_LT(kept[1], 8 * activation / 4) << "the checkpointed graph keeps the blocks' inputs and outputs only";
  EXPECT_LT(peak[1], peak[0] / 2) << "backward recomputes one block at a time: peaks " << peak[0] << " and "
                                  << peak[1];
}

TEST(Checkpoint, HooksOnParametersRunOnceAndSeeTheWholeGradient) {
  // The weight is used by two checkpointed calls, so its gradient has two parts: the tensor hook and the
  // post-accumulate hook must each run once, on the sum, which must be the plain graph's gradient.
  Stack s(1, 4, 8);
  const Tensor w = s.blocks[0]->parameters()[0];
  const Tensor x = randn({2, 4});
  auto twice = [&](bool checkpointed) {
    Tensor h = x;
    for (int i = 0; i < 2; ++i) {
      auto f = [&s](const Tensor& in) { return in + s.blocks[0]->forward(in); };
      h = checkpointed ? autograd::checkpoint(f, h) : f(h);
    }
    return loss_of(h);
  };
  twice(false).backward();
  const Tensor plain = w.grad().clone();
  s.zero_grad();
  int calls = 0, accumulated = 0;
  Tensor seen;
  w.register_hook([&](const Tensor& g) {
    ++calls;
    seen = g.clone();
    return Tensor();
  });
  w.register_post_accumulate_grad_hook([&](const Tensor&) { ++accumulated; });
  twice(true).backward();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(accumulated, 1);
  ASSERT_TRUE(seen.defined());
  EXPECT_TRUE(seen.equal(plain));
  EXPECT_TRUE(w.grad().equal(plain));
}

TEST(Checkpoint, OutputsThatAreInputsOrIntegersAndNoGradMode) {
  const Tensor x = randn({3, 4}).requires_grad_();
  const Tensor w = randn({4, 4}).requires_grad_();
  auto outs = autograd::checkpoint(
      [&w](const std::vector<Tensor>& in) {
        Tensor y = in[0].matmul(w);
        return std::vector<Tensor>{y, y.argmax(1), in[0]};
      },
      {x});
  EXPECT_TRUE(outs[0].requires_grad());
  EXPECT_FALSE(outs[1].requires_grad());
  EXPECT_TRUE(outs[2].equal(x));
  (outs[0].sum() + (outs[2] * 3).sum()).backward();
  const Tensor want_x = ones({3, 4}).matmul(w.detach().t()) + 3;
  EXPECT_TRUE(x.grad().allclose(want_x, 1e-6, 1e-6));
  EXPECT_TRUE(w.grad().allclose(x.detach().t().matmul(ones({3, 4})), 1e-6, 1e-6));

  NoGradGuard no_grad;
  const Tensor y = autograd::checkpoint([&w](const Tensor& in) { return in.matmul(w); }, x);
  EXPECT_FALSE(y.requires_grad());
}

TEST(Checkpoint, RetainGraphRecomputesAgain) {
  Stack s(2, 4, 8);
  const Tensor x = randn({2, 4}).requires_grad_();
  Tensor loss = loss_of(s.forward(x, true));
  loss.backward({}, true);
  const Tensor once = x.grad().clone();
  loss.backward();
  EXPECT_TRUE(x.grad().allclose(once * 2, 1e-6, 1e-7));
  expect_error([&] { loss.backward(); }, {"backward through", "second time", "retain_graph"});
  // The checkpoint node's own message, reached first when backward starts at the segment's output.
  const Tensor y = autograd::checkpoint([](const Tensor& in) { return in * in; }, x);
  y.backward(ones_like(y));
  expect_error([&] { y.backward(ones_like(y)); },
               {"checkpoint: backward through the segment a second time", "retain_graph"});
}

TEST(Checkpoint, UnderAutocastASharedWeightAndBackwardInsideTheGuard) {
  // One Linear before and inside two checkpointed segments, in one bfloat16 autocast guard that is still alive
  // at backward: each run of a segment makes its own casts, so both runs leave it through the weight itself.
  // The plain graph sums the three uses' gradients in bfloat16 before one cast back, the checkpointed one
  // casts each back first: the same gradient to bfloat16's precision.
  manual_seed(2);
  nn::Linear fc(8, 8);
  const Tensor x = randn({4, 8});
  std::vector<std::vector<Tensor>> grads;
  for (bool checkpointed : {false, true}) {
    fc->zero_grad();
    AutocastGuard autocast(DeviceType::CPU, kBFloat16);
    auto f = [&fc](const Tensor& in) { return fc(in).relu(); };
    Tensor h = fc(x);  // casts the weight before the segments
    for (int i = 0; i < 2; ++i) h = checkpointed ? autograd::checkpoint(f, h) : f(h);
    h.to(kFloat32).sum().backward();
    grads.push_back({fc->weight.grad(), fc->bias.grad()});
  }
  for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(grads[0][i].allclose(grads[1][i], 2e-2, 2e-2)) << "gradient " << i;
}

TEST(Checkpoint, AnOutputThatSharesDataIsACopy) {
  // A parameter returned as a view, and two chunks of one result: written in place, they must not change the
  // parameter or each other behind autograd's back.
  const Tensor w = randn({4}).requires_grad_();
  const Tensor x = randn({4}).requires_grad_();
  auto outs = autograd::checkpoint(
      [&w](const std::vector<Tensor>& in) {
        std::vector<Tensor> halves = (in[0] * 2).chunk(2);
        return std::vector<Tensor>{w.view({2, 2}), halves[0], halves[1]};
      },
      {x});
  EXPECT_FALSE(outs[0].shares_storage_with(w));
  EXPECT_FALSE(outs[1].shares_storage_with(outs[2]));
  const Tensor before = w.detach().clone();
  outs[0].mul_(0);
  EXPECT_TRUE(w.detach().equal(before));
  (outs[0].sum() + outs[1].sum() + 3 * outs[2].sum()).backward();
  EXPECT_TRUE(x.grad().equal(tensor(std::vector<float>{2, 2, 6, 6})));
  EXPECT_TRUE(w.grad().equal(zeros({4})));  // through the in-place multiplication by 0
}

TEST(Checkpoint, ErrorsWhenTheSegmentCannotBeRecomputedFaithfully) {
  const Tensor w1 = randn({4, 4}).requires_grad_(), w2 = randn({4, 4}).requires_grad_();
  const Tensor x = randn({2, 4}).requires_grad_();
  {
    // A segment whose recomputation reads another parameter.
    int runs = 0;
    Tensor y = autograd::checkpoint([&](const Tensor& in) { return in.matmul(runs++ == 0 ? w1 : w2); }, x);
    expect_error([&] { y.sum().backward(); }, {"checkpoint", "recomputed in backward", "leaf of shape (4, 4)",
                                               "first run did not use"});
  }
  {
    // An input changed in place after the forward: its saved version no longer matches.
    Tensor input = randn({2, 4}).requires_grad_() * 1;
    Tensor y = autograd::checkpoint([&](const Tensor& in) { return in.matmul(w1); }, input);
    input.mul_(2);
    expect_error([&] { y.sum().backward(); }, {"checkpoint", "modified in place", "mul_"});
  }
  expect_error([] { autograd::checkpoint(autograd::CheckpointFn(), {}); }, {"checkpoint", "no function"});
}

TEST(CheckpointSequential, MatchesThePlainSequentialAndChecksSegments) {
  manual_seed(3);
  nn::Sequential net(nn::Linear(6, 10), nn::ReLU(), nn::Linear(10, 10), nn::Tanh(), nn::Linear(10, 3));
  const Tensor x = randn({4, 6}).requires_grad_();
  std::vector<std::vector<Tensor>> results;
  for (size_t segments : {0, 1, 2, 5}) {  // 0: no checkpointing at all
    net->zero_grad();
    x.set_grad(Tensor());
    Tensor y = segments == 0 ? net->forward(x) : nn::checkpoint_sequential(net, segments, x);
    loss_of(y).backward();
    std::vector<Tensor> r{y.detach(), x.grad()};
    for (const Tensor& p : net->parameters()) r.push_back(p.grad());
    results.push_back(r);
  }
  for (size_t i = 1; i < results.size(); ++i) expect_same_bits(results[0], results[i]);
  expect_error([&] { nn::checkpoint_sequential(net, 0, x); }, {"checkpoint_sequential", "at least 1"});
  expect_error([&] { nn::checkpoint_sequential(net, 6, x); }, {"checkpoint_sequential", "6 segments for 5 modules"});
}

}  // namespace
}  // namespace kiln
