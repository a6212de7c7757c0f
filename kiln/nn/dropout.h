// Dropout.
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

}  // namespace kiln::nn
