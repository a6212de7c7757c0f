#include "kiln/nn/dropout.h"

#include "kiln/nn/functional.h"

namespace kiln::nn {

DropoutImpl::DropoutImpl(double p) : Module("Dropout"), p_(p) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, "Dropout: p must be in [0, 1], got ", p);
}

Tensor DropoutImpl::forward(const Tensor& x) { return functional::dropout(x, p_, is_training()); }

ChannelDropoutImpl::ChannelDropoutImpl(const char* type_name, int64_t spatial_dims, double p)
    : Module(type_name), spatial_(spatial_dims), p_(p) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, type_name, ": p must be in [0, 1], got ", p);
}

Tensor ChannelDropoutImpl::forward(const Tensor& x) {
  switch (spatial_) {
    case 1:
      return functional::dropout1d(x, p_, is_training());
    case 2:
      return functional::dropout2d(x, p_, is_training());
    default:
      return functional::dropout3d(x, p_, is_training());
  }
}

AlphaDropoutImpl::AlphaDropoutImpl(double p, bool feature)
    : Module(feature ? "FeatureAlphaDropout" : "AlphaDropout"), p_(p), feature_(feature) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, type_name(), ": p must be in [0, 1], got ", p);
}

Tensor AlphaDropoutImpl::forward(const Tensor& x) {
  return feature_ ? functional::feature_alpha_dropout(x, p_, is_training())
                  : functional::alpha_dropout(x, p_, is_training());
}

}  // namespace kiln::nn
