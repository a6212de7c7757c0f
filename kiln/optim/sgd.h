// SGD with momentum, dampening, Nesterov momentum, L2 weight decay and maximize, as torch.optim.SGD:
//   g = grad (negated when maximize) + weight_decay * p
//   buf = g on the first step, else momentum * buf + (1 - dampening) * g      (when momentum != 0)
//   g = g + momentum * buf (nesterov), or g = buf
//   p = p - lr * g
#pragma once

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool maximize = false;
};

class SGD : public Optimizer {
 public:
  // params: each a floating-point leaf tensor; options: the defaults of every group.
  //   optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  explicit SGD(std::vector<Tensor> params, SGDOptions options = {});
  using Optimizer::add_param_group;
  void add_param_group(std::vector<Tensor> params, const SGDOptions& options) {
    add_param_group(std::move(params), to_map(options));
  }
  void step() override;
  const char* name() const override { return "SGD"; }

  static std::map<std::string, double> to_map(const SGDOptions& o);
  static SGDOptions from_map(const std::map<std::string, double>& m);

 protected:
  std::unique_ptr<Optimizer> make_with(const ParamGroup& first) const override {
    return std::make_unique<SGD>(first.params, from_map(first.options));
  }
  void validate_options(const std::map<std::string, double>& options) const override;
};

}  // namespace kiln::optim
