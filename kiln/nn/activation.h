// Activation modules: each calls its differentiable function.
#pragma once

#include <string>

#include "kiln/nn/functional.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

#define KILN_ACTIVATION(Name, expr)                              \
  class Name##Impl : public Module {                             \
   public:                                                       \
    Name##Impl() : Module(#Name) {}                              \
    Tensor forward(const Tensor& x) override { return expr; }    \
  };                                                             \
  using Name = ModuleHolder<Name##Impl>;
KILN_ACTIVATION(ReLU, relu(x))
KILN_ACTIVATION(SiLU, silu(x))
KILN_ACTIVATION(Tanh, tanh(x))
KILN_ACTIVATION(Sigmoid, sigmoid(x))
KILN_ACTIVATION(SELU, functional::selu(x))
KILN_ACTIVATION(Softsign, functional::softsign(x))
KILN_ACTIVATION(ReLU6, functional::relu6(x))
KILN_ACTIVATION(Hardsigmoid, functional::hardsigmoid(x))
KILN_ACTIVATION(Hardswish, functional::hardswish(x))
KILN_ACTIVATION(Mish, functional::mish(x))
KILN_ACTIVATION(LogSigmoid, functional::logsigmoid(x))
KILN_ACTIVATION(Tanhshrink, functional::tanhshrink(x))
#undef KILN_ACTIVATION

// The ones with one number, checked when built: ELU(alpha), CELU(alpha), Softshrink(lambd), Hardshrink(lambd).
#define KILN_ACTIVATION_1(Name, fn, param, default_value, valid)                                          \
  class Name##Impl : public Module {                                                                        \
   public:                                                                                                  \
    explicit Name##Impl(double param = default_value) : Module(#Name), param##_(param) {                    \
      KILN_CHECK(valid, #Name ": " #param " = ", param, ": expected " #valid);                              \
    }                                                                                                       \
    Tensor forward(const Tensor& x) override { return functional::fn(x, param##_); }                        \
    std::string extra_repr() const override { return detail::concat(#param "=", param##_); }               \
                                                                                                            \
   private:                                                                                                 \
    double param##_;                                                                                        \
  };                                                                                                        \
  using Name = ModuleHolder<Name##Impl>;
KILN_ACTIVATION_1(ELU, elu, alpha, 1.0, true)
KILN_ACTIVATION_1(CELU, celu, alpha, 1.0, alpha != 0)
KILN_ACTIVATION_1(Softshrink, softshrink, lambd, 0.5, lambd >= 0)
KILN_ACTIVATION_1(Hardshrink, hardshrink, lambd, 0.5, true)
#undef KILN_ACTIVATION_1

class HardtanhImpl : public Module {
 public:
  explicit HardtanhImpl(double min_val = -1.0, double max_val = 1.0)
      : Module("Hardtanh"), min_(min_val), max_(max_val) {
    KILN_CHECK(min_val <= max_val, "Hardtanh: min_val = ", min_val, " is above max_val = ", max_val);
  }
  Tensor forward(const Tensor& x) override { return functional::hardtanh(x, min_, max_); }
  std::string extra_repr() const override { return detail::concat("min_val=", min_, ", max_val=", max_); }

 private:
  double min_, max_;
};
using Hardtanh = ModuleHolder<HardtanhImpl>;

class ThresholdImpl : public Module {
 public:
  ThresholdImpl(double threshold, double value) : Module("Threshold"), threshold_(threshold), value_(value) {}
  Tensor forward(const Tensor& x) override { return functional::threshold(x, threshold_, value_); }
  std::string extra_repr() const override { return detail::concat("threshold=", threshold_, ", value=", value_); }

 private:
  double threshold_, value_;
};
using Threshold = ModuleHolder<ThresholdImpl>;

class SoftplusImpl : public Module {
 public:
  explicit SoftplusImpl(double beta = 1.0, double threshold = 20.0)
      : Module("Softplus"), beta_(beta), threshold_(threshold) {}
  Tensor forward(const Tensor& x) override { return softplus(x, beta_, threshold_); }
  std::string extra_repr() const override { return detail::concat("beta=", beta_, ", threshold=", threshold_); }

 private:
  double beta_, threshold_;
};
using Softplus = ModuleHolder<SoftplusImpl>;

// softmax over the channels of (N, C, H, W) or (C, H, W): dim -3.
class Softmax2dImpl : public Module {
 public:
  Softmax2dImpl() : Module("Softmax2d") {}
  Tensor forward(const Tensor& x) override {
    KILN_CHECK(x.dim() == 3 || x.dim() == 4, "Softmax2d: expected (N, C, H, W) or (C, H, W), got shape ",
               shape_str(x.sizes()));
    return softmax(x, -3);
  }
};
using Softmax2d = ModuleHolder<Softmax2dImpl>;

// Random negative slopes in [lower, upper] while training, their mean in eval mode.
class RReLUImpl : public Module {
 public:
  explicit RReLUImpl(double lower = 1.0 / 8, double upper = 1.0 / 3) : Module("RReLU"), lower_(lower), upper_(upper) {
    KILN_CHECK(lower <= upper, "RReLU: lower = ", lower, " is above upper = ", upper);
  }
  Tensor forward(const Tensor& x) override { return functional::rrelu(x, lower_, upper_, is_training()); }
  std::string extra_repr() const override { return detail::concat("lower=", lower_, ", upper=", upper_); }

 private:
  double lower_, upper_;
};
using RReLU = ModuleHolder<RReLUImpl>;

// A learned negative slope: one for all channels (num_parameters 1), or one per channel (x's dim 1). Its
// parameter is "weight", init-filled, as PyTorch's.
class PReLUImpl : public Module {
 public:
  explicit PReLUImpl(int64_t num_parameters = 1, double init = 0.25);
  Tensor forward(const Tensor& x) override { return functional::prelu(x, weight); }
  std::string extra_repr() const override { return detail::concat("num_parameters=", weight.numel()); }

  Tensor weight;
};
using PReLU = ModuleHolder<PReLUImpl>;

class LeakyReLUImpl : public Module {
 public:
  explicit LeakyReLUImpl(double negative_slope = 0.01) : Module("LeakyReLU"), slope_(negative_slope) {}
  Tensor forward(const Tensor& x) override { return leaky_relu(x, slope_); }
  std::string extra_repr() const override { return detail::concat("negative_slope=", slope_); }

 private:
  double slope_;
};
using LeakyReLU = ModuleHolder<LeakyReLUImpl>;

// approximate: "none" (exact, with erf) or "tanh".
class GELUImpl : public Module {
 public:
  explicit GELUImpl(std::string approximate = "none") : Module("GELU"), approximate_(std::move(approximate)) {}
  Tensor forward(const Tensor& x) override { return gelu(x, approximate_); }
  std::string extra_repr() const override { return "approximate=" + approximate_; }

 private:
  std::string approximate_;
};
using GELU = ModuleHolder<GELUImpl>;

// The ones along a dim: Softmax(dim), LogSoftmax(dim), Softmin(dim) (softmax(-x, dim)), GLU(dim = -1) (halves
// its input along dim).
#define KILN_DIM_ACTIVATION(Name, fn, ...)                                                        \
  class Name##Impl : public Module {                                                              \
   public:                                                                                        \
    explicit Name##Impl(int64_t dim __VA_OPT__(= __VA_ARGS__)) : Module(#Name), dim_(dim) {}      \
    Tensor forward(const Tensor& x) override { return fn(x, dim_); }                              \
    std::string extra_repr() const override { return detail::concat("dim=", dim_); }             \
                                                                                                  \
   private:                                                                                       \
    int64_t dim_;                                                                                 \
  };                                                                                              \
  using Name = ModuleHolder<Name##Impl>;
KILN_DIM_ACTIVATION(Softmax, softmax)
KILN_DIM_ACTIVATION(LogSoftmax, log_softmax)
KILN_DIM_ACTIVATION(Softmin, functional::softmin)
KILN_DIM_ACTIVATION(GLU, functional::glu, -1)
#undef KILN_DIM_ACTIVATION

}  // namespace kiln::nn
