// Averaged SGD, as torch.optim.ASGD (Polyak & Juditsky 1992). Step t, per parameter:
//   g = grad (negated when maximize) + weight_decay * p
//   p = p (1 - lambd eta) - eta g
//   ax = p if mu == 1, else ax + mu (p - ax)            (the average, from step t0 on)
//   eta = lr / (1 + lambd lr t)^alpha;  mu = 1 / max(1, t - t0)
// eta starts at lr and mu at 1. The average is the optimizer state "ax" (state(p).tensors.at("ax")): copy it
// into the model to evaluate the averaged weights.
#pragma once

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct ASGDOptions {
  double lr = 1e-2;
  double lambd = 1e-4;  // the decay term
  double alpha = 0.75;  // the power of eta's decay
  double t0 = 1e6;      // the step at which averaging starts
  double weight_decay = 0.0;
  bool maximize = false;
};

class ASGD : public Optimizer {
 public:
  explicit ASGD(std::vector<Tensor> params, ASGDOptions options = {});
  using Optimizer::add_param_group;
  void add_param_group(std::vector<Tensor> params, const ASGDOptions& options) {
    add_param_group(std::move(params), to_map(options));
  }
  void step() override;
  const char* name() const override { return "ASGD"; }

  static std::map<std::string, double> to_map(const ASGDOptions& o);
  static ASGDOptions from_map(const std::map<std::string, double>& m);

 protected:
  std::unique_ptr<Optimizer> make_with(const ParamGroup& first) const override {
    return std::make_unique<ASGD>(first.params, from_map(first.options));
  }
  void validate_options(const std::map<std::string, double>& options) const override;
};

}  // namespace kiln::optim
