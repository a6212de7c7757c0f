// The convolution and max-pooling ops (kiln/tensor/ops/conv.h) and their autograd rules, against two
// independent references: a direct float64 loop written here, and nn::F's composite of views and GEMM (what
// nn::F runs when the device has no conv kernels; the tests take the CPU kernels out of the dispatch table to
// get it). Gradients are also checked against central differences.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "kiln/tensor/dispatch.h"
#include "nn/nn_test_util.h"
#include "tensor/test_util.h"

namespace kiln {
namespace {

using autograd::gradcheck;
using nn::F::Pair;
using test::expect_error;
using test::randn64;

// While alive, the CPU has no conv or pooling kernels, so nn::F runs its composites.
class CompositeOnly {
 public:
  CompositeOnly()
      : conv_(register_kernel<Op::conv2d>(DeviceType::CPU, nullptr)),
        conv_in_(register_kernel<Op::conv2d_backward_input>(DeviceType::CPU, nullptr)),
        conv_w_(register_kernel<Op::conv2d_backward_weight>(DeviceType::CPU, nullptr)),
        pool_(register_kernel<Op::max_pool2d>(DeviceType::CPU, nullptr)),
        pool_b_(register_kernel<Op::max_pool2d_backward>(DeviceType::CPU, nullptr)) {}
  ~CompositeOnly() {
    register_kernel<Op::conv2d>(DeviceType::CPU, conv_);
    register_kernel<Op::conv2d_backward_input>(DeviceType::CPU, conv_in_);
    register_kernel<Op::conv2d_backward_weight>(DeviceType::CPU, conv_w_);
    register_kernel<Op::max_pool2d>(DeviceType::CPU, pool_);
    register_kernel<Op::max_pool2d_backward>(DeviceType::CPU, pool_b_);
  }

 private:
  KernelFn<Op::conv2d> conv_;
  KernelFn<Op::conv2d_backward_input> conv_in_;
  KernelFn<Op::conv2d_backward_weight> conv_w_;
  KernelFn<Op::max_pool2d> pool_;
  KernelFn<Op::max_pool2d_backward> pool_b_;
};

Conv2dParams conv_params(Pair s, Pair p, Pair d, int64_t groups) {
  Conv2dParams c;
  c.stride[0] = s.h, c.stride[1] = s.w;
  c.padding[0] = p.h, c.padding[1] = p.w;
  c.dilation[0] = d.h, c.dilation[1] = d.w;
  c.groups = groups;
  return c;
}

Pool2dParams pool_params(Pair k, Pair s, Pair p, Pair d) {
  Pool2dParams c;
  c.kernel[0] = k.h, c.kernel[1] = k.w;
  c.stride[0] = s.h, c.stride[1] = s.w;
  c.padding[0] = p.h, c.padding[1] = p.w;
  c.dilation[0] = d.h, c.dilation[1] = d.w;
  return c;
}

// out[n][o][i][j] = b[o] + sum over c, u, v of x[n][g cg + c][i sh - ph + u dh][j sw - pw + v dw] w[o][c][u][v],
// g = o's group, x outside the image being 0. Seven loops, float64.
std::vector<double> conv_loops(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p, int64_t oh,
                               int64_t ow) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), O = w.size(0), KH = w.size(2),
                KW = w.size(3), cg = C / p.groups, og = O / p.groups;
  std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>();
  std::vector<double> out(N * O * oh * ow, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double acc = b.defined() ? b.to_vector<double>()[o] : 0.0;
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t u = 0; u < KH; ++u)
              for (int64_t v = 0; v < KW; ++v) {
                int64_t y = i * p.stride[0] - p.padding[0] + u * p.dilation[0];
                int64_t z = j * p.stride[1] - p.padding[1] + v * p.dilation[1];
                if (y < 0 || y >= H || z < 0 || z >= W) continue;
                acc += xv[((n * C + (o / og) * cg + c) * H + y) * W + z] * wv[((o * cg + c) * KH + u) * KW + v];
              }
          out[((n * O + o) * oh + i) * ow + j] = acc;
        }
  return out;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << "at " << i;
}

struct Case {
  Shape x;
  int64_t out_channels, kh, kw;
  Pair s, p, d;
  int64_t groups;
  bool bias;
};

std::vector<Case> conv_cases() {
  std::vector<Case> cases;
  for (int64_t n : {1, 5})
    for (int64_t g : {1, 2})
      for (Pair s : {Pair(1), Pair(2, 3)})
        for (Pair p : {Pair(0), Pair(1, 2)})
          for (Pair d : {Pair(1), Pair(2, 1)})
            cases.push_back({{n, 4, 7, 9}, 6, 3, 2, s, p, d, g, (n + g) % 2 == 0});
  cases.push_back({{3, 6, 5, 4}, 4, 1, 1, 1, 0, 1, 2, true});    // 1x1 stride 1: no im2col
  cases.push_back({{2, 3, 5, 5}, 3, 2, 2, 1, 0, 1, 3, false});   // depthwise
  cases.push_back({{2, 2, 6, 5}, 3, 1, 1, 2, 1, 1, 1, true});    // 1x1 but strided and padded: im2col
  cases.push_back({{1, 1, 28, 28}, 8, 3, 3, 1, 1, 1, 1, true});  // W3's first layer, smaller
  return cases;
}

TEST(ConvOps, ForwardMatchesLoopsAndComposite) {
  uint64_t seed = 100;
  for (const Case& c : conv_cases()) {
    SCOPED_TRACE(::testing::Message() << shape_str(c.x) << " O " << c.out_channels << " k " << c.kh << "x" << c.kw
                                      << " s " << c.s.h << "," << c.s.w << " p " << c.p.h << "," << c.p.w << " d "
                                      << c.d.h << "," << c.d.w << " g " << c.groups << " bias " << c.bias);
    Tensor x = randn64(c.x, seed++), w = randn64({c.out_channels, c.x[1] / c.groups, c.kh, c.kw}, seed++);
    Tensor b = c.bias ? randn64({c.out_channels}, seed++) : Tensor();
    Conv2dParams p = conv_params(c.s, c.p, c.d, c.groups);
    Tensor y = ops::conv2d(x, w, b, p);
    int64_t oh = ops::conv_out_size(c.x[2], c.kh, p.stride[0], p.padding[0], p.dilation[0]);
    int64_t ow = ops::conv_out_size(c.x[3], c.kw, p.stride[1], p.padding[1], p.dilation[1]);
    ASSERT_EQ(y.sizes(), (Shape{c.x[0], c.out_channels, oh, ow}));
    expect_close(y.to_vector<double>(), conv_loops(x, w, b, p, oh, ow), 1e-12);
    Tensor composite;
    {
      CompositeOnly guard;
      composite = nn::F::conv2d(x, w, b, c.s, c.p, c.d, c.groups);
    }
    expect_close(y.to_vector<double>(), composite.to_vector<double>(), 1e-12);
    // float32 through the same kernel
    Tensor y32 = ops::conv2d(x.to(kFloat32), w.to(kFloat32), c.bias ? b.to(kFloat32) : Tensor(), p);
    EXPECT_EQ(y32.dtype(), kFloat32);
    expect_close(y32.to_vector<double>(), composite.to_vector<double>(), 1e-4);
  }
}

TEST(ConvOps, HalfPrecisionGoesThroughFloat32) {
  Tensor x = randn64({2, 3, 6, 6}, 7), w = randn64({4, 3, 3, 3}, 8), b = randn64({4}, 9);
  Conv2dParams p = conv_params(1, 1, 1, 1);
  Tensor ref = ops::conv2d(x.to(kBFloat16).to(kFloat64), w.to(kBFloat16).to(kFloat64), b.to(kBFloat16).to(kFloat64), p);
  Tensor y = ops::conv2d(x.to(kBFloat16), w.to(kBFloat16), b.to(kBFloat16), p);
  EXPECT_EQ(y.dtype(), kBFloat16);
  expect_close(y.to_vector<double>(), ref.to_vector<double>(), 1e-2);
}

// The gradients of the kernel path against the composite's (both through autograd), for every case.
TEST(ConvOps, BackwardMatchesComposite) {
  uint64_t seed = 300;
  for (const Case& c : conv_cases()) {
    SCOPED_TRACE(::testing::Message() << shape_str(c.x) << " s " << c.s.h << "," << c.s.w << " p " << c.p.h << ","
                                      << c.p.w << " d " << c.d.h << "," << c.d.w << " g " << c.groups);
    Tensor x = randn64(c.x, seed++), w = randn64({c.out_channels, c.x[1] / c.groups, c.kh, c.kw}, seed++);
    Tensor b = c.bias ? randn64({c.out_channels}, seed++) : Tensor();
    auto grads = [&](bool composite) {
      Tensor xi = x.detach().requires_grad_(), wi = w.detach().requires_grad_();
      Tensor bi = c.bias ? b.detach().requires_grad_() : Tensor();
      Tensor y;
      if (composite) {
        CompositeOnly guard;
        y = nn::F::conv2d(xi, wi, bi, c.s, c.p, c.d, c.groups);
      } else {
        y = nn::F::conv2d(xi, wi, bi, c.s, c.p, c.d, c.groups);
      }
      // a fixed, non-uniform output gradient
      Tensor gy = randn64(y.sizes(), 999);
      (y * gy).sum().backward();
      std::vector<Tensor> g{xi.grad(), wi.grad()};
      if (c.bias) g.push_back(bi.grad());
      return g;
    };
    std::vector<Tensor> fast = grads(false), ref = grads(true);
    for (size_t i = 0; i < ref.size(); ++i) {
      SCOPED_TRACE(i);
      expect_close(fast[i].to_vector<double>(), ref[i].to_vector<double>(), 1e-11);
    }
  }
}

TEST(ConvOps, GradcheckFloat64) {
  std::vector<Case> cases = {
      {{2, 4, 5, 6}, 4, 3, 2, Pair(2, 1), Pair(1, 0), Pair(1, 2), 2, true},
      {{1, 2, 5, 5}, 3, 3, 3, 1, 1, 1, 1, false},
      {{2, 4, 3, 4}, 2, 1, 1, 1, 0, 1, 2, true},
  };
  uint64_t seed = 500;
  for (const Case& c : cases) {
    Tensor x = randn64(c.x, seed++).requires_grad_();
    Tensor w = randn64({c.out_channels, c.x[1] / c.groups, c.kh, c.kw}, seed++).requires_grad_();
    std::vector<Tensor> in{x, w};
    if (c.bias) in.push_back(randn64({c.out_channels}, seed++).requires_grad_());
    Conv2dParams p = conv_params(c.s, c.p, c.d, c.groups);
    gradcheck([&](const std::vector<Tensor>& t) { return conv2d(t[0], t[1], t.size() > 2 ? t[2] : Tensor(), p); }, in);
  }
}

// A gradient penalty through two convolutions and a max pooling (as WGAN-GP's): the gradients of a network's
// output with respect to its input and first weight, taken with create_graph, then differentiated again. The
// kernels' rules must give what the composites (differentiated through their views and products) give.
TEST(ConvOps, GradientPenaltyMatchesTheComposite) {
  struct Net {
    Pair s, p, d;
    int64_t groups;
  };
  uint64_t seed = 700;
  for (const Net& net : {Net{1, 1, 1, 1}, Net{2, 1, 1, 2}, Net{1, 2, 2, 4}, Net{{2, 1}, {0, 1}, {1, 2}, 1}}) {
    SCOPED_TRACE(::testing::Message() << "s " << net.s.h << "," << net.s.w << " p " << net.p.h << "," << net.p.w
                                      << " d " << net.d.h << "," << net.d.w << " g " << net.groups);
    const Tensor x0 = randn64({2, 4, 11, 10}, seed++), w10 = randn64({4, 4 / net.groups, 3, 3}, seed++) * 0.5;
    const Tensor b10 = randn64({4}, seed++), w20 = randn64({3, 4, 2, 2}, seed++) * 0.5;
    auto second = [&](bool composite) {
      std::optional<CompositeOnly> guard;
      if (composite) guard.emplace();
      Tensor x = x0.detach().requires_grad_(), w1 = w10.detach().requires_grad_();
      Tensor b1 = b10.detach().requires_grad_(), w2 = w20.detach().requires_grad_();
      Tensor h = tanh(nn::F::conv2d(x, w1, b1, net.s, net.p, net.d, net.groups));
      h = nn::F::max_pool2d(h, 2, Pair(1));
      Tensor y = nn::F::conv2d(h, w2, {}, 1, 0, 1, 1);
      Tensor f = (y * randn64(y.sizes(), 999)).sum();
      std::vector<Tensor> g = autograd::grad({f}, {x, w1}, {}, std::nullopt, /*create_graph=*/true);
      Tensor penalty = (g[0] * g[0]).sum() + (g[1] * randn64(g[1].sizes(), 998)).sum();
      // Once more with create_graph, through the rules' recording branches: the same values.
      const std::vector<Tensor> recorded =
          autograd::grad({penalty}, {x, w1, b1, w2}, {}, /*retain_graph=*/true, /*create_graph=*/true);
      penalty.backward();
      const std::vector<Tensor> out{x.grad(), w1.grad(), b1.grad(), w2.grad()};
      for (size_t i = 0; i < out.size(); ++i) {
        expect_close(recorded[i].detach().to_vector<double>(), out[i].to_vector<double>(), 1e-12);
      }
      return out;
    };
    const std::vector<Tensor> fast = second(false), ref = second(true);
    for (size_t i = 0; i < ref.size(); ++i) {
      SCOPED_TRACE(i);
      ASSERT_TRUE(fast[i].defined() && ref[i].defined());
      expect_close(fast[i].to_vector<double>(), ref[i].to_vector<double>(), 1e-10);
    }
  }
}

// The create_graph gradients of f(inputs) with respect to the first `n` inputs, flattened into one vector:
// what gradcheck differentiates again. (gradcheck also calls it with plain tensors, under no grad mode, to take
// its differences: they are made leaves that require grad here.)
Tensor flat_grads(const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& in,
                  size_t n) {
  EnableGradGuard grad_on;
  std::vector<Tensor> xs;
  for (const Tensor& t : in) xs.push_back(t.requires_grad() ? t : t.detach().requires_grad_());
  std::vector<Tensor> g = autograd::grad({f(xs)}, std::vector<Tensor>(xs.begin(), xs.begin() + n), {}, std::nullopt,
                                         /*create_graph=*/true);
  for (Tensor& gi : g) gi = gi.reshape({-1});
  return cat(g);
}

// Second derivatives of the kernel ops against central differences of their create_graph gradients.
TEST(ConvOps, SecondDerivativesGradcheck) {
  const Conv2dParams p = conv_params({2, 1}, 1, {1, 2}, 2);
  Tensor x = randn64({1, 4, 6, 7}, 80).requires_grad_(), w = randn64({4, 2, 3, 2}, 81).requires_grad_();
  Tensor b = randn64({4}, 82).requires_grad_();
  // conv2d: the gradients of sum(tanh(y)), a function of both inputs, in both inputs.
  gradcheck([&](const std::vector<Tensor>& in) {
    return flat_grads([&](const std::vector<Tensor>& t) { return tanh(conv2d(t[0], t[1], t[2], p)).sum(); }, in, 2);
  }, {x, w, b});
  // conv_transpose2d, the same way (its output has conv2d's input shape).
  const Tensor xt = randn64({1, 4, 3, 7}, 83).requires_grad_();  // conv2d's output shape for out_shape
  const Shape out_shape{1, 4, 6, 7};
  gradcheck([&](const std::vector<Tensor>& in) {
    return flat_grads(
        [&](const std::vector<Tensor>& t) { return tanh(conv_transpose2d(t[0], t[1], t[2], p, out_shape)).sum(); }, in,
        2);
  }, {xt, w, b});
  // Third order, through the rules' own create_graph branches: the gradient of |grad|^2, differentiated again.
  const Conv2dParams ps = conv_params(1, 1, 1, 2);
  Tensor xs = randn64({1, 2, 4, 4}, 85).requires_grad_(), ws = randn64({2, 1, 2, 2}, 86).requires_grad_();
  gradcheck([&](const std::vector<Tensor>& in) {
    return flat_grads([&](const std::vector<Tensor>& t) {
      Tensor g = flat_grads([&](const std::vector<Tensor>& u) { return tanh(conv2d(u[0], u[1], {}, ps)).sum(); }, t, 2);
      return (g * g).sum();
    }, in, 2);
  }, {xs, ws});
  // max pooling: its gradient in x is piecewise constant; the gradient of sum(pool(x)^2) is 2 pool(x) at the
  // maxima, whose derivative flows back through the scatter and the gather.
  Tensor xp = randn64({2, 3, 6, 6}, 84).requires_grad_();
  gradcheck([&](const std::vector<Tensor>& in) {
    return flat_grads(
        [&](const std::vector<Tensor>& t) { return max_pool2d_with_indices(t[0], pool_params(3, 2, 1, 1)).first.pow(2).sum(); },
        in, 1);
  }, {xp});
}

TEST(ConvOps, WeightGradientIndependentOfThreadCount) {
  const int before = get_num_threads();
  for (int64_t batch : {37, 1}) {  // many slices of the batch, and a single one
    SCOPED_TRACE(batch);
    Generator gen(77);
    Tensor x = randn({batch, 5, 11, 10}, kFloat32, &gen), w = randn({8, 5, 3, 3}, kFloat32, &gen);
    Conv2dParams p = conv_params(1, 1, 1, 1);
    Tensor g = randn(ops::conv2d(x, w, {}, p).sizes(), kFloat32, &gen);
    set_num_threads(1);
    std::vector<float> one = ops::conv2d_backward_weight(g, x, w.sizes(), p).to_vector<float>();
    set_num_threads(2);
    std::vector<float> two = ops::conv2d_backward_weight(g, x, w.sizes(), p).to_vector<float>();
    set_num_threads(before);
    ASSERT_EQ(one.size(), two.size());
    EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0);
  }
}

TEST(ConvOps, BadShapesNameTheOpAndShapes) {
  Tensor x = zeros({2, 3, 8, 8}), w = zeros({4, 3, 3, 3});
  Conv2dParams p = conv_params(1, 0, 1, 1);
  expect_error([&] { ops::conv2d(zeros({2, 4, 8, 8}), w, {}, p); }, {"conv2d", "(2, 4, 8, 8)", "3 channels"});
  expect_error([&] { ops::conv2d(x, zeros({4, 3, 3}), {}, p); }, {"conv2d", "weight", "(4, 3, 3)"});
  expect_error([&] { ops::conv2d(x, w, zeros({5}), p); }, {"conv2d", "bias", "(4)", "(5)"});
  expect_error([&] { ops::conv2d(zeros({2, 3, 2, 2}), w, {}, p); }, {"conv2d", "(2, 3, 2, 2)", "smaller"});
  expect_error([&] { ops::conv2d(x, w, {}, conv_params(0, 0, 1, 1)); }, {"conv2d", "stride (0, 0)"});
  expect_error([&] { ops::conv2d(x, zeros({4, 1, 3, 3}), {}, conv_params(1, 0, 1, 3)); },
               {"conv2d", "out_channels 4", "groups 3"});
  expect_error([&] { ops::conv2d(zeros({2, 3, 8, 8}, kInt64), zeros({4, 3, 3, 3}, kInt64), {}, p); },
               {"conv2d", "floating"});
  expect_error([&] { ops::conv2d_backward_input(zeros({2, 4, 5, 6}), w, x.sizes(), p); },
               {"conv2d_backward_input", "(2, 4, 5, 6)", "(2, 4, 6, 6)"});
  expect_error([&] { ops::conv2d_backward_weight(zeros({2, 4, 6, 7}), x, w.sizes(), p); },
               {"conv2d_backward_weight", "(2, 4, 6, 7)", "(2, 4, 6, 6)"});
  Pool2dParams q = pool_params(2, 2, 0, 1);
  expect_error([&] { ops::max_pool2d_with_indices(zeros({3, 8, 8}), q); }, {"max_pool2d", "(N, C, H, W)", "(3, 8, 8)"});
  expect_error([&] { ops::max_pool2d_with_indices(x, pool_params(2, 2, 2, 1)); },
               {"max_pool2d", "padding (2, 2)", "half the kernel (2, 2)"});
  expect_error([&] { ops::max_pool2d_backward(zeros({2, 3, 4, 4}), zeros({2, 3, 4, 4}), x.sizes(), q); },
               {"max_pool2d_backward", "int64"});
  expect_error([&] { ops::max_pool2d_backward(zeros({2, 3, 4, 3}), zeros({2, 3, 4, 3}, kInt64), x.sizes(), q); },
               {"max_pool2d_backward", "(2, 3, 4, 3)", "(2, 3, 4, 4)"});
  // nn::F keeps its own messages on the kernel path
  expect_error([&] { nn::F::conv2d(zeros({2, 3, 2, 2}), w); }, {"conv2d", "smaller than the kernel's extent"});
  expect_error([&] { nn::F::max_pool2d(x, 2, 2, 2); }, {"max_pool2d", "padding (2, 2) must be at most half"});
}

// ---- max pooling ----

// Values and indices by the definition: the first largest in-range element of each window, a NaN beating
// everything (the first NaN), -inf padding never chosen.
void pool_loops(const Tensor& x, const Pool2dParams& p, int64_t oh, int64_t ow, std::vector<double>* out,
                std::vector<int64_t>* idx) {
  const int64_t planes = x.size(0) * x.size(1), H = x.size(2), W = x.size(3);
  std::vector<double> xv = x.to_vector<double>();
  out->assign(planes * oh * ow, 0.0);
  idx->assign(planes * oh * ow, -1);
  for (int64_t q = 0; q < planes; ++q)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        double best = 0;
        int64_t at = -1;
        for (int64_t u = 0; u < p.kernel[0]; ++u)
          for (int64_t v = 0; v < p.kernel[1]; ++v) {
            int64_t y = i * p.stride[0] - p.padding[0] + u * p.dilation[0];
            int64_t z = j * p.stride[1] - p.padding[1] + v * p.dilation[1];
            if (y < 0 || y >= H || z < 0 || z >= W) continue;
            double val = xv[(q * H + y) * W + z];
            bool better = at < 0 || (std::isnan(val) ? !std::isnan(best) : val > best);
            if (better) best = val, at = y * W + z;
          }
        (*out)[(q * oh + i) * ow + j] = best;
        (*idx)[(q * oh + i) * ow + j] = at;
      }
}

TEST(MaxPoolOps, MatchesLoopsWithTiesNaNPaddingDilation) {
  struct PoolCase {
    Shape x;
    Pair k, s, p, d;
  };
  std::vector<PoolCase> cases = {
      {{2, 3, 6, 7}, 2, 2, 0, 1},           // plain
      {{1, 2, 7, 7}, 3, 1, 1, 1},           // overlapping windows, padding
      {{2, 2, 9, 8}, 3, 2, 1, 2},           // dilated
      {{5, 1, 5, 6}, {3, 2}, {1, 2}, {1, 1}, {1, 2}},
      // Unpadded windows take the vectorized path: overlapping, dilated, rectangular.
      {{2, 3, 7, 9}, 3, 1, 0, 1},
      {{2, 2, 9, 8}, 3, 2, 0, 2},
      {{3, 2, 5, 7}, {3, 2}, {1, 2}, {0, 0}, {1, 2}},
      // Padded: the whole windows vectorized, a border a window wide by the general loop (ResNet's stem pool).
      {{2, 2, 11, 12}, 3, 2, 1, 1},
      {{1, 3, 10, 9}, {3, 2}, {2, 1}, {1, 1}, {2, 1}},
      {{1, 2, 2, 2}, 3, 1, 1, 1},  // no whole window at all: every output by the general loop
  };
  uint64_t seed = 700;
  for (const PoolCase& c : cases) {
    Pool2dParams p = pool_params(c.k, c.s, c.p, c.d);
    int64_t oh = ops::conv_out_size(c.x[2], c.k.h, c.s.h, c.p.h, c.d.h);
    int64_t ow = ops::conv_out_size(c.x[3], c.k.w, c.s.w, c.p.w, c.d.w);
    // Values rounded to a coarse grid so that windows hold ties; two NaNs and a plane of -inf.
    std::vector<double> xv = randn64(c.x, seed++).to_vector<double>();
    for (double& v : xv) v = std::round(2 * v);
    xv[xv.size() / 3] = std::numeric_limits<double>::quiet_NaN();  // and a second one beside it: the first wins
    xv[xv.size() / 3 + 1] = std::numeric_limits<double>::quiet_NaN();
    int64_t plane = c.x[2] * c.x[3];
    if (c.x[0] * c.x[1] > 1)
      for (int64_t i = 0; i < plane; ++i) xv[xv.size() - 1 - i] = -std::numeric_limits<double>::infinity();
    Tensor x = tensor(xv, c.x, kFloat64);
    for (DType d : {kFloat64, kFloat32}) {
      SCOPED_TRACE(::testing::Message() << shape_str(c.x) << " k " << c.k.h << "," << c.k.w << " " << d);
      auto [y, idx] = ops::max_pool2d_with_indices(x.to(d), p);
      ASSERT_EQ(y.sizes(), (Shape{c.x[0], c.x[1], oh, ow}));
      std::vector<double> want;
      std::vector<int64_t> want_idx;
      pool_loops(x, p, oh, ow, &want, &want_idx);
      std::vector<double> got = y.to_vector<double>();
      EXPECT_EQ(idx.to_vector<int64_t>(), want_idx);
      for (size_t i = 0; i < want.size(); ++i) {
        if (std::isnan(want[i])) EXPECT_TRUE(std::isnan(got[i])) << i;
        else EXPECT_EQ(got[i], want[i]) << i;
      }
    }
    // Backward: grad_out scattered to the indices, overlaps summed (finite inputs only).
    Tensor xf = randn64(c.x, seed++);
    auto [yf, idf] = ops::max_pool2d_with_indices(xf, p);
    Tensor g = randn64(yf.sizes(), seed++);
    std::vector<double> want(xf.numel(), 0.0), gv = g.to_vector<double>();
    std::vector<int64_t> iv = idf.to_vector<int64_t>();
    for (size_t k = 0; k < gv.size(); ++k) want[(k / (oh * ow)) * plane + iv[k]] += gv[k];
    expect_close(ops::max_pool2d_backward(g, idf, c.x, p).to_vector<double>(), want, 1e-14);
    // ... and through autograd, against the composite and central differences
    Tensor xa = xf.detach().requires_grad_();
    (nn::F::max_pool2d(xa, c.k, c.s, c.p, c.d) * g).sum().backward();
    Tensor xb = xf.detach().requires_grad_();
    {
      CompositeOnly guard;
      (nn::F::max_pool2d(xb, c.k, c.s, c.p, c.d) * g).sum().backward();
    }
    expect_close(xa.grad().to_vector<double>(), xb.grad().to_vector<double>(), 1e-14);
    Tensor xs = randn64(c.x, seed++).requires_grad_();
    gradcheck([&](const std::vector<Tensor>& t) { return max_pool2d_with_indices(t[0], p).first; }, {xs});
  }
}

}  // namespace
}  // namespace kiln
