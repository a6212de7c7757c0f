// GradScaler's state machine, on the CPU: scaling and exact unscaling, the skipped step on an infinite or NaN
// gradient, backoff and growth of the scale, the once-per-step unscale, state_dict, and the disabled scaler.
#include "optim/optim_test_util.h"

namespace kiln {
namespace {

using test::expect_error;
using test::values;

Tensor param(std::vector<float> v) { return tensor(v).requires_grad_(); }

// A step through the scaler equals the plain step on the true gradients: the default scale is a power of two,
// so scaling and unscaling are exact.
TEST(GradScaler, ScalesTheLossAndStepsOnExactlyUnscaledGradients) {
  Tensor p = param({1.0f, -2.0f, 0.5f}), q = param({1.0f, -2.0f, 0.5f});
  optim::SGD scaled_opt({p}, {.lr = 0.1, .momentum = 0.9}), plain_opt({q}, {.lr = 0.1, .momentum = 0.9});
  optim::GradScaler scaler;
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  for (int step = 0; step < 3; ++step) {
    Tensor x = tensor(std::vector<float>{0.3f, 1.7f, -0.25f + static_cast<float>(step)});
    Tensor loss = (p * p * x).sum();
    Tensor scaled = scaler.scale(loss);
    EXPECT_EQ(scaled.item<double>(), loss.item<double>() * 65536.0);
    scaled.backward();
    EXPECT_TRUE(scaler.step(scaled_opt));
    EXPECT_FALSE(scaler.found_inf(scaled_opt));
    scaler.update();
    (q * q * x).sum().backward();
    plain_opt.step();
    ASSERT_EQ(values(p), values(q)) << "step " << step;
    p.set_grad(Tensor()), q.set_grad(Tensor());
  }
}

// An infinite or NaN gradient: the step is skipped (parameters and optimizer state untouched), the scale backs
// off; growth_interval clean steps in a row grow it again, and a bad step restarts the count.
TEST(GradScaler, SkipsBadStepsBacksOffAndGrows) {
  Tensor p = param({1.0f, 2.0f});
  optim::Adam opt({p}, {.lr = 0.1});
  optim::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 3});
  auto iterate = [&](float g0) {
    p.set_grad(tensor(std::vector<float>{g0, 1.0f}) * scaler.get_scale());
    const bool stepped = scaler.step(opt);
    scaler.update();
    return stepped;
  };
  EXPECT_FALSE(iterate(INFINITY));
  EXPECT_EQ(values(p), (std::vector<double>{1.0, 2.0}));
  EXPECT_TRUE(opt.state(p).tensors.empty());  // Adam never ran: no state
  EXPECT_EQ(scaler.get_scale(), 512.0);
  EXPECT_FALSE(iterate(NAN));
  EXPECT_EQ(scaler.get_scale(), 256.0);
  EXPECT_TRUE(iterate(0.5f));
  EXPECT_TRUE(iterate(0.5f));
  EXPECT_EQ(scaler.get_scale(), 256.0);  // two clean steps: not yet
  EXPECT_FALSE(iterate(-INFINITY));      // the count starts over
  EXPECT_EQ(scaler.get_scale(), 128.0);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(iterate(0.5f));
  EXPECT_EQ(scaler.get_scale(), 256.0);
  EXPECT_NE(values(p), (std::vector<double>{1.0, 2.0}));
}

// unscale_ before step (to clip the true gradients) divides once; a second unscale_ is an error; update()
// starts the next iteration.
TEST(GradScaler, UnscaleOncePerIteration) {
  Tensor p = param({3.0f});
  optim::SGD opt({p}, {.lr = 1.0});
  optim::GradScaler scaler({.init_scale = 8.0});
  p.set_grad(tensor(std::vector<float>{16.0f}));
  scaler.unscale_(opt);
  EXPECT_EQ(values(p.grad()), (std::vector<double>{2.0}));
  expect_error([&] { scaler.unscale_(opt); }, {"unscale_", "already", "SGD"});
  EXPECT_TRUE(scaler.step(opt));  // no second division
  EXPECT_EQ(values(p), (std::vector<double>{1.0}));
  expect_error([&] { scaler.step(opt); }, {"step", "already", "update()"});
  scaler.update();
  p.set_grad(tensor(std::vector<float>{16.0f}));
  scaler.unscale_(opt);  // a new iteration
  EXPECT_EQ(values(p.grad()), (std::vector<double>{2.0}));
  // 16-bit gradients are refused, as PyTorch refuses them.
  Tensor h = tensor(std::vector<float>{1.0f}).to(kFloat16).requires_grad_();
  optim::SGD hopt({h}, {.lr = 1.0});
  h.set_grad(tensor(std::vector<float>{8.0f}).to(kFloat16));
  expect_error([&] { scaler.unscale_(hopt); }, {"unscale_", "float16", "underflow"});
}

TEST(GradScaler, StateDictResumesTheScaleAndTheGrowthCount) {
  optim::GradScaler a({.init_scale = 64.0, .growth_interval = 2});
  Tensor p = param({1.0f});
  optim::SGD opt({p}, {.lr = 0.1});
  p.set_grad(tensor(std::vector<float>{1.0f}));
  a.step(opt);
  a.update();  // one clean step of two
  optim::GradScaler b({.init_scale = 64.0, .growth_interval = 2});
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(b.state_dict(), a.state_dict());
  p.set_grad(tensor(std::vector<float>{1.0f}));
  b.step(opt);
  b.update();  // the second: grows
  EXPECT_EQ(b.get_scale(), 128.0);
  expect_error([&] { b.load_state_dict({{"scale", -1.0}, {"growth_tracker", 0.0}}); }, {"scale", "positive"});
  expect_error([&] { b.load_state_dict({{"scale", 2.0}}); }, {"growth_tracker"});
}

TEST(GradScaler, DisabledPassesThroughAndBadOptionsAreErrors) {
  optim::GradScaler off({.enabled = false});
  Tensor p = param({1.0f});
  optim::SGD opt({p}, {.lr = 0.5});
  Tensor loss = (p * 3.0f).sum();
  EXPECT_EQ(off.scale(loss).item<double>(), 3.0);
  EXPECT_EQ(off.get_scale(), 1.0);
  p.set_grad(tensor(std::vector<float>{INFINITY}));
  EXPECT_TRUE(off.step(opt));  // no checks when disabled
  expect_error([] { optim::GradScaler({.init_scale = 0}); }, {"init_scale"});
  expect_error([] { optim::GradScaler({.growth_factor = 1.0}); }, {"growth_factor"});
  expect_error([] { optim::GradScaler({.backoff_factor = 1.0}); }, {"backoff_factor"});
  expect_error([] { optim::GradScaler({.growth_interval = 0}); }, {"growth_interval"});
}

}  // namespace
}  // namespace kiln
