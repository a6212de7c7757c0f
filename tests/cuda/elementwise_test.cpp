// The element-wise CUDA kernels against the CPU kernels: every unary, binary and ternary op, every dtype the
// CPU accepts, contiguous and strided layouts, broadcasting, sizes that hit the vectorized path and its tail,
// and copies between dtypes, layouts and devices. Fresh random inputs each run (the seed is in the messages).
#include <functional>
#include <random>

#include "cuda/cuda_test_util.h"

namespace kiln {
namespace {

using test::CudaTest;
using test::expect_matches_cpu;

using test::fresh_seed;

struct Unary {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
};

std::vector<Unary> unary_ops() {
  return {
      {"neg", [](const Tensor& x) { return neg(x); }},
      {"abs", [](const Tensor& x) { return abs(x); }},
      {"sign", [](const Tensor& x) { return sign(x); }},
      {"exp", [](const Tensor& x) { return exp(x); }},
      {"log", [](const Tensor& x) { return log(x); }},
      {"log1p", [](const Tensor& x) { return log1p(x); }},
      {"expm1", [](const Tensor& x) { return expm1(x); }},
      {"erf", [](const Tensor& x) { return erf(x); }},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }},
      {"log2", [](const Tensor& x) { return log2(x); }},
      {"log10", [](const Tensor& x) { return log10(x); }},
      {"reciprocal", [](const Tensor& x) { return reciprocal(x); }},
      {"tan", [](const Tensor& x) { return tan(x); }},
      {"asin", [](const Tensor& x) { return asin(x); }},
      {"acos", [](const Tensor& x) { return acos(x); }},
      {"atan", [](const Tensor& x) { return atan(x); }},
      {"sinh", [](const Tensor& x) { return sinh(x); }},
      {"cosh", [](const Tensor& x) { return cosh(x); }},
      {"asinh", [](const Tensor& x) { return asinh(x); }},
      {"acosh", [](const Tensor& x) { return acosh(x); }},
      {"atanh", [](const Tensor& x) { return atanh(x); }},
      {"floor", [](const Tensor& x) { return floor(x); }},
      {"ceil", [](const Tensor& x) { return ceil(x); }},
      {"round", [](const Tensor& x) { return round(x); }},
      {"trunc", [](const Tensor& x) { return trunc(x); }},
      {"sin", [](const Tensor& x) { return sin(x); }},
      {"cos", [](const Tensor& x) { return cos(x); }},
      {"tanh", [](const Tensor& x) { return tanh(x); }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }},
      {"relu", [](const Tensor& x) { return relu(x); }},
      {"gelu", [](const Tensor& x) { return gelu(x); }},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); }},
      {"silu", [](const Tensor& x) { return silu(x); }},
      {"softplus", [](const Tensor& x) { return softplus(x, 2.0, 4.0); }},
      {"leaky_relu", [](const Tensor& x) { return leaky_relu(x, 0.1); }},
      {"elu", [](const Tensor& x) { return activation(x, Activation::elu, {1.3, 1.05, 0.8}); }},
      {"hardtanh", [](const Tensor& x) { return activation(x, Activation::hardtanh, {-0.6, 1.4}); }},
      {"hardsigmoid", [](const Tensor& x) { return activation(x, Activation::hardsigmoid); }},
      {"hardswish", [](const Tensor& x) { return activation(x, Activation::hardswish); }},
      {"mish", [](const Tensor& x) { return activation(x, Activation::mish); }},
      {"logsigmoid", [](const Tensor& x) { return activation(x, Activation::logsigmoid); }},
      {"softshrink", [](const Tensor& x) { return activation(x, Activation::softshrink, {0.5}); }},
      {"hardshrink", [](const Tensor& x) { return activation(x, Activation::hardshrink, {0.5}); }},
      {"threshold", [](const Tensor& x) { return activation(x, Activation::threshold, {0.25, -2.0}); }},
      {"pow_2.5", [](const Tensor& x) { return pow(x, 2.5); }},
      {"pow_3", [](const Tensor& x) { return pow(x, 3); }},
      {"clamp", [](const Tensor& x) { return clamp(x, -1.0, 0.5); }},
      {"logical_not", [](const Tensor& x) { return logical_not(x); }},
      {"isnan", [](const Tensor& x) { return isnan(x); }},
      {"isinf", [](const Tensor& x) { return isinf(x); }},
  };
}

// Runs op on the CPU and on the GPU; both refuse the inputs, or both give the same answer.
template <typename Op>
void compare(const std::string& context, Op&& op, const std::vector<Tensor>& cpu_in) {
  std::vector<Tensor> gpu_in;
  for (const Tensor& t : cpu_in) gpu_in.push_back(test::same_layout_on_gpu(t));
  Tensor want;
  try {
    want = op(cpu_in);
  } catch (const Error&) {
    EXPECT_THROW(op(gpu_in), Error) << context << ": the CPU refuses these inputs, the GPU should too";
    return;
  }
  expect_matches_cpu(op(gpu_in), want, context);
}

TEST_F(CudaTest, UnaryOpsMatchTheCpuOnEveryDtypeAndLayout) {
  uint32_t seed = fresh_seed();
  std::mt19937 rng(seed);
  for (const Unary& u : unary_ops()) {
    for (DType d : test::kAllDTypes) {
      for (test::Layout layout : test::kLayouts) {
        Tensor x = test::random_tensor({13, 9}, d, rng, layout);
        compare(std::string(u.name) + " " + dtype_name(d) + " " + test::layout_name(layout) + " seed " + std::to_string(seed),
                [&](const std::vector<Tensor>& in) { return u.op(in[0]); }, {x});
      }
    }
  }
}

TEST_F(CudaTest, SpecialValuesPassThroughLikeOnTheCpu) {
  Tensor x = tensor({0.0, -0.0, 1.0, -1.0, INFINITY, -INFINITY, NAN, 1e-30, -88.0, 89.0, 1e5});
  for (DType d : test::kFloatDTypes) {
    for (const Unary& u : unary_ops())
      compare(std::string(u.name) + " special " + dtype_name(d), [&](const std::vector<Tensor>& in) { return u.op(in[0]); },
              {x.to(d)});
  }
}

struct Binary {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
};

std::vector<Binary> binary_ops() {
  return {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }},
      {"add_alpha", [](const Tensor& a, const Tensor& b) { return add(a, b, 2); }},
      {"sub", [](const Tensor& a, const Tensor& b) { return a - b; }},
      {"sub_alpha", [](const Tensor& a, const Tensor& b) { return sub(a, b, 3); }},
      {"mul", [](const Tensor& a, const Tensor& b) { return a * b; }},
      {"div", [](const Tensor& a, const Tensor& b) { return a / b; }},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); }},
      {"atan2", [](const Tensor& a, const Tensor& b) { return atan2(a, b); }},
      {"fmod", [](const Tensor& a, const Tensor& b) { return fmod(a, b); }},
      {"remainder", [](const Tensor& a, const Tensor& b) { return remainder(a, b); }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }},
      {"lt", [](const Tensor& a, const Tensor& b) { return a < b; }},
      {"le", [](const Tensor& a, const Tensor& b) { return a <= b; }},
      {"gt", [](const Tensor& a, const Tensor& b) { return a > b; }},
      {"ge", [](const Tensor& a, const Tensor& b) { return a >= b; }},
      {"eq", [](const Tensor& a, const Tensor& b) { return a == b; }},
      {"ne", [](const Tensor& a, const Tensor& b) { return a != b; }},
      {"logical_and", [](const Tensor& a, const Tensor& b) { return logical_and(a, b); }},
      {"logical_or", [](const Tensor& a, const Tensor& b) { return logical_or(a, b); }},
      {"logical_xor", [](const Tensor& a, const Tensor& b) { return logical_xor(a, b); }},
  };
}

TEST_F(CudaTest, BinaryOpsMatchTheCpuWithLayoutsAndBroadcasting) {
  uint32_t seed = fresh_seed();
  std::mt19937 rng(seed);
  // (a's shape, b's shape): equal, a scalar, a row, a column, both broadcast.
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{11, 6}, {11, 6}}, {{11, 6}, {}}, {{}, {11, 6}}, {{11, 6}, {6}}, {{11, 6}, {11, 1}}, {{11, 1}, {1, 6}}};
  for (const Binary& b : binary_ops()) {
    for (DType d : test::kAllDTypes) {
      for (const auto& [sa, sb] : shapes) {
        for (test::Layout layout : {test::Layout::Contiguous, test::Layout::Transposed, test::Layout::Offset}) {
          Tensor x = test::random_tensor(sa, d, rng, layout);
          Tensor y = test::random_tensor(sb, d, rng, test::Layout::Strided);
          compare(std::string(b.name) + " " + dtype_name(d) + " " + shape_str(sa) + " " + shape_str(sb) + " " +
                      test::layout_name(layout) + " seed " + std::to_string(seed),
                  [&](const std::vector<Tensor>& in) { return b.op(in[0], in[1]); }, {x, y});
        }
      }
    }
  }
}

TEST_F(CudaTest, GeluBackwardMatchesTheCpu) {
  uint32_t seed = fresh_seed();
  std::mt19937 rng(seed);
  for (DType d : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    for (const char* form : {"none", "tanh"}) {
      Tensor g = test::random_tensor({11, 6}, d, rng, test::Layout::Transposed), x = test::random_tensor({11, 6}, d, rng);
      compare(std::string("gelu_backward ") + form + " " + dtype_name(d) + " seed " + std::to_string(seed),
              [form](const std::vector<Tensor>& in) { return ops::gelu_backward(in[0], in[1], form); }, {g, x});
    }
  }
}

TEST_F(CudaTest, ActivationBackwardMatchesTheCpu) {
  uint32_t seed = fresh_seed();
  std::mt19937 rng(seed);
  const std::pair<Activation, ActivationParams> kinds[] = {{Activation::elu, {1.3, 1.05, 0.8}},
                                                           {Activation::hardtanh, {-0.6, 1.4}},
                                                           {Activation::hardsigmoid, {}},
                                                           {Activation::hardswish, {}},
                                                           {Activation::mish, {}},
                                                           {Activation::softplus, {2.0, 4.0}},
                                                           {Activation::logsigmoid, {}},
                                                           {Activation::softshrink, {0.5}},
                                                           {Activation::hardshrink, {0.5}},
                                                           {Activation::threshold, {0.25, -2.0}}};
  for (DType d : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    for (const auto& [kind, params] : kinds) {
      // Inputs over [-5, 5): every branch of the hard ones.
      Tensor g = test::random_tensor({11, 6}, d, rng, test::Layout::Transposed);
      Tensor x = test::random_tensor({11, 6}, d, rng, test::Layout::Contiguous, -5, 5);
      compare(std::string(activation_name(kind)) + "_backward " + dtype_name(d) + " seed " + std::to_string(seed),
              [kind, params](const std::vector<Tensor>& in) { return ops::activation_backward(in[0], in[1], kind, params); },
              {g, x});
    }
  }
}

TEST_F(CudaTest, ReluBackwardMatchesTheCpu) {
  uint32_t seed = fresh_seed();
  std::mt19937 rng(seed);
  for (DType d : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    for (test::Layout layout : {test::Layout::Contiguous, test::Layout::Transposed, test::Layout::Offset}) {
      Tensor g = test::random_tensor({11, 6}, d, rng, layout), y = test::random_tensor({11, 6}, d, rng);
      compare(std::string("relu_backward ") + dtype_name(d) + " " + test::layout_name(layout) + " seed " +
                  std::to_string(seed),
              [](const std::vector<Tensor>& in) { return ops::relu_backward(in[0], in[1]); }, {g, y});
    }
  }
}

TEST_F(CudaTest, MixedDtypesPromoteAsOnTheCpu) {
  std::mt19937 rng(fresh_seed());
  for (DType a : test::kAllDTypes) {
    for (DType b : test::kAllDTypes) {
      Tensor x = test::random_tensor({4, 5}, a, rng);
      Tensor y = test::random_tensor({5}, b, rng);
      compare(std::string("mul ") + dtype_name(a) + " " + dtype_name(b),
              [&](const std::vector<Tensor>& in) { return in[0] * in[1]; }, {x, y});
    }
  }
}

TEST_F(CudaTest, TernaryOpsMatchTheCpu) {
  uint32_t seed = fresh_seed();
  std::mt19937 rng(seed);
  for (DType d : test::kAllDTypes) {
    Tensor c = test::random_tensor({7, 8}, kBool, rng, test::Layout::Transposed);
    Tensor a = test::random_tensor({7, 8}, d, rng);
    Tensor b = test::random_tensor({8}, d, rng);
    compare(std::string("where ") + dtype_name(d), [&](const std::vector<Tensor>& in) { return where(in[0], in[1], in[2]); },
            {c, a, b});
  }
  for (DType d : test::kFloatDTypes) {
    Tensor s = test::random_tensor({7, 8}, d, rng, test::Layout::Strided);
    Tensor e = test::random_tensor({7, 8}, d, rng);
    Tensor w = test::random_tensor({7, 1}, d, rng, test::Layout::Contiguous, 0, 1);
    compare(std::string("lerp ") + dtype_name(d), [&](const std::vector<Tensor>& in) { return lerp(in[0], in[1], in[2]); },
            {s, e, w});
  }
}

// Sizes around the vector width and large ones, aligned and not (a view starting one element in cannot use
// the vector loads): the vectorized path, its tail and the scalar path must agree.
TEST_F(CudaTest, VectorizedPathAndTailCoverEveryElement) {
  uint32_t seed = fresh_seed();
  std::mt19937 rng(seed);
  for (int64_t n : {1, 3, 4, 5, 7, 8, 1023, 4099, (1 << 20) + 3}) {
    for (DType d : {kFloat32, kFloat16, kFloat64, kUInt8}) {
      Tensor a = test::random_tensor({n + 1}, d, rng);
      Tensor b = test::random_tensor({n + 1}, d, rng);
      for (int64_t start : {0, 1}) {
        std::string ctx = "n " + std::to_string(n) + " " + dtype_name(d) + " start " + std::to_string(start) +
                          " seed " + std::to_string(seed);
        compare("add " + ctx, [&](const std::vector<Tensor>& in) { return in[0] + in[1]; },
                {a.narrow(0, start, n), b.narrow(0, 1 - start, n)});
        compare("neg " + ctx, [&](const std::vector<Tensor>& in) { return neg(in[0]); }, {a.narrow(0, start, n)});
      }
    }
  }
}

TEST_F(CudaTest, InPlaceOpsWriteThroughViews) {
  std::mt19937 rng(fresh_seed());
  Tensor x = test::random_tensor({6, 8}, kFloat32, rng);
  Tensor g = x.to(Device::cuda());
  Tensor y = test::random_tensor({8, 3}, kFloat32, rng);
  x.narrow(1, 2, 3).mul_(y.narrow(0, 1, 6));
  g.narrow(1, 2, 3).mul_(y.narrow(0, 1, 6).to(Device::cuda()));
  expect_matches_cpu(g, x, "mul_ into a column block");
  x.t().add_(1.5);
  g.t().add_(1.5);
  expect_matches_cpu(g, x, "add_ through a transpose");
}

TEST_F(CudaTest, CopiesConvertBetweenEveryDtypePairAndLayout) {
  std::mt19937 rng(fresh_seed());
  for (DType from : test::kAllDTypes) {
    for (DType to : test::kAllDTypes) {
      Tensor x = test::random_tensor({5, 6}, from, rng, test::Layout::Transposed);
      std::string ctx = std::string(dtype_name(from)) + " -> " + dtype_name(to);
      Tensor g = test::same_layout_on_gpu(x);
      expect_matches_cpu(g.to(to), x.to(to), "on the device " + ctx);
      // into a strided destination on the device, and across devices in both directions
      Tensor dst = zeros({5, 12}, TensorOptions(to).device(Device::cuda())).slice(1, 0, std::nullopt, 2);
      dst.copy_(x);
      expect_matches_cpu(dst, x.to(to), "host -> strided device " + ctx);
      Tensor host = zeros({6, 5}, to).t();
      host.copy_(g);
      EXPECT_EQ(test::values(host), test::values(x.to(to))) << "strided device -> strided host " << ctx;
    }
  }
}

TEST_F(CudaTest, FillAndArange) {
  for (DType d : test::kAllDTypes) {
    Tensor g = zeros({4, 10}, TensorOptions(d).device(Device::cuda()));
    g.slice(1, 1, std::nullopt, 3).fill_(1);
    Tensor c = zeros({4, 10}, d);
    c.slice(1, 1, std::nullopt, 3).fill_(1);
    expect_matches_cpu(g, c, std::string("strided fill ") + dtype_name(d));
  }
  for (DType d : {kInt32, kInt64, kFloat32, kFloat64, kFloat16, kBFloat16}) {
    expect_matches_cpu(arange(3, 1000, 7, TensorOptions(d).device(Device::cuda())), arange(3, 1000, 7, d),
                       std::string("arange ") + dtype_name(d));
  }
  for (DType d : test::kFloatDTypes)
    expect_matches_cpu(arange(0.5, 100.0, 0.25, TensorOptions(d).device(Device::cuda())), arange(0.5, 100.0, 0.25, d),
                       std::string("fractional arange ") + dtype_name(d));
}

// The profiler names CUDA kernels apart from the CPU's, and with synchronize_cuda a kernel's event lasts until
// the device has run it. The add below moves 3 GiB; no device does that faster than 10 TB/s (the H200's
// memory peaks at 4.8), so its event takes at least 0.3 ms, where the launch alone takes microseconds.
TEST_F(CudaTest, ProfilerRecordsCudaKernelsAndCanWaitForThem) {
  const int64_t n = int64_t{1} << 28;  // 1 GiB of float32 per operand
  Tensor a = ones({n}, TensorOptions(kFloat32).device(Device::cuda()));
  Tensor b = ones({n}, TensorOptions(kFloat32).device(Device::cuda()));
  cuda::synchronize();
  profiler::Options o;
  o.synchronize_cuda = true;
  profiler::Profiler prof(o);
  Tensor c = a + b;
  prof.stop();
  const auto rows = prof.summary();
  const profiler::Summary* add = nullptr;
  for (const auto& r : rows)
    if (r.name == "add (cuda)") add = &r;
  ASSERT_NE(add, nullptr) << prof.table();
  EXPECT_EQ(add->calls, 1);
  const double bytes = 3.0 * 4.0 * static_cast<double>(n);
  EXPECT_GT(static_cast<double>(add->total_ns), bytes / 10e12 * 1e9) << prof.table();
  EXPECT_EQ(c.min().item<double>(), 2.0);
  EXPECT_EQ(c.max().item<double>(), 2.0);
}

}  // namespace
}  // namespace kiln
