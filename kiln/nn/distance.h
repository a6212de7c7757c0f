// Distance modules: CosineSimilarity and PairwiseDistance, called with two tensors (nn::functional's functions
// of the same names).
#pragma once

#include <string>

#include "kiln/nn/functional.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

class CosineSimilarityImpl : public Module {
 public:
  explicit CosineSimilarityImpl(int64_t dim = 1, double eps = 1e-8) : Module("CosineSimilarity"), dim_(dim), eps_(eps) {}
  Tensor forward(const Tensor& x1, const Tensor& x2) const { return functional::cosine_similarity(x1, x2, dim_, eps_); }
  std::string extra_repr() const override { return detail::concat("dim=", dim_, ", eps=", eps_); }

 private:
  int64_t dim_;
  double eps_;
};
using CosineSimilarity = ModuleHolder<CosineSimilarityImpl>;

class PairwiseDistanceImpl : public Module {
 public:
  explicit PairwiseDistanceImpl(double p = 2.0, double eps = 1e-6, bool keepdim = false)
      : Module("PairwiseDistance"), p_(p), eps_(eps), keepdim_(keepdim) {}
  Tensor forward(const Tensor& x1, const Tensor& x2) const {
    return functional::pairwise_distance(x1, x2, p_, eps_, keepdim_);
  }
  std::string extra_repr() const override {
    return detail::concat("p=", p_, ", eps=", eps_, ", keepdim=", keepdim_ ? "true" : "false");
  }

 private:
  double p_, eps_;
  bool keepdim_;
};
using PairwiseDistance = ModuleHolder<PairwiseDistanceImpl>;

}  // namespace kiln::nn
