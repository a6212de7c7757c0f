// Autocast on the CPU: which dtype each kind of op runs in, that other devices' tensors and float64 pass
// untouched, that guards nest, and that gradients reach float32 parameters as float32, equal to the same
// computation with the casts written out by hand.
#include <gtest/gtest.h>

#include <functional>

#include "kiln/kiln.h"
#include "nn/nn_test_util.h"
#include "tensor/test_util.h"

namespace kiln {
namespace {

namespace F = nn::functional;

Tensor rand32(IntArrayRef shape, uint64_t seed) { return test::randn64(shape, seed).to(kFloat32); }

TEST(Autocast, LowerPrecisionOpsFloat32OpsAndTheRest) {
  for (DType low : {kBFloat16, kFloat16}) {
    SCOPED_TRACE(dtype_name(low));
    Tensor a = rand32({4, 5}, 1), b = rand32({5, 3}, 2), c = rand32({3}, 3);
    Tensor x = rand32({2, 3, 6, 6}, 4), w = rand32({4, 3, 3, 3}, 5);
    AutocastGuard ac(DeviceType::CPU, low);
    EXPECT_EQ(mm(a, b).dtype(), low);
    EXPECT_EQ(matmul(a, b).dtype(), low);
    EXPECT_EQ(addmm(c, a, b).dtype(), low);
    EXPECT_EQ(bmm(a.unsqueeze(0), b.unsqueeze(0)).dtype(), low);
    EXPECT_EQ(F::linear(a, b.t(), c).dtype(), low);
    EXPECT_EQ(F::conv2d(x, w, Tensor(), {1, 1}, {1, 1}).dtype(), low);
    Tensor h = mm(a, b);
    EXPECT_EQ(relu(h).dtype(), low);  // the rest: in the inputs' dtype
    EXPECT_EQ((h * 2).dtype(), low);
    EXPECT_EQ(softmax(h, 1).dtype(), kFloat32);
    EXPECT_EQ(log_softmax(h, 1).dtype(), kFloat32);
    Tensor y = tensor(std::vector<int64_t>{0, 2, 1, 1});
    EXPECT_EQ(F::cross_entropy(h, y).dtype(), kFloat32);
    EXPECT_EQ(F::mse_loss(h, h.detach()).dtype(), kFloat32);
    EXPECT_EQ(F::layer_norm(h, {3}, Tensor(), Tensor(), 1e-5).dtype(), kFloat32);
    // Every loss and norm of the float32 list, on 16-bit inputs.
    Tensor p16 = sigmoid(h), t16 = sigmoid(h * 0.5).detach();
    EXPECT_EQ(F::nll_loss(log_softmax(h, 1).to(low), y).dtype(), kFloat32);
    EXPECT_EQ(F::l1_loss(h, t16).dtype(), kFloat32);
    EXPECT_EQ(F::smooth_l1_loss(h, t16).dtype(), kFloat32);
    EXPECT_EQ(F::huber_loss(h, t16).dtype(), kFloat32);
    EXPECT_EQ(F::binary_cross_entropy(p16, t16).dtype(), kFloat32);
    EXPECT_EQ(F::binary_cross_entropy_with_logits(h, t16).dtype(), kFloat32);
    EXPECT_EQ(F::kl_div(log_softmax(h, 1).to(low), softmax(h, 1).to(low)).dtype(), kFloat32);
    Tensor c16 = F::conv2d(x, w, Tensor(), {1, 1}, {1, 1});
    EXPECT_EQ(F::group_norm(c16, 2, Tensor(), Tensor(), 1e-5).dtype(), kFloat32);
    Tensor rm = zeros({4}), rv = ones({4});
    EXPECT_EQ(F::batch_norm(c16, rm, rv, Tensor(), Tensor(), true, 0.1, 1e-5).dtype(), kFloat32);
    EXPECT_EQ(rm.dtype(), kFloat32);
    // float64 is never cast.
    EXPECT_EQ(mm(a.to(kFloat64), b.to(kFloat64)).dtype(), kFloat64);
  }
}

TEST(Autocast, OtherDevicesGuardsNestingAndOff) {
  Tensor a = rand32({3, 3}, 6);
  {
    AutocastGuard ac(DeviceType::CUDA, kFloat16);  // CPU tensors are not the guard's: untouched
    EXPECT_EQ(mm(a, a).dtype(), kFloat32);
  }
  {
    AutocastGuard outer(DeviceType::CPU, kBFloat16);
    {
      AutocastGuard inner(DeviceType::CPU, kFloat16);
      EXPECT_EQ(mm(a, a).dtype(), kFloat16);
      AutocastGuard off(DeviceType::CPU, kFloat16, false);
      EXPECT_EQ(mm(a, a).dtype(), kFloat32);
      EXPECT_FALSE(autocast_state().enabled);
    }
    EXPECT_EQ(mm(a, a).dtype(), kBFloat16);  // the outer guard again
  }
  EXPECT_FALSE(autocast_state().enabled);
  EXPECT_EQ(mm(a, a).dtype(), kFloat32);
  test::expect_error([] { AutocastGuard bad(DeviceType::CPU, kFloat32); }, {"AutocastGuard", "float16 or bfloat16"});
}

// A small network under autocast: its float32 parameters get float32 gradients, bit for bit those of the
// same forward written with explicit casts, and near those of a float32 forward (bfloat16's precision).
TEST(Autocast, GradientsReachFloat32ParametersThroughTheCasts) {
  const std::vector<int64_t> labels{0, 1, 2, 3, 0, 1, 2, 3};
  Tensor x = rand32({8, 3, 6, 6}, 7), y = tensor(labels);
  Tensor w1 = (rand32({4, 3, 3, 3}, 8) * 0.3).requires_grad_(), b1 = (rand32({4}, 9) * 0.1).requires_grad_();
  Tensor w2 = (rand32({4, 36}, 10) * 0.1).requires_grad_(), b2 = (rand32({4}, 11) * 0.1).requires_grad_();
  std::vector<Tensor> params{w1, b1, w2, b2};
  // NOTE: through std::function, not a generic lambda: with the three forwards inlined into it, this test
  // faulted in its first statement under AddressSanitizer's detect_stack_use_after_return (GCC 12; an
  // outsized frame, by the look of it), though it ran clean without that option.
  auto grads = [&](const std::function<Tensor()>& forward) {
    for (Tensor& p : params) p.set_grad(Tensor());
    forward().backward();
    std::vector<Tensor> out;
    for (Tensor& p : params) out.push_back(p.grad());
    return out;
  };
  const DType low = kBFloat16;
  std::vector<Tensor> autocast_grads = grads([&] {
    AutocastGuard ac(DeviceType::CPU, low);
    Tensor h = relu(F::conv2d(x, w1, b1, {1, 1}, {1, 1}));
    return F::cross_entropy(F::linear(F::max_pool2d(h, {2, 2}).flatten(1), w2, b2), y);
  });
  std::vector<Tensor> by_hand = grads([&] {
    Tensor h = relu(F::conv2d(x.to(low), w1.to(low), b1.to(low), {1, 1}, {1, 1}));
    Tensor z = addmm(b2.to(low), F::max_pool2d(h, {2, 2}).flatten(1), w2.to(low).t());
    return F::cross_entropy(z.to(kFloat32), y);
  });
  std::vector<Tensor> full = grads([&] {
    Tensor h = relu(F::conv2d(x, w1, b1, {1, 1}, {1, 1}));
    return F::cross_entropy(F::linear(F::max_pool2d(h, {2, 2}).flatten(1), w2, b2), y);
  });
  for (size_t i = 0; i < params.size(); ++i) {
    SCOPED_TRACE(i);
    ASSERT_TRUE(autocast_grads[i].defined());
    EXPECT_EQ(autocast_grads[i].dtype(), kFloat32);
    EXPECT_EQ(test::values(autocast_grads[i]), test::values(by_hand[i]));
    test::expect_tensor_near(autocast_grads[i], test::values(full[i]), full[i].sizes(), 0.05, 0.02,
                             "autocast against float32");
  }
}

// The cast cache: a parameter used by several ops is cast once inside a guard, and its gradient is the sum over
// its uses through that one cast; a parameter changed in place is cast again; nothing is cached without grad
// mode or for tensors that are not parameters; the cache empties when the outermost guard ends.
TEST(Autocast, ParameterCastsAreCachedUntilTheOutermostGuardEnds) {
  Tensor w = rand32({3, 4}, 12).requires_grad_(), x = rand32({2, 4}, 13);
  {
    AutocastGuard outer(DeviceType::CPU, kBFloat16);
    Tensor c1 = autocast::lower(w), c2 = autocast::lower(w);
    EXPECT_EQ(c1.impl(), c2.impl());
    EXPECT_EQ(autocast::cached_casts(), 1u);
    {
      AutocastGuard inner(DeviceType::CPU, kBFloat16);
      EXPECT_EQ(autocast::lower(w).impl(), c1.impl());  // an inner guard shares the outer one's cache
      AutocastGuard half(DeviceType::CPU, kFloat16);
      EXPECT_EQ(autocast::lower(w).dtype(), kFloat16);  // another dtype: its own entry
      EXPECT_EQ(autocast::cached_casts(), 2u);
      AutocastGuard off(DeviceType::CPU, kFloat16, false);
    }
    EXPECT_EQ(autocast::cached_casts(), 2u);  // an inner guard's end does not empty it
    {
      AutocastGuard off(DeviceType::CPU, kBFloat16, false);
      AutocastGuard again(DeviceType::CPU, kBFloat16);  // an enabled guard inside a disabled one
    }
    EXPECT_EQ(autocast::lower(w).impl(), c1.impl());  // ... nor does that one's, while the outer guard lives
    // Not parameters: a tensor without requires_grad, a non-leaf.
    EXPECT_NE(autocast::lower(x).impl(), autocast::lower(x).impl());
    Tensor nonleaf = w * 2;
    EXPECT_NE(autocast::lower(nonleaf).impl(), autocast::lower(nonleaf).impl());
    {
      NoGradGuard no_grad;  // no caching without grad mode, and no use of what is cached
      Tensor a = autocast::lower(w);
      EXPECT_NE(a.impl(), c1.impl());
      EXPECT_EQ(a.grad_fn(), nullptr);
      w.add_(1.0);  // an optimizer step inside the guard
    }
    Tensor c3 = autocast::lower(w);
    EXPECT_NE(c3.impl(), c1.impl());
    EXPECT_EQ(test::values(c3), test::values(w.detach().to(kBFloat16)));
  }
  EXPECT_EQ(autocast::cached_casts(), 0u);

  // Used twice in one forward: the gradient is the sum over both uses, equal to casting by hand once.
  Tensor w2 = rand32({4, 4}, 14).requires_grad_();
  {
    AutocastGuard ac(DeviceType::CPU, kBFloat16);
    F::linear(F::linear(x, w2), w2).sum().backward();
  }
  Tensor cached_grad = w2.grad();
  w2.set_grad(Tensor());
  Tensor once = w2.to(kBFloat16);
  mm(mm(x.to(kBFloat16), once.t()), once.t()).to(kFloat32).sum().backward();
  EXPECT_EQ(test::values(cached_grad), test::values(w2.grad()));
}

}  // namespace
}  // namespace kiln
