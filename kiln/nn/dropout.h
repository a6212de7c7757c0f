// Dropout, the channel dropouts Dropout1d/2d/3d, and the alpha dropouts AlphaDropout and FeatureAlphaDropout.
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

// Zeroes whole channels with probability p in training mode (functional::dropout1d/2d/3d), identity in eval
// mode: Dropout1d takes (N, C, L) or (C, L), Dropout2d (N, C, H, W) or (C, H, W), Dropout3d (N, C, D, H, W) or
// (C, D, H, W).
class ChannelDropoutImpl : public Module {
 public:
  ChannelDropoutImpl(const char* type_name, int64_t spatial_dims, double p);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override { return detail::concat("p=", p_); }

 private:
  int64_t spatial_;
  double p_;
};
class Dropout1dImpl : public ChannelDropoutImpl {
 public:
  explicit Dropout1dImpl(double p = 0.5) : ChannelDropoutImpl("Dropout1d", 1, p) {}
};
class Dropout2dImpl : public ChannelDropoutImpl {
 public:
  explicit Dropout2dImpl(double p = 0.5) : ChannelDropoutImpl("Dropout2d", 2, p) {}
};
class Dropout3dImpl : public ChannelDropoutImpl {
 public:
  explicit Dropout3dImpl(double p = 0.5) : ChannelDropoutImpl("Dropout3d", 3, p) {}
};
using Dropout1d = ModuleHolder<Dropout1dImpl>;
using Dropout2d = ModuleHolder<Dropout2dImpl>;
using Dropout3d = ModuleHolder<Dropout3dImpl>;

// Alpha dropout (functional::alpha_dropout) in training mode, identity in eval mode: for SELU networks, it keeps
// a standardized input's mean and variance. FeatureAlphaDropout drops whole channels of (N, C, ...) inputs.
class AlphaDropoutImpl : public Module {
 public:
  explicit AlphaDropoutImpl(double p = 0.5, bool feature = false);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override { return detail::concat("p=", p_); }

 private:
  double p_;
  bool feature_;
};
class FeatureAlphaDropoutImpl : public AlphaDropoutImpl {
 public:
  explicit FeatureAlphaDropoutImpl(double p = 0.5) : AlphaDropoutImpl(p, true) {}
};
using AlphaDropout = ModuleHolder<AlphaDropoutImpl>;
using FeatureAlphaDropout = ModuleHolder<FeatureAlphaDropoutImpl>;

}  // namespace kiln::nn
