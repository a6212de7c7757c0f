#include "kiln/nn/dropout.h"

#include "kiln/nn/functional.h"

namespace kiln::nn {

DropoutImpl::DropoutImpl(double p) : Module("Dropout"), p_(p) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, "Dropout: p must be in [0, 1], got ", p);
}

Tensor DropoutImpl::forward(const Tensor& x) { return functional::dropout(x, p_, is_training()); }

LayerNormImpl::LayerNormImpl(Shape normalized_shape, double eps, bool elementwise_affine)
    : Module("LayerNorm"), normalized_shape_(std::move(normalized_shape)), eps_(eps) {
  KILN_CHECK(!normalized_shape_.empty(), "LayerNorm: normalized_shape must not be empty");
  if (elementwise_affine) {
    weight = register_parameter("weight", ones(normalized_shape_));
    bias = register_parameter("bias", zeros(normalized_shape_));
  }
}

Tensor LayerNormImpl::forward(const Tensor& x) {
  return functional::layer_norm(x, normalized_shape_, weight, bias, eps_);
}

std::string LayerNormImpl::extra_repr() const {
  return detail::concat(shape_str(normalized_shape_), ", eps=", eps_, ", elementwise_affine=",
                        weight.defined() ? "true" : "false");
}

}  // namespace kiln::nn
