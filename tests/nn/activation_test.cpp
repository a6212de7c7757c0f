// The activations of activation.cpp against float64 formulas written here with <cmath>, element by element, over
// values that reach every branch and sit on the kinks; their gradients by central differences away from the
// kinks; the modules against their functions. The parity suite compares them with LibTorch's as well.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "tensor/test_util.h"

namespace kiln::test {
namespace {

namespace F = nn::functional;

struct Activation {
  std::string name;
  std::function<Tensor(const Tensor&)> ours;
  std::function<double(double)> formula;
};

double act_clamp(double x, double lo, double hi) { return std::min(std::max(x, lo), hi); }

std::vector<Activation> activations() {
  const double selu_alpha = 1.6732632423543772848170429916717, selu_scale = 1.0507009873554804934193349852946;
  return {
      {"elu", [](const Tensor& x) { return F::elu(x, 1.3); }, [](double x) { return x > 0 ? x : 1.3 * std::expm1(x); }},
      {"selu", [](const Tensor& x) { return F::selu(x); },
       [=](double x) { return selu_scale * (x > 0 ? x : selu_alpha * std::expm1(x)); }},
      {"celu", [](const Tensor& x) { return F::celu(x, 0.8); },
       [](double x) { return x > 0 ? x : 0.8 * std::expm1(x / 0.8); }},
      {"softsign", [](const Tensor& x) { return F::softsign(x); }, [](double x) { return x / (1 + std::fabs(x)); }},
      {"hardtanh", [](const Tensor& x) { return F::hardtanh(x, -0.6, 1.4); },
       [](double x) { return act_clamp(x, -0.6, 1.4); }},
      {"relu6", [](const Tensor& x) { return F::relu6(x); }, [](double x) { return act_clamp(x, 0, 6); }},
      {"hardsigmoid", [](const Tensor& x) { return F::hardsigmoid(x); },
       [](double x) { return act_clamp(x + 3, 0, 6) / 6; }},
      {"hardswish", [](const Tensor& x) { return F::hardswish(x); },
       [](double x) { return x * act_clamp(x + 3, 0, 6) / 6; }},
      {"mish", [](const Tensor& x) { return F::mish(x); }, [](double x) { return x * std::tanh(std::log1p(std::exp(x))); }},
      {"logsigmoid", [](const Tensor& x) { return F::logsigmoid(x); },
       [](double x) { return x >= 0 ? -std::log1p(std::exp(-x)) : x - std::log1p(std::exp(x)); }},
      {"tanhshrink", [](const Tensor& x) { return F::tanhshrink(x); }, [](double x) { return x - std::tanh(x); }},
      {"softshrink", [](const Tensor& x) { return F::softshrink(x, 0.5); },
       [](double x) { return x > 0.5 ? x - 0.5 : x < -0.5 ? x + 0.5 : 0.0; }},
      {"hardshrink", [](const Tensor& x) { return F::hardshrink(x, 0.5); },
       [](double x) { return std::fabs(x) > 0.5 ? x : 0.0; }},
      {"softplus", [](const Tensor& x) { return softplus(x, 2.0, 3.0); },
       [](double x) { return 2 * x > 3 ? x : (std::max(2 * x, 0.0) + std::log1p(std::exp(-std::fabs(2 * x)))) / 2; }},
      // 0.25: a threshold float32 holds exactly, so the float32 pass takes the same branch at the kink.
      {"threshold", [](const Tensor& x) { return F::threshold(x, 0.25, -2.0); }, [](double x) { return x > 0.25 ? x : -2.0; }},
  };
}

// Every branch, the kinks themselves (-3, -0.6, -0.5, 0, 0.25, 0.5, 1.4, 3, 6), and values whose exponentials
// overflow.
const std::vector<double> kActPoints = {-800, -30, -7.5, -3.0, -2.9, -1.2, -0.7, -0.6, -0.5, -0.3, -1e-3, 0.0, 1e-3,
                                        0.25, 0.3, 0.5, 0.7, 1.0, 1.4, 2.9, 3.0, 3.1, 6.0, 6.5, 25, 80, 800};

TEST(Activations, MatchTheirFormulasInFloat64AndFloat32) {
  const Tensor x64 = tensor(kActPoints, {}, kFloat64);
  for (const Activation& a : activations()) {
    for (DType dtype : {kFloat64, kFloat32}) {
      const Tensor y = a.ours(x64.to(dtype));
      ASSERT_EQ(y.dtype(), dtype) << a.name;
      const std::vector<double> got = values(y);
      for (size_t i = 0; i < kActPoints.size(); ++i) {
        // The float32 formula starts from the input rounded to float32.
        const double x = dtype == kFloat64 ? kActPoints[i] : static_cast<double>(static_cast<float>(kActPoints[i]));
        const double want = a.formula(x);
        const double tol = (dtype == kFloat64 ? 1e-14 : 2e-6) * std::max(1.0, std::fabs(want));
        EXPECT_NEAR(got[i], want, tol) << a.name << " (" << dtype << ") at " << x;
      }
    }
  }
}

TEST(Activations, GradientsMatchCentralDifferences) {
  // Away from every kink by at least 0.1.
  Tensor x = tensor({-3.7, -2.2, -1.1, -0.35, 0.15, 0.85, 1.6, 2.45, 4.1, 7.3}, kFloat64).view({2, 5});
  x.requires_grad_();
  for (const Activation& a : activations()) {
    const auto r = autograd::gradcheck([&](const std::vector<Tensor>& in) { return a.ours(in[0]); }, {x});
    EXPECT_TRUE(r.ok) << a.name << ": " << r.report;
  }
}

TEST(Activations, NoNaNGradientsWhereTheUnpickedBranchOverflows) {
  for (const Activation& a : activations()) {
    Tensor x = tensor({-800.0, 800.0}, kFloat64);  // e^800 is inf in float64
    x.requires_grad_();
    a.ours(x).sum().backward();
    for (double g : values(x.grad())) EXPECT_FALSE(std::isnan(g)) << a.name;
  }
}

// The activations with fused kernels: their one-pass gradient and the differentiable form create_graph
// switches to, both against PyTorch's derivative rules written here, on every branch and on the kinks, where
// the rules say which side the gradient takes. Parameters float32 holds exactly, so that a float32 input on a
// kink is on it in both.
struct FusedActivation {
  std::string name;
  std::function<Tensor(const Tensor&)> ours;
  std::function<double(double)> derivative;
};

std::vector<FusedActivation> fused_activations() {
  const double selu_alpha = 1.6732632423543772848170429916717, selu_scale = 1.0507009873554804934193349852946;
  auto sigmoid = [](double x) { return 1 / (1 + std::exp(-x)); };
  return {
      {"elu", [](const Tensor& x) { return F::elu(x, 1.25); }, [](double x) { return x > 0 ? 1 : 1.25 * std::exp(x); }},
      {"selu", [](const Tensor& x) { return F::selu(x); },
       [=](double x) { return selu_scale * (x > 0 ? 1 : selu_alpha * std::exp(x)); }},
      {"celu", [](const Tensor& x) { return F::celu(x, 0.75); }, [](double x) { return x > 0 ? 1 : std::exp(x / 0.75); }},
      {"hardtanh", [](const Tensor& x) { return F::hardtanh(x, -0.5, 1.5); },
       [](double x) { return x <= -0.5 || x >= 1.5 ? 0.0 : 1.0; }},
      {"relu6", [](const Tensor& x) { return F::relu6(x); }, [](double x) { return x <= 0 || x >= 6 ? 0.0 : 1.0; }},
      {"hardsigmoid", [](const Tensor& x) { return F::hardsigmoid(x); },
       [](double x) { return x > -3 && x < 3 ? 1.0 / 6 : 0.0; }},
      {"hardswish", [](const Tensor& x) { return F::hardswish(x); },
       [](double x) { return x < -3 ? 0.0 : x <= 3 ? x / 3 + 0.5 : 1.0; }},
      {"mish", [](const Tensor& x) { return F::mish(x); },
       [=](double x) {
         const double t = std::tanh(std::log1p(std::exp(x)));
         return t + x * sigmoid(x) * (1 - t * t);
       }},
      // beta 2, threshold 3: the switch to x at 1.5, one of the points.
      {"softplus", [](const Tensor& x) { return softplus(x, 2.0, 3.0); },
       [=](double x) { return 2 * x > 3 ? 1.0 : sigmoid(2 * x); }},
      {"logsigmoid", [](const Tensor& x) { return F::logsigmoid(x); }, [=](double x) { return sigmoid(-x); }},
      {"softshrink", [](const Tensor& x) { return F::softshrink(x, 0.5); },
       [](double x) { return x >= -0.5 && x <= 0.5 ? 0.0 : 1.0; }},
      {"hardshrink", [](const Tensor& x) { return F::hardshrink(x, 0.5); },
       [](double x) { return x >= -0.5 && x <= 0.5 ? 0.0 : 1.0; }},
      // PyTorch's threshold_backward: 0 where x <= threshold, so a NaN input passes its gradient on.
      {"threshold", [](const Tensor& x) { return F::threshold(x, 0.25, -2.0); },
       [](double x) { return x <= 0.25 ? 0.0 : 1.0; }},
  };
}

TEST(Activations, FusedGradientsFollowPyTorchsRulesInBothForms) {
  std::vector<double> points = kActPoints;
  points.push_back(1.5);
  points.push_back(kNan);  // fails every comparison: the rules say which branch that leaves
  for (const FusedActivation& a : fused_activations()) {
    for (DType dtype : {kFloat64, kFloat32}) {
      for (bool create_graph : {false, true}) {
        Tensor x = tensor(points, {}, kFloat64).to(dtype);
        x.requires_grad_();
        const Tensor g = autograd::grad({a.ours(x).sum()}, {x}, {}, std::nullopt, create_graph).at(0);
        const std::vector<double> xs = values(x.detach()), got = values(g);
        const std::vector<double> ys = values(a.ours(x.detach()));
        EXPECT_TRUE(std::isnan(ys.back())) << a.name << " of NaN (" << dtype << ")";
        for (size_t i = 0; i < xs.size(); ++i) {
          const double want = a.derivative(xs[i]);
          if (std::isnan(want)) {
            EXPECT_TRUE(std::isnan(got[i])) << a.name << " (" << dtype << (create_graph ? ", create_graph" : "")
                                            << ") at " << xs[i] << ": got " << got[i];
            continue;
          }
          const double tol = (dtype == kFloat64 ? 1e-14 : 2e-6) * std::max(1.0, std::fabs(want));
          EXPECT_NEAR(got[i], want, tol) << a.name << " (" << dtype << (create_graph ? ", create_graph" : "")
                                         << ") at " << xs[i];
        }
      }
    }
  }
}

TEST(Activations, FusedOnesComputeHalfPrecisionInFloat) {
  const Tensor x32 = tensor({-4.0, -2.5, -0.75, -0.125, 0.0, 0.375, 1.0, 2.75, 5.0}, kFloat32);
  for (const FusedActivation& a : fused_activations()) {
    for (DType dtype : {kFloat16, kBFloat16}) {
      Tensor x = x32.to(dtype);
      x.requires_grad_();
      const Tensor y = a.ours(x);
      ASSERT_EQ(y.dtype(), dtype) << a.name;
      y.sum().backward();
      // The reference: the same rounded inputs in float32, its results rounded to the dtype once.
      Tensor xf = x.detach().to(kFloat32);
      xf.requires_grad_();
      const Tensor yf = a.ours(xf);
      yf.sum().backward();
      EXPECT_TRUE(equal(y.detach(), yf.detach().to(dtype))) << a.name << " (" << dtype << ")";
      EXPECT_TRUE(equal(x.grad(), xf.grad().to(dtype))) << a.name << " gradient (" << dtype << ")";
    }
  }
}

TEST(Activations, FusedBackwardChecksItsInputs) {
  const Tensor x = ones({2, 3});
  expect_error([&] { ops::activation_backward(ones({3, 2}), x, kiln::Activation::mish); },
               {"mish_backward: the gradient has shape (3, 2), the input (2, 3)"});
  expect_error([&] { F::hardtanh(x, 1.0, -1.0); }, {"hardtanh: min_val = 1 is above max_val = -1"});
  expect_error([&] { softplus(x, 0.0); }, {"softplus: beta must be nonzero"});
  expect_error([&] { F::softshrink(x, -0.5); }, {"softshrink: lambd = -0.5: expected >= 0"});
  // Integer inputs compute in the default float dtype.
  EXPECT_EQ(F::hardswish(arange(-4, 5)).dtype(), default_dtype());
}

// threshold of NaN is NaN (PyTorch compares x <= threshold, which NaN fails). Integers keep their dtype, and
// PyTorch casts threshold and value to it, truncating, before comparing exactly; one the dtype cannot hold, a
// NaN or a bool input is an error there too.
TEST(Activations, ThresholdKeepsNaNAndIntegerDtypes) {
  const std::vector<double> y = values(F::threshold(tensor({kNan, 0.25, 0.5}, kFloat32), 0.25, -2.0));
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], -2.0);
  EXPECT_EQ(y[2], 0.5);
  const Tensor yi = F::threshold(tensor(std::vector<int64_t>{-3, 1, 2, 7}), 1, 5);
  EXPECT_EQ(yi.dtype(), kInt64);
  EXPECT_EQ(values(yi), (std::vector<double>{5, 5, 2, 7}));
  // -1.5 truncates to -1, so -1 is at the threshold; 2^24 + 1 is above 2^24 (as float32 both are 2^24).
  EXPECT_EQ(values(F::threshold(tensor(std::vector<int64_t>{-1, -2, 0}), -1.5, 5)), (std::vector<double>{5, 5, 0}));
  EXPECT_EQ(values(F::threshold(tensor(std::vector<int64_t>{16777217, 16777216}), 16777216, 0)),
            (std::vector<double>{16777217, 0}));
  const Tensor bytes = tensor(std::vector<int64_t>{0, 3, 200}).to(kUInt8);
  EXPECT_EQ(values(F::threshold(bytes, 3.9, 255)), (std::vector<double>{255, 255, 200}));
  EXPECT_EQ(F::threshold(bytes, 3, 1).dtype(), kUInt8);
  expect_error([&] { F::threshold(bytes, -1, 0); }, {"threshold: threshold -1 cannot be converted", "uint8"});
  expect_error([&] { F::threshold(bytes, 1, 256); }, {"threshold: value 256 cannot be converted"});
  expect_error([&] { F::threshold(tensor(std::vector<int64_t>{1}), 0, kNan); }, {"value nan cannot be converted"});
  expect_error([&] { F::threshold(tensor(std::vector<int64_t>{1}), 9.3e18, 0); }, {"cannot be converted"});
  expect_error([&] { F::threshold(tensor(std::vector<int64_t>{1}).to(kBool), 0, 1); }, {"not defined for bool"});
}

// On half and bfloat16, threshold and hardshrink compare against their parameter cast to the input's dtype, as
// PyTorch's kernels do: 0.3002 is 0.30029296875 in half and 0.30078125 in bfloat16, so an input equal to that
// is at the threshold, inside the shrink, though it is above 0.3002. The gradient's pieces, with and without
// create_graph, are the value's. (LibTorch 1.13's bfloat16 CPU kernels cast so too; it has none for half.)
TEST(Activations, HalfAndBFloat16ReadParametersAsPyTorchInBothGradientForms) {
  struct Case {
    DType dtype;
    std::vector<double> x;  // the cast parameter, its negation, the number above it and the one below
  };
  for (const Case& c : {Case{kFloat16, {0.30029296875, -0.30029296875, 0.300537109375, 0.300048828125}},
                        Case{kBFloat16, {0.30078125, -0.30078125, 0.302734375, 0.298828125}}}) {
    const Tensor x = tensor(c.x, {}, kFloat64).to(c.dtype);
    ASSERT_EQ(values(x), c.x) << c.dtype << ": the inputs are not exact";
    EXPECT_EQ(values(F::threshold(x, 0.3002, 5.0)), (std::vector<double>{5, 5, c.x[2], 5})) << c.dtype;
    EXPECT_EQ(values(F::hardshrink(x, 0.3002)), (std::vector<double>{0, 0, c.x[2], 0})) << c.dtype;
    for (bool create_graph : {false, true}) {
      for (const char* name : {"threshold", "hardshrink"}) {
        Tensor leaf = x.clone();
        leaf.requires_grad_();
        const Tensor y = std::string(name) == "threshold" ? F::threshold(leaf, 0.3002, 5.0)
                                                          : F::hardshrink(leaf, 0.3002);
        // inf where the gradient is 0: it stays 0 in both forms, as in the one-pass kernel.
        const Tensor g = tensor({kInf, kInf, 2.0, kInf}, kFloat64).to(c.dtype);
        const Tensor dx = autograd::grad({y}, {leaf}, {g}, std::nullopt, create_graph).at(0);
        EXPECT_EQ(values(dx), (std::vector<double>{0, 0, 2, 0}))
            << name << " (" << c.dtype << (create_graph ? ", create_graph" : "") << ")";
      }
    }
    // hardtanh reads its bounds in float, unrounded, as PyTorch's gradient does: the inputs at the rounded 0.3002
    // are outside, gradient 0. softshrink's gradient casts lambd, as PyTorch's shrink_backward does (its value
    // reads it in float): those inputs are inside, gradient 0, though the value there is x - 0.3002. Both forms.
    for (const char* name : {"softshrink", "hardtanh"}) {
      std::vector<double> forms[2];
      for (bool create_graph : {false, true}) {
        Tensor leaf = x.clone();
        leaf.requires_grad_();
        const Tensor y = std::string(name) == "softshrink" ? F::softshrink(leaf, 0.3002)
                                                           : F::hardtanh(leaf, -0.3002, 0.3002);
        forms[create_graph] = values(autograd::grad({y.sum()}, {leaf}, {}, std::nullopt, create_graph).at(0));
      }
      const std::vector<double> want = std::string(name) == "softshrink" ? std::vector<double>{0, 0, 1, 0}
                                                                         : std::vector<double>{0, 0, 0, 1};
      if (std::string(name) == "softshrink") {
        EXPECT_GT(values(F::softshrink(x, 0.3002))[0], 0.0) << "softshrink's value reads lambd unrounded";
      }
      EXPECT_EQ(forms[0], want) << name << " (" << c.dtype << ")";
      EXPECT_EQ(forms[1], want) << name << " (" << c.dtype << ", create_graph)";
    }
  }
  // Past half's range, the parameter is an error, as in PyTorch; bfloat16 holds it.
  const Tensor h = ones({2}, kFloat16);
  expect_error([&] { F::threshold(h, 1e6, 0.0); }, {"threshold: threshold = 1e+06 cannot be converted", "float16"});
  expect_error([&] { F::threshold(h, 0.0, -7e4); }, {"threshold: value = -70000 cannot be converted"});
  expect_error([&] { F::hardshrink(h, 1e5); }, {"hardshrink: lambd = 100000 cannot be converted"});
  EXPECT_EQ(values(F::threshold(ones({2}, kBFloat16), 1e6, 0.0)), (std::vector<double>{0, 0}));
  EXPECT_EQ(values(F::hardshrink(h, kInf)), (std::vector<double>{0, 0}));
}

TEST(Activations, GluSoftminAndPrelu) {
  std::mt19937 rng(21);
  const Tensor x = random_tensor({3, 4}, kFloat64, rng);
  const std::vector<double> v = values(x);
  auto sig = [](double z) { return 1 / (1 + std::exp(-z)); };
  expect_tensor_near(F::glu(x, 1), {v[0] * sig(v[2]), v[1] * sig(v[3]), v[4] * sig(v[6]), v[5] * sig(v[7]),
                                    v[8] * sig(v[10]), v[9] * sig(v[11])}, {3, 2}, 1e-14, 1e-14);
  expect_error([&] { F::glu(x, 0); }, {"glu: dim 0", "even size", "got 3"});
  std::vector<double> softmin(12);
  for (int r = 0; r < 3; ++r) {
    double total = 0;
    for (int c = 0; c < 4; ++c) total += std::exp(-v[static_cast<size_t>(r * 4 + c)]);
    for (int c = 0; c < 4; ++c) softmin[static_cast<size_t>(r * 4 + c)] = std::exp(-v[static_cast<size_t>(r * 4 + c)]) / total;
  }
  expect_tensor_near(F::softmin(x, 1), softmin, {3, 4}, 1e-14, 1e-14);

  // One slope per channel (dim 1), and one for all.
  const Tensor images = random_tensor({2, 3, 2}, kFloat64, rng);
  const Tensor w = tensor({0.1, -0.4, 2.0}, kFloat64);
  const std::vector<double> iv = values(images);
  std::vector<double> want(iv.size());
  for (size_t i = 0; i < iv.size(); ++i) want[i] = iv[i] > 0 ? iv[i] : values(w)[i / 2 % 3] * iv[i];
  expect_tensor_near(F::prelu(images, w), want, {2, 3, 2}, 1e-14, 1e-14);
  for (size_t i = 0; i < iv.size(); ++i) want[i] = iv[i] > 0 ? iv[i] : 0.25 * iv[i];
  nn::PReLU shared;
  EXPECT_EQ(shared->named_parameters().at(0).first, "weight");
  expect_tensor_near(shared(images.to(kFloat32)), want, {2, 3, 2}, 1e-6, 1e-6);
  expect_error([&] { F::prelu(images, tensor({0.1, 0.2})); }, {"prelu: the weight has 2 elements", "channels (dim 1 of (2, 3, 2)): 3"});

  // Gradients reach the input and the slopes.
  Tensor xi = images.clone().requires_grad_(), wi = w.clone().requires_grad_();
  const auto r = autograd::gradcheck([](const std::vector<Tensor>& in) { return F::prelu(in[0], in[1]); }, {xi, wi});
  EXPECT_TRUE(r.ok) << r.report;
  Tensor xg = x.clone().requires_grad_();
  EXPECT_TRUE(autograd::gradcheck([](const std::vector<Tensor>& in) { return F::glu(in[0], 1); }, {xg}).ok);
}

TEST(Activations, ModulesCallTheirFunctionsAndCheckTheirNumbers) {
  std::mt19937 rng(22);
  const Tensor x = random_tensor({2, 6}, kFloat32, rng, Layout::Contiguous, -5, 5);
  auto same = [&](nn::Module& m, const Tensor& want, const std::string& repr) {
    EXPECT_TRUE(equal(m(x), want)) << m.type_name();
    EXPECT_EQ(m.extra_repr(), repr) << m.type_name();
  };
  same(*nn::ELU(0.5), F::elu(x, 0.5), "alpha=0.5");
  same(*nn::CELU(2.0), F::celu(x, 2.0), "alpha=2");
  same(*nn::SELU(), F::selu(x), "");
  same(*nn::Softsign(), F::softsign(x), "");
  same(*nn::Hardtanh(-2.0, 3.0), F::hardtanh(x, -2, 3), "min_val=-2, max_val=3");
  same(*nn::ReLU6(), F::relu6(x), "");
  same(*nn::Hardsigmoid(), F::hardsigmoid(x), "");
  same(*nn::Hardswish(), F::hardswish(x), "");
  same(*nn::Mish(), F::mish(x), "");
  same(*nn::LogSigmoid(), F::logsigmoid(x), "");
  same(*nn::Tanhshrink(), F::tanhshrink(x), "");
  same(*nn::Softshrink(1.5), F::softshrink(x, 1.5), "lambd=1.5");
  same(*nn::Hardshrink(), F::hardshrink(x, 0.5), "lambd=0.5");
  same(*nn::Threshold(0.1, 20.0), F::threshold(x, 0.1, 20), "threshold=0.1, value=20");
  same(*nn::Softplus(2.0, 10.0), softplus(x, 2.0, 10.0), "beta=2, threshold=10");
  same(*nn::GLU(), F::glu(x, -1), "dim=-1");
  same(*nn::Softmin(1), F::softmin(x, 1), "dim=1");
  nn::PReLU per_channel(6, 0.1);
  same(*per_channel, F::prelu(x, full({6}, 0.1)), "num_parameters=6");
  expect_error([] { nn::CELU(0.0); }, {"CELU: alpha = 0: expected alpha != 0"});
  expect_error([] { nn::Softshrink(-1.0); }, {"Softshrink: lambd = -1: expected lambd >= 0"});
  expect_error([] { nn::Hardtanh(2.0, 1.0); }, {"Hardtanh: min_val = 2 is above max_val = 1"});
  expect_error([] { nn::PReLU(0); }, {"PReLU: num_parameters = 0"});
}

TEST(Activations, RReLUDrawsSlopesWhileTrainingAndUsesTheirMeanOtherwise) {
  std::mt19937 rng(23);
  const Tensor x0 = random_tensor({4, 50}, kFloat64, rng);
  const std::vector<double> xv = values(x0);
  std::vector<double> want(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) want[i] = xv[i] > 0 ? xv[i] : 0.2 * xv[i];
  expect_tensor_near(F::rrelu(x0, 0.1, 0.3), want, {4, 50}, 1e-15, 1e-15);

  Tensor x = x0.clone().requires_grad_();
  manual_seed(4);
  const Tensor y = F::rrelu(x, 0.1, 0.3, /*training=*/true);
  y.sum().backward();
  const std::vector<double> yv = values(y.detach()), gv = values(x.grad());
  double lo = 1, hi = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    if (xv[i] > 0) {
      EXPECT_EQ(yv[i], xv[i]);
      EXPECT_EQ(gv[i], 1.0);
      continue;
    }
    const double slope = yv[i] / xv[i];
    EXPECT_GE(slope, 0.1);
    EXPECT_LE(slope, 0.3);
    EXPECT_NEAR(gv[i], slope, 1e-12) << "the gradient is the slope drawn";
    lo = std::min(lo, slope), hi = std::max(hi, slope);
  }
  EXPECT_GT(hi - lo, 0.1) << "one slope per element, spread over [lower, upper]";
  manual_seed(4);
  EXPECT_TRUE(equal(F::rrelu(x0, 0.1, 0.3, true), y.detach())) << "the same seed draws the same slopes";

  nn::RReLU m(0.1, 0.3);
  m->eval();
  EXPECT_TRUE(equal(m(x0), F::rrelu(x0, 0.1, 0.3)));
  EXPECT_EQ(m->extra_repr(), "lower=0.1, upper=0.3");
  expect_error([] { nn::RReLU(0.5, 0.2); }, {"RReLU: lower = 0.5 is above upper = 0.2"});

  nn::Softmax2d s;
  const Tensor img = random_tensor({2, 3, 4, 5}, kFloat64, rng);
  EXPECT_TRUE(equal(s(img), softmax(img, 1)));
  EXPECT_TRUE(equal(s(img[0]), softmax(img[0], 0)));
  expect_error([&] { s(img[0][0]); }, {"Softmax2d: expected (N, C, H, W) or (C, H, W), got shape (4, 5)"});
}

}  // namespace
}  // namespace kiln::test
