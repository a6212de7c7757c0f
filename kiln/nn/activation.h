// Activation modules: each calls its differentiable function.
#pragma once

#include <string>

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
#undef KILN_ACTIVATION

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

class SoftmaxImpl : public Module {
 public:
  explicit SoftmaxImpl(int64_t dim) : Module("Softmax"), dim_(dim) {}
  Tensor forward(const Tensor& x) override { return softmax(x, dim_); }
  std::string extra_repr() const override { return detail::concat("dim=", dim_); }

 private:
  int64_t dim_;
};
using Softmax = ModuleHolder<SoftmaxImpl>;

class LogSoftmaxImpl : public Module {
 public:
  explicit LogSoftmaxImpl(int64_t dim) : Module("LogSoftmax"), dim_(dim) {}
  Tensor forward(const Tensor& x) override { return log_softmax(x, dim_); }
  std::string extra_repr() const override { return detail::concat("dim=", dim_); }

 private:
  int64_t dim_;
};
using LogSoftmax = ModuleHolder<LogSoftmaxImpl>;

}  // namespace kiln::nn
