// Dropout and LayerNorm.
#pragma once

#include "kiln/nn/module.h"

namespace kiln::nn {

// Zeroes each element with probability p in training mode (scaling the rest by 1/(1-p)); identity in eval mode.
class DropoutImpl : public Module {
 public:
  explicit DropoutImpl(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override { return detail::concat("p=", p_); }

 private:
  double p_;
};
using Dropout = ModuleHolder<DropoutImpl>;

// Normalizes over the last dims (normalized_shape) to mean 0 and variance 1, then scales and shifts by the
// learned weight (ones) and bias (zeros) when elementwise_affine.
class LayerNormImpl : public Module {
 public:
  explicit LayerNormImpl(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Tensor weight, bias;

 private:
  Shape normalized_shape_;
  double eps_;
};
using LayerNorm = ModuleHolder<LayerNormImpl>;

}  // namespace kiln::nn
