#include "kiln/nn/linear.h"

#include <cmath>

#include "kiln/nn/functional.h"
#include "kiln/nn/init.h"

namespace kiln::nn {

LinearImpl::LinearImpl(int64_t in_features, int64_t out_features, bool with_bias)
    : Module("Linear"), in_features_(in_features), out_features_(out_features) {
  KILN_CHECK(in_features > 0 && out_features > 0, "Linear: in_features and out_features must be positive, got ",
             in_features, " and ", out_features);
  weight = register_parameter("weight", empty({out_features, in_features}));
  if (with_bias) bias = register_parameter("bias", empty({out_features}));
  reset_parameters();
}

void LinearImpl::reset_parameters() {
  // kaiming_uniform with a = sqrt(5) is PyTorch's default for Linear: bound 1/sqrt(in_features).
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    double bound = 1.0 / std::sqrt(static_cast<double>(in_features_));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor LinearImpl::forward(const Tensor& x) { return functional::linear(x, weight, bias); }

std::string LinearImpl::extra_repr() const {
  return detail::concat("in_features=", in_features_, ", out_features=", out_features_,
                        ", bias=", bias.defined() ? "true" : "false");
}

EmbeddingImpl::EmbeddingImpl(int64_t num_embeddings, int64_t dim) : Module("Embedding") {
  KILN_CHECK(num_embeddings > 0 && dim > 0, "Embedding: sizes must be positive, got ", num_embeddings, " and ", dim);
  weight = register_parameter("weight", empty({num_embeddings, dim}));
  init::normal_(weight);
}

Tensor EmbeddingImpl::forward(const Tensor& indices) { return functional::embedding(indices, weight); }

std::string EmbeddingImpl::extra_repr() const { return detail::concat(weight.size(0), ", ", weight.size(1)); }

std::string FlattenImpl::extra_repr() const { return detail::concat("start_dim=", start_dim_, ", end_dim=", end_dim_); }
std::string UnflattenImpl::extra_repr() const {
  return detail::concat("dim=", dim_, ", unflattened_size=", shape_str(sizes_));
}

}  // namespace kiln::nn
